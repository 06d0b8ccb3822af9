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
import math

import numpy as np

from ..arrays import concat_csr
from ..memory import release_memory
from ..stages.lsh import pack_edges, unpack_edges
from ..stages.select import WINDOW
from ..stages.select_ranges import RangeSelector, heads_of, merge, rank_bounds, select_range
from . import bucket_tasks, layout
from .records import Blocks, Documents, ScoreInputs

#: Bytes one bucket entry takes while its range is decided (memberships,
#: windows of scores, kept lists), to size the ranges from the budget.
BYTES_PER_ENTRY = 1024
#: Bytes the shingle sets of a document take per byte of its text.
SET_BYTES_PER_TEXT_BYTE = 12


class SelectStage:
    """Greedy selection stages of :class:`~gpu_dedup.engine.runner.Runner`."""

    def _cut_into_ranges(self, grid: str, names: list, results: list) -> tuple[dict, list]:
        """The bucket units ``names`` (their metas ``results``) cut into rank
        ranges: their buckets routed to groups, each group made distinct and
        its entries split by range. Returns the stage's meta and its files."""
        entries = sum(int(r.get("entries", 0)) for r in results)
        # each range's entries fit a task; the shingle sets of its own
        # documents (the representatives in it, at most) fit a quarter of
        # the budget, so that its scoring builds them once
        sets = self.R * (self.avg_text * SET_BYTES_PER_TEXT_BYTE + 16)
        ranges = max(1, math.ceil(entries * BYTES_PER_ENTRY / self.plan.task_bytes),
                     math.ceil(sets / (self.plan.budget / 4)))
        bounds = rank_bounds(self.R, ranges)
        folder = layout.ranges_folder(grid, bounds.size - 1)
        ranked = self.cfg.keep == "longest"
        if ranked:
            pos_of_rank, _ = self._priority()
            rank = np.empty(self.R, np.int64)
            rank[pos_of_rank] = np.arange(self.R, dtype=np.int64)
            del pos_of_rank
            self.store.save_npy(layout.POS_RANK, rank)
            del rank
        b = bounds.tolist()
        routes = [{"name": layout.route_unit(folder, i), "source": n, "bounds": b,
                   "ranked": ranked} for i, n in enumerate(names)]
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
        meta = {"ranges": bounds.size - 1, "bounds": b, "groups": cut,
                "buckets": sum(c["buckets"] for c in cut),
                "bucket_entries": sum(c["entries"] for c in cut)}
        return meta, files

    def _select_in_ranges(self, docs: Documents, blocks: Blocks) -> dict:
        """The greedy rule over the representatives, range by range."""
        cfg = self.cfg
        st = self.store
        meta = self.buckets_meta
        pos_of_rank, best = self._priority()
        st.save_npy(layout.selected("best"), best)
        del best
        groups = meta["groups"]
        bounds = np.asarray(meta["bounds"], dtype=np.int64)
        sizes = [np.diff(st.load_npy(layout.file(g["name"], layout.OFF))) for g in groups]
        base = np.zeros(len(groups) + 1, dtype=np.int64)
        np.cumsum([s.size for s in sizes], out=base[1:])
        fixed = int(np.searchsorted(self.reps, self.C)) if self.C else 0
        selector = RangeSelector(np.concatenate(sizes) if sizes else np.zeros(0, np.int64),
                                 self.R, int(cfg.bucket_limit), fixed)
        del sizes
        width = WINDOW * int(cfg.bucket_limit)

        def heads(buckets):
            gi = np.searchsorted(base, buckets, side="right") - 1
            parts = []
            for i in np.unique(gi):
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
                # the shingle sets of every document the range reads, or
                # (when they would not fit) of its own: tasks build the rest
                sets = self._shared_sets(self._positions(ranks, pos_of_rank))
                if sets is None:
                    own = ranks[np.searchsorted(ranks, bounds[k]):]
                    sets = self._shared_sets(self._positions(own, pos_of_rank))
                score = self._scorer(layout.range_batches(k), "select",
                                     ScoreInputs(docs, blocks, sets), floor)
                held.append(score)

                def score_ranks(packed):
                    u, v = unpack_edges(packed)
                    if pos_of_rank is not None:
                        u, v = pos_of_rank[u], pos_of_rank[v]
                    return score(pack_edges(np.minimum(u, v), np.maximum(u, v)))
                return score_ranks

            res = select_range(selector, int(bounds[k]), entries, heads, scorer,
                               float(cfg.threshold), accept_all=not cfg.verify,
                               select=self.be.select)
            for name in layout.RANGE_ARRAYS:       # kept in the store, not here
                st.save_npy(layout.range_result(k, name), getattr(res, name))
            results.append(dataclasses.replace(res, **{n: None for n in layout.RANGE_ARRAYS}))
            del res
            for score in held:
                calls += score.calls[0]
                score.release()
            del entries, held
            release_memory()            # the range's arrays, back to the system
        def load(r, k):
            return dataclasses.replace(r, **{n: st.load_npy(layout.range_result(k, n))
                                             for n in layout.RANGE_ARRAYS})
        sel = merge((load(r, k) for r, k in zip(results, ranges_run)), self.R, selector)
        del results, selector
        return self._save_selection(sel, pos_of_rank, len(bounds) - 1, calls)

    @staticmethod
    def _positions(ranks: np.ndarray, pos_of_rank) -> np.ndarray:
        """The representatives' positions of sorted ``ranks``, sorted."""
        return ranks if pos_of_rank is None else np.sort(pos_of_rank[ranks])

    def _save_selection(self, sel, pos_of_rank, ranges: int, calls: int) -> dict:
        """The selection over ranks saved by representative position."""
        st = self.store
        kept, dup, sim = sel.kept, sel.duplicate_of, sel.similarity
        u, v = unpack_edges(sel.pairs)
        if pos_of_rank is not None:
            kept_p = np.empty_like(kept)
            kept_p[pos_of_rank] = kept
            dup_p = np.full(self.R, -1, np.int64)
            dup_p[pos_of_rank] = np.where(dup >= 0, pos_of_rank[np.maximum(dup, 0)], -1)
            sim_p = np.empty_like(sim)
            sim_p[pos_of_rank] = sim
            kept, dup, sim = kept_p, dup_p, sim_p
            u, v = pos_of_rank[u], pos_of_rank[v]
        pairs = pack_edges(np.minimum(u, v), np.maximum(u, v))
        order = np.argsort(pairs, kind="stable")
        st.save_npy(layout.selected("accepted"), pairs[order])
        st.save_npy(layout.selected("scores"), sel.pair_scores[order])
        st.save_npy(layout.selected("rep_kept"), kept)
        st.save_npy(layout.selected("rep_dup"), dup)
        st.save_npy(layout.selected("rep_sim"), sim)
        # the rounds and the pairs actually scored depend on how the rule was
        # computed (passes on a CPU, rounds on a device, ranges): work, not results
        return {"candidates": sel.comparisons, "rounds": None, "skipped": sel.skipped,
                "unresolved": 0, "verified": int(pairs.size), "units": max(1, calls),
                "selection": sel.where, "selection_rounds": sel.rounds,
                "selection_scored": sel.scored, "ranges": ranges}
