"""What a finished exact-substring run writes: spans.parquet,
documents.parquet and data/ (each input shard with the repeated passages cut
out and the documents left too short dropped), and its report.

:class:`SubstrOutputs` is part of :class:`gpu_dedup.engine.substr.SubstrRunner`.
"""
from __future__ import annotations

import os

import numpy as np
import pyarrow as pa

from ..compute import pc
from ..io.parquet import ParquetWriter
from ..io.sources import output_names
from ..io.writers import TextEdit, write_kept
from ..kernels import substr as K
from ..arrays import arrow
from . import layout
from .outputs import RowGroups


class SubstrOutputs:
    """The results and outputs of a finished
    :class:`~gpu_dedup.engine.substr.SubstrRunner`."""

    # -- results ----------------------------------------------------------
    def cut_key(self, ci: int) -> str:
        step = self.step
        return layout.cut_chunk(step.seed, step.parts, self.chunks[ci]["key"])

    def chunk_array(self, ci: int, name: str) -> np.ndarray:
        return self.store.load_npy(layout.file(self.cut_key(ci), f"{name}.npy"))

    def cut_texts(self, ci: int) -> pa.Array:
        return self.store.column(layout.file(self.cut_key(ci), "text.arrow"))

    def repeated(self) -> list:
        """The most repeated removed passages: ``(one window's text, count)``."""
        out = []
        starts = self.step.unit_starts
        doc_units = self.store.load_npy(layout.hash_file(self.step.seed, layout.DOC_UNITS),
                                        mmap=True)
        for u, count in self.windows_meta["top"]:
            ci = int(np.searchsorted(starts, u, side="right") - 1)
            d = int(np.searchsorted(doc_units, u, side="right") - 1)
            local = d - int(self.doc_starts[ci])
            text = self.store.column(layout.chunk_file(self.chunks[ci]["key"],
                                                       layout.TEXT))[local]
            raw = text.as_buffer().to_pybytes() if text.is_valid else b""
            arr = np.frombuffer(raw, np.uint8)
            _, b0, b1, _, _ = K.units(np.array([0, arr.size], np.int64), arr,
                                      self.job["unit"] == "word")
            i = u - int(doc_units[d])
            out.append((raw[b0[i]:b1[i + self.job["L"] - 1]].decode("utf-8"), int(count)))
        return out

    def write(self, folder: str, min_doc_length: int, text_field: str) -> dict:
        """spans.parquet, documents.parquet and data/ into ``folder``; returns
        the counts the report needs."""
        st = self.store
        span_schema = pa.schema([("id", pa.string()), ("start", pa.int64()),
                                 ("end", pa.int64()), ("first_id", pa.string())])
        doc_schema = pa.schema([("id", pa.string()), ("units", pa.int64()),
                                ("removed_units", pa.int64()), ("dropped", pa.bool_())])
        dropped_all = []
        counts = {"units": 0, "removed": 0, "with_spans": 0, "dropped": 0, "bytes_in": 0,
                  "bytes_out": 0, "spans": 0}
        lengths = []
        with ParquetWriter(os.path.join(folder, "spans.parquet"), span_schema) as ws, \
                ParquetWriter(os.path.join(folder, "documents.parquet"), doc_schema) as wd:
            rs, rd = RowGroups(ws, span_schema), RowGroups(wd, doc_schema)
            for ci, c in enumerate(self.chunks):
                ids = st.column(layout.chunk_file(c["key"], layout.IDS)).cast(pa.string())
                units = self.chunk_array(ci, "units")
                removed = self.chunk_array(ci, "removed")
                dropped = (units - removed) < min_doc_length
                dropped_all.append(dropped)
                sd = self.chunk_array(ci, "span_doc")
                s0, s1 = self.chunk_array(ci, "span_start"), self.chunk_array(ci, "span_end")
                rs.add(pa.table({"id": ids.take(arrow(sd)),
                                 "start": arrow(s0, pa.int64()),
                                 "end": arrow(s1, pa.int64()),
                                 "first_id": self.ids_of(self.chunk_array(
                                     ci, "span_first")).cast(pa.string())},
                                schema=span_schema))
                rd.add(pa.table({"id": ids, "units": arrow(units, pa.int64()),
                                 "removed_units": arrow(removed, pa.int64()),
                                 "dropped": arrow(dropped, pa.bool_())}, schema=doc_schema))
                lengths.append(s1 - s0)
                counts["units"] += int(units.sum())
                counts["removed"] += int(removed.sum())
                counts["with_spans"] += int(np.unique(sd).size)
                counts["dropped"] += int(dropped.sum())
                counts["spans"] += int(sd.size)
                counts["bytes_in"] += int(c["text_bytes"])
                t = self.cut_texts(ci)
                counts["bytes_out"] += int(pc.sum(pc.binary_length(t)).as_py() or 0) if len(t) \
                    else 0
                del ids, t
            rs.close()
            rd.close()
        counts["span_lengths"] = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
        dropped = np.concatenate(dropped_all) if dropped_all else np.zeros(0, bool)
        data_dir = os.path.join(folder, "data")
        os.makedirs(data_dir)
        names = output_names(self.shard_paths)
        for fi in range(len(self.shard_paths)):
            out = os.path.join(data_dir, names[fi])
            os.makedirs(os.path.dirname(out), exist_ok=True)
            self._write_shard(fi, out, dropped, text_field)
            self.release(collect=False)
        return counts

    def _write_shard(self, fi: int, out: str, dropped: np.ndarray, text_field: str) -> None:
        """Shard ``fi``'s records that are not dropped, with their passages
        cut, in the shard's format (:func:`gpu_dedup.io.writers.write_kept`)."""
        idx = [ci for ci, c in enumerate(self.chunks) if c["file"] == fi]
        first = self.chunks[idx[0]]
        d0, d1 = int(self.doc_starts[idx[0]]), int(self.doc_starts[idx[-1] + 1])
        locs = np.concatenate([self.store.load_npy(layout.chunk_file(self.chunks[ci]["key"],
                                                                     layout.LOC))
                               for ci in idx])
        changed = np.concatenate([self.chunk_array(ci, "removed") > 0 for ci in idx])
        texts = _ShardTexts(self, idx)
        write_kept(first["fmt"], first["path"], locs, ~dropped[d0:d1], out,
                   files=first["files"], block_bytes=self.plan.chunk_bytes,
                   edit=TextEdit(text_field, changed, texts.one, texts.many))


