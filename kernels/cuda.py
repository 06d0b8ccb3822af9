"""The host side of the CUDA kernels (:mod:`kernels.cuda_kernels`): one
launcher per kernel, the scratch memory they need, and the steps of greedy
selection in rounds as launchers.

The public functions take the array module ``xp`` (CuPy on a GPU, NumPy
under Numba's CUDA simulator) and arrays that live where ``xp`` allocates;
what they return lives there too. Each returns what the CPU kernel it names
returns, bit for bit.
"""
from __future__ import annotations

import types as _types
import warnings

import numpy as np

from . import hashing as _hashing
from . import substr as _substr
from .cuda_kernels import CHUNK, SIMULATOR  # noqa: F401  (read from here by the backend)
from .cuda_kernels import (
    ONES, THREADS, agreement_kernel, ascii_normalize_kernel, band_keys_kernel, char_slots_kernel,
    codepoint_lengths_kernel, copy_ranges_kernel, general_hashes_kernel, greedy_advance_kernel,
    greedy_best_kernel, greedy_decide_kernel, greedy_missing_kernel, greedy_window_kernel,
    has_shingles_kernel, jaccard_kernel, minhash_char_kernel, minhash_hashes_kernel,
    oph_hashes_kernel, string_hashes_kernel, substr_windows_kernel, text_hash128_kernel)
from .primitives import BOUND_WORDS

#: Threads per block of the thread-per-item kernels.
FLAT = 256
#: Bytes of device scratch per byte of text on the general shingling path
#: (``pos_a``, ``pos_b``: int64; ``scratch``: uint8; hashes: uint64).
GENERAL_BYTES_PER_BYTE = 25


# -- launchers --------------------------------------------------------------------

