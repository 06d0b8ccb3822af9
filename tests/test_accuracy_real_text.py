"""Accuracy against exact ground truth on real text: Debian's licence files.

Char 5-grams, ``--normalize none``, 128 hashes, threshold 0.8. Greedy
selection (the default): every removed document names a kept document at
exact Jaccard >= 0.8, at most 0.5% of the kept documents still have a kept
near-duplicate, and the selection is the sequential greedy rule. Components:
at least 95% of the pairs of *different* texts whose exact Jaccard is >= 0.8
end up in one cluster, and at least 98% of the reported edges have exact
Jaccard >= 0.75.
The truth comes from the exact set-similarity join (``gpu_dedup.truth``),
never from MinHash. The documents are the blank-line-separated paragraphs of
Debian's licence files (the committed corpus of ``tests/realtext.py``).
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from gpu_dedup import Config, deduplicate, truth
from gpu_dedup.kernels.cpu import jaccard_edges
from realtext import paragraphs

pytestmark = pytest.mark.slow           # the exact truth and two runs over 5.3 MB


def _paragraphs():
    return list(paragraphs())          # all of them: about 10,800, 5.3 MB


CFG = dict(shingle="char", ngram=5, normalize="none", num_perm=128, threshold=0.8)


@pytest.fixture(scope="module")
def corpus():
    texts = pa.array(_paragraphs(), type=pa.large_string())
    return texts, truth.exact_truth(texts, "char", 5, "none", 0.8)


@pytest.fixture(scope="module")
def run(corpus):
    texts, exact = corpus
    return texts, deduplicate(texts, Config(**CFG, cluster="components")), exact


@pytest.fixture(scope="module")
def greedy(corpus):
    texts, exact = corpus
    return texts, deduplicate(texts, Config(**CFG)), exact


def test_greedy_removals_are_justified_and_few_duplicates_remain(greedy):
    texts, result, exact = greedy
    off, vals = truth.shingle_sets(texts, "char", 5, "none")
    q = exact.removal_quality(result.kept, result.duplicate_of, off, vals)
    assert q["removed"] >= 500
    assert q["justified_share"] >= 0.999, q
    assert q["residual_share"] <= 0.005, q
    # the similarity column is the exact Jaccard to the named document
    r = np.flatnonzero(~result.kept)
    sims = jaccard_edges(off, vals, r, result.duplicate_of[r])
    assert np.allclose(result.similarity[r], sims)
    assert result.kept[result.duplicate_of[r]].all()
    assert np.isnan(result.similarity[result.kept]).all()
    assert (result.duplicate_of[result.kept] == -1).all()


def test_components_chain_where_greedy_does_not(run, greedy):
    texts, comp, exact = run
    _, gr, _ = greedy
    off, vals = truth.shingle_sets(texts, "char", 5, "none")
    qc = exact.removal_quality(comp.kept, comp.duplicate_of, off, vals)
    qg = exact.removal_quality(gr.kept, gr.duplicate_of, off, vals)
    # this corpus chains: components remove documents far from what they keep
    assert qc["justified_share"] < qg["justified_share"]
    assert comp.stats["removed_similarity"]["below_threshold"] > 0
    assert comp.stats["chaining"]["chained_clusters"] > 0
    assert gr.stats["removed_similarity"]["below_threshold"] == 0


def test_corpus_has_real_near_duplicates(run):
    texts, result, exact = run
    assert len(texts) >= 2000
    sims = exact.similarity
    # enough pairs of different texts, and not only trivial ones, to measure
    assert sims.size >= 200
    assert (sims < 0.95).sum() >= 50


def test_recall_of_pairs_of_different_texts(run):
    texts, result, exact = run
    same = result.cluster[exact.pair_a] == result.cluster[exact.pair_b]
    recall = same.mean()
    assert recall >= 0.95, f"recall {recall:.4f} on {same.size} pairs"


def test_edges_are_true_near_duplicates(run):
    texts, result, exact = run
    off, vals = truth.shingle_sets(texts, "char", 5, "none")
    sims = jaccard_edges(off, vals, result.pair_a.astype(np.int64), result.pair_b.astype(np.int64))
    assert sims.size > 0
    share = (sims >= 0.75).mean()
    assert share >= 0.98, f"{share:.4f} of {sims.size} edges have Jaccard >= 0.75"
    # the verified edges' recorded similarity is the exact one
    fuzzy = ~result.pair_exact
    assert np.allclose(result.pair_similarity[fuzzy], sims[fuzzy])


def test_nothing_is_removed_that_the_exact_graph_keeps_apart(run):
    texts, result, exact = run
    labels = exact.components()
    # every cluster gpu_dedup forms lies inside one component of the exact graph
    assert (labels[result.cluster] == labels).all()
    removed = int((~result.kept).sum())
    assert removed <= exact.removed
    assert removed >= 0.95 * exact.removed
