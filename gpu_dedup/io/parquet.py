"""Parquet shards.

Reading streams record batches of just the text and id columns. A text column
is a string column: ``string``, ``large_string``, ``string_view`` or
dictionary-encoded strings, cast to ``large_string`` as it is read; an id
column is one of those or integers. A column of another type is refused
before any row is read, with one line naming the file and the column.

Writing goes row group by row group: each input row group gives one output
row group of its kept rows, with every column (``string_view`` ones
included), the schema (and its metadata, such as a Hugging Face export's) and
the compression of the input.

Every Parquet file the package writes goes through :class:`ParquetWriter`:
``pyarrow.parquet.ParquetWriter``'s bytes, without importing
``pyarrow.parquet``, which loads pyarrow's filesystems (OpenSSL and every
cloud store's) for a run that reads and writes local files only.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..arrays import arrow
from ..compute import call, cast, take
from ..errors import InputError
from .fs import is_url, open_input_file
from .names import native_path, require_regular
from .stdin import display_name

BATCH_ROWS = 64 * 1024


def open_parquet(path: str) -> pq.ParquetFile:
    import pyarrow.parquet as pq
    try:
        if is_url(path):
            return pq.ParquetFile(open_input_file(path))
        require_regular(path, display_name(path))
        native = native_path(path)
        return pq.ParquetFile(pa.memory_map(native) if isinstance(native, bytes) else path)
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - any reader error means the same to the user
        raise InputError(f"{display_name(path)}: not a readable Parquet file ({exc})") from exc


#: ``pyarrow.parquet.ParquetWriter``'s defaults (pyarrow 15 to 26) that
#: differ from those of the writer beneath it
_WRITER_OPTIONS = {"version": "2.6", "use_dictionary": True, "write_statistics": True,
                   "writer_engine_version": "V2", "data_page_version": "1.0",
                   "use_compliant_nested_type": True, "store_schema": True}


class ParquetWriter:
    """A Parquet file written table by table to the local path ``dst`` (any
    name: one that is not UTF-8 is opened by its bytes): the bytes
    ``pyarrow.parquet.ParquetWriter(dst, schema, compression=compression)``
    writes (a test compares them), through the writer beneath it.

    Use it as a context manager, or call :meth:`close`; a table whose schema
    is not ``schema`` is refused, as pyarrow's writer refuses it.

    ``dictionary``: pyarrow's ``use_dictionary``, the columns to
    dictionary-encode (all by default). A column of distinct values (ids,
    positions) gains nothing from it: the encoder fills a dictionary page,
    falls back to plain values and keeps both (on a million short
    documents' clusters.parquet, 0.18 s and 14.1 MB with every column
    encoded, 0.09 s and 10.8 MB without ``id`` and ``cluster``).
    """

    def __init__(self, dst: str, schema: pa.Schema, compression: str = "snappy",
                 dictionary: bool | list = True):
        self.schema = schema
        self._sink = pa.OSFile(native_path(dst), "wb")
        try:
            try:
                from pyarrow._parquet import ParquetWriter as _Base
                self._w = _Base(self._sink, schema, compression=compression,
                                **{**_WRITER_OPTIONS, "use_dictionary": dictionary})
            except (ImportError, TypeError):    # a pyarrow whose internals moved
                import pyarrow.parquet as pq
                self._w = pq.ParquetWriter(self._sink, schema, compression=compression,
                                           use_dictionary=dictionary)
        except BaseException:
            self._sink.close()
            raise

    def write_table(self, table: pa.Table, row_group_size: int | None = None) -> None:
        if not table.schema.equals(self.schema, check_metadata=False):
            raise ValueError(f"table schema does not match the file's:\n{table.schema}\n"
                             f"vs.\n{self.schema}")
        self._w.write_table(table, row_group_size=row_group_size)

    def close(self) -> None:
        if self._sink.closed:
            return
        try:
            self._w.close()
        finally:
            self._sink.close()

    def __enter__(self) -> "ParquetWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def write_table(table: pa.Table, dst: str, compression: str = "snappy") -> None:
    """``pyarrow.parquet.write_table(table, dst)``: one file of ``table``."""
    with ParquetWriter(dst, table.schema, compression) as w:
        w.write_table(table)


def compression_of_file(pf: pq.ParquetFile) -> str | None:
    """The codec of the first column chunk (lower case), None if uncompressed."""
    md = pf.metadata
    comp = None
    if md.num_row_groups and md.num_columns:
        comp = md.row_group(0).column(0).compression
        comp = None if comp == "UNCOMPRESSED" else comp.lower()
    return comp


def _never(_t: pa.DataType) -> bool:
    return False


# view types exist from pyarrow 16 on
_is_string_view = getattr(pa.types, "is_string_view", _never)
_is_binary_view = getattr(pa.types, "is_binary_view", _never)


def _is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or _is_string_view(t)


def _is_text_type(t: pa.DataType) -> bool:
    """A type read as text: a string type, or dictionary-encoded strings."""
    if pa.types.is_dictionary(t):
        return _is_string(t.value_type)
    return _is_string(t)


def _is_id_type(t: pa.DataType) -> bool:
    """A type read as ids: text, integers, or either dictionary-encoded."""
    if pa.types.is_dictionary(t):
        return _is_id_type(t.value_type)
    return _is_string(t) or pa.types.is_integer(t)


def _without_views(t: pa.DataType) -> pa.DataType:
    """``t`` with every string/binary view type (nested ones too) replaced by
    its ``large_`` counterpart, which every compute kernel takes."""
    if _is_string_view(t):
        return pa.large_string()
    if _is_binary_view(t):
        return pa.large_binary()
    if pa.types.is_struct(t):
        return pa.struct([t.field(i).with_type(_without_views(t.field(i).type))
                          for i in range(t.num_fields)])
    if pa.types.is_large_list(t):
        return pa.large_list(t.value_field.with_type(_without_views(t.value_type)))
    if pa.types.is_fixed_size_list(t):
        return pa.list_(t.value_field.with_type(_without_views(t.value_type)), t.list_size)
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_without_views(t.value_type)))
    return t


def filter_rows(table: pa.Table, mask: pa.Array) -> pa.Table:
    """``table.filter(mask)``, also for column types the filter kernel lacks
    (``string_view``): those columns are filtered as their ``large_``
    counterpart and cast back."""
    try:
        return call("filter", table, mask)
    except pa.ArrowNotImplementedError:
        pass
    cols = []
    for col in table.columns:
        plain = _without_views(col.type)
        if plain == col.type:
            cols.append(col.filter(mask))
        else:
            cols.append(col.cast(plain).filter(mask).cast(col.type))
    return pa.Table.from_arrays(cols, schema=table.schema)


@dataclass
class ParquetData:
    texts: pa.Array
    ids: pa.Array | None
    rows: np.ndarray            # 1-based row number of each record
    compression: str | None
    skipped: list               # (row, reason)
    rows_read: int = 0          # rows seen, bad ones included


def read_parquet_shard(path: str, text_field: str = "text", id_field: str | None = "id",
                       on_bad_record: str = "error", batch_rows: int = BATCH_ROWS,
                       progress=None, row_groups: list[int] | None = None,
                       row_base: int = 0) -> ParquetData:
    """Read the text (and id) column of a Parquet file by batches: all of it,
    or the ``row_groups`` listed, whose rows are then numbered from
    ``row_base + 1``.

    A null text is a bad record: an :class:`InputError` naming its row, or
    skipped with ``on_bad_record="skip"``. So is a null id when the file has
    an id column. A missing text column, or one that is not a string column,
    is an error either way.
    """
    pf = open_parquet(path)
    schema = pf.schema_arrow
    cols = _columns(path, schema, text_field, id_field)
    d = read_batches(path, schema,
                     pf.iter_batches(batch_size=batch_rows, row_groups=row_groups, columns=cols,
                                     use_threads=True),
                     text_field, id_field, on_bad_record, row_base=row_base, progress=progress,
                     total=pf.metadata.num_rows, what="Parquet")
    d.compression = compression_of_file(pf)
    return d


def _columns(path: str, schema: pa.Schema, text_field: str, id_field: str | None) -> list:
    """The columns to read; a missing or mistyped text or id column is refused."""
    names = schema.names
    if text_field not in names:
        raise InputError(f"{display_name(path)}: missing text field {text_field!r} "
                         f"(columns: {', '.join(names)}); choose one with --text-field")
    ttype = schema.field(text_field).type
    if not _is_text_type(ttype):
        raise InputError(f"{display_name(path)}: field {text_field!r} is not a string column "
                         f"({ttype}); choose the text column with --text-field")
    use_id = id_field is not None and id_field in names
    if use_id and not _is_id_type(schema.field(id_field).type):
        raise InputError(f"{display_name(path)}: field {id_field!r} cannot be used as an id "
                         f"({schema.field(id_field).type}; ids must be strings or integers); "
                         f"pass --id-field none to generate ids")
    return [text_field] + ([id_field] if use_id and id_field != text_field else [])


def read_batches(path: str, schema: pa.Schema, batches, text_field: str = "text",
                 id_field: str | None = "id", on_bad_record: str = "error", *,
                 row_base: int = 0, progress=None, total: int = 1,
                 what: str = "Arrow") -> ParquetData:
    """The text (and id) column of record ``batches`` of a table with
    ``schema``, rows numbered from ``row_base + 1``; the rules of
    :func:`read_parquet_shard`."""
    names = schema.names
    _columns(path, schema, text_field, id_field)
    use_id = id_field is not None and id_field in names
    texts, ids, rows, skipped = [], [], [], []
    base = row_base
    total = max(int(total), 1)
    try:
        for batch in batches:
            n = batch.num_rows
            t = batch.column(text_field)
            if t.type != pa.large_string():
                t = cast(t, pa.large_string())
            i = None
            if use_id:
                i = batch.column(id_field)
                if i.type != pa.large_string():
                    try:
                        i = cast(i, pa.large_string())
                    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                        raise InputError(f"{display_name(path)}: field {id_field!r} cannot be "
                                         f"used as an id ({schema.field(id_field).type}); "
                                         f"pass --id-field none to generate ids") from exc
            r = np.arange(base + 1, base + n + 1, dtype=np.int64)
            bad = t.is_null().to_numpy(zero_copy_only=False) if t.null_count else None
            bad_id = i.is_null().to_numpy(zero_copy_only=False) if i is not None and i.null_count \
                else None
            if bad is not None or bad_id is not None:
                b = np.zeros(n, dtype=bool)
                if bad is not None:
                    b |= bad
                if bad_id is not None:
                    b |= bad_id
                for k in np.flatnonzero(b).tolist():
                    why = (f"field {text_field!r} is not a string (null)"
                           if bad is not None and bad[k] else f"missing id field {id_field!r}")
                    if on_bad_record != "skip":
                        raise InputError(f"{display_name(path)}: row {base + k + 1}: {why}")
                    skipped.append((base + k + 1, why))
                keep = pa.array(~b)
                t = t.filter(keep)
                i = i.filter(keep) if i is not None else None
                r = r[~b]
            texts.append(t)
            ids.append(i)
            rows.append(r)
            base += n
            if progress is not None:
                progress(n / total)
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - corrupt pages, bad encodings...
        raise InputError(f"{display_name(path)}: corrupt {what} data after row {base} "
                         f"({exc})") from exc
    text_arr = pa.concat_arrays(texts) if texts else pa.array([], type=pa.large_string())
    id_arr = None
    if use_id:
        id_arr = pa.concat_arrays(ids) if ids else pa.array([], type=pa.large_string())
    row_arr = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
    return ParquetData(text_arr, id_arr, row_arr, None, skipped, base - row_base)


def write_kept_rows(src: str, locations: np.ndarray, keep: np.ndarray, dst: str,
                    texts_of=None, text_field: str | None = None) -> int:
    """Write the rows numbered ``locations`` (1-based, ascending) of ``src``
    whose ``keep`` is set to ``dst``, a row group at a time; with
    ``texts_of``, the column ``text_field`` replaced by ``texts_of(i0, i1)``
    (the new texts of positions ``i0 .. i1`` of ``locations``). Returns the
    number of rows written."""
    pf = open_parquet(src)
    comp = compression_of_file(pf)
    locations = np.asarray(locations, dtype=np.int64)
    keep = np.asarray(keep, dtype=bool)
    schema = pf.schema_arrow
    written = 0
    with ParquetWriter(dst, schema, comp or "none") as w:
        base = 0
        for g in range(pf.metadata.num_row_groups):
            n = pf.metadata.row_group(g).num_rows
            lo = int(np.searchsorted(locations, base + 1, side="left"))
            hi = int(np.searchsorted(locations, base + n, side="right"))
            sel = np.flatnonzero(keep[lo:hi])
            if sel.size:
                mask = np.zeros(n, dtype=bool)
                mask[locations[lo:hi][sel] - base - 1] = True
                t = filter_rows(pf.read_row_group(g), arrow(mask))
                if texts_of is not None:
                    col = schema.get_field_index(text_field)
                    new = take(texts_of(lo, hi), arrow(np.asarray(sel, dtype=np.int64)))
                    t = t.set_column(col, schema.field(col), cast(new, schema.field(col).type))
                w.write_table(t)
                written += int(sel.size)
            base += n
    return written
