"""Duplicate clusters: connected components of the accepted edges, and the
document kept in each.

Owns the host implementation of connected components (SciPy), which the CPU
backend uses and the GPU backend falls back to, the deterministic relabelling
of components by their smallest member, and the choice of the kept document.
"""
from __future__ import annotations

import numpy as np


def scipy_components(n: int, ea, eb) -> np.ndarray:
    """Connected-component label of each of ``n`` nodes, on the host.

    Args:
        n: number of nodes; the edges' endpoints lie in ``[0, n)``.
        ea, eb: endpoints of the edges (any integer arrays of equal length
            that NumPy can read; edge direction is ignored).

    Returns:
        int64 array of ``n`` labels in ``[0, components)``; two nodes share a
        label exactly when a path of edges joins them. The label values
        follow SciPy's numbering: use :func:`cluster_ids` for a
        deterministic one.

    Raises:
        ValueError: when ``ea`` and ``eb`` differ in length.
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components
    ea = np.asarray(ea, dtype=np.int64).reshape(-1)
    eb = np.asarray(eb, dtype=np.int64).reshape(-1)
    if ea.shape != eb.shape:
        raise ValueError(f"edge endpoints differ in length: {ea.size} and {eb.size}")
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    g = coo_matrix((np.ones(ea.size, dtype=np.int8), (ea, eb)), shape=(n, n)).tocsr()
    _, labels = connected_components(g, directed=True, connection="weak")
    return labels.astype(np.int64)


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
