"""Kernels of exact-substring deduplication (Numba ``@njit``).

Units are cut from Arrow's string buffers (``offsets``, ``data``); each
distinct (normalized) unit is hashed (XXH64 with the run's seed,
:func:`string_hashes`), windows of ``L`` units get a polynomial rolling hash
of their units' hashes (:func:`window_hashes`, shared with the device through
:func:`roll_start` and :func:`roll_step`), and windows with equal hashes are
then compared unit hash by unit hash (:func:`distinct_windows`), so a window
hash collision never merges two different windows. That the unit hashes
themselves are collision-free is checked over the run's vocabulary
(``gpu_dedup.engine.substr``).
"""
from __future__ import annotations

import numpy as np

from .jit import njit

from .hashing import U64, xxh64
from .text import next_word, utf8_decode
from .threads import for_range

#: Base of the rolling hash (odd, so multiplication is a bijection mod 2**64).
BASE = U64(0x100000001B3)


@njit(cache=True)
def _put(out_b0, out_b1, out_c0, out_c1, i, b0, b1, c0, c1):
    out_b0[i] = b0
    out_b1[i] = b1
    out_c0[i] = c0
    out_c1[i] = c1


@njit(cache=True)
def _doc_units(data, start, end, word_mode, out_b0, out_b1, out_c0, out_c1, o):
    """Write the units of ``data[start:end]`` from position ``o`` of the
    outputs (byte and code-point bounds; code points from the document's
    start); returns how many (with ``o < 0``: only count them)."""
    count = 0
    p = start
    cp = 0
    if not word_mode:
        while p < end:
            q = p
            c, p = utf8_decode(data, p, end)
            if o >= 0:
                _put(out_b0, out_b1, out_c0, out_c1, o + count, q, p, cp, cp + 1)
            count += 1
            cp += 1
        return count
    while True:
        s, e, c0, cp = next_word(data, p, end, cp)
        if s == e:
            return count
        if o >= 0:
            _put(out_b0, out_b1, out_c0, out_c1, o + count, s, e, c0, cp)
        count += 1
        p = e


def units(offsets, data, word_mode):
    """The units of every document: ``(unit_off, b0, b1, c0, c1)``, the CSR
    over documents and each unit's byte and code-point bounds (code points
    counted from its document's start). Words are maximal runs of
    non-whitespace (Python's ``str.split()``); characters are code points."""
    n = offsets.shape[0] - 1
    word_mode = bool(word_mode)
    cnt = np.zeros(n + 1, np.int64)
    dummy = np.zeros(0, np.int64)
    for_range(_units_of, n, offsets, data, word_mode, dummy, dummy, dummy, dummy, cnt, False,
              grain=1024)
    off = np.cumsum(cnt)
    total = off[n]
    b0 = np.empty(total, np.int64)
    b1 = np.empty(total, np.int64)
    c0 = np.empty(total, np.int64)
    c1 = np.empty(total, np.int64)
    for_range(_units_of, n, offsets, data, word_mode, b0, b1, c0, c1, off, True, grain=1024)
    return off, b0, b1, c0, c1


@njit(cache=True, nogil=True)
def _units_of(offsets, data, word_mode, b0, b1, c0, c1, where, write, d0, d1):
    """Documents ``d0..d1-1`` of :func:`units`: how many units each has
    (into ``where[d + 1]``), or (``write``) their bounds from ``where[d]``."""
    for d in range(d0, d1):
        if write:
            _doc_units(data, offsets[d], offsets[d + 1], word_mode, b0, b1, c0, c1, where[d])
        else:
            where[d + 1] = _doc_units(data, offsets[d], offsets[d + 1], word_mode, b0, b1, c0,
                                      c1, -1)


def string_hashes(offsets, data, seed):
    """XXH64 (seed ``seed``) of every string of an Arrow string array."""
    out = np.empty(offsets.shape[0] - 1, np.uint64)
    for_range(_string_hash_range, out.shape[0], offsets, data, U64(seed), out, grain=1024)
    return out


