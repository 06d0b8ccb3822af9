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

The sequential rule is computed in parallel rounds over array operations
(a deterministic parallel greedy maximal independent set): each round
scores every document still undecided against the kept documents it must
be compared with, removes those with a similar one, and keeps those that no
earlier undecided document can still affect. A document held back for
``AHEAD_AFTER`` rounds is compared ahead with every member before it, so
that it waits only on those it is similar to: a bucket of mutually
dissimilar documents is then not decided one document a round. Each round
decides at least the first undecided document; a million short documents
take 34 rounds at the default bands and rows. The answer is exactly the sequential one
(:func:`greedy_reference`), whatever the order of the buckets or how the
scoring is split.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..arrays import unique
from ..kernels.cpu import table_find, table_insert
from .lsh import pack_edges as pack, unpack_edges as unpack

UNDECIDED, KEPT, REMOVED = 0, 1, 2
#: Rounds a document waits behind undecided ones before it is compared ahead
#: with every member before it.
AHEAD_AFTER = 8
#: Slots the score table starts with at most (64 MiB); it doubles as needed.
MEMO_START_SLOTS = 1 << 22


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
        comparisons: distinct pairs scored.
        skipped: bucket comparisons left out by the per-bucket bound.
        rounds: rounds run.
    """

    kept: np.ndarray
    duplicate_of: np.ndarray
    similarity: np.ndarray
    pairs: np.ndarray
    pair_scores: np.ndarray
    comparisons: int
    skipped: int
    rounds: int


class _Memo:
    """Scores of the pairs compared so far, in a hash table: a round costs
    what it looks up, not the size of everything scored."""

    def __init__(self, score_fn, accept_all: bool, expect: int = 0):
        size = 1 << 16
        while size < 2 * expect and size < MEMO_START_SLOTS:
            size *= 2
        self.t_keys = np.zeros(size, np.uint64)
        self.t_vals = np.zeros(size, np.float64)
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

    def similar_pairs(self, threshold: float) -> tuple[np.ndarray, np.ndarray]:
        """The pairs scored similar, sorted, and their scores."""
        used = self.t_keys != 0
        keys, vals = self.t_keys[used], self.t_vals[used]
        ok = self.similar(vals, threshold)
        keys, vals = keys[ok], vals[ok]
        order = np.argsort(keys)
        return keys[order], vals[order]

    def score(self, p: np.ndarray) -> np.ndarray:
        """Scores of packed pairs ``p``; unknown ones are scored (one call)."""
        p = np.ascontiguousarray(p, dtype=np.uint64)
        out = np.empty(p.size, np.float64)
        missing = table_find(self.t_keys, self.t_vals, p, out)
        if missing.size:
            new = unique(p[missing])
            s = np.asarray(self.score_fn(new), dtype=np.float64)
            if s.shape != new.shape:
                raise ValueError(f"score_fn returned {s.shape[0]} scores for {new.size} pairs")
            self._grow(new.size)
            self.count += table_insert(self.t_keys, self.t_vals, new, s)
            out[missing] = s[np.searchsorted(new, p[missing])]
        return out

    def similar(self, scores: np.ndarray, threshold: float) -> np.ndarray:
        return np.ones(scores.shape, bool) if self.accept_all else scores >= threshold


class _Layout:
    """Per-entry counts of the entries (bucket, member) of the buckets still
    in play, in bucket order then rank order."""

    def __init__(self, seg: np.ndarray, mem: np.ndarray, state: np.ndarray, limit: int):
        self.seg, self.mem = seg, mem
        st = state[mem]
        self.is_k = st == KEPT
        self.is_u = st == UNDECIDED
        n = seg.size
        start = np.ones(n, bool)
        start[1:] = seg[1:] != seg[:-1]
        self.first = np.flatnonzero(start)                 # first entry of each bucket
        self.bucket = np.cumsum(start) - 1                 # bucket number 0.. of each entry
        self.k_before = _exclusive_count(self.is_k, self.first, self.bucket)
        u_before = _exclusive_count(self.is_u, self.first, self.bucket)
        # every member before it will be compared with it if it is kept
        self.window = self.k_before + u_before < limit
        # kept entries that stay among a bucket's first `limit` kept, whatever
        # its undecided members become: a prefix of the bucket's kept entries
        sure = self.is_k & (self.k_before + u_before < limit)
        self.sure = sure
        self.k_entries = np.flatnonzero(self.is_k)
        nb = self.first.size
        self.k_start = np.searchsorted(self.bucket[self.k_entries], np.arange(nb))
        self.n_sure = np.bincount(self.bucket[sure], minlength=nb)
        # the first undecided member of a bucket, while fewer than `limit`
        # kept precede it, holds back every later member
        fu = np.full(nb, n, np.int64)
        u_idx = np.flatnonzero(self.is_u)
        ub = self.bucket[u_idx]
        lead = np.ones(ub.size, bool)
        lead[1:] = ub[1:] != ub[:-1]
        fu[ub[lead]] = u_idx[lead]
        hold = fu < n
        hold[hold] = self.k_before[fu[hold]] < limit
        self.held = self.is_u & hold[self.bucket] & (np.arange(n) > fu[self.bucket])

    def pairs(self, entries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(packed pairs, member of each) between the undecided ``entries``
        and the kept members they must be compared with."""
        b = self.bucket[entries]
        c = np.minimum(self.n_sure[b], self.k_before[entries])
        return _cross(self.mem, entries, c, self.k_entries, self.k_start[b])

    def all_pairs(self, entries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Pairs between ``entries`` and every member before them."""
        start = self.first[self.bucket[entries]]
        return _cross(self.mem, entries, entries - start, np.arange(self.mem.size), start)

    def new_pairs(self, entries: np.ndarray, new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """As :meth:`pairs`, with only the kept members that are ``new`` (a
        bool per document)."""
        flag = self.sure & new[self.mem]
        listed = np.flatnonzero(flag)
        start = np.searchsorted(self.bucket[listed], np.arange(self.first.size))
        before = _exclusive_count(flag, self.first, self.bucket)[entries]
        return _cross(self.mem, entries, before, listed, start[self.bucket[entries]])


def _exclusive_count(flag: np.ndarray, first: np.ndarray, bucket: np.ndarray) -> np.ndarray:
    """Number of ``flag`` entries before each entry within its bucket."""
    cs = np.cumsum(flag, dtype=np.int64) - flag
    return cs - cs[first][bucket]


def _cross(mem, entries, c, k_entries, k_start):
    """Pairs of each entry with the first ``c`` kept entries of its bucket."""
    total = int(c.sum())
    if total == 0:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64)
    owner = np.repeat(np.arange(entries.size), c)
    within = np.arange(total) - np.repeat(np.cumsum(c) - c, c)
    u = mem[k_entries[k_start[owner] + within]]
    v = mem[entries[owner]]
    return pack(u, v), v


def greedy_select(bucket_off: np.ndarray, members: np.ndarray, n: int, score_fn,
                  threshold: float, limit: int = 32, accept_all: bool = False) -> Selection:
    """The sequential greedy rule, in rounds (see the module docstring).

    Args:
        bucket_off: int64 bucket boundaries (buckets + 1 entries).
        members: int64 ranks of each bucket's members, ascending inside a
            bucket; buckets of one member may be given (they change nothing).
        n: number of documents (ranks ``0 .. n-1``).
        score_fn: ``score_fn(packed) -> float64 scores`` of packed rank pairs
            ``u << 32 | v``; called once a round with new pairs only.
        threshold: a pair is similar at or above it.
        limit: kept documents of a bucket a document is compared with.
        accept_all: every compared pair is similar (verification off).

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
    bucket_off = np.asarray(bucket_off, dtype=np.int64)
    members = np.asarray(members, dtype=np.int64)
    sizes = np.diff(bucket_off)
    seg_all = np.repeat(np.arange(sizes.size, dtype=np.int64), sizes)
    multi = sizes[seg_all] > 1
    seg_all, mem_all = seg_all[multi], members[bucket_off[0]:bucket_off[-1]][multi]
    state = np.full(n, KEPT, np.int8)
    state[mem_all] = UNDECIDED
    memo = _Memo(score_fn, accept_all, expect=2 * seg_all.size)
    seg, mem, eid = seg_all, mem_all, np.arange(seg_all.size, dtype=np.int64)
    new_kept = np.zeros(n, bool)
    waited = np.zeros(n, np.int32)          # rounds each document has been held back
    ahead = np.zeros(n, bool)               # documents compared ahead
    ahead_e = np.zeros(seg_all.size, bool)  # entries compared ahead with all before them
    pu = pv = np.zeros(0, np.int64)         # similar pairs (u, v) waiting on u's decision
    rounds = 0
    while True:
        # the buckets still in play, without their removed members
        live = state[mem] != REMOVED
        seg, mem, eid = seg[live], mem[live], eid[live]
        has_u = np.zeros(sizes.size, bool)
        has_u[seg[state[mem] == UNDECIDED]] = True
        keep = has_u[seg]
        seg, mem, eid = seg[keep], mem[keep], eid[keep]
        if not seg.size:
            break
        rounds += 1
        lay = _Layout(seg, mem, state, limit)
        u_entries = np.flatnonzero(lay.is_u)
        # held back: by an undecided member before it, unless compared ahead
        # with every member before it (where all of them count) and found
        # dissimilar to those still undecided
        held = np.zeros(n, bool)
        held[mem[lay.held & ~(ahead_e[eid] & lay.window)]] = True
        still = (state[pu] == UNDECIDED) & (state[pv] == UNDECIDED)
        pu, pv = pu[still], pv[still]
        held[pv] = True
        held &= state == UNDECIDED
        # documents held back for rounds are compared ahead, so that a bucket
        # of mutually dissimilar documents does not take a round each
        ahead |= held & (waited >= AHEAD_AFTER)
        todo = u_entries[ahead[mem[u_entries]] & lay.window[u_entries] & ~ahead_e[eid[u_entries]]]
        ahead_e[eid[todo]] = True
        waited[held] += 1
        free = ~held[mem[u_entries]]
        # free documents against all they must be compared with: decided now;
        # the others against the kept documents new since the last round, and
        # removed early when similar to one
        parts = [lay.pairs(u_entries[free]), lay.new_pairs(u_entries[~free], new_kept),
                 lay.all_pairs(todo)]
        p = np.concatenate([x[0] for x in parts])
        v = np.concatenate([x[1] for x in parts])
        if p.size:
            sim = memo.similar(memo.score(p), threshold)
            u, _ = unpack(p)
            hit = sim & (state[u] == KEPT)
            state[v[hit]] = REMOVED
            wait = sim & (state[u] == UNDECIDED)
            pu, pv = np.concatenate([pu, u[wait]]), np.concatenate([pv, v[wait]])
        cand = mem[u_entries[free]]
        cand = cand[state[cand] == UNDECIDED]
        new_kept[:] = False
        new_kept[cand] = True
        state[cand] = KEPT
    return _finish(seg_all, mem_all, state, memo, n, limit, threshold, rounds)


def _finish(seg, mem, state, memo, n, limit, threshold, rounds) -> Selection:
    """Each removed document against every kept one it is compared with:
    ``duplicate_of`` is the most similar, ties to the higher priority."""
    dup = np.full(n, -1, np.int64)
    sim = np.full(n, np.nan)
    skipped = 0
    if seg.size:
        lay = _Layout(seg, mem, state, limit)
        skipped = int(np.maximum(lay.k_before - limit, 0).sum())
        removed = np.flatnonzero(state[mem] == REMOVED)
        b = lay.bucket[removed]
        c = np.minimum(lay.k_before[removed], limit)
        p, _ = _cross(mem, removed, c, lay.k_entries, lay.k_start[b])
        p = unique(p)
        if p.size:
            s = memo.score(p)
            ok = memo.similar(s, threshold)
            p, s = p[ok], s[ok]
            u, v = unpack(p)
            # best per removed document: highest score, then lowest rank
            order = np.lexsort((u, -s, v))
            u, v, s = u[order], v[order], s[order]
            first = np.ones(v.size, bool)
            first[1:] = v[1:] != v[:-1]
            dup[v[first]] = u[first]
            sim[v[first]] = s[first]
    keys, scores = memo.similar_pairs(threshold)
    return Selection(state == KEPT, dup, sim, keys, scores, memo.count, skipped, rounds)


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


def similarity_summary(sims: np.ndarray, threshold: float, bins: int = 20) -> dict:
    """How similar removed documents are to the kept document they name.

    Args:
        sims: float64 similarity of each removed document to its kept one.
        threshold: the run's threshold.
        bins: histogram bins over ``[0, 1]``.

    Returns:
        ``removed``, ``below_threshold`` (count and ``below_threshold_share``),
        ``min``, ``p1``, ``p5``, ``median`` (None without removals) and
        ``histogram`` (``edges`` and ``counts``).
    """
    sims = np.asarray(sims, dtype=np.float64)
    n = int(sims.size)
    below = int(np.count_nonzero(sims < threshold))
    edges = np.linspace(0.0, 1.0, bins + 1)
    counts = np.histogram(np.clip(sims, 0.0, 1.0), bins=edges)[0] if n else np.zeros(bins)
    q = (lambda p: float(np.quantile(sims, p))) if n else (lambda p: None)
    return {"removed": n, "below_threshold": below,
            "below_threshold_share": below / n if n else 0.0,
            "min": float(sims.min()) if n else None, "p1": q(0.01), "p5": q(0.05),
            "median": q(0.5),
            "histogram": {"edges": [round(float(e), 4) for e in edges],
                          "counts": [int(c) for c in counts]}}


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
