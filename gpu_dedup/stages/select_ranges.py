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
  entries of groups ``0 .. k`` that fall in it, and nothing else; each
  entry names the next range in which its bucket has a member;
* the state a bucket carries from range to range is how many of its
  members were kept and the first ``limit`` of them. A range that touches
  a bucket passes that state on to the next range that does
  (:class:`RangeState`), so a range reads the state of its own buckets
  only, and no step holds the state of every bucket; whether an earlier
  rank was kept is read from the removed ranks of its range;
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

from dataclasses import dataclass

import numpy as np

from ..arrays import concat_csr, unique
from ..kernels.cpu import jaccard_upper_bounds, rows_in, window_upper_bounds
from .lsh import distinct_buckets, pack_edges, take_buckets, unpack_edges
from .select import WINDOW, Selection, greedy_select


def rank_bounds(n: int, ranges: int) -> np.ndarray:
    """``ranges + 1`` int64 bounds cutting ranks ``0 .. n - 1`` into
    ``ranges`` ranges of (nearly) equal size."""
    ranges = max(1, min(int(ranges), max(1, int(n))))
    return (np.arange(ranges + 1, dtype=np.int64) * int(n)) // ranges


#: Bins of equal numbers of ranks the bucket entries are counted in, to cut
#: the ranges by their entries (:func:`weighted_bounds`).
RANK_BINS = 4096


def rank_bins(n: int, bins: int = RANK_BINS) -> np.ndarray:
    """The ``bins + 1`` rank bounds of :data:`RANK_BINS` bins of (nearly)
    equal numbers of ranks ``0 .. n - 1`` (repeated where ``n < bins``)."""
    return (np.arange(bins + 1, dtype=np.int64) * int(n)) // bins


def weighted_bounds(n: int, ranges: int, weights: np.ndarray) -> np.ndarray:
    """Bounds cutting ranks ``0 .. n - 1`` into at most ``ranges`` ranges of
    about equal total weight, cut only where a bin of :func:`rank_bins`
    ends (``weights``: each bin's weight). Equal ranks a range when no bin
    weighs anything. Strictly increasing, from 0 to ``n``."""
    weights = np.asarray(weights, dtype=np.float64)
    ranges = max(1, min(int(ranges), max(1, int(n))))
    total = float(weights.sum())
    if ranges == 1 or total <= 0 or not n:
        return rank_bounds(n, ranges)
    edges = rank_bins(n, weights.size)
    cum = np.cumsum(weights)
    after = np.searchsorted(cum, np.arange(1, ranges) * total / ranges, side="left")
    cuts = edges[np.minimum(after + 1, weights.size)]
    return unique(np.concatenate([[0], cuts, [int(n)]]).astype(np.int64))


def runs(values: np.ndarray):
    """``(value, start, end)`` of each run of equal ``values`` (sorted, or
    grouped), in order."""
    if not values.size:
        return
    cut = np.flatnonzero(values[1:] != values[:-1]) + 1
    for s, e in zip(np.concatenate([[0], cut]), np.concatenate([cut, [values.size]])):
        yield values[s], int(s), int(e)


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
    return {int(v): take_buckets(off, members, order[s:e]) for v, s, e in runs(g[order])}


def group_entries(off: np.ndarray, members: np.ndarray, bounds: np.ndarray) -> dict:
    """The entries of a group's buckets by the range of their member:
    ``{range: int64 array (4, n)}`` of (bucket, rank, place in the bucket,
    next range), in bucket order, then place. The next range of an entry is
    the first later range in which its bucket has a member (-1: none): the
    range its bucket's state is passed on to."""
    sizes = np.diff(off)
    bucket = np.repeat(np.arange(sizes.size, dtype=np.int64), sizes)
    place = np.arange(members.size, dtype=np.int64) - np.repeat(off[:-1], sizes)
    r = range_of(bounds, members)
    nxt = _next_range(bucket, r)
    order = np.argsort(r, kind="stable")
    out = {}
    for v, s, e in runs(r[order]):
        sel = order[s:e]
        out[int(v)] = np.stack([bucket[sel], members[sel], place[sel], nxt[sel]])
    return out


