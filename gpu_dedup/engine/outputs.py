"""What a finished run writes: clusters.parquet, pairs.parquet and data/
(the kept records of each input shard, in its own format), read from the
run's store a chunk at a time.

:class:`RunOutputs` is part of :class:`gpu_dedup.engine.runner.Runner`;
:class:`RowGroups` writes row groups of a fixed size, so that writing a
table piece by piece gives the bytes of writing it whole.
"""
from __future__ import annotations

import os

import numpy as np
import pyarrow as pa

from ..io.parquet import ParquetWriter
from ..io.plan import location
from ..io.sources import Shard, output_names
from ..arrays import arrow
from ..compute import cast, take
from . import layout
from .assign_tasks import output_removed
from .records import Documents
from .tasks import Ctx, gather

#: Rows per Parquet row group, as ``pyarrow.parquet.write_table`` writes them;
#: writing the same row groups one by one gives the same bytes.
ROW_GROUP = 1 << 20
#: Bytes of a JSONL input copied at a time into data/: the copy streams, so
#: a block need only be large enough to keep the copy at disk speed.
COPY_BLOCK = 8 << 20
#: Rows whose ids are gathered at a time (from every chunk's stored ids)
#: while the outputs are written; the row groups are the same whatever it is.
NAME_ROWS = 1 << 18


