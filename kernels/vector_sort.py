"""Whole-array NumPy stand-ins of :mod:`kernels.sorting`, run when the kernels
are interpreted (:func:`kernels.jit.interpreted`): the same results as the
compiled kernels, from NumPy's sort. No Numba here."""
from __future__ import annotations

import numpy as np

from .vector_misc import segment_indices


def sort_inplace(x, n):
    """:func:`kernels.sorting.sort_inplace`: ``x[:n]`` sorted in place."""
    x[:n].sort()


def sorted_unique(x, m):
    """:func:`kernels.sorting.sorted_unique`: ``x[:m]`` sorted, repeats
    dropped, in place; the new length."""
    if m <= 0:
        return 0
    s = np.sort(x[:m])
    keep = np.empty(m, dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    u = s[keep]
    x[:u.shape[0]] = u
    return u.shape[0]


def gather_runs(src, start, out_off, out, i0, i1):
    """:func:`kernels.sorting.gather_runs`: ``out[out_off[i]:out_off[i + 1]]``
    from ``src[start[i]:]``, for ``i`` in ``i0..i1-1``."""
    if i1 <= i0:
        return
    o0, o1 = int(out_off[i0]), int(out_off[i1])
    if o1 <= o0:
        return
    out[o0:o1] = src[segment_indices(start[i0:i1], np.diff(out_off[i0:i1 + 1]))]


def counting_order(keys, off, out):
    """:func:`kernels.sorting._counting_order`: the stable order of ``keys``
    by key, into ``out``."""
    out[:] = np.argsort(keys, kind="stable")
    return out
