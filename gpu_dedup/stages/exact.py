"""Exact duplicates: identical normalized texts, by a 128-bit fingerprint."""
from __future__ import annotations

import numpy as np


def exact_representatives(fingerprints: np.ndarray, active: np.ndarray) -> np.ndarray:
    """For each document, the index of the first active document with the same
    128-bit fingerprint (itself if it is the first); ``-1`` where inactive.

    ``fingerprints`` is ``N x 2`` uint64.
    """
    n = fingerprints.shape[0]
    rep = np.full(n, -1, dtype=np.int64)
    idx = np.flatnonzero(active)
    if idx.size == 0:
        return rep
    fp = fingerprints[idx]
    order = np.lexsort((idx, fp[:, 1], fp[:, 0]))
    s0 = fp[order, 0]
    s1 = fp[order, 1]
    start = np.ones(order.size, dtype=bool)
    start[1:] = (s0[1:] != s0[:-1]) | (s1[1:] != s1[:-1])
    group = np.cumsum(start) - 1
    first = idx[order][start]          # smallest index of each group (idx sorted within)
    rep[idx[order]] = first[group]
    return rep
