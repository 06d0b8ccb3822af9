"""Whole-array NumPy twins of the text kernels of :mod:`kernels.cpu`.

Each kernel at the end of this module takes the arguments of the CPU kernel
of the same name (``oph_blocks`` for ``cpu._oph_blocks``, ...) and writes
the same values into its output arrays, bit for bit, without Numba: every step runs
across all the documents of a call at once, on ``uint64`` arrays whose
multiplication wraps around as XXH64 and the mixers need.

The documents' bytes are gathered into one buffer. Their code points are the
steps of :func:`kernels.text.utf8_decode` from each document's start: where
the bytes are valid UTF-8 these are the bytes that are not continuation
bytes; a document whose bytes are not is walked exactly by a prefix scan of
the decoder's state (the bytes left in the current code point). A
character shingle is then a window of the buffer between two code point
starts; a word shingle a window of the documents' folded text (their words
joined by one space, :func:`kernels.text.fold_spaces_doc`), where its words
lie joined just as :func:`kernels.primitives.doc_shingle_hashes` hashes
them. All windows are hashed together by :func:`xxh64_windows`.

The constants are those of the compiled kernels' modules (importing them
loads no Numba: :mod:`kernels.jit`).
"""
from __future__ import annotations

import functools

import numpy as np
import xxhash

from .cpu import BLOCK
from .densify import FIRST_PROBES
from .hashing import U64
from .jit import interpreted_block, on_block_end
from .vector_hash import xxh64_windows
from .vector_misc import fmix64 as _fmix64, probe_bases, probe_bins, segment_indices

#: Zero bytes after a gathered buffer: an 8-byte read from any position up
#: to 32 past its end stays inside.
_PAD = 40
#: Bytes (and documents) of text handled at once; longer calls go in pieces.
#: A piece's arrays (8 bytes or more a byte of its text) stay small enough
#: that the C heap hands the next piece the memory of the last: with pieces
#: of 256 KiB, every piece's arrays were fresh pages, and a run of 1,000
#: real documents (580 KB) took about 5,700 page faults more, and 0.29-0.34
#: s against 0.21 s after its imports.
_CHUNK_BYTES = 1 << 15
_CHUNK_DOCS = 8192


# -- documents and their code points ----------------------------------------------

def _gather(offsets, data, docs):
    """The bytes of the documents ``docs``, one after another, followed by
    :data:`_PAD` zero bytes, and where each starts (``len(docs) + 1``)."""
    starts = offsets[docs]
    lengths = offsets[docs + 1] - starts
    off = np.zeros(docs.shape[0] + 1, np.int64)
    np.cumsum(lengths, out=off[1:])
    size = int(off[-1])
    buf = np.zeros(size + _PAD, np.uint8)
    if docs.shape[0] and (docs.shape[0] == 1 or (np.diff(docs) == 1).all()):
        s = int(starts[0])
        buf[:size] = data[s:s + size]
    else:
        buf[:size] = data[segment_indices(starts, lengths)]
    return buf, off


@functools.cache
def _compose_table():
    """Composition of maps of the decoder's states ``0..3``, each map coded
    as four 2-bit images: ``table[f * 256 + g]`` codes ``x -> f(g(x))``."""
    image = (np.arange(256)[:, None] >> (2 * np.arange(4))) & 3        # image[f, x]
    both = image[np.arange(256)[:, None, None], image[None, :, :]]     # f(g(x))
    return (both << (2 * np.arange(4))).sum(axis=-1).astype(np.uint8).ravel()


def _walked_starts(step, off):
    """Whether each byte starts a code point when each document (bounds
    ``off``, none empty) is walked from its start by ``step`` bytes at a
    time: the state entering a byte (bytes left of the current code point,
    0 at a start) by a prefix scan of the maps from each byte's state to the
    next, composed in ``log2`` rounds."""
    size = step.shape[0]
    # the map of a byte: 0 -> step - 1, r -> r - 1; the byte before a
    # document maps every state to 0
    f = ((step.astype(np.uint8) - 1) | np.uint8(0 << 2 | 1 << 4 | 2 << 6)).astype(np.uint16)
    f[off[1:-1] - 1] = 0
    table = _compose_table()
    d = 1
    while d < size:
        f[d:] = table[(f[d:] << 8) | f[:-d]]
        d *= 2
    out = np.empty(size, bool)
    out[0] = True
    out[1:] = (f[:-1] & 3) == 0
    return out


