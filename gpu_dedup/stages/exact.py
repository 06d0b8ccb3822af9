"""Exact duplicates: identical normalized texts, by a 128-bit fingerprint."""
from __future__ import annotations

import numpy as np

from ..kernels.buckets import first_equal


def exact_representatives(fingerprints: np.ndarray, active: np.ndarray) -> np.ndarray:
    """For each document, the index of the first active document with the same
    128-bit fingerprint (itself if it is the first); ``-1`` where inactive.

    ``fingerprints`` is ``N x 2`` uint64.
    """
    fp = np.ascontiguousarray(fingerprints, dtype=np.uint64).reshape(-1, 2)
    return first_equal(fp, np.ascontiguousarray(active, dtype=np.bool_))
