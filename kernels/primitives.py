"""The per-document and per-pair steps every backend runs, written once.

Each function here is a Numba ``@njit`` function over arrays and integers:
the CPU loops (:mod:`kernels.cpu`, :mod:`kernels.greedy`, run on several
threads by :func:`kernels.threads.for_range`) call them, and the CUDA kernels (:mod:`kernels.cuda_kernels`) call the
very same functions, which Numba compiles for the device (the simulator runs
their Python twins, :mod:`kernels.simulator`). What differs between the two
targets is only how the work is spread: a thread per document or a thread
block per document on the device, blocks of documents per CPU thread.

Text comes as ``data[start:end]`` (UTF-8 bytes, see :mod:`kernels.text`);
hashes are those of :mod:`kernels.hashing`. Sorting, for the CPU only, is in
:mod:`kernels.sorting`.
"""
from __future__ import annotations

import numpy as np

from .jit import njit

from .hashing import (PRIME64_5, U64, band_key_start, band_key_step, permute, xxh64,
                      xxh_avalanche, xxh_tail1, xxh_tail4, xxh_tail8)
from .text import next_word, utf8_decode

SEED0 = U64(0)
_S32 = U64(32)
_M32 = U64(0xFFFFFFFF)


@njit(cache=True)
def smaller(a, b):
    """``min(a, b)``: the builtin does not compile for the CUDA target on
    every pair of integer types."""
    return a if a < b else b


# -- shingles -------------------------------------------------------------------

@njit(cache=True)
def doc_shingle_hashes(data, start, end, word_mode, n, pos_a, pos_b, scratch, out):
    """Write the base hash of every shingle of ``data[start:end]`` into ``out``.

    Returns the number written (shingles are not yet de-duplicated).
    ``pos_a``, ``pos_b`` and ``scratch`` are work buffers of at least
    ``end - start + 1`` elements. A character shingle is ``n`` code points
    (the whole text when it has fewer); a word shingle is ``n`` words
    (:func:`kernels.text.next_word`; all of them when there are fewer)
    joined by one space.
    """
    if end <= start:
        return 0
    if not word_mode:
        # pos_a: byte offset of each code point start, plus the end
        m = 0
        p = start
        while p < end:
            pos_a[m] = p
            m += 1
            c, p = utf8_decode(data, p, end)
        pos_a[m] = end
        if m < n:
            out[0] = xxh64(data, start, end, SEED0)
            return 1
        cnt = m - n + 1
        for i in range(cnt):
            out[i] = xxh64(data, pos_a[i], pos_a[i + n], SEED0)
        return cnt
    # word mode: pos_a and pos_b, the byte bounds of each word
    t = 0
    p = start
    cp = 0
    while True:
        s, e, c0, cp = next_word(data, p, end, cp)
        if s == e:
            break
        pos_a[t] = s
        pos_b[t] = e
        t += 1
        p = e
    if t == 0:
        return 0
    g = n if t >= n else t
    cnt = t - g + 1
    for i in range(cnt):
        # contiguous in place when the tokens are separated by single spaces
        contiguous = True
        for j in range(i, i + g - 1):
            if pos_a[j + 1] != pos_b[j] + 1 or data[pos_b[j]] != 32:
                contiguous = False
                break
        if contiguous:
            out[i] = xxh64(data, pos_a[i], pos_b[i + g - 1], SEED0)
        else:
            L = 0
            for j in range(i, i + g):
                if j > i:
                    scratch[L] = 32
                    L += 1
                for q in range(pos_a[j], pos_b[j]):
                    scratch[L] = data[q]
                    L += 1
            out[i] = xxh64(scratch, 0, L, SEED0)
    return cnt


# -- signatures -----------------------------------------------------------------

@njit(cache=True)
def _group_of_four(a, b, k0, stride):
    """The permutations folded together in :func:`fold_minima` and
    :func:`fold_minima_top32`, ``k0 + j * stride`` (``j < 4``): the three
    indices after ``k0``, then ``a`` and ``b`` of all four."""
    k1 = k0 + stride
    k2 = k1 + stride
    k3 = k2 + stride
    return k1, k2, k3, a[k0], a[k1], a[k2], a[k3], b[k0], b[k1], b[k2], b[k3]


