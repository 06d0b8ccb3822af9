"""Whole-array NumPy twins of some CPU kernels, for runs too small to pay
for Numba.

Each function here has the arguments of a kernel of :mod:`kernels.cpu` or
:mod:`kernels.buckets` and the same effect on its output arguments and
return value, bit for bit (``tests/test_vector_misc.py`` compares them):
the kernel's loop over documents, edges or bins becomes a few operations on
whole arrays. The constants are those of :mod:`kernels.hashing`,
:mod:`kernels.primitives`, :mod:`kernels.buckets` and :mod:`kernels.cpu`
(importing them loads no Numba: :mod:`kernels.jit`). 64-bit hashing wraps around as the compiled
code's does (NumPy ``uint64`` arithmetic, its overflow warnings silenced).
"""
from __future__ import annotations

import numpy as np

from .buckets import BUCKET_MUL as _BUCKET_MUL, BUCKET_SALT as _BUCKET_SALT
from .densify import TABLE_PROBES
from .hashing import GOLDEN, MIX_1, MIX_2, U64
from .runs import runs_intersect_at_least

_S27 = U64(27)
_S30 = U64(30)
_S31 = U64(31)
_S32 = U64(32)

#: Edges of :func:`upper_bound_edges` gathered at once (two ``64 x`` this
#: many bytes).
EDGE_CHUNK = 1 << 14


def _u64(x) -> np.uint64:
    """A scalar as ``uint64``, negative integers wrapped (two's complement)."""
    return U64(int(x) & 0xFFFFFFFFFFFFFFFF)


def fmix64(x):
    """:func:`kernels.hashing.fmix64` of every value of the ``uint64`` array
    ``x`` (a new array)."""
    with np.errstate(over="ignore"):
        x = x ^ (x >> _S30)
        x *= MIX_1
        x ^= x >> _S27
        x *= MIX_2
        x ^= x >> _S31
    return x


def _exclusive_cumsum(n):
    """``0, n[0], n[0] + n[1], ...`` (as many as ``n``), int64."""
    out = np.zeros(n.shape[0], np.int64)
    if n.shape[0] > 1:
        np.cumsum(n[:-1], out=out[1:])
    return out


def segment_indices(start, size):
    """Indices ``start[g] .. start[g] + size[g] - 1`` of every segment ``g``,
    one segment after another (int64): ``concatenate([arange(s, s + n) for
    s, n in zip(start, size)])``."""
    size = np.asarray(size, np.int64)
    total = int(size.sum()) if size.shape[0] else 0
    if total == 0:
        return np.zeros(0, np.int64)
    shift = np.asarray(start, np.int64) - _exclusive_cumsum(size)
    return np.repeat(shift, size) + np.arange(total, dtype=np.int64)


# -- kernels.greedy ---------------------------------------------------------------

def _window_entries(d_off, d_pos, width, v0, v1):
    """The entries of ranks ``v0..v1-1`` and how many first members of its
    bucket each reads (``min(pos, width)``): ``(e0, w)``."""
    e0, e1 = int(d_off[v0]), int(d_off[v1])
    return e0, np.minimum(np.asarray(d_pos[e0:e1], np.int64), int(width))


def window_sizes(d_off, d_pos, width, cap, v0, v1):
    """``kernels.greedy._window_sizes``: ``cap[v + 1]``, the first members
    rank ``v`` reads over its buckets, for ``v`` in ``v0..v1-1``."""
    if v1 <= v0:
        return
    e0, w = _window_entries(d_off, d_pos, width, v0, v1)
    ends = np.concatenate([[0], np.cumsum(w)])
    at = np.asarray(d_off[v0:v1 + 1], np.int64) - e0
    cap[v0 + 1:v1 + 1] = ends[at[1:]] - ends[at[:-1]]