class _Text:
    """The documents ``docs`` of ``(offsets, data)`` gathered into one
    buffer, with their code points as :func:`kernels.text.utf8_decode`
    steps through them.

    Attributes: ``buf`` (the bytes and padding), ``off`` (where each
    document starts, ``D + 1``), ``size`` (bytes), ``docs`` (``D``),
    ``starts`` (the byte of each code point, in order), ``step`` (its
    bytes), ``first`` (the index of each document's first code point,
    ``D + 1``).
    """

    def __init__(self, offsets, data, docs):
        self.buf, self.off = _gather(offsets, data, docs)
        self.size = size = int(self.off[-1])
        self.docs = docs.shape[0]
        b = self.buf[:size]
        if not size or int(b.max()) < 0x80:
            # ASCII: every byte is a code point of one byte
            self.starts = np.arange(size, dtype=np.int64)
            self.step = np.ones(size, np.int64)
            self.first = self.off.copy()
            return
        lengths = np.diff(self.off)
        # utf8_decode's step: 2, 3 or 4 bytes by the lead byte, no more than
        # the document has left
        step = (1 + (b >= 0xC0).view(np.uint8) + (b >= 0xE0).view(np.uint8)
                + (b >= 0xF0).view(np.uint8))
        for k in (1, 2, 3):
            at = self.off[1:][lengths >= k] - k
            step[at] = np.minimum(step[at], k)
        head = (b & 0xC0) != 0x80
        head[self.off[:-1][lengths > 0]] = True
        starts = np.flatnonzero(head)
        after = np.empty_like(starts)
        after[:-1] = starts[1:]
        after[-1:] = size
        wrong = starts + step[starts] != after
        if wrong.any():
            # some bytes are not UTF-8: those documents walked exactly
            bad = np.unique(np.searchsorted(self.off, starts[wrong], side="right") - 1)
            sub = segment_indices(self.off[bad], lengths[bad])
            sub_off = np.zeros(bad.shape[0] + 1, np.int64)
            np.cumsum(lengths[bad], out=sub_off[1:])
            head[sub] = _walked_starts(step[sub], sub_off)
            starts = np.flatnonzero(head)
        self.starts = starts
        self.step = step[starts].astype(np.int64)
        self.first = np.searchsorted(starts, self.off)

    def code_points(self):
        """The value of each code point (``utf8_decode``'s, by its step)."""
        b = self.buf
        c = b[self.starts].astype(np.int64)
        long = np.flatnonzero(self.step > 1)
        if long.shape[0]:
            s = self.starts[long]
            k = self.step[long]
            c0 = c[long]
            c1 = b[s + 1].astype(np.int64) & 0x3F
            c2 = b[s + 2].astype(np.int64) & 0x3F
            c3 = b[s + 3].astype(np.int64) & 0x3F
            c[long] = np.select([k == 4, k == 3],
                                [((c0 & 0x07) << 18) | (c1 << 12) | (c2 << 6) | c3,
                                 ((c0 & 0x0F) << 12) | (c1 << 6) | c2],
                                ((c0 & 0x1F) << 6) | c1)
        return c

    def words(self):
        """The words (maximal runs of code points that are not whitespace,
        :func:`kernels.text.next_word`): ``(lo, hi, count)``, the byte bounds
        of each word in order and the number of words of each document."""
        space = _space_mask(self.code_points())
        m = space.shape[0]
        edge = np.zeros(m + 1, bool)                 # a document starts or ends
        edge[self.first] = True
        word = ~space
        open_ = word.copy()
        open_[1:] &= space[:-1] | edge[1:m]
        close = word.copy()
        close[:-1] &= space[1:] | edge[1:m]
        lo = self.starts[open_]
        hi_cp = np.flatnonzero(close)
        hi = self.starts[hi_cp] + self.step[hi_cp]
        opened = np.zeros(m + 1, np.int64)
        np.cumsum(open_, out=opened[1:])
        count = np.diff(opened[self.first])
        return lo, hi, count


