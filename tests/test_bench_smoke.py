"""The benchmark harness (bench/run.py) end to end on a tiny corpus.

It runs the real ``gpu-dedup run`` command and the cookbook's code (and
datasketch and rensa when installed) and checks the rows it reports against
exact truth; no figure about speed is asserted.
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "bench"))
import peers  # noqa: E402
import run  # noqa: E402


def test_harness_reports_every_tool(tmp_path, capsys):
    tools = ["gpu_dedup", "cookbook"] + [t for t in ("datasketch", "rensa")
                                         if importlib.util.find_spec(t) is not None]
    out = tmp_path / "rows.json"
    rc = run.main(["--corpora", "planted:300", "--tools", *tools, "--repeat", "1",
                   "--data", str(tmp_path / "data"), "--json", str(out), "--no-save"])
    assert rc == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["tool"] for r in rows] == tools
    printed = capsys.readouterr().out
    for r in rows:
        assert "error" not in r, r
        assert r["docs"] == rows[0]["docs"] > 300        # 300 originals and their copies
        assert r["docs_per_s"] > 0 and r["peak_rss"] > 10 * 2 ** 20
        assert 0.0 <= r["recall"] <= 1.0 and 0.0 <= r["precision"] <= 1.0
        assert f"| {r['corpus']} | {r['tool']} |" in printed
    gd = rows[0]
    # the planted pairs of the cookbook's corpus are all found and all right
    assert gd["truth_pairs"] > 50
    assert gd["recall"] >= 0.95 and gd["precision"] == 1.0
    assert gd["removed"] == gd["exact_removed"] or gd["recall"] < 1.0
    assert (gd["bands"], gd["rows"]) != (None, None)
    cook = rows[1]
    assert (cook["bands"], cook["rows"]) == (32, 4)      # the cookbook's own choice at 0.4
    assert cook["verified"] is False


def test_scorer_counts_recall_precision_and_removed(tmp_path):
    import corpora
    texts = ["alpha beta gamma delta epsilon", "alpha beta gamma delta epsilon!",
             "completely different words here", "alpha beta gamma delta epsilon",
             "zeta eta theta iota kappa lambda"]
    path = str(tmp_path / "c.jsonl")
    nbytes = corpora.write_jsonl(path, texts)
    spec = corpora.CorpusSpec("t", path, len(texts), nbytes, "char", 3, 0.8, "test")
    sc = run.Scorer(spec, verbose=False)
    # exact graph: 0, 1, 3 together (3 is a copy of 0; 1 is 0 plus "!")
    assert sc.truth.pair_a.tolist() == [0] and sc.truth.pair_b.tolist() == [1]
    assert sc.exact_removed == 2
    perfect = sc.score(np.array([0, 0, 2, 0, 4]), np.array([0, 0]), np.array([1, 3]))
    assert perfect["recall"] == 1.0 and perfect["precision"] == 1.0
    assert perfect["removed"] == 2
    wrong = sc.score(np.array([0, 1, 0, 3, 4]), np.array([0]), np.array([2]))
    assert wrong["recall"] == 0.0 and wrong["precision"] == 0.0 and wrong["removed"] == 1


def test_peer_band_choices():
    assert peers.cookbook_bands(0.4, 128) == (32, 4)
    assert peers.cookbook_bands(0.8, 128) == (8, 16)
    assert peers.rensa_bands(0.8, 128) == 8
    assert peers.rensa_bands(0.4, 128) == 64
    assert peers.rensa_bands(0.85, 96) == 8
    assert peers.char_shingles("abc", 5) == {"abc"} and peers.char_shingles("", 5) == set()
    assert peers.word_shingles(" a  b ", 3) == {"a b"}
    assert set(peers.char_shingles("abcdef", 5)) == {"abcde", "bcdef"}
