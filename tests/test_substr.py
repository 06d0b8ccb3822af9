"""Exact-substring deduplication against an oracle written from the
definition (brute force, and a suffix array on larger real text)."""
from __future__ import annotations

import json
import os
import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import forkcli
from gpu_dedup.substr import exact_substrings
from realtext import paragraphs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _units(text: str, unit: str):
    """(start, end) code points of each unit: runs of non-space, or each char."""
    if unit == "char":
        return [(i, i + 1) for i in range(len(text))]
    out, start = [], None
    for i, c in enumerate(text):
        if c.isspace():
            if start is not None:
                out.append((start, i))
                start = None
        elif start is None:
            start = i
    if start is not None:
        out.append((start, len(text)))
    return out


def oracle(texts, unit, L, keep, norm=None):
    """Spans ``(doc, start, end, first_doc)`` and the cut texts, by brute force."""
    units = [_units(t, unit) for t in texts]
    keys = [[(norm or (lambda s: s))(t[a:b]) for a, b in us] for t, us in zip(texts, units)]
    first, count = {}, {}
    for d, k in enumerate(keys):
        for i in range(len(k) - L + 1):
            w = tuple(k[i:i + L])
            first.setdefault(w, d)
            count[w] = count.get(w, 0) + 1
    seen = set()
    spans, cut = [], []
    for d, (t, us, k) in enumerate(zip(texts, units, keys)):
        flag = [False] * len(us)
        win_first = {}
        for i in range(len(k) - L + 1):
            w = tuple(k[i:i + L])
            removed = (w in seen) if keep == "first" else count[w] > 1
            seen.add(w)
            if removed:
                for j in range(i, i + L):
                    flag[j] = True
                win_first[i] = first[w]
        pieces, pos, i = [], 0, 0
        while i < len(us):
            if flag[i]:
                j = i
                while j + 1 < len(us) and flag[j + 1]:
                    j += 1
                spans.append((d, us[i][0], us[j][1], win_first[i]))
                pieces.append(t[pos:us[i][0]])
                pos = us[j][1]
                i = j + 1
            else:
                i += 1
        pieces.append(t[pos:])
        cut.append("".join(pieces))
    return spans, cut


def _check(texts, unit, L, keep, normalize=(), norm=None):
    got = exact_substrings(pa.array(texts, pa.large_string()), unit, L, keep, normalize)
    spans, cut = oracle(texts, unit, L, keep, norm)
    assert list(zip(got.span_doc.tolist(), got.span_start.tolist(), got.span_end.tolist(),
                    got.span_first_doc.tolist())) == spans
    assert got.texts.to_pylist() == cut
    assert got.units.tolist() == [len(_units(t, unit)) for t in texts]
    return got


def _random_texts(rng, n=12):
    vocab = ["a", "bb", "c", "dd", "é", "日本", "x"]
    base = [" ".join(rng.choice(vocab) for _ in range(rng.randint(0, 14))) for _ in range(4)]
    texts = []
    for _ in range(n):
        parts = [rng.choice(base) if rng.random() < 0.6 else
                 " ".join(rng.choice(vocab) for _ in range(rng.randint(0, 6)))
                 for _ in range(rng.randint(0, 4))]
        texts.append(rng.choice(["  ", " ", "\t", "\n "]).join(parts))
    return texts


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("unit", ["word", "char"])
@pytest.mark.parametrize("keep", ["first", "none"])
def test_equals_the_definition_on_random_texts(seed, unit, keep):
    rng = random.Random(seed)
    texts = _random_texts(rng)
    longest = max(len(_units(t, unit)) for t in texts)
    for L in sorted({1, 2, 3, 5, 8, longest, longest + 1}):
        _check(texts, unit, L, keep)


def test_units_compare_after_normalization_offsets_stay_original():
    texts = ["The Quick brown FOX jumps", "a the quick BROWN fox b"]
    got = _check(texts, "word", 3, "first", ("lower",), str.lower)
    assert got.texts.to_pylist() == ["The Quick brown FOX jumps", "a  b"]


def _paragraphs(limit):
    return list(paragraphs()[:limit])


@pytest.mark.parametrize("unit,L", [("word", 10), ("word", 50), ("char", 200)])
@pytest.mark.parametrize("keep", ["first", "none"])
def test_equals_the_definition_on_real_text(unit, L, keep):
    got = _check(_paragraphs(400), unit, L, keep)
    assert got.span_doc.size > 10           # licence boilerplate repeats


def _suffix_array_removed(texts, L, keep):
    """Removed words by a suffix array over the word ids (documents apart)."""
    from pydivsufsort import divsufsort, kasai
    words = [t.split() for t in texts]
    vocab = {w: i for i, w in enumerate(sorted({w for ws in words for w in ws}))}
    seq, doc, pos = [], [], []
    sep = len(vocab)
    for d, ws in enumerate(words):
        for i, w in enumerate(ws):
            seq.append(vocab[w])
            doc.append(d)
            pos.append(i)
        seq.append(sep + d)                  # a separator no window can cross
        doc.append(d)
        pos.append(-1)
    s = np.array(seq, dtype=np.int64)
    sa = divsufsort(s)
    lcp = kasai(s, sa)                       # lcp[i]: suffixes sa[i] and sa[i + 1]
    removed = [np.zeros(len(ws), bool) for ws in words]
    i = 0
    n = len(sa)
    while i < n:
        j = i
        while j + 1 < n and lcp[j] >= L:
            j += 1
        group = [int(x) for x in sa[i:j + 1]]
        starts = [g for g in group if pos[g] >= 0 and pos[g] + L <= len(words[doc[g]])]
        if len(starts) > 1:
            first = min(starts)
            for g in starts:
                if keep == "none" or g != first:
                    removed[doc[g]][pos[g]:pos[g] + L] = True
        i = j + 1
    return removed


