"""CUDA kernels: Numba CUDA over device copies of the Arrow string buffers.

Nothing computed per document, per pair or per band is written again here:
the kernels call the ``@njit`` functions of :mod:`kernels.text`,
:mod:`kernels.hashing`, :mod:`kernels.primitives`, :mod:`kernels.substr` and
:mod:`kernels.greedy`, which the CPU kernels call too; Numba compiles an
``@njit`` function for the device when a ``@cuda.jit`` kernel calls it.
Signatures, band keys, fingerprints and Jaccard values are therefore the CPU
kernels' values, bit for bit. What is the device's own is how the work is
spread over threads (a block per document for character signatures).

Under Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``, set before Numba is
imported) the kernels run as Python, and so do the shared functions: the
kernels call plain Python functions built from the very code objects of the
``@njit`` functions (:mod:`kernels.simulator`).

Signatures (``minhash``) take two paths:

* **Character shingles of well-formed UTF-8** (the common case): one thread
  block per document. The block hashes a chunk of ``CHUNK`` shingles into
  shared memory (one shingle per code point start), then each of its ``THREADS``
  threads folds that chunk into the minima of four permutations, on the top 32
  bits only for 32-bit signatures (``min(h >> 32) == min(h) >> 32``). Byte
  positions that start no shingle contribute the document's first shingle
  again, which leaves every minimum unchanged.
* **Word shingles, and documents whose bytes are not well-formed UTF-8**:
  one thread per document runs the CPU's ``doc_shingle_hashes`` into scratch
  buffers in device memory, then a block per document takes the minima.

The public functions (no leading underscore) launch the kernels. They take
the array module ``xp`` (CuPy on a GPU, NumPy under the simulator) and arrays
that live where ``xp`` allocates; what they return lives there too.
"""
from __future__ import annotations

import types as _types
import warnings

import numpy as np
from numba import cuda

from . import greedy as _greedy
from . import hashing as _hashing
from . import primitives as _prim
from . import substr as _substr
from . import text as _text
from .simulator import SIMULATOR, shared as _shared

#: Threads per block of the block-per-document kernels, and shingle slots
#: hashed into shared memory per round (8 bytes each). The simulator runs
#: each thread as a Python thread, so it gets small blocks and chunks, which
#: also puts several permutation groups and chunks into small test inputs.
THREADS, CHUNK = (4, 16) if SIMULATOR else (32, 512)
#: Threads per block of the thread-per-item kernels.
FLAT = 256
#: Bytes of device scratch per byte of text on the general shingling path
#: (``pos_a``, ``pos_b``: int64; ``scratch``: uint8; hashes: uint64).
GENERAL_BYTES_PER_BYTE = 25

_ONES = np.uint64(0xFFFFFFFFFFFFFFFF)
_SEED0 = np.uint64(0)
_SEED1 = np.uint64(1)


# -- the shared functions, as the kernels see them -----------------------------

_xxh64 = _shared(_hashing.xxh64)
_utf8_decode = _shared(_text.utf8_decode)
_has_shingle = _shared(_text.has_shingle)
_codepoint_count = _shared(_text.codepoint_count)
_ascii_normalize_doc = _shared(_text.ascii_normalize_doc)
_permute = _shared(_hashing.permute)
_oph_row = _shared(_hashing.oph_row)
_doc_shingle_hashes = _shared(_prim.doc_shingle_hashes)
_fold_minima = _shared(_prim.fold_minima)
_fold_minima_top32 = _shared(_prim.fold_minima_top32)
_band_key = _shared(_prim.band_key)
_agreement = _shared(_prim.agreement)
_jaccard_runs = _shared(_prim.jaccard_runs)
_roll_start = _shared(_substr.roll_start)
_window_one = _shared(_greedy.window_one)
_decide_one = _shared(_greedy.decide_one)
_missing_one = _shared(_greedy.missing_one)
_advance_one = _shared(_greedy.advance_one)
_best_one = _shared(_greedy.best_one)


# -- device functions -----------------------------------------------------------

