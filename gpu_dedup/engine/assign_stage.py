"""The last stage, ``assign``: per document, kept or not, the kept document it
duplicates and the similarity to it, its cluster; and the pairs found
(:func:`gpu_dedup.engine.layout.final` of each name of :data:`FINAL`).

:class:`AssignStage` is part of :class:`gpu_dedup.engine.runner.Runner`.
"""
from __future__ import annotations

import numpy as np

from ..arrays import distinct_count, unique
from ..stages.components import choose_kept, cluster_ids
from ..stages.lsh import pack_edges, unpack_edges
from ..stages.select import chaining_summary, similarity_summary
from . import layout, tasks
from .records import ScoreInputs

#: The per-document and per-pair result arrays (:func:`~gpu_dedup.engine.layout.final`).
FINAL = layout.FINAL


class AssignStage:
    """The ``assign`` stage of :class:`~gpu_dedup.engine.runner.Runner`."""

    def assign(self) -> None:
        """Per document: kept, the kept document it duplicates and the
        similarity to it, its cluster; and the verified pairs."""
        meta = self._stage_done("assign")
        st = self.store
        if meta is None:
            N = self.N
            members = st.load_npy(layout.exact("members"))
            member_rep = st.load_npy(layout.exact("member_rep"))
            rep_doc = np.arange(N, dtype=np.int64)     # each document's identical-text group
            rep_doc[members] = member_rep
            ea, eb, sim, is_exact = self._pairs(members, member_rep)
            n_exact = int(members.size)
            del members, member_rep
            if self.cfg.cluster == "greedy":
                kept, dup, dsim = self._select_greedy(rep_doc)
                cluster = np.where(kept, np.arange(N, dtype=np.int64), dup)
            else:
                kept, cluster = self._select_components(ea, eb)
                dup, dsim = self._duplicate_of_components(kept, cluster, rep_doc)
            removed = ~kept
            removed[:self.C] = False            # the context is no output
            exact = removed & (rep_doc == rep_doc[np.maximum(dup, 0)])
            exact_removed = int(np.count_nonzero(exact))
            if self.C:
                n_exact = int(np.count_nonzero(eb[is_exact] >= self.C))
            for name, arr in zip(FINAL, (cluster, kept, dup, dsim, ea, eb, sim, is_exact)):
                st.save_npy(layout.final(name), arr)
            rsim = dsim[removed]
            n_kept = int(kept[self.C:].sum())
            meta = {"kept": n_kept, "clusters": n_kept,
                    "duplicate_clusters": distinct_count(cluster[removed]),
                    "exact_removed": exact_removed, "exact_edges": n_exact,
                    "removed_similarity": similarity_summary(rsim, float(self.cfg.threshold)),
                    "units": 1}
            if self.cfg.cluster == "components":
                meta["chaining"] = chaining_summary(cluster, kept, rsim,
                                                    float(self.cfg.threshold))
            del cluster, kept, dup, dsim, ea, eb, sim, is_exact, rep_doc
            st.mark_done(layout.stage("assign"), meta, [layout.final(n) for n in FINAL])
        self.assign_meta = meta

    def _pairs(self, members, member_rep):
        """The exact and the accepted pairs, as document indices ``a < b``,
        sorted: ``(a, b, similarity, exact)``."""
        st = self.store
        fa, fb = unpack_edges(st.load_npy(layout.selected("accepted")))
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
        order = np.argsort(pack_edges(lo, hi), kind="stable")
        return lo[order], hi[order], sim[order], is_exact[order]

    def _select_greedy(self, rep_doc):
        """Documents from the representatives' selection: a surviving group
        of identical texts keeps its best document (the first, or the
        longest) and the rest name it at similarity 1; a removed group names
        the kept document its representative duplicates."""
        st = self.store
        N = self.N
        best = st.load_npy(layout.selected("best"))
        rep_kept = st.load_npy(layout.selected("rep_kept"))
        rep_dup = st.load_npy(layout.selected("rep_dup"))
        rep_sim = st.load_npy(layout.selected("rep_sim"))
        kept = np.ones(N, dtype=bool)
        dup = np.full(N, -1, np.int64)
        dsim = np.full(N, np.nan)
        in_group = np.zeros(N, dtype=bool)
        in_group[self.reps] = True
        in_group |= rep_doc != np.arange(N)
        docs = np.flatnonzero(in_group)
        g = np.searchsorted(self.reps, rep_doc[docs])
        survives = rep_kept[g]
        kept[docs] = survives & (docs == best[g])
        target = np.where(survives, best[g], best[np.maximum(rep_dup[g], 0)])
        gone = ~kept[docs]
        dup[docs[gone]] = target[gone]
        dsim[docs[gone]] = np.where(survives[gone], 1.0, rep_sim[g[gone]])
        return kept, dup, dsim

    def _select_components(self, ea, eb):
        """Connected components of the pairs, and the kept document of each."""
        cfg = self.cfg
        labels = tasks.host(self.be, self.be.components(self.N, ea, eb))
        cluster = cluster_ids(labels)
        del labels
        lengths = self._lengths() if cfg.keep == "longest" else np.zeros(0)
        return choose_kept(cluster, lengths, cfg.keep), cluster

    def _duplicate_of_components(self, kept, cluster, rep_doc):
        """Each removed document's cluster's kept document, and the
        similarity between the two (scored; 1 for identical texts)."""
        N = self.N
        k = np.flatnonzero(kept)
        kept_of = np.full(N, -1, np.int64)
        kept_of[cluster[k]] = k
        dup = np.where(kept, -1, kept_of[cluster])
        dsim = np.full(N, np.nan)
        r = np.flatnonzero(~kept)
        if r.size:
            pa_ = np.searchsorted(self.reps, rep_doc[dup[r]])
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
                dsim[r[diff]] = score(u)[inv]
        return dup, dsim