@pytest.mark.parametrize("keep", ["first", "none"])
def test_equals_a_suffix_array_on_more_real_text(keep):
    pytest.importorskip("pydivsufsort", reason="the suffix-array oracle needs pydivsufsort")
    texts = _paragraphs(3000)
    L = 20
    got = exact_substrings(pa.array(texts, pa.large_string()), "word", L, keep)
    want = _suffix_array_removed(texts, L, keep)
    assert got.removed_units.tolist() == [int(r.sum()) for r in want]
    assert sum(int(r.sum()) for r in want) > 1000


def test_a_sentence_planted_in_ten_thousand_documents_is_cut_from_all_but_the_first():
    # otherwise unrelated: no word of a document appears in another (a shared
    # vocabulary would repeat, by chance, the word next to the sentence)
    rng = np.random.default_rng(0)
    sentence = " ".join(f"planted{i}" for i in range(61))
    texts, where = [], []
    for d in range(10000):
        words = [f"d{d}w{j}" for j in rng.integers(0, 300, rng.integers(80, 200)).tolist()]
        k = int(rng.integers(0, len(words)))
        before = " ".join(words[:k])
        text = (before + " " if before else "") + sentence + " " + " ".join(words[k:])
        texts.append(text)
        start = len(before) + (1 if before else 0)
        where.append((start, start + len(sentence)))
    got = exact_substrings(pa.array(texts, pa.large_string()), "word", 50, "first")
    assert got.span_doc.tolist() == list(range(1, 10000))
    assert list(zip(got.span_start.tolist(), got.span_end.tolist())) == where[1:]
    assert set(got.span_first_doc.tolist()) == {0}
    assert got.removed_units.tolist() == [0] + [61] * 9999
    assert got.repeated[0][1] == 10000


def _cli(*args):
    return forkcli.run(args, text=True, cwd=ROOT)


def test_the_command_writes_spans_documents_data_and_reports(tmp_path):
    shared = " ".join(f"s{i}" for i in range(8))
    texts = [f"one {shared} two", f"three {shared}", "short", f"{shared}"]
    src = tmp_path / "in.jsonl"
    with open(src, "w") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": f"d{i}", "text": t, "meta": i}) + "\n")
    out = tmp_path / "out"
    p = _cli("substr", str(src), "-o", str(out), "--min-length", "5", "--min-doc-length", "1",
             "--json")
    assert p.returncode == 0, p.stderr
    spans = pq.read_table(out / "spans.parquet").to_pylist()
    assert [(s["id"], s["first_id"]) for s in spans] == [("d1", "d0"), ("d3", "d0")]
    docs = pq.read_table(out / "documents.parquet").to_pylist()
    assert [d["dropped"] for d in docs] == [False, False, False, True]
    lines = [json.loads(x) for x in open(out / "data" / "in.jsonl")]
    assert [x["id"] for x in lines] == ["d0", "d1", "d2"]
    assert lines[1] == {"id": "d1", "text": "three ", "meta": 1}
    rep = json.loads(open(out / "report.json").read())
    assert rep["documents"]["dropped"] == 1 and rep["repeated"][0]["occurrences"] == 3
    assert "Most repeated" in open(out / "report.html").read()
    # the same through Parquet
    pq.write_table(pa.table({"id": [f"d{i}" for i in range(4)], "text": texts}),
                   tmp_path / "in.parquet")
    p = _cli("substr", str(tmp_path / "in.parquet"), "-o", str(tmp_path / "pout"),
             "--min-length", "5", "-q")
    assert p.returncode == 0, p.stderr
    t = pq.read_table(tmp_path / "pout" / "data" / "in.parquet")
    assert t.column("text").to_pylist() == [lines[0]["text"], "three ", "short", ""]


def test_bad_options_and_an_empty_corpus(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"id": "a", "text": "x y"}) + "\n")
    for args, what in ((["--min-length", "0"], "--min-length"), (["--unit", "byte"], "--unit"),
                       (["--keep", "last"], "--keep")):
        p = _cli("substr", str(src), "-o", str(tmp_path / "o"), *args)
        assert p.returncode == 2 and what in p.stderr, p.stderr
        assert not (tmp_path / "o").exists()
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    p = _cli("substr", str(empty), "-o", str(tmp_path / "e"), "-q")
    assert p.returncode == 0, p.stderr
    assert pq.read_table(tmp_path / "e" / "spans.parquet").num_rows == 0
    assert pq.read_table(tmp_path / "e" / "documents.parquet").num_rows == 0


def test_near_duplicates_then_repeated_passages(tmp_path):
    # the usual pipeline: `run`, then `substr` over its data/
    shared = " ".join(f"boiler{i}" for i in range(60))
    texts = [f"story {i} " + " ".join(f"t{i}x{j}" for j in range(40)) + " " + shared
             for i in range(20)]
    texts.append(texts[0])                       # an exact copy: `run` removes it
    src = tmp_path / "in.jsonl"
    with open(src, "w") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": f"d{i}", "text": t}) + "\n")
    assert _cli("run", str(src), "-o", str(tmp_path / "r"), "-q").returncode == 0
    p = _cli("substr", str(tmp_path / "r" / "data"), "-o", str(tmp_path / "s"), "-q")
    assert p.returncode == 0, p.stderr
    docs = pq.read_table(tmp_path / "s" / "documents.parquet").to_pylist()
    assert len(docs) == 20
    assert [d["removed_units"] for d in docs] == [0] + [60] * 19