@cuda.jit(device=True)
def _irregular(data, start, end, tid):
    """What this thread finds among its bytes of ``data[start:end]``: bit 0,
    a byte that breaks the layout where the code points that ``utf8_decode``
    steps through are exactly the bytes that are not continuation bytes;
    bit 1, a byte outside ASCII."""
    bad = 0
    for p in range(start + tid, end, THREADS):
        if data[p] >= 0x80:
            bad |= 2
        if (data[p] & 0xC0) == 0x80:
            if p == start:
                bad |= 1
        else:
            cp, q = _utf8_decode(data, p, end)
            for r in range(p + 1, q):
                if (data[r] & 0xC0) != 0x80:
                    bad |= 1
            if q < end and (data[q] & 0xC0) == 0x80:
                bad |= 1
    return bad


@cuda.jit(device=True)
def _char_end(data, p, end, n):
    """End of the ``n`` code points starting at ``p``; -1 if fewer remain."""
    q = p
    c = 0
    while c < n and q < end:
        cp, q = _utf8_decode(data, q, end)
        c += 1
    if c == n:
        return q
    return -1


@cuda.jit(device=True)
def _first_hash(data, start, end, n):
    """Base hash of a document's first shingle (the whole text if shorter than n)."""
    e = _char_end(data, start, end, n)
    if e < 0:
        e = end
    return _xxh64(data, start, e, _SEED0)


@cuda.jit(device=True)
def _slot_hash(data, p, end, n, first, ascii):
    """``(hash, 1)`` of the shingle starting at byte ``p``, or ``(first, 0)``
    when no shingle starts there (a continuation byte, or fewer than ``n``
    code points left). In an ``ascii`` document a code point is a byte."""
    if ascii:
        if p + n <= end:
            return _xxh64(data, p, p + n, _SEED0), 1
        return first, 0
    if (data[p] & 0xC0) != 0x80:
        e = _char_end(data, p, end, n)
        if e >= 0:
            return _xxh64(data, p, e, _SEED0), 1
    return first, 0


@cuda.jit(device=True)
def _minima(sh, length, a, b, out, t, shift):
    """Fold ``sh[:length]`` into row ``t`` of the signature matrix ``out``,
    a share of its permutations per thread of the block: thread ``tid`` takes
    ``g + tid + j * THREADS`` (``j < 4``) in each group ``g`` of ``4 *
    THREADS``, for eight independent minima per shared-memory read of two
    hashes. The fold is the CPU's (``kernels.primitives.fold_minima``); only
    32-bit signatures take ``fold_minima_top32``, which multiplies in 32-bit
    halves (a 64-bit multiply costs a GPU several) and gives the same values."""
    if shift == 32:
        _fold_minima_top32(sh, length, a, b, out[t], cuda.threadIdx.x, THREADS)
    else:
        _fold_minima(sh, length, a, b, out[t], cuda.threadIdx.x, THREADS)


# -- kernels --------------------------------------------------------------------

@cuda.jit(cache=True)
def _minhash_char_kernel(offsets, data, docs, n, a, b, shift, out, counts, irregular):
    """Block per document: character-shingle signatures of well-formed text.
    Documents that are not are flagged in ``irregular`` and left alone."""
    sh = cuda.shared.array(CHUNK, np.uint64)
    first = cuda.shared.array(1, np.uint64)
    total = cuda.shared.array(1, np.int64)
    tid = cuda.threadIdx.x
    K = a.shape[0]
    ones = _ONES >> np.uint64(shift)
    for t in range(cuda.blockIdx.x, docs.shape[0], cuda.gridDim.x):
        i = docs[t]
        start = offsets[i]
        end = offsets[i + 1]
        if tid == 0:
            total[0] = 0
        bad = _irregular(data, start, end, tid)
        if cuda.syncthreads_or(bad & 1):
            if tid == 0:
                irregular[t] = 1
            continue
        ascii = not cuda.syncthreads_or(bad & 2)
        if tid == 0:
            first[0] = _first_hash(data, start, end, n)
        for k in range(tid, K, THREADS):
            out[t, k] = ones
        cuda.syncthreads()
        f = first[0]
        mine = 0
        for c0 in range(start, end, CHUNK):
            length = min(CHUNK, end - c0)
            for s in range(tid, length, THREADS):
                h, real = _slot_hash(data, c0 + s, end, n, f, ascii)
                sh[s] = h
                mine += real
            cuda.syncthreads()
            _minima(sh, length, a, b, out, t, shift)
            cuda.syncthreads()
        cuda.atomic.add(total, 0, mine)
        cuda.syncthreads()
        if tid == 0:
            c = total[0]
            if c == 0 and end > start:
                c = 1
            counts[t] = c