@njit(cache=True)
def fold_minima(hashes, cnt, a, b, row, first, stride):
    """Fold the base hashes ``hashes[:cnt]`` into ``row``:
    ``row[k] = min(row[k], min_s permute(a[k], hashes[s], b[k]))`` for the
    permutations ``k = first, first + stride, ...`` of ``a``.

    In each group of ``4 * stride`` permutations the four ``first + j *
    stride`` (``j < 4``) are folded together, two shingles at a time: eight
    independent minima in registers, which is faster than vectorising over
    ``k``; the last, partial group one permutation at a time. The CPU folds
    a whole row (``first=0``, ``stride=1``); a thread of a CUDA block its share
    (its index, the block's size). The minima are 64-bit whatever ``row``.
    """
    K = a.shape[0]
    for g in range(0, K, 4 * stride):
        k0 = g + first
        if k0 + 3 * stride < K:
            k1, k2, k3, a0, a1, a2, a3, b0, b1, b2, b3 = _group_of_four(a, b, k0, stride)
            m0 = U64(row[k0])
            m1 = U64(row[k1])
            m2 = U64(row[k2])
            m3 = U64(row[k3])
            n0 = m0
            n1 = m1
            n2 = m2
            n3 = m3
            s = 0
            while s + 1 < cnt:
                x = hashes[s]
                y = hashes[s + 1]
                m0 = min(m0, permute(a0, x, b0))
                m1 = min(m1, permute(a1, x, b1))
                m2 = min(m2, permute(a2, x, b2))
                m3 = min(m3, permute(a3, x, b3))
                n0 = min(n0, permute(a0, y, b0))
                n1 = min(n1, permute(a1, y, b1))
                n2 = min(n2, permute(a2, y, b2))
                n3 = min(n3, permute(a3, y, b3))
                s += 2
            if s < cnt:
                x = hashes[s]
                m0 = min(m0, permute(a0, x, b0))
                m1 = min(m1, permute(a1, x, b1))
                m2 = min(m2, permute(a2, x, b2))
                m3 = min(m3, permute(a3, x, b3))
            row[k0] = min(m0, n0)
            row[k1] = min(m1, n1)
            row[k2] = min(m2, n2)
            row[k3] = min(m3, n3)
        else:
            for k in range(k0, K, stride):
                ak = a[k]
                bk = b[k]
                m = U64(row[k])
                for s in range(cnt):
                    m = min(m, permute(ak, hashes[s], bk))
                row[k] = m


@njit(cache=True)
def top32(alo, ahi, b, xlo, xhi):
    """Top 32 bits of ``permute(a, x, b)`` from the 32-bit halves of ``a``
    and ``x``: ``hi32(alo * xlo + b) + alo * xhi + ahi * xlo (mod 2**32)``.
    Only the low 32 bits of the last two products are used, so the device
    code multiplies them in 32 bits."""
    t = np.uint32((np.uint64(alo) * np.uint64(xlo) + b) >> _S32)
    t = np.uint32(t + alo * xhi)
    return np.uint32(t + ahi * xlo)


