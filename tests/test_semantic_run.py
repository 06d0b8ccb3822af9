"""``gpu-dedup semantic`` and ``semantic_deduplicate`` through the engine:
removals justified by the exact cosine of the bundled model's embeddings,
planted rewordings found, the same outputs in memory, out of core, on
threads and after a rerun, and bad options refused with one line."""
from __future__ import annotations

import json
import os
import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from gpu_dedup import semantic_deduplicate
from gpu_dedup.cli import main
from gpu_dedup.semantic.embed import bundled_model
from realtext import paragraphs
from test_gpu_backend import needs_gpu

THRESHOLD = 0.95
OUTPUTS = ("clusters.parquet", "pairs.parquet")


def _reworded(text: str, rng: random.Random) -> str:
    """A near copy: a word dropped, two neighbours swapped, a closing remark."""
    words = text.split()
    if len(words) > 8:
        del words[rng.randrange(len(words))]
        i = rng.randrange(len(words) - 1)
        words[i], words[i + 1] = words[i + 1], words[i]
    return " ".join(words) + rng.choice([" See above.", " (edited)", " Thanks."])


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Real paragraphs of 200 bytes or more, then 60 near copies of some of
    them and 5 exact copies, shuffled: the JSONL file (with ids), the texts
    and ids in its order, and each planted copy's id with its original's."""
    rng = random.Random(5)
    base = [p for p in paragraphs() if len(p) >= 200][:400]
    planted = {}
    texts = list(base)
    for k in rng.sample(range(len(base)), 60):
        planted[len(texts)] = k
        texts.append(_reworded(base[k], rng))
    for k in rng.sample(range(len(base)), 5):
        planted[len(texts)] = k
        texts.append(base[k])
    order = list(range(len(texts)))
    rng.shuffle(order)
    folder = tmp_path_factory.mktemp("semantic")
    path = folder / "in.jsonl"
    with open(path, "w") as f:
        for i in order:
            f.write(json.dumps({"id": f"d{i}", "text": texts[i]}) + "\n")
    return str(path), [texts[i] for i in order], [f"d{i}" for i in order], \
        {f"d{i}": f"d{k}" for i, k in planted.items()}


def _run(args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def _cli(path, out, *extra):
    r = _run(["semantic", path, "--output", out, "--threshold", THRESHOLD, "-q", *extra])
    assert r.exit_code == 0, r.output
    return json.load(open(os.path.join(out, "report.json")))


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def test_removals_are_justified_and_planted_copies_found(corpus, tmp_path):
    path, texts, ids, planted = corpus
    out = str(tmp_path / "out")
    report = _cli(path, out)
    t = pq.read_table(os.path.join(out, "clusters.parquet")).to_pydict()
    assert t["id"] == ids                                   # every document, in input order
    kept = np.array(t["kept"])
    assert report["documents"] == {"in": len(ids), "kept": int(kept.sum()),
                                   "removed": int((~kept).sum())}
    emb = bundled_model().embed(texts)
    pos = {d: i for i, d in enumerate(ids)}
    for i in np.flatnonzero(~kept):
        j = pos[t["duplicate_of"][i]]
        assert kept[j] and j != i
        cos = float(np.dot(emb[i].astype(np.float64), emb[j].astype(np.float64)))
        assert cos >= THRESHOLD and abs(cos - t["similarity"][i]) < 1e-6
        assert t["cluster"][i] == j and t["cluster"][j] == j
    removed = {ids[i] for i in np.flatnonzero(~kept)}
    # of each planted copy and its original, one goes: the exact copies
    # always; most reworded ones (a dropped word, a swap and a remark move a
    # short paragraph's mean vector: 5 of these 60 fall below 0.9)
    found = sum(c in removed or o in removed for c, o in planted.items())
    assert found >= 0.8 * len(planted), (found, len(planted))
    exact = [c for c, o in planted.items() if texts[ids.index(c)] == texts[ids.index(o)]]
    assert len(exact) == 5 and all(c in removed or o in removed for c in exact
                                   for o in [planted[c]])
    # residual: no two kept documents at the threshold (exact search)
    k = np.flatnonzero(kept)
    sims = emb[k].astype(np.float64) @ emb[k].astype(np.float64).T
    np.fill_diagonal(sims, 0)
    assert sims.max() < THRESHOLD
    # data/ holds the kept records, byte for byte, in input order
    lines = open(os.path.join(out, "data", "in.jsonl")).read().splitlines()
    src = open(path).read().splitlines()
    assert lines == [src[i] for i in k]
    pairs = pq.read_table(os.path.join(out, "pairs.parquet")).to_pydict()
    assert len(pairs["id_a"]) >= len(removed)
    assert report["model"]["dim"] == 256 and report["search"]["mode"] == "exact"


def test_every_way_of_running_writes_the_same_bytes(corpus, tmp_path):
    path, *_ = corpus
    ref = str(tmp_path / "ref")
    _cli(path, ref)
    runs = {"out_of_core": ["--memory-limit", "256MiB", "--work-dir", tmp_path / "w1"],
            "threads": ["--scheduler", "threads", "--workers", "2"],
            "kmeans_all_probes": ["--search", "kmeans", "--clusters", "4", "--probe", "3"]}
    for name, extra in runs.items():
        out = str(tmp_path / name)
        report = _cli(path, out, *extra)
        for f in OUTPUTS:
            assert _read(os.path.join(ref, f)) == _read(os.path.join(out, f)), (name, f)
        if name == "out_of_core":
            assert report["work"]["store"] == "disk"
    # many small chunks on disk, embedded by two worker processes
    from gpu_dedup.semantic.api import run
    out = str(tmp_path / "processes")
    report = run([path], out, threshold=THRESHOLD, partition_bytes="16KiB",
                 work_dir=str(tmp_path / "w2"), scheduler="processes", workers=2, html=False)
    assert report["work"]["units"]["embed"] >= 4
    assert len({p["pid"] for p in report["memory"]["processes"]}) == 3
    for f in OUTPUTS:
        assert _read(os.path.join(ref, f)) == _read(os.path.join(out, f)), ("processes", f)


def test_a_rerun_on_its_work_directory_reuses_the_embeddings(corpus, tmp_path):
    path, *_ = corpus
    work = tmp_path / "work"
    first = _cli(path, str(tmp_path / "a"), "--work-dir", work, "--keep-work-dir")
    again = _cli(path, str(tmp_path / "b"), "--work-dir", work, "--keep-work-dir")
    assert first["work"]["reused"].get("embed", 0) == 0
    assert again["work"]["reused"]["embed"] == again["work"]["units"]["embed"] >= 1
    for f in OUTPUTS:
        assert _read(tmp_path / "a" / f) == _read(tmp_path / "b" / f)


def test_keep_longest_keeps_the_longest_of_each_cluster(corpus, tmp_path):
    path, texts, ids, _ = corpus
    out = str(tmp_path / "out")
    _cli(path, out, "--keep", "longest")
    t = pq.read_table(os.path.join(out, "clusters.parquet")).to_pydict()
    pos = {d: i for i, d in enumerate(ids)}
    lengths = [len(x) for x in texts]
    for i, k in enumerate(t["kept"]):
        if not k:
            j = pos[t["duplicate_of"][i]]
            assert (lengths[j], -j) > (lengths[i], -i)     # kept earlier in priority


def test_the_library_gives_what_the_command_writes(corpus, tmp_path):
    path, texts, ids, _ = corpus
    out = str(tmp_path / "out")
    _cli(path, out)
    t = pq.read_table(os.path.join(out, "clusters.parquet")).to_pydict()
    r = semantic_deduplicate(texts, threshold=THRESHOLD)
    assert r.kept.tolist() == t["kept"]
    assert [ids[d] if d >= 0 else None for d in r.duplicate_of] == t["duplicate_of"]
    assert r.stats["search"] == "exact" and r.stats["removed"] == int((~r.kept).sum())
    # and over the same embeddings given directly
    e = semantic_deduplicate(embeddings=bundled_model().embed(texts), threshold=THRESHOLD)
    np.testing.assert_array_equal(e.kept, r.kept)
    np.testing.assert_array_equal(e.duplicate_of, r.duplicate_of)


@pytest.mark.parametrize("args,needle", [
    (["--threshold", "1.5"], "--threshold"),
    (["--search", "hnsw"], "--search"),
    (["--keep", "shortest"], "--keep"),
    (["--probe", "-1"], "--probe"),
    (["--model", "minishlab/potion-base-8M"], "download"),
])
def test_bad_options_exit_2_with_one_line(corpus, tmp_path, args, needle):
    path, *_ = corpus
    out = tmp_path / "out"
    r = _run(["semantic", path, "--output", out, *args])
    assert r.exit_code == 2
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], r.output
    assert not out.exists()


def test_embeddings_given_directly_are_checked():
    with pytest.raises(Exception, match="row 1"):
        semantic_deduplicate(embeddings=np.array([[1.0, 0.0], [np.nan, 1.0]]))
    with pytest.raises(Exception, match="row 0"):
        semantic_deduplicate(embeddings=np.zeros((2, 3)))
    r = semantic_deduplicate(embeddings=pa.array([[1.0, 0.0], [0.99, 0.1], [0.0, 2.0]]).to_pylist(),
                             threshold=0.9)
    assert r.kept.tolist() == [True, False, True] and r.duplicate_of.tolist() == [-1, 0, -1]


def test_frames_mark_semantic_duplicates_from_texts_or_an_embedding_column(corpus):
    import pandas as pd
    from gpu_dedup import deduplicate_frame
    from gpu_dedup.errors import ConfigError
    _, texts, ids, _ = corpus
    table = pa.table({"id": ids, "text": texts})
    out = deduplicate_frame(table, id="id", semantic=True, threshold=THRESHOLD)
    r = semantic_deduplicate(texts, threshold=THRESHOLD)
    assert out["kept"].to_pylist() == r.kept.tolist() and (~r.kept).sum() > 20
    assert out["duplicate_of"].to_pylist() == [ids[d] if d >= 0 else None
                                               for d in r.duplicate_of]
    emb = bundled_model().embed(texts)
    frame = pd.DataFrame({"id": ids, "text": texts, "vec": list(emb.astype(np.float64))})
    got = deduplicate_frame(frame, id="id", semantic=True, embedding="vec", threshold=THRESHOLD)
    assert got["kept"].tolist() == r.kept.tolist()
    assert list(got.columns[:3]) == ["id", "text", "vec"]
    frame.loc[3, "vec"] = np.full(256, np.nan)
    with pytest.raises(Exception, match="'vec'.*:4"):
        deduplicate_frame(frame, id="id", semantic=True, embedding="vec")
    with pytest.raises(ConfigError, match="embedding= needs semantic=True"):
        deduplicate_frame(table, embedding="vec")
    with pytest.raises(ConfigError, match="shingle"):
        deduplicate_frame(table, semantic=True, shingle="word")


@pytest.mark.gpu
@needs_gpu
def test_gpu_semantic_run_is_bit_identical_to_cpu(corpus, tmp_path):
    """On a GPU the products screening pairs run on CuPy; the outputs are the
    CPU's bytes, the exact and the k-means search alike."""
    path, *_ = corpus
    for extra in ([], ["--search", "kmeans", "--clusters", "5", "--probe", "1"]):
        cpu, gpu = str(tmp_path / "cpu"), str(tmp_path / "gpu")
        _cli(path, cpu, "--overwrite", *extra)
        report = _cli(path, gpu, "--device", "gpu", "--overwrite", *extra)
        assert report["device"].startswith("gpu"), report["device"]
        for f in OUTPUTS:
            assert _read(os.path.join(cpu, f)) == _read(os.path.join(gpu, f)), (extra, f)