@cuda.jit(cache=True)
def _general_hashes_kernel(offsets, data, docs, word_mode, n, scr_off, pos_a, pos_b, scratch,
                           out_off, hashes, counts):
    """Thread per document: the CPU's ``doc_shingle_hashes`` (any text, either
    shingle kind) into ``hashes[out_off[w]:]`` with scratch ``[scr_off[w], scr_off[w+1])``."""
    w = cuda.grid(1)
    if w < docs.shape[0]:
        i = docs[w]
        lo = scr_off[w]
        hi = scr_off[w + 1]
        o = out_off[w]
        counts[w] = _doc_shingle_hashes(data, offsets[i], offsets[i + 1], word_mode, n,
                                        pos_a[lo:hi], pos_b[lo:hi], scratch[lo:hi],
                                        hashes[o:o + (hi - lo)])


@cuda.jit(cache=True)
def _minhash_hashes_kernel(hash_off, hashes, counts, rows, a, b, shift, out):
    """Block per document: row ``rows[w]`` of ``out`` from the base hashes
    ``hashes[hash_off[w]:hash_off[w] + counts[w]]``."""
    sh = cuda.shared.array(CHUNK, np.uint64)
    tid = cuda.threadIdx.x
    K = a.shape[0]
    ones = _ONES >> np.uint64(shift)
    for w in range(cuda.blockIdx.x, rows.shape[0], cuda.gridDim.x):
        t = rows[w]
        lo = hash_off[w]
        cnt = counts[w]
        for k in range(tid, K, THREADS):
            out[t, k] = ones
        for c0 in range(0, cnt, CHUNK):
            length = min(CHUNK, cnt - c0)
            for s in range(tid, length, THREADS):
                sh[s] = hashes[lo + c0 + s]
            cuda.syncthreads()
            _minima(sh, length, a, b, out, t, shift)
            cuda.syncthreads()


@cuda.jit(cache=True)
def _oph_hashes_kernel(hash_off, hashes, counts, rows, p, q, shift, probes, out, filled):
    """Thread per document: row ``rows[w]`` of ``out`` is the one-permutation
    sketch (the CPU's ``oph_row``) of ``hashes[hash_off[w]:][:counts[w]]``;
    ``filled`` is scratch, a row of words per document."""
    w = cuda.grid(1)
    if w < rows.shape[0]:
        t = rows[w]
        lo = hash_off[w]
        cnt = counts[w]
        if cnt == 0:
            for k in range(out.shape[1]):
                out[t, k] = _ONES >> np.uint64(shift)
        else:
            _oph_row(hashes[lo:lo + cnt], cnt, p, q, np.uint64(shift), probes, out[t],
                     filled[w])


@cuda.jit(cache=True)
def _char_slots_kernel(offsets, data, docs, n, slot_off, slots, irregular):
    """Block per document: the base hash of the shingle at every byte of a
    well-formed document (the first shingle's where none starts), for
    shingle sets. Other documents are flagged in ``irregular``."""
    first = cuda.shared.array(1, np.uint64)
    tid = cuda.threadIdx.x
    for t in range(cuda.blockIdx.x, docs.shape[0], cuda.gridDim.x):
        i = docs[t]
        start = offsets[i]
        end = offsets[i + 1]
        bad = _irregular(data, start, end, tid)
        if cuda.syncthreads_or(bad & 1):
            if tid == 0:
                irregular[t] = 1
            continue
        ascii = not cuda.syncthreads_or(bad & 2)
        if tid == 0:
            first[0] = _first_hash(data, start, end, n)
        cuda.syncthreads()
        f = first[0]
        base = slot_off[t] - start
        for p in range(start + tid, end, THREADS):
            h, real = _slot_hash(data, p, end, n, f, ascii)
            slots[base + p] = h
        cuda.syncthreads()


