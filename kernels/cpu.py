"""CPU kernels: Numba ``@njit`` loops over Arrow string buffers, signature
matrices and shingle sets.

Text arrives as Arrow's two buffers: ``offsets`` (``int64``, one more than
the number of documents) and ``data`` (the concatenated UTF-8 bytes). Every
kernel works per document (or per edge), on several threads
(:func:`kernels.threads.for_range` over a serial ``nogil`` loop), with no
Python objects; the step it takes per document or per edge is a function of
:mod:`kernels.primitives` or :mod:`kernels.text`, which the CUDA kernels
call as well. The grouping of keys lives in :mod:`kernels.buckets`, greedy
selection in :mod:`kernels.greedy`.
"""
from __future__ import annotations

import ctypes

import numpy as np

from .jit import njit

from .densify import LANES, densify_group, first_hits, probe_table
from .hashing import U64, fmix64, oph_bin, xxh64
from .primitives import (BOUND_WORDS, agreement, ascii_char_hashes, band_key, is_bound_width,
                         bound_row, bound_scratch, doc_shingle_hashes, fold_minima,
                         high_bytes, jaccard_upper, mixed_char_hashes)
from .runs import jaccard_of_runs
from .sorting import gather_runs, sorted_unique
from .text import codepoint_count, fold_spaces_doc, has_shingle
from .threads import for_range

SEED0 = U64(0)
U32 = np.uint32
BLOCK = 256
#: A text whose bytes above 127, times ``n`` and this, are at most its
#: length (so that at most about half its character shingles hold one)
#: hashes its other shingles a whole-text step at a time.
MIXED_SHARE = 2