def _with_vectors(folder, texts, ids, emb):
    """The corpus as three shards whose records carry their embeddings in
    field ``vec``: JSONL, gzipped JSONL and Parquet."""
    import gzip
    os.makedirs(folder, exist_ok=True)
    k = len(texts) // 3
    cuts = [(0, k), (k, 2 * k), (2 * k, len(texts))]
    paths = [os.path.join(folder, n) for n in ("a.jsonl", "b.jsonl.gz", "c.parquet")]
    for path, (s, e) in zip(paths, cuts):
        rows = [{"id": ids[i], "text": texts[i], "vec": emb[i].tolist()} for i in range(s, e)]
        if path.endswith(".parquet"):
            pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=50)
        else:
            with (gzip.open if path.endswith(".gz") else open)(path, "wt") as f:
                for r in rows:
                    f.write(json.dumps(r) + "\n")
    return paths


def test_embeddings_read_from_a_field_of_the_records(corpus, tmp_path):
    """--embedding-field: the vectors of each JSONL and Parquet record, read
    by line and row, out of core in small chunks the same as in memory, and
    the same removals as the library over the same vectors."""
    from gpu_dedup.semantic.api import run
    _, texts, ids, _ = corpus
    rng = np.random.default_rng(0)
    emb = bundled_model().embed(texts).astype(np.float64) * rng.uniform(0.5, 2.0, (len(texts), 1))
    paths = _with_vectors(str(tmp_path / "in"), texts, ids, emb)
    ref = str(tmp_path / "ref")
    report = run(paths, ref, threshold=THRESHOLD, embedding_field="vec", html=False)
    assert report["model"]["name"] == "field vec" and report["model"]["dim"] == 256
    t = pq.read_table(os.path.join(ref, "clusters.parquet")).to_pydict()
    r = semantic_deduplicate(embeddings=emb, threshold=THRESHOLD)
    assert t["kept"] == r.kept.tolist() and (~r.kept).sum() > 20
    assert t["duplicate_of"] == [ids[d] if d >= 0 else None for d in r.duplicate_of]
    out = str(tmp_path / "chunks")
    run(paths, out, threshold=THRESHOLD, embedding_field="vec", html=False,
        partition_bytes="16KiB", work_dir=str(tmp_path / "w"))
    for f in OUTPUTS:
        assert _read(os.path.join(ref, f)) == _read(os.path.join(out, f)), f