def window_lists(d_off, d_bkt, d_pos, b_off, members, width, cap, tmp, cnt, v0, v1):
    """``kernels.greedy._window_lists``: the distinct first members rank
    ``v`` reads, ascending, at ``tmp[cap[v]:]``, and their number in
    ``cnt[v + 1]``, for ``v`` in ``v0..v1-1`` (what follows them in each
    rank's room of ``tmp`` is left as it is; no reader looks there)."""
    if v1 <= v0:
        return
    e0, w = _window_entries(d_off, d_pos, width, v0, v1)
    e1 = e0 + w.shape[0]
    entries_of = np.diff(np.asarray(d_off[v0:v1 + 1], np.int64))
    owner = np.repeat(np.repeat(np.arange(v0, v1, dtype=np.int64), entries_of), w)
    first = np.asarray(b_off, np.int64)[np.asarray(d_bkt[e0:e1], np.int64)]
    vals = np.asarray(members, np.int64)[segment_indices(first, w)]
    order = np.lexsort((vals, owner))
    owner, vals = owner[order], vals[order]
    new = np.ones(vals.shape[0], bool)
    new[1:] = (owner[1:] != owner[:-1]) | (vals[1:] != vals[:-1])
    owner, vals = owner[new], vals[new]
    per = np.bincount(owner - v0, minlength=v1 - v0)
    cnt[v0 + 1:v1 + 1] = per
    place = np.arange(vals.shape[0], dtype=np.int64) - np.repeat(_exclusive_cumsum(per), per)
    tmp[np.asarray(cap, np.int64)[owner] + place] = vals


# -- kernels.cpu ----------------------------------------------------------------

def upper_bound_edges(rows, counts, ia, ib, out, e0, e1):
    """``kernels.cpu._upper_bound_edges``: ``out[e]`` (``e0 <= e < e1``) =
    :func:`kernels.primitives.jaccard_upper` of the bound rows ``ia[e]`` and
    ``ib[e]``: ``counts`` is the byte view of ``rows`` (the first
    ``(W - 1) * 4`` bytes of a row of ``W`` words are the bin counts), the
    last word of a row its distinct count. Infinity where a bin is 255 in both rows or no
    union is left; else the summed smaller counts over the union less them,
    one float64 division as the kernel does it."""
    e0 = int(e0)
    e1 = int(e1)
    last = rows.shape[1] - 1                # the distinct count's word
    bins = last * 4
    for c0 in range(e0, e1, EDGE_CHUNK):
        c1 = min(e1, c0 + EDGE_CHUNK)
        a = ia[c0:c1]
        b = ib[c0:c1]
        ca = counts[a, :bins]
        cb = counts[b, :bins]
        inter = np.minimum(ca, cb).sum(axis=1, dtype=np.int64)
        full = (ca & cb).max(axis=1, initial=0) == 255
        union = (rows[a, last].astype(np.int64)
                 + rows[b, last].astype(np.int64) - inter)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = inter / union
        out[c0:c1] = np.where(full | (union <= 0), np.inf, ratio)
    return out


def bucket_window_bounds(rows, counts, p_off, p_u, b_off, members, width, fixed, base, out,
                         e0, e1):
    """``kernels.cpu._bucket_window_bounds``: :func:`upper_bound_edges` of
    the whole window of each rank with an entry in ``base + e0 .. base + e1
    - 1`` past the first of its bucket (and not below ``fixed``): the
    values the kernel writes there, and those of the rank's other buckets,
    which are the same."""
    e = np.arange(int(base) + int(e0), int(base) + int(e1), dtype=np.int64)
    first = b_off[np.searchsorted(b_off, e, side="right") - 1]
    v = np.sort(members[e[(e > first) & (members[e] >= fixed)]]).astype(np.int64)
    v = v[np.concatenate([[True], v[1:] != v[:-1]])] if v.size else v    # distinct
    if not v.size or width <= 0:
        return out
    sizes = p_off[v + 1] - p_off[v]
    idx = segment_indices(p_off[v], sizes)
    ib = np.repeat(v, sizes)
    got = np.empty(idx.size, np.float64)
    upper_bound_edges(rows, counts, p_u[idx], ib, got, 0, idx.size)
    out[idx] = got
    return out


def probe_bases(q, K):
    """``fmix64(q ^ k)`` of every bin ``k < K``: what the probes of
    :func:`kernels.hashing.oph_probe` start from."""
    return fmix64(_u64(q) ^ np.arange(int(K), dtype=np.uint64))


def probe_bins(base, t, K):
    """Probes ``t`` (:func:`kernels.hashing.oph_probe`) of the bins whose
    :func:`probe_bases` are ``base``: a row of bins per base, int64."""
    with np.errstate(over="ignore"):
        y = fmix64(base[:, None] + np.asarray(t, np.uint64)[None, :] * GOLDEN)
        return (((y >> _S32) * U64(int(K))) >> _S32).astype(np.int64)


