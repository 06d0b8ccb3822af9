"""Whole-array NumPy stand-in of the classic MinHash kernel
(:func:`kernels.cpu.minhash`), run when the kernels are interpreted
(:func:`kernels.jit.interpreted`): the same signatures, from the shingle
hashes of :func:`kernels.vector_text.shingle_hashes`. No Numba here."""
from __future__ import annotations

import numpy as np

from .vector_text import shingle_hashes

#: Documents a block of the CPU kernels (``kernels.cpu.BLOCK``).
BLOCK = 256
#: Permuted values computed at once (shingles x permutations).
STEP_VALUES = 1 << 21
_ONES = np.uint64(0xFFFFFFFFFFFFFFFF)


def _permuted(h, a, b):
    """``a[k] * h[s] + b[k]`` (mod 2**64), shingles by permutations."""
    with np.errstate(over="ignore"):
        return h[:, None] * a[None, :] + b[None, :]


def minhash_blocks(offsets, data, docs, word_mode, n, a, b, shift, out, counts, b0, b1):
    """:func:`kernels.cpu._minhash_blocks`: rows ``t`` of the blocks ``b0 ..
    b1 - 1`` get ``min_x h_k(x) >> shift`` over the shingles of ``docs[t]``
    (all ones without shingles), ``counts[t]`` their number."""
    lo = int(b0) * BLOCK
    hi = min(docs.shape[0], int(b1) * BLOCK)
    if hi <= lo:
        return
    a = np.asarray(a, np.uint64)
    b = np.asarray(b, np.uint64)
    K = a.shape[0]
    h, _, count = shingle_hashes(offsets, data, docs[lo:hi], word_mode, n)
    counts[lo:hi] = count
    D = hi - lo
    mins = np.full((D, K), _ONES, np.uint64)
    ends = np.cumsum(count)
    starts = ends - count
    step = max(1, STEP_VALUES // max(K, 1))
    d = 0
    while d < D:
        e = max(d + 1, int(np.searchsorted(ends, starts[d] + step, side="right")))
        e = min(e, D)
        s0, s1 = int(starts[d]), int(ends[e - 1])
        if s1 > s0:
            if e - d == 1:                       # one document, in steps
                m = mins[d]
                for s in range(s0, s1, step):
                    m = np.minimum(m, _permuted(h[s:min(s1, s + step)], a, b).min(axis=0))
                mins[d] = m
            else:
                nz = np.flatnonzero(count[d:e])
                v = _permuted(h[s0:s1], a, b)
                mins[d + nz] = np.minimum.reduceat(v, starts[d:e][nz] - s0, axis=0)
        d = e
    out[lo:hi] = (mins >> np.uint64(shift)).astype(out.dtype)
