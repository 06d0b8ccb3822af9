"""Greedy selection: which documents are kept, and which kept document each
removed one duplicates.

Documents are taken in keep priority (their *rank*: input order, or length
then input order). A document is removed if and only if it is verified
similar to a document already kept that shares a bucket with it; otherwise
it is kept. The kept documents are then an independent set of the verified
similarity graph over the candidates, and every removed document names a
kept one (``duplicate_of``): the most similar of the kept documents it was
compared with, ties to the higher priority.

Work is bounded in pathological buckets (many mutually dissimilar documents
sharing a band, as very short texts do): a document is compared with at
most ``limit`` kept documents of each bucket, the first ones by priority.
Comparisons left out by that bound are counted, never silently dropped.

The sequential rule is computed in passes. First every document is scored,
in one parallel call, against the first ``2 * limit`` members of each of its
buckets (its *window*: what it is compared with when few documents before
it are removed). Then a sequential pass (a Numba kernel) walks the
undecided documents in rank order and decides each one whose scores against
the first ``limit`` kept members of its buckets are all known. A document
that needs a score outside its window is blocked, together with the later
members of the buckets where it could still be among the first ``limit``
kept; its missing scores (and those against the blocked members before it)
are scored in one call, and the next pass takes the blocked documents
again. Every decision is final when it is made, so the answer is exactly
the sequential one (:func:`greedy_reference`), whatever the order of the
buckets or how the scoring is split; a million short documents take six
passes at the default bands and rows.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..arrays import to_host, unique
from ..kernels.greedy import candidate_mask, greedy_pass, table_insert, window_pairs
from ..kernels.sorting import counting_order
from .lsh import pack_edges as pack, unpack_edges as unpack

_S32 = np.uint64(32)

UNDECIDED, KEPT, REMOVED = 0, 1, 2
#: A document's window: the first WINDOW * limit members of each bucket.
WINDOW = 2
#: Pairs a pass may request at most before it stops early (32 MiB).
MISS_SLOTS = 1 << 22


@dataclass
class Selection:
    """The outcome of :func:`greedy_select`, over ranks ``0 .. n-1``.

    Attributes:
        kept: bool per rank.
        duplicate_of: int64 rank of the kept document a removed one
            duplicates; -1 for kept documents.
        similarity: float64 score to it; NaN for kept documents.
        pairs: packed ``u << 32 | v`` rank pairs (``u < v``) scored at or
            above the threshold, sorted.
        pair_scores: their scores.
        comparisons: distinct pairs the rule compares: each member with the
            first ``2 * limit`` members of its buckets (its window), and
            with the first ``limit`` kept members before it; the same
            however it is computed.
        skipped: bucket comparisons left out by the per-bucket bound.
        rounds: rounds run.
        where: where it ran (``"host"``, ``"device"``, or why it is on the
            host).
        scored: distinct pairs scored (the sequential passes also score
            some ahead against members that are then removed).
    """

    kept: np.ndarray
    duplicate_of: np.ndarray
    similarity: np.ndarray
    pairs: np.ndarray
    pair_scores: np.ndarray
    comparisons: int
    skipped: int
    rounds: int
    where: str = "host"
    scored: int = 0

    def same_as(self, other: "Selection") -> bool:
        """The same result as ``other``, bit for bit: kept, ``duplicate_of``,
        similarities, the pairs and their scores, comparisons skipped (not
        how it was computed: rounds, pairs scored, where)."""
        return (all(np.array_equal(np.asarray(getattr(self, f)), np.asarray(getattr(other, f)),
                                   equal_nan=f in ("similarity", "pair_scores"))
                    for f in ("kept", "duplicate_of", "similarity", "pairs", "pair_scores"))
                and self.skipped == other.skipped)


class _Memo:
    """Scores of the pairs compared outside the windows, in a hash table
    that doubles as needed."""

    def __init__(self, score_fn, accept_all: bool):
        self.t_keys = np.zeros(1 << 16, np.uint64)
        self.t_vals = np.zeros(1 << 16, np.float64)
        self.count = 0
        self.score_fn = score_fn
        self.accept_all = accept_all

    def _grow(self, extra: int) -> None:
        need = 2 * (self.count + extra)
        if need <= self.t_keys.size:
            return
        size = self.t_keys.size
        while size < need:
            size *= 2
        used = self.t_keys != 0
        keys, vals = self.t_keys[used], self.t_vals[used]
        self.t_keys = np.zeros(size, np.uint64)
        self.t_vals = np.zeros(size, np.float64)
        table_insert(self.t_keys, self.t_vals, keys, vals)

    def compared_pairs(self, d_off, d_bkt, b_off, klist, kcount, limit: int):
        """The pairs scored here that the rule compares (not those scored
        ahead against members then removed), and their scores."""
        used = self.t_keys != 0
        keys, vals = self.t_keys[used], self.t_vals[used]
        u, v = unpack(keys)
        cand = candidate_mask(u, v, d_off, d_bkt, b_off, klist, kcount, limit)
        return keys[cand], vals[cand]

    def add(self, new: np.ndarray) -> None:
        """Score the packed pairs ``new`` (sorted, distinct, none known yet)."""
        s = _scores(self.score_fn, new)
        self._grow(new.size)
        self.count += table_insert(self.t_keys, self.t_vals, new, s)

    def similar(self, scores: np.ndarray, threshold: float) -> np.ndarray:
        return np.ones(scores.shape, bool) if self.accept_all else scores >= threshold


def greedy_select(bucket_off: np.ndarray, members: np.ndarray, n: int, score_fn,
                  threshold: float, limit: int = 32, accept_all: bool = False,
                  fixed: int = 0, fixed_kept=None, kept_before=None) -> Selection:
    """The sequential greedy rule, in passes (see the module docstring).

    Args:
        bucket_off: int64 bucket boundaries (buckets + 1 entries).
        members: int64 ranks of each bucket's members, ascending inside a
            bucket; buckets of one member may be given (they change nothing).
        n: number of documents (ranks ``0 .. n-1``).
        score_fn: ``score_fn(packed) -> float64 scores`` of packed rank pairs
            ``u << 32 | v`` (sorted, distinct); called once a pass with new
            pairs only.
        threshold: a pair is similar at or above it.
        limit: kept documents of a bucket a document is compared with.
        accept_all: every compared pair is similar (verification off).
        fixed: ranks ``0 .. fixed - 1`` are decided already (documents of an
            index a new corpus is deduplicated against, or the ranks of
            earlier ranges, :mod:`gpu_dedup.stages.select_ranges`): they
            are never scored against each other, and the others are decided
            as if the rule had decided them so.
        fixed_kept: bool per fixed rank, whether it was kept (None: all were).
        kept_before: int64 per bucket, kept members before its first member
            that are not among ``members`` (they count only for
            ``skipped``); None for none.

    Returns:
        A :class:`Selection`.

    Example:
        >>> sims = {(0, 1): 0.9, (0, 2): 0.5, (1, 2): 0.9}
        >>> def score(p):
        ...     return np.array([sims[(int(x) >> 32, int(x) & 0xFFFFFFFF)] for x in p])
        >>> s = greedy_select(np.array([0, 3]), np.array([0, 1, 2]), 3, score, 0.8)
        >>> s.kept.tolist(), s.duplicate_of.tolist()
        ([True, False, True], [-1, 0, -1])
    """
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    m = _membership(np, bucket_off, members, n, fixed)
    fixed_kept = _fixed_kept(np, fixed_kept, fixed)
    members, b_off, seg, mem = m.members, m.b_off, m.seg, m.mem
    d_off, d_bkt, nb = m.d_off, m.d_bkt, m.sizes.size
    d_pos = m.d_pos.copy()
    d_pos[:d_off[min(fixed, n)]] = 0        # fixed ranks are scored with nothing
    # every rank against the first members of its buckets, in one call
    p_off, p_u = window_pairs(d_off, d_bkt, d_pos, b_off, members, WINDOW * int(limit))
    del d_pos
    p_s = _window_scores(score_fn, p_off, p_u, (b_off, members, WINDOW * int(limit), fixed))
    state = _initial_state(np, n, m.todo, fixed_kept)
    todo = m.todo
    klist = np.empty(members.size, np.int64)
    blist = np.empty(members.size, np.int64)
    kcount = np.zeros(nb, np.int64)
    if fixed:
        # the fixed members lead their buckets (ranks ascend): the kept ones
        # open the kept lists, in rank order
        pre = (mem < fixed) & (state[mem] == KEPT)
        ps = seg[pre]
        kcount = np.bincount(ps, minlength=nb).astype(np.int64)
        klist[b_off[ps] + _rank_in_segment(np, ps)] = mem[pre]
    bcount = np.zeros(nb, np.int64)
    bstamp = np.zeros(nb, np.int64)
    dup = np.full(n, -1, np.int64)
    sim = np.full(n, np.nan)
    most = int(np.diff(d_off).max()) if n else 0
    miss = np.empty(max(MISS_SLOTS, 2 * limit * most), np.uint64)
    blocked = np.empty(todo.size, np.int64)
    memo = _Memo(score_fn, accept_all)
    passes = 0
    while todo.size:
        passes += 1
        requested, held = greedy_pass(
            todo, d_off, d_bkt, b_off, state, klist, kcount, blist, bcount, bstamp, passes,
            p_off, p_u, p_s, memo.t_keys, memo.t_vals, float(threshold), bool(accept_all),
            int(limit), dup, sim, miss, blocked)
        if requested:
            memo.add(np.sort(miss[:requested]))
        todo = blocked[:held].copy()
    kept = state == KEPT
    # the pairs the rule compares: the windows, and the first `limit` kept
    # members of each bucket before a member (pairs scored ahead against
    # members then removed are left out: they depend on how passes fell)
    keys, scores = memo.compared_pairs(d_off, d_bkt, b_off, klist, kcount, int(limit))
    compared = keys.size
    ok = memo.similar(scores, threshold)
    keys, scores = keys[ok], scores[ok]
    ok = np.flatnonzero(memo.similar(p_s, threshold))
    p_v = np.searchsorted(p_off, ok, side="right") - 1     # the second ranks of those
    keys = np.concatenate([pack(p_u[ok], p_v), keys])
    scores = np.concatenate([p_s[ok], scores])
    order = np.argsort(keys)
    pairs, pair_scores = _kept_apart(np, keys[order], scores[order], kept)
    return Selection(kept, dup, sim, pairs, pair_scores, p_s.size + compared,
                     _skipped(np, m, kept, limit, fixed, kept_before), passes,
                     scored=p_s.size + memo.count)


def greedy_rounds(xp, k, bucket_off, members, n: int, score_fn, threshold: float,
                  limit: int = 32, accept_all: bool = False, fixed: int = 0,
                  room: int | None = None, fixed_kept=None,
                  kept_before=None) -> Selection | None:
    """The sequential greedy rule in parallel rounds (:mod:`kernels.greedy`),
    in the array module ``xp``: the selection of :func:`greedy_select`, bit
    for bit (``kept``, ``duplicate_of``, ``similarity``, ``pairs``,
    ``pair_scores``, ``skipped``), with each round one parallel step over
    the undecided documents and one over the open buckets.

    Args:
        xp: NumPy, or CuPy (the arrays stay on the device; ``score_fn`` gets
            and returns host arrays).
        k: the kernels: ``kernels.greedy`` (CPU) or
            ``kernels.cuda.greedy_kernels(xp)`` (GPU).
        room: bytes the first round of scored pairs may take (32 a pair);
            None for no bound.
        The others: as for :func:`greedy_select`.

    Returns:
        A :class:`Selection` of ``xp`` arrays; ``comparisons`` and
        ``scored`` are equal (the rounds score only pairs the rule
        compares), ``rounds`` counts the rounds. None when the first round
        would take more than ``room``.
    """
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    limit = int(limit)
    threshold = float(threshold)
    accept_all = bool(accept_all)
    m = _membership(xp, bucket_off, members, n, fixed)
    fixed_kept = _fixed_kept(xp, fixed_kept, fixed)
    members, b_off, d_off, d_bkt, d_pos = m.members, m.b_off, m.d_off, m.d_bkt, m.d_pos
    nb = int(m.sizes.size)
    i64 = xp.int64
    # the windows: every rank against the first members of its buckets
    # (fixed ranks are scored with nothing)
    w_pos = xp.where(m.d_rank < fixed, 0, d_pos)
    woff = xp.zeros(int(w_pos.size) + 1, dtype=i64)
    xp.cumsum(xp.minimum(w_pos, WINDOW * limit), out=woff[1:])
    if room is not None and int(woff[-1]) * 32 > room:
        return None
    out = xp.empty(int(woff[-1]), dtype=xp.uint64)
    k.window_round(m.d_rank, d_bkt, w_pos, b_off, members, WINDOW * limit, woff, out)
    del w_pos, woff
    # pairs as v << 32 | u: a document's side by side, at voff[v]:voff[v + 1]
    keys = unique(out) if xp is np else xp.unique(out)
    del out
    voff = xp.searchsorted(keys, xp.arange(n + 1, dtype=xp.uint64) << xp.uint64(32))
    voff = voff.astype(i64)
    vals = xp.asarray(_scores(score_fn, to_host(_swap(keys))))
    # the pairs scored since, sorted: small next to the windows
    memo = [xp.zeros(0, dtype=xp.uint64), xp.zeros(0, dtype=xp.float64)]

    def score_missing(todo, nmiss):
        moff = xp.zeros(int(todo.size) + 1, dtype=i64)
        xp.cumsum(nmiss, out=moff[1:])
        out = xp.empty(int(moff[-1]), dtype=xp.uint64)
        k.missing_round(todo, moff, d_off, d_bkt, b_off, klist, kcount, limit, keys, voff, vals,
                        *memo, threshold, accept_all, out)
        new = unique(out) if xp is np else xp.unique(out)
        s = xp.asarray(_scores(score_fn, to_host(_swap(new))))
        mk = xp.concatenate([memo[0], new])
        order = xp.argsort(mk)
        memo[:] = [mk[order], xp.concatenate([memo[1], s])[order]]

    state = _initial_state(xp, n, m.todo, fixed_kept)
    todo = m.todo
    klist = xp.empty(int(members.size), dtype=i64)
    kcount = xp.zeros(nb, dtype=i64)
    front = xp.zeros(nb, dtype=i64)
    bkts = xp.flatnonzero(m.sizes > 1)
    k.advance_round(bkts, b_off, members, state, klist, kcount, front)
    rounds = 0
    while int(todo.size):
        rounds += 1
        nmiss = xp.empty(int(todo.size), dtype=i64)
        k.decide_round(todo, d_off, d_bkt, d_pos, b_off, klist, kcount, front, limit, keys,
                       voff, vals, *memo, threshold, accept_all, state, nmiss)
        if int(nmiss.sum()):
            score_missing(todo, nmiss)
        bkts = bkts[front[bkts] < m.sizes[bkts]]
        k.advance_round(bkts, b_off, members, state, klist, kcount, front)
        todo = todo[state[todo] == UNDECIDED]
    # every kept list is final: which kept document each removed one names
    dup = xp.full(n, -1, dtype=i64)
    sim = xp.full(n, xp.nan, dtype=xp.float64)
    docs = xp.flatnonzero(state == REMOVED)
    docs = docs[docs >= fixed]
    while int(docs.size):
        nmiss = xp.empty(int(docs.size), dtype=i64)
        k.best_round(docs, d_off, d_bkt, b_off, klist, kcount, limit, keys, voff, vals, *memo,
                     threshold, accept_all, nmiss, dup, sim)
        if not int(nmiss.sum()):
            break
        score_missing(docs, nmiss)
        docs = docs[nmiss > 0]
    keys = _swap(xp.concatenate([keys, memo[0]]))
    vals = xp.concatenate([vals, memo[1]])
    order = xp.argsort(keys)
    keys, vals = keys[order], vals[order]
    kept = state == KEPT
    ok = xp.ones(keys.shape, dtype=xp.bool_) if accept_all else vals >= threshold
    pairs, pair_scores = _kept_apart(xp, keys[ok], vals[ok], kept)
    return Selection(kept, dup, sim, pairs, pair_scores, int(keys.size),
                     _skipped(xp, m, kept, limit, fixed, kept_before), rounds,
                     scored=int(keys.size))


def _swap(packed):
    """``a << 32 | b`` as ``b << 32 | a``."""
    return (packed << _S32) | (packed >> _S32)


@dataclass
class _Members:
    """Bucket membership, by bucket and by rank (see :func:`_membership`)."""
    members: object     # ranks of every bucket, from the first bucket's start
    b_off: object       # bucket boundaries into ``members`` (buckets + 1 entries)
    sizes: object       # members per bucket
    seg: object         # bucket of each entry of a bucket of two or more
    mem: object         # rank of each such entry
    ent: object         # its place in ``members``
    d_off: object       # by rank: entries ``d_off[v]:d_off[v+1]`` of the next three
    d_bkt: object       # bucket of the entry
    d_pos: object       # place of the rank in that bucket
    d_rank: object      # the rank itself
    todo: object        # the ranks to decide: in a bucket of two or more, not fixed


def _membership(xp, bucket_off, members, n: int, fixed: int) -> _Members:
    """Who is in which bucket, in the array module ``xp``."""
    bucket_off = xp.asarray(bucket_off, dtype=xp.int64)
    lo, hi = int(bucket_off[0]), int(bucket_off[-1])
    members = xp.ascontiguousarray(xp.asarray(members, dtype=xp.int64)[lo:hi])
    b_off = bucket_off - lo
    sizes = b_off[1:] - b_off[:-1]
    # the bucket of every entry (no repeat by counts on a device: CuPy's
    # takes no array)
    if xp is np:
        seg = np.repeat(np.arange(sizes.size, dtype=np.int64), sizes)
    else:
        seg = xp.searchsorted(b_off[1:], xp.arange(hi - lo, dtype=xp.int64), side="right")
        seg = seg.astype(xp.int64)
    multi = sizes[seg] > 1
    seg, mem = seg[multi], members[multi]
    ent = xp.flatnonzero(multi)
    d_off = xp.zeros(n + 1, dtype=xp.int64)
    if n:
        xp.cumsum(xp.bincount(mem, minlength=n), out=d_off[1:])
    # by rank, in bucket order (stable): counted into place on the host
    order = counting_order(mem, d_off) if xp is np else xp.argsort(mem, kind="stable")
    d_bkt = seg[order]
    d_pos = ent[order] - b_off[d_bkt]
    d_rank = mem[order]
    todo = unique(mem) if xp is np else xp.unique(mem)    # NumPy's own hashes: slower
    todo = todo[todo >= fixed]
    return _Members(members, xp.ascontiguousarray(b_off), sizes, seg, mem, ent, d_off, d_bkt,
                    d_pos, d_rank, todo)


def _fixed_kept(xp, fixed_kept, fixed: int):
    """``fixed_kept`` checked: a bool array of ``fixed`` entries, or None."""
    if fixed_kept is None:
        return None
    fixed_kept = xp.asarray(fixed_kept, dtype=xp.bool_)
    if fixed_kept.shape != (fixed,):
        raise ValueError(f"fixed_kept has {fixed_kept.shape[0]} entries for {fixed} fixed ranks")
    return fixed_kept


def _initial_state(xp, n: int, todo, fixed_kept):
    """Every rank kept, those to decide undecided, the fixed ones not kept removed."""
    state = xp.full(n, KEPT, dtype=xp.int8)
    state[todo] = UNDECIDED
    if fixed_kept is not None:
        state[:fixed_kept.shape[0]][~fixed_kept] = REMOVED
    return state


def _rank_in_segment(xp, seg):
    """For sorted segment labels, each entry's place in its segment."""
    if not int(seg.size):
        return xp.zeros(0, dtype=xp.int64)
    first = xp.ones(int(seg.size), dtype=xp.bool_)
    first[1:] = seg[1:] != seg[:-1]
    at = xp.arange(int(seg.size), dtype=xp.int64)
    return at - at[xp.flatnonzero(first)][xp.cumsum(first) - 1]