def probe_table(q, K):
    """``kernels.densify.probe_table``: the first :data:`TABLE_PROBES` probes
    of every bin, ``K x TABLE_PROBES`` uint32."""
    return probe_bins(probe_bases(q, K), np.arange(TABLE_PROBES), K).astype(np.uint32)


def band_keys_rows(sig, bands, rows, out, i0, i1):
    """``kernels.cpu._band_keys_rows``: ``out[i, j]`` (``i0 <= i < i1``,
    ``j < bands``) = :func:`kernels.primitives.band_key` of rows ``j * rows
    .. (j + 1) * rows - 1`` of ``sig[i]``, every band of every signature a
    step of the key at a time."""
    i0 = int(i0)
    i1 = int(i1)
    bands = int(bands)
    rows = int(rows)
    if i1 <= i0 or bands <= 0:
        return
    n = i1 - i0
    vals = sig[i0:i1, :bands * rows].astype(np.uint64).reshape(n, bands, rows)
    with np.errstate(over="ignore"):
        start = fmix64(GOLDEN * (np.arange(bands, dtype=np.uint64) + U64(1)))
        key = np.repeat(start[None, :], n, axis=0)
        for r in range(rows):
            key = fmix64(key ^ vals[:, :, r])
    out[i0:i1, :bands] = key


def codepoint_docs(offsets, data, out, i0, i1):
    """``kernels.cpu._codepoint_docs``: ``out[i]`` (``i0 <= i < i1``) = the
    bytes of document ``i`` that are not UTF-8 continuation bytes
    (:func:`kernels.text.codepoint_count`, whatever the bytes: malformed
    UTF-8 is counted the same way). The continuation bytes are found once,
    then counted per document by two binary searches; a document whose end
    is before its start counts 0."""
    i0 = int(i0)
    i1 = int(i1)
    if i1 <= i0:
        return
    start = offsets[i0:i1].astype(np.int64)
    end = offsets[i0 + 1:i1 + 1].astype(np.int64)
    lo = int(min(start.min(), end.min()))
    hi = int(max(start.max(), end.max()))
    cont = np.flatnonzero((data[lo:hi] & 0xC0) == 0x80) + lo
    inside = np.searchsorted(cont, end) - np.searchsorted(cont, start)
    out[i0:i1] = np.where(end > start, (end - start) - inside, 0)


def key_directory(keys):
    """``kernels.cpu._key_directory``: the first key of each slot of
    :func:`kernels.cpu.rows_in`'s directory (by one binary search of every
    slot among the keys' slots), and the shift that maps a key to its
    slot."""
    n = keys.shape[0]
    lo = keys[0]
    span = int(np.uint64(keys[n - 1] - lo))
    shift = 0
    while (span >> shift) >= n:
        shift += 1
    slot = (keys - lo).astype(np.uint64) >> U64(shift)
    first = np.searchsorted(slot, np.arange((span >> shift) + 2, dtype=np.uint64))
    return first.astype(np.int64), shift


def rows_of(keys, first, shift, queries, out, t0, t1):
    """``kernels.cpu._rows_of``: the row of each of ``queries[t0:t1]`` in the
    sorted, distinct ``keys`` into ``out`` where it is there (one binary
    search of them all; the directory is not needed)."""
    if t1 <= t0 or keys.shape[0] == 0:
        return
    q = queries[t0:t1]
    at = np.searchsorted(keys, q)
    hit = keys[np.minimum(at, keys.shape[0] - 1)] == q
    out[t0:t1][hit] = at[hit]


def _stop_count(hit, need):
    """The count :func:`kernels.runs.runs_intersect_at_least` returns
    when it stops for want of one run's values; ``hit`` tells which values
    of that run (ascending, distinct) the other holds. Before each step the
    merge checks that the matches so far plus the values left in the run
    still reach ``need``; that sum falls by one at each value the other run
    lacks (a match leaves it as it is), so the check first fails just after
    the ``len(run) - need + 1``-th missing value (at once where that is not
    positive), and the count is then the matches before it. Had the merge
    ended first (no step left after that value), every match comes before
    it anyway: the count is the same. The full intersection where the check
    never fails."""
    k = hit.shape[0] - need + 1
    if k <= 0:
        return 0
    miss = (~hit).nonzero()[0]
    if k > miss.shape[0]:
        return hit.shape[0] - miss.shape[0]
    return int(miss[k - 1]) - (k - 1)