class _ShardTexts:
    """A shard's cut texts by record, loading one chunk at a time (records are
    asked for in order)."""

    def __init__(self, runner, chunk_indices: list[int]):
        self.r = runner
        self.idx = chunk_indices
        n = [runner.chunks[ci]["n"] for ci in chunk_indices]
        self.starts = np.concatenate([[0], np.cumsum(n)]).astype(np.int64)
        self.loaded = -1
        self.col = None

    def _load(self, k: int) -> None:
        if k != self.loaded:
            self.col = self.r.cut_texts(self.idx[k])
            self.loaded = k

    def one(self, i: int) -> str:
        k = int(np.searchsorted(self.starts, i, side="right") - 1)
        self._load(k)
        return self.col[i - int(self.starts[k])].as_py()

    def take(self, records: np.ndarray) -> pa.Array:
        """The texts of ascending record positions ``records``."""
        if records.size == 0:
            return arrow([], pa.large_string())
        a = int(records[0])
        return self.many(a, int(records[-1]) + 1).take(arrow(records - a))

    def many(self, i0: int, i1: int) -> pa.Array:
        parts = []
        while i0 < i1:
            k = int(np.searchsorted(self.starts, i0, side="right") - 1)
            self._load(k)
            e = min(i1, int(self.starts[k + 1]))
            parts.append(self.col.slice(i0 - int(self.starts[k]), e - i0))
            i0 = e
        return pa.concat_arrays(parts) if parts else arrow([], pa.large_string())


def report_dict(runner, counts: dict, params: dict, seconds: float) -> dict:
    """report.json of a finished run."""
    span_units = counts["span_lengths"]
    hist_edges = [0, 50, 100, 200, 500, 1000, 2000, 5000, 10 ** 9]
    hist = (np.histogram(span_units, bins=hist_edges)[0] if span_units.size
            else np.zeros(len(hist_edges) - 1, np.int64))
    n = runner.N
    b_in, b_out = counts["bytes_in"], counts["bytes_out"]
    w = runner.windows_meta
    return {
        "documents": {"in": n, "with_spans": counts["with_spans"],
                      "dropped": counts["dropped"], "out": n - counts["dropped"]},
        "units": {"unit": params["unit"], "total": counts["units"],
                  "removed": counts["removed"],
                  "removed_share": float(counts["removed"] / max(1, counts["units"]))},
        "bytes": {"in": b_in, "out": b_out,
                  "removed_share": float(1 - b_out / b_in) if b_in else 0.0},
        "spans": {"count": counts["spans"],
                  "length_code_points": {"edges": hist_edges[:-1] + ["more"],
                                         "counts": [int(c) for c in hist]}},
        "windows": {"hashed": w["windows"], "distinct": w["distinct"]},
        "repeated": [{"text": t, "occurrences": c} for t, c in runner.repeated()],
        "parameters": params,
        "inputs": list(runner.shard_paths),
        "outputs": {"spans": "spans.parquet", "documents": "documents.parquet",
                    "data": "data/", "report": "report.json", "report_html": "report.html"},
        "hash_seed": runner.step.seed,
        "seconds": seconds,
    }
