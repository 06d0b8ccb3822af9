"""XXH64 (:func:`kernels.hashing.xxh64`) of many windows of one buffer at
once, in NumPy: each step of the hash runs across every window, on
``uint64`` arrays whose multiplication wraps around as XXH64 needs. The
whole-array stand-ins of the text kernels (:mod:`kernels.vector_text`) hash
every shingle of a call with it. No Numba here.
"""
from __future__ import annotations

import numpy as np

from .hashing import PRIME64_1, PRIME64_2, PRIME64_3, PRIME64_4, PRIME64_5, U64

_M32 = U64(0xFFFFFFFF)
_M8 = U64(0xFF)


# -- XXH64 ------------------------------------------------------------------------

def _rotl(x, r):
    return (x << U64(r)) | (x >> U64(64 - r))


def _round(acc, lane):
    return _rotl(acc + lane * PRIME64_2, 31) * PRIME64_1


def _merge(h, v):
    return (h ^ _round(U64(0), v)) * PRIME64_1 + PRIME64_4


def _rotl_in(x, r, scratch):
    """``x`` rotated left by ``r`` bits, in place (``scratch``: an array of
    its size)."""
    np.right_shift(x, U64(64 - r), out=scratch)
    x <<= U64(r)
    x |= scratch


def _take_where(mask, new, old):
    """``(np.where(mask, new, old), spare)``: where ``mask`` is all true,
    ``new`` itself, and ``old`` is the spare; else ``old`` updated in place,
    and ``new`` is."""
    if mask.all():
        return new, old
    np.copyto(old, new, where=mask)
    return old, new


def _where(mask, new, old):
    """``np.where(mask, new, old)``, the arrays themselves where ``mask`` is
    all true or all false."""
    if mask.all():
        return new
    if not mask.any():
        return old
    return np.where(mask, new, old)


def _lanes(buf, size):
    """Every 8 bytes of ``buf`` from each of its first ``size`` positions, as
    a little-endian ``uint64`` (a view: ``buf`` must hold ``size + 7``)."""
    return np.ndarray((size,), "<u8", buffer=buf, strides=(1,))


def xxh64_windows(buf, size, start, length, seed=0):
    """XXH64 (``kernels.hashing.xxh64``) of every window ``buf[start[i]:
    start[i] + length[i]]`` of the first ``size`` bytes of ``buf``, which
    must be followed by 40 more (zero) bytes (what the text stand-ins pad
    their buffers with, :data:`kernels.vector_text._PAD`). Each step of the hash
    runs across every window at once: the 32-byte stripes, then the 8-byte,
    4-byte and 1-byte steps of the tail, each on the windows that have it."""
    with np.errstate(over="ignore"):
        w = _lanes(buf, size + 32)
        seed = U64(seed)
        start = np.asarray(start, np.int64)
        length = np.asarray(length, np.int64)
        if start.shape[0] and length.max() < 32:
            # short windows (character shingles): each length on its own,
            # every step on all its windows
            many = np.bincount(length, minlength=32)
            if many.max() == start.shape[0]:
                return _short_windows(w, start, int(length[0]), seed)
            h = np.empty(start.shape[0], np.uint64)
            for n in np.flatnonzero(many).tolist():
                at = np.flatnonzero(length == n)
                h[at] = _short_windows(w, start[at], n, seed)
            return h
        stripes = length >> 5
        h = np.full(start.shape[0], seed + PRIME64_5, np.uint64)
        top = int(stripes.max()) if stripes.shape[0] else 0
        if top:
            big = np.flatnonzero(stripes)
            s0 = start[big]
            ns = stripes[big]
            v = [np.full(big.shape[0], x, np.uint64)
                 for x in (seed + PRIME64_1 + PRIME64_2, seed + PRIME64_2, seed,
                           seed - PRIME64_1)]
            for s in range(top):
                live = ns > s
                pos = np.minimum(s0 + 32 * s, size)
                for j in range(4):
                    v[j] = _where(live, _round(v[j], w[pos + 8 * j]), v[j])
            g = _rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)
            for j in range(4):
                g = _merge(g, v[j])
            h[big] = g
        h += length.astype(np.uint64)
        # the tail's steps and the avalanche in place, in two scratch arrays
        # (a new array a step costs several times the step: fresh pages)
        t = np.empty(h.shape[0], np.uint64)
        r = np.empty(h.shape[0], np.uint64)
        p = start + (stripes << 5)
        rest = length & 31
        eights = rest >> 3
        for j in range(int(eights.max()) if eights.shape[0] else 0):
            np.take(w, p + 8 * j, out=t, mode="clip")
            _step8(t, h, r)
            h, t = _take_where(eights > j, t, h)
        p = p + (eights << 3)
        four = (rest & 4) != 0
        if four.any():
            np.take(w, p, out=t, mode="clip")
            _step4(t, h, r)
            h, t = _take_where(four, t, h)
            p = p + 4 * four.astype(np.int64)
        ones = rest & 3
        for j in range(int(ones.max()) if ones.shape[0] else 0):
            np.take(w, p + j, out=t, mode="clip")
            _step1(t, h, r)
            h, t = _take_where(ones > j, t, h)
        return _avalanche(h, t)


def _step8(t, h, r):
    """An 8-byte step of XXH64's tail: ``t`` (the lane read) becomes the
    new state from ``h``, in place (``r``: scratch)."""
    t *= PRIME64_2
    _rotl_in(t, 31, r)
    t *= PRIME64_1
    t ^= h
    _rotl_in(t, 27, r)
    t *= PRIME64_1
    t += PRIME64_4


def _short_step(t, h, r, mask, mul_in, rot, mul_out, add):
    """The 4-byte or a 1-byte step of the tail (``t``: the 8 bytes read,
    ``mask`` keeping the step's), in place as :func:`_step8`."""
    t &= mask
    t *= mul_in
    t ^= h
    _rotl_in(t, rot, r)
    t *= mul_out
    t += add


def _step4(t, h, r):
    _short_step(t, h, r, _M32, PRIME64_1, 23, PRIME64_2, PRIME64_3)


def _step1(t, h, r):
    _short_step(t, h, r, _M8, PRIME64_5, 11, PRIME64_1, U64(0))


def _avalanche(h, t):
    """XXH64's last mixing of ``h``, in place (``t``: scratch)."""
    for shift, prime in ((33, PRIME64_2), (29, PRIME64_3)):
        np.right_shift(h, U64(shift), out=t)
        h ^= t
        h *= prime
    np.right_shift(h, U64(32), out=t)
    h ^= t
    return h


def _short_windows(w, start, length, seed):
    """:func:`xxh64_windows` of windows of one ``length`` under 32 bytes (the
    character shingles of ASCII text): every step on every window, in place,
    with scalar offsets (``w``: :func:`_lanes` of the buffer)."""
    n = start.shape[0]
    h = np.full(n, seed + PRIME64_5 + U64(length), np.uint64)
    t = np.empty(n, np.uint64)
    r = np.empty(n, np.uint64)
    at = np.empty(n, np.int64)
    off = 0
    for step, times, width in ((_step8, length >> 3, 8), (_step4, (length >> 2) & 1, 4),
                               (_step1, length & 3, 1)):
        for _ in range(times):
            np.add(start, off, out=at)
            np.take(w, at, out=t, mode="clip")
            step(t, h, r)
            h, t = t, h
            off += width
    return _avalanche(h, t)