def _merge_count(va, a0, a1, vb, b0, b1, need):
    """:func:`kernels.runs.runs_intersect_at_least` of two strictly
    ascending runs, by whole-array steps: the full intersection, unless the
    merge stops early, for want of either run's values (:func:`_stop_count`;
    the earlier stop, the smaller count). Runs that are not strictly
    ascending take the merge step by step."""
    na = a1 - a0
    nb = b1 - b0
    if na <= 0 or nb <= 0:
        return 0
    a = va[a0:a1]
    b = vb[b0:b1]
    if not ((a[1:] > a[:-1]).all() and (b[1:] > b[:-1]).all()):
        return runs_intersect_at_least.py_func(va, a0, a1, vb, b0, b1, need)
    small, large = (a, b) if na <= nb else (b, a)
    pos = large.searchsorted(small)            # the shorter run's values in the longer
    np.minimum(pos, large.shape[0] - 1, out=pos)
    hit_small = large[pos] == small
    inter = int(np.count_nonzero(hit_small))
    if inter >= need:
        return inter                          # the check cannot fail
    hit_large = np.zeros(large.shape[0], np.bool_)
    hit_large[pos[hit_small]] = True
    return min(_stop_count(hit_small, need), _stop_count(hit_large, need))


def _run_bounds(r, off1, off2):
    """``(start, end)`` of the runs ``r`` of :func:`jaccard_edge_range`: row
    ``r`` of ``off1`` where it is 0 or more, else row ``~r`` of ``off2``."""
    first = r >= 0
    row = np.where(first, r, ~r)
    start = np.empty(r.shape[0], np.int64)
    end = np.empty(r.shape[0], np.int64)
    start[first] = off1[row[first]]
    end[first] = off1[row[first] + 1]
    start[~first] = off2[row[~first]]
    end[~first] = off2[row[~first] + 1]
    return start, end


def _runs_of(r, start, size, val1, val2):
    """The values of the runs ``r`` of :func:`jaccard_edge_range` (of
    ``val1`` where ``r`` is 0 or more, else of ``val2``; from ``start``,
    ``size`` long: :func:`_run_bounds`), one after another, and the edge of
    each value."""
    at = segment_indices(start, size)
    first = np.repeat(r >= 0, size)
    values = np.empty(at.shape[0], np.uint64)
    values[first] = np.asarray(val1)[at[first]]
    values[~first] = np.asarray(val2)[at[~first]]
    edge = np.repeat(np.arange(r.shape[0], dtype=np.int64), size)
    return values, edge


def _stop_counts(hit, edge, size, need):
    """:func:`_stop_count` of every edge's run at once (``hit`` of each
    value, ``edge`` its edge, ``size`` each run's length)."""
    E = size.shape[0]
    k = size - need + 1
    miss = ~hit
    misses = np.bincount(edge[miss], minlength=E)
    # the misses before each value of its run, itself included
    seen = np.cumsum(miss) - np.repeat(_exclusive_cumsum(misses), size)
    place = np.arange(hit.shape[0], dtype=np.int64) - np.repeat(_exclusive_cumsum(size), size)
    stop = np.zeros(E, np.int64)
    at = miss & (seen == k[edge])
    stop[edge[at]] = place[at] - (k[edge[at]] - 1)
    out = np.where(misses < k, size - misses, stop)
    return np.where(k <= 0, 0, out)


#: Pairs whose two sets hold at most this many values together are counted
#: all at once by :func:`jaccard_edge_range`; larger ones one at a time (a
#: sort of every value costs more than their merges stopped early).
PAIR_VALUES = 256