@njit(cache=True, nogil=True)
def _string_hash_range(offsets, data, seed, out, i0, i1):
    for i in range(i0, i1):
        out[i] = xxh64(data, offsets[i], offsets[i + 1], seed)


@njit(cache=True)
def roll_top(L):
    """``BASE ** (L - 1)``: the weight of a window's first unit."""
    top = U64(1)
    for _ in range(L - 1):
        top = top * BASE
    return top


@njit(cache=True)
def roll_start(uh, u0, L):
    """The hash of the window of ``L`` units from unit ``u0``."""
    x = U64(0)
    for j in range(L):
        x = x * BASE + uh[u0 + j]
    return x


@njit(cache=True)
def roll_step(x, uh, u0, L, top):
    """The hash of the window from ``u0 + 1``, given ``x``, that from ``u0``."""
    return (x - uh[u0] * top) * BASE + uh[u0 + L]


@njit(cache=True)
def window_offsets(unit_off, L):
    """CSR of the windows over documents: ``woff[d]`` is document ``d``'s
    first window (documents shorter than ``L`` units have none)."""
    n = unit_off.shape[0] - 1
    woff = np.zeros(n + 1, np.int64)
    for d in range(n):
        m = unit_off[d + 1] - unit_off[d]
        woff[d + 1] = woff[d] + (m - L + 1 if m >= L else 0)
    return woff


def window_hashes(uh, unit_off, L):
    """The rolling hash of every window of ``L`` units inside one document,
    from the units' hashes ``uh``: ``(hashes, start)``, windows in document
    then position order, ``start`` the index of each window's first unit."""
    n = unit_off.shape[0] - 1
    woff = window_offsets(unit_off, L)
    h = np.empty(woff[n], np.uint64)
    start = np.empty(woff[n], np.int64)
    # roll_top comes back as a Python int: keep it unsigned
    for_range(_window_hash_docs, n, uh, unit_off, L, woff, h, start, U64(roll_top(L)),
              grain=256)
    return h, start


@njit(cache=True, nogil=True)
def _window_hash_docs(uh, unit_off, L, woff, h, start, top, d0, d1):
    for d in range(d0, d1):
        k = woff[d + 1] - woff[d]
        if k <= 0:
            continue
        u0 = unit_off[d]
        x = roll_start(uh, u0, L)
        w = woff[d]
        h[w] = x
        start[w] = u0
        for i in range(1, k):
            x = roll_step(x, uh, u0 + i - 1, L, top)
            h[w + i] = x
            start[w + i] = u0 + i


@njit(cache=True)
def _same(ids, a, b, L):
    for j in range(L):
        if ids[a + j] != ids[b + j]:
            return False
    return True


@njit(cache=True)
def distinct_windows(h_sorted, order, start, ids, L):
    """Each window's first occurrence: ``first[w]`` is the smallest window
    index (document, then position order) whose units (``ids``: their
    hashes, or any exact identities) equal window ``w``'s,
    and ``count[w]`` how many windows equal it (valid at first occurrences).

    ``h_sorted = h[order]``, with ``order`` a stable sort of the hashes:
    windows with one hash come in index order, and each is compared with the
    distinct windows of that hash seen so far (a collision makes two)."""
    W = h_sorted.shape[0]
    first = np.empty(W, np.int64)
    count = np.zeros(W, np.int64)
    reps = np.empty(16, np.int64)
    i = 0
    while i < W:
        j = i
        while j < W and h_sorted[j] == h_sorted[i]:
            j += 1
        nr = 0
        for t in range(i, j):
            w = order[t]
            found = -1
            for r in range(nr):
                if _same(ids, start[reps[r]], start[w], L):
                    found = reps[r]
                    break
            if found < 0:
                if nr == reps.shape[0]:
                    grown = np.empty(2 * nr, np.int64)
                    grown[:nr] = reps[:nr]
                    reps = grown
                reps[nr] = w
                nr += 1
                found = w
            first[w] = found
            count[found] += 1
        i = j
    return first, count
