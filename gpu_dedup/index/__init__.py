"""Deduplicate against what you already have: a persistent index.

* :func:`build` runs the usual deduplication over its inputs and keeps what
  it kept in a new index (:mod:`gpu_dedup.index.store`).
* :func:`add` runs its inputs against the index (:func:`context_for`) and
  appends what survives: deduplicated against the index and within itself.
* :func:`run_against` (``run --against DIR``; :mod:`gpu_dedup.index.against`)
  deduplicates a corpus against indexes: the indexed documents that share a
  band key with it are read back and put before it, kept already
  (``greedy_select(fixed=...)``), so the result equals one run over the
  indexed corpus followed by the input, restricted to the input's documents.
  The pipeline knows them only as documents that come first
  (:class:`gpu_dedup.pipeline.Prior`).

An id names one document across an index and the inputs run against it: an
input document whose id is an indexed id is refused (exit status 2, naming
the id, the input line and the index) unless its text is the indexed text
too; then it is that document, already indexed (a run removes it as a
duplicate of itself in the index, ``duplicate_of_index`` naming the index,
and an add does not add it again).

Writers hold the index's lock (:mod:`gpu_dedup.index.lock`) from reading
the index to listing their part, so adds run one after the other whatever
their start.

Every step is the engine's own run; the index adds only the band keys it
stores, computed by the same stage functions on the run's own backend
(:mod:`gpu_dedup.index.keys`): ``--device`` chooses it for both.
"""
from __future__ import annotations

import os
import shutil
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..config import Config
from .against import check_ids, context_for, query_config, run_against, same_ids
from .keys import check_mode, keys_of
from .lock import writer_lock
from .store import SIMILARITY_FIELDS, BadIndex, Index
from .windows import window_keys

__all__ = ["Index", "BadIndex", "SIMILARITY_FIELDS", "add", "build", "check_ids",
           "check_mode", "context_for", "info", "keys_of", "query_config", "run_against",
           "same_ids"]


def _chosen(run_kw: dict) -> dict:
    """``run_kw`` with the backend chosen as ``run`` chooses it (``device``
    and ``gpu_memory``, or the ``backend`` given), so that the keys an index
    stores are computed on the backend the run used."""
    from ..shell import choose_backend
    kw = dict(run_kw)
    be, line = choose_backend(kw.get("device", "cpu"), kw.get("gpu_memory"), kw.get("backend"))
    kw["backend"], kw["device_line"] = be, kw.get("device_line") or line
    return kw


def _staging(near: str) -> str:
    parent = os.path.dirname(os.path.abspath(near))
    os.makedirs(parent, exist_ok=True)
    return tempfile.mkdtemp(prefix=".gpu-dedup-index-", dir=parent)


#: Documents whose keys and windows are computed at a time while ingesting.
INGEST_BATCH = 1 << 16


def _ingest(idx: Index, out: str, report: dict, cfg: Config, text_field: str,
            inputs: list[str], held, backend=None) -> dict | None:
    """Append the kept documents of the finished run in ``out`` (its
    clusters.parquet for the ids, its data/ for the original texts), batch by
    batch, except those already indexed under their id (a text without
    shingles is nobody's duplicate, so the run keeps it); None when it adds
    nothing. ``held``: the index's writer lock."""
    from ..io.sources import read_shard
    cl = pq.read_table(os.path.join(out, "clusters.parquet"), columns=["id", "kept"])
    kept = cl.column("kept").to_numpy(zero_copy_only=False).astype(bool)
    ids = cl.column("id").combine_chunks().filter(pa.array(kept))
    del cl
    from ..io.fs import is_url
    part = idx.part_writer([p if is_url(p) else os.path.abspath(p) for p in inputs], held)
    fresh = np.ones(len(ids), bool)
    fresh[same_ids(idx, ids)[0]] = False
    try:
        done = 0
        for sh in report["inputs"]:
            texts = read_shard(os.path.join(out, sh["output"]), text_field, None).texts
            for s in range(0, len(texts), INGEST_BATCH):
                t = texts.slice(s, INGEST_BATCH).cast(pa.large_string())
                if done + len(t) > len(ids):
                    raise BadIndex(f"{out}: more kept records read back than kept ids")
                mine = ids.slice(done, len(t))
                new = fresh[done:done + len(t)]
                done += len(t)
                if not new.all():
                    t, mine = t.filter(pa.array(new)), mine.filter(pa.array(new))
                if not len(t):
                    continue
                keys, docs = keys_of(t, cfg, backend)
                w_keys, w_docs = window_keys(t, cfg, backend)
                part.add(mine, pa.array([sh["path"]] * len(t), pa.string()),
                         t, keys, docs, w_keys, w_docs)
        if done != len(ids):
            raise BadIndex(f"{out}: {done:,} kept records read back for {len(ids):,} kept ids")
        return part.commit()
    except BaseException:
        part.abort()
        raise