def _intersections(ra, a0, na, rb, b0, nb, need, val1, val2):
    """What :func:`kernels.runs.runs_intersect_at_least` returns for
    each pair of runs ``ra[t]`` (from ``a0[t]``, ``na[t]`` long) and
    ``rb[t]`` with ``need[t]``, every pair at once: the values of both runs
    of every pair sorted together find the matches, and :func:`_stop_counts`
    where the merge stops early; a pair with a run that is not strictly
    ascending is merged step by step."""
    E = ra.shape[0]
    va, ea = _runs_of(ra, a0, na, val1, val2)
    vb, eb = _runs_of(rb, b0, nb, val1, val2)
    odd = np.zeros(E, bool)
    for v, e in ((va, ea), (vb, eb)):
        same_run = e[1:] == e[:-1]
        odd[e[1:][same_run & (v[1:] <= v[:-1])]] = True
    values = np.concatenate([va, vb])
    edge = np.concatenate([ea, eb])
    order = np.lexsort((values, edge))
    v, e = values[order], edge[order]
    pair = (v[1:] == v[:-1]) & (e[1:] == e[:-1])
    hit_sorted = np.zeros(values.shape[0], bool)
    hit_sorted[:-1] |= pair
    hit_sorted[1:] |= pair
    hit = np.empty(values.shape[0], bool)
    hit[order] = hit_sorted
    hit_a, hit_b = hit[:va.shape[0]], hit[va.shape[0]:]
    inter = np.bincount(ea[hit_a], minlength=E)
    stop = np.minimum(_stop_counts(hit_a, ea, na, need), _stop_counts(hit_b, eb, nb, need))
    inter = np.where(inter >= need, inter, stop)
    inter[(na <= 0) | (nb <= 0)] = 0
    for t in np.flatnonzero(odd).tolist():
        inter[t] = _merge_count(val1 if ra[t] >= 0 else val2, int(a0[t]), int(a0[t] + na[t]),
                                val1 if rb[t] >= 0 else val2, int(b0[t]), int(b0[t] + nb[t]),
                                int(need[t]))
    return inter


def jaccard_edge_range(off1, val1, off2, val2, ia, ib, floor, below, out, e0, e1):
    """``kernels.cpu._jaccard_edge_range``: ``out[e]`` (``e0 <= e < e1``) =
    the Jaccard of the sets ``ia[e]`` and ``ib[e]`` (a row of ``(off1,
    val1)`` where it is 0 or more, else row ``~row`` of ``(off2, val2)``),
    exact where the intersection reaches the count the floor needs; where it
    cannot, the value the kernel writes after stopping early (at most
    ``below``). Pairs of small sets all at once (:func:`_intersections`),
    the others one at a time by a few whole-run operations
    (:func:`_merge_count`); the need of every pair by the kernel's float64
    arithmetic."""
    e0 = int(e0)
    e1 = int(e1)
    if e1 <= e0:
        return out
    ra = ia[e0:e1].astype(np.int64)
    rb = ib[e0:e1].astype(np.int64)
    a0, a1 = _run_bounds(ra, off1, off2)
    b0, b1 = _run_bounds(rb, off1, off2)
    na, nb = a1 - a0, b1 - b0
    need = np.ceil(floor * (na + nb) / (1.0 + floor) - 1e-9).astype(np.int64)
    inter = np.zeros(e1 - e0, np.int64)
    few = na + nb <= PAIR_VALUES
    if few.any():
        inter[few] = _intersections(ra[few], a0[few], na[few], rb[few], b0[few], nb[few],
                                    need[few], val1, val2)
    for t in np.flatnonzero(~few).tolist():
        inter[t] = _merge_count(val1 if ra[t] >= 0 else val2, int(a0[t]), int(a1[t]),
                                val1 if rb[t] >= 0 else val2, int(b0[t]), int(b1[t]),
                                int(need[t]))
    union = na + nb - inter
    with np.errstate(invalid="ignore", divide="ignore"):
        j = np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)
    out[e0:e1] = np.where(inter >= need, j, np.minimum(j, float(below)))
    return out


# -- kernels.buckets --------------------------------------------------------------

def bucket_hash_range(off, members, h, b0, b1):
    """``kernels.buckets._bucket_hash_range``: the two hashes of the member
    lists of buckets ``b0 .. b1 - 1`` into ``h``. The buckets are taken
    longest first, so that at step ``t`` of the lists the buckets still
    going are a prefix; the step is one operation over all of them."""
    b0 = int(b0)
    b1 = int(b1)
    if b1 <= b0:
        return
    start = off[b0:b1].astype(np.int64)
    size = off[b0 + 1:b1 + 1].astype(np.int64) - start
    order = np.argsort(-size, kind="stable")
    start = start[order]
    size = size[order]
    with np.errstate(over="ignore"):
        h1 = fmix64(size.astype(np.uint64) * GOLDEN)
        h2 = fmix64(h1 ^ _BUCKET_SALT)
        longest = int(size[0]) if size.shape[0] else 0
        going = size.shape[0] - np.searchsorted(size[::-1], np.arange(longest), side="right")
        for t in range(longest):
            m = int(going[t])
            v = members[start[:m] + t].astype(np.uint64)
            h1[:m] = fmix64(h1[:m] ^ (v * GOLDEN))
            h2[:m] = fmix64((h2[:m] + v) * _BUCKET_MUL)
    h[b0 + order, 0] = h1
    h[b0 + order, 1] = h2