def _skipped(xp, m: _Members, kept, limit: int, fixed: int, kept_before=None) -> int:
    """Comparisons the bound left out: kept members of a bucket before each
    member (not a fixed one), beyond the first ``limit``; ``kept_before``
    (per bucket) counts kept members before the bucket's first one."""
    seg, mem = m.seg, m.mem
    if not int(seg.size):
        return 0
    is_k = kept[mem].astype(xp.int64)
    before = xp.cumsum(is_k) - is_k
    first = xp.ones(int(seg.size), dtype=xp.bool_)
    first[1:] = seg[1:] != seg[:-1]
    before -= before[xp.flatnonzero(first)][xp.cumsum(first) - 1]
    if kept_before is not None:
        before += xp.asarray(kept_before, dtype=xp.int64)[seg]
    return int(xp.maximum(before - limit, 0)[mem >= fixed].sum())


def _kept_apart(xp, keys, scores, kept):
    """The sorted similar pairs, less those of two kept documents: such a
    pair was scored ahead, then left out by the bucket bound, and the
    decisions do not rest on it."""
    u, v = unpack(keys)
    used = ~(kept[u] & kept[v])
    return keys[used], scores[used]


def _window_scores(score_fn, p_off: np.ndarray, p_u: np.ndarray, made: tuple) -> np.ndarray:
    """The scores of the window pairs (``p_u[i]`` and ``v`` for ``p_off[v]
    <= i < p_off[v + 1]``, made by :func:`window_pairs` from ``made``:
    ``(b_off, members, width, fixed)``, the buckets, the window's width and
    the fixed ranks, which have none): ``score_fn.window(p_off, p_u,
    *made)`` where the function has one (the same scores, without the
    pairs spelt out), else ``score_fn`` of the packed pairs; checked."""
    window = getattr(score_fn, "window", None)
    if window is None:
        p_v = np.repeat(np.arange(p_off.size - 1, dtype=np.int64), np.diff(p_off))
        return _scores(score_fn, pack(p_u, p_v))
    if not p_u.size:
        return np.zeros(0, np.float64)
    s = np.asarray(window(p_off, p_u, *made), dtype=np.float64)
    if s.shape != p_u.shape:
        raise ValueError(f"score_fn.window returned {s.shape[0]} scores for {p_u.size} pairs")
    return s


