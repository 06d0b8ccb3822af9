"""Greedy selection over the store, range by range of ranks
(:mod:`gpu_dedup.stages.select_ranges`): the end of the ``buckets`` stage
cuts the buckets into groups and ranges; the ``select`` stage decides one
range after the other, each reading its own entries, the first members of
the buckets it touches and the texts of the documents it compares. No step
holds every bucket, every window of scores or every shingle set.

:class:`SelectStage` is part of :class:`gpu_dedup.engine.runner.Runner`.
"""
from __future__ import annotations

import dataclasses
import logging
import math

import numpy as np

from ..arrays import concat_csr, merged_pair_slices, pair_order, pairs_ascend, unique
from ..memory import process_rss
from ..stages.select import WINDOW
from ..stages.select_ranges import (RANK_BINS, RangeSelector, RangeState, heads_of,
                                    rank_bins, select_range, weighted_bounds)
from . import bucket_tasks, layout
from .bounds import bound_rows_of
from .priority import chunk_reps, keep_priority
from .records import Blocks, Documents, ScoreInputs

#: Bytes a unit of load takes while its range is decided, to size the ranges
#: from the budget. A bucket entry weighs one unit, and one more for each
#: earlier member of its bucket it is compared with (up to the window): its
#: membership and those of the earlier members its bucket brings, its
#: window of scores, the kept lists. About 70-90 bytes a unit at the
#: selection's peak (its peak less what the process held before it, over a
#: range's load), on heavily duplicated short documents (13.6 units an
#: entry) and on lightly duplicated ones (6.9): twice that here.
BYTES_PER_LOAD = 150
#: Bytes the shingle sets of a document take per byte of its text.
SET_BYTES_PER_TEXT_BYTE = 12
#: The number of the first rank: the representative of priority ``i`` has
#: rank ``RANK_BASE + i``. 0 in every run; the tests number ranks past
#: 2**32 with it, to show that no step of the selection packs a rank, or a
#: pair of them, into 32 bits (as a run of more than 2**32 documents has).
RANK_BASE = 0

log = logging.getLogger("gpu_dedup")