#: ``str.isspace`` of the code points 0 to 0x84 (none from 0x21 on), and
#: False at 0x85 for every code point from there on, found alone
_LOW_SPACE = np.array([chr(c).isspace() for c in range(0x85)] + [False], bool)


def _space_mask(c):
    """``str.isspace`` of each code point (``kernels.text.is_space``): a
    table below 0x85, comparisons for the few code points from there on."""
    out = _LOW_SPACE[np.minimum(c, 0x85)]
    at = np.flatnonzero(c >= 0x85)
    if at.shape[0]:
        h = c[at]
        out[at] = ((h == 0x85) | (h == 0xA0) | (h == 0x1680) | ((h >= 0x2000) & (h <= 0x200A))
                   | (h == 0x2028) | (h == 0x2029) | (h == 0x202F) | (h == 0x205F)
                   | (h == 0x3000))
    return out


def _folded(text):
    """The documents of ``text`` with their whitespace folded
    (:func:`kernels.text.fold_spaces_doc`): ``(buf, off, lo, hi, count)``,
    the folded bytes followed by :data:`_PAD` zeros, where each document
    starts, the bounds of each word in them and each document's number of
    words."""
    lo, hi, count = text.words()
    width = hi - lo
    wdoc = np.repeat(np.arange(text.docs), count)
    run = np.cumsum(width + 1) - (width + 1)                 # before each word
    first = np.cumsum(count) - count
    lengths = np.zeros(text.docs, np.int64)
    has = count > 0
    last = (first + count - 1)[has]
    lengths[has] = run[last] + width[last] - run[first[has]]
    off = np.zeros(text.docs + 1, np.int64)
    np.cumsum(lengths, out=off[1:])
    flo = off[wdoc] + run - run[first[wdoc]] if wdoc.shape[0] else np.zeros(0, np.int64)
    size = int(off[-1])
    out = np.zeros(size + _PAD, np.uint8)
    out[:size] = 32
    src = segment_indices(lo, width)
    out[segment_indices(flo, width)] = text.buf[src]
    return out, off, flo, flo + width, count


# -- shingles ---------------------------------------------------------------------

def _windows(count):
    """The document of each shingle of documents with ``count`` shingles,
    and its index in it."""
    doc = np.repeat(np.arange(count.shape[0]), count)
    i = np.arange(doc.shape[0], dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)
    return doc, i


#: the :func:`shingle_hashes` of the interpreted run going on: ``(token,
#: [(offsets, data, docs, word_mode, n, result), ...])``, at most
#: :data:`_KEPT_BYTES` of hashes; a run's signatures and then its bound rows
#: hash the same pieces of the same buffers
_kept = (None, [])
_KEPT_BYTES = 64 << 20


def _drop_kept(token) -> None:
    global _kept
    if _kept[0] is token:
        _kept = (None, [])


on_block_end.append(_drop_kept)


def shingle_hashes(offsets, data, docs, word_mode, n):
    """The base hashes of the shingles of the documents ``docs``
    (:func:`kernels.primitives.doc_shingle_hashes`), all together:
    ``(hashes, doc, count)``, the hashes in order, the index into ``docs``
    of each and the number of each document (read-only arrays: within one
    interpreted run they are kept for a later call with the same buffers,
    documents and shingles)."""
    global _kept
    docs = np.asarray(docs, np.int64)
    token = interpreted_block()
    word_mode = bool(word_mode)
    if token is None:
        return _shingle_hashes(offsets, data, docs, word_mode, n)
    if _kept[0] is not token:
        _kept = (token, [])
    entries = _kept[1]
    for o, d, ds, w, k, result in entries:
        if o is offsets and d is data and w == word_mode and k == n and \
                np.array_equal(ds, docs):
            return result
    result = _shingle_hashes(offsets, data, docs, word_mode, n)
    for a in result:
        a.flags.writeable = False
    if sum(e[5][0].nbytes for e in entries) + result[0].nbytes <= _KEPT_BYTES:
        entries.append((offsets, data, docs.copy(), word_mode, n, result))
    return result


