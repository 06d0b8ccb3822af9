"""The ``assign`` stage's tasks, one unit of work a chunk of documents (or a
range of cluster labels); none reads more than its own documents and the
few earlier ones they name.

* :func:`task_assign`: greedy selection's decisions for one chunk's
  documents, from the representatives' (each group of identical texts keeps
  its best document when its representative survives, the others name it;
  a removed group names the kept document its representative duplicates),
  and the pairs whose first document is in the chunk;
* :func:`save_chunk`: what every chunk's unit writes (also from the
  components' whole arrays), and its few numbers: counts, the similarity
  summary's part, the clusters its documents join;
* :func:`task_cluster_sizes`: one range of cluster labels, gathered from
  every chunk: how many clusters with duplicates, their sizes in bins, and
  the largest of them.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from ..arrays import MappedColumn, merged_pair_slices, unique
from ..stages.summaries import similarity_part, size_counts, top_clusters
from . import layout
from .tasks import Ctx

#: The largest clusters each range of labels reports.
TOP = 20
#: The types of a chunk's pair columns (``layout.FINAL[4:]``).
PAIR_DTYPES = (np.int64, np.int64, np.float64, np.bool_)


def _slice(st, rel: str, lo: int, hi: int) -> np.ndarray:
    """Rows ``lo .. hi`` of the stored array ``rel`` (only those pages read)."""
    a = st.load_npy(rel, mmap=True)
    out = np.array(a[lo:hi])
    del a
    return out


def _take(st, rel: str, index: np.ndarray) -> np.ndarray:
    """The stored array ``rel`` at ``index`` (only those pages read)."""
    a = st.load_npy(rel, mmap=True)
    out = np.array(a[index])
    del a
    return out


def _between(st, rel: str, lo, hi) -> tuple[int, int]:
    """Where values ``lo`` and ``hi`` fall in the sorted stored array ``rel``."""
    a = st.load_npy(rel, mmap="read")
    out = a.searchsorted(np.array([lo, hi], dtype=a.dtype))
    return int(out[0]), int(out[1])


def output_removed(kept: np.ndarray, d0: int, context: int) -> np.ndarray:
    """Which documents of a chunk (its first ``d0``, its flags ``kept``) are
    removed from the output: not kept, and not of the context (the first
    ``context`` documents, an index's)."""
    removed = ~np.asarray(kept, dtype=bool)
    removed[:max(0, min(removed.size, context - d0))] = False
    return removed


def task_assign(item: dict, ctx: Ctx) -> dict:
    """Greedy selection's results for the chunk ``item['key']`` (documents
    ``d0 .. d1 - 1``); ``item['context']`` documents of an index come first."""
    st = ctx.store
    key, d0, d1 = item["key"], int(item["d0"]), int(item["d1"])
    unit = layout.assign_chunk(key)
    meta = st.done(unit)
    if meta is not None:
        return {**meta, "reused": 1}
    n = d1 - d0
    g0, g1 = _between(st, layout.exact("reps"), d0, d1)
    own = _slice(st, layout.exact("reps"), g0, g1)
    m0, m1 = _between(st, layout.exact("members"), d0, d1)
    members = _slice(st, layout.exact("members"), m0, m1)
    group = np.concatenate([np.arange(g0, g1, dtype=np.int64),
                            _slice(st, layout.exact("member_group"), m0, m1)])
    docs = np.concatenate([own, members]) - d0
    survives = _take(st, layout.selected("rep_kept"), group)
    best = _take(st, layout.selected("best"), group)
    kept = np.ones(n, dtype=bool)
    kept[docs] = survives & (docs + d0 == best)
    gone = np.flatnonzero(~kept[docs])
    lost = gone[~survives[gone]]          # groups whose representative was removed
    dup = np.full(n, -1, np.int64)
    dsim = np.full(n, np.nan)
    dup[docs[gone]] = best[gone]
    dsim[docs[gone]] = 1.0
    if lost.size:
        rep_dup = _take(st, layout.selected("rep_dup"), group[lost])
        dup[docs[lost]] = _take(st, layout.selected("best"), np.maximum(rep_dup, 0))
        dsim[docs[lost]] = _take(st, layout.selected("rep_sim"), group[lost])
    exact = np.zeros(n, dtype=bool)
    exact[docs[gone[survives[gone]]]] = True
    del docs, group, survives, best, gone, lost
    cluster = np.where(kept, np.arange(d0, d1, dtype=np.int64), dup)
    pairs = _chunk_pairs(ctx, d0, d1, g0, g1, own)
    return save_chunk(ctx, item, cluster, kept, dup, dsim, exact, pairs)


@dataclass
class ChunkPairs:
    """A chunk's pairs ``(a, b, similarity, exact)`` sorted by ``(a, b)``:
    sorted sources (tuples of those four columns, arrays or stored columns)
    merged a slice of ``cap`` rows at a time, so that no step holds them
    all (a chunk of the first copies of large clusters has many)."""
    sources: list
    cap: int

    @property
    def count(self) -> int:
        return sum(int(s[0].shape[0]) for s in self.sources)

    def slices(self):
        """The four columns in pair order, a slice at a time."""
        return merged_pair_slices(self.sources, self.cap)

    def counts(self, context: int) -> dict:
        """Exact pairs (all, and those whose second document is not of the
        context), other pairs and their smallest similarity, read a slice
        of each source at a time."""
        exact = exact_new = fuzzy = 0
        low = None
        for a, b, sim, ex in self.sources:
            n = int(a.shape[0])
            for s in range(0, n, self.cap):
                e = min(n, s + self.cap)
                px = np.asarray(ex[s:e], dtype=bool)
                exact += int(np.count_nonzero(px))
                exact_new += int(np.count_nonzero(px & (np.asarray(b[s:e]) >= context)))
                ps = np.asarray(sim[s:e], dtype=np.float64)[~px]
                fuzzy += int(ps.size)
                if ps.size:
                    m = float(ps.min())
                    low = m if low is None else min(low, m)
        return {"exact_edges": exact_new, "all_exact_edges": exact, "fuzzy_edges": fuzzy,
                "fuzzy_min": low}


def whole_pairs(ctx: Ctx, a, b, sim, exact) -> ChunkPairs:
    """Pairs held whole, sorted by ``(a, b)``, as a :class:`ChunkPairs`."""
    return ChunkPairs([(a, b, sim, exact)], ctx.plan.pair_slice_rows)


def _constant(values, value, dtype) -> MappedColumn:
    return MappedColumn(values, lambda x: np.full(np.shape(x), value, dtype))


def _chunk_pairs(ctx: Ctx, d0: int, d1: int, g0: int, g1: int, own: np.ndarray) -> ChunkPairs:
    """The exact and the accepted pairs whose first document is in
    ``d0 .. d1 - 1`` (its representatives ``own``, numbers ``g0 .. g1 - 1``),
    as two sorted sources read from the store a slice at a time (plain
    reads: pages of a map read through would stay resident): the exact
    pairs (by representative, then member) and the accepted pairs of
    representatives (in their order, which is the documents' order)."""
    st = ctx.store
    p0, p1 = _between(st, layout.exact("pair_rep"), d0, d1)
    ea = st.load_npy(layout.exact("pair_rep"), mmap="read")[p0:p1]
    eb = st.load_npy(layout.exact("pair_member"), mmap="read")[p0:p1]
    lo, hi = _between(st, layout.selected("accepted_a"), g0, g1)
    u = st.load_npy(layout.selected("accepted_a"), mmap="read")[lo:hi]
    v = st.load_npy(layout.selected("accepted_b"), mmap="read")[lo:hi]
    reps = st.load_npy(layout.exact("reps"), mmap=True)
    scores = st.load_npy(layout.selected("scores"), mmap="read")[lo:hi]
    exact = (ea, eb, _constant(ea, 1.0, np.float64), _constant(ea, True, bool))
    accepted = (MappedColumn(u, lambda x: own[x - g0]),
                MappedColumn(v, lambda x: np.asarray(reps[x], dtype=np.int64)),
                scores, _constant(u, False, bool))
    return ChunkPairs([exact, accepted], ctx.plan.pair_slice_rows)


def save_chunk(ctx: Ctx, item: dict, cluster, kept, dup, dsim, exact,
               pairs: ChunkPairs) -> dict:
    """Write one chunk's results (documents ``item['d0'] ..``; ``exact``: the
    removed ones whose kept document has their text; ``pairs``, its pairs)
    and return its numbers."""
    st = ctx.store
    unit = layout.assign_chunk(item["key"])
    d0 = int(item["d0"])
    context = int(item["context"])
    n = kept.size
    arrays = dict(zip(layout.FINAL[:4], (cluster, kept, dup, dsim)))
    own = np.arange(d0, d0 + n, dtype=np.int64)
    join = cluster != own
    targets, counts = unique(cluster[join], return_counts=True)
    removed = output_removed(kept, d0, context)
    arrays.update(zip(layout.TARGETS, (targets, counts.astype(np.int64),
                                       unique(cluster[removed]))))
    for name, arr in arrays.items():
        st.save_npy(layout.final_file(item["key"], name), arr)
    st.save_npy_columns([layout.final_file(item["key"], name) for name in layout.FINAL[4:]],
                        PAIR_DTYPES, pairs.slices(), pairs.count)
    files = [layout.final_file(item["key"], k) for k in list(arrays) + list(layout.FINAL[4:])]
    meta = {"documents": n, "roots": int(n - np.count_nonzero(join)),
            "kept": int(np.count_nonzero(kept[max(0, context - d0):])),
            "exact_removed": int(np.count_nonzero(removed & exact)),
            **pairs.counts(context),
            "targets": int(targets.size),
            "removed_similarity": similarity_part(dsim[removed], float(ctx.cfg.threshold)),
            "pid": os.getpid()}
    st.mark_done(unit, meta, files)
    return {**meta, "reused": 0}


def task_cluster_sizes(item: dict, ctx: Ctx) -> dict:
    """The clusters labelled ``lo .. hi - 1`` (``item``), gathered from the
    chunks ``item['sources']``: how many hold a removed document of the
    output, how many have members besides the labelled one, their sizes in
    bins (:func:`~gpu_dedup.stages.summaries.size_counts`), and the largest."""
    st = ctx.store
    lo, hi = int(item["lo"]), int(item["hi"])
    labels, counts, removed = [], [], []
    for key in item["sources"]:
        for name, out in (("targets", labels), ("removed_labels", removed)):
            rel = layout.final_file(key, name)
            a, b = _between(st, rel, lo, hi)
            if a == b:
                continue
            out.append(_slice(st, rel, a, b))
            if name == "targets":
                counts.append(_slice(st, layout.final_file(key, "target_counts"), a, b))
    with_dup = int(unique(np.concatenate(removed)).size) if removed else 0
    del removed
    if not labels:
        return {"with_duplicates": with_dup, "joined": 0, "bins": [], "top": [[], []]}
    ids, inv = unique(np.concatenate(labels), return_inverse=True)
    c = np.concatenate(counts)
    del labels, counts
    sizes = np.bincount(inv, weights=c, minlength=ids.size).astype(np.int64) + 1
    top_l, top_s = top_clusters(ids, sizes, TOP)
    return {"with_duplicates": with_dup, "joined": int(ids.size),
            "bins": [int(x) for x in size_counts(sizes)],
            "top": [[int(x) for x in top_l], [int(x) for x in top_s]]}