class SelectStage:
    """Greedy selection stages of :class:`~gpu_dedup.engine.runner.Runner`."""

    def _cut_into_ranges(self, grid: str, names: list, results: list) -> tuple[dict, list]:
        """The bucket units ``names`` (their metas ``results``) cut into rank
        ranges: their buckets routed to groups, each group made distinct and
        its entries split by range. Returns the stage's meta and its files."""
        entries = sum(int(r.get("entries", 0)) for r in results)
        ranked = self.cfg.keep == "longest"
        if ranked:                     # the priority, by tasks, into the store
            keep_priority(self)
        # by bin of ranks: the load of the buckets' entries, and the shingle
        # sets of the representatives from their own texts (about 12 bytes
        # a byte, and 16 a set)
        rank_load = self._rank_load(names, ranked)
        load = rank_load * BYTES_PER_LOAD
        # (and each one's bound row, which long texts make wide)
        row = 4.0 * self.blocks.blocks[0]["bound_words"] \
            if self.bound_rows_stored and self.blocks.blocks else 0.0
        sets = self._rank_text(ranked) * SET_BYTES_PER_TEXT_BYTE \
            + np.diff(rank_bins(self.R)) * (16.0 + row)
        # a range's load fits a task, beside what this process holds already
        # (the interpreter, its libraries, the run's state) and the sets its
        # scoring shares when its tasks run in this process: on a disk store
        # those of its first documents that fit a quarter of the budget (the
        # others are built by the batches that read them); in memory, every
        # one of them, so that the ranges' own sets must each fit that
        # quarter. Tasks in other processes share sets a task saved in the
        # store, which this process does not hold.
        budget = self.plan.budget
        shared = min(float(sets.sum()), budget / 4) if self.ex.shared_memory else 0.0
        self.release()
        held = process_rss()
        room = max(min(self.plan.task_bytes, budget - held) - shared, budget / 8)
        ranges = max(1, math.ceil(float(load.sum()) / room))
        if self.store.kind == "memory":
            ranges = max(ranges, math.ceil(float(sets.sum()) / (budget / 4)))
        log.info("selection: %d ranges for %d bucket entries (%.0f MB of load) and shingle "
                 "sets of %.0f MB (%.0f MB shared), %.0f MB a range", ranges, entries,
                 load.sum() / 1e6, sets.sum() / 1e6, shared / 1e6, room / 1e6)
        base = int(RANK_BASE)
        bounds = weighted_bounds(self.R, ranges, load + sets) + base
        folder = layout.ranges_folder(grid, bounds.size - 1)
        b = bounds.tolist()
        routes = [{"name": layout.route_unit(folder, i), "source": n, "bounds": b,
                   "ranked": ranked, "base": base} for i, n in enumerate(names)]
        routed = self._map("buckets", bucket_tasks.task_route, routes)
        groups = sorted({g for r in routed for g in r["groups"]})
        items = [{"name": layout.bucket_group(folder, g), "group": g, "bounds": b,
                  "routes": [u["name"] for u, r in zip(routes, routed) if g in r["groups"]]}
                 for g in groups]
        made = self._map("buckets", bucket_tasks.task_group, items)
        cut = [{"name": it["name"], "buckets": r["buckets"], "entries": r["entries"],
                "ranges": r["ranges"]} for it, r in zip(items, made)]
        files = [f for c in cut for f in layout.files(c["name"], (layout.OFF, layout.MEMBERS))]
        files += [layout.group_entries(c["name"], k) for c in cut for k in c["ranges"]]
        if ranked:
            files += [layout.POS_RANK, layout.POS_OF_RANK, layout.BEST]
        meta = {"ranges": bounds.size - 1, "bounds": b, "rank_base": base, "groups": cut,
                "buckets": sum(c["buckets"] for c in cut),
                "bucket_entries": sum(c["entries"] for c in cut),
                # the pairs of the buckets' windows (a pair in several counted in each):
                # the load less the one each entry weighs itself
                "window_pairs": max(0, round(float(rank_load.sum()) - entries))}
        return meta, files

    def _rank_text(self, ranked: bool) -> np.ndarray:
        """The bytes of text of the representatives in each bin of ranks
        (:data:`RANK_BINS`), counted by tasks over the chunks."""
        g = chunk_reps(self)
        items = [{"key": c["key"], "d0": int(self.doc_starts[i]), "g0": int(g[i]),
                  "g1": int(g[i + 1]), "ranked": ranked, "n": self.R, "bins": RANK_BINS}
                 for i, c in enumerate(self.chunks) if g[i + 1] > g[i]]
        got = self._map("buckets", bucket_tasks.task_rank_text, items)
        return np.asarray(got, dtype=np.float64).reshape(len(items), -1).sum(axis=0) \
            if items else np.zeros(RANK_BINS)

    def _rank_load(self, names: list, ranked: bool) -> np.ndarray:
        """The load of the buckets' entries in each bin of ranks
        (:data:`RANK_BINS`), counted by tasks over the bucket units
        ``names``: the ranges are cut where it is even. Ranges of equal
        numbers of ranks would not be: with keep longest the fullest copies
        of a template come first and bring the largest buckets."""
        width = WINDOW * int(self.cfg.bucket_limit)
        loads = self._map("buckets", bucket_tasks.task_rank_counts,
                          [{"source": n, "ranked": ranked, "n": self.R, "bins": RANK_BINS,
                            "window": width} for n in names])
        return np.asarray(loads, dtype=np.float64).reshape(len(names), -1).sum(axis=0) \
            if names else np.zeros(RANK_BINS)

    def _select_in_ranges(self, docs: Documents, blocks: Blocks) -> dict:
        """The greedy rule over the representatives, range by range."""
        cfg = self.cfg
        st = self.store
        meta = self.buckets_meta
        ranked = cfg.keep == "longest"
        # the representative of each rank (mapped, not read in) and the
        # document each group keeps, copied a slice at a time
        pos_of_rank = st.load_npy(layout.POS_OF_RANK, mmap=True) if ranked else None
        st.concat_npy(layout.selected("best"), [layout.BEST if ranked else layout.exact("reps")],
                      np.int64)
        groups = meta["groups"]
        bounds = np.asarray(meta["bounds"], dtype=np.int64)
        rank0 = int(meta.get("rank_base", 0))
        base = np.zeros(len(groups) + 1, dtype=np.int64)
        np.cumsum([int(g["buckets"]) for g in groups], out=base[1:])
        fixed = int(np.searchsorted(self.reps, self.C)) if self.C else 0
        selector = RangeSelector(self.R, int(cfg.bucket_limit),
                                 StoreRangeState(st, bounds, int(cfg.bucket_limit)),
                                 rank0 + fixed)
        width = WINDOW * int(cfg.bucket_limit)

        def heads(buckets):
            gi = np.searchsorted(base, buckets, side="right") - 1
            parts = []
            for i in unique(gi):
                g = groups[int(i)]["name"]
                off = st.load_npy(layout.file(g, layout.OFF), mmap=True)
                mem = st.load_npy(layout.file(g, layout.MEMBERS), mmap=True)
                parts.append(heads_of(off, mem, buckets[gi == i] - base[i], width))
                del off, mem
            return concat_csr(parts)

        floor = float(cfg.threshold) if cfg.verify else 0.0
        results, ranges_run, calls = [], [], 0
        for k in range(bounds.size - 1):
            parts = []
            for i, g in enumerate(groups):
                if k in g["ranges"]:
                    e = np.array(st.load_npy(layout.group_entries(g["name"], k)))
                    e[0] += base[i]
                    parts.append(e)
            if not parts:
                continue
            ranges_run.append(k)
            entries = np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]
            del parts
            held = []

            def scorer(ranks, k=k, held=held):
                own = self._own_positions(ranks, int(bounds[k]), pos_of_rank, rank0)
                score = self._scorer(layout.range_batches(k), "select",
                                     ScoreInputs(docs, blocks), floor,
                                     share=lambda pos, own=own, k=k: self._shared_sets(
                                         np.intersect1d(pos, own, assume_unique=True),
                                         layout.shared_sets(layout.range_batches(k))))
                held.append(score)

                def score_ranks(pairs):
                    u, v = self._at(pairs[0], pos_of_rank, rank0), \
                        self._at(pairs[1], pos_of_rank, rank0)
                    if pos_of_rank is None:      # ranks are positions, in order
                        return score(np.stack([u, v]))
                    return score(np.stack([np.minimum(u, v), np.maximum(u, v)]))
                if floor and self.bound_rows_stored:
                    # the bound rows of every document the range reads, by rank
                    score_ranks.bounds = (bound_rows_of(st, blocks,
                                                        self._at(ranks, pos_of_rank, rank0)),
                                          floor)
                return score_ranks

            res = select_range(selector, k, int(bounds[k]), entries, heads, scorer,
                               float(cfg.threshold), accept_all=not cfg.verify,
                               select=self.be.select)
            if not pairs_ascend(res.pair_a, res.pair_b):
                raise RuntimeError(f"range {k}: its similar pairs are not sorted and distinct")
            for name in layout.RANGE_ARRAYS:       # kept in the store, not here
                if name != "removed":               # saved by the state already
                    st.save_npy(layout.range_result(k, name), getattr(res, name))
            results.append(dataclasses.replace(res, **{n: None for n in layout.RANGE_ARRAYS}))
            del res
            for score in held:
                calls += score.calls[0]
                score.release()
            del entries, held
            self.release(collect=False)   # the range's arrays, back to the system
        return self._save_selection(dict(zip(ranges_run, results)), bounds, pos_of_rank,
                                    calls, rank0)

    def _by_first_range(self, ran: list, bounds: np.ndarray, shift: int = 0):
        """The pairs of the ranges ``ran`` (``(pair_a, pair_b, pair_scores)``,
        their ranks less ``shift``: positions), in the order of their pairs
        (ranks, ``keep="first"``), one range of first members after the
        other. A range's pairs are sorted
        and their later members in the range, so range ``j``'s first members
        are in slices of the pairs of ranges ``j`` and later, merged a slice
        of rows at a time (the first documents of large clusters have many)."""
        st = self.store
        # each range's pairs, read a slice at a time (nothing mapped), and
        # where every range of first members starts in them
        cols = {k: [st.load_npy(layout.range_result(k, c), mmap="read")
                    for c in ("pair_a", "pair_b", "pair_scores")] for k in ran}
        cuts = {k: [int(x) for x in cols[k][0].searchsorted(bounds)] for k in ran}
        for j in range(bounds.size - 1):
            sources = [tuple(c[cuts[k][j]:cuts[k][j + 1]] for c in cols[k])
                       for k in ran if k >= j and cuts[k][j + 1] > cuts[k][j]]
            for a, b, s in merged_pair_slices(sources, self.plan.pair_slice_rows):
                yield a - shift, b - shift, s

    @staticmethod
    def _at(ranks: np.ndarray, pos_of_rank, rank0: int) -> np.ndarray:
        """The representatives' positions of ``ranks`` (numbered from
        ``rank0``)."""
        ranks = np.asarray(ranks, dtype=np.int64) - rank0
        return ranks if pos_of_rank is None else pos_of_rank[ranks]

    def _own_positions(self, ranks: np.ndarray, r0: int, pos_of_rank,
                       rank0: int = 0) -> np.ndarray:
        """The positions (sorted) of the range's own documents among the
        sorted ``ranks`` it reads (ranks from ``r0``). Their scoring shares
        the shingle sets of those of them in its first pairs scored exactly
        (on a disk store, those of the first that fit a quarter of the
        budget: the ranges are sized beside that much), built once for the
        range; the earlier documents it reads
        (first members and kept members of its buckets), and its own
        documents first met later, are built by the scoring batches, each
        batch those of a few neighbouring chunks and each document by one
        batch of a call (:meth:`~gpu_dedup.engine.runner.Runner._score_batches`)."""
        cut = int(np.searchsorted(ranks, r0))
        own = self._at(ranks[cut:], pos_of_rank, rank0)
        return own if pos_of_rank is None else np.sort(own)

    def _save_selection(self, results: dict, bounds: np.ndarray, pos_of_rank,
                        calls: int, rank0: int = 0) -> dict:
        """What the ranges decided (``results``: each range's counts, its
        arrays in the store), saved by representative position: each
        representative's duplicate and similarity written range after range
        (for ``keep="first"``, ranks are positions), never an array over
        every representative; for ``keep="longest"`` routed to the chunks
        of the representatives first (:meth:`_save_ranked`). Ranks are
        numbered from ``rank0``; what is saved is numbered by
        representative, from 0."""
        st = self.store

        def dense():
            for k in range(bounds.size - 1):
                r0, r1 = int(bounds[k]), int(bounds[k + 1])
                dup, sim, kept = np.full(r1 - r0, -1, np.int64), np.full(r1 - r0, np.nan), \
                    np.ones(r1 - r0, bool)
                if k in results:
                    removed = st.load_npy(layout.range_result(k, "removed")) - r0
                    if removed.size and (removed[0] < 0 or removed[-1] >= r1 - r0):
                        raise RuntimeError(f"range {k} decided ranks outside {r0}..{r1 - 1}")
                    dup[removed] = st.load_npy(layout.range_result(k, "duplicate_of")) - rank0
                    sim[removed] = st.load_npy(layout.range_result(k, "similarity"))
                    kept[removed] = False
                yield dup, sim, kept

        ran = sorted(results)
        if pos_of_rank is None:
            st.save_npy_columns([layout.selected(n) for n in ("rep_dup", "rep_sim", "rep_kept")],
                                (np.int64, np.float64, bool), dense(), self.R)
            # the accepted pairs sorted, a range of first members at a time: a
            # range's pairs are sorted, and those of each first range a slice
            verified = sum(int(st.load_npy(layout.range_result(k, "pair_a"),
                                           mmap="read").shape[0]) for k in ran)
            st.save_npy_columns([layout.selected(n) for n in ("accepted_a", "accepted_b",
                                                               "scores")],
                                (np.int64, np.int64, np.float64),
                                self._by_first_range(ran, bounds, rank0), verified)
        else:
            verified = self._save_ranked(ran, bounds, pos_of_rank, rank0)
        st.spent(layout.range_result(k, name) for k in ran for name in layout.RANGE_ARRAYS)
        done = list(results.values())
        where = next((r.where for r in done if r.where is not None), None)
        # the rounds and the pairs actually scored depend on how the rule was
        # computed (passes on a CPU, rounds on a device, ranges): work, not results
        return {"candidates": sum(int(r.comparisons) for r in done), "rounds": None,
                "skipped": sum(int(r.skipped) for r in done), "unresolved": 0,
                "verified": verified,
                "units": max(1, calls), "selection": where or "host",
                "selection_rounds": sum(int(r.rounds) for r in done),
                "selection_scored": sum(int(r.scored) for r in done),
                "selection_bounded": sum(int(r.bounded) for r in done),
                "ranges": bounds.size - 1}


    def _save_ranked(self, ran: list, bounds: np.ndarray, pos_of_rank, rank0: int) -> int:
        """keep="longest": what the ranges ``ran`` decided, by representative
        number. Each range's removed ranks and similar pairs become
        representatives (``pos_of_rank``, mapped) and are routed to the chunk
        of their representative (of a pair's first one); then each chunk's
        slice of every array is written, chunk after chunk. No step holds
        more than one range's or one chunk's. Returns the pairs written."""
        st = self.store
        g = chunk_reps(self)
        C = g.size - 1
        spills: dict = {}
        pairs = 0
        for k in ran:
            def load(name, k=k):
                return st.load_npy(layout.range_result(k, name))

            rep = self._at(load("removed"), pos_of_rank, rank0)
            dup = self._at(load("duplicate_of"), pos_of_rank, rank0)
            a = self._at(load("pair_a"), pos_of_rank, rank0)
            b = self._at(load("pair_b"), pos_of_rank, rank0)
            a, b = np.minimum(a, b), np.maximum(a, b)
            pairs += int(a.size)
            for name, cols in (("removed", (rep, dup, load("similarity").view(np.int64))),
                               ("pairs", (a, b, load("pair_scores").view(np.int64)))):
                chunk = np.searchsorted(g, cols[0], side="right") - 1
                for c in np.flatnonzero(np.bincount(chunk, minlength=C)):
                    at = np.flatnonzero(chunk == c)
                    if name == "pairs":             # sorted, to be merged with the others
                        at = at[pair_order(cols[0][at], cols[1][at])]
                    st.save_npy(layout.ranked_spill(k, int(c), name),
                                np.stack([x[at] for x in cols]))
                    spills.setdefault((int(c), name), []).append(k)
            del rep, dup, a, b

        def spilled(c, name):
            parts = [st.load_npy(layout.ranked_spill(k, c, name))
                     for k in spills.get((c, name), [])]
            return np.concatenate(parts, axis=1) if parts else np.zeros((3, 0), np.int64)

        def by_rep():
            for c in range(C):
                n = int(g[c + 1] - g[c])
                kept, dup, sim = np.ones(n, bool), np.full(n, -1, np.int64), np.full(n, np.nan)
                rep, d, s = spilled(c, "removed")
                kept[rep - g[c]], dup[rep - g[c]], sim[rep - g[c]] = False, d, s.view(np.float64)
                yield kept, dup, sim

        def by_pair():
            for c in range(C):         # each chunk's sorted parts merged a slice at a time
                parts = [st.load_npy(layout.ranked_spill(k, c, "pairs"), mmap="read")
                         for k in spills.get((c, "pairs"), [])]
                for a, b, s in merged_pair_slices([tuple(p) for p in parts],
                                                  self.plan.pair_slice_rows):
                    yield a, b, s.view(np.float64)

        st.save_npy_columns([layout.selected(n) for n in ("rep_kept", "rep_dup", "rep_sim")],
                            (bool, np.int64, np.float64), by_rep(), self.R)
        st.save_npy_columns([layout.selected(n) for n in ("accepted_a", "accepted_b", "scores")],
                            (np.int64, np.int64, np.float64), by_pair(), pairs)
        for (c, name), ks in spills.items():
            for k in ks:
                st.discard(layout.ranked_spill(k, c, name))
        return pairs


class StoreRangeState(RangeState):
    """The state ranges pass on, kept in the run's store: each message a
    file, deleted once read; the removed ranks of a range are its result's."""

    def __init__(self, store, bounds: np.ndarray, limit: int):
        super().__init__(bounds, limit)
        self.store = store

    @staticmethod
    def _path(key: str) -> str:
        kind, *ids = key.split("/")
        if kind == "removed":
            return layout.range_result(int(ids[0]), "removed")
        return layout.range_carry(int(ids[0]), int(ids[1]))

    def put(self, key: str, arr: np.ndarray) -> None:
        self.store.save_npy(self._path(key), arr)

    def get(self, key: str) -> np.ndarray:
        return self.store.load_npy(self._path(key), mmap=key.startswith("removed/"))

    def drop(self, key: str) -> None:
        self.store.discard(self._path(key))
