"""The last stage, ``assign``: per document, kept or not, the kept document it
duplicates and the similarity to it, its cluster; and the pairs found. Each
chunk of documents is a unit of work of its own
(:mod:`gpu_dedup.engine.assign_tasks`) that writes its arrays
(:func:`gpu_dedup.engine.layout.final_file` of each name of :data:`FINAL`);
the stage's numbers are merged from the chunks' and from ranges of cluster
labels, so that no step holds an array over every document (connected
components label the documents that have a pair, in one step: the others
are clusters of their own).

:class:`AssignStage` is part of :class:`gpu_dedup.engine.runner.Runner`.
"""
from __future__ import annotations

import numpy as np

from ..stages.components import choose_kept, cluster_ids
from ..stages.lsh import pack_edges, unpack_edges
from ..stages.select import chaining_summary
from ..stages.summaries import add_counts, merge_similarity, top_clusters, values_in_bins
from ..arrays import pair_order, unique
from . import layout, tasks
from .assign_tasks import TOP, save_chunk, task_assign, task_cluster_sizes, whole_pairs
from .records import ScoreInputs

#: The per-document and per-pair result arrays (:func:`~gpu_dedup.engine.layout.final_file`).
FINAL = layout.FINAL


class AssignStage:
    """The ``assign`` stage of :class:`~gpu_dedup.engine.runner.Runner`."""

    def assign(self) -> None:
        """Per document: kept, the kept document it duplicates and the
        similarity to it, its cluster; and the verified pairs."""
        meta = self._stage_done("assign")
        if meta is None:
            items = [{"key": c["key"], "d0": int(self.doc_starts[ci]),
                      "d1": int(self.doc_starts[ci + 1]), "context": int(self.C)}
                     for ci, c in enumerate(self.chunks)]
            chaining = None
            if self.cfg.cluster == "greedy":
                parts = self._map("assign", task_assign, items)
            else:
                parts, chaining = self._assign_components(items)
            meta = self._assign_meta(items, parts)
            if chaining is not None:
                meta["chaining"] = chaining
            self.store.mark_done(layout.stage("assign"), meta,
                                 units=[layout.assign_chunk(it["key"]) for it in items])
            self.store.spent(layout.selected(n) for n in ("accepted_a", "accepted_b", "scores"))
        self.assign_meta = meta

    def _assign_meta(self, items: list, parts: list) -> dict:
        """The stage's numbers, merged from the chunks' and from ranges of
        cluster labels (each chunk's documents' labels)."""
        threshold = float(self.cfg.threshold)

        def values_in(bins):
            found = [values_in_bins(r["similarity"][r["removed"]], bins)
                     for _, r in self.chunk_results(("kept", "similarity"))]
            return np.concatenate(found) if found else np.zeros(0)

        removed_similarity = merge_similarity([p["removed_similarity"] for p in parts],
                                              threshold, values_in)
        keys = [it["key"] for it in items]
        ranges = [{"lo": it["d0"], "hi": it["d1"], "sources": keys} for it in items]
        sizes = self._map("assign", task_cluster_sizes, ranges)
        bins = np.zeros(0, np.int64)
        for s in sizes:
            bins = add_counts(bins, s["bins"])
        singletons = sum(p["roots"] for p in parts) - sum(s["joined"] for s in sizes)
        bins = add_counts(bins, [singletons])
        labels = np.array([x for s in sizes for x in s["top"][0]], dtype=np.int64)
        tops = np.array([x for s in sizes for x in s["top"][1]], dtype=np.int64)
        top_l, top_s = top_clusters(labels, tops, TOP)
        fuzzy_mins = [p["fuzzy_min"] for p in parts if p["fuzzy_min"] is not None]
        n_kept = sum(p["kept"] for p in parts)
        return {"kept": n_kept, "clusters": n_kept,
                "duplicate_clusters": sum(s["with_duplicates"] for s in sizes),
                "exact_removed": sum(p["exact_removed"] for p in parts),
                "exact_edges": sum(p["exact_edges"] for p in parts),
                "removed_similarity": removed_similarity,
                "cluster_sizes": [int(b) for b in bins],
                "largest": [[int(x) for x in top_l], [int(x) for x in top_s]],
                "pairs": {"exact": sum(p["all_exact_edges"] for p in parts),
                          "fuzzy": sum(p["fuzzy_edges"] for p in parts),
                          "fuzzy_min": min(fuzzy_mins) if fuzzy_mins else None},
                "units": len(items) + len(ranges)}

    def _assign_components(self, items: list):
        """Connected components of the pairs, labelled over the documents
        that have a pair (the others are clusters of their own, kept); each
        chunk's part then saved as :func:`task_assign` would. What this
        holds is a few numbers per document with a pair, not per document."""
        st = self.store
        members = st.load_npy(layout.exact("members"))
        member_rep = st.load_npy(layout.exact("member_rep"))
        ea, eb, sim, is_exact = self._pairs(members, member_rep)
        touched = unique(np.concatenate([ea, eb]))    # sorted documents with a pair
        rep_doc = touched.copy()                       # each one's identical-text group
        rep_doc[np.searchsorted(touched, members)] = member_rep
        del members, member_rep
        kept, cluster = self._select_components(touched, ea, eb)
        dup, dsim = self._duplicate_of_components(touched, kept, cluster, rep_doc)
        at_dup = np.searchsorted(touched, np.maximum(dup, 0))
        exact = ~kept & (rep_doc == rep_doc[np.minimum(at_dup, touched.size - 1)])
        removed = ~kept & (touched >= self.C)
        chaining = chaining_summary(cluster, kept, dsim[removed], float(self.cfg.threshold))
        del rep_doc, removed, at_dup
        cut = np.searchsorted(ea, self.doc_starts)
        at = np.searchsorted(touched, self.doc_starts)
        parts = []
        for ci, it in enumerate(items):
            d0, d1 = it["d0"], it["d1"]
            p0, p1 = int(cut[ci]), int(cut[ci + 1])
            t0, t1 = int(at[ci]), int(at[ci + 1])
            own = touched[t0:t1] - d0
            c_cluster = np.arange(d0, d1, dtype=np.int64)
            c_kept = np.ones(d1 - d0, dtype=bool)
            c_dup = np.full(d1 - d0, -1, np.int64)
            c_dsim = np.full(d1 - d0, np.nan)
            c_exact = np.zeros(d1 - d0, dtype=bool)
            for full, part in ((c_cluster, cluster), (c_kept, kept), (c_dup, dup),
                               (c_dsim, dsim), (c_exact, exact)):
                full[own] = part[t0:t1]
            parts.append(save_chunk(self.ctx, it, c_cluster, c_kept, c_dup, c_dsim, c_exact,
                                    whole_pairs(self.ctx, ea[p0:p1], eb[p0:p1], sim[p0:p1],
                                                is_exact[p0:p1])))
        self.units["assign"] = self.units.get("assign", 0) + len(items)
        return parts, chaining

    def _pairs(self, members, member_rep):
        """The exact and the accepted pairs, as document indices ``a < b``,
        sorted: ``(a, b, similarity, exact)``."""
        st = self.store
        fa = st.load_npy(layout.selected("accepted_a"))
        fb = st.load_npy(layout.selected("accepted_b"))
        scores = st.load_npy(layout.selected("scores"))
        fa = self.reps[fa]
        fb = self.reps[fb]
        ea = np.concatenate([member_rep, fa])
        eb = np.concatenate([members, fb])
        sim = np.concatenate([np.ones(members.size), scores])
        is_exact = np.concatenate([np.ones(members.size, dtype=bool),
                                   np.zeros(fa.size, dtype=bool)])
        del fa, fb, scores
        lo = np.minimum(ea, eb)
        hi = np.maximum(ea, eb)
        del ea, eb
        order = pair_order(lo, hi)
        return lo[order], hi[order], sim[order], is_exact[order]

    def _select_components(self, touched, ea, eb):
        """Connected components of the pairs over the documents ``touched``
        (sorted; every pair's two documents are among them): each one's
        kept flag and cluster (the smallest document of its component)."""
        cfg = self.cfg
        ia = np.searchsorted(touched, ea)
        ib = np.searchsorted(touched, eb)
        labels = tasks.host(self.be, self.be.components(touched.size, ia, ib))
        del ia, ib
        local = cluster_ids(labels)          # the smallest of each, as an index of touched
        del labels
        lengths = self._lengths_at(touched) if cfg.keep == "longest" else np.zeros(0)
        return choose_kept(local, lengths, cfg.keep), touched[local]

    def _duplicate_of_components(self, touched, kept, cluster, rep_doc):
        """Each removed document's (of ``touched``) cluster's kept document,
        and the similarity between the two (scored; 1 for identical texts)."""
        k = np.flatnonzero(kept)
        heads = cluster[k]                      # each cluster once, sorted with k
        order = np.argsort(heads, kind="stable")
        heads, k = heads[order], k[order]
        dup = np.where(kept, -1, touched[k[np.searchsorted(heads, cluster)]])
        dsim = np.full(touched.size, np.nan)
        r = np.flatnonzero(~kept)
        if r.size:
            pa_ = np.searchsorted(self.reps, rep_doc[np.searchsorted(touched, dup[r])])
            pb_ = np.searchsorted(self.reps, rep_doc[r])
            same = pa_ == pb_
            dsim[r[same]] = 1.0
            diff = ~same
            if diff.any():
                packed = pack_edges(np.minimum(pa_[diff], pb_[diff]),
                                    np.maximum(pa_[diff], pb_[diff]))
                u, inv = unique(packed, return_inverse=True)
                score = self._scorer(layout.ASSIGN_BATCHES, "assign",
                                     ScoreInputs(self.docs, self.blocks))
                dsim[r[diff]] = score(np.stack(unpack_edges(u)))[inv]
        return dup, dsim