def build(inputs, index: str, config: Config | None = None, *, text_field: str = "text",
          id_field: str | None = "id", **run_kw) -> dict:
    """A new index of the documents a run over ``inputs`` keeps.

    Returns the run's report, with ``index`` (:meth:`Index.info`).
    """
    from .remote import local_index
    with local_index(index, write=True, create=True) as local:
        report = _build(inputs, local, config, text_field=text_field, id_field=id_field,
                        **run_kw)
    return report


def _build(inputs, index: str, config: Config | None = None, *, text_field: str = "text",
           id_field: str | None = "id", **run_kw) -> dict:
    from .. import pipeline
    cfg = (config or Config()).resolved()
    check_mode(cfg, "an index")
    if os.path.exists(index) and (not os.path.isdir(index) or os.listdir(index)):
        raise BadIndex(f"{index}: already exists and is not an empty folder; choose a new "
                          f"folder, or add to an index with `gpu-dedup index add`")
    run_kw = _chosen(run_kw)
    tmp = _staging(index)
    try:
        out = os.path.join(tmp, "run")
        report = pipeline.run(inputs, out, cfg, text_field=text_field, id_field=id_field,
                              html=False, **run_kw)
        # built whole beside its place, then moved there in one rename
        staged = os.path.join(tmp, "index")
        idx = Index.create(staged, cfg)
        with writer_lock(staged) as held:
            _ingest(idx, out, report, cfg, text_field, [str(x) for x in inputs], held,
                    run_kw.get("backend"))
        try:
            os.rename(staged, index)        # one build of a folder wins; it is never mixed
        except OSError:
            if not os.path.exists(index) or (os.path.isdir(index) and not os.listdir(index)):
                raise
            raise BadIndex(f"{index}: already exists and is not an empty folder (built "
                           f"meanwhile); choose a new folder, or add to an index with "
                           f"`gpu-dedup index add`") from None
        report["index"] = Index(index).info()
        return report
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def add(inputs, index: str, *, text_field: str = "text", id_field: str | None = "id",
        **run_kw) -> dict:
    """Append the documents of ``inputs`` that survive a run against the
    index (and within themselves); adding the same input again adds nothing.

    Returns the run's report, with ``index`` and ``added``.
    """
    from .remote import local_index
    with local_index(index, write=True) as local:
        return _add(inputs, local, text_field=text_field, id_field=id_field, **run_kw)


def _add(inputs, index: str, *, text_field: str = "text", id_field: str | None = "id",
         **run_kw) -> dict:
    Index(index)                            # there, and an index
    with writer_lock(index) as held:
        # from here to the listing of the part, no other writer changes it
        idx = Index(index)
        cfg = idx.config()
        run_kw = _chosen(run_kw)
        tmp = _staging(index)
        try:
            out = os.path.join(tmp, "run")
            report = run_against(inputs, out, cfg, against=[index], text_field=text_field,
                                 id_field=id_field, html=False, **run_kw)
            part = _ingest(Index(index), out, report, cfg, text_field,
                           [str(x) for x in inputs], held, run_kw.get("backend"))
            report["added"] = 0 if part is None else part["docs"]
            report["index"] = Index(index).info()
            return report
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def info(index: str) -> dict:
    """What the index holds: documents, parts, options."""
    from .remote import local_index
    with local_index(index, meta_only=True) as local:
        return Index(local).info()
