"""What `gpu-dedup run` removes, as a user sees it: clusters.parquet names the
kept document of every removed one, a second run over data/ removes nothing,
and components mode says when its clusters chain."""
from __future__ import annotations

import json
import logging
import os

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from gpu_dedup.cli import main

ARGS = ["--shingle", "word", "--ngram", "1", "--normalize", "none", "--threshold", "0.8"]


def _invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def _chain(n=8, width=12):
    """Documents 0..n-1 of ``width`` words, each shifted one word from the
    last: neighbours are similar (J = 11/13), the next ones not (J = 10/14)."""
    return [" ".join(f"w{j}" for j in range(i, i + width)) for i in range(n)]


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "docs.jsonl"
    texts = _chain() + ["w0 w1 w2 w3 w4 w5 w6 w7 w8 w9 w10 w11"] + ["unrelated text here"]
    with open(path, "w") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": f"d{i}", "text": t}) + "\n")
    return path


def _clusters(out):
    return pq.read_table(os.path.join(out, "clusters.parquet")).to_pydict()


def test_every_removed_document_names_a_kept_one(corpus, tmp_path):
    out = tmp_path / "out"
    r = _invoke("run", corpus, "-o", out, "--quiet", *ARGS)
    assert r.exit_code == 0, r.output
    t = _clusters(out)
    kept = {i for i, k in zip(t["id"], t["kept"]) if k}
    removed = [(i, d, s) for i, k, d, s in zip(t["id"], t["kept"], t["duplicate_of"],
                                                t["similarity"]) if not k]
    assert removed
    for i, d, s in removed:
        assert d in kept and s >= 0.8
    assert all(d is None and s is None for k, d, s in
               zip(t["kept"], t["duplicate_of"], t["similarity"]) if k)
    # the chain keeps every other document; the copy of d0 names it
    assert ("d8", "d0", 1.0) in removed
    assert {"d0", "d2", "d4", "d6", "d9"} <= kept
    rep = json.loads((out / "report.json").read_text())
    assert rep["selection"]["mode"] == "greedy"
    assert rep["selection"]["removed_similarity"]["below_threshold"] == 0
    assert rep["selection"]["warning"] is None


def test_a_second_run_over_data_removes_nothing(corpus, tmp_path):
    out = tmp_path / "out"
    assert _invoke("run", corpus, "-o", out, "--quiet", *ARGS).exit_code == 0
    again = tmp_path / "again"
    r = _invoke("run", out / "data", "-o", again, "--quiet", *ARGS)
    assert r.exit_code == 0, r.output
    t = _clusters(again)
    assert all(t["kept"]) and len(t["kept"]) == len(_clusters(out)["id"]) - \
        sum(not k for k in _clusters(out)["kept"])


def test_components_chain_and_say_so(corpus, tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="gpu_dedup")   # --quiet elsewhere lowers it
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["run", str(corpus), "-o", str(out), "--cluster",
                                  "components", *ARGS], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    t = _clusters(out)
    # the whole chain is one component, and its far end is far from d0
    far = [s for i, d, s in zip(t["id"], t["duplicate_of"], t["similarity"]) if i == "d7"]
    assert far and far[0] < 0.8
    rep = json.loads((out / "report.json").read_text())
    sel = rep["selection"]
    assert sel["mode"] == "components"
    assert sel["removed_similarity"]["below_threshold"] >= 4
    assert sel["chaining"]["chained_clusters"] == 1
    assert sel["chaining"]["largest_chained_cluster"] == 9
    assert "below the threshold" in sel["warning"] and "--cluster greedy" in sel["warning"]
    assert any("below the threshold" in m for m in caplog.messages)


def test_bad_cluster_options_are_one_line(corpus, tmp_path):
    r = _invoke("run", corpus, "-o", tmp_path / "o", "--bucket-limit", "0")
    assert r.exit_code == 2
    assert "--bucket-limit must be a positive integer" in r.output
    r = _invoke("run", corpus, "-o", tmp_path / "o", "--cluster", "chains")
    assert r.exit_code == 2