def _next_range(bucket: np.ndarray, r: np.ndarray) -> np.ndarray:
    """For entries in bucket order then place (so their ranges ``r`` ascend
    inside a bucket), the next larger range of each one's bucket; -1 where
    there is none."""
    if not bucket.size:
        return np.zeros(0, np.int64)
    new = np.ones(bucket.size, dtype=bool)
    new[1:] = (bucket[1:] != bucket[:-1]) | (r[1:] != r[:-1])
    starts = np.flatnonzero(new)
    seg_next = np.full(starts.size, -1, dtype=np.int64)
    same = bucket[starts[1:]] == bucket[starts[:-1]]
    seg_next[:-1][same] = r[starts[1:]][same]
    return seg_next[np.cumsum(new) - 1]


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
    pair_a: np.ndarray          # similar pairs whose later rank is in the range:
    pair_b: np.ndarray          # (pair_a, pair_b) ranks, a < b, sorted and distinct
    pair_scores: np.ndarray
    comparisons: int
    skipped: int
    rounds: int
    scored: int
    where: str
    bounded: int = 0            # pairs settled by their bound rows


@dataclass
class _Local:
    k: int                      # the range
    ranks: np.ndarray           # local rank -> global rank
    fixed: int                  # local ranks decided already
    off: np.ndarray
    members: np.ndarray
    fixed_kept: np.ndarray
    kept_before: np.ndarray
    touched: np.ndarray         # the global buckets, by local bucket
    entries: np.ndarray         # the range's entries (bucket, rank, place, next range)
    t_of: np.ndarray            # the local bucket of each entry
    kcount: np.ndarray          # kept members of each touched bucket before the range
    klist: np.ndarray           # the first ``limit`` of them, bucket after bucket


class RangeState:
    """What ranges pass on to later ones, held in this process; a subclass
    keeps it in a store (:meth:`put`, :meth:`get`, :meth:`drop` by key).

    * ``carry/<dest>/<src>``: the state of the buckets range ``src`` touched
      whose next range is ``dest``, as one int64 array: their number ``m``,
      the ``m`` buckets (ascending), their kept counts, then the first
      ``limit`` kept members of each, bucket after bucket;
    * ``removed/<k>``: the ranks range ``k`` removed, ascending.

    Only the keys of the messages waiting for each range are held here: a
    few numbers per range.

    Args:
        bounds: the ranges' bounds (:func:`rank_bounds`).
        limit: the rule's ``limit``.
    """

    def __init__(self, bounds: np.ndarray, limit: int):
        self.bounds = np.asarray(bounds, dtype=np.int64)
        self.limit = int(limit)
        self.inbox: dict = {}           # dest -> sources with a message for it
        self.recorded: set = set()      # ranges whose removed ranks are kept
        self._items: dict = {}

    # -- where messages live (a subclass keeps them in a store) ----------
    def put(self, key: str, arr: np.ndarray) -> None:
        self._items[key] = arr

    def get(self, key: str) -> np.ndarray:
        return self._items[key]

    def drop(self, key: str) -> None:
        self._items.pop(key, None)

    # -- the protocol -------------------------------------------------------
    def send(self, src: int, dest: int, buckets, kcount, k_off, klist) -> None:
        """Pass on the state of ``buckets`` (ascending) to range ``dest``."""
        msg = np.concatenate([np.array([buckets.size], np.int64), buckets, kcount,
                              klist[int(k_off[0]):int(k_off[-1])]]).astype(np.int64)
        self.put(f"carry/{dest}/{src}", msg)
        self.inbox.setdefault(int(dest), []).append(int(src))

    def receive(self, k: int):
        """The state passed on to range ``k``: ``(buckets, kcount, klist)``,
        buckets ascending and the kept lists in their order; each message is
        dropped once read. A message that does not add up is refused."""
        parts = []
        for src in sorted(self.inbox.pop(int(k), [])):
            key = f"carry/{k}/{src}"
            msg = np.asarray(self.get(key), dtype=np.int64)
            m = int(msg[0]) if msg.size else -1
            if m < 0 or msg.size < 1 + 2 * m:
                raise RuntimeError(f"range {k}: the state passed on by range {src} is "
                                   f"damaged ({msg.size} numbers)")
            b, c, kl = msg[1:1 + m], msg[1 + m:1 + 2 * m], msg[1 + 2 * m:]
            if kl.size != int(np.minimum(c, self.limit).sum()):
                raise RuntimeError(f"range {k}: the state passed on by range {src} is "
                                   f"damaged ({kl.size} kept members for "
                                   f"{int(np.minimum(c, self.limit).sum())})")
            parts.append((b, c, kl))
            self.drop(key)
        if not parts:
            z = np.zeros(0, np.int64)
            return z, z, z
        if len(parts) == 1:
            return parts[0]
        b = np.concatenate([p[0] for p in parts])
        c = np.concatenate([p[1] for p in parts])
        kl = np.concatenate([p[2] for p in parts])
        off = np.zeros(b.size + 1, dtype=np.int64)
        np.cumsum(np.minimum(c, self.limit), out=off[1:])
        order = np.argsort(b, kind="stable")
        _, kl = take_buckets(off, kl, order)
        return b[order], c[order], kl

    def record(self, k: int, removed: np.ndarray) -> None:
        """The ranks range ``k`` removed (ascending)."""
        self.put(f"removed/{k}", removed)
        self.recorded.add(int(k))

    def kept(self, ranks: np.ndarray) -> np.ndarray:
        """Whether each of ``ranks`` (ascending) was kept by its range (a
        rank of a range not decided yet counts as kept)."""
        out = np.ones(ranks.size, dtype=bool)
        if not ranks.size:
            return out
        for j, s, e in runs(range_of(self.bounds, ranks)):
            j = int(j)
            if j not in self.recorded:
                continue
            removed = self.get(f"removed/{j}")
            if removed.size:
                x = ranks[s:e]
                at = np.minimum(np.searchsorted(removed, x), removed.size - 1)
                out[s:e] = np.asarray(removed[at]) != x
        return out


