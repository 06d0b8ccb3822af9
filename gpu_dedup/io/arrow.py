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

import json
import os
import shutil

import numpy as np
import pyarrow as pa

from ..errors import InputError
from ..paths import contained
from .fs import is_url, open_input_file
from .names import native_path, require_regular, special_kind
from .parquet import ParquetData, filter_rows, read_batches
from .stdin import display_name

ARROW_SUFFIXES = (".arrow", ".feather", ".ipc")
STATE = "state.json"
INFO = "dataset_info.json"
#: Metadata files that ``datasets`` writes beside its data (never JSONL shards).
DATASETS_METADATA = (STATE, INFO, "dataset_dict.json")


def is_datasets_folder(path: str) -> bool:
    """Whether ``path`` is a folder written by ``Dataset.save_to_disk``."""
    return os.path.isfile(os.path.join(path, STATE)) and bool(_state_files(path, quiet=True))


def _state_files(path: str, quiet: bool = False) -> list:
    state = os.path.join(path, STATE)
    try:
        with open(state, encoding="utf-8") as f:
            files = [d["filename"] for d in json.load(f)["_data_files"]]
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
        if quiet:
            return []
        raise InputError(f"{display_name(state)}: not a datasets state file "
                         f"({' '.join(str(exc).split())})") from exc
    return files


def datasets_files(path: str) -> list[str]:
    """The data files of a ``datasets`` folder, in its order (relative).

    Each name ``state.json`` gives must be a plain relative name
    (:func:`gpu_dedup.paths.plain_relative`) of a regular file inside the
    folder, not a link leading out of it, and listed once; anything else is an
    :class:`InputError` naming the state file and the name, raised before any
    data file is opened."""
    state = display_name(os.path.join(path, STATE))
    files = _state_files(path)
    seen = set()
    for f in files:
        if not isinstance(f, str):
            raise InputError(f"{state}: data file name {f!r} is not a string")
        contained(path, f, state)
        full = os.path.join(path, f)
        if not os.path.lexists(full):
            raise InputError(f"{state}: lists {f!r}, which is missing")
        if not os.path.isfile(full):
            raise InputError(f"{state}: lists {f!r}, which is not a regular file"
                             f" ({special_kind(full) or 'a folder'})")
        if f in seen:
            raise InputError(f"{state}: lists {f!r} twice")
        seen.add(f)
    return files


def datasets_metadata(path: str, files: list[str] | None = None) -> list[str]:
    """The ``.json`` files a ``datasets`` folder holds beside its state and
    data files (``dataset_info.json``...), copied to its data/ output: each
    a regular file inside the folder, else an :class:`InputError`."""
    files = datasets_files(path) if files is None else files
    out = []
    for name in sorted(os.listdir(path)):
        if name in files or name == STATE or name.startswith(".") or \
                not name.endswith(".json"):
            continue
        full = os.path.join(path, name)
        if os.path.isdir(full):
            continue
        contained(path, name, display_name(full))
        if not os.path.isfile(full):
            raise InputError(f"{display_name(full)}: not a regular file "
                             f"({special_kind(full) or 'missing'})")
        out.append(name)
    return out


def check_datasets_folder(path: str) -> None:
    """Every name a ``datasets`` folder gives, checked before anything of it
    is read (:func:`datasets_files`, :func:`datasets_metadata`)."""
    datasets_metadata(path, datasets_files(path))


class _Ipc:
    """An open IPC file or stream: its kind, schema and record batches."""

    def __init__(self, path: str):
        self.path = path
        name = display_name(path)
        try:
            if is_url(path):
                self.source = open_input_file(path)
            else:
                require_regular(path, name)
                self.source = pa.memory_map(native_path(path), "r")
        except InputError:
            raise
        except (OSError, pa.ArrowException) as exc:
            raise InputError(f"{name}: cannot read: {getattr(exc, 'strerror', None) or exc}") \
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
                raise InputError(f"{name}: not a readable Arrow IPC file or stream ({exc})") \
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
    paths = [path] if files is None else \
        [contained(path, f, display_name(os.path.join(path, STATE))) for f in files]
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


def batches_of(path: str):
    """The record batches of an Arrow IPC file (or stream), one at a time."""
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
        with pa.OSFile(native_path(dst), "wb") as sink, new(sink, r.schema) as w:
            base = row_base
            for batch in r.batches():
                n = batch.num_rows
                lo = int(np.searchsorted(rows, base + 1, side="left"))
                hi = int(np.searchsorted(rows, base + n, side="right"))
                if hi > lo:
                    mask = np.zeros(n, dtype=bool)
                    mask[rows[lo:hi] - base - 1] = True
                    t = filter_rows(pa.Table.from_batches([batch]), pa.array(mask))
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
    ``files`` lists its data files). Every file of a folder is read and
    written under its checked name (:func:`datasets_files`), each path
    through :func:`gpu_dedup.paths.contained`."""
    if files is None:
        return write_ipc_rows(src, kept_rows, dst, edit)
    listed = datasets_files(src)
    if list(files) != listed:
        raise InputError(f"{display_name(os.path.join(src, STATE))}: changed while the run "
                         f"was reading it")
    metadata = datasets_metadata(src, listed)
    os.makedirs(dst, exist_ok=True)
    written = 0
    base = 0
    kept_rows = np.asarray(kept_rows, np.int64)
    for f in listed:
        p = contained(src, f, display_name(os.path.join(src, STATE)))
        out = contained(dst, f, display_name(dst))
        n = sum(b.num_rows for b in batches_of(p))
        lo = int(np.searchsorted(kept_rows, base + 1, side="left"))
        hi = int(np.searchsorted(kept_rows, base + n, side="right"))
        shifted = None if edit is None else (lambda t, a, b, _o=lo: edit(t, a + _o, b + _o))
        os.makedirs(os.path.dirname(out), exist_ok=True)
        written += write_ipc_rows(p, kept_rows[lo:hi], out, shifted, base)
        base += n
    for name in metadata:
        shutil.copyfile(contained(src, name, display_name(src)),
                        contained(dst, name, display_name(dst)))
    with open(os.path.join(src, STATE), encoding="utf-8") as f:
        state = json.load(f)
    import hashlib                      # loads OpenSSL: only for a datasets folder
    digest = hashlib.sha256(np.ascontiguousarray(kept_rows).tobytes())
    digest.update(str(state.get("_fingerprint", "")).encode())
    state["_fingerprint"] = digest.hexdigest()[:16]
    state["_data_files"] = [{**d, "filename": f} for d, f in zip(state["_data_files"], listed)]
    with open(contained(dst, STATE, display_name(dst)), "w", encoding="utf-8") as f:
        json.dump(state, f, indent=2, sort_keys=True)
    return written