def _shingle_hashes(offsets, data, docs, word_mode, n):
    text = _Text(offsets, data, docs)
    if word_mode:
        buf, off, lo, hi, words = _folded(text)
        g = np.minimum(n, words)
        count = np.where(words > 0, words - g + 1, 0)
        doc, i = _windows(count)
        w = (np.cumsum(words) - words)[doc] + i
        a = lo[w]
        b = hi[w + g[doc] - 1]
        return xxh64_windows(buf, int(off[-1]), a, b - a), doc, count
    cps = np.diff(text.first)
    # each document's code point starts and its end, one after another
    bounds = np.insert(text.starts, text.first[1:], text.off[1:])
    base = text.first[:-1] + np.arange(text.docs)
    g = np.minimum(n, cps)
    count = np.where(cps > 0, cps - g + 1, 0)
    doc, i = _windows(count)
    at = base[doc] + i
    a = bounds[at]
    b = bounds[at + g[doc]]
    return xxh64_windows(text.buf, text.size, a, b - a), doc, count


def _pieces(offsets, docs, lo, hi):
    """``docs[lo:hi]`` in consecutive pieces of about :data:`_CHUNK_BYTES`
    bytes and at most :data:`_CHUNK_DOCS` documents: ``(t0, t1)`` each."""
    if hi <= lo:
        return
    sizes = offsets[docs[lo:hi] + 1] - offsets[docs[lo:hi]] + 1
    ends = np.cumsum(sizes)
    t = lo
    while t < hi:
        before = ends[t - lo - 1] if t > lo else 0
        u = int(np.searchsorted(ends, before + _CHUNK_BYTES, side="right")) + lo
        u = min(max(u, t + 1), t + _CHUNK_DOCS, hi)
        yield t, u
        t = u


def _block_range(docs, b0, b1):
    """The rows of ``docs`` in blocks ``b0..b1-1``: ``(lo, hi)``."""
    return b0 * BLOCK, min(docs.shape[0], b1 * BLOCK)


#: Shingles a document, on average, from which each document's hashes are
#: sorted on their own rather than all together by a key.
_SORT_EACH = 512


def _sorted_sets(hashes, doc, docs):
    """The distinct hashes of each of ``docs`` documents, sorted:
    ``(values, doc)``."""
    if hashes.shape[0] == 0:
        return hashes, doc
    if hashes.shape[0] >= _SORT_EACH * docs:
        # long documents: each one's hashes sorted where they lie (``doc``
        # ascends), which NumPy does 2.5-4x faster than ordering by a key
        h = hashes.copy()
        ends = np.cumsum(np.bincount(doc, minlength=docs)).tolist()
        for a, b in zip([0] + ends[:-1], ends):
            h[a:b].sort()
        d = doc
    else:
        h, d = _sorted_by_key(hashes, doc, docs)
    new = np.ones(h.shape[0], bool)
    new[1:] = (h[1:] != h[:-1]) | (d[1:] != d[:-1])
    return h[new], d[new]


def _sorted_by_key(hashes, doc, docs):
    """``(hashes, doc)`` in the order of document, then hash: by one key,
    the document above a hash's top bits, then by the whole hash only where
    that leaves hashes out of order (two of a document equal in their top
    bits)."""
    bits = max(int(docs - 1).bit_length(), 1)
    key = (doc.astype(np.uint64) << U64(64 - bits)) | (hashes >> U64(bits))
    order = np.argsort(key)
    h = hashes[order]
    d = doc[order]
    if (h[1:] < h[:-1])[d[1:] == d[:-1]].any():
        order = np.lexsort((hashes, doc))
        h = hashes[order]
        d = doc[order]
    return h, d


# -- the kernels ------------------------------------------------------------------

def oph_blocks(offsets, data, docs, word_mode, n, p, q, shift, out, counts, probes, hits, b0,
               b1):
    """``kernels.cpu._oph_blocks``: the one-permutation sketches of the
    documents of blocks ``b0..b1-1`` of ``docs`` into ``out``, their numbers
    of shingles into ``counts`` (``hits``, a shortcut of the compiled
    kernel, is not needed)."""
    lo, hi = _block_range(docs, b0, b1)
    for t0, t1 in _pieces(offsets, docs, lo, hi):
        hashes, doc, count = shingle_hashes(offsets, data, docs[t0:t1], word_mode, n)
        counts[t0:t1] = count
        out[t0:t1] = _sketches(hashes, doc, count, p, q, shift, out.shape[1], probes)