def bucket_segments(keys, docs, seg, lo0, out_mem, out_size, n_mem, n_bkt, j0, j1):
    """``kernels.buckets._bucket_segments``: the buckets (keys equal within
    a segment) of two or more members of segments ``j0 .. j1 - 1``, in
    order of their first member: their sizes into ``out_size`` and members
    into ``out_mem`` from ``seg[j] - lo0``, their numbers into ``n_bkt[j]``
    and ``n_mem[j]``. One stable sort of all the keys by segment and key
    finds the buckets."""
    j0 = int(j0)
    j1 = int(j1)
    if j1 <= j0:
        return
    bounds = seg[j0:j1 + 1].astype(np.int64)
    lo = int(bounds[0])
    span = np.diff(bounds)
    g = j1 - j0
    sid = np.repeat(np.arange(g, dtype=np.int64), span)        # segment of each key
    k = keys[lo:int(bounds[-1])]
    order = np.lexsort((k, sid))
    n = order.shape[0]
    new = np.ones(n, bool)
    if n > 1:
        sk = k[order]
        ss = sid[order]
        new[1:] = (sk[1:] != sk[:-1]) | (ss[1:] != ss[:-1])
    first_pos = np.flatnonzero(new)                             # groups, in sorted order
    size = np.diff(np.append(first_pos, n))
    big = size >= 2
    first_pos = first_pos[big]
    size = size[big]
    by_first = np.argsort(order[first_pos], kind="stable")     # buckets by first member
    first_pos = first_pos[by_first]
    size = size[by_first]
    i = order[segment_indices(first_pos, size)]                 # members, offsets from lo
    bseg = sid[order[first_pos]]                                # segment of each bucket
    mseg = sid[i]
    nb = np.bincount(bseg, minlength=g)
    nm = np.bincount(mseg, minlength=g)
    base = bounds[:-1] - int(lo0)
    if docs.shape[0] == 0:
        value = i + lo - bounds[mseg]
    else:
        value = docs[i + lo]
    out_mem[base[mseg] + np.arange(i.shape[0]) - _exclusive_cumsum(nm)[mseg]] = value
    out_size[base[bseg] + np.arange(size.shape[0]) - _exclusive_cumsum(nb)[bseg]] = size
    n_mem[j0:j1] = nm
    n_bkt[j0:j1] = nb


def bucket_lists(seg, lo0, out_mem, out_size, n_mem, n_bkt):
    """``kernels.buckets._bucket_lists``: the buckets each segment found,
    one after another: ``(off, members)``."""
    g = seg.shape[0] - 1
    if g <= 0:
        return np.zeros(1, np.int64), np.empty(0, np.int64)
    base = seg[:g].astype(np.int64) - int(lo0)
    nm = n_mem[:g].astype(np.int64)
    nb = n_bkt[:g].astype(np.int64)
    members = out_mem[segment_indices(base, nm)].astype(np.int64)
    off = np.zeros(int(nb.sum()) + 1, np.int64)
    np.cumsum(out_size[segment_indices(base, nb)], out=off[1:])
    return off, members


def first_equal(fp, active):
    """``kernels.buckets.first_equal``: for each row of ``fp`` (``N x 2``
    uint64), the first active row equal to it (itself if none comes
    earlier); -1 for inactive rows. One stable sort of the active rows."""
    n = fp.shape[0]
    rep = np.full(n, -1, np.int64)
    act = np.flatnonzero(active)
    if act.shape[0] == 0:
        return rep
    h0 = fp[act, 0]
    h1 = fp[act, 1]
    order = np.lexsort((h1, h0))
    s0 = h0[order]
    s1 = h1[order]
    new = np.ones(act.shape[0], bool)
    new[1:] = (s0[1:] != s0[:-1]) | (s1[1:] != s1[:-1])
    group = np.cumsum(new) - 1
    rep[act[order]] = act[order[np.flatnonzero(new)]][group]
    return rep
