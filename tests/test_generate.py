"""The realistic corpus generator (bench/generate.py) on a small size."""
from __future__ import annotations

import gzip
import json
import os
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest

from gpu_dedup.reference import jaccard, shingles

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "bench"))
import generate  # noqa: E402


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("gen")
    out = str(d / "c.jsonl")
    stats = generate.generate(6000, out, mean_bytes=400, seed=3, batch=2500)
    with open(out, encoding="utf-8") as f:
        recs = [json.loads(line) for line in f]
    truth = pq.read_table(stats["truth"])
    return out, stats, recs, truth


def test_counts_and_ids(corpus):
    out, stats, recs, truth = corpus
    assert stats["truth"] == out[:-len(".jsonl")] + ".truth.parquet"
    assert len(recs) == 6000 == truth.num_rows == stats["documents"]
    assert [r["id"] for r in recs] == [str(i) for i in range(6000)]
    assert truth["id"].to_pylist() == [r["id"] for r in recs]
    kind = truth["kind"].to_numpy()
    assert stats["originals"] == int((kind == 0).sum())
    assert stats["near_duplicates"] == int((kind == 1).sum()) > 500
    assert stats["exact_copies"] == int((kind == 2).sum()) > 100
    assert stats["text_bytes"] == sum(len(r["text"].encode()) for r in recs)
    assert 300 < stats["mean_bytes"] < 520
    cluster = truth["cluster"].to_numpy()
    sizes = np.bincount(cluster)
    assert stats["clusters_with_copies"] == int((sizes > 1).sum())
    assert stats["largest_cluster"] == sizes.max() >= 5


def test_truth_is_consistent(corpus):
    _, _, recs, truth = corpus
    kind = truth["kind"].to_numpy()
    cluster = truth["cluster"].to_numpy()
    parent = truth["parent"].to_numpy()
    orig = kind == 0
    assert (cluster[orig] == np.flatnonzero(orig)).all()
    assert (parent[orig] == -1).all() and (parent[~orig] >= 0).all()
    assert (kind[cluster] == 0).all()                       # clusters are named by originals
    assert (cluster[parent[~orig]] == cluster[~orig]).all()  # a copy's parent is in its cluster
    # copies are shuffled away from their parents
    gap = np.abs(np.flatnonzero(~orig) - parent[~orig])
    assert np.median(gap) > 50


def test_exact_copies_are_identical_and_near_duplicates_are_similar(corpus):
    _, _, recs, truth = corpus
    texts = [r["text"] for r in recs]
    kind = truth["kind"].to_numpy()
    parent = truth["parent"].to_numpy()
    cluster = truth["cluster"].to_numpy()
    for i in np.flatnonzero(kind == 2):
        assert texts[i] == texts[parent[i]]
    near = np.flatnonzero(kind == 1)[:600]
    sims = np.array([jaccard(shingles(texts[i], "char", 5), shingles(texts[parent[i]], "char", 5))
                     for i in near])
    assert np.median(sims) >= 0.75
    assert (sims >= 0.5).mean() >= 0.85
    assert (sims < 1.0).mean() >= 0.9          # edited, not copied
    assert sum(texts[i] != texts[parent[i]] for i in near) == len(near)
    rng = np.random.default_rng(0)
    a = rng.integers(len(texts), size=600)
    b = rng.integers(len(texts), size=600)
    keep = cluster[a] != cluster[b]
    other = [jaccard(shingles(texts[i], "char", 5), shingles(texts[j], "char", 5))
             for i, j in zip(a[keep], b[keep])]
    assert np.median(other) < 0.1 and np.quantile(other, 0.99) < 0.4


def test_lengths_and_edits_vary(corpus):
    _, _, recs, truth = corpus
    words = np.array([len(r["text"].split()) for r in recs])
    assert words.min() < 20 and words.max() > 1000
    texts = [r["text"] for r in recs]
    has_date = sum(any(c.isdigit() for c in t) for t in texts) / len(texts)
    assert has_date > 0.5
    starts = {t.split(" ")[0] for t in texts if t.startswith(("Posted", "Home", "Skip", "Log"))}
    assert starts, "some documents carry a boilerplate header"


def test_deterministic_and_compressed(tmp_path):
    a = generate.generate(1500, str(tmp_path / "a.jsonl"), seed=5, batch=700)
    b = generate.generate(1500, str(tmp_path / "b.jsonl.gz"), seed=5, batch=700)
    raw_a = (tmp_path / "a.jsonl").read_bytes()
    raw_b = gzip.decompress((tmp_path / "b.jsonl.gz").read_bytes())
    assert raw_a == raw_b and len(raw_a) > 100_000
    assert a["near_duplicates"] == b["near_duplicates"]
    assert pq.read_table(a["truth"]).equals(pq.read_table(b["truth"]))
    c = generate.generate(1500, str(tmp_path / "c.jsonl"), seed=6, batch=700)
    assert (tmp_path / "c.jsonl").read_bytes() != raw_a
    assert c["documents"] == 1500


def test_cli(tmp_path):
    out = tmp_path / "cli.jsonl.zst"
    assert generate.main(["--docs", "300", "--out", str(out), "--seed", "1", "--quiet"]) == 0
    import zstandard
    with zstandard.ZstdDecompressor().stream_reader(open(out, "rb")) as r:
        lines = r.read().splitlines()
    assert len(lines) == 300 and json.loads(lines[-1])["id"] == "299"
    assert (tmp_path / "cli.truth.parquet").exists()
    assert generate.main(["--docs", "10", "--out", str(out), "--mean-bytes", "5", "--quiet"]) == 2


def test_heavy_duplication_options_make_large_clusters_within_their_cap(tmp_path):
    kw = {"mean_bytes": 60, "seed": 2, "batch": 20_000}
    plain = generate.generate(20_000, str(tmp_path / "p.jsonl"), **kw)
    heavy = generate.generate(20_000, str(tmp_path / "h.jsonl"), copies_share=0.6,
                              copies_alpha=1.1, max_copies=3_000, **kw)
    assert plain["largest_cluster"] <= 201
    assert 201 < heavy["largest_cluster"] <= 3_001
    copies = heavy["near_duplicates"] + heavy["exact_copies"]
    assert copies > 2 * (plain["near_duplicates"] + plain["exact_copies"])
    truth = pq.read_table(heavy["truth"]).to_pandas()
    assert truth["cluster"].value_counts().max() == heavy["largest_cluster"]
    # the defaults give the same bytes as before the options existed
    again = generate.generate(20_000, str(tmp_path / "q.jsonl"), copies_share=0.22,
                              copies_alpha=1.6, max_copies=200, **kw)
    assert (tmp_path / "q.jsonl").read_bytes() == (tmp_path / "p.jsonl").read_bytes()
    assert again["largest_cluster"] == plain["largest_cluster"]