def _sketches(hashes, doc, count, p, q, shift, K, probes):
    """The sketches (``D x K`` uint64, ``~0 >> shift`` for a document
    without shingles) of documents with ``count`` shingles each, whose base
    hashes are ``hashes`` (of document ``doc``)."""
    D = count.shape[0]
    top = ~U64(0) >> U64(shift)
    rows = np.full((D, K), top, np.uint64)
    with np.errstate(over="ignore"):
        y = _fmix64(hashes ^ U64(p))
        k = (((y >> U64(32)) * U64(K)) >> U64(32)).astype(np.int64)
        at = doc * K + k
        np.minimum.at(rows.reshape(-1), at, y >> U64(shift))
        filled = np.zeros((D, K), bool)
        filled.reshape(-1)[at] = True
        some = np.flatnonzero(count > 0)
        if some.shape[0]:
            rows[some] = np.take_along_axis(rows[some], _sources(filled[some], q, probes), axis=1)
    return rows


def _sources(filled, q, probes):
    """The bin each bin of each row takes its value from (``kernels.cpu.
    _oph_blocks`` and ``kernels.hashing.oph_source``): itself when filled,
    else the first filled one of its first probes, else of its later
    probes, else the next filled one to its right."""
    D, K = filled.shape
    bins = np.arange(K)
    src = np.full((D, K), -1, np.int64)
    for t in range(FIRST_PROBES - 1, -1, -1):
        c = probes[:, t].astype(np.int64)
        src = np.where(filled[:, c], c, src)
    src = np.where(filled, bins, src)
    r, k = np.nonzero(src < 0)
    if r.shape[0]:
        # a row with one filled bin gives it to every bin
        nfilled = filled.sum(axis=1)
        alone = nfilled[r] == 1
        if alone.any():
            src[r[alone], k[alone]] = np.argmax(filled[r[alone]], axis=1)
            r, k = r[~alone], k[~alone]
        src[r, k] = _probe_on(filled, q, probes, r, k)
    return src


