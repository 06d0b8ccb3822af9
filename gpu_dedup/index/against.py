"""``run --against``: a corpus deduplicated against indexes.

:func:`run_against` opens the indexes (copied locally when remote), checks
that the run's options agree with theirs, and runs the pipeline with an
:class:`Against` (a :class:`gpu_dedup.pipeline.Prior`): once the pipeline
has checked the inputs and the output and chosen its backend, it reads the
inputs, refuses an input id indexed with another text, and reads back the
indexed documents that share a band key with them (:func:`context_for`).
Those come first in the run, kept already (``greedy_select(fixed=...)``), so
the result equals one run over the indexed corpus followed by the input,
restricted to the input's documents.
"""
from __future__ import annotations

import contextlib
import os

import numpy as np
import pyarrow as pa

from ..config import Config
from ..errors import InputError
from ..io.parquet import write_table
from .keys import check_mode, keys_of
from .store import Index, id_keys

#: Separates the index number from an indexed id in the run's own ids.
SEP = "\x1f"


def query_config(index: str, **given) -> Config:
    """The configuration of index ``index`` (a folder or a URL) with the
    options ``given`` on top; refused (ConfigError) when one that defines
    similarity differs from the index's."""
    from .remote import local_index
    with local_index(index, meta_only=True) as local:
        idx = Index(local)
        cfg = idx.config(**given)
        idx.check(cfg)
    return cfg


def run_against(inputs, output: str, config: Config | None = None, *, against,
                text_field: str = "text", id_field: str | None = "id",
                on_bad_record: str = "error", **run_kw) -> dict:
    """Deduplicate ``inputs`` into ``output`` against the indexes
    ``against`` (folders or URLs), as if their documents came first in the
    same run; clusters.parquet names the index of each indexed
    ``duplicate_of`` (``duplicate_of_index``) and report.json says what was
    read from each index (``against``). No index: a plain run.

    The other arguments are those of :func:`gpu_dedup.pipeline.run`.
    """
    from .. import pipeline
    from .remote import local_index
    cfg = (config or Config()).resolved()
    kw = dict(text_field=text_field, id_field=id_field, on_bad_record=on_bad_record, **run_kw)
    if not against:
        return pipeline.run(inputs, output, cfg, **kw)
    with contextlib.ExitStack() as stack:
        local = [stack.enter_context(local_index(d)) for d in against]
        check_mode(cfg, "--against")
        indexes = [Index(d) for d in local]
        for idx in indexes:
            idx.check(cfg)
        prior = Against(indexes, cfg, text_field=text_field, id_field=id_field,
                        on_bad_record=on_bad_record)
        return pipeline.run(inputs, output, cfg, prior=prior, **kw)


class Against:
    """The documents of ``indexes`` a run must see first
    (a :class:`gpu_dedup.pipeline.Prior`)."""

    def __init__(self, indexes: list[Index], cfg: Config, *, text_field: str = "text",
                 id_field: str | None = "id", on_bad_record: str = "error"):
        self.indexes = indexes
        self.cfg = cfg
        self.text_field = text_field
        self.id_field = id_field
        self.on_bad_record = on_bad_record

    def prepare(self, paths: list[str], folder: str, backend):
        """``pipeline.Fixed``: the indexed documents of :func:`context_for`."""
        from ..pipeline import Fixed
        path, ctx, report = context_for(self.indexes, paths, self.cfg, folder,
                                        text_field=self.text_field, id_field=self.id_field,
                                        on_bad_record=self.on_bad_record, backend=backend)
        return Fixed(path, ctx, {"against": report})


def context_for(indexes: list[Index], paths: list[str], cfg: Config, folder: str, *,
                text_field: str = "text", id_field: str | None = "id",
                on_bad_record: str = "error", backend=None):
    """The indexed documents a run over ``paths`` must see: ``(path, Context,
    report)``. ``path`` is a Parquet file written in ``folder`` (None when no
    indexed document shares a band key with the inputs), to be the run's
    first input; the keys are computed on ``backend`` (:func:`keys_of`)."""
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
            SEP, pa.array(ctx.index).cast(pa.string()), SEP, ctx.ids, "")
    path = os.path.join(folder, "indexed.parquet")
    write_table(pa.table(cols), path)
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
