"""CPU kernels: Numba ``@njit`` over Arrow string buffers and signature matrices.

Text arrives as Arrow's two buffers: ``offsets`` (``int64``, one more than
the number of documents) and ``data`` (the concatenated UTF-8 bytes). Every
kernel works per document in parallel (``prange``) with no Python objects.
The hash functions themselves live in :mod:`kernels.hashing`.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from .greedy import find_sorted
from .hashing import (GOLDEN, OPH_PROBES, U64, band_key_start, band_key_step, fmix64,
                      is_space, oph_probes, oph_row, permute, utf8_decode, xxh64)

SEED0 = U64(0)
BLOCK = 256


@njit(cache=True)
def doc_shingle_hashes(data, start, end, word_mode, n, pos_a, pos_b, scratch, out):
    """Write the base hash of every shingle of ``data[start:end]`` into ``out``.

    Returns the number written (shingles are not yet de-duplicated).
    ``pos_a``, ``pos_b`` and ``scratch`` are work buffers of at least
    ``end - start + 1`` elements.
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
    # word mode: tokens are maximal runs of non-space code points
    t = 0
    p = start
    in_tok = False
    while p < end:
        q = p
        c, p = utf8_decode(data, p, end)
        if is_space(c):
            if in_tok:
                pos_b[t] = q
                t += 1
                in_tok = False
        elif not in_tok:
            pos_a[t] = q
            in_tok = True
    if in_tok:
        pos_b[t] = end
        t += 1
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


@njit(cache=True, inline="always")
def _block_scratch(offsets, docs, lo, hi):
    """Work buffers of :func:`doc_shingle_hashes` for documents ``docs[lo:hi]``
    (``pos_a``, ``pos_b``, ``scratch``, ``hashes``), sized for the longest."""
    cap = 1
    for t in range(lo, hi):
        d = offsets[docs[t] + 1] - offsets[docs[t]] + 1
        if d > cap:
            cap = d
    return (np.empty(cap, np.int64), np.empty(cap, np.int64), np.empty(cap, np.uint8),
            np.empty(cap, np.uint64))


@njit(cache=True, inline="always")
def _minima(hashes, cnt, a, b, mins):
    """``mins[k] = min over s < cnt of permute(a[k], hashes[s], b[k])``.

    Four permutations times two shingles at a time keep eight independent
    minima in registers, which is faster here than vectorising over ``k``.
    """
    K = a.shape[0]
    k = 0
    top = ~U64(0)
    while k + 4 <= K:
        a0 = a[k]
        a1 = a[k + 1]
        a2 = a[k + 2]
        a3 = a[k + 3]
        b0 = b[k]
        b1 = b[k + 1]
        b2 = b[k + 2]
        b3 = b[k + 3]
        m0 = top
        m1 = top
        m2 = top
        m3 = top
        n0 = top
        n1 = top
        n2 = top
        n3 = top
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
        mins[k] = min(m0, n0)
        mins[k + 1] = min(m1, n1)
        mins[k + 2] = min(m2, n2)
        mins[k + 3] = min(m3, n3)
        k += 4
    while k < K:
        m0 = top
        for s in range(cnt):
            m0 = min(m0, permute(a[k], hashes[s], b[k]))
        mins[k] = m0
        k += 1


@njit(parallel=True, cache=True)
def minhash(offsets, data, docs, word_mode, n, a, b, shift, out, counts):
    """Signatures of the documents ``docs`` (indices into ``offsets``).

    Row ``t`` of ``out`` gets ``min_x h_k(x) >> shift`` over the shingles of
    document ``docs[t]``; ``counts[t]`` gets its number of shingles. ``out`` is
    ``uint32`` (``shift=32``) or ``uint64`` (``shift=0``). A document without
    shingles gets all ones (the largest value).
    """
    D = docs.shape[0]
    K = a.shape[0]
    nblocks = (D + BLOCK - 1) // BLOCK
    sh = U64(shift)
    for blk in prange(nblocks):
        lo = blk * BLOCK
        hi = min(D, lo + BLOCK)
        pos_a, pos_b, scratch, hashes = _block_scratch(offsets, docs, lo, hi)
        mins = np.empty(K, np.uint64)
        for t in range(lo, hi):
            i = docs[t]
            cnt = doc_shingle_hashes(data, offsets[i], offsets[i + 1], word_mode, n,
                                     pos_a, pos_b, scratch, hashes)
            counts[t] = cnt
            _minima(hashes, cnt, a, b, mins)
            if cnt == 0:
                for k in range(K):
                    out[t, k] = ~U64(0) >> sh
            else:
                for k in range(K):
                    out[t, k] = mins[k] >> sh