@njit(cache=True)
def fold_minima_top32(hashes, cnt, a, b, row, first, stride):
    """As :func:`fold_minima` for a 32-bit signature row, on the top 32 bits
    of each permuted hash (``min(h >> 32) == min(h) >> 32``), each from
    :func:`top32`.

    A GPU multiplies 64-bit integers in several 32-bit steps; here a value
    costs one 32x32->64-bit multiply-add (with ``b`` as the addend, of which
    only the high word is kept) and two 32-bit multiply-adds, ``a`` being
    split into halves once per group and each shingle once per step. The
    CUDA kernels take 32-bit signatures this way; the CPU, whose 64-bit
    multiply is one instruction, takes :func:`fold_minima` and shifts: the
    values are equal.
    """
    K = a.shape[0]
    for g in range(0, K, 4 * stride):
        k0 = g + first
        if k0 + 3 * stride < K:
            k1, k2, k3, a0, a1, a2, a3, b0, b1, b2, b3 = _group_of_four(a, b, k0, stride)
            l0 = np.uint32(a0 & _M32)
            l1 = np.uint32(a1 & _M32)
            l2 = np.uint32(a2 & _M32)
            l3 = np.uint32(a3 & _M32)
            h0 = np.uint32(a0 >> _S32)
            h1 = np.uint32(a1 >> _S32)
            h2 = np.uint32(a2 >> _S32)
            h3 = np.uint32(a3 >> _S32)
            m0 = np.uint32(row[k0])
            m1 = np.uint32(row[k1])
            m2 = np.uint32(row[k2])
            m3 = np.uint32(row[k3])
            s = 0
            while s + 1 < cnt:
                x = hashes[s]
                y = hashes[s + 1]
                xl = np.uint32(x & _M32)
                xh = np.uint32(x >> _S32)
                yl = np.uint32(y & _M32)
                yh = np.uint32(y >> _S32)
                m0 = min(m0, top32(l0, h0, b0, xl, xh), top32(l0, h0, b0, yl, yh))
                m1 = min(m1, top32(l1, h1, b1, xl, xh), top32(l1, h1, b1, yl, yh))
                m2 = min(m2, top32(l2, h2, b2, xl, xh), top32(l2, h2, b2, yl, yh))
                m3 = min(m3, top32(l3, h3, b3, xl, xh), top32(l3, h3, b3, yl, yh))
                s += 2
            if s < cnt:
                x = hashes[s]
                xl = np.uint32(x & _M32)
                xh = np.uint32(x >> _S32)
                m0 = min(m0, top32(l0, h0, b0, xl, xh))
                m1 = min(m1, top32(l1, h1, b1, xl, xh))
                m2 = min(m2, top32(l2, h2, b2, xl, xh))
                m3 = min(m3, top32(l3, h3, b3, xl, xh))
            row[k0] = m0
            row[k1] = m1
            row[k2] = m2
            row[k3] = m3
        else:
            for k in range(k0, K, stride):
                ak = a[k]
                bk = b[k]
                m = np.uint32(row[k])
                for s in range(cnt):
                    m = min(m, np.uint32(permute(ak, hashes[s], bk) >> _S32))
                row[k] = m


@njit(cache=True)
def band_key(sig, i, j, rows):
    """The 64-bit key of band ``j`` of signature ``i``: its rows
    ``j * rows .. (j + 1) * rows - 1`` (see :mod:`kernels.hashing`)."""
    key = band_key_start(j)
    base = j * rows
    for r in range(rows):
        key = band_key_step(key, sig[i, base + r])
    return key


@njit(cache=True)
def agreement(sig, x, y):
    """The share of equal values in signatures ``x`` and ``y`` (the MinHash
    estimate of their Jaccard)."""
    K = sig.shape[1]
    c = 0
    for k in range(K):
        if sig[x, k] == sig[y, k]:
            c += 1
    return c / K


# -- ASCII text, the CPU's fast path ----------------------------------------------
#
# Most text is ASCII, where a character shingle of ``n`` code points is ``n``
# bytes at every position. The CPU then hashes all positions of a document
# at once, a step of XXH64 at a time over every position, in loops without
# branches that the compiler runs in vector registers: the same values as
# ``xxh64`` one shingle at a time (the tests compare them), several times
# faster. Text that is mostly ASCII (English with a curly quote, an accented
# name) takes those hashes for its shingles without a multi-byte character
# and hashes the others one at a time. The GPU hashes a shingle per thread
# and does not need this.

@njit(cache=True)
def _byte_words(d, w):
    """``w[j]``: the eight bytes of ``d`` from ``j`` (little endian), zeros
    past its end."""
    m = d.shape[0]
    full = max(m - 7, 0)
    for j in range(full):
        w[j] = (U64(d[j]) | (U64(d[j + 1]) << U64(8)) | (U64(d[j + 2]) << U64(16))
                | (U64(d[j + 3]) << U64(24)) | (U64(d[j + 4]) << U64(32))
                | (U64(d[j + 5]) << U64(40)) | (U64(d[j + 6]) << U64(48))
                | (U64(d[j + 7]) << U64(56)))
    for j in range(full, m):
        v = U64(0)
        for k in range(m - j):
            v |= U64(d[j + k]) << U64(8 * k)
        w[j] = v