class RunOutputs:
    """The outputs of a finished :class:`~gpu_dedup.engine.runner.Runner`."""

    def final(self, name: str) -> np.ndarray:
        """A per-document or per-pair result array over the whole run
        (``cluster``, ``kept``, ``duplicate_of``, ``similarity``, ``pair_a``,
        ``pair_b``, ``pair_similarity``, ``pair_exact``): the chunks' parts
        end to end, in memory (the library's result; the outputs read the
        chunks one at a time, :meth:`chunk_results`)."""
        parts = [self.store.load_npy(layout.final_file(c["key"], name)) for c in self.chunks]
        return np.concatenate(parts) if len(parts) != 1 else parts[0]

    def chunk_results(self, names=layout.FINAL, streamed=()):
        """Each chunk's result arrays ``names``, one chunk at a time:
        ``(ci, {name: array})``, those of ``streamed`` as columns to read a
        slice at a time (``load_npy``'s ``"read"``: the pairs, which a chunk
        of the first copies of large clusters has many of); with ``kept``,
        also ``removed``: the documents of the output removed
        (:func:`output_removed`)."""
        for ci, c in enumerate(self.chunks):
            r = {n: self.store.load_npy(layout.final_file(c["key"], n),
                                        mmap="read" if n in streamed else False)
                 for n in names}
            if "kept" in r:
                r["removed"] = output_removed(r["kept"], int(self.doc_starts[ci]), self.C)
            yield ci, r

    def stats(self) -> dict:
        N = self.N - self.C              # the outputs' documents
        m = self.assign_meta
        removed = N - m["kept"]
        v = self.select_meta
        lsh = self.buckets_meta
        active = sum(c["active"] for c in self.chunks if not (self.C and c["file"] == 0))
        stats = {
            "documents": N,
            "documents_without_shingles": int(N - active),
            "kept": m["kept"],
            "removed": removed,
            "exact_removed": m["exact_removed"],
            "fuzzy_removed": removed - m["exact_removed"],
            "clusters": m["clusters"],
            "duplicate_clusters": m["duplicate_clusters"],
            "cluster_mode": self.cfg.cluster,
            "exact_edges": m["exact_edges"],
            "buckets": lsh.get("buckets"),
            "bucket_entries": lsh.get("bucket_entries"),
            "candidate_edges": v["candidates"],
            "first_round_candidates": lsh.get("first_round"),
            "verified_edges": v["verified"],
            "rounds": v["rounds"],
            "skipped_comparisons": v["skipped"],
            "selection_ran_on": v.get("selection"),
            "selection_rounds": v.get("selection_rounds"),
            "selection_scored": v.get("selection_scored"),
            "selection_bounded": v.get("selection_bounded"),
            "selection_ranges": v.get("ranges"),
            "unresolved_edges": v["unresolved"],
            "shingles": self.shingles,
            "removed_similarity": m["removed_similarity"],
            "chaining": m.get("chaining"),
        }
        hosted = [c.get("host_normalized") for c in self.chunks
                  if not (self.C and c["file"] == 0)]
        stats["normalized_on_host"] = (None if not hosted or any(h is None for h in hosted)
                                       else int(sum(hosted)))
        peak = getattr(self.be, "peak_device_bytes", None)
        if callable(peak):
            stats["device_peak_bytes"] = peak()
        return stats

    def texts(self, name: str = "text.arrow") -> "StoredStrings":
        """The stored normalized texts (or ``ids.arrow``: the ids), read on demand."""
        return StoredStrings(self.ctx, self.docs, name)


    def _names(self, docs: np.ndarray) -> pa.Array:
        """The ids of documents ``docs``: a context document's is its id in
        the index."""
        docs = np.asarray(docs, dtype=np.int64)
        if not self.C:
            return cast(self.ids_of(docs), pa.string())
        inside = docs < self.C
        out = np.empty(docs.size, dtype=object)
        if inside.any():
            out[inside] = take(self.context.ids, arrow(docs[inside])).to_numpy(
                zero_copy_only=False)
        if (~inside).any():
            out[~inside] = cast(self.ids_of(docs[~inside]), pa.string()).to_numpy(
                zero_copy_only=False)
        return arrow(out, pa.string())

    def write(self, folder: str, on_progress=None) -> dict:
        """clusters.parquet, pairs.parquet and data/ into ``folder``, a chunk
        of documents at a time."""
        st = self.store
        total = 2 + len(self.shard_paths)
        step = [0]

        def tick():
            step[0] += 1
            if on_progress is not None:
                on_progress("write", step[0], total)

        fields = [("id", pa.string()), ("cluster", pa.int64()), ("kept", pa.bool_()),
                  ("duplicate_of", pa.string()), ("similarity", pa.float64())]
        if self.context is not None:
            fields.append(("duplicate_of_index", pa.string()))
        schema = pa.schema(fields)
        with ParquetWriter(os.path.join(folder, "clusters.parquet"), schema,
                           dictionary=dictionary_columns(schema)) as w:
            rg = RowGroups(w, schema)
            for ci, r in self.chunk_results(("cluster", "kept", "duplicate_of", "similarity")):
                c = self.chunks[ci]
                if self.C and c["file"] == 0:
                    continue                     # the context is no output
                ids = st.column(layout.chunk_file(c["key"], layout.IDS))
                k, d = r["kept"], r["duplicate_of"]
                for s in range(0, k.size, NAME_ROWS):
                    e = min(s + NAME_ROWS, k.size)
                    ks = k[s:e]
                    gone = np.flatnonzero(~ks)
                    slot = np.full(ks.size, -1, np.int64)
                    slot[gone] = np.arange(gone.size)
                    mask = arrow(slot, mask=slot < 0)
                    dup = d[s:e][gone]
                    cols = {"id": cast(ids.slice(s, e - s), pa.string()),
                            "cluster": arrow(r["cluster"][s:e], pa.int64()),
                            "kept": arrow(ks, pa.bool_()),
                            "duplicate_of": take(self._names(dup), mask),
                            "similarity": arrow(r["similarity"][s:e], pa.float64(),
                                                   mask=ks)}
                    if self.context is not None:
                        cols["duplicate_of_index"] = take(self.context.index_names(dup), mask)
                    rg.add(pa.table(cols, schema=schema))
                    del cols, dup, mask, slot
                del ids, r
                self.release(collect=False)
            rg.close()
        tick()
        self.release()
        schema = pa.schema([("id_a", pa.string()), ("id_b", pa.string()),
                            ("similarity", pa.float64())])
        with ParquetWriter(os.path.join(folder, "pairs.parquet"), schema,
                           dictionary=dictionary_columns(schema)) as w:
            rg = RowGroups(w, schema)
            pair_cols = ("pair_a", "pair_b", "pair_similarity")
            for _, r in self.chunk_results(pair_cols, streamed=pair_cols):
                cols = r["pair_a"], r["pair_b"], r["pair_similarity"]
                for s in range(0, len(cols[0]), NAME_ROWS):
                    a, b, sims = (np.asarray(c[s:s + NAME_ROWS]) for c in cols)
                    if self.C:               # pairs with an output document (a < b)
                        out = b >= self.C
                        a, b, sims = a[out], b[out], sims[out]
                    rg.add(pa.table({"id_a": self._names(a), "id_b": self._names(b),
                                     "similarity": arrow(sims, pa.float64())}, schema=schema))
                del r, cols
                self.release(collect=False)
            rg.close()
        tick()
        self.release()
        data_dir = os.path.join(folder, "data")
        os.makedirs(data_dir)
        first = 1 if self.C else 0
        names = output_names(self.shard_paths[first:])
        for fi in range(first, len(self.shard_paths)):
            out = os.path.join(data_dir, names[fi - first])
            os.makedirs(os.path.dirname(out), exist_ok=True)
            self._write_data(fi, out)
            tick()
            self.release(collect=False)
        return {"clusters": "clusters.parquet", "pairs": "pairs.parquet", "data": "data/",
                "report": "report.json", "report_html": "report.html"}

    def _write_data(self, fi: int, out: str) -> None:
        """The kept records of shard ``fi``, written by the shard's own writer
        from their line (row, file) numbers, gathered a chunk at a time (the
        kept ones only)."""
        idx = [ci for ci, c in enumerate(self.chunks) if c["file"] == fi]
        first = self.chunks[idx[0]]
        parts = []
        for ci in idx:
            key = self.chunks[ci]["key"]
            loc = self.store.load_npy(layout.chunk_file(key, layout.LOC), mmap=True)
            keep = self.store.load_npy(layout.final_file(key, "kept"))
            parts.append(np.asarray(loc[keep], dtype=np.int64))
            del loc, keep
        kept = np.concatenate(parts) if len(parts) > 1 else parts[0]
        del parts
        shard = Shard(path=first["path"], fmt=first["fmt"], compression=first["compression"],
                      texts=arrow([], pa.large_string()), ids=None, locations=kept,
                      files=first.get("files"))
        shard.write_kept(None, out, min(self.plan.chunk_bytes, COPY_BLOCK))

    def shards(self) -> list[dict]:
        """Per input shard: path, format, compression, documents, output name,
        replaced UTF-8 and skipped records."""
        first = 1 if self.C else 0       # the context is no input
        names = output_names(self.shard_paths[first:])
        out = []
        for fi in range(first, len(self.shard_paths)):
            path = self.shard_paths[fi]
            cs = [c for c in self.chunks if c["file"] == fi]
            out.append({"path": path, "format": cs[0]["fmt"],
                        "compression": cs[0]["compression"],
                        "documents": sum(c["n"] for c in cs),
                        "output": "data/" + names[fi - first],
                        "invalid_utf8": sum(c["invalid_utf8"] for c in cs),
                        "skipped": [f"{location(cs[0], loc)}: {why}"
                                    for c in cs for loc, why in c["skipped"]]})
        return out