@njit(parallel=True, cache=True)
def oph_minhash(offsets, data, docs, word_mode, n, p, q, shift, out, counts):
    """One-permutation sketches (``kernels.hashing.oph_row``) of the documents
    ``docs``, as :func:`minhash` writes signatures: ``out`` is ``uint32``
    (``shift=32``) or ``uint64`` (``shift=0``), all ones for a document
    without shingles; ``counts[t]`` gets its number of shingles."""
    D = docs.shape[0]
    K = out.shape[1]
    nblocks = (D + BLOCK - 1) // BLOCK
    sh = U64(shift)
    probes = np.empty((K, OPH_PROBES), np.int64)
    oph_probes(q, K, probes)
    for blk in prange(nblocks):
        lo = blk * BLOCK
        hi = min(D, lo + BLOCK)
        pos_a, pos_b, scratch, hashes = _block_scratch(offsets, docs, lo, hi)
        filled = np.empty((K + 63) // 64, np.uint64)
        for t in range(lo, hi):
            i = docs[t]
            cnt = doc_shingle_hashes(data, offsets[i], offsets[i + 1], word_mode, n,
                                     pos_a, pos_b, scratch, hashes)
            counts[t] = cnt
            if cnt == 0:
                for k in range(K):
                    out[t, k] = ~U64(0) >> sh
            else:
                oph_row(hashes, cnt, p, q, sh, probes, out[t], filled)


@njit(parallel=True, cache=True)
def band_keys(sig, bands, rows, out):
    """``out[i, j]`` = 64-bit key of rows ``j*rows .. (j+1)*rows-1`` of ``sig[i]``."""
    N = sig.shape[0]
    for i in prange(N):
        for j in range(bands):
            key = band_key_start(j)
            base = j * rows
            for r in range(rows):
                key = band_key_step(key, sig[i, base + r])
            out[i, j] = key


@njit(cache=True, inline="always")
def _bucket_table(n):
    """An empty open-addressing table for ``n`` keys: keys, and heads (-1)."""
    size = 1
    while size < 2 * n + 2:
        size <<= 1
    return np.empty(size, np.uint64), np.full(size, -1, np.int64)


@njit(cache=True, inline="always")
def _bucket_slot(tab_key, tab_head, k):
    """The slot of key ``k`` in an open-addressing table of a power-of-two
    size: where it is, or the empty slot (``tab_head < 0``) it goes in."""
    size = tab_key.shape[0]
    slot = np.int64((k ^ (k >> U64(29))) & U64(size - 1))
    while tab_head[slot] >= 0 and tab_key[slot] != k:
        slot = (slot + 1) & np.int64(size - 1)
    return slot


@njit(parallel=True, cache=True)
def segment_bucket_edges(keys, docs, seg):
    """Candidate edges of the buckets of several key segments, packed
    ``a << 32 | b`` (``a < b``), sorted and unique.

    ``keys[seg[j]:seg[j+1]]`` are the keys of segment ``j`` (one band, or one
    key partition of one band) and ``docs`` the matching document positions,
    ascending within each segment; an empty ``docs`` means position
    ``i - seg[j]``. Within a segment a bucket's members, in order, are
    ``m0 < m1 < ... < mk``; it gives the *anchor edges* ``(m0, mi)`` and the
    *chain edges* ``(m(i-1), mi)``: at most ``2k`` edges, never all pairs.
    """
    g = seg.shape[0] - 1
    total = seg[g]
    out = np.empty(2 * total, np.uint64)
    counts = np.zeros(max(g, 1), np.int64)
    implicit = docs.shape[0] == 0
    for j in prange(g):
        lo = seg[j]
        hi = seg[j + 1]
        tab_key, tab_first = _bucket_table(hi - lo)
        tab_last = np.empty(tab_key.shape[0], np.int64)
        m = 0
        base = 2 * lo
        for i in range(lo, hi):
            k = keys[i]
            d = i - lo if implicit else docs[i]
            slot = _bucket_slot(tab_key, tab_first, k)
            a = tab_first[slot]
            if a < 0:
                tab_first[slot] = d
                tab_last[slot] = d
                tab_key[slot] = k
            else:
                out[base + m] = (U64(a) << U64(32)) | U64(d)
                m += 1
                last = tab_last[slot]
                if last != a:
                    out[base + m] = (U64(last) << U64(32)) | U64(d)
                    m += 1
                tab_last[slot] = d
        counts[j] = m
    n_out = 0
    for j in range(g):
        n_out += counts[j]
    packed = np.empty(n_out, np.uint64)
    p = 0
    for j in range(g):
        b0 = 2 * seg[j]
        for e in range(counts[j]):
            packed[p] = out[b0 + e]
            p += 1
    return np.unique(packed)


@njit(parallel=True, cache=True)
def segment_buckets(keys, docs, seg):
    """The buckets of two or more members of several key segments.

    Arguments as for :func:`segment_bucket_edges`. Returns ``(off, members)``:
    int64 bucket boundaries and the int64 member positions of each bucket,
    ascending; buckets in order of segment, then of first member.
    """
    g = seg.shape[0] - 1
    lo0 = seg[0] if g >= 0 else 0
    total = seg[g] - lo0 if g >= 0 else 0
    out_mem = np.empty(max(total, 1), np.int64)
    out_size = np.empty(max(total, 1), np.int64)
    n_mem = np.zeros(max(g, 1), np.int64)
    n_bkt = np.zeros(max(g, 1), np.int64)
    implicit = docs.shape[0] == 0
    for j in prange(g):
        lo = seg[j]
        hi = seg[j + 1]
        n = hi - lo
        tab_key, tab_id = _bucket_table(n)
        local = np.empty(max(n, 1), np.int64)
        cnt = np.zeros(max(n, 1), np.int64)
        nb = 0
        for i in range(lo, hi):
            k = keys[i]
            slot = _bucket_slot(tab_key, tab_id, k)
            b = tab_id[slot]
            if b < 0:
                tab_id[slot] = nb
                tab_key[slot] = k
                b = nb
                nb += 1
            local[i - lo] = b
            cnt[b] += 1
        pos = np.empty(max(nb, 1), np.int64)
        p = 0
        nbig = 0
        base = lo - lo0
        for b in range(nb):
            if cnt[b] >= 2:
                pos[b] = p
                p += cnt[b]
                out_size[base + nbig] = cnt[b]
                nbig += 1
            else:
                pos[b] = -1
        for i in range(lo, hi):
            b = local[i - lo]
            if pos[b] >= 0:
                out_mem[base + pos[b]] = i - lo if implicit else docs[i]
                pos[b] += 1
        n_mem[j] = p
        n_bkt[j] = nbig
    m_total = 0
    b_total = 0
    for j in range(g):
        m_total += n_mem[j]
        b_total += n_bkt[j]
    members = np.empty(m_total, np.int64)
    off = np.zeros(b_total + 1, np.int64)
    m = 0
    q = 0
    for j in range(g):
        base = seg[j] - lo0
        for e in range(n_mem[j]):
            members[m + e] = out_mem[base + e]
        m += n_mem[j]
        for e in range(n_bkt[j]):
            off[q + 1] = off[q] + out_size[base + e]
            q += 1
    return off, members


@njit(parallel=True, cache=True)
def bucket_hashes(off, members):
    """Two 64-bit hashes of each bucket's member list (its size included),
    to find buckets with the same members."""
    nb = off.shape[0] - 1
    h = np.empty((max(nb, 0), 2), np.uint64)
    for b in prange(nb):
        h1 = fmix64(U64(off[b + 1] - off[b]) * GOLDEN)
        h2 = fmix64(h1 ^ U64(0x5851F42D4C957F2D))
        for i in range(off[b], off[b + 1]):
            x = U64(members[i])
            h1 = fmix64(h1 ^ (x * GOLDEN))
            h2 = fmix64((h2 + x) * U64(0xD6E8FEB86659FD93))
        h[b, 0] = h1
        h[b, 1] = h2
    return h


def check_segments(keys, docs, seg) -> None:
    """Check the arguments of :func:`segment_bucket_edges` (host arrays),
    which the compiled kernel reads without bounds checks.

    Raises:
        ValueError: ``seg`` is empty, negative or decreasing, or ends past
            the keys; ``docs`` is neither empty nor one position per key; a
            document position does not fit in the 32 bits of a packed edge.
    """
    if seg.ndim != 1 or seg.shape[0] < 1:
        raise ValueError("seg needs the segment boundaries: segments + 1 entries")
    if seg.shape[0] > 1 and (int(seg[0]) < 0 or bool(np.any(seg[1:] < seg[:-1]))):
        raise ValueError("seg must be non-negative and non-decreasing")
    if int(seg[-1]) > keys.shape[0]:
        raise ValueError(f"seg ends at {int(seg[-1])}, past the {keys.shape[0]} keys")
    if docs.shape[0] not in (0, keys.shape[0]):
        raise ValueError(f"docs holds {docs.shape[0]} positions for {keys.shape[0]} keys; "
                         f"give one per key, or none")
    if docs.shape[0]:
        if int(docs.min()) < 0 or int(docs.max()) > 0xFFFFFFFF:
            raise ValueError("document positions must lie in [0, 2**32) to pack into edges")
    elif seg.shape[0] > 1 and int((seg[1:] - seg[:-1]).max()) > 1 << 32:
        raise ValueError("a segment holds more than 2**32 keys: positions do not pack into "
                         "edges")


def bucket_edges(keys, active):
    """Candidate edges of every band of ``keys`` (N x B) over the active rows
    (see :func:`segment_bucket_edges`), packed ``a << 32 | b``."""
    n, b = keys.shape
    if active.all():
        flat = np.ascontiguousarray(keys.T).reshape(-1)
        seg = np.arange(b + 1, dtype=np.int64) * n
        return segment_bucket_edges(flat, np.zeros(0, np.int64), seg)
    docs = np.flatnonzero(active).astype(np.int64)
    flat = np.ascontiguousarray(keys[docs].T).reshape(-1)
    seg = np.arange(b + 1, dtype=np.int64) * docs.size
    return segment_bucket_edges(flat, np.tile(docs, b), seg)


@njit(cache=True)
def _sort_inplace(x, n):
    """Sort ``x[:n]`` in place: insertion sort for short runs, else NumPy's."""
    if n > 48:
        x[:n].sort()
        return
    for i in range(1, n):
        v = x[i]
        j = i - 1
        while j >= 0 and x[j] > v:
            x[j + 1] = x[j]
            j -= 1
        x[j + 1] = v


@njit(parallel=True, cache=True)
def shingle_sets(offsets, data, docs, word_mode, n):
    """Sorted, de-duplicated base hashes of the documents ``docs``, as CSR.

    Returns ``(set_offsets, values)``; the set of ``docs[t]`` is
    ``values[set_offsets[t]:set_offsets[t + 1]]``.
    """
    D = docs.shape[0]
    raw_off = np.zeros(D + 1, np.int64)
    for t in range(D):
        i = docs[t]
        raw_off[t + 1] = raw_off[t] + (offsets[i + 1] - offsets[i]) + 1
    raw = np.empty(raw_off[D], np.uint64)
    uniq = np.zeros(D, np.int64)
    nblocks = (D + BLOCK - 1) // BLOCK
    for blk in prange(nblocks):
        lo = blk * BLOCK
        hi = min(D, lo + BLOCK)
        pos_a, pos_b, scratch, _ = _block_scratch(offsets, docs, lo, hi)
        for t in range(lo, hi):
            i = docs[t]
            seg = raw[raw_off[t]:raw_off[t + 1]]
            cnt = doc_shingle_hashes(data, offsets[i], offsets[i + 1], word_mode, n,
                                     pos_a, pos_b, scratch, seg)
            if cnt > 0:
                _sort_inplace(seg, cnt)
                u = 1
                for s in range(1, cnt):
                    if seg[s] != seg[u - 1]:
                        seg[u] = seg[s]
                        u += 1
                uniq[t] = u
    set_off = np.zeros(D + 1, np.int64)
    for t in range(D):
        set_off[t + 1] = set_off[t] + uniq[t]
    values = np.empty(set_off[D], np.uint64)
    for t in prange(D):
        values[set_off[t]:set_off[t + 1]] = raw[raw_off[t]:raw_off[t] + uniq[t]]
    return set_off, values


@njit(cache=True, inline="always")
def _intersect_at_least(values, a0, a1, b0, b1, need):
    """The size of the intersection of the sorted runs ``values[a0:a1]`` and
    ``values[b0:b1]``, or a smaller number as soon as it cannot reach
    ``need``."""
    c = 0
    while a0 < a1 and b0 < b1:
        if c + min(a1 - a0, b1 - b0) < need:
            return c
        x = values[a0]
        y = values[b0]
        if x == y:
            c += 1
            a0 += 1
            b0 += 1
        elif x < y:
            a0 += 1
        else:
            b0 += 1
    return c


@njit(cache=True, inline="always")
def _intersect_sorted(values, a0, a1, b0, b1):
    """The size of the intersection of two sorted runs of ``values``."""
    return _intersect_at_least(values, a0, a1, b0, b1, 0)


@njit(parallel=True, cache=True)
def jaccard_edges_at_least(set_off, values, ia, ib, floor):
    """As :func:`jaccard_edges`, exact where the Jaccard is at least
    ``floor``; below it, some value below ``floor`` (work stops as soon as
    the intersection cannot reach it)."""
    E = ia.shape[0]
    out = np.empty(E, np.float64)
    for e in prange(E):
        a0 = set_off[ia[e]]
        a1 = set_off[ia[e] + 1]
        b0 = set_off[ib[e]]
        b1 = set_off[ib[e] + 1]
        total = (a1 - a0) + (b1 - b0)
        # J >= floor needs inter >= floor * total / (1 + floor)
        need = np.int64(np.ceil(floor * total / (1.0 + floor) - 1e-9))
        inter = _intersect_at_least(values, a0, a1, b0, b1, need)
        union = total - inter
        j = inter / union if union > 0 else 0.0
        out[e] = j if inter >= need else min(j, np.nextafter(floor, 0.0))
    return out


def jaccard_edges(set_off, values, ia, ib):
    """Exact Jaccard of the sets ``ia[e]`` and ``ib[e]`` (indices into the CSR)."""
    return jaccard_edges_at_least(set_off, values, ia, ib, 0.0)


@njit(parallel=True, cache=True)
def signature_agreement(sig, ea, eb):
    """Fraction of equal signature columns for each edge (the MinHash estimate)."""
    E = ea.shape[0]
    K = sig.shape[1]
    out = np.empty(E, np.float64)
    for e in prange(E):
        c = 0
        for k in range(K):
            if sig[ea[e], k] == sig[eb[e], k]:
                c += 1
        out[e] = c / K
    return out


@njit(parallel=True, cache=True)
def text_hash128(offsets, data):
    """Two independent XXH64 digests (seeds 0 and 1) of every document: a
    128-bit fingerprint for exact de-duplication."""
    N = offsets.shape[0] - 1
    out = np.empty((N, 2), np.uint64)
    for i in prange(N):
        out[i, 0] = xxh64(data, offsets[i], offsets[i + 1], U64(0))
        out[i, 1] = xxh64(data, offsets[i], offsets[i + 1], U64(1))
    return out


@njit(cache=True)
def first_equal(fp, active):
    """For each row of ``fp`` (``N x 2`` ``uint64`` fingerprints), the index
    of the first active row equal to it (itself if none comes earlier);
    ``-1`` for inactive rows. One pass with an open-addressing table of
    ``2^k >= 2N`` slots indexed by the low bits of the first word."""
    n = fp.shape[0]
    rep = np.full(n, -1, np.int64)
    size = 2
    while size < 2 * n:
        size *= 2
    mask = U64(size - 1)
    table = np.full(size, -1, np.int64)
    for i in range(n):
        if not active[i]:
            continue
        h0 = fp[i, 0]
        h1 = fp[i, 1]
        s = np.int64(h0 & mask)
        while True:
            j = table[s]
            if j < 0:
                table[s] = i
                rep[i] = i
                break
            if fp[j, 0] == h0 and fp[j, 1] == h1:
                rep[i] = j
                break
            s = (s + 1) & (size - 1)
    return rep


@njit(parallel=True, cache=True)
def codepoint_lengths(offsets, data):
    """Number of code points of every document."""
    N = offsets.shape[0] - 1
    out = np.empty(N, np.int64)
    for i in prange(N):
        c = 0
        for p in range(offsets[i], offsets[i + 1]):
            if (data[p] & 0xC0) != 0x80:
                c += 1
        out[i] = c
    return out


@njit(parallel=True, cache=True)
def has_shingles(offsets, data, word_mode):
    """Whether each document has at least one shingle (a code point; in word
    mode, a non-space code point)."""
    N = offsets.shape[0] - 1
    out = np.zeros(N, np.bool_)
    for i in prange(N):
        start = offsets[i]
        end = offsets[i + 1]
        if not word_mode:
            out[i] = end > start
            continue
        p = start
        while p < end:
            c, p = utf8_decode(data, p, end)
            if not is_space(c):
                out[i] = True
                break
    return out


@njit(cache=True, inline="always")
def _fold_spaces_doc(data, start, end, out, o):
    """Write ``data[start:end]`` with every run of whitespace folded into one
    space and none at either end to ``out[o:]`` (when ``out`` is not empty);
    returns the length written."""
    L = 0
    pending = False
    seen = False
    p = start
    while p < end:
        q = p
        c, p = utf8_decode(data, p, end)
        if is_space(c):
            pending = seen
            continue
        if pending:
            if out.shape[0]:
                out[o + L] = 32
            L += 1
            pending = False
        if out.shape[0]:
            for r in range(q, p):
                out[o + L + r - q] = data[r]
        L += p - q
        seen = True
    return L


@njit(parallel=True, cache=True)
def fold_spaces(offsets, data):
    """``" ".join(text.split())`` of every document (whitespace as
    :func:`kernels.hashing.is_space` defines it), as new Arrow buffers
    ``(offsets, data)``."""
    N = offsets.shape[0] - 1
    empty = np.empty(0, np.uint8)
    lengths = np.empty(N, np.int64)
    for i in prange(N):
        lengths[i] = _fold_spaces_doc(data, offsets[i], offsets[i + 1], empty, 0)
    new_off = np.zeros(N + 1, np.int64)
    for i in range(N):
        new_off[i + 1] = new_off[i] + lengths[i]
    out = np.empty(max(new_off[N], 1), np.uint8)
    for i in prange(N):
        _fold_spaces_doc(data, offsets[i], offsets[i + 1], out, new_off[i])
    return new_off, out


@njit(cache=True, inline="always")
def _find(parent, x):
    root = x
    while parent[root] != root:
        root = parent[root]
    while parent[x] != root:
        nxt = parent[x]
        parent[x] = root
        x = nxt
    return root


@njit(cache=True)
def union_edges(parent, ea, eb):
    """Union-find: join the endpoints of every edge (the smaller root wins)."""
    for e in range(ea.shape[0]):
        ra = _find(parent, ea[e])
        rb = _find(parent, eb[e])
        if ra < rb:
            parent[rb] = ra
        elif rb < ra:
            parent[ra] = rb


@njit(cache=True)
def connected(parent, ea, eb):
    """Whether the endpoints of each edge already share a component."""
    out = np.empty(ea.shape[0], np.bool_)
    for e in range(ea.shape[0]):
        out[e] = _find(parent, ea[e]) == _find(parent, eb[e])
    return out


@njit(cache=True)
def _slot_of(keys, k):
    mask = U64(keys.shape[0] - 1)
    slot = np.int64(fmix64(k) & mask)
    while keys[slot] != k and keys[slot] != 0:
        slot = (slot + 1) & np.int64(keys.shape[0] - 1)
    return slot


@njit(cache=True)
def table_insert(keys, vals, q, v):
    """Insert keys ``q`` with values ``v`` (keys already present keep theirs);
    returns how many were new. The table must have room."""
    new = 0
    for i in range(q.shape[0]):
        slot = _slot_of(keys, q[i])
        if keys[slot] == 0:
            keys[slot] = q[i]
            vals[slot] = v[i]
            new += 1
    return new


@njit(cache=True)
def _sorted_unique(x, m):
    """Sort ``x[:m]`` in place and drop repeats; returns the new length."""
    _sort_inplace(x, m)
    k = 0
    for i in range(m):
        if k == 0 or x[i] != x[k - 1]:
            x[k] = x[i]
            k += 1
    return k


@njit(parallel=True, cache=True)
def window_pairs(d_off, d_bkt, d_pos, b_off, members, width):
    """For every rank ``v``: the distinct members among the first
    ``min(pos, width)`` of each of its buckets, where ``pos`` is its own
    place there (``d_pos``, aligned with ``d_bkt``): the documents it is
    compared with when nothing before it was removed. Returns the CSR
    ``(off, u)`` over ranks, ``u`` ascending within a rank."""
    n = d_off.shape[0] - 1
    cap = np.zeros(n + 1, np.int64)
    for v in prange(n):
        c = 0
        for e in range(d_off[v], d_off[v + 1]):
            c += min(d_pos[e], width)
        cap[v + 1] = c
    cap = np.cumsum(cap)
    tmp = np.empty(cap[n], np.int64)
    cnt = np.zeros(n + 1, np.int64)
    for v in prange(n):
        m = cap[v]
        for e in range(d_off[v], d_off[v + 1]):
            b0 = b_off[d_bkt[e]]
            for j in range(min(d_pos[e], width)):
                tmp[m] = members[b0 + j]
                m += 1
        seg = tmp[cap[v]:m]
        cnt[v + 1] = _sorted_unique(seg, m - cap[v])
    off = np.cumsum(cnt)
    u = np.empty(off[n], np.int64)
    for v in prange(n):
        for j in range(off[v + 1] - off[v]):
            u[off[v] + j] = tmp[cap[v] + j]
    return off, u


@njit(cache=True, inline="always")
def _window_find(p_off, p_u, v, u):
    """Position of ``u`` in rank ``v``'s window list, or -1."""
    return find_sorted(p_u, p_off[v], p_off[v + 1], u)


@njit(cache=True)
def greedy_pass(todo, d_off, d_bkt, b_off, state, klist, kcount, blist, bcount, bstamp,
                stamp, p_off, p_u, p_s, t_keys, t_vals, threshold, accept_all, limit, dup,
                sim, miss, blocked):
    """One pass of the sequential greedy rule over the undecided ranks ``todo``
    (ascending), with the scores known so far: ``p_s`` of each rank's window
    (``p_off``, ``p_u``: :func:`window_pairs`) and the table ``(t_keys,
    t_vals)`` of the others.

    A rank is decided when every bucket of it (``d_bkt[d_off[v]:d_off[v+1]]``)
    is free of ranks blocked in this pass and its score against each of the
    first ``limit`` kept members of each of them is known: removed
    (``state`` 2, ``dup``, ``sim``: the most similar, ties to the lower rank)
    when one of those scores is similar, else kept (``state`` 1, appended to
    the bucket's kept list ``klist[b_off[b]:][:kcount[b]]``). Otherwise it is
    blocked: listed in ``blocked`` and in its buckets' blocked lists
    (``blist``, ``bcount``, valid where ``bstamp == stamp``), and its unknown
    scores against the first ``limit`` kept and the first ``limit`` blocked
    members of each bucket are requested in ``miss`` (packed pairs, distinct,
    none in the table). A blocked rank holds back the buckets that have
    fewer than ``limit`` kept members; a decision is final, since the first
    ``limit`` kept members of its buckets are. When ``miss`` might overflow,
    the rest of ``todo`` is blocked as it is. The kept lists are in rank order
    up to their first ``limit`` entries (the only ones read).

    Returns ``(requested, n_blocked)``.
    """
    most = 1
    for i in range(todo.shape[0]):
        v = todo[i]
        c = d_off[v + 1] - d_off[v]
        if c > most:
            most = c
    part = np.empty(2 * limit * most, np.int64)
    n_miss = 0
    n_blk = 0
    for i in range(todo.shape[0]):
        v = todo[i]
        lo = d_off[v]
        hi = d_off[v + 1]
        if n_miss + 2 * limit * (hi - lo) > miss.shape[0]:
            for j in range(i, todo.shape[0]):
                blocked[n_blk] = todo[j]
                n_blk += 1
            break
        held = False
        m = 0
        for e in range(lo, hi):
            b = d_bkt[e]
            if bstamp[b] == stamp:
                held = True
            for j in range(min(kcount[b], limit)):
                part[m] = klist[b_off[b] + j]
                m += 1
        m = _sorted_unique(part, m)
        best_u = -1
        best_s = -1.0
        if not held:
            for j in range(m):
                u = part[j]
                w = _window_find(p_off, p_u, v, u)
                if w >= 0:
                    s = p_s[w]
                else:
                    key = (U64(u) << U64(32)) | U64(v)
                    slot = _slot_of(t_keys, key)
                    if t_keys[slot] != key:
                        held = True
                        break
                    s = t_vals[slot]
                if (accept_all or s >= threshold) and s > best_s:
                    best_u = u
                    best_s = s
        if held:
            # ask for the kept and the blocked members before it, then block it
            for e in range(lo, hi):
                b = d_bkt[e]
                if bstamp[b] == stamp:
                    for j in range(min(bcount[b], limit)):
                        part[m] = blist[b_off[b] + j]
                        m += 1
            m = _sorted_unique(part, m)
            for j in range(m):
                if _window_find(p_off, p_u, v, part[j]) >= 0:
                    continue
                key = (U64(part[j]) << U64(32)) | U64(v)
                if t_keys[_slot_of(t_keys, key)] != key:
                    miss[n_miss] = key
                    n_miss += 1
            # it holds back a bucket only where it could be one of the first
            # `limit` kept (later members are compared with no other)
            for e in range(lo, hi):
                b = d_bkt[e]
                if kcount[b] >= limit:
                    continue
                if bstamp[b] != stamp:
                    bstamp[b] = stamp
                    bcount[b] = 0
                blist[b_off[b] + bcount[b]] = v
                bcount[b] += 1
            blocked[n_blk] = v
            n_blk += 1
            continue
        if best_u >= 0:
            state[v] = 2
            dup[v] = best_u
            sim[v] = best_s
        else:
            state[v] = 1
            for e in range(lo, hi):
                b = d_bkt[e]
                klist[b_off[b] + kcount[b]] = v
                kcount[b] += 1
    return n_miss, n_blk


@njit(parallel=True, cache=True)
def gather_ranges(data, b0, b1, out_off):
    """The byte ranges ``data[b0[i]:b1[i]]``, one after another (``out_off``:
    where each starts, ``len(b0) + 1`` entries)."""
    n = b0.shape[0]
    out = np.empty(out_off[n], np.uint8)
    for i in prange(n):
        o = out_off[i]
        s = b0[i]
        for j in range(b1[i] - s):
            out[o + j] = data[s + j]
    return out