def _blocks(d: int) -> int:
    """Blocks of :data:`BLOCK` documents in ``d``."""
    return -(-int(d) // BLOCK)


@njit(cache=True)
def _block_scratch(offsets, docs, lo, hi):
    """Work buffers of :func:`_doc_hashes` for documents ``docs[lo:hi]``
    (``pos_a``, ``pos_b``, ``scratch``, ``words``, ``hashes``), sized for the
    longest."""
    cap = 1
    for t in range(lo, hi):
        d = offsets[docs[t] + 1] - offsets[docs[t]] + 1
        if d > cap:
            cap = d
    return (np.empty(cap, np.int64), np.empty(cap, np.int64), np.empty(cap, np.uint8),
            np.empty(cap, np.uint64), np.empty(cap, np.uint64))


@njit(cache=True)
def _doc_hashes(data, start, end, word_mode, n, pos_a, pos_b, scratch, words, out):
    """:func:`kernels.primitives.doc_shingle_hashes`, by the vectorised
    :func:`kernels.primitives.ascii_char_hashes` where the text is ASCII,
    and :func:`kernels.primitives.mixed_char_hashes` where few of its bytes
    are not (a quote mark or a name in English text): the same values."""
    if not word_mode and 0 < n < 32 and end - start >= n:
        high = high_bytes(data, start, end)
        if high == 0:
            return ascii_char_hashes(data, start, end, n, words, out)
        if high * n * MIXED_SHARE <= end - start:
            cnt = mixed_char_hashes(data, start, end, n, pos_a, pos_b.view(np.uint64), words,
                                    out)
            if cnt >= 0:
                return cnt
    return doc_shingle_hashes(data, start, end, word_mode, n, pos_a, pos_b, scratch, out)


def minhash(offsets, data, docs, word_mode, n, a, b, shift, out, counts):
    """Signatures of the documents ``docs`` (indices into ``offsets``).

    Row ``t`` of ``out`` gets ``min_x h_k(x) >> shift`` over the shingles of
    document ``docs[t]``; ``counts[t]`` gets its number of shingles. ``out`` is
    ``uint32`` (``shift=32``) or ``uint64`` (``shift=0``). A document without
    shingles gets all ones (the largest value).
    """
    for_range(_minhash_blocks, _blocks(docs.shape[0]), offsets, data, docs, word_mode, n, a, b,
              shift, out, counts)


@njit(cache=True, nogil=True, stand_in="vector_sketch.minhash_blocks")
def _minhash_blocks(offsets, data, docs, word_mode, n, a, b, shift, out, counts, b0, b1):
    D = docs.shape[0]
    K = a.shape[0]
    sh = U64(shift)
    for blk in range(b0, b1):
        lo = blk * BLOCK
        hi = min(D, lo + BLOCK)
        pos_a, pos_b, scratch, words, hashes = _block_scratch(offsets, docs, lo, hi)
        mins = np.empty(K, np.uint64)
        for t in range(lo, hi):
            i = docs[t]
            cnt = _doc_hashes(data, offsets[i], offsets[i + 1], word_mode, n, pos_a, pos_b,
                              scratch, words, hashes)
            counts[t] = cnt
            for k in range(K):
                mins[k] = ~U64(0)
            fold_minima(hashes, cnt, a, b, mins, 0, 1)
            for k in range(K):
                out[t, k] = mins[k] >> sh


def oph_minhash(offsets, data, docs, word_mode, n, p, q, shift, out, counts):
    """One-permutation sketches (``kernels.hashing.oph_row``) of the documents
    ``docs``, as :func:`minhash` writes signatures: ``out`` is ``uint32``
    (``shift=32``) or ``uint64`` (``shift=0``), all ones for a document
    without shingles; ``counts[t]`` gets its number of shingles."""
    K = out.shape[1]
    for_range(_oph_blocks, _blocks(docs.shape[0]), offsets, data, docs, word_mode, n, p, q,
              shift, out, counts, probe_table(q, K), first_hits(q, K))


@njit(cache=True, nogil=True, stand_in="vector_text.oph_blocks")
def _oph_blocks(offsets, data, docs, word_mode, n, p, q, shift, out, counts, probes, hits,
                b0, b1):
    """``kernels.hashing.oph_row`` of the documents of blocks ``b0 .. b1 - 1``,
    :data:`kernels.densify.LANES` documents at a time: their hashes folded
    into their bins, then their empty bins filled together
    (:func:`kernels.densify.densify_group`; ``probes`` and ``hits``, its
    tables)."""
    D = docs.shape[0]
    K = out.shape[1]
    sh = U64(shift)
    top = ~U64(0) >> sh
    flags = np.empty((K, LANES), np.uint8)
    src = np.empty((K, LANES), np.uint8)
    few = np.empty(K, np.uint32)
    bits = np.empty((K + 63) // 64, np.uint64)
    for blk in range(b0, b1):
        lo = blk * BLOCK
        hi = min(D, lo + BLOCK)
        pos_a, pos_b, scratch, words, hashes = _block_scratch(offsets, docs, lo, hi)
        for g0 in range(lo, hi, LANES):
            g1 = min(hi, g0 + LANES)
            flags[:, :] = 0
            for t in range(g0, g1):
                i = docs[t]
                cnt = _doc_hashes(data, offsets[i], offsets[i + 1], word_mode, n, pos_a,
                                  pos_b, scratch, words, hashes)
                counts[t] = cnt
                row = out[t]
                for k in range(K):      # each value the largest: a bin's first hash needs no branch
                    row[k] = top
                if cnt == 0:
                    continue
                # the permutation across all hashes at once (in vector
                # registers), then each into its bin
                h = hashes[:cnt]
                for s in range(cnt):
                    h[s] = fmix64(h[s] ^ p)
                j = U64(t - g0)
                for s in range(cnt):
                    y = h[s]
                    k = U64(oph_bin(y, K))
                    flags[k, j] = 1
                    v = y >> sh
                    row[k] = v if v < row[k] else row[k]
            densify_group(q, probes, hits, flags, counts[g0:g1], out[g0:g1], src, few, bits)


def band_keys(sig, bands, rows, out):
    """``out[i, j]`` = 64-bit key of rows ``j*rows .. (j+1)*rows-1`` of ``sig[i]``."""
    for_range(_band_keys_rows, sig.shape[0], sig, bands, rows, out, grain=1024)


@njit(cache=True, nogil=True, stand_in="vector_misc.band_keys_rows")
def _band_keys_rows(sig, bands, rows, out, i0, i1):
    for i in range(i0, i1):
        for j in range(bands):
            out[i, j] = band_key(sig, i, j, rows)


#: Bytes of raw hashes (a document's shingles' before their sort) that
#: :func:`shingle_sets` hashes into at a time: its documents go a group of
#: that much at a time through one buffer, so that the pages it writes are
#: written again group after group, not taken fresh for the whole call
#: (first touches of new pages cost more than the hashing on some hosts).
#: On the bench's long documents a whole run's ``select`` took 2.9-3.3 s
#: with 32 MiB groups against 3.6-4.7 s with one group, and peaked at 733
#: against 1,165-1,200 MiB; 16 MiB groups 2.9-3.0 s, 64 MiB 2.7-2.9 s and
#: 765 MiB.
RAW_BYTES = 32 << 20


def shingle_sets(offsets, data, docs, word_mode, n):
    """Sorted, de-duplicated base hashes of the documents ``docs``, as CSR.

    Returns ``(set_offsets, values)``; the set of ``docs[t]`` is
    ``values[set_offsets[t]:set_offsets[t + 1]]``. ``values`` is the start of
    a buffer with room for every document's shingles, of which only the sets
    are written (the rest is never touched).
    """
    D = docs.shape[0]
    raw_off = np.zeros(D + 1, np.int64)
    np.cumsum(offsets[docs + 1] - offsets[docs] + 1, out=raw_off[1:])
    set_off = np.zeros(D + 1, np.int64)
    values = np.empty(raw_off[D], np.uint64)
    raw = None
    g0 = 0
    while g0 < D:
        # a group of documents whose raw hashes fit the buffer (at least one)
        g1 = int(np.searchsorted(raw_off, raw_off[g0] + RAW_BYTES // 8, side="right")) - 1
        g1 = min(D, max(g1, g0 + 1))
        r_off = raw_off[g0:g1 + 1] - raw_off[g0]
        if raw is None or raw.shape[0] < r_off[-1]:
            raw = np.empty(max(int(r_off[-1]), min(int(raw_off[D]), RAW_BYTES // 8)),
                           np.uint64)
        uniq = np.zeros(g1 - g0, np.int64)
        for_range(_shingle_set_blocks, _blocks(g1 - g0), offsets, data, docs[g0:g1], word_mode,
                  n, r_off, raw, uniq)
        np.cumsum(uniq, out=set_off[g0 + 1:g1 + 1])
        set_off[g0 + 1:g1 + 1] += set_off[g0]
        for_range(gather_runs, g1 - g0, raw, r_off, set_off[g0:g1 + 1], values, grain=1024)
        g0 = g1
    return set_off, values[:set_off[D]]


@njit(cache=True, nogil=True, stand_in="vector_text.shingle_set_blocks")
def _shingle_set_blocks(offsets, data, docs, word_mode, n, raw_off, raw, uniq, b0, b1):
    D = docs.shape[0]
    for blk in range(b0, b1):
        lo = blk * BLOCK
        hi = min(D, lo + BLOCK)
        pos_a, pos_b, scratch, words, _ = _block_scratch(offsets, docs, lo, hi)
        for t in range(lo, hi):
            i = docs[t]
            seg = raw[raw_off[t]:raw_off[t + 1]]
            cnt = _doc_hashes(data, offsets[i], offsets[i + 1], word_mode, n, pos_a, pos_b,
                              scratch, words, seg)
            uniq[t] = sorted_unique(seg, cnt)


def set_bounds(offsets, data, docs, word_mode, n, out):
    """The bound rows (:func:`kernels.primitives.bound_row`) of the documents
    ``docs`` into ``out`` (``len(docs) x W`` uint32, ``W`` words a row:
    :func:`kernels.primitives.is_bound_width`)."""
    _check_width(out)
    for_range(_set_bound_blocks, _blocks(docs.shape[0]), offsets, data, docs, word_mode, n, out)


@njit(cache=True, nogil=True, stand_in="vector_text.set_bound_blocks")
def _set_bound_blocks(offsets, data, docs, word_mode, n, out, b0, b1):
    D = docs.shape[0]
    for blk in range(b0, b1):
        lo = blk * BLOCK
        hi = min(D, lo + BLOCK)
        pos_a, pos_b, scratch, words, hashes = _block_scratch(offsets, docs, lo, hi)
        slots, used = bound_scratch(hashes.shape[0])
        for t in range(lo, hi):
            i = docs[t]
            cnt = _doc_hashes(data, offsets[i], offsets[i + 1], word_mode, n, pos_a, pos_b,
                              scratch, words, hashes)
            bound_row(hashes, cnt, slots, used, out[t])


def _check_width(rows) -> None:
    if rows.ndim != 2 or not is_bound_width(rows.shape[1]):
        raise ValueError(f"bound rows of the wrong width ({rows.shape})")


def jaccard_upper_bounds(rows, ia, ib):
    """:func:`kernels.primitives.jaccard_upper` of rows ``ia[e]`` and
    ``ib[e]`` of the bound rows ``rows`` (``n x W`` uint32):
    float64, at least each pair's exact Jaccard."""
    _check_width(rows)
    out = np.empty(ia.shape[0], np.float64)
    for_range(_upper_bound_edges, ia.shape[0], rows, rows.view(np.uint8), ia, ib, out,
              grain=4096)
    return out


@njit(cache=True, nogil=True, stand_in="vector_misc.upper_bound_edges")
def _upper_bound_edges(rows, counts, ia, ib, out, e0, e1):
    last = rows.shape[1] - 1
    bins = last * 4
    for e in range(e0, e1):
        a = ia[e]
        b = ib[e]
        out[e] = jaccard_upper(counts[a, :bins], counts[b, :bins], rows[a, last],
                               rows[b, last])
    return out


def window_upper_bounds(rows, p_off, p_u, b_off, members, width, fixed=0):
    """:func:`jaccard_upper_bounds` of each rank's window (``p_off``,
    ``p_u``: :func:`kernels.greedy.window_pairs` of the buckets ``b_off``,
    ``members`` with ``width``; ranks below ``fixed`` have none):
    ``out[i]`` that of rows ``p_u[i]`` and ``v`` for ``p_off[v] <= i <
    p_off[v + 1]``. The same values, without the second ranks spelt out,
    computed bucket by bucket: a bucket's first members are read once for
    all its members (their rows stay in the caches), not once for each."""
    _check_width(rows)
    out = np.empty(p_u.shape[0], np.float64)
    lo, hi = int(b_off[0]), int(b_off[-1])
    for_range(_bucket_window_bounds, hi - lo, rows, rows.view(np.uint8), p_off, p_u, b_off,
              members, int(width), int(fixed), lo, out, grain=4096)
    return out


@njit(cache=True, nogil=True, stand_in="vector_misc.bucket_window_bounds")
def _bucket_window_bounds(rows, counts, p_off, p_u, b_off, members, width, fixed, base, out,
                          e0, e1):
    """Entries ``base + e0 .. base + e1 - 1`` of the buckets: each member
    against its bucket's first ``width`` members before it, written at
    their place in its window list (both ascend: one walk)."""
    last = b_off.shape[0] - 1
    words = rows.shape[1] - 1           # the distinct count's word
    bins = words * 4
    b = 0
    hi = last
    while b < hi:                       # the bucket of the first entry
        mid = (b + hi + 1) // 2
        if b_off[mid] <= base + e0:
            b = mid
        else:
            hi = mid - 1
    for e in range(base + e0, base + e1):
        while b_off[b + 1] <= e:
            b += 1
        b0 = b_off[b]
        w = min(e - b0, width)
        v = members[e]
        if w <= 0 or v < fixed:
            continue
        cv = counts[v, :bins]
        sv = rows[v, words]
        i = p_off[v]
        for j in range(w):
            u = members[b0 + j]
            while p_u[i] < u:
                i += 1
            out[i] = jaccard_upper(counts[u, :bins], cv, rows[u, words], sv)
    return out


def jaccard_edges_between(off1, val1, off2, val2, ia, ib, floor):
    """Jaccard of the sets ``ia[e]`` and ``ib[e]``, each a row of the CSR
    ``(off1, val1)`` where it is 0 or more, else row ``~row`` of ``(off2,
    val2)``; exact where it is at least ``floor``, below it some value below
    ``floor`` (work stops as soon as the intersection cannot reach it)."""
    out = np.empty(ia.shape[0], np.float64)
    floor = float(floor)
    for_range(_jaccard_edge_range, ia.shape[0], off1, val1, off2, val2, ia, ib, floor,
              float(np.nextafter(floor, 0.0)), out, grain=256)
    return out


@njit(cache=True, nogil=True, stand_in="vector_misc.jaccard_edge_range")
def _jaccard_edge_range(off1, val1, off2, val2, ia, ib, floor, below, out, e0, e1):
    for e in range(e0, e1):
        r = ia[e]
        if r >= 0:
            va, a0, a1 = val1, off1[r], off1[r + 1]
        else:
            va, a0, a1 = val2, off2[~r], off2[~r + 1]
        r = ib[e]
        if r >= 0:
            vb, b0, b1 = val1, off1[r], off1[r + 1]
        else:
            vb, b0, b1 = val2, off2[~r], off2[~r + 1]
        total = (a1 - a0) + (b1 - b0)
        # J >= floor needs inter >= floor * total / (1 + floor)
        need = np.int64(np.ceil(floor * total / (1.0 + floor) - 1e-9))
        j, exact = jaccard_of_runs(va, a0, a1, vb, b0, b1, need)
        out[e] = j if exact else min(j, below)
    return out


def jaccard_edges_at_least(set_off, values, ia, ib, floor):
    """As :func:`jaccard_edges`, exact where the Jaccard is at least
    ``floor``; below it, some value below ``floor`` (work stops as soon as
    the intersection cannot reach it)."""
    return jaccard_edges_between(set_off, values, set_off, values, ia, ib, floor)


def jaccard_edges(set_off, values, ia, ib):
    """Exact Jaccard of the sets ``ia[e]`` and ``ib[e]`` (indices into the CSR)."""
    return jaccard_edges_at_least(set_off, values, ia, ib, 0.0)


def signature_agreement(sig, ea, eb):
    """Fraction of equal signature columns for each edge (the MinHash estimate)."""
    out = np.empty(ea.shape[0], np.float64)
    for_range(_agreement_edges, ea.shape[0], sig, ea, eb, out, grain=1024)
    return out


@njit(cache=True, nogil=True)
def _agreement_edges(sig, ea, eb, out, e0, e1):
    for e in range(e0, e1):
        out[e] = agreement(sig, ea[e], eb[e])


def text_hash128(offsets, data):
    """Two independent XXH64 digests (seeds 0 and 1) of every document: a
    128-bit fingerprint for exact de-duplication."""
    out = np.empty((offsets.shape[0] - 1, 2), np.uint64)
    for_range(_text_hash_docs, out.shape[0], offsets, data, out, grain=1024)
    return out


@njit(cache=True, nogil=True, stand_in="vector_text.text_hash_docs")
def _text_hash_docs(offsets, data, out, i0, i1):
    for i in range(i0, i1):
        out[i, 0] = xxh64(data, offsets[i], offsets[i + 1], U64(0))
        out[i, 1] = xxh64(data, offsets[i], offsets[i + 1], U64(1))


def codepoint_lengths(offsets, data):
    """Number of code points of every document."""
    out = np.empty(offsets.shape[0] - 1, np.int64)
    for_range(_codepoint_docs, out.shape[0], offsets, data, out, grain=1024)
    return out


@njit(cache=True, nogil=True, stand_in="vector_misc.codepoint_docs")
def _codepoint_docs(offsets, data, out, i0, i1):
    for i in range(i0, i1):
        out[i] = codepoint_count(data, offsets[i], offsets[i + 1])


def has_shingles(offsets, data, word_mode):
    """Whether each document has at least one shingle (a code point; in word
    mode, a word)."""
    out = np.zeros(offsets.shape[0] - 1, np.bool_)
    for_range(_has_shingle_docs, out.shape[0], offsets, data, bool(word_mode), out,
              grain=1024)
    return out


@njit(cache=True, nogil=True, stand_in="vector_text.has_shingle_docs")
def _has_shingle_docs(offsets, data, word_mode, out, i0, i1):
    for i in range(i0, i1):
        out[i] = has_shingle(data, offsets[i], offsets[i + 1], word_mode)


def fold_spaces(offsets, data):
    """``" ".join(text.split())`` of every document (whitespace as
    :func:`kernels.text.is_space` defines it), as new Arrow buffers
    ``(offsets, data)``: :func:`fold_spaces_parts` of one part."""
    return fold_spaces_parts([(offsets, data)])


def fold_spaces_parts(parts):
    """:func:`fold_spaces` of the documents of several string arrays
    (``parts``: their ``(offsets, data)``), one after another, into one
    pair of buffers. One pass over the text: each piece of documents a
    thread takes is folded into the new buffer from where its first
    document would start unfolded, its documents one after another; then
    the few pieces are moved together (a folded document is never
    longer)."""
    counts = [int(off.shape[0]) - 1 for off, _ in parts]
    sizes = [int(off[-1] - off[0]) for off, _ in parts]
    N = sum(counts)
    out = np.empty(max(sum(sizes), 1), np.uint8)
    where = np.empty(N, np.int64)
    lengths = np.empty(N, np.int64)
    d = base = 0
    for (off, data), n, size in zip(parts, counts, sizes):
        for_range(_fold_docs, n, off, data, out, where[d:d + n], lengths[d:d + n], base,
                  grain=1024)
        d += n
        base += size
    new_off = np.zeros(N + 1, np.int64)
    np.cumsum(lengths, out=new_off[1:])
    _close_gaps(out, where, new_off)
    return new_off, out[:max(int(new_off[N]), 1)]


def _close_gaps(out, where, new_off):
    """Move the runs of documents written one after another (document ``i``
    at ``where[i]``) to their places ``new_off[i]``, which are never to the
    right: run after run, in order."""
    N = where.shape[0]
    if not N or np.array_equal(where, new_off[:-1]):
        return
    head = np.ones(N, bool)
    head[1:] = where[1:] != where[:-1] + np.diff(new_off[:-1])
    heads = np.flatnonzero(head).tolist()
    base = out.ctypes.data
    for h, e in zip(heads, heads[1:] + [N]):
        s, d, n = int(where[h]), int(new_off[h]), int(new_off[e] - new_off[h])
        if s != d and n:                         # C's memmove: overlapping, in place
            ctypes.memmove(base + d, base + s, n)


@njit(cache=True, nogil=True, stand_in="vector_text.fold_docs")
def _fold_docs(offsets, data, out, where, lengths, base, i0, i1):
    """Documents ``i0..i1-1`` with their whitespace folded, one after another
    in ``out`` from where document ``i0`` starts (counted from the first
    document's start, plus ``base``): where each one starts into ``where``,
    its length into ``lengths``."""
    o = base + offsets[i0] - offsets[0]
    for i in range(i0, i1):
        where[i] = o
        n = fold_spaces_doc(data, offsets[i], offsets[i + 1], out, o)
        lengths[i] = n
        o += n


def gather_ranges(data, b0, b1, out_off):
    """The byte ranges ``data[b0[i]:b1[i]]``, one after another (``out_off``:
    where each starts, ``len(b0) + 1`` entries; ``b1`` must equal ``b0``
    plus the sizes that ``out_off`` gives)."""
    n = b0.shape[0]
    out = np.empty(out_off[n], np.uint8)
    for_range(gather_runs, n, data, b0, out_off, out, grain=1024)
    return out


def rows_in(keys, queries):
    """The row of each of ``queries`` in ``keys`` (sorted, distinct); -1
    where absent. A directory of the keys' range (one slot per key, rounded
    up to a power of two) narrows each search to the keys of one slot, so a
    lookup costs a few memory reads whatever the number of keys."""
    out = np.full(queries.shape[0], -1, np.int64)
    if keys.shape[0] == 0:
        return out
    first, shift = _key_directory(keys)
    for_range(_rows_of, queries.shape[0], keys, first, shift, queries, out, grain=4096)
    return out


@njit(cache=True, nogil=True, stand_in="vector_misc.key_directory")
def _key_directory(keys):
    """The first key of each slot of :func:`rows_in`'s directory, and the
    shift that maps a key to its slot."""
    n = keys.shape[0]
    lo = keys[0]
    span = np.uint64(keys[n - 1] - lo)
    shift = 0
    while (span >> np.uint64(shift)) >= np.uint64(n):
        shift += 1
    sh = np.uint64(shift)
    slots = np.int64(span >> sh) + 1
    first = np.empty(slots + 1, np.int64)
    s = 0
    for i in range(n):
        b = np.int64(np.uint64(keys[i] - lo) >> sh)
        while s <= b:
            first[s] = i
            s += 1
    while s <= slots:
        first[s] = n
        s += 1
    return first, shift


@njit(cache=True, nogil=True, stand_in="vector_misc.rows_of")
def _rows_of(keys, first, shift, queries, out, t0, t1):
    n = keys.shape[0]
    lo = keys[0]
    sh = np.uint64(shift)
    for t in range(t0, t1):
        q = queries[t]
        if q < lo or q > keys[n - 1]:
            continue
        b = np.int64(np.uint64(q - lo) >> sh)
        a = first[b]
        e = first[b + 1]
        while a < e:                             # the first key >= q in the slot
            mid = (a + e) >> 1
            if keys[mid] < q:
                a = mid + 1
            else:
                e = mid
        if a < first[b + 1] and keys[a] == q:
            out[t] = a