def _scores(score_fn, pairs: np.ndarray) -> np.ndarray:
    """``score_fn(pairs)`` as float64, checked (no call for no pairs)."""
    if not pairs.size:
        return np.zeros(0, np.float64)
    s = np.asarray(score_fn(pairs), dtype=np.float64)
    if s.shape != pairs.shape:
        raise ValueError(f"score_fn returned {s.shape[0]} scores for {pairs.size} pairs")
    return s


def greedy_reference(buckets: list, n: int, score, threshold: float,
                     limit: int = 32) -> tuple[list, list, list, int]:
    """The plain sequential rule, one document at a time: the oracle of
    :func:`greedy_select`.

    Args:
        buckets: lists of member ranks.
        n: number of documents.
        score: ``score(u, v) -> float`` for ranks ``u < v``.
        threshold, limit: as for :func:`greedy_select`.

    Returns:
        (kept, duplicate_of, similarity, skipped): lists over ranks, and
        the bucket comparisons the bound left out.
    """
    of: list[list] = [[] for _ in range(n)]
    for bi, b in enumerate(buckets):
        for m in set(b):
            of[m].append(bi)
    kept_in: list[list] = [[] for _ in buckets]
    kept, dup, sims = [True] * n, [-1] * n, [float("nan")] * n
    skipped = 0
    for v in range(n):
        partners = set()
        for bi in of[v]:
            partners.update(kept_in[bi][:limit])
            skipped += max(0, len(kept_in[bi]) - limit)
        best = None
        for u in sorted(partners):
            s = score(u, v)
            if s >= threshold and (best is None or s > best[1]):
                best = (u, s)
        if best is None:
            for bi in of[v]:
                kept_in[bi].append(v)
        else:
            kept[v], dup[v], sims[v] = False, best[0], best[1]
    return kept, dup, sims, skipped


def chaining_summary(cluster: np.ndarray, kept: np.ndarray, removed_sims: np.ndarray,
                     threshold: float) -> dict:
    """Clusters of connected components whose members are far from their
    kept document: how many, and the size of the largest.

    Args:
        cluster: cluster of every document; kept: bool per document;
        removed_sims: similarity of each removed document (in document order)
            to its cluster's kept document.
    """
    removed = np.flatnonzero(~np.asarray(kept, dtype=bool))
    far = removed[np.asarray(removed_sims) < threshold]
    if not far.size:
        return {"chained_clusters": 0, "largest_chained_cluster": 0, "below_threshold": 0}
    chained = unique(cluster[far])
    _, sizes = np.unique(cluster[np.isin(cluster, chained)], return_counts=True)
    return {"chained_clusters": int(chained.size), "largest_chained_cluster": int(sizes.max()),
            "below_threshold": int(far.size)}
