"""Deduplicate against what you already have: a persistent index.

* :func:`build` runs the usual deduplication over its inputs and keeps what
  it kept in a new index (:mod:`gpu_dedup.index.store`).
* :func:`add` runs its inputs against the index (:func:`context_for`) and
  appends what survives: deduplicated against the index and within itself.
* ``pipeline.run(..., against=[DIR])`` deduplicates a corpus against indexes:
  the indexed documents that share a band key with it are read back and put
  before it, kept already (``greedy_select(fixed=...)``), so the result
  equals one run over the indexed corpus followed by the input, restricted
  to the input's documents.

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
stores, computed by the same stage functions.
"""
from __future__ import annotations

import os
import shutil
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..config import Config
from ..errors import ConfigError, InputError
from .lock import writer_lock
from .store import SIMILARITY_FIELDS, BadIndex, Index, id_keys

__all__ = ["Index", "BadIndex", "SIMILARITY_FIELDS", "add", "build", "check_mode",
           "context_for", "info", "keys_of"]

#: Separates the index number from an indexed id in the run's own ids.
_SEP = "\x1f"


def check_mode(cfg: Config, what: str) -> None:
    """An index holds documents kept in input order by the greedy rule."""
    if cfg.keep != "first":
        raise ConfigError(f"{what} keeps documents in input order: --keep {cfg.keep} cannot "
                          f"be used with an index")
    if cfg.cluster != "greedy":
        raise ConfigError(f"{what} uses the greedy selection: --cluster {cfg.cluster} cannot "
                          f"be used with an index")


def keys_of(texts: pa.Array, cfg: Config, backend=None) -> tuple[np.ndarray, np.ndarray]:
    """Band keys of ``texts`` as a run computes them: ``(keys, docs)``, the
    ``M x B`` keys of the documents ``docs`` that have shingles."""
    from ..backend import CpuBackend
    from ..engine.tasks import host
    from ..kernels.cpu import has_shingles
    from ..stages.normalize import normalize_text, text_buffers
    from ..stages.signatures import signatures
    be = backend or CpuBackend()
    cfg = cfg.resolved()
    norm = normalize_text(texts, cfg.normalize)
    off, data = text_buffers(norm)
    docs = np.flatnonzero(has_shingles(off, data, cfg.shingle == "word")).astype(np.int64)
    if not docs.size:
        return np.zeros((0, cfg.bands), np.uint64), docs
    sig, _ = signatures(be, off, data, docs, cfg)
    return np.asarray(host(be, be.band_keys(sig, cfg.bands, cfg.rows)), np.uint64), docs


def context_for(indexes: list[Index], paths: list[str], cfg: Config, folder: str, *,
                text_field: str = "text", id_field: str | None = "id",
                on_bad_record: str = "error", backend=None):
    """The indexed documents a run over ``paths`` must see: ``(path, Context,
    report)``. ``path`` is a Parquet file written in ``folder`` (None when no
    indexed document shares a band key with the inputs), to be the run's
    first input."""
    from ..engine.runner import Context
    from ..io.sources import read_corpus
    corpus = read_corpus(paths, text_field, id_field, on_bad_record)
    for idx in indexes:
        check_ids(idx, corpus)
    keys, _ = keys_of(corpus.texts, cfg, backend)
    del corpus
    ids, texts, which, report = [], [], [], []
    for k, idx in enumerate(indexes):
        ords, read = idx.lookup(keys)
        t = idx.fetch(ords)
        ids.append(t.column("id").combine_chunks())
        texts.append(t.column("text").combine_chunks())
        which.append(np.full(t.num_rows, k, np.int64))
        report.append({"index": idx.path, "indexed": idx.docs, "matched": int(t.num_rows),
                       "key_files_read": read["files"], "key_files": read["of_files"],
                       "key_entries_matched": read["matched"]})
    n = sum(len(x) for x in ids)
    ctx = Context(n, pa.concat_arrays(ids) if ids else pa.array([], pa.string()),
                  np.concatenate(which) if which else np.zeros(0, np.int64),
                  [idx.path for idx in indexes])
    if not n:
        return None, ctx, report
    # the run's own ids of the indexed documents: unique whatever the inputs' ids
    import pyarrow.compute as pc
    cols = {text_field: pa.concat_arrays(texts)}
    if id_field is not None:
        cols[id_field] = pc.binary_join_element_wise(
            _SEP, pa.array(ctx.index).cast(pa.string()), _SEP, ctx.ids, "")
    path = os.path.join(folder, "indexed.parquet")
    pq.write_table(pa.table(cols), path)
    return path, ctx, report


def same_ids(idx: Index, ids: pa.Array):
    """The input ids ``ids`` that are indexed ids: ``(rows, table, at)``,
    row ``rows[i]`` of ``ids`` being row ``at[i]`` of ``table`` (the indexed
    documents, :meth:`Index.fetch`)."""
    ids = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids
    rows, ords, _ = idx.lookup_pairs(id_keys(ids), kind="ids")
    if not rows.size:
        return rows, idx.fetch(ords), rows
    u = np.unique(ords)
    table = idx.fetch(u)
    at = np.searchsorted(u, ords)
    got = table.column("id").combine_chunks().take(pa.array(at)).cast(pa.string())
    want = ids.take(pa.array(rows)).cast(pa.string())
    import pyarrow.compute as pc
    eq = pc.fill_null(pc.equal(got, want), False).to_numpy(zero_copy_only=False)
    return rows[eq], table, at[eq]


def check_ids(idx: Index, corpus) -> None:
    """Refuse an input document whose id is an indexed id and whose text is
    not the indexed text (the same id and text: the indexed document)."""
    rows, table, at = same_ids(idx, corpus.ids)
    if not rows.size:
        return
    import pyarrow.compute as pc
    theirs = table.column("text").combine_chunks().take(pa.array(at)).cast(pa.large_string())
    ours = corpus.texts.take(pa.array(rows)).cast(pa.large_string())
    same = pc.fill_null(pc.equal(theirs, ours), False).to_numpy(zero_copy_only=False)
    if same.all():
        return
    row = int(rows[~same].min())
    name = corpus.ids[row].as_py()
    raise InputError(f"{corpus.locate(row)}: id {name!r} is already in the index {idx.path} "
                     f"with another text; an id names one document across the index and "
                     f"its inputs: give this one another id")


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
    from .windows import window_keys
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
    from .. import pipeline
    Index(index)                            # there, and an index
    with writer_lock(index) as held:
        # from here to the listing of the part, no other writer changes it
        idx = Index(index)
        cfg = idx.config()
        tmp = _staging(index)
        try:
            out = os.path.join(tmp, "run")
            report = pipeline.run(inputs, out, cfg, text_field=text_field, id_field=id_field,
                                  html=False, against=[index], **run_kw)
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