def launch(kernel, blocks: int, threads: int, *args) -> None:
    """Launch ``kernel``; small grids are expected here, so Numba's
    low-occupancy warning is not shown."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*under-utilization")
        kernel[blocks, threads](*args)


def _blocks(items: int, per_block: int) -> int:
    return (items + per_block - 1) // per_block


def _doc_blocks(docs: int) -> int:
    return min(docs, 1 << 22)


def has_shingles(xp, offsets, data, word_mode: bool):
    """Whether each document has a shingle (``kernels.cpu.has_shingles``)."""
    n = offsets.shape[0] - 1
    out = xp.zeros(n, dtype=xp.uint8)
    if n:
        launch(has_shingles_kernel, _blocks(n, FLAT), FLAT, offsets, data, bool(word_mode),
                out)
    return out.view(xp.bool_)


def text_hash128(xp, offsets, data):
    """XXH64 of every document with seeds 0 and 1 (``kernels.cpu.text_hash128``)."""
    n = offsets.shape[0] - 1
    out = xp.empty((n, 2), dtype=xp.uint64)
    if n:
        launch(text_hash128_kernel, _blocks(n, FLAT), FLAT, offsets, data, out)
    return out


def ascii_normalize(xp, offsets, data, steps):
    """``(out, lengths)``: each ASCII document normalized in ``out`` at its own
    offset, its length in ``lengths`` (-1: not ASCII, left to the host);
    ``kernels.text.ascii_normalize_doc`` per document."""
    n = offsets.shape[0] - 1
    out = xp.empty(max(int(data.shape[0]), 1), dtype=xp.uint8)
    lengths = xp.empty(n, dtype=xp.int64)
    if n:
        launch(ascii_normalize_kernel, _blocks(n, FLAT), FLAT, offsets, data, steps,
                np.int64(steps.shape[0]), out, lengths)
    return out, lengths


def copy_ranges(xp, src, src_start, length, dst, dst_start) -> None:
    """``dst[dst_start[i]:+length[i]] = src[src_start[i]:+length[i]]`` for each i."""
    n = int(length.shape[0])
    if n:
        launch(copy_ranges_kernel, _blocks(n, FLAT), FLAT, src, src_start, length, dst,
                dst_start)


def string_hashes(xp, offsets, data, seed: int):
    """XXH64 of every string with ``seed`` (``kernels.substr.string_hashes``)."""
    n = offsets.shape[0] - 1
    out = xp.empty(n, dtype=xp.uint64)
    if n:
        launch(string_hashes_kernel, _blocks(n, FLAT), FLAT, offsets, data, np.uint64(seed),
                out)
    return out


def substr_windows(xp, uh, unit_off, L: int):
    """``(hashes, start)`` of every window (``kernels.substr.window_hashes``):
    ``unit_off`` on the host, the results in ``xp``."""
    woff = _substr.window_offsets(unit_off, L)
    W = int(woff[-1])
    h = xp.empty(W, dtype=xp.uint64)
    start = xp.empty(W, dtype=xp.int64)
    if W:
        launch(substr_windows_kernel, _blocks(W, FLAT), FLAT, uh, xp.asarray(unit_off),
                xp.asarray(woff), np.int64(L), h, start)
    return h, start


def codepoint_lengths(xp, offsets, data):
    """Code points of every document (``kernels.cpu.codepoint_lengths``)."""
    n = offsets.shape[0] - 1
    out = xp.empty(n, dtype=xp.int64)
    if n:
        launch(codepoint_lengths_kernel, _blocks(n, FLAT), FLAT, offsets, data, out)
    return out


def _split_by_size(xp, sizes, limit: int):
    """Cut points ``[0, ..., len(sizes)]`` of runs whose ``sizes`` sum to at
    most ``limit`` (a run holds at least one item)."""
    m = int(sizes.shape[0])
    if m == 0:
        return [0]
    total = int(sizes.sum())
    if total <= limit:
        return [0, m]
    ends = np.cumsum(xp_to_numpy(sizes))
    cuts = [0]
    while cuts[-1] < m:
        base = ends[cuts[-1] - 1] if cuts[-1] else 0
        nxt = int(np.searchsorted(ends, base + limit, side="right"))
        cuts.append(max(nxt, cuts[-1] + 1))
    return cuts


def xp_to_numpy(x):
    """A NumPy copy (or view) of a CuPy or NumPy array."""
    get = getattr(x, "get", None)
    return get() if callable(get) else np.asarray(x)


def _general_hashes(xp, offsets, data, docs, word_mode, n, out_off, hashes, scratch_limit):
    """Run ``doc_shingle_hashes`` for ``docs`` (one thread each), writing the
    base hashes of ``docs[w]`` at ``hashes[out_off[w]:]``; returns the counts.
    Scratch memory is bounded by ``scratch_limit`` bytes (in rounds)."""
    m = int(docs.shape[0])
    counts = xp.zeros(m, dtype=xp.int64)
    if m == 0:
        return counts
    cap = offsets[docs + 1] - offsets[docs] + 1
    cuts = _split_by_size(xp, cap * GENERAL_BYTES_PER_BYTE, scratch_limit)
    for w0, w1 in zip(cuts[:-1], cuts[1:]):
        c = cap[w0:w1]
        scr_off = xp.zeros(w1 - w0 + 1, dtype=xp.int64)
        xp.cumsum(c, out=scr_off[1:])
        total = int(scr_off[-1])
        pos_a = xp.empty(total, dtype=xp.int64)
        pos_b = xp.empty(total, dtype=xp.int64)
        scratch = xp.empty(total, dtype=xp.uint8)
        sub = xp.ascontiguousarray(docs[w0:w1])
        part = xp.zeros(w1 - w0, dtype=xp.int64)
        launch(general_hashes_kernel, _blocks(w1 - w0, FLAT), FLAT,
                offsets, data, sub, bool(word_mode), int(n), scr_off, pos_a, pos_b, scratch,
                xp.ascontiguousarray(out_off[w0:w1]), hashes, part)
        counts[w0:w1] = part
        del pos_a, pos_b, scratch
    return counts


def minhash(xp, offsets, data, docs, word_mode: bool, n: int, a, b, bits: int,
            scratch_limit: int = 1 << 30, sketch: str = "minhash"):
    """Signatures and shingle counts of ``docs`` (``kernels.cpu.minhash``, or
    ``kernels.cpu.oph_minhash`` with keys ``a[0], b[0]`` for ``sketch="oph"``:
    through the general shingling path, a thread per document).

    Returns ``(sig, counts)``: ``len(docs) x K`` (``uint32`` for 32 bits,
    ``uint64`` for 64) and ``int64``.
    """
    D = int(docs.shape[0])
    K = int(a.shape[0])
    shift = 32 if bits == 32 else 0
    sig = xp.empty((D, K), dtype=xp.uint32 if bits == 32 else xp.uint64)
    counts = xp.zeros(D, dtype=xp.int64)
    if D == 0:
        return sig, counts
    if sketch == "oph":
        p = np.uint64(xp_to_numpy(a[:1])[0])
        q = np.uint64(xp_to_numpy(b[:1])[0])
        host_probes = np.empty((K, _hashing.OPH_PROBES), np.int64)
        _hashing.oph_probes(q, K, host_probes)       # the CPU's table, computed once
        probes = xp.asarray(host_probes)
    if word_mode or sketch == "oph":
        general = xp.arange(D, dtype=xp.int64)
    else:
        irregular = xp.zeros(D, dtype=xp.uint8)
        launch(minhash_char_kernel, _doc_blocks(D), THREADS, offsets, data, docs, int(n), a,
                b, shift, sig, counts, irregular)
        general = xp.flatnonzero(irregular).astype(xp.int64)
    if general.shape[0]:
        gdocs = docs[general]
        cap = offsets[gdocs + 1] - offsets[gdocs] + 1
        cuts = _split_by_size(xp, cap * (GENERAL_BYTES_PER_BYTE + 8), scratch_limit)
        for w0, w1 in zip(cuts[:-1], cuts[1:]):
            sub = xp.ascontiguousarray(gdocs[w0:w1])
            off = xp.zeros(w1 - w0 + 1, dtype=xp.int64)
            xp.cumsum(cap[w0:w1], out=off[1:])
            hashes = xp.empty(int(off[-1]), dtype=xp.uint64)
            cnt = _general_hashes(xp, offsets, data, sub, word_mode, n, off[:-1], hashes,
                                  scratch_limit)
            rows = xp.ascontiguousarray(general[w0:w1])
            if sketch == "oph":
                filled = xp.empty((w1 - w0, (K + 63) // 64), dtype=xp.uint64)
                launch(oph_hashes_kernel, _blocks(w1 - w0, FLAT), FLAT, off, hashes, cnt,
                        rows, p, q, shift, probes, sig, filled)
            else:
                launch(minhash_hashes_kernel, _doc_blocks(w1 - w0), THREADS, off, hashes,
                        cnt, rows, a, b, shift, sig)
            counts[rows] = cnt
    return sig, counts


def band_keys(xp, sig, bands: int, rows: int):
    """``N x bands`` band keys of a signature matrix (``kernels.cpu.band_keys``)."""
    N = int(sig.shape[0])
    out = xp.empty((N, bands), dtype=xp.uint64)
    if N and bands:
        launch(band_keys_kernel, _blocks(N * bands, FLAT), FLAT, sig, int(bands), int(rows), out)
    return out


def signature_agreement(xp, sig, ia, ib):
    """Fraction of equal signature columns per edge (``kernels.cpu.signature_agreement``)."""
    E = int(ia.shape[0])
    out = xp.empty(E, dtype=xp.float64)
    if E:
        launch(agreement_kernel, _blocks(E, FLAT), FLAT, sig, ia, ib, out)
    return out


def shingle_sets(xp, offsets, data, docs, word_mode: bool, n: int, scratch_limit: int = 1 << 30):
    """Sorted, de-duplicated base hashes of ``docs`` as CSR ``(set_offsets,
    values)``, equal to ``kernels.cpu.shingle_sets``."""
    D = int(docs.shape[0])
    cap = offsets[docs + 1] - offsets[docs] + 1
    raw_off = xp.zeros(D + 1, dtype=xp.int64)
    if D:
        xp.cumsum(cap, out=raw_off[1:])
    hashes = xp.empty(max(int(raw_off[-1]), 1), dtype=xp.uint64)
    counts = cap - 1                      # every byte slot, for well-formed character text
    if D == 0:
        return raw_off, hashes[:0]
    if word_mode:
        general = xp.arange(D, dtype=xp.int64)
    else:
        irregular = xp.zeros(D, dtype=xp.uint8)
        launch(char_slots_kernel, _doc_blocks(D), THREADS, offsets, data, docs, int(n),
                raw_off, hashes, irregular)
        general = xp.flatnonzero(irregular).astype(xp.int64)
    if general.shape[0]:
        counts[general] = _general_hashes(xp, offsets, data, xp.ascontiguousarray(docs[general]),
                                          word_mode, n, xp.ascontiguousarray(raw_off[general]),
                                          hashes, scratch_limit)
    return _sorted_sets(xp, raw_off, hashes, counts)


def _sorted_sets(xp, raw_off, hashes, counts):
    """CSR of sorted unique values from the runs ``hashes[raw_off[d]:raw_off[d] + counts[d]]``."""
    D = int(counts.shape[0])
    ends = xp.cumsum(counts)
    total = int(ends[-1]) if D else 0
    set_off = xp.zeros(D + 1, dtype=xp.int64)
    if total == 0:
        return set_off, xp.zeros(0, dtype=xp.uint64)
    idx = xp.arange(total, dtype=xp.int64)
    seg = xp.searchsorted(ends, idx, side="right")
    vals = hashes[raw_off[seg] + (idx - (ends - counts)[seg])]
    order = xp.argsort(vals, kind="stable")
    order = order[xp.argsort(seg[order], kind="stable")]
    vals = vals[order]
    seg = seg[order]
    keep = xp.ones(total, dtype=xp.bool_)
    keep[1:] = (vals[1:] != vals[:-1]) | (seg[1:] != seg[:-1])
    xp.cumsum(xp.bincount(seg[keep], minlength=D), out=set_off[1:])
    return set_off, vals[keep]


def set_bound_rows(xp, set_off, values, words=BOUND_WORDS):
    """The bound rows (``D x words`` uint32, :func:`kernels.primitives.
    bound_row`) of the sets of a CSR of sorted unique hashes: each set's
    values counted into ``(words - 1) * 4`` bins by their top bits, each count
    held at 255, four to a word, then the set's size. Equal to
    ``kernels.cpu.set_bounds`` of the same documents, in array operations
    (the set is the de-duplicated hashes ``bound_row`` counts)."""
    D = int(set_off.shape[0]) - 1
    bins = (int(words) - 1) * 4
    sizes = set_off[1:] - set_off[:-1]
    out = xp.zeros((D, int(words)), dtype=xp.uint32)
    out[:, bins // 4] = sizes.astype(xp.uint32)
    total = int(values.shape[0])
    if D == 0 or total == 0:
        return out
    seg = xp.searchsorted(set_off[1:], xp.arange(total, dtype=xp.int64), side="right")
    shift = 64 - (bins.bit_length() - 1)
    cell = seg * bins + (values >> xp.uint64(shift)).astype(xp.int64)
    counts = xp.minimum(xp.bincount(cell, minlength=D * bins), 255).astype(xp.uint32)
    counts = counts.reshape(D, bins // 4, 4)
    out[:, :bins // 4] = (counts[:, :, 0] | (counts[:, :, 1] << 8)
                          | (counts[:, :, 2] << 16) | (counts[:, :, 3] << 24))
    return out


def jaccard_edges(xp, set_off, values, ia, ib):
    """Exact Jaccard of sets ``ia[e]`` and ``ib[e]`` of a CSR (``kernels.cpu.jaccard_edges``)."""
    E = int(ia.shape[0])
    out = xp.empty(E, dtype=xp.float64)
    if values.shape[0] == 0:              # all sets empty: never read, but not a null pointer
        values = xp.zeros(1, dtype=xp.uint64)
    if E:
        launch(jaccard_kernel, _blocks(E, FLAT), FLAT, set_off, values, ia, ib, out)
    return out


def greedy_kernels(xp):
    """The steps of greedy selection in rounds as launchers with the
    arguments of ``kernels.greedy``'s ``*_round`` functions (what
    ``gpu_dedup.stages.select.greedy_rounds`` calls), over ``xp`` arrays."""
    def nonempty(a, dtype):
        # a kernel is never given an empty array (no null pointer); one
        # sorted key that matches no pair stands in for no keys
        if int(a.shape[0]):
            return a
        return xp.full(1, ONES if dtype == np.uint64 else 0, dtype=dtype)

    def scores(keys, *rest):
        # (keys, voff, vals) or (keys, vals): the offsets are never empty
        return (nonempty(keys, np.uint64), *rest[:-1], nonempty(rest[-1], np.float64))

    def scalars(limit, threshold, accept_all):
        return np.int64(limit), np.float64(threshold), np.bool_(accept_all)

    def window_round(ent_v, d_bkt, d_pos, b_off, members, width, woff, out):
        E = int(ent_v.shape[0])
        if E and int(out.shape[0]):
            launch(greedy_window_kernel, _blocks(E, FLAT), FLAT, ent_v, d_bkt, d_pos, b_off,
                    members, np.int64(width), woff, out)

    def decide_round(todo, d_off, d_bkt, d_pos, b_off, klist, kcount, front, limit, keys, voff,
                     vals, mkeys, mvals, threshold, accept_all, state, nmiss):
        T = int(todo.shape[0])
        if T:
            lim, thr, acc = scalars(limit, threshold, accept_all)
            launch(greedy_decide_kernel, _blocks(T, FLAT), FLAT, todo, d_off, d_bkt, d_pos,
                    b_off, nonempty(klist, np.int64), kcount, front, lim, *scores(keys, voff, vals),
                    *scores(mkeys, mvals), thr, acc, state, nmiss, xp.zeros(1, dtype=np.uint64))

    def missing_round(todo, moff, d_off, d_bkt, b_off, klist, kcount, limit, keys, voff,
                      vals, mkeys, mvals, threshold, accept_all, out):
        T = int(todo.shape[0])
        if T and int(out.shape[0]):
            lim, thr, acc = scalars(limit, threshold, accept_all)
            launch(greedy_missing_kernel, _blocks(T, FLAT), FLAT, todo, moff, d_off, d_bkt,
                    b_off, nonempty(klist, np.int64), kcount, lim, *scores(keys, voff, vals),
                    *scores(mkeys, mvals), thr, acc, out)

    def advance_round(bkts, b_off, members, state, klist, kcount, front):
        B = int(bkts.shape[0])
        if B:
            launch(greedy_advance_kernel, _blocks(B, FLAT), FLAT, bkts, b_off, members, state,
                    klist, kcount, front)

    def best_round(docs, d_off, d_bkt, b_off, klist, kcount, limit, keys, voff,
                   vals, mkeys, mvals, threshold, accept_all, nmiss, dup, sim):
        D = int(docs.shape[0])
        if D:
            lim, thr, acc = scalars(limit, threshold, accept_all)
            launch(greedy_best_kernel, _blocks(D, FLAT), FLAT, docs, d_off, d_bkt, b_off,
                    nonempty(klist, np.int64), kcount, lim, *scores(keys, voff, vals),
                    *scores(mkeys, mvals), thr, acc, nmiss, dup, sim, xp.zeros(1, dtype=np.uint64))

    return _types.SimpleNamespace(window_round=window_round, decide_round=decide_round,
                                  missing_round=missing_round, advance_round=advance_round,
                                  best_round=best_round)
