"""Duplicate clusters: connected components of the accepted edges, and the
document kept in each."""
from __future__ import annotations

import numpy as np


def cluster_ids(labels: np.ndarray) -> np.ndarray:
    """Relabel components by their smallest member index (deterministic)."""
    n = labels.shape[0]
    if n == 0:
        return labels.astype(np.int64)
    first = np.full(int(labels.max()) + 1, n, dtype=np.int64)
    np.minimum.at(first, labels, np.arange(n, dtype=np.int64))
    return first[labels]


def choose_kept(cluster: np.ndarray, lengths: np.ndarray, keep: str) -> np.ndarray:
    """Exactly one ``True`` per cluster: its first document (``keep="first"``)
    or its longest, ties to the first (``keep="longest"``)."""
    n = cluster.shape[0]
    idx = np.arange(n, dtype=np.int64)
    if keep == "first":
        return cluster == idx
    order = np.lexsort((idx, -lengths.astype(np.int64), cluster))
    c = cluster[order]
    start = np.ones(n, dtype=bool)
    start[1:] = c[1:] != c[:-1]
    kept = np.zeros(n, dtype=bool)
    kept[order[start]] = True
    return kept