@dataclass
class RangeSelector:
    """Decides ranges one after the other (see the module docstring).

    Args:
        n: ranks.
        limit: the rule's ``limit``.
        state: where what a range passes on is kept.
        fixed: ranks ``0 .. fixed - 1`` kept already (an index's documents).
    """
    n: int
    limit: int
    state: RangeState
    fixed: int = 0

    def problem(self, k: int, r0: int, entries: np.ndarray, heads) -> _Local:
        """The rule's input for range ``k``, starting at ``r0``: ``entries``
        (4, n) of (global bucket, rank, place, next range) sorted by bucket
        then place; ``heads(buckets) -> (h_off, h_members)`` the first
        ``WINDOW * limit`` members of global buckets."""
        bkt, rank = entries[0], entries[1]
        first = np.ones(bkt.size, dtype=bool)
        first[1:] = bkt[1:] != bkt[:-1]
        touched = bkt[first]
        t_of = np.cumsum(first) - 1
        del first
        cb, cc, cl = self.state.receive(k)
        at = np.minimum(np.searchsorted(touched, cb), max(touched.size - 1, 0))
        if cb.size and (not touched.size or np.any(touched[at] != cb)):
            raise RuntimeError(f"range {k}: state passed on for buckets it does not touch")
        kcount = np.zeros(touched.size, dtype=np.int64)
        kcount[at] = cc
        kc = np.minimum(kcount, self.limit)
        h_off, h_mem = heads(touched)
        h_t = np.repeat(np.arange(touched.size, dtype=np.int64), np.diff(h_off))
        early = h_mem < r0
        k_t = np.repeat(np.arange(touched.size, dtype=np.int64), kc)
        # (local bucket, rank) pairs sorted and distinct: the ranks (of any
        # size) numbered among those the range reads, and both numbers,
        # below 2**32 in one task, sorted packed into 64 bits
        r = np.concatenate([h_mem[early], cl, rank])
        ranks = unique(r)
        if ranks.size >= 1 << 32 or touched.size >= 1 << 32:
            raise RuntimeError(f"range {k}: {ranks.size:,} ranks in {touched.size:,} buckets "
                               f"do not fit one task; cut the ranks into more ranges")
        tr = np.concatenate([h_t[early], k_t, t_of]).astype(np.uint64) << np.uint64(32)
        tr |= rows_in(ranks, r).astype(np.uint64)
        del r
        tr = unique(tr)
        t = (tr >> np.uint64(32)).astype(np.int64)
        members = (tr & np.uint64(0xFFFFFFFF)).astype(np.int64)
        r = ranks[members]
        del tr
        fixed = int(np.searchsorted(ranks, max(int(r0), self.fixed)))
        off = np.zeros(touched.size + 1, dtype=np.int64)
        np.cumsum(np.bincount(t, minlength=touched.size), out=off[1:])
        kept = np.ones(ranks.size, dtype=bool)
        kept[:fixed] = self.state.kept(ranks[:fixed])
        prior_kept = (r < r0) & kept[members]
        included = np.bincount(t[prior_kept], minlength=touched.size)
        return _Local(k, ranks, fixed, off, members, kept[:fixed], kcount - included,
                      touched, entries, t_of, kcount, cl)

    def decide(self, local: _Local, sel: Selection) -> RangeResult:
        """Take the rule's selection of ``local``; pass the state of its
        buckets on."""
        F, ranks = local.fixed, local.ranks
        kept_all = np.asarray(sel.kept, dtype=bool)
        gone = np.flatnonzero(~kept_all[F:])
        removed = ranks[F:][gone]
        self.state.record(local.k, removed)
        dup = np.asarray(sel.duplicate_of)[F:][gone]
        a, b = unpack_edges(np.asarray(sel.pairs))
        self._pass_on(local, kept_all[rows_in(ranks, local.entries[1])])
        # local ranks ascend with the global ones: the pairs stay sorted
        return RangeResult(removed, ranks[dup], np.asarray(sel.similarity)[F:][gone],
                           ranks[a], ranks[b], np.asarray(sel.pair_scores),
                           int(sel.comparisons), int(sel.skipped), int(sel.rounds),
                           int(sel.scored), sel.where)

    def _pass_on(self, local: _Local, kept: np.ndarray) -> None:
        """The kept members of the range (``kept``, by entry) join their
        buckets' kept lists (up to ``limit`` of them), and each touched bucket
        with a member in a later range passes its state on to that range."""
        T = local.touched.size
        if not T:
            return
        lim = self.limit
        kc = np.minimum(local.kcount, lim)
        t_new = local.t_of[kept]
        tt = np.concatenate([np.repeat(np.arange(T, dtype=np.int64), kc), t_new])
        rr = np.concatenate([local.klist, local.entries[1][kept]])
        order = np.argsort(tt, kind="stable")        # earlier kept members first
        tt, rr = tt[order], rr[order]
        start = np.searchsorted(tt, np.arange(T, dtype=np.int64))
        within = np.arange(tt.size, dtype=np.int64) - start[tt]
        rr = rr[within < lim]
        kcount = local.kcount + np.bincount(t_new, minlength=T)
        k_off = np.zeros(T + 1, dtype=np.int64)
        np.cumsum(np.minimum(kcount, lim), out=k_off[1:])
        first = np.ones(local.t_of.size, dtype=bool)
        first[1:] = local.t_of[1:] != local.t_of[:-1]
        nxt = local.entries[3][first]
        later = np.flatnonzero(nxt >= 0)
        if not later.size:
            return
        by = later[np.argsort(nxt[later], kind="stable")]
        for dest, s, e in runs(nxt[by]):
            which = by[s:e]
            o, kl = take_buckets(k_off, rr, which)
            self.state.send(local.k, int(dest), local.touched[which], kcount[which], o, kl)


