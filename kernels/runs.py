"""Sorted runs, written once for every backend: the search of a key, and
the intersection and Jaccard of two runs of sorted distinct values (a
document's shingle set is such a run), with the early stop that exact
verification against a floor allows. Called by the CPU loops
(:mod:`kernels.cpu`, :mod:`kernels.greedy`) and the CUDA kernels alike, as
:mod:`kernels.primitives` is."""
from __future__ import annotations

from .jit import njit


@njit(cache=True)
def find_sorted(keys, lo, hi, k):
    """Position of ``k`` in the sorted ``keys[lo:hi]``, or -1."""
    end = hi
    while lo < hi:
        mid = (lo + hi) >> 1
        if keys[mid] < k:
            lo = mid + 1
        else:
            hi = mid
    if lo < end and keys[lo] == k:
        return lo
    return -1


@njit(cache=True)
def runs_intersect_at_least(va, a0, a1, vb, b0, b1, need):
    """The size of the intersection of the sorted runs ``va[a0:a1]`` and
    ``vb[b0:b1]``, or a smaller number as soon as it cannot reach
    ``need``."""
    c = 0
    # it cannot reach ``need`` once either run has more values past it
    # than it may miss: ``c + min(a1 - a0, b1 - b0) < need``
    a_miss = a1 - need
    b_miss = b1 - need
    while a0 < a1 and b0 < b1:
        if a0 - c > a_miss or b0 - c > b_miss:
            return c
        x = va[a0]
        y = vb[b0]
        # no branch on the comparison: the merge steps both ways at once
        c += x == y
        a0 += x <= y
        b0 += y <= x
    return c


@njit(cache=True)
def intersect_at_least(values, a0, a1, b0, b1, need):
    """:func:`runs_intersect_at_least` of two runs of ``values``."""
    return runs_intersect_at_least(values, a0, a1, values, b0, b1, need)


@njit(cache=True)
def intersect_sorted(values, a0, a1, b0, b1):
    """The size of the intersection of two sorted runs of ``values``."""
    return intersect_at_least(values, a0, a1, b0, b1, 0)


@njit(cache=True)
def jaccard_of_runs(va, a0, a1, vb, b0, b1, need):
    """``(jaccard, exact)`` of the sorted runs ``va[a0:a1]`` and
    ``vb[b0:b1]``: exact when their intersection reaches ``need``; else the
    count stopped as soon as it could not (:func:`runs_intersect_at_least`),
    and the value is below the true one. ``need=0``: always exact."""
    inter = runs_intersect_at_least(va, a0, a1, vb, b0, b1, need)
    union = (a1 - a0) + (b1 - b0) - inter
    j = inter / union if union > 0 else 0.0
    return j, inter >= need


@njit(cache=True)
def jaccard_runs(values, a0, a1, b0, b1, need):
    """:func:`jaccard_of_runs` of two runs of ``values``."""
    return jaccard_of_runs(values, a0, a1, values, b0, b1, need)