@njit(cache=True)
def ascii_char_hashes(data, start, end, n, words, out):
    """The base hashes of the character ``n``-grams of the ASCII text
    ``data[start:end]`` (``n <= end - start``, ``n < 32``) into ``out``, as
    :func:`doc_shingle_hashes` writes them; ``words`` is scratch of at least
    ``end - start`` uint64. Returns their number. CPU only. (On other text,
    the XXH64 of the ``n`` bytes at every position.)"""
    m = end - start
    w = words[:m]
    _byte_words(data[start:end], w)
    cnt = m - n + 1
    h = out[:cnt]
    start_value = PRIME64_5 + U64(n)
    for i in range(cnt):
        h[i] = start_value
    # XXH64 of fewer than 32 bytes (its tail steps): 8-byte lanes, a 4-byte
    # lane, bytes, each across every position
    o = 0
    while o + 8 <= n:
        lane = w[o:o + cnt]
        for i in range(cnt):
            h[i] = xxh_tail8(h[i], lane[i])
        o += 8
    if o + 4 <= n:
        lane = w[o:o + cnt]
        for i in range(cnt):
            h[i] = xxh_tail4(h[i], lane[i] & _M32)
        o += 4
    while o < n:
        lane = w[o:o + cnt]
        for i in range(cnt):
            h[i] = xxh_tail1(h[i], lane[i] & U64(0xFF))
        o += 1
    for i in range(cnt):
        h[i] = xxh_avalanche(h[i])
    return cnt


@njit(cache=True)
def high_bytes(data, start, end):
    """How many bytes of ``data[start:end]`` are above 127 (no branch)."""
    d = data[start:end]
    acc = 0
    for j in range(d.shape[0]):
        acc += np.int64(d[j] >> 7)
    return acc


@njit(cache=True)
def utf8_starts(d, pos):
    """The code points of the bytes ``d`` as :func:`kernels.text.utf8_decode`
    steps over them, found without stepping: where ``d`` is UTF-8 whose
    every sequence is as long as its first byte says (each continuation
    byte is one that an earlier first byte claims, and the last sequence
    ends in ``d``), the code points start at the bytes that are not
    continuation bytes. Their byte offsets go into ``pos`` (at least
    ``d.shape[0] + 1`` entries), then ``d.shape[0]``; returns their number,
    or -1 where ``d`` is not such UTF-8 (and ``pos`` is scratch)."""
    m = d.shape[0]
    # a byte is claimed by the first byte of a sequence of 2 (0xC0 on), 3
    # (0xE0 on) or 4 (0xF0 on) bytes just before it: claimed exactly when
    # it is a continuation byte, for every byte (vector registers, bytes:
    # the shifted views index from 0, so no index is tested for wrapping)
    bad = np.uint8(0)
    for j in range(min(m, 3)):
        claimed = (j >= 1 and d[j - 1] >= 0xC0) or (j >= 2 and d[j - 2] >= 0xE0)
        bad |= np.uint8(((d[j] & 0xC0) == 0x80) != claimed)
    if m > 3:
        d1, d2, d3, dx = d[2:m - 1], d[1:m - 2], d[0:m - 3], d[3:m]
        for j in range(dx.shape[0]):
            claimed = (np.uint8(d1[j] >= 0xC0) | np.uint8(d2[j] >= 0xE0)
                       | np.uint8(d3[j] >= 0xF0))
            bad |= np.uint8((dx[j] & 0xC0) == 0x80) ^ claimed
    # and no sequence runs past the end
    if m and (d[m - 1] >= 0xC0 or (m >= 2 and d[m - 2] >= 0xE0)
              or (m >= 3 and d[m - 3] >= 0xF0)):
        bad = np.uint8(1)
    if bad:
        return -1
    k = 0
    for j in range(m):
        pos[k] = j
        k += np.int64((d[j] & 0xC0) != 0x80)
    pos[k] = m
    return k


@njit(cache=True)
def mixed_char_hashes(data, start, end, n, pos, at, words, out):
    """The base hashes of the character ``n``-grams (``n < 32``) of the text
    ``data[start:end]``, mostly ASCII, into ``out``, as
    :func:`doc_shingle_hashes` writes them: each shingle of ``n`` bytes (no
    multi-byte character in it) from :func:`ascii_char_hashes` of every
    position, the others one at a time. ``pos`` (int64), ``at`` and
    ``words`` (uint64): scratch of at least ``end - start + 1``. Returns
    their number, or -1 where the text is not UTF-8 as
    :func:`utf8_starts` takes it. CPU only."""
    m = end - start
    k = utf8_starts(data[start:end], pos)
    if k < 0:
        return -1
    if k < n:
        out[0] = xxh64(data, start, end, SEED0)
        return 1
    ascii_char_hashes(data, start, end, n, words, at)
    cnt = k - n + 1
    ends = pos[n:n + cnt]
    for i in range(cnt):
        a = pos[i]
        b = ends[i]
        # (unsigned: no test of the index for wrapping around)
        out[i] = at[U64(a)] if b - a == n else xxh64(data, start + a, start + b, SEED0)
    return cnt


