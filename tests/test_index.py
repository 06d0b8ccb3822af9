"""The persistent index: incremental runs equal whole runs, adds are atomic
and idempotent, contamination is found, bad indexes are refused."""
from __future__ import annotations

import glob
import json
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import forkcli
from gpu_dedup import Config, index as ix, pipeline
from gpu_dedup.index.store import Index
from realtext import paragraphs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _paragraphs(limit: int) -> list[str]:
    return [p for p in paragraphs() if len(p) > 40][:limit]


def _write(path: str, texts, prefix: str) -> str:
    with open(path, "w", encoding="utf-8") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": f"{prefix}{i}", "text": t}) + "\n")
    return path


def _clusters(out: str):
    return pq.read_table(os.path.join(out, "clusters.parquet"))


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    """Real licence paragraphs, shuffled and split in two: A then B."""
    d = tmp_path_factory.mktemp("split")
    paras = _paragraphs(6000)
    random.Random(0).shuffle(paras)
    n = len(paras) // 2
    a = _write(str(d / "A.jsonl"), paras[:n], "a")
    b = _write(str(d / "B.jsonl"), paras[n:], "b")
    ab = str(d / "AB.jsonl")
    with open(ab, "w") as f:
        f.write(open(a).read() + open(b).read())
    return d, a, b, ab


@pytest.mark.parametrize("bucket_limit", [32, 2])
def test_incremental_equals_whole_on_real_text(split, tmp_path, bucket_limit):
    d, a, b, ab = split
    cfg = Config(bucket_limit=bucket_limit)
    ix.build([a], str(tmp_path / "idx"), cfg)
    rb = ix.run_against([b], str(tmp_path / "inc"), cfg, against=[str(tmp_path / "idx")],
                        html=False)
    pipeline.run([ab], str(tmp_path / "whole"), cfg, html=False)
    inc = _clusters(str(tmp_path / "inc"))
    whole = _clusters(str(tmp_path / "whole"))
    whole = whole.filter(pc.starts_with(whole["id"], "b"))
    assert inc["id"].equals(whole["id"])
    assert inc["kept"].equals(whole["kept"])
    kept = inc["kept"].to_numpy(zero_copy_only=False)
    assert 0 < kept.sum() < len(kept)
    # some removals name an indexed document, and say so
    via = pc.is_valid(inc["duplicate_of_index"]).to_numpy(zero_copy_only=False)
    assert via.any() and (~via & ~kept).any()
    dup = inc["duplicate_of"].to_numpy(zero_copy_only=False)
    assert all(x.startswith("a") for x in dup[via])
    # the whole run names the same kept document for nearly all of them (a
    # document identical to one A removed may name another, as similar)
    same = np.mean(inc["duplicate_of"].to_numpy(zero_copy_only=False)[~kept]
                   == whole["duplicate_of"].to_numpy(zero_copy_only=False)[~kept])
    assert same > 0.98
    assert rb["documents"]["in"] == len(inc)
    assert rb["against"][0]["matched"] > 0
    # data/ holds B's kept records only
    lines = open(os.path.join(tmp_path / "inc", "data", "B.jsonl")).read().splitlines()
    assert len(lines) == int(kept.sum())


def test_add_is_the_same_as_a_build_of_both_and_adds_nothing_twice(split, tmp_path):
    d, a, b, ab = split
    idx = str(tmp_path / "idx")
    ix.build([a], idx, Config())
    r = ix.add([b], idx)
    assert r["added"] > 0
    again = ix.add([b], idx)
    assert again["added"] == 0 and Index(idx).docs == Index(idx).parts[-1]["first"] + \
        Index(idx).parts[-1]["docs"]
    whole = str(tmp_path / "whole")
    ix.build([ab], whole, Config())
    got = ix.Index(idx).fetch(np.arange(Index(idx).docs)).column("id").to_pylist()
    want = ix.Index(whole).fetch(np.arange(Index(whole).docs)).column("id").to_pylist()
    assert got == want


def _bench_corpora():
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import corpora
    return corpora


