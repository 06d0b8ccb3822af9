"""Greedy selection range by range of ranks, with no step holding every bucket.

The greedy rule (:mod:`gpu_dedup.stages.select`) decides ranks in order, and
a rank's decision reads only what came before it in its buckets: the first
``2 * limit`` members of each (its window, scored whatever they became) and
the first ``limit`` kept ones. So the ranks can be cut into ranges
``bounds[k] .. bounds[k + 1] - 1`` and decided one range after the other:

* a bucket belongs to the *group* of the range of its first member; a
  group's buckets are made distinct on their own (two buckets with the same
  members have the same first member), and their entries are split by the
  range of each member (:func:`group_entries`): range ``k`` reads the
  entries of groups ``0 .. k`` that fall in it, and nothing else;
* the state carried from range to range (:class:`RangeSelector`) is, per
  bucket, how many of its members were kept and the first ``limit`` of
  them, and, per rank, whether it was kept;
* range ``k`` is one call of the rule (:func:`greedy_select`, or a
  backend's ``select``) over its touched buckets, each cut down to the
  members that matter: the window members and first kept members before
  the range, *fixed* (decided already, with their decisions), then the
  range's own members.

The union of the ranges' selections is the selection of the whole, bit for
bit: kept, ``duplicate_of``, similarities, pairs and their scores, the
comparisons made and skipped (:func:`select_in_ranges` checks it in the
tests against :func:`~gpu_dedup.stages.select.greedy_select`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..arrays import concat_csr, unique
from ..kernels.cpu import jaccard_upper_bounds, rows_in
from .lsh import distinct_buckets, pack_edges, take_buckets, unpack_edges
from .select import WINDOW, Selection, greedy_select


def rank_bounds(n: int, ranges: int) -> np.ndarray:
    """``ranges + 1`` int64 bounds cutting ranks ``0 .. n - 1`` into
    ``ranges`` ranges of (nearly) equal size."""
    ranges = max(1, min(int(ranges), max(1, int(n))))
    return (np.arange(ranges + 1, dtype=np.int64) * int(n)) // ranges


def range_of(bounds: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """The range of each rank."""
    return np.searchsorted(bounds, ranks, side="right").astype(np.int64) - 1


def by_group(off: np.ndarray, members: np.ndarray, bounds: np.ndarray) -> dict:
    """Buckets ``(off, members)`` (ranks ascending in a bucket) by the range
    of their first member: ``{group: (off, members)}``."""
    off = np.asarray(off, dtype=np.int64)
    members = np.asarray(members, dtype=np.int64)
    if off.size < 2:
        return {}
    g = range_of(bounds, members[off[:-1]])
    order = np.argsort(g, kind="stable")
    gs = g[order]
    cut = np.flatnonzero(np.diff(gs)) + 1
    out = {}
    for s, e in zip(np.concatenate([[0], cut]), np.concatenate([cut, [gs.size]])):
        out[int(gs[s])] = take_buckets(off, members, order[s:e])
    return out


def group_entries(off: np.ndarray, members: np.ndarray, bounds: np.ndarray) -> dict:
    """The entries of a group's buckets by the range of their member:
    ``{range: int64 array (3, n)}`` of (bucket, rank, place in the bucket),
    in bucket order, then place."""
    sizes = np.diff(off)
    bucket = np.repeat(np.arange(sizes.size, dtype=np.int64), sizes)
    place = np.arange(members.size, dtype=np.int64) - np.repeat(off[:-1], sizes)
    r = range_of(bounds, members)
    order = np.argsort(r, kind="stable")
    rs = r[order]
    cut = np.flatnonzero(np.diff(rs)) + 1
    out = {}
    for s, e in zip(np.concatenate([[0], cut]), np.concatenate([cut, [rs.size]])):
        sel = order[s:e]
        out[int(rs[s])] = np.stack([bucket[sel], members[sel], place[sel]])
    return out


def heads_of(off: np.ndarray, members: np.ndarray, buckets: np.ndarray, width: int):
    """The first ``width`` members of each of ``buckets`` (CSR over them):
    ``(h_off, h_members)``. ``members`` may be a memory map."""
    starts = off[buckets]
    lens = np.minimum(off[buckets + 1] - starts, width)
    h_off = np.zeros(buckets.size + 1, dtype=np.int64)
    np.cumsum(lens, out=h_off[1:])
    idx = np.repeat(starts - h_off[:-1], lens) + np.arange(int(h_off[-1]), dtype=np.int64)
    return h_off, np.asarray(members[idx], dtype=np.int64)


@dataclass
class RangeResult:
    """What one range decided (global ranks)."""
    removed: np.ndarray         # the range's removed ranks, ascending
    duplicate_of: np.ndarray    # the kept rank each names
    similarity: np.ndarray      # the score to it
    pairs: np.ndarray           # packed similar pairs whose later rank is in the range
    pair_scores: np.ndarray
    comparisons: int
    skipped: int
    rounds: int
    scored: int
    where: str
    bounded: int = 0            # pairs settled by their bound rows


@dataclass
class _Local:
    ranks: np.ndarray           # local rank -> global rank
    fixed: int                  # local ranks decided already
    off: np.ndarray
    members: np.ndarray
    fixed_kept: np.ndarray
    kept_before: np.ndarray
    touched: np.ndarray         # the global buckets, by local bucket
    entries: np.ndarray         # the range's entries (bucket, rank, place)


@dataclass
class RangeSelector:
    """The state carried from range to range (see the module docstring).

    Args:
        sizes: members of every bucket (global bucket numbers).
        n: ranks.
        limit: the rule's ``limit``.
        fixed: ranks ``0 .. fixed - 1`` kept already (an index's documents).
    """
    sizes: np.ndarray
    n: int
    limit: int
    fixed: int = 0
    kcount: np.ndarray = field(init=False)
    k_off: np.ndarray = field(init=False)
    klist: np.ndarray = field(init=False)
    kept: np.ndarray = field(init=False)

    def __post_init__(self):
        sizes = np.asarray(self.sizes, dtype=np.int64)
        self.kcount = np.zeros(sizes.size, dtype=np.int64)
        self.k_off = np.zeros(sizes.size + 1, dtype=np.int64)
        np.cumsum(np.minimum(sizes, self.limit), out=self.k_off[1:])
        self.klist = np.empty(int(self.k_off[-1]), dtype=np.int64)
        self.kept = np.ones(int(self.n), dtype=bool)
        self.sizes = None               # the kept lists' room says all that is needed

    def problem(self, r0: int, entries: np.ndarray, heads) -> _Local:
        """The rule's input for the range starting at ``r0``: ``entries``
        (3, n) of (global bucket, rank, place) sorted by bucket then place;
        ``heads(buckets) -> (h_off, h_members)`` the first ``WINDOW * limit``
        members of global buckets."""
        bkt, rank = entries[0], entries[1]
        first = np.ones(bkt.size, dtype=bool)
        first[1:] = bkt[1:] != bkt[:-1]
        touched = bkt[first]
        t_of = np.cumsum(first) - 1
        del first
        h_off, h_mem = heads(touched)
        h_t = np.repeat(np.arange(touched.size, dtype=np.int64), np.diff(h_off))
        early = h_mem < r0
        kc = np.minimum(self.kcount[touched], self.limit)
        k_t = np.repeat(np.arange(touched.size, dtype=np.int64), kc)
        k_at = np.zeros(touched.size + 1, dtype=np.int64)
        np.cumsum(kc, out=k_at[1:])
        k_idx = (np.repeat(self.k_off[touched] - k_at[:-1], kc)
                 + np.arange(int(k_at[-1]), dtype=np.int64))
        # (local bucket, rank) pairs sorted and distinct; both below 2**32
        # (ranks: MAX_DOCUMENTS), so one sort of them packed into 64 bits
        tr = np.concatenate([h_t[early], k_t, t_of]).astype(np.uint64) << np.uint64(32)
        tr |= np.concatenate([h_mem[early], self.klist[k_idx], rank]).astype(np.uint64)
        tr = unique(tr)
        t = (tr >> np.uint64(32)).astype(np.int64)
        r = (tr & np.uint64(0xFFFFFFFF)).astype(np.int64)
        del tr
        ranks = unique(r)
        fixed = int(np.searchsorted(ranks, max(int(r0), self.fixed)))
        off = np.zeros(touched.size + 1, dtype=np.int64)
        np.cumsum(np.bincount(t, minlength=touched.size), out=off[1:])
        prior_kept = (r < r0) & self.kept[r]
        included = np.bincount(t[prior_kept], minlength=touched.size)
        return _Local(ranks, fixed, off, rows_in(ranks, r),
                      self.kept[ranks[:fixed]], self.kcount[touched] - included, touched,
                      entries)

    def decide(self, local: _Local, sel: Selection) -> RangeResult:
        """Take the rule's selection of ``local``; update the state."""
        F, ranks = local.fixed, local.ranks
        kept = np.asarray(sel.kept, dtype=bool)[F:]
        gone = np.flatnonzero(~kept)
        removed = ranks[F:][gone]
        self.kept[removed] = False
        dup = np.asarray(sel.duplicate_of)[F:][gone]
        a, b = unpack_edges(np.asarray(sel.pairs))
        # the kept members of the range join their buckets' kept lists
        bkt, rank = local.entries[0], local.entries[1]
        k = self.kept[rank]
        kb, kr = bkt[k], rank[k]
        first = np.ones(kb.size, dtype=bool)
        first[1:] = kb[1:] != kb[:-1]
        at = np.arange(kb.size, dtype=np.int64)
        slot = self.kcount[kb] + at - at[np.flatnonzero(first)][np.cumsum(first) - 1]
        room = slot < self.k_off[kb + 1] - self.k_off[kb]
        self.klist[self.k_off[kb[room]] + slot[room]] = kr[room]
        at_first = np.flatnonzero(first)
        self.kcount[kb[at_first]] += np.diff(np.append(at_first, kb.size))
        return RangeResult(removed, ranks[dup], np.asarray(sel.similarity)[F:][gone],
                           pack_edges(ranks[a], ranks[b]), np.asarray(sel.pair_scores),
                           int(sel.comparisons), int(sel.skipped), int(sel.rounds),
                           int(sel.scored), sel.where)


def select_range(selector: RangeSelector, r0: int, entries: np.ndarray, heads, scorer,
                 threshold: float, accept_all: bool = False,
                 select=greedy_select) -> RangeResult:
    """Decide one range: the rule (``select``, with :func:`greedy_select`'s
    arguments) over its cut-down buckets. ``scorer(ranks)`` gives the
    function that scores packed pairs of global ranks, for pairs among the
    sorted global ``ranks`` the range reads (a store may load what they
    need first). When that function has ``bounds = (rows, floor)``, the
    bound rows of ``ranks`` (:mod:`gpu_dedup.engine.bounds`) and the score
    that matters, the pairs whose bound is below ``floor`` are settled with
    their bound (a value below ``floor``, never reaching the threshold) and
    only the others are scored."""
    local = selector.problem(r0, entries, heads)
    ranks = local.ranks
    score_fn = scorer(ranks)
    rows, floor = getattr(score_fn, "bounds", (None, 0.0))
    settled = [0]

    def score_local(packed):
        u, v = unpack_edges(packed)
        if rows is None:
            return score_fn(pack_edges(ranks[u], ranks[v]))
        out = jaccard_upper_bounds(rows, u, v)
        open_ = np.flatnonzero(out >= floor)
        settled[0] += int(packed.size - open_.size)
        if open_.size:
            out[open_] = score_fn(pack_edges(ranks[u[open_]], ranks[v[open_]]))
        return out

    sel = select(local.off, local.members, int(ranks.size), score_local, threshold,
                 selector.limit, accept_all=accept_all, fixed=local.fixed,
                 fixed_kept=local.fixed_kept, kept_before=local.kept_before)
    result = selector.decide(local, sel)
    result.bounded = settled[0]
    return result


def merge(results, n: int, selector: RangeSelector) -> Selection:
    """The ranges' results (an iterable: each may be loaded as it comes) as
    one :class:`Selection` over ranks ``0 .. n - 1``."""
    dup = np.full(n, -1, dtype=np.int64)
    sim = np.full(n, np.nan)
    pairs, scores, counts, where = [], [], np.zeros(4, dtype=np.int64), None
    for r in results:
        dup[r.removed] = r.duplicate_of
        sim[r.removed] = r.similarity
        pairs.append(r.pairs)
        scores.append(r.pair_scores)
        counts += (r.comparisons, r.skipped, r.rounds, r.scored)
        where = r.where if where is None else where
    pairs = np.concatenate(pairs) if pairs else np.zeros(0, np.uint64)
    scores = np.concatenate(scores) if scores else np.zeros(0)
    order = np.argsort(pairs, kind="stable")
    return Selection(selector.kept.copy(), dup, sim, pairs[order], scores[order],
                     int(counts[0]), int(counts[1]), int(counts[2]), where or "host",
                     int(counts[3]))


def select_in_ranges(bucket_off, members, n: int, score_fn, threshold: float,
                     limit: int = 32, ranges: int = 4, accept_all: bool = False,
                     fixed: int = 0, units: int = 1, select=greedy_select) -> Selection:
    """:func:`~gpu_dedup.stages.select.greedy_select` range by range, all in
    memory: the buckets cut into ``units`` as the bucket stage's units would
    give them, grouped, made distinct and split by range, then decided range
    after range (the engine does the same over its store)."""
    bucket_off = np.asarray(bucket_off, dtype=np.int64)
    members = np.asarray(members, dtype=np.int64)
    bounds = rank_bounds(n, ranges)
    nb = bucket_off.size - 1
    pieces: dict = {}
    for u in range(max(1, units)):
        which = np.arange(u, nb, max(1, units), dtype=np.int64)
        off_u, mem_u = take_buckets(bucket_off, members, which)
        for g, bm in by_group(off_u, mem_u, bounds).items():
            pieces.setdefault(g, []).append(bm)
    groups, base, sizes = {}, {}, []
    total = 0
    for g in sorted(pieces):
        off, mem = distinct_buckets(*concat_csr(pieces[g]))
        groups[g], base[g] = (off, mem), total
        sizes.append(np.diff(off))
        total += off.size - 1
    entries = {}
    for g, (off, mem) in groups.items():
        for k, e in group_entries(off, mem, bounds).items():
            e = e.copy()
            e[0] += base[g]
            entries.setdefault(k, []).append(e)
    starts = np.array([base[g] for g in sorted(groups)], dtype=np.int64)
    keys = sorted(groups)

    def heads(buckets):
        gi = np.searchsorted(starts, buckets, side="right") - 1
        parts = [heads_of(*groups[keys[i]], buckets[gi == i] - starts[i], WINDOW * limit)
                 for i in np.unique(gi)]
        return concat_csr(parts)

    selector = RangeSelector(np.concatenate(sizes) if sizes else np.zeros(0, np.int64), n,
                             limit, fixed)
    results = [select_range(selector, int(bounds[k]), np.concatenate(entries[k], axis=1),
                            heads, lambda ranks: score_fn, threshold, accept_all, select)
               for k in range(bounds.size - 1) if k in entries]
    return merge(results, n, selector)