def select_range(selector: RangeSelector, k: int, r0: int, entries: np.ndarray, heads,
                 scorer, threshold: float, accept_all: bool = False,
                 select=greedy_select) -> RangeResult:
    """Decide range ``k``, from rank ``r0``: the rule (``select``, with :func:`greedy_select`'s
    arguments) over its cut-down buckets. ``scorer(ranks)`` gives the
    function that scores pairs of global ranks (an int64 array ``(2, n)``:
    first ranks, then second ranks), for pairs among the sorted global
    ``ranks`` the range reads (a store may load what they need first).
    When that function has ``bounds = (rows, floor)``, the bound rows of
    ``ranks`` (:mod:`gpu_dedup.engine.bounds`) and the score
    that matters, the pairs whose bound is below ``floor`` are settled with
    their bound (a value below ``floor``, never reaching the threshold) and
    only the others are scored."""
    local = selector.problem(k, r0, entries, heads)
    ranks = local.ranks
    score_fn = scorer(ranks)
    rows, floor = getattr(score_fn, "bounds", (None, 0.0))
    settled = [0]

    def settle(out, first, second):
        """Pairs ``first[open_]``, ``second(open_)`` of local ranks scored
        where their bounds ``out`` reach ``floor``; the others settled."""
        open_ = np.flatnonzero(out >= floor)
        settled[0] += int(out.size - open_.size)
        if open_.size:
            out[open_] = score_fn(np.stack([ranks[first[open_]], ranks[second(open_)]]))
        return out

    def score_local(packed):
        u, v = unpack_edges(packed)
        if rows is None:
            return score_fn(np.stack([ranks[u], ranks[v]]))
        return settle(jaccard_upper_bounds(rows, u, v), u, lambda at: v[at])

    if rows is not None:
        # the windows' pairs, every rank against the first members of its
        # buckets: bounded a rank at a time, the second ranks of the open
        # ones alone spelt out
        score_local.window = lambda p_off, p_u, *made: settle(
            window_upper_bounds(rows, p_off, p_u, *made), p_u,
            lambda at: np.searchsorted(p_off, at, side="right") - 1)

    sel = select(local.off, local.members, int(ranks.size), score_local, threshold,
                 selector.limit, accept_all=accept_all, fixed=local.fixed,
                 fixed_kept=local.fixed_kept, kept_before=local.kept_before)
    result = selector.decide(local, sel)
    result.bounded = settled[0]
    return result


