"""Arrow IPC shards (``.arrow``, ``.feather``, ``.ipc``) and Hugging Face
``datasets`` folders.

An Arrow IPC file is either the random-access *file* format (Feather v2
writes it) or the *stream* format (``datasets`` writes its ``data-*.arrow``
files so); both are read, memory-mapped, record batch by record batch, and
the data/ output of a shard is written in the format it came in, with its
schema (and the schema's metadata) and every column.

A ``datasets`` folder, as ``Dataset.save_to_disk`` writes it, holds
``state.json`` (its data files, in order, and its format), ``dataset_info.json``
and ``data-NNNNN-of-NNNNN.arrow``. It is one shard whose rows are numbered
across its data files; its data/ output is a folder ``datasets.load_from_disk``
opens: the same files with the kept rows, ``dataset_info.json`` as it was and
``state.json`` with a new fingerprint.

The text and id columns follow the Parquet reader's rules
(:func:`gpu_dedup.io.parquet.read_batches`).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil

import numpy as np
import pyarrow as pa

from ..errors import InputError
from .fs import is_url, open_input_file
from .parquet import ParquetData, _filter_rows, read_batches

ARROW_SUFFIXES = (".arrow", ".feather", ".ipc")
STATE = "state.json"
INFO = "dataset_info.json"
#: Metadata files that ``datasets`` writes beside its data (never JSONL shards).
DATASETS_METADATA = (STATE, INFO, "dataset_dict.json")


def is_datasets_folder(path: str) -> bool:
    """Whether ``path`` is a folder written by ``Dataset.save_to_disk``."""
    return os.path.isfile(os.path.join(path, STATE)) and bool(_state_files(path, quiet=True))


def _state_files(path: str, quiet: bool = False) -> list[str]:
    try:
        with open(os.path.join(path, STATE), encoding="utf-8") as f:
            state = json.load(f)
        files = [d["filename"] for d in state["_data_files"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        if quiet:
            return []
        raise InputError(f"{os.path.join(path, STATE)}: not a datasets state file ({exc})") \
            from exc
    return [str(f) for f in files]


def datasets_files(path: str) -> list[str]:
    """The data files of a ``datasets`` folder, in its order (relative)."""
    files = _state_files(path)
    for f in files:
        if not os.path.isfile(os.path.join(path, f)):
            raise InputError(f"{os.path.join(path, f)}: listed in {STATE} but missing")
    return files


class _Ipc:
    """An open IPC file or stream: its kind, schema and record batches."""

    def __init__(self, path: str):
        self.path = path
        try:
            self.source = open_input_file(path) if is_url(path) else pa.memory_map(path, "r")
        except InputError:
            raise
        except (OSError, pa.ArrowException) as exc:
            raise InputError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") \
                from exc
        try:
            self.reader = pa.ipc.open_file(self.source)
            self.kind = "file"
        except pa.ArrowInvalid:
            self.source.seek(0)
            try:
                self.reader = pa.ipc.open_stream(self.source)
            except pa.ArrowException as exc:
                self.source.close()
                raise InputError(f"{path}: not a readable Arrow IPC file or stream ({exc})") \
                    from exc
            self.kind = "stream"
        self.schema = self.reader.schema

    def batches(self):
        if self.kind == "file":
            for i in range(self.reader.num_record_batches):
                yield self.reader.get_batch(i)
        else:
            yield from self.reader

    def close(self) -> None:
        self.source.close()




def read_arrow_shard(path: str, text_field: str = "text", id_field: str | None = "id",
                     on_bad_record: str = "error", files: list[str] | None = None
                     ) -> ParquetData:
    """The text (and id) column of an IPC file, or of the data ``files`` of a
    folder (rows numbered from 1 across them)."""
    paths = [path] if files is None else [os.path.join(path, f) for f in files]
    texts, ids, rows, skipped = [], [], [], []
    base = 0
    use_id = None
    for p in paths:
        r = _Ipc(p)
        try:
            d = read_batches(p, r.schema, r.batches(), text_field, id_field, on_bad_record,
                             row_base=base)
            n = d.rows_read
        finally:
            r.close()
        if use_id is None:
            use_id = d.ids is not None
        texts.append(d.texts)
        ids.append(d.ids)
        rows.append(d.rows)
        skipped += d.skipped
        base += n
    text_arr = pa.concat_arrays(texts) if texts else pa.array([], pa.large_string())
    id_arr = None
    if use_id:
        id_arr = pa.concat_arrays([i for i in ids if i is not None])
    row_arr = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    return ParquetData(text_arr, id_arr, row_arr, None, skipped)


def batch_sizes(path: str) -> list[tuple[int, int]]:
    """``(rows, bytes)`` of each record batch of an IPC file (memory-mapped:
    nothing is copied)."""
    r = _Ipc(path)
    try:
        return [(b.num_rows, b.nbytes) for b in r.batches()]
    finally:
        r.close()


def read_arrow_batches(path: str, batches: list[int], row_base: int, text_field: str,
                       id_field: str | None, on_bad_record: str = "error") -> ParquetData:
    """The text (and id) column of record ``batches`` (indices) of the IPC
    file ``path``, rows numbered from ``row_base + 1``."""
    r = _Ipc(path)
    try:
        want = set(batches)
        chosen = (b for i, b in enumerate(r.batches()) if i in want)
        return read_batches(path, r.schema, chosen, text_field, id_field, on_bad_record,
                            row_base=row_base)
    finally:
        r.close()


def _batches_of(path: str):
    r = _Ipc(path)
    try:
        yield from r.batches()
    finally:
        r.close()


def write_ipc_rows(src: str, rows: np.ndarray, dst: str, edit=None, row_base: int = 0) -> int:
    """Write the rows numbered ``rows`` (1-based from ``row_base + 1``,
    ascending) of the IPC file ``src`` to ``dst`` in ``src``'s kind and
    schema, a record batch at a time. ``edit(table, i0, i1)``, if given,
    returns the table to write in place of the kept rows ``i0 .. i1`` of
    ``rows`` (a new text column). Returns the number of rows written."""
    r = _Ipc(src)
    rows = np.asarray(rows, np.int64)
    written = 0
    try:
        new = pa.ipc.new_file if r.kind == "file" else pa.ipc.new_stream
        with pa.OSFile(dst, "wb") as sink, new(sink, r.schema) as w:
            base = row_base
            for batch in r.batches():
                n = batch.num_rows
                lo = int(np.searchsorted(rows, base + 1, side="left"))
                hi = int(np.searchsorted(rows, base + n, side="right"))
                if hi > lo:
                    mask = np.zeros(n, dtype=bool)
                    mask[rows[lo:hi] - base - 1] = True
                    t = _filter_rows(pa.Table.from_batches([batch]), pa.array(mask))
                    if edit is not None:
                        t = edit(t, lo, hi)
                    for b in t.to_batches():
                        w.write_batch(b)
                    written += hi - lo
                base += n
    finally:
        r.close()
    return written


def write_kept_ipc(src: str, kept_rows: np.ndarray, dst: str, files: list[str] | None = None,
                   edit=None) -> int:
    """The kept rows of an IPC shard to ``dst`` (a ``datasets`` folder when
    ``files`` lists its data files)."""
    if files is None:
        return write_ipc_rows(src, kept_rows, dst, edit)
    os.makedirs(dst, exist_ok=True)
    written = 0
    base = 0
    kept_rows = np.asarray(kept_rows, np.int64)
    for f in files:
        p = os.path.join(src, f)
        n = sum(b.num_rows for b in _batches_of(p))
        lo = int(np.searchsorted(kept_rows, base + 1, side="left"))
        hi = int(np.searchsorted(kept_rows, base + n, side="right"))
        shifted = None if edit is None else (lambda t, a, b, _o=lo: edit(t, a + _o, b + _o))
        written += write_ipc_rows(p, kept_rows[lo:hi], os.path.join(dst, f), shifted, base)
        base += n
    for name in os.listdir(src):
        if name in files or name == STATE or name.startswith("."):
            continue
        full = os.path.join(src, name)
        if os.path.isfile(full) and name.endswith(".json"):
            shutil.copyfile(full, os.path.join(dst, name))
    with open(os.path.join(src, STATE), encoding="utf-8") as f:
        state = json.load(f)
    digest = hashlib.sha256(np.ascontiguousarray(kept_rows).tobytes())
    digest.update(str(state.get("_fingerprint", "")).encode())
    state["_fingerprint"] = digest.hexdigest()[:16]
    with open(os.path.join(dst, STATE), "w", encoding="utf-8") as f:
        json.dump(state, f, indent=2, sort_keys=True)
    return written