def test_overlap_flags_near_copies_and_passages_not_unrelated_text(tmp_path):
    train = list(dict.fromkeys(_paragraphs(5000)))
    rng = random.Random(3)
    corpora = _bench_corpora()
    unrelated = corpora.stdlib_docstrings(200)
    assert len(unrelated) >= 100
    items = corpora.contamination_items(train, rng, 40, 40, unrelated, long_words=150)
    assert sum(k == "passage" for k, _ in items) >= 20
    idx = str(tmp_path / "idx")
    ix.build([_write(str(tmp_path / "train.jsonl"), train, "t")], idx, Config())
    ev = str(tmp_path / "eval.jsonl")
    with open(ev, "w") as f:
        for i, (k, t) in enumerate(items):
            f.write(json.dumps({"id": f"{k}-{i}", "text": t}) + "\n")
    out = str(tmp_path / "ov")
    p = forkcli.run(["overlap", ev, "--against", idx, "-o", out, "--json"], text=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    t = pq.read_table(os.path.join(out, "overlap.parquet")).to_pylist()
    assert len(t) == len(items)
    by = {}
    for r in t:
        by.setdefault(r["id"].split("-")[0], []).append(r)
    assert sum(r["flagged"] for r in by["near"]) >= 0.99 * len(by["near"])
    assert sum(r["flagged"] for r in by["passage"]) >= 0.99 * len(by["passage"])
    assert sum(r["flagged"] for r in by["unrelated"]) <= 0.01 * len(by["unrelated"])
    # passages are found as contained (their Jaccard with the whole is low)
    assert sum(r["kind"] == "contained" for r in by["passage"]) >= 0.9 * len(by["passage"])
    for r in by["near"] + by["passage"]:
        if r["flagged"]:
            assert r["match_id"].startswith("t") and r["similarity"] >= 0.8
    html = open(os.path.join(out, "report.html"), encoding="utf-8").read()
    assert "contained" in html and json.loads(p.stdout)["flagged"] >= 60


def _kill_after(delay: float, *args) -> None:
    """Start ``gpu-dedup ARGS`` and kill -9 it after ``delay`` seconds."""
    proc = subprocess.Popen([sys.executable, "-m", "gpu_dedup.cli", *args], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def _cli(*args, cwd=ROOT):
    return forkcli.run(args, text=True, cwd=cwd)


def test_an_index_of_other_options_is_refused_naming_the_option(tmp_path):
    a = _write(str(tmp_path / "a.jsonl"), [f"document number {i} of the index" for i in
                                           range(50)], "a")
    idx = str(tmp_path / "idx")
    p = _cli("index", "build", a, "--index", idx, "--ngram", "3", "-q")
    assert p.returncode == 0, p.stderr
    p = _cli("run", a, "-o", str(tmp_path / "o"), "--against", idx, "--ngram", "4")
    assert p.returncode == 2 and "--ngram 4" in p.stderr and "--ngram 3" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    assert not os.path.exists(tmp_path / "o")
    p = _cli("run", a, "-o", str(tmp_path / "o"), "--against", idx, "--keep", "longest")
    assert p.returncode == 2 and "--keep longest" in p.stderr
    # without the option, the index's own is used
    p = _cli("run", a, "-o", str(tmp_path / "o"), "--against", idx, "-q", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["documents"]["kept"] == 0       # all indexed already
    p = _cli("index", "build", a, "--index", idx)
    assert p.returncode == 2 and "already exists" in p.stderr


def test_a_missing_or_corrupt_index_file_is_named(tmp_path):
    a = _write(str(tmp_path / "a.jsonl"), [f"the text of document {i} here" for i in
                                           range(40)], "a")
    idx = str(tmp_path / "idx")
    assert _cli("index", "build", a, "--index", idx, "-q").returncode == 0
    p = _cli("run", a, "-o", str(tmp_path / "o"), "--against", str(tmp_path / "nothing"))
    assert p.returncode == 2 and "nothing" in p.stderr
    keys = sorted(glob.glob(os.path.join(idx, "part-000000", "keys", "*.arrow")))
    with open(keys[0], "wb") as f:
        f.write(b"not arrow")
    p = _cli("run", a, "-o", str(tmp_path / "o"), "--against", idx)
    assert p.returncode == 2 and os.path.basename(keys[0]) in p.stderr
    os.unlink(os.path.join(idx, "part-000000", "docs.parquet"))
    p = _cli("index", "add", a, "--index", idx)
    assert p.returncode == 2
    with open(os.path.join(idx, "index.json"), "w") as f:
        f.write("{ broken")
    p = _cli("index", "info", "--index", idx)
    assert p.returncode == 2 and "index.json" in p.stderr and "corrupt" in p.stderr
    assert not os.path.exists(tmp_path / "o")


def _indexed_halves(tmp_path, b_from: int):
    """An index of 1,500 generated records, and a second input from ``b_from``."""
    texts = [f"line {i}: {' '.join(str(i * j % 89) for j in range(14))}" for i in range(3000)]
    a = _write(str(tmp_path / "a.jsonl"), texts[:1500], "a")
    b = _write(str(tmp_path / "b.jsonl"), texts[b_from:], "b")
    idx = str(tmp_path / "idx")
    assert _cli("index", "build", a, "--index", idx, "-q").returncode == 0
    return a, b, idx


def test_kill_during_add_leaves_the_index_whole(tmp_path):
    a, b, idx = _indexed_halves(tmp_path, 1500)
    before = Index(idx).docs
    p = _cli("run", b, "-o", str(tmp_path / "ref"), "--against", idx, "-q", "--json")
    new = json.loads(p.stdout)["documents"]["kept"]     # what an add appends
    assert 0 < new <= 1500
    outcomes = set()
    # kills from start-up to the last steps (an add takes a second or two)
    for delay in (0.3, 0.8, 1.2, 1.6, 2.0, 2.5, 3.2):
        _kill_after(delay, "index", "add", b, "--index", idx, "-q")
        got = Index(idx)                       # opens: index.json is whole
        assert got.docs in (before, before + new)
        outcomes.add(got.docs)
        # what it lists is readable, and a query works
        assert got.fetch(np.arange(got.docs)).num_rows == got.docs
        if got.docs != before:
            break
    assert before in outcomes                  # at least one add was cut short
    # a finished add after the kills leaves one copy of b
    assert _cli("index", "add", b, "--index", idx, "-q").returncode == 0
    assert Index(idx).docs == before + new
    leftovers = [n for n in os.listdir(idx) if n.startswith(".staging-")]
    assert not leftovers
    assert len(Index(idx).parts) == 2


def test_an_index_written_in_small_batches_answers_the_same(split, tmp_path, monkeypatch):
    d, a, b, ab = split
    ix.build([a], str(tmp_path / "one"), Config())
    monkeypatch.setattr(ix, "INGEST_BATCH", 333)
    ix.build([a], str(tmp_path / "many"), Config())
    one, many = Index(str(tmp_path / "one")), Index(str(tmp_path / "many"))
    assert one.docs == many.docs
    pick = np.sort(np.random.default_rng(0).choice(one.docs, 200, replace=False))
    assert one.fetch(pick).equals(many.fetch(pick))
    for folder in ("keys", "wkeys"):
        names = sorted(os.listdir(os.path.join(one.path, "part-000000", folder)))
        assert names == sorted(os.listdir(os.path.join(many.path, "part-000000", folder)))
        for n in names[:20]:
            x = open(os.path.join(one.path, "part-000000", folder, n), "rb").read()
            y = open(os.path.join(many.path, "part-000000", folder, n), "rb").read()
            assert x == y, n


def test_kill_during_build_leaves_no_index_or_a_whole_one(tmp_path):
    texts = [f"entry {i}: {' '.join(str(i * j % 97) for j in range(15))}" for i in range(4000)]
    a = _write(str(tmp_path / "a.jsonl"), texts, "a")
    idx = str(tmp_path / "idx")
    for delay in (0.4, 1.0, 1.6):
        _kill_after(delay, "index", "build", a, "--index", idx, "-q")
        if os.path.exists(idx):
            got = Index(idx)                    # whole, or not there at all
            assert got.docs == got.fetch(np.arange(got.docs)).num_rows > 0
            break
    # the input folder holds the input and, at most, an index: nothing half-written
    left = {n for n in os.listdir(tmp_path) if not n.startswith(".gpu-dedup-index-")}
    assert left <= {"a.jsonl", "idx"}


def test_kill_during_a_query_leaves_no_output_and_the_index_as_it_was(tmp_path):
    a, b, idx = _indexed_halves(tmp_path, 1000)
    snapshot = {n: os.path.getsize(os.path.join(dp, n)) for dp, _, ns in os.walk(idx)
                for n in ns}
    ref = str(tmp_path / "ref")
    assert _cli("run", b, "-o", ref, "--against", idx, "-q").returncode == 0
    out = str(tmp_path / "out")
    for delay in (0.5, 1.2):
        _kill_after(delay, "run", b, "-o", out, "--against", idx, "-q")
        # no output, a whole one, or only the staging folder of the killed run (which
        # the next run removes): never some of the outputs
        from gpu_dedup.output import LOCK_NAME, STAGING_PREFIX
        shown = [n for n in (os.listdir(out) if os.path.exists(out) else [])
                 if not n.startswith(STAGING_PREFIX) and n != LOCK_NAME]
        assert shown == [] or "report.json" in shown, shown
    after = {n: os.path.getsize(os.path.join(dp, n)) for dp, _, ns in os.walk(idx) for n in ns}
    assert after == snapshot                    # a query never writes the index
    p = _cli("run", b, "-o", out, "--against", idx, "-q", "--overwrite")
    assert p.returncode == 0, p.stderr
    assert _clusters(out).equals(_clusters(ref))
    kept = _clusters(out)["kept"].to_numpy(zero_copy_only=False)
    assert not kept[:500].any() and kept[500:].sum() > 1000   # its first 500 are indexed
