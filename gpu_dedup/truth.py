"""Exact ground truth: every pair of documents whose shingle sets have Jaccard
similarity at least ``t``, found without MinHash.

Two methods over the same sets:

* :func:`brute_force_join` compares every pair (quadratic; small corpora and
  tests).
* :func:`similarity_join` is an exact set-similarity join with prefix,
  length and position filters (AllPairs, Bayardo et al. 2007; PPJoin, Xiao et
  al. 2008). It returns exactly the pairs brute force returns, in the same
  order; a million short documents take under a minute on two cores.

How the join stays exact: tokens (shingle hashes) are renumbered by global
frequency, rarest first, and every set is sorted in that order. Two sets
``x`` and ``y`` with ``|y| <= |x|`` and ``J(x, y) >= t`` share at least
``a = ceil(t / (1 + t) * (|x| + |y|))`` tokens, so they share a token among
the first ``|x| - ceil(t |x|) + 1`` tokens of ``x`` (its probe prefix) and the
first ``|y| - ceil(2t / (1 + t) |y|) + 1`` tokens of ``y`` (its index prefix),
and ``|y| >= t |x|`` (length filter). A match at positions ``i`` and ``j``
with ``c`` earlier matches bounds the overlap by
``c + 1 + min(|x| - i - 1, |y| - j - 1)``; below ``a`` the pair is dropped
(position filter). Survivors are verified by merging the rest of both sets,
and a pair is kept when ``inter / union >= t`` computed in float64, the same
test the engine's verification applies. Filters use a small tolerance so
that rounding never drops a pair the final test would keep.

Sets are the engine's own shingle sets (``kernels.cpu.shingle_sets``: sorted,
de-duplicated 64-bit base hashes), so "exact" means exact over shingle
hashes: two distinct shingles sharing a 64-bit hash is the only error left
(about ``n**2 / 2**65`` for ``n`` distinct shingles). An empty set (an empty
text) has no shingles and is nobody's duplicate.

Example:
    >>> t = exact_truth(["abcdefgh", "abcdefgx", "zzzzzz", "abcdefgh"],
    ...                 shingle="char", ngram=3, threshold=0.6)
    >>> t.rep.tolist(), t.pair_a.tolist(), t.pair_b.tolist()
    ([0, 1, 2, 0], [0], [1])
    >>> t.removed
    2
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from .arrays import unique
from .config import parse_normalize
from .errors import ConfigError
from .kernels.jit import njit
from .kernels.runs import intersect_sorted
from .kernels.threads import for_range
from .kernels.threads import threads as kernel_threads

#: Tolerance on the filters' bounds (see the module docstring).
_EPS = 1e-7


def _check_threshold(threshold: float) -> float:
    t = float(threshold)
    if not 0.0 < t <= 1.0:
        raise ConfigError(f"threshold must be in (0, 1], got {threshold}")
    return t


# -- shingle sets ------------------------------------------------------------

def shingle_sets(texts, shingle: str = "char", ngram: int = 5, normalize="none"):
    """The engine's shingle sets of ``texts`` as CSR: ``(set_offsets, values)``.

    ``values[set_offsets[i]:set_offsets[i + 1]]`` are the sorted, distinct
    64-bit base hashes of document ``i``'s shingles after ``normalize``
    (a comma-separated string, a sequence of steps, or ``"none"``).
    """
    from .kernels.cpu import shingle_sets as _kernel
    from .stages.normalize import normalize_text, text_buffers
    if shingle not in ("char", "word"):
        raise ConfigError(f"shingle must be 'char' or 'word', got {shingle!r}")
    arr = _as_arrow(texts)
    steps = parse_normalize(normalize)
    offsets, data = text_buffers(normalize_text(arr, steps))
    docs = np.arange(len(arr), dtype=np.int64)
    return _kernel(offsets, data, docs, shingle == "word", int(ngram))


def _as_arrow(texts) -> pa.Array:
    if isinstance(texts, pa.ChunkedArray):
        return texts.combine_chunks()
    if isinstance(texts, pa.Array):
        return texts
    return pa.array(list(texts), type=pa.large_string())


# -- kernels -----------------------------------------------------------------

@njit(cache=True, nogil=True)
def _brute_counts(set_off, values, t, counts, i0, i1):
    n = set_off.shape[0] - 1
    for i in range(i0, i1):
        li = set_off[i + 1] - set_off[i]
        if li == 0:
            continue
        c = 0
        for j in range(i + 1, n):
            lj = set_off[j + 1] - set_off[j]
            if lj == 0:
                continue
            inter = intersect_sorted(values, set_off[i], set_off[i + 1], set_off[j], set_off[j + 1])
            if inter / (li + lj - inter) >= t:
                c += 1
        counts[i] = c


@njit(cache=True, nogil=True)
def _brute_fill(set_off, values, t, start, pa_, pb_, ps_, i0, i1):
    n = set_off.shape[0] - 1
    for i in range(i0, i1):
        li = set_off[i + 1] - set_off[i]
        if li == 0:
            continue
        p = start[i]
        for j in range(i + 1, n):
            lj = set_off[j + 1] - set_off[j]
            if lj == 0:
                continue
            inter = intersect_sorted(values, set_off[i], set_off[i + 1], set_off[j], set_off[j + 1])
            s = inter / (li + lj - inter)
            if s >= t:
                pa_[p] = i
                pb_[p] = j
                ps_[p] = s
                p += 1


@njit(cache=True, nogil=True)
def _sort_segments(off, vals, i0, i1):
    for i in range(i0, i1):
        if off[i + 1] - off[i] > 1:
            vals[off[i]:off[i + 1]] = np.sort(vals[off[i]:off[i + 1]])


@njit(cache=True)
def _slot(v, mask):
    h = v * np.uint64(0x9E3779B97F4A7C15)
    return np.int64((h ^ (h >> np.uint64(29))) & mask)


def _lookup_ranks(uniq, rank, values):
    """``rank[k]`` (as int32) for each ``values[i] == uniq[k]`` (``uniq``
    distinct), by an open-addressing hash table."""
    keys, slot_rank, mask = _rank_table(uniq, rank, values)
    mask = np.uint64(mask)                   # back from Numba as a Python int
    out = np.empty(values.shape[0], np.int32)
    for_range(_ranks_of, values.shape[0], keys, slot_rank, mask, values, out, grain=4096)
    return out


@njit(cache=True)
def _rank_table(uniq, rank, values):
    size = 1
    while size < 2 * uniq.shape[0] + 2:
        size <<= 1
    mask = np.uint64(size - 1)
    keys = np.zeros(size, values.dtype)
    slot_rank = np.full(size, -1, np.int64)
    for k in range(uniq.shape[0]):
        s = _slot(np.uint64(uniq[k]), mask)
        while slot_rank[s] >= 0:
            s = (s + 1) & (size - 1)
        keys[s] = uniq[k]
        slot_rank[s] = rank[k]
    return keys, slot_rank, mask


@njit(cache=True, nogil=True)
def _ranks_of(keys, slot_rank, mask, values, out, i0, i1):
    size = keys.shape[0]
    for i in range(i0, i1):
        v = values[i]
        s = _slot(np.uint64(v), mask)
        while keys[s] != v or slot_rank[s] < 0:
            s = (s + 1) & (size - 1)
        out[i] = slot_rank[s]


@njit(cache=True)
def _min_overlap(t, lx, ly):
    v = t / (1.0 + t) * (lx + ly) - _EPS
    a = np.int64(np.ceil(v))
    return a if a > 1 else 1


@njit(cache=True)
def _probe(px, order, set_off, toks, sizes, t, idx_off, idx_set, idx_pos, idx_len,
           acc, lastx, lasty, touched, emit, out_a, out_b, out_s, out_p):
    """Join set ``order[px]`` with every set before it in size order.

    Returns the number of pairs found; writes them from ``out_p`` when
    ``emit``. ``acc`` must be all zero on entry and is left all zero.
    """
    x = order[px]
    lx = sizes[x]
    x0 = set_off[x]
    min_ly = np.int64(np.ceil(t * lx - _EPS))
    if min_ly < 1:
        min_ly = 1
    probe_len = lx - min_ly + 1
    nt = 0
    for i in range(probe_len):
        w = toks[x0 + i]
        lo = idx_off[w]
        hi = idx_off[w + 1]
        if hi - lo > 16:
            # postings are in size order: skip the sets too short to qualify
            lo = lo + np.searchsorted(idx_len[lo:hi], min_ly)
        for e in range(lo, hi):
            py = idx_set[e]
            if py >= px:
                break
            ly = idx_len[e]
            if ly < min_ly:
                continue
            c = acc[py]
            if c < 0:
                continue
            j = idx_pos[e]
            need = _min_overlap(t, lx, ly)
            rest = lx - i - 1
            if ly - j - 1 < rest:
                rest = ly - j - 1
            if c == 0:
                touched[nt] = py
                nt += 1
            if c + 1 + rest >= need:
                acc[py] = c + 1
                lastx[py] = i
                lasty[py] = j
            else:
                acc[py] = -1
    found = 0
    for k in range(nt):
        py = touched[k]
        c = acc[py]
        acc[py] = 0
        if c <= 0:
            continue
        y = order[py]
        ly = sizes[y]
        y0 = set_off[y]
        inter = c + intersect_sorted(toks, x0 + lastx[py] + 1, x0 + lx, y0 + lasty[py] + 1, y0 + ly)
        s = inter / (lx + ly - inter)
        if s >= t:
            if emit:
                a = x if x < y else y
                b = y if x < y else x
                out_a[out_p + found] = a
                out_b[out_p + found] = b
                out_s[out_p + found] = s
            found += 1
    return found


@njit(cache=True, nogil=True)
def _join_pass(order, set_off, toks, sizes, t, idx_off, idx_set, idx_pos, idx_len,
               counts, start, emit, out_a, out_b, out_s, nblocks, b0, b1):
    m = order.shape[0]
    step = (m + nblocks - 1) // nblocks
    for blk in range(b0, b1):
        lo = blk * step
        hi = min(m, lo + step)
        if lo >= hi:
            continue
        acc = np.zeros(m, np.int64)
        lastx = np.empty(m, np.int64)
        lasty = np.empty(m, np.int64)
        touched = np.empty(m, np.int64)
        for px in range(lo, hi):
            p = start[px] if emit else 0
            cnt = _probe(px, order, set_off, toks, sizes, t, idx_off, idx_set, idx_pos,
                         idx_len, acc, lastx, lasty, touched, emit, out_a, out_b, out_s, p)
            if not emit:
                counts[px] = cnt


# -- joins -------------------------------------------------------------------

def _empty_pairs():
    return (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float64))


def _sorted_pairs(a, b, s):
    order = np.lexsort((b, a))
    return a[order], b[order], s[order]


def brute_force_join(set_off, values, threshold: float):
    """Every pair ``i < j`` of non-empty sets with Jaccard ``>= threshold``,
    by comparing all pairs. Returns ``(a, b, similarity)`` sorted by ``(a, b)``."""
    t = _check_threshold(threshold)
    set_off = np.ascontiguousarray(set_off, dtype=np.int64)
    values = np.ascontiguousarray(values)
    if set_off.size < 3:
        return _empty_pairs()
    n = set_off.size - 1
    counts = np.zeros(n, np.int64)
    for_range(_brute_counts, n, set_off, values, t, counts)
    start = np.zeros(counts.size, np.int64)
    np.cumsum(counts[:-1], out=start[1:])
    total = int(counts.sum())
    a = np.empty(total, np.int64)
    b = np.empty(total, np.int64)
    s = np.empty(total, np.float64)
    for_range(_brute_fill, n, set_off, values, t, start, a, b, s)
    return _sorted_pairs(a, b, s)


def frequency_ranks(set_off, values):
    """Renumber tokens by global frequency, rarest first (ties by value), and
    sort every set in that order. Returns ``(ranks, number_of_tokens)``, the
    ranks as ``int32`` (4 bytes a shingle: a million 500-byte documents fit)."""
    values = np.ascontiguousarray(values)
    if values.size == 0:
        return np.zeros(0, np.int32), 0
    srt = np.sort(values)
    start = np.ones(srt.size, bool)
    start[1:] = srt[1:] != srt[:-1]
    uniq = srt[start]
    bounds = np.append(np.flatnonzero(start), srt.size)
    counts = np.diff(bounds)
    if uniq.size >= 2 ** 31:
        raise ConfigError(f"{uniq.size:,} distinct shingles: more than the exact join's "
                          f"int32 ranks hold")
    tok_order = np.lexsort((uniq, counts))
    rank = np.empty(uniq.size, np.int64)
    rank[tok_order] = np.arange(uniq.size, dtype=np.int64)
    toks = _lookup_ranks(uniq, rank, values)
    for_range(_sort_segments, set_off.size - 1, set_off, toks, grain=256)
    return toks, int(uniq.size)


def similarity_join(set_off, values, threshold: float, threads: int | None = None):
    """Every pair ``i < j`` of non-empty sets with Jaccard ``>= threshold``,
    by an exact prefix-filtering join (see the module docstring).

    Args:
        set_off: ``int64`` CSR offsets, one more than the number of sets.
        values: the sets' elements (any integer type), each set sorted and
            without repeats, as :func:`shingle_sets` returns them.
        threshold: in ``(0, 1]``.
        threads: how many threads to size the blocks of work for (the
            kernels' thread count if None); the result does not depend on it.

    Returns:
        ``(a, b, similarity)``: ``int64``, ``int64``, ``float64`` arrays sorted
        by ``(a, b)``, identical to :func:`brute_force_join`'s.
    """
    t = _check_threshold(threshold)
    set_off = np.ascontiguousarray(set_off, dtype=np.int64)
    n = set_off.size - 1
    if n < 2:
        return _empty_pairs()
    sizes = np.diff(set_off)
    toks, n_tok = frequency_ranks(set_off, np.ascontiguousarray(values))
    nonempty = np.flatnonzero(sizes > 0)
    order = nonempty[np.argsort(sizes[nonempty], kind="stable")].astype(np.int64)
    m = order.size
    if m < 2:
        return _empty_pairs()
    # index prefixes: the first ip(y) tokens of each set, posted in size order
    so = sizes[order]
    ip = so - np.ceil(2.0 * t / (1.0 + t) * so - _EPS).astype(np.int64) + 1
    ip = np.clip(ip, 1, so)
    owner = np.repeat(np.arange(m, dtype=np.int64), ip)
    first = np.repeat(set_off[order] - np.concatenate([[0], np.cumsum(ip)[:-1]]), ip)
    flat = first + np.arange(owner.size, dtype=np.int64)
    pos = flat - set_off[order][owner]
    tok = toks[flat]
    srt = np.lexsort((owner, tok))            # by token, then size order
    idx_set = owner[srt]
    idx_pos = pos[srt]
    idx_len = so[idx_set]
    idx_off = np.zeros(n_tok + 1, np.int64)
    np.cumsum(np.bincount(tok, minlength=n_tok), out=idx_off[1:])
    nthreads = threads or kernel_threads()
    nblocks = int(min(m, max(1, nthreads) * 16))
    counts = np.zeros(m, np.int64)
    dummy_i = np.zeros(0, np.int64)
    dummy_f = np.zeros(0, np.float64)
    for_range(_join_pass, nblocks, order, set_off, toks, sizes, t, idx_off, idx_set, idx_pos,
              idx_len, counts, counts, False, dummy_i, dummy_i, dummy_f, nblocks)
    start = np.zeros(m, np.int64)
    np.cumsum(counts[:-1], out=start[1:])
    total = int(counts.sum())
    a = np.empty(total, np.int64)
    b = np.empty(total, np.int64)
    s = np.empty(total, np.float64)
    for_range(_join_pass, nblocks, order, set_off, toks, sizes, t, idx_off, idx_set, idx_pos,
              idx_len, counts, start, True, a, b, s, nblocks)
    return _sorted_pairs(a, b, s)


# -- truth for a corpus -----------------------------------------------------

@dataclass
class Truth:
    """The exact duplicate graph of a corpus.

    Attributes:
        n: number of documents.
        rep: for each document, the first document with the identical text
            (itself if it is the first); identical texts are one node.
        pair_a, pair_b: pairs of representatives (``a < b``, different texts)
            whose shingle sets have Jaccard ``>= threshold``.
        similarity: their exact Jaccard similarity.
        threshold: the threshold used.
        empty: documents without shingles (nobody's duplicate, except that
            identical empty texts are still identical texts).
    """

    n: int
    rep: np.ndarray
    pair_a: np.ndarray
    pair_b: np.ndarray
    similarity: np.ndarray
    threshold: float
    empty: np.ndarray

    def components(self) -> np.ndarray:
        """Cluster label of every document in the exact graph (identical-text
        edges plus the pairs): the smallest index of its component."""
        return components(self.n, np.concatenate([self.rep, self.pair_a]),
                          np.concatenate([np.arange(self.n), self.pair_b]))

    @property
    def removed(self) -> int:
        """Documents removed by keeping one per component of the exact graph."""
        labels = self.components()
        return int(self.n - unique(labels).size)

    def removal_quality(self, kept, duplicate_of, set_off, values) -> dict:
        """How trustworthy a selection's removals are, by exact Jaccard.

        Args:
            kept: bool per document.
            duplicate_of: int64 per document, the kept document each removed
                one names (-1 for kept ones, or when none is named).
            set_off, values: the shingle sets of every document
                (:func:`shingle_sets` of the whole corpus, same shingling).

        Returns:
            ``justified``: removed documents whose ``duplicate_of`` is at
            Jaccard >= threshold (and its share of the removed);
            ``supported``: removed documents with any kept document at or
            above the threshold (identical texts included); ``residual``:
            kept documents with another kept document at or above it (and
            its share of the kept).
        """
        from .kernels.cpu import jaccard_edges
        kept = np.asarray(kept, dtype=bool)
        dup = np.asarray(duplicate_of, dtype=np.int64)
        n = self.n
        removed = np.flatnonzero(~kept)
        named = removed[dup[removed] >= 0]
        sims = jaccard_edges(np.asarray(set_off, np.int64), np.asarray(values),
                             named, dup[named]) if named.size else np.zeros(0)
        justified = int(np.count_nonzero(sims >= self.threshold))
        # groups of identical texts: how many kept documents each holds
        kept_in = np.bincount(self.rep[kept], minlength=n)
        a, b = self.pair_a, self.pair_b
        near_kept = np.zeros(n, bool)          # groups with a kept near-duplicate group
        both = (kept_in[a] > 0) & (kept_in[b] > 0)
        near_kept[a[kept_in[b] > 0]] = True
        near_kept[b[kept_in[a] > 0]] = True
        g = self.rep[removed]
        supported = int(np.count_nonzero(near_kept[g] | (kept_in[g] > 0)))
        res_group = np.zeros(n, bool)
        res_group[a[both]] = True
        res_group[b[both]] = True
        gk = self.rep[kept]
        residual = int(np.count_nonzero(res_group[gk] | (kept_in[gk] > 1)))
        nr, nk = int(removed.size), int(kept.sum())
        return {"removed": nr, "justified": justified,
                "justified_share": justified / nr if nr else 1.0,
                "supported": supported, "supported_share": supported / nr if nr else 1.0,
                "kept": nk, "residual": residual,
                "residual_share": residual / nk if nk else 0.0}

    @property
    def identical_removed(self) -> int:
        """Documents removed as exact copies of an earlier text."""
        return int((self.rep != np.arange(self.n)).sum())


def components(n: int, a, b) -> np.ndarray:
    """Connected components of ``n`` nodes and edges ``(a, b)``, labelled by
    their smallest node."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components
    if n == 0:
        return np.zeros(0, np.int64)
    a = np.asarray(a, np.int64)
    b = np.asarray(b, np.int64)
    g = coo_matrix((np.ones(a.size, np.int8), (a, b)), shape=(n, n)).tocsr()
    _, labels = connected_components(g, directed=True, connection="weak")
    first = np.full(labels.max() + 1, n, np.int64)
    np.minimum.at(first, labels, np.arange(n, dtype=np.int64))
    return first[labels]


def identical_representatives(texts) -> np.ndarray:
    """For each text, the index of the first identical text (by a 128-bit
    fingerprint of its UTF-8 bytes)."""
    from .kernels.cpu import text_hash128
    from .stages.normalize import text_buffers
    arr = _as_arrow(texts)
    n = len(arr)
    if n == 0:
        return np.zeros(0, np.int64)
    offsets, data = text_buffers(arr)
    fp = text_hash128(offsets, data)
    idx = np.arange(n, dtype=np.int64)
    order = np.lexsort((idx, fp[:, 1], fp[:, 0]))
    f0 = fp[order, 0]
    f1 = fp[order, 1]
    start = np.ones(n, bool)
    start[1:] = (f0[1:] != f0[:-1]) | (f1[1:] != f1[:-1])
    group = np.cumsum(start) - 1
    rep = np.empty(n, np.int64)
    rep[order] = order[start][group]
    return rep


def exact_truth(texts, shingle: str = "char", ngram: int = 5, normalize="none",
                threshold: float = 0.8, method: str = "join") -> Truth:
    """The exact duplicate graph of ``texts`` (see :class:`Truth`).

    Identical texts are collapsed first; the join (``method="join"``) or
    brute force (``method="brute"``) runs over the distinct texts.
    """
    t = _check_threshold(threshold)
    arr = _as_arrow(texts)
    n = len(arr)
    rep = identical_representatives(arr)
    reps = np.flatnonzero(rep == np.arange(n))
    set_off, values = shingle_sets(arr.take(pa.array(reps)), shingle, ngram, normalize)
    if method == "join":
        a, b, s = similarity_join(set_off, values, t)
    elif method == "brute":
        a, b, s = brute_force_join(set_off, values, t)
    else:
        raise ConfigError(f"method must be 'join' or 'brute', got {method!r}")
    sizes = np.diff(set_off)
    empty = np.zeros(n, bool)
    empty[reps[sizes == 0]] = True
    empty |= empty[rep]
    return Truth(n, rep, reps[a], reps[b], s, t, empty)
