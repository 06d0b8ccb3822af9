"""Semantic deduplication as tasks over partitions, run by the engine.

The same store, executors and read units as near-duplicate detection; the
stages:

1. ``read``, per read unit: the original texts, ids and locations (the
   substring runner's reading, :func:`gpu_dedup.engine.substr.task_prepare`).
2. ``embed``, per chunk: each document's embedding (float32, L2-normalised,
   :mod:`gpu_dedup.semantic.embed`) and, for ``keep="longest"``, its length
   in code points. A completed chunk is reused by a rerun.
3. ``select``: the greedy rule over the embeddings
   (:func:`gpu_dedup.semantic.search.semantic_select`): in keep priority, a
   document is removed when its cosine to a kept candidate reaches the
   threshold, and it names the most similar one. Each chunk's results are
   saved as the near-duplicate runner's are (``layout.final_file``), so the
   outputs are written by the same code (:class:`RunOutputs`).

Memory: the ``select`` stage reads every chunk's embeddings into this
process (4 bytes a dimension a document: 1 KiB a document at 256
dimensions) and holds the kept documents' rows while it decides; the embed
tasks hold one chunk's texts and embeddings.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from ..kernels import cpu as cpu_kernels
from ..stages.normalize import text_buffers
from . import layout
from .base import RunnerBase
from .outputs import RunOutputs
from .records import Documents
from .substr import task_prepare
from .tasks import Ctx, backend_of

#: The peak memory of an in-memory run per input byte, and the share of a
#: task's budget a chunk's input bytes may take (an embedding of 256 float32
#: is 1 KiB, several times a short document's text).
MEMORY_PER_BYTE = 48
CHUNK_SHARE = 48

#: ``auto`` takes exact search while its products stay under this many
#: multiply-adds (n x n x dimension): about a minute on two CPU cores; on a
#: GPU, a hundred times more.
EXACT_FLOPS = {"cpu": 2.5e12, "gpu": 2.5e14}


def resolve_search(search: str, n: int, dim: int, device: str) -> str:
    """``auto``: exact search while ``n x n x dim`` stays under the device's
    bound (:data:`EXACT_FLOPS`), k-means beyond."""
    if search != "auto":
        return search
    bound = EXACT_FLOPS["gpu" if device.startswith(("gpu", "cuda")) else "cpu"]
    return "exact" if float(n) * n * max(dim, 1) <= bound else "kmeans"


#: The embedders of this process, by model (a worker loads its own once).
_MODELS: dict = {}


def embedder_of(model: str | None):
    """The embedder of ``model`` (None: the bundled one), loaded once a process."""
    m = _MODELS.get(model)
    if m is None:
        from ..semantic.embed import load_model
        m = _MODELS[model] = load_model(model)
    return m


@dataclass(frozen=True)
class SemanticJob:
    """What a semantic run decides with; fixed for the whole run.

    Attributes:
        model: a local model folder, or None for the bundled model.
        threshold: the cosine at or above which two documents are duplicates.
        search: ``exact`` or ``kmeans`` (``auto`` is resolved before a run).
        keep: ``first`` or ``longest``.
        probe: the nearest other clusters a document is also compared in
            (``kmeans``).
        n_clusters: k-means clusters; None for the default.
        seed: k-means' seed.
        embedding_field: the field of the input records that holds each
            one's embedding, read instead of embedding the texts; None to
            embed them with ``model``.
    """

    model: str | None
    threshold: float
    search: str
    keep: str = "first"
    probe: int = 2
    n_clusters: int | None = None
    seed: int = 0
    embedding_field: str | None = None

    def key(self) -> dict:
        """What determines the stored results (the work directory's key)."""
        return {"model": self.model, "threshold": self.threshold, "search": self.search,
                "keep": self.keep, "probe": self.probe, "n_clusters": self.n_clusters,
                "seed": self.seed, "embedding_field": self.embedding_field}


def task_embed(ci: int, ctx: Ctx, job: SemanticJob, docs: Documents) -> dict:
    """The embeddings (and, for ``keep="longest"``, the lengths) of chunk ``ci``."""
    st = ctx.store
    c = docs.chunks[ci]
    unit = layout.embed_chunk(c["key"])
    meta = st.done(unit)
    if meta is not None:
        return {**meta, "reused": 1}
    texts = st.column(layout.chunk_file(c["key"], layout.TEXT))
    model = embedder_of(job.model)
    xp = getattr(backend_of(ctx), "xp", np) if model.on_device else np
    meta = _save_embeddings(ctx, job, c, model.embed(texts, xp=xp), model.name,
                            "cpu" if xp is np else "gpu")
    return {**meta, "reused": 0}


def task_embed_field(item: tuple, ctx: Ctx, job: SemanticJob, docs: Documents) -> dict:
    """The embeddings of the chunks ``item[1]`` of input shard ``item[0]``,
    read from the records' field ``job.embedding_field`` in one pass of the
    file (:mod:`gpu_dedup.semantic.fields`); reused when every chunk of the
    shard has them."""
    from ..semantic.fields import chunk_embeddings
    st = ctx.store
    chunks = [docs.chunks[ci] for ci in item[1]]
    metas = [st.done(layout.embed_chunk(c["key"])) for c in chunks]
    if all(m is not None for m in metas):
        return {"chunks": metas, "reused": 1}
    locs = [st.load_npy(layout.chunk_file(c["key"], layout.LOC)) for c in chunks]
    metas = [_save_embeddings(ctx, job, chunks[i], emb, f"field {job.embedding_field}")
             for i, emb in chunk_embeddings(chunks, locs, job.embedding_field)]
    return {"chunks": metas, "reused": 0}


def _save_embeddings(ctx: Ctx, job: SemanticJob, c: dict, emb, model: str,
                     embedded_on: str | None = None) -> dict:
    """Store chunk ``c``'s embeddings (and, for ``keep="longest"``, its
    documents' lengths), mark its unit done; its metadata (``dim`` None for
    a chunk of no documents)."""
    st = ctx.store
    unit = layout.embed_chunk(c["key"])
    emb = np.ascontiguousarray(emb, dtype=np.float32)
    if emb.shape[0] != c["n"]:
        raise RuntimeError(f"chunk {c['key']}: {emb.shape[0]} embeddings for {c['n']} documents")
    files = [layout.file(unit, layout.EMBEDDINGS)]
    st.save_npy(files[0], emb)
    if job.keep == "longest":
        off, data = text_buffers(st.column(layout.chunk_file(c["key"], layout.TEXT)))
        st.save_npy(layout.file(unit, layout.LENGTHS), cpu_kernels.codepoint_lengths(off, data))
        files.append(layout.file(unit, layout.LENGTHS))
    meta = {"model": model, "dim": int(emb.shape[1]) if emb.shape[0] else None,
            "n": int(emb.shape[0]), "where": f"{c['path']}:{c['first_line']}",
            "embedded_on": embedded_on, "pid": os.getpid()}
    st.mark_done(unit, meta, files)
    return meta


class SemanticRunner(RunnerBase, RunOutputs):
    """The stages above, over a store through an executor.

    Args:
        job: the :class:`SemanticJob`.
        The rest as for :class:`gpu_dedup.engine.base.RunnerBase`.
    """

    #: No documents come before the inputs (``run --against`` is near-duplicate only).
    C = 0
    context = None

    def __init__(self, job: SemanticJob, backend, store, executor, plan, **kw):
        super().__init__(backend, store, executor, plan, **kw)
        self.job = job
        self.embed_meta: dict = {}
        self.select_meta: dict = {}

    def run(self, units: list) -> None:
        with self.stage("read"):
            docs = self.read(units, task_prepare)
        with self.stage("embed"):
            self.embed(docs)
        with self.stage("select"):
            self.select(docs)

    def embed(self, docs: Documents) -> dict:
        meta = self._stage_done("embed")
        if meta is None:
            if self.job.embedding_field is None:
                res = self._map("embed", task_embed, list(range(len(docs.chunks))), self.job,
                                docs)
            else:                       # a task per input shard: one pass of its file
                from ..semantic.fields import check_format
                shards: dict = {}
                for ci, c in enumerate(docs.chunks):
                    check_format(c, self.job.embedding_field)
                    shards.setdefault(c["file"], []).append(ci)
                res = [m for r in self._map("embed", task_embed_field, list(shards.items()),
                                            self.job, docs) for m in r["chunks"]]
            dims = [r["dim"] for r in res if r["dim"] is not None]
            odd = next((r for r in res if r["dim"] not in (None, dims[0])), None)
            if odd is not None:
                raise InputError(f"{odd['where']}: embedding has {odd['dim']} values, not "
                                 f"{dims[0]} like the first")
            dims = set(dims)
            on = sorted({str(r["embedded_on"]) for r in res if r.get("embedded_on")})
            meta = {"model": res[0]["model"] if res else None,
                    "dim": dims.pop() if dims else 0, "units": len(res),
                    "embedded_on": "+".join(on) or None}
            self.store.mark_done(layout.stage("embed"), meta,
                                 units=[layout.embed_chunk(c["key"]) for c in docs.chunks])
        self.embed_meta = meta
        return meta

    def _read_chunk(self, c: dict, name: str, dtype, ndim: int) -> np.ndarray:
        """Array ``name`` of chunk ``c``'s embed unit, checked: a row a
        document, of ``dtype`` (and finite, for the embeddings)."""
        path = layout.file(layout.embed_chunk(c["key"]), name)
        a = self.store.load_npy(path)
        dim = self.embed_meta.get("dim")
        ok = a.dtype == dtype and a.ndim == ndim and a.shape[0] == c["n"]
        if ok and ndim == 2 and c["n"]:
            ok = a.shape[1] == dim and bool(np.isfinite(a).all())
        if not ok:
            raise RuntimeError(f"{path} holds {a.dtype} {a.shape}, not what the embed stage "
                               f"wrote for {c['n']:,} documents")
        return a

    def embeddings(self, docs: Documents) -> np.ndarray:
        """Every document's embedding, in input order (n x dim float32)."""
        dim = int(self.embed_meta.get("dim") or 0)
        out = np.empty((docs.count, dim), dtype=np.float32)
        for ci, c in enumerate(docs.chunks):
            s = int(docs.starts[ci])
            a = self._read_chunk(c, layout.EMBEDDINGS, np.float32, 2)
            if c["n"]:
                out[s:s + c["n"]] = a
        return out

    def priority(self, docs: Documents):
        """The keep priority: None for input order (``first``); for
        ``longest``, documents by length in code points, longest first,
        ties to input order."""
        if self.job.keep != "longest":
            return None
        lengths = np.concatenate([self._read_chunk(c, layout.LENGTHS, np.int64, 1)
                                  for c in docs.chunks] or [np.zeros(0, np.int64)])
        idx = np.arange(lengths.size, dtype=np.int64)
        return np.lexsort((idx, -lengths)).astype(np.int64)

    def select(self, docs: Documents) -> dict:
        """The greedy rule over the embeddings; each chunk's results saved."""
        from ..semantic.search import semantic_select
        meta = self._stage_done("select")
        if meta is None:
            job = self.job
            emb = self.embeddings(docs)
            search = resolve_search(job.search, emb.shape[0], emb.shape[1], self.be.name)
            sel = semantic_select(emb, job.threshold, self.priority(docs), search=search,
                                  n_clusters=job.n_clusters, probe=job.probe, seed=job.seed,
                                  xp=self.be.xp)
            del emb
            n = docs.count
            r = outcome(sel)
            a = r["pair_a"]
            files = []
            for ci, c in enumerate(docs.chunks):
                s, e = int(docs.starts[ci]), int(docs.starts[ci]) + c["n"]
                lo, hi = np.searchsorted(a, [s, e])
                parts = {name: r[name][s:e] for name in ("cluster", "kept", "duplicate_of",
                                                          "similarity")}
                parts.update({name: r[name][lo:hi] for name in ("pair_a", "pair_b",
                                                                "pair_similarity")},
                             pair_exact=np.ones(hi - lo, bool))
                for name in layout.FINAL:
                    path = layout.final_file(c["key"], name)
                    self.store.save_npy(path, np.ascontiguousarray(parts[name]))
                    files.append(path)
            removed = ~r["kept"]
            meta = {"search": search, "kept": int(n - removed.sum()),
                    "removed": int(removed.sum()),
                    "pairs": int(a.size), "compared": int(sel.compared),
                    "screened_out": int(sel.screened_out),
                    "clusters_kmeans": (None if sel.labels is None
                                        else int(np.unique(sel.labels).size)),
                    "removed_similarity": _quantiles(np.asarray(sel.similarity)[removed])}
            self.store.mark_done(layout.stage("select"), meta, files)
        self.select_meta = meta
        return meta


def outcome(sel) -> dict:
    """A selection's arrays by document (``cluster``: the position of the
    kept document of each one's cluster, ``kept``, ``duplicate_of``,
    ``similarity``) and its pairs as the outputs list them (``pair_a <
    pair_b``, sorted: ``pair_a``, ``pair_b``, ``pair_similarity``)."""
    kept = np.asarray(sel.kept, bool)
    dup = np.asarray(sel.duplicate_of, np.int64)
    a = np.minimum(sel.pair_a, sel.pair_b).astype(np.int64)
    b = np.maximum(sel.pair_a, sel.pair_b).astype(np.int64)
    order = np.lexsort((b, a))
    return {"cluster": np.where(kept, np.arange(kept.size, dtype=np.int64), dup),
            "kept": kept, "duplicate_of": dup,
            "similarity": np.asarray(sel.similarity, np.float64),
            "pair_a": a[order], "pair_b": b[order],
            "pair_similarity": np.asarray(sel.pair_similarity, np.float64)[order]}


def _quantiles(x: np.ndarray) -> dict:
    """Minimum, quartiles and maximum of ``x`` (None when empty)."""
    if not x.size:
        return {}
    q = np.quantile(x, [0, 0.25, 0.5, 0.75, 1])
    return dict(zip(("min", "q1", "median", "q3", "max"), (float(v) for v in q)))


__all__ = ["SemanticJob", "SemanticRunner", "task_embed", "embedder_of", "MEMORY_PER_BYTE",
           "CHUNK_SHARE"]
