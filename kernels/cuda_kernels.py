"""CUDA kernels: Numba CUDA over device copies of the Arrow string buffers.

Nothing computed per document, per pair or per band is written again here:
the kernels call the ``@njit`` functions of :mod:`kernels.text`,
:mod:`kernels.hashing`, :mod:`kernels.primitives`, :mod:`kernels.substr` and
:mod:`kernels.greedy`, which the CPU kernels call too; Numba compiles an
``@njit`` function for the device when a ``@cuda.jit`` kernel calls it.
Signatures, band keys, fingerprints and Jaccard values are therefore the CPU
kernels' values, bit for bit. What is the device's own is how the work is
spread over threads: a block per document for character signatures (below),
a thread per document, pair, band key or bucket elsewhere.

Under Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``, set before Numba is
imported) the kernels run as Python, and so do the shared functions: the
kernels call plain Python functions built from the very code objects of the
``@njit`` functions (:mod:`kernels.simulator`).

Signatures take two paths:

* **Character shingles of well-formed UTF-8** (the common case): one thread
  block per document (:func:`minhash_char_kernel`). The block hashes a chunk
  of ``CHUNK`` shingles into shared memory (one shingle per code point
  start), then each of its ``THREADS`` threads folds that chunk into the
  minima of its share of the permutations, on the top 32 bits only for
  32-bit signatures (``min(h >> 32) == min(h) >> 32``). Byte positions that
  start no shingle contribute the document's first shingle again, which
  leaves every minimum unchanged.
* **Word shingles, and documents whose bytes are not well-formed UTF-8**:
  one thread per document runs the CPU's ``doc_shingle_hashes`` into scratch
  buffers in device memory (:func:`general_hashes_kernel`), then a block per
  document takes the minima (:func:`minhash_hashes_kernel`), or a thread per
  document the one-permutation sketch (:func:`oph_hashes_kernel`).

The kernels are launched by :mod:`kernels.cuda`, which holds the host side.
"""
from __future__ import annotations

import numpy as np
from numba import cuda

from . import greedy as _greedy
from . import hashing as _hashing
from . import primitives as _prim
from . import runs as _runs
from . import substr as _substr
from . import text as _text
from .simulator import SIMULATOR, shared as _shared

#: Threads per block of the block-per-document kernels, and shingle slots
#: hashed into shared memory per round (8 bytes each). The simulator runs
#: each thread as a Python thread, so it gets small blocks and chunks, which
#: also puts several permutation groups and chunks into small test inputs.
THREADS, CHUNK = (4, 16) if SIMULATOR else (32, 512)

ONES = np.uint64(0xFFFFFFFFFFFFFFFF)
_SEED0 = np.uint64(0)
_SEED1 = np.uint64(1)


# -- the shared functions, as the kernels see them -----------------------------

_xxh64 = _shared(_hashing.xxh64)
_utf8_decode = _shared(_text.utf8_decode)
_has_shingle = _shared(_text.has_shingle)
_codepoint_count = _shared(_text.codepoint_count)
_ascii_normalize_doc = _shared(_text.ascii_normalize_doc)
_oph_row = _shared(_hashing.oph_row)
_doc_shingle_hashes = _shared(_prim.doc_shingle_hashes)
_fold_minima = _shared(_prim.fold_minima)
_fold_minima_top32 = _shared(_prim.fold_minima_top32)
_band_key = _shared(_prim.band_key)
_agreement = _shared(_prim.agreement)
_jaccard_runs = _shared(_runs.jaccard_runs)
_roll_start = _shared(_substr.roll_start)
_window_one = _shared(_greedy.window_one)
_decide_one = _shared(_greedy.decide_one)
_missing_one = _shared(_greedy.missing_one)
_advance_one = _shared(_greedy.advance_one)
_best_one = _shared(_greedy.best_one)