@pytest.mark.parametrize("value,why", [
    ("[1.0, 2.0]", "has 2 values, not 3"),
    ("[1.0, NaN, 2.0]", "NaN"),
    ('[1.0, "x", 2.0]', "not"),
    ("[]", "empty"),
    ("null", "null"),
    ("[0, 0, 0]", "zeros"),
])
def test_a_bad_embedding_exits_2_naming_its_file_and_line(tmp_path, value, why):
    path = tmp_path / "in.jsonl"
    lines = [f'{{"id": "d{i}", "text": "t{i}", "vec": [1.0, {i}.5, 2.0]}}' for i in range(6)]
    lines.insert(3, "")                         # a blank line still counts as a line
    lines[4] = f'{{"id": "bad", "text": "t", "vec": {value}}}'
    path.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    r = _run(["semantic", path, "--output", out, "--embedding-field", "vec"])
    assert r.exit_code == 2, r.output
    msg = [x for x in r.output.splitlines() if x.strip()]
    assert len(msg) == 1 and f"in.jsonl:5:" in msg[0] and why in msg[0], r.output
    assert not out.exists()


def test_a_bad_parquet_embedding_is_named_by_its_row(tmp_path):
    path = tmp_path / "in.parquet"
    vec = [[1.0, float(i), 2.0] for i in range(120)]
    vec[77] = [1.0, 2.0]
    pq.write_table(pa.table({"id": [f"d{i}" for i in range(120)],
                             "text": [f"t{i}" for i in range(120)], "vec": vec}), path,
                   row_group_size=50)
    r = _run(["semantic", path, "--output", tmp_path / "out", "--embedding-field", "vec"])
    assert r.exit_code == 2 and "in.parquet:78:" in r.output and "2 values" in r.output, r.output
    r = _run(["semantic", path, "--output", tmp_path / "out", "--embedding-field", "nope"])
    assert r.exit_code == 2 and "no field 'nope'" in r.output, r.output