def merge(results, n: int) -> Selection:
    """The ranges' results (an iterable: each may be loaded as it comes) as
    one :class:`Selection` over ranks ``0 .. n - 1``, held in memory (its
    pairs packed, as :func:`~gpu_dedup.stages.select.greedy_select` gives
    them)."""
    kept = np.ones(n, dtype=bool)
    dup = np.full(n, -1, dtype=np.int64)
    sim = np.full(n, np.nan)
    pairs, scores, counts, where = [], [], np.zeros(4, dtype=np.int64), None
    for r in results:
        kept[r.removed] = False
        dup[r.removed] = r.duplicate_of
        sim[r.removed] = r.similarity
        pairs.append(pack_edges(r.pair_a, r.pair_b))
        scores.append(r.pair_scores)
        counts += (r.comparisons, r.skipped, r.rounds, r.scored)
        where = r.where if where is None else where
    pairs = np.concatenate(pairs) if pairs else np.zeros(0, np.uint64)
    scores = np.concatenate(scores) if scores else np.zeros(0)
    order = np.argsort(pairs, kind="stable")
    return Selection(kept, dup, sim, pairs[order], scores[order],
                     int(counts[0]), int(counts[1]), int(counts[2]), where or "host",
                     int(counts[3]))


def select_in_ranges(bucket_off, members, n: int, score_fn, threshold: float,
                     limit: int = 32, ranges: int = 4, accept_all: bool = False,
                     fixed: int = 0, units: int = 1, select=greedy_select,
                     state: RangeState | None = None) -> Selection:
    """:func:`~gpu_dedup.stages.select.greedy_select` range by range, all in
    memory: the buckets cut into ``units`` as the bucket stage's units would
    give them, grouped, made distinct and split by range, then decided range
    after range (the engine does the same over its store). ``state``: a
    :class:`RangeState` over the same ranges (None: one in memory)."""
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
    groups, base = {}, {}
    total = 0
    for g in sorted(pieces):
        off, mem = distinct_buckets(*concat_csr(pieces[g]))
        groups[g], base[g] = (off, mem), total
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
                 for i in unique(gi)]
        return concat_csr(parts)

    selector = RangeSelector(n, limit, state or RangeState(bounds, limit), fixed)

    def scorer(ranks):                  # score_fn takes packed pairs, as greedy_select's
        return lambda pairs: score_fn(pack_edges(pairs[0], pairs[1]))

    results = [select_range(selector, k, int(bounds[k]), np.concatenate(entries[k], axis=1),
                            heads, scorer, threshold, accept_all, select)
               for k in range(bounds.size - 1) if k in entries]
    return merge(results, n)