# -- bounds on Jaccard ------------------------------------------------------------
#
# A document's *bound row* answers "can these two documents reach Jaccard t?"
# without their shingle sets: its distinct shingle hashes counted by their top
# bits into bins (one byte each, 255 meaning 255 or more, packed four to a
# uint32 word), then its number of distinct shingles. Two sets meet only
# inside a bin, so their intersection is at most the sum over bins of the
# smaller count, and their Jaccard at most that sum over the sizes' total
# less it. A row of ``W`` words has ``(W - 1) * 4`` bins, a power of two
# from BOUND_BINS on: every row of a run has the same width, chosen for the
# corpus (:func:`gpu_dedup.engine.bounds.bound_words`). Two unrelated sets
# of ``N`` shingles spread over ``B`` bins differ by about ``sqrt(N / B)``
# in a bin, so the bound falls below a high threshold only while ``B`` is
# a fair share of ``N``: 64 bins for short texts, more for long ones.

#: The fewest bins of a bound row, and the words of such a row.
BOUND_BINS = 64
BOUND_WORDS = BOUND_BINS // 4 + 1
#: The most bins of a bound row.
MAX_BOUND_BINS = 4096


def bound_row_words(bins: int) -> int:
    """The words of a bound row of ``bins`` bins."""
    return int(bins) // 4 + 1


def is_bound_width(words: int) -> bool:
    """Whether rows of ``words`` words are bound rows: a power of two of
    bins from :data:`BOUND_BINS` to :data:`MAX_BOUND_BINS`."""
    bins = (int(words) - 1) * 4
    return BOUND_BINS <= bins <= MAX_BOUND_BINS and bins & (bins - 1) == 0


@njit(cache=True)
def bound_shift(words):
    """The shift that takes a hash to its bin in rows of ``words`` words:
    64 less the bits of the number of bins."""
    bins = (words - 1) * 4
    bits = 0
    while (1 << bits) < bins:
        bits += 1
    return U64(64 - bits)


@njit(cache=True)
def bound_scratch(cap):
    """Work buffers of :func:`bound_row` for up to ``cap`` shingles: the
    slots of a hash table of at least twice as many, and their flags."""
    size = 2
    while size < 2 * cap:
        size *= 2
    return np.empty(size, np.uint64), np.empty(size, np.uint8)


@njit(cache=True)
def bound_row(hashes, cnt, slots, used, row):
    """The bound row (``row``: its words, see above) of the ``cnt``
    shingle hashes ``hashes[:cnt]`` (not de-duplicated: a hash table of
    ``slots`` and ``used``, from :func:`bound_scratch`, finds the distinct
    ones)."""
    words = row.shape[0]
    shift = bound_shift(words)
    size = 2
    while size < 2 * cnt:
        size *= 2
    mask = U64(size - 1)
    for i in range(size):
        used[i] = 0
    for w in range(words):
        row[w] = 0
    distinct = 0
    for j in range(cnt):
        h = U64(hashes[j])
        i = np.int64(h & mask)
        new = True
        while used[i]:
            if slots[i] == h:
                new = False
                break
            i = np.int64((U64(i) + U64(1)) & mask)
        if new:
            used[i] = 1
            slots[i] = h
            distinct += 1
            b = np.int64(h >> shift)
            w = b >> 2
            sh = np.uint32((b & 3) * 8)
            if ((row[w] >> sh) & np.uint32(255)) < np.uint32(255):
                row[w] += np.uint32(1) << sh
    row[words - 1] = np.uint32(distinct)


@njit(cache=True)
def jaccard_upper(ca, cb, sa, sb):
    """An upper bound on the Jaccard of two sets from their bound rows'
    byte counts ``ca``, ``cb`` (the bins, uint8 each) and distinct
    counts ``sa``, ``sb``: at least their exact Jaccard as
    :func:`kernels.runs.jaccard_of_runs` computes it (the same division, of a larger
    intersection by the same union less the difference); infinity when the
    rows cannot bound it (a bin full in both, or no union left). The loop
    has no branch, so that it runs across the bins in vector registers."""
    inter = 0
    full = 0
    for k in range(ca.shape[0]):
        x = np.int32(ca[k])
        y = np.int32(cb[k])
        inter += smaller(x, y)
        full |= ((x & y) + 1) >> 8          # 1 when both are 255
    union = np.int64(sa) + np.int64(sb) - inter
    if full or union <= 0:
        return np.inf
    return inter / union
