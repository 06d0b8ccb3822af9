"""Steps over arrays for the CPU only (Numba ``@njit``): sorting a run of
values in place, and copying runs from one array into another. The loops of
:mod:`kernels.cpu` and :mod:`kernels.greedy` call them.
"""
from __future__ import annotations

import numpy as np

from .jit import njit

from .hashing import U64


@njit(cache=True, stand_in="vector_sort.sort_inplace")
def sort_inplace(x, n):
    """Sort ``x[:n]`` in place (CPU only): insertion sort for short runs;
    longer ones are spread over about ``n`` slots of their range of values
    (one pass: hashes fall one or two a slot), each slot then sorted on its
    own, by insertion when it holds a few values and by heapsort when values
    crowd into it, so skewed values cost ``O(n log n)`` at worst. (Written
    out rather than NumPy's sort, which takes Numba seconds to compile.)"""
    if n <= 32:
        _insertion_sort(x, 0, n)
        return
    lo = x[0]
    hi = x[0]
    for i in range(1, n):
        v = x[i]
        if v < lo:
            lo = v
        elif v > hi:
            hi = v
    if lo == hi:
        return
    span = U64(hi - lo)
    slots = 1
    while slots < n:
        slots *= 2
    shift = U64(0)
    while (span >> shift) >= U64(slots):
        shift += U64(1)
    start = np.zeros(slots + 1, np.int64)
    for i in range(n):
        start[np.int64(U64(x[i] - lo) >> shift) + 1] += 1
    for b in range(slots):
        start[b + 1] += start[b]
    fill = start[:slots].copy()
    tmp = np.empty(n, x.dtype)
    for i in range(n):
        b = np.int64(U64(x[i] - lo) >> shift)
        tmp[fill[b]] = x[i]
        fill[b] += 1
    for b in range(slots):
        a = start[b]
        e = start[b + 1]
        if e - a > 32:
            _heap_sort(tmp, a, e)
        elif e - a > 1:
            _insertion_sort(tmp, a, e)
    for i in range(n):
        x[i] = tmp[i]


@njit(cache=True)
def _heap_sort(x, a, e):
    """Sort ``x[a:e]`` in place by heapsort."""
    m = e - a
    for root in range(m // 2 - 1, -1, -1):
        _sift_down(x, a, root, m)
    for end in range(m - 1, 0, -1):
        v = x[a]
        x[a] = x[a + end]
        x[a + end] = v
        _sift_down(x, a, 0, end)


@njit(cache=True)
def _sift_down(x, a, root, m):
    """Move ``x[a + root]`` down the max-heap ``x[a:a + m]`` to its place."""
    v = x[a + root]
    while True:
        child = 2 * root + 1
        if child >= m:
            break
        if child + 1 < m and x[a + child + 1] > x[a + child]:
            child += 1
        if x[a + child] <= v:
            break
        x[a + root] = x[a + child]
        root = child
    x[a + root] = v


@njit(cache=True)
def _insertion_sort(x, a, e):
    """Sort ``x[a:e]`` in place by insertion."""
    for i in range(a + 1, e):
        v = x[i]
        j = i - 1
        while j >= a and x[j] > v:
            x[j + 1] = x[j]
            j -= 1
        x[j + 1] = v


@njit(cache=True, stand_in="vector_sort.sorted_unique")
def sorted_unique(x, m):
    """Sort ``x[:m]`` in place and drop repeats; returns the new length
    (CPU only)."""
    sort_inplace(x, m)
    k = 0
    for i in range(m):
        if k == 0 or x[i] != x[k - 1]:
            x[k] = x[i]
            k += 1
    return k


@njit(cache=True, nogil=True, stand_in="vector_sort.gather_runs")
def gather_runs(src, start, out_off, out, i0, i1):
    """``out[out_off[i]:out_off[i + 1]]`` = the same number of items of
    ``src`` from ``start[i]``, for ``i`` in ``i0..i1-1``."""
    for i in range(i0, i1):
        o = out_off[i]
        s = start[i]
        for j in range(out_off[i + 1] - o):
            out[o + j] = src[s + j]


def counting_order(keys, off):
    """The stable order of ``keys`` (integers ``0 .. n - 1``) by key, given
    ``off`` (``n + 1`` entries: where each key's run starts in the order,
    the cumulative sum of the keys' counts): ``np.argsort(keys,
    kind="stable")`` in one pass of ``O(len(keys) + n)``."""
    out = np.empty(keys.shape[0], np.int64)
    _counting_order(keys, off, out)
    return out


@njit(cache=True, nogil=True, stand_in="vector_sort.counting_order")
def _counting_order(keys, off, out):
    at = off[:-1].copy()
    for i in range(keys.shape[0]):
        k = keys[i]
        out[at[k]] = i
        at[k] += 1
    return out
