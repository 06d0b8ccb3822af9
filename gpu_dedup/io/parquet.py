"""Parquet shards."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import InputError


def read_parquet(path: str, text_field: str, id_field: str | None):
    """``(table, texts, ids_or_None, compression)`` of a Parquet file."""
    try:
        pf = pq.ParquetFile(path)
        table = pf.read()
    except Exception as exc:
        raise InputError(f"{path}: not a readable Parquet file ({exc})") from exc
    comp = None
    if pf.metadata.num_row_groups and pf.metadata.num_columns:
        comp = pf.metadata.row_group(0).column(0).compression
        comp = None if comp == "UNCOMPRESSED" else comp.lower()
    if text_field not in table.column_names:
        raise InputError(f"{path}: missing text field {text_field!r} "
                         f"(columns: {', '.join(table.column_names)})")
    col = table.column(text_field)
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        raise InputError(f"{path}: field {text_field!r} is not a string column ({col.type})")
    if col.null_count:
        row = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
        raise InputError(f"{path}: row {row + 1}: field {text_field!r} is not a string (null)")
    texts = col.combine_chunks().cast(pa.large_string())
    ids = None
    if id_field is not None and id_field in table.column_names:
        ic = table.column(id_field)
        if ic.null_count:
            row = int(np.flatnonzero(ic.is_null().to_numpy(zero_copy_only=False))[0])
            raise InputError(f"{path}: row {row + 1}: missing id field {id_field!r}")
        try:
            ids = ic.combine_chunks().cast(pa.large_string())
        except pa.ArrowInvalid as exc:
            raise InputError(f"{path}: field {id_field!r} cannot be used as an id ({ic.type})") from exc
    return table, texts, ids, comp


def write_parquet_rows(table: pa.Table, keep: np.ndarray, path: str, comp: str | None):
    pq.write_table(table.filter(pa.array(keep)), path, compression=comp or "none")
