"""The run's summaries merged part by part equal those of the whole arrays."""
from __future__ import annotations

import numpy as np
import pytest

from gpu_dedup.stages.summaries import (merge_similarity, similarity_part, similarity_summary,
                                        size_counts, size_labels, top_clusters, values_in_bins)


def _sims(rng, n, kind):
    if kind == "uniform":
        return rng.random(n)
    if kind == "rounded":                  # many ties, as Jaccard values of short texts
        return np.round(rng.random(n), 2)
    return np.where(rng.random(n) < 0.7, 1.0, rng.random(n) * 0.3 + 0.7)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 100, 2001])
@pytest.mark.parametrize("kind", ["uniform", "rounded", "copies"])
def test_similarity_summary_is_numpys_and_merges_exactly(n, kind):
    rng = np.random.default_rng(n)
    x = _sims(rng, n, kind)
    whole = similarity_summary(x, 0.8)
    if n:
        assert whole["median"] == float(np.quantile(x, 0.5))      # bit for bit
        assert whole["p1"] == float(np.quantile(x, 0.01))
        assert whole["p5"] == float(np.quantile(x, 0.05))
        assert whole["min"] == float(x.min())
    else:
        assert whole["median"] is None and whole["removed"] == 0
    assert whole["below_threshold"] == int((x < 0.8).sum())
    for cuts in ([], [0, 0], sorted(rng.integers(0, n + 1, 4).tolist())):
        parts = np.split(x, cuts)
        merged = merge_similarity(
            [similarity_part(p, 0.8) for p in parts], 0.8,
            lambda bins: np.concatenate([values_in_bins(p, bins) for p in parts]))
        assert merged == whole


def test_cluster_size_bins():
    labels, counts = size_labels(size_counts(np.array([1, 1, 1, 2, 3, 5, 9, 17])))
    assert labels == ["1", "2", "3", "4", "5-8", "9-16", "17-32"]
    assert counts == [3, 1, 1, 0, 1, 1, 1]
    rng = np.random.default_rng(3)
    sizes = rng.integers(1, 5000, 400)
    edges = [1, 2, 3, 4, 5] + [2 ** k + 1 for k in range(3, 14)]
    want = [int(((sizes >= a) & (sizes < b)).sum()) for a, b in zip(edges, edges[1:])]
    while want[-1] == 0:
        want.pop()
    assert size_labels(size_counts(sizes))[1] == want
    # bins summed over parts are the bins of the whole
    a, b = size_counts(sizes[:100]), size_counts(sizes[100:])
    n = max(a.size, b.size)
    assert (np.pad(a, (0, n - a.size)) + np.pad(b, (0, n - b.size))
            == size_counts(sizes)).all()


def test_top_clusters_largest_first_ties_to_the_smallest_label():
    labels, sizes = top_clusters(np.array([9, 3, 5, 7]), np.array([2, 4, 4, 1]), 3)
    assert labels.tolist() == [3, 5, 9] and sizes.tolist() == [4, 4, 2]