def test_embeddings_read_from_an_arrow_file(tmp_path):
    path = tmp_path / "in.arrow"
    vec = [[1.0, 0.0, 0.0], [0.99, 0.1, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    table = pa.table({"id": ["a", "b", "c", "d"], "text": ["w", "x", "y", "z"], "vec": vec})
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table, max_chunksize=2)
    out = tmp_path / "out"
    r = _run(["semantic", path, "--output", out, "--embedding-field", "vec", "-t", "0.9", "-q"])
    assert r.exit_code == 0, r.output
    t = pq.read_table(out / "clusters.parquet").to_pydict()
    assert t["kept"] == [True, False, True, True] and t["duplicate_of"][1] == "a"


def test_report_shows_what_semantic_search_removes_that_run_keeps(tmp_path):
    """report.html lists the removed documents whose exact Jaccard (run's
    default shingles) with the kept one they name is below run's threshold:
    two wordings with the same vector, and not a copy that run removes
    too; beyond_run's Jaccard is Python's over the same shingles."""
    from gpu_dedup import Config, deduplicate
    from gpu_dedup import reference as ref
    from gpu_dedup.semantic.api import beyond_run
    texts = ["The cat sat on the mat all afternoon.",
             "A feline rested upon the rug for the whole afternoon.",
             "Quarterly revenue rose by four percent.",
             "Quarterly revenue rose by four percent!"]
    vecs = [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 1.0, 0.0]]
    path = tmp_path / "in.jsonl"
    with open(path, "w") as f:
        for i, (t, v) in enumerate(zip(texts, vecs)):
            f.write(json.dumps({"id": f"d{i}", "text": t, "vec": v}) + "\n")
    out = str(tmp_path / "out")
    r = _run(["semantic", path, "--output", out, "--embedding-field", "vec", "-q"])
    assert r.exit_code == 0, r.output
    t = pq.read_table(os.path.join(out, "clusters.parquet")).to_pydict()
    assert t["kept"] == [True, False, True, False]
    html = open(os.path.join(out, "report.html")).read()
    assert "What semantic search removes that <code>run</code> keeps" in html
    assert "Of all 2 removed documents, 1 (50.0%)" in html
    assert "A feline rested" in html.split('id="beyond-run"')[1]
    assert "four percent!" not in html.split('id="beyond-run"')[1]
    # run itself keeps the reworded one and removes the near copy
    kept = deduplicate(pa.array(texts), Config()).kept.tolist()
    assert kept[1] and not kept[3]
    cfg = Config()
    arr = pa.array(texts, pa.large_string())
    jac = beyond_run(arr, np.array([1, 3]), np.array([0, 2]), cfg)
    from gpu_dedup.stages.normalize import normalize_text
    norm = normalize_text(arr, cfg.normalize).to_pylist()
    want = [ref.jaccard(ref.shingles(norm[a], "char", 5), ref.shingles(norm[b], "char", 5))
            for a, b in ((1, 0), (3, 2))]
    assert np.allclose(jac, want) and jac[0] < 0.8 <= jac[1]