def _probe_on(filled, q, probes, r, k):
    """``kernels.hashing.oph_source`` of bin ``k[i]`` of row ``r[i]`` from
    probe :data:`FIRST_PROBES` on: batches of probes (from the table
    ``probes``, then computed), each on the bins still without a source."""
    K = filled.shape[1]
    T = probes.shape[1]
    found = np.full(r.shape[0], -1, np.int64)
    flat = filled.reshape(-1)
    live = np.arange(r.shape[0])
    t = FIRST_PROBES
    batch = 8
    base = None
    while live.shape[0] and t < 8 * K:
        u = min(t + batch, 8 * K, T if t < T else 8 * K)
        if u <= T:
            cand = probes[k[live], t:u].astype(np.int64)
        else:
            if base is None:
                base = probe_bases(q, K)
            if live.shape[0] > K:                    # every bin's, then each pair's
                cand = probe_bins(base, np.arange(t, u), K)[k[live]]
            else:
                cand = probe_bins(base[k[live]], np.arange(t, u), K)
        hit = flat[(r[live] * K)[:, None] + cand]
        got = hit.any(axis=1)
        found[live[got]] = cand[got, np.argmax(hit[got], axis=1)]
        live = live[~got]
        t = u
        batch = max(8, min(batch * 2, 1024, (1 << 22) // max(live.shape[0], 1)))
    if live.shape[0]:
        # the next filled bin to the right, cyclically
        rows = filled[r[live]]
        twice = np.concatenate([rows, rows], axis=1)
        pos = np.where(twice, np.arange(2 * K), 2 * K)
        nxt = np.minimum.accumulate(pos[:, ::-1], axis=1)[:, ::-1]
        found[live] = nxt[np.arange(live.shape[0]), k[live]] % K
    return found


def shingle_set_blocks(offsets, data, docs, word_mode, n, raw_off, raw, uniq, b0, b1):
    """``kernels.cpu._shingle_set_blocks``: the sorted distinct base hashes
    of each document ``t`` of blocks ``b0..b1-1`` at ``raw[raw_off[t]:]``,
    their number in ``uniq[t]``."""
    lo, hi = _block_range(docs, b0, b1)
    for t0, t1 in _pieces(offsets, docs, lo, hi):
        hashes, doc, count = shingle_hashes(offsets, data, docs[t0:t1], word_mode, n)
        values, vdoc = _sorted_sets(hashes, doc, t1 - t0)
        number = np.bincount(vdoc, minlength=t1 - t0)
        _, rank = _windows(number)
        raw[raw_off[t0:t1][vdoc] + rank] = values
        uniq[t0:t1] = number


def set_bound_blocks(offsets, data, docs, word_mode, n, out, b0, b1):
    """``kernels.cpu._set_bound_blocks``: the bound rows
    (``kernels.primitives.bound_row``) of the documents of blocks
    ``b0..b1-1`` into ``out``."""
    lo, hi = _block_range(docs, b0, b1)
    for t0, t1 in _pieces(offsets, docs, lo, hi):
        hashes, doc, count = shingle_hashes(offsets, data, docs[t0:t1], word_mode, n)
        values, vdoc = _sorted_sets(hashes, doc, t1 - t0)
        D = t1 - t0
        nb = (out.shape[1] - 1) * 4                 # the row's bins, a power of two
        bins = (values >> U64(64 - (nb.bit_length() - 1))).astype(np.int64)
        per_bin = np.bincount(vdoc * nb + bins, minlength=D * nb)
        packed = np.minimum(per_bin, 255).astype(np.uint8).reshape(D, nb)
        out[t0:t1, :nb // 4] = packed.view("<u4")
        out[t0:t1, nb // 4] = np.bincount(vdoc, minlength=D)


def text_hash_docs(offsets, data, out, i0, i1):
    """``kernels.cpu._text_hash_docs``: XXH64 with seeds 0 and 1 of each of
    the documents ``i0..i1-1``, into ``out[i]`` (the ``xxhash`` package's,
    the same function)."""
    view = memoryview(np.ascontiguousarray(data))
    bounds = offsets[i0:i1 + 1].tolist()
    for seed in (0, 1):
        out[i0:i1, seed] = np.fromiter(
            (xxhash.xxh64_intdigest(view[a:b], seed) for a, b in zip(bounds, bounds[1:])),
            np.uint64, count=max(i1 - i0, 0))


def fold_docs(offsets, data, out, where, lengths, base, i0, i1):
    """``kernels.cpu._fold_docs``: documents ``i0..i1-1`` with their
    whitespace folded, one after another in ``out`` from where document
    ``i0`` starts (plus ``base``); where each starts into ``where``, its
    length into ``lengths``."""
    if i1 <= i0:
        return
    o = int(base + offsets[i0] - offsets[0])
    for t0, t1 in _pieces(offsets, np.arange(i0, i1), 0, i1 - i0):
        text = _Text(offsets, data, np.arange(i0 + t0, i0 + t1))
        buf, off, _, _, _ = _folded(text)
        n = int(off[-1])
        out[o:o + n] = buf[:n]
        where[i0 + t0:i0 + t1] = o + off[:-1]
        lengths[i0 + t0:i0 + t1] = np.diff(off)
        o += n


def has_shingle_docs(offsets, data, word_mode, out, i0, i1):
    """``kernels.cpu._has_shingle_docs``: whether each document ``i0..i1-1``
    has a shingle (a code point; in word mode, a word)."""
    if i1 <= i0:
        return
    if not word_mode:
        out[i0:i1] = offsets[i0 + 1:i1 + 1] > offsets[i0:i1]
        return
    for t0, t1 in _pieces(offsets, np.arange(i0, i1), 0, i1 - i0):
        text = _Text(offsets, data, np.arange(i0 + t0, i0 + t1))
        space = _space_mask(text.code_points())
        solid = np.concatenate([[0], np.cumsum(~space)])
        out[i0 + t0:i0 + t1] = solid[text.first[1:]] > solid[text.first[:-1]]