# -- device functions -----------------------------------------------------------
# The character path of the block-per-document kernels is the device's own:
# each thread hashes the shingles that start at its bytes, so a shingle's end
# is found from its first byte (_char_end) instead of from the code point
# starts that doc_shingle_hashes lists in one walk of the document. The two
# agree on well-formed UTF-8; a document where they could differ is flagged
# irregular (_irregular) and goes through doc_shingle_hashes itself.

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
def _start_document(data, start, end, n, tid, irregular, t, first):
    """What the block-per-document character kernels do first for document
    ``t`` (``data[start:end]``), every thread of the block together: flag it
    in ``irregular`` when its UTF-8 is not well formed, else let thread 0 put
    its first shingle's hash in ``first[0]``. Returns ``(regular, ascii)``;
    ``first[0]`` is read after the block's next ``syncthreads``."""
    bad = _irregular(data, start, end, tid)
    if cuda.syncthreads_or(bad & 1):
        if tid == 0:
            irregular[t] = 1
        return False, False
    ascii = not cuda.syncthreads_or(bad & 2)
    if tid == 0:
        first[0] = _first_hash(data, start, end, n)
    return True, ascii


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
def minhash_char_kernel(offsets, data, docs, n, a, b, shift, out, counts, irregular):
    """Block per document: character-shingle signatures of well-formed text.
    Documents that are not are flagged in ``irregular`` and left alone."""
    sh = cuda.shared.array(CHUNK, np.uint64)
    first = cuda.shared.array(1, np.uint64)
    total = cuda.shared.array(1, np.int64)
    tid = cuda.threadIdx.x
    K = a.shape[0]
    ones = ONES >> np.uint64(shift)
    for t in range(cuda.blockIdx.x, docs.shape[0], cuda.gridDim.x):
        i = docs[t]
        start = offsets[i]
        end = offsets[i + 1]
        if tid == 0:
            total[0] = 0
        regular, ascii = _start_document(data, start, end, n, tid, irregular, t, first)
        if not regular:
            continue
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
def general_hashes_kernel(offsets, data, docs, word_mode, n, scr_off, pos_a, pos_b, scratch,
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
def minhash_hashes_kernel(hash_off, hashes, counts, rows, a, b, shift, out):
    """Block per document: row ``rows[w]`` of ``out`` from the base hashes
    ``hashes[hash_off[w]:hash_off[w] + counts[w]]``."""
    sh = cuda.shared.array(CHUNK, np.uint64)
    tid = cuda.threadIdx.x
    K = a.shape[0]
    ones = ONES >> np.uint64(shift)
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
def oph_hashes_kernel(hash_off, hashes, counts, rows, p, q, shift, probes, out, filled):
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
                out[t, k] = ONES >> np.uint64(shift)
        else:
            _oph_row(hashes[lo:lo + cnt], cnt, p, q, np.uint64(shift), probes, out[t],
                     filled[w])


@cuda.jit(cache=True)
def char_slots_kernel(offsets, data, docs, n, slot_off, slots, irregular):
    """Block per document: the base hash of the shingle at every byte of a
    well-formed document (the first shingle's where none starts), for
    shingle sets. Other documents are flagged in ``irregular``."""
    first = cuda.shared.array(1, np.uint64)
    tid = cuda.threadIdx.x
    for t in range(cuda.blockIdx.x, docs.shape[0], cuda.gridDim.x):
        i = docs[t]
        start = offsets[i]
        end = offsets[i + 1]
        regular, ascii = _start_document(data, start, end, n, tid, irregular, t, first)
        if not regular:
            continue
        cuda.syncthreads()
        f = first[0]
        base = slot_off[t] - start
        for p in range(start + tid, end, THREADS):
            h, real = _slot_hash(data, p, end, n, f, ascii)
            slots[base + p] = h
        cuda.syncthreads()


@cuda.jit(cache=True)
def has_shingles_kernel(offsets, data, word_mode, out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = 1 if _has_shingle(data, offsets[i], offsets[i + 1], word_mode) else 0


@cuda.jit(cache=True)
def text_hash128_kernel(offsets, data, out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i, 0] = _xxh64(data, offsets[i], offsets[i + 1], _SEED0)
        out[i, 1] = _xxh64(data, offsets[i], offsets[i + 1], _SEED1)


@cuda.jit(cache=True)
def ascii_normalize_kernel(offsets, data, steps, nsteps, out, lengths):
    i = cuda.grid(1)
    if i < lengths.shape[0]:
        lengths[i] = _ascii_normalize_doc(data, offsets[i], offsets[i + 1], steps, nsteps, out)


@cuda.jit(cache=True)
def copy_ranges_kernel(src, src_start, length, dst, dst_start):
    i = cuda.grid(1)
    if i < length.shape[0]:
        a = src_start[i]
        b = dst_start[i]
        for r in range(length[i]):
            dst[b + r] = src[a + r]


@cuda.jit(cache=True)
def string_hashes_kernel(offsets, data, seed, out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = _xxh64(data, offsets[i], offsets[i + 1], seed)


@cuda.jit(cache=True)
def substr_windows_kernel(uh, unit_off, woff, L, h, start):
    """Thread per window: its hash from scratch (``roll_start``), where the CPU
    rolls along a document (``window_hashes``): the same polynomial mod 2**64."""
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
def codepoint_lengths_kernel(offsets, data, out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = _codepoint_count(data, offsets[i], offsets[i + 1])


@cuda.jit(cache=True)
def band_keys_kernel(sig, bands, rows, out):
    g = cuda.grid(1)
    if g < sig.shape[0] * bands:
        i = g // bands
        j = g - i * bands
        out[i, j] = _band_key(sig, i, j, rows)


@cuda.jit(cache=True)
def agreement_kernel(sig, ea, eb, out):
    e = cuda.grid(1)
    if e < ea.shape[0]:
        out[e] = _agreement(sig, ea[e], eb[e])


@cuda.jit(cache=True)
def jaccard_kernel(set_off, values, ia, ib, out):
    e = cuda.grid(1)
    if e < ia.shape[0]:
        j, exact = _jaccard_runs(values, set_off[ia[e]], set_off[ia[e] + 1], set_off[ib[e]],
                                 set_off[ib[e] + 1], 0)
        out[e] = j


# -- greedy selection in rounds (the steps of kernels/greedy.py) -----------------

@cuda.jit(cache=True)
def greedy_window_kernel(ent_v, d_bkt, d_pos, b_off, members, width, woff, out):
    e = cuda.grid(1)
    if e < ent_v.shape[0]:
        _window_one(e, ent_v, d_bkt, d_pos, b_off, members, width, woff, out)


@cuda.jit(cache=True)
def greedy_decide_kernel(todo, d_off, d_bkt, d_pos, b_off, klist, kcount, front, limit, keys,
                          voff, vals, mkeys, mvals, threshold, accept_all, state, nmiss, out):
    i = cuda.grid(1)
    if i < todo.shape[0]:
        _decide_one(i, todo, d_off, d_bkt, d_pos, b_off, klist, kcount, front, limit, keys, voff,
                    vals, mkeys, mvals, threshold, accept_all, state, nmiss, out)


@cuda.jit(cache=True)
def greedy_missing_kernel(todo, moff, d_off, d_bkt, b_off, klist, kcount, limit, keys, voff,
                           vals, mkeys, mvals, threshold, accept_all, out):
    i = cuda.grid(1)
    if i < todo.shape[0]:
        _missing_one(i, todo, moff, d_off, d_bkt, b_off, klist, kcount, limit, keys, voff,
                     vals, mkeys, mvals, threshold, accept_all, out)


@cuda.jit(cache=True)
def greedy_advance_kernel(bkts, b_off, members, state, klist, kcount, front):
    i = cuda.grid(1)
    if i < bkts.shape[0]:
        _advance_one(i, bkts, b_off, members, state, klist, kcount, front)


@cuda.jit(cache=True)
def greedy_best_kernel(docs, d_off, d_bkt, b_off, klist, kcount, limit, keys, voff, vals,
                        mkeys, mvals, threshold, accept_all, nmiss, dup, sim, out):
    i = cuda.grid(1)
    if i < docs.shape[0]:
        _best_one(i, docs, d_off, d_bkt, b_off, klist, kcount, limit, keys, voff, vals, mkeys,
                  mvals, threshold, accept_all, nmiss, dup, sim, out)