class StoredStrings:
    """``strings[i]`` of the stored texts or ids, read on demand."""

    def __init__(self, ctx: Ctx, docs: Documents, name: str):
        self.ctx = ctx
        self.docs = docs
        self.name = name

    def __len__(self) -> int:
        return self.docs.count

    def __getitem__(self, i):
        return gather(self.ctx, self.docs, np.array([int(i)], dtype=np.int64), self.name)[0]

    def take(self, positions) -> pa.Array:
        """The strings of the sorted global document positions, read a chunk
        at a time."""
        return gather(self.ctx, self.docs, np.asarray(positions, dtype=np.int64), self.name)


#: Output columns of (nearly) distinct values: each document's id and cluster
#: label, and a pair's second id (a kept document's id repeats over its
#: pairs, the second ones hardly). Dictionary-encoding them costs time and
#: bytes (:class:`~gpu_dedup.io.parquet.ParquetWriter`).
DISTINCT_COLUMNS = ("id", "cluster", "id_b")


def dictionary_columns(schema: pa.Schema) -> list:
    """The columns of an output schema written dictionary-encoded."""
    return [n for n in schema.names if n not in DISTINCT_COLUMNS]


class RowGroups:
    """Writes tables to a ParquetWriter in row groups of exactly ``ROW_GROUP``
    rows (the last may be shorter), as one ``write_table`` call would."""

    def __init__(self, writer, schema):
        self.w = writer
        self.schema = schema
        self.pending = []
        self.count = 0
        self.written = 0

    def add(self, table: pa.Table) -> None:
        self.pending.append(table)
        self.count += table.num_rows
        while self.count >= ROW_GROUP:
            # only the row group is copied into one piece; the rest stays a
            # view of the tables it came in
            t = pa.concat_tables(self.pending)
            self.w.write_table(t.slice(0, ROW_GROUP).combine_chunks())
            self.written += 1
            rest = t.slice(ROW_GROUP)
            self.pending = [rest]
            self.count = rest.num_rows
            del t

    def close(self) -> None:
        if self.count or not self.written:
            t = (pa.concat_tables(self.pending).combine_chunks() if self.pending
                 else pa.Table.from_batches([], schema=self.schema))   # empty_table imports pandas
            self.w.write_table(t)
        self.pending = []