@cuda.jit(cache=True)
def _has_shingles_kernel(offsets, data, word_mode, out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = 1 if _has_shingle(data, offsets[i], offsets[i + 1], word_mode) else 0


@cuda.jit(cache=True)
def _text_hash128_kernel(offsets, data, out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i, 0] = _xxh64(data, offsets[i], offsets[i + 1], _SEED0)
        out[i, 1] = _xxh64(data, offsets[i], offsets[i + 1], _SEED1)


@cuda.jit(cache=True)
def _ascii_normalize_kernel(offsets, data, steps, nsteps, out, lengths):
    i = cuda.grid(1)
    if i < lengths.shape[0]:
        lengths[i] = _ascii_normalize_doc(data, offsets[i], offsets[i + 1], steps, nsteps, out)


@cuda.jit(cache=True)
def _copy_ranges_kernel(src, src_start, length, dst, dst_start):
    i = cuda.grid(1)
    if i < length.shape[0]:
        a = src_start[i]
        b = dst_start[i]
        for r in range(length[i]):
            dst[b + r] = src[a + r]


@cuda.jit(cache=True)
def _string_hashes_kernel(offsets, data, seed, out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = _xxh64(data, offsets[i], offsets[i + 1], seed)


@cuda.jit(cache=True)
def _substr_windows_kernel(uh, unit_off, woff, L, h, start):
    w = cuda.grid(1)
    if w < h.shape[0]:
        lo = 0                       # the last document whose first window is <= w
        hi = woff.shape[0] - 1
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if woff[mid] <= w:
                lo = mid
            else:
                hi = mid
        u0 = unit_off[lo] + (w - woff[lo])
        h[w] = _roll_start(uh, u0, L)
        start[w] = u0


@cuda.jit(cache=True)
def _codepoint_lengths_kernel(offsets, data, out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = _codepoint_count(data, offsets[i], offsets[i + 1])


@cuda.jit(cache=True)
def _band_keys_kernel(sig, bands, rows, out):
    g = cuda.grid(1)
    if g < sig.shape[0] * bands:
        i = g // bands
        j = g - i * bands
        out[i, j] = _band_key(sig, i, j, rows)


@cuda.jit(cache=True)
def _agreement_kernel(sig, ea, eb, out):
    e = cuda.grid(1)
    if e < ea.shape[0]:
        out[e] = _agreement(sig, ea[e], eb[e])


@cuda.jit(cache=True)
def _jaccard_kernel(set_off, values, ia, ib, out):
    e = cuda.grid(1)
    if e < ia.shape[0]:
        j, exact = _jaccard_runs(values, set_off[ia[e]], set_off[ia[e] + 1], set_off[ib[e]],
                                 set_off[ib[e] + 1], 0)
        out[e] = j


# -- greedy selection in rounds (the steps of kernels/greedy.py) -----------------

@cuda.jit(cache=True)
def _greedy_window_kernel(ent_v, d_bkt, d_pos, b_off, members, width, woff, out):
    e = cuda.grid(1)
    if e < ent_v.shape[0]:
        _window_one(e, ent_v, d_bkt, d_pos, b_off, members, width, woff, out)


@cuda.jit(cache=True)
def _greedy_decide_kernel(todo, d_off, d_bkt, d_pos, b_off, klist, kcount, front, limit, keys,
                          voff, vals, mkeys, mvals, threshold, accept_all, state, nmiss, out):
    i = cuda.grid(1)
    if i < todo.shape[0]:
        _decide_one(i, todo, d_off, d_bkt, d_pos, b_off, klist, kcount, front, limit, keys, voff,
                    vals, mkeys, mvals, threshold, accept_all, state, nmiss, out)


@cuda.jit(cache=True)
def _greedy_missing_kernel(todo, moff, d_off, d_bkt, b_off, klist, kcount, limit, keys, voff,
                           vals, mkeys, mvals, threshold, accept_all, out):
    i = cuda.grid(1)
    if i < todo.shape[0]:
        _missing_one(i, todo, moff, d_off, d_bkt, b_off, klist, kcount, limit, keys, voff,
                     vals, mkeys, mvals, threshold, accept_all, out)


@cuda.jit(cache=True)
def _greedy_advance_kernel(bkts, b_off, members, state, klist, kcount, front):
    i = cuda.grid(1)
    if i < bkts.shape[0]:
        _advance_one(i, bkts, b_off, members, state, klist, kcount, front)


@cuda.jit(cache=True)
def _greedy_best_kernel(docs, d_off, d_bkt, b_off, klist, kcount, limit, keys, voff, vals,
                        mkeys, mvals, threshold, accept_all, nmiss, dup, sim, out):
    i = cuda.grid(1)
    if i < docs.shape[0]:
        _best_one(i, docs, d_off, d_bkt, b_off, klist, kcount, limit, keys, voff, vals, mkeys,
                  mvals, threshold, accept_all, nmiss, dup, sim, out)


# -- launchers --------------------------------------------------------------------

def _launch(kernel, blocks: int, threads: int, *args) -> None:
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
        _launch(_has_shingles_kernel, _blocks(n, FLAT), FLAT, offsets, data, bool(word_mode),
                out)
    return out.view(xp.bool_)


def text_hash128(xp, offsets, data):
    """XXH64 of every document with seeds 0 and 1 (``kernels.cpu.text_hash128``)."""
    n = offsets.shape[0] - 1
    out = xp.empty((n, 2), dtype=xp.uint64)
    if n:
        _launch(_text_hash128_kernel, _blocks(n, FLAT), FLAT, offsets, data, out)
    return out


def ascii_normalize(xp, offsets, data, steps):
    """``(out, lengths)``: each ASCII document normalized in ``out`` at its own
    offset, its length in ``lengths`` (-1: not ASCII, left to the host);
    ``kernels.hashing.ascii_normalize_doc`` per document."""
    n = offsets.shape[0] - 1
    out = xp.empty(max(int(data.shape[0]), 1), dtype=xp.uint8)
    lengths = xp.empty(n, dtype=xp.int64)
    if n:
        _launch(_ascii_normalize_kernel, _blocks(n, FLAT), FLAT, offsets, data, steps,
                np.int64(steps.shape[0]), out, lengths)
    return out, lengths


def copy_ranges(xp, src, src_start, length, dst, dst_start) -> None:
    """``dst[dst_start[i]:+length[i]] = src[src_start[i]:+length[i]]`` for each i."""
    n = int(length.shape[0])
    if n:
        _launch(_copy_ranges_kernel, _blocks(n, FLAT), FLAT, src, src_start, length, dst,
                dst_start)


def string_hashes(xp, offsets, data, seed: int):
    """XXH64 of every string with ``seed`` (``kernels.substr.string_hashes``)."""
    n = offsets.shape[0] - 1
    out = xp.empty(n, dtype=xp.uint64)
    if n:
        _launch(_string_hashes_kernel, _blocks(n, FLAT), FLAT, offsets, data, np.uint64(seed),
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
        _launch(_substr_windows_kernel, _blocks(W, FLAT), FLAT, uh, xp.asarray(unit_off),
                xp.asarray(woff), np.int64(L), h, start)
    return h, start


def codepoint_lengths(xp, offsets, data):
    """Code points of every document (``kernels.cpu.codepoint_lengths``)."""
    n = offsets.shape[0] - 1
    out = xp.empty(n, dtype=xp.int64)
    if n:
        _launch(_codepoint_lengths_kernel, _blocks(n, FLAT), FLAT, offsets, data, out)
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
        _launch(_general_hashes_kernel, _blocks(w1 - w0, FLAT), FLAT,
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
        _launch(_minhash_char_kernel, _doc_blocks(D), THREADS, offsets, data, docs, int(n), a,
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
                _launch(_oph_hashes_kernel, _blocks(w1 - w0, FLAT), FLAT, off, hashes, cnt,
                        rows, p, q, shift, probes, sig, filled)
            else:
                _launch(_minhash_hashes_kernel, _doc_blocks(w1 - w0), THREADS, off, hashes,
                        cnt, rows, a, b, shift, sig)
            counts[rows] = cnt
    return sig, counts


def band_keys(xp, sig, bands: int, rows: int):
    """``N x bands`` band keys of a signature matrix (``kernels.cpu.band_keys``)."""
    N = int(sig.shape[0])
    out = xp.empty((N, bands), dtype=xp.uint64)
    if N and bands:
        _launch(_band_keys_kernel, _blocks(N * bands, FLAT), FLAT, sig, int(bands), int(rows), out)
    return out


def signature_agreement(xp, sig, ia, ib):
    """Fraction of equal signature columns per edge (``kernels.cpu.signature_agreement``)."""
    E = int(ia.shape[0])
    out = xp.empty(E, dtype=xp.float64)
    if E:
        _launch(_agreement_kernel, _blocks(E, FLAT), FLAT, sig, ia, ib, out)
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
        _launch(_char_slots_kernel, _doc_blocks(D), THREADS, offsets, data, docs, int(n),
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


def jaccard_edges(xp, set_off, values, ia, ib):
    """Exact Jaccard of sets ``ia[e]`` and ``ib[e]`` of a CSR (``kernels.cpu.jaccard_edges``)."""
    E = int(ia.shape[0])
    out = xp.empty(E, dtype=xp.float64)
    if values.shape[0] == 0:              # all sets empty: never read, but not a null pointer
        values = xp.zeros(1, dtype=xp.uint64)
    if E:
        _launch(_jaccard_kernel, _blocks(E, FLAT), FLAT, set_off, values, ia, ib, out)
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
        return xp.full(1, _ONES if dtype == np.uint64 else 0, dtype=dtype)

    def scores(keys, *rest):
        # (keys, voff, vals) or (keys, vals): the offsets are never empty
        return (nonempty(keys, np.uint64), *rest[:-1], nonempty(rest[-1], np.float64))

    def scalars(limit, threshold, accept_all):
        return np.int64(limit), np.float64(threshold), np.bool_(accept_all)

    def window_round(ent_v, d_bkt, d_pos, b_off, members, width, woff, out):
        E = int(ent_v.shape[0])
        if E and int(out.shape[0]):
            _launch(_greedy_window_kernel, _blocks(E, FLAT), FLAT, ent_v, d_bkt, d_pos, b_off,
                    members, np.int64(width), woff, out)

    def decide_round(todo, d_off, d_bkt, d_pos, b_off, klist, kcount, front, limit, keys, voff,
                     vals, mkeys, mvals, threshold, accept_all, state, nmiss):
        T = int(todo.shape[0])
        if T:
            lim, thr, acc = scalars(limit, threshold, accept_all)
            _launch(_greedy_decide_kernel, _blocks(T, FLAT), FLAT, todo, d_off, d_bkt, d_pos,
                    b_off, nonempty(klist, np.int64), kcount, front, lim, *scores(keys, voff, vals),
                    *scores(mkeys, mvals), thr, acc, state, nmiss, xp.zeros(1, dtype=np.uint64))

    def missing_round(todo, moff, d_off, d_bkt, b_off, klist, kcount, limit, keys, voff,
                      vals, mkeys, mvals, threshold, accept_all, out):
        T = int(todo.shape[0])
        if T and int(out.shape[0]):
            lim, thr, acc = scalars(limit, threshold, accept_all)
            _launch(_greedy_missing_kernel, _blocks(T, FLAT), FLAT, todo, moff, d_off, d_bkt,
                    b_off, nonempty(klist, np.int64), kcount, lim, *scores(keys, voff, vals),
                    *scores(mkeys, mvals), thr, acc, out)

    def advance_round(bkts, b_off, members, state, klist, kcount, front):
        B = int(bkts.shape[0])
        if B:
            _launch(_greedy_advance_kernel, _blocks(B, FLAT), FLAT, bkts, b_off, members, state,
                    klist, kcount, front)

    def best_round(docs, d_off, d_bkt, b_off, klist, kcount, limit, keys, voff,
                   vals, mkeys, mvals, threshold, accept_all, nmiss, dup, sim):
        D = int(docs.shape[0])
        if D:
            lim, thr, acc = scalars(limit, threshold, accept_all)
            _launch(_greedy_best_kernel, _blocks(D, FLAT), FLAT, docs, d_off, d_bkt, b_off,
                    nonempty(klist, np.int64), kcount, lim, *scores(keys, voff, vals),
                    *scores(mkeys, mvals), thr, acc, nmiss, dup, sim, xp.zeros(1, dtype=np.uint64))

    return _types.SimpleNamespace(window_round=window_round, decide_round=decide_round,
                                  missing_round=missing_round, advance_round=advance_round,
                                  best_round=best_round)
