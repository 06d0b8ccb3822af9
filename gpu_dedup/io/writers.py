"""Writing a shard's kept records back in its own format: one entry point.

:func:`write_kept` takes a shard's format, path, record locations (line,
row or file numbers, as the readers give them) and a flag per record, and
writes the kept records to ``dst`` in that format with the writer of its
module (:mod:`gpu_dedup.io.jsonl`, :mod:`~gpu_dedup.io.parquet`,
:mod:`~gpu_dedup.io.arrow`, :mod:`~gpu_dedup.io.txt`). With an
:class:`TextEdit` the kept records are written with new texts (``substr``
cuts passages out of them); without one they are copied as they are (a
run's ``data/``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pyarrow as pa

from ..arrays import arrow
from ..compute import cast, take

from .arrow import datasets_files, write_kept_ipc
from .jsonl import BLOCK_BYTES, write_edited_lines, write_kept_lines
from .parquet import write_kept_rows
from .txt import write_kept_files


@dataclass(frozen=True)
class TextEdit:
    """The new texts of a shard's records, by position ``i`` among its
    records (the order of their locations).

    ``one(i)`` is record ``i``'s text and ``many(i0, i1)`` the texts of
    records ``i0 .. i1`` as an Arrow string array, changed or not;
    ``changed[i]`` says whether record ``i``'s text differs from the input's
    (a JSONL record that did not change is copied byte for byte). ``field``
    is the field or column the text is written to.
    """

    field: str
    changed: np.ndarray
    one: Callable[[int], str]
    many: Callable[[int, int], pa.Array]

    def take(self, records: np.ndarray) -> pa.Array:
        """The texts of the ascending record positions ``records``."""
        records = np.asarray(records, dtype=np.int64)
        if records.size == 0:
            return arrow([], pa.large_string())
        a = int(records[0])
        return take(self.many(a, int(records[-1]) + 1), arrow(records - a))


def _ipc_edit(edit: TextEdit, keep: np.ndarray):
    """``edit(table, lo, hi)`` of :func:`gpu_dedup.io.arrow.write_kept_ipc`:
    the kept rows ``lo .. hi`` with their new texts."""
    kept = np.flatnonzero(keep)

    def replace(t: pa.Table, lo: int, hi: int) -> pa.Table:
        i = t.schema.get_field_index(edit.field)
        new = cast(edit.take(kept[lo:hi]), t.schema.field(i).type)
        return t.set_column(i, t.schema.field(i), new)
    return replace


def write_kept(fmt: str, path: str, locations: np.ndarray, keep: np.ndarray | None,
               dst: str, *, files: list | None = None, edit: TextEdit | None = None,
               block_bytes: int = BLOCK_BYTES) -> int:
    """Write the records of a shard whose ``keep`` is set to ``dst``, in the
    shard's format; returns how many were written.

    Args:
        fmt: ``"jsonl"``, ``"parquet"``, ``"arrow"``, ``"datasets"`` or
            ``"txt"`` (:func:`gpu_dedup.io.sources.format_of`).
        path: the shard (a text shard's folder).
        locations: each record's line (JSONL), row (Parquet, Arrow) or file
            number (text), 1-based and ascending.
        keep: one flag per record; None when ``locations`` are those of the
            kept records alone (no edit).
        dst: the output file (a folder for text and ``datasets`` shards).
        files: a text shard's files, relative to ``path``.
        edit: new texts for the kept records; None copies them as they are.
        block_bytes: how much of a JSONL input is copied at a time.
    """
    locations = np.asarray(locations, dtype=np.int64)
    if keep is None:
        if edit is not None:
            raise ValueError("an edit needs every record's location and flag")
        if fmt == "txt":
            keep = np.zeros(len(files), dtype=bool)
            keep[locations - 1] = True
        else:
            keep = np.ones(locations.size, dtype=bool)
    keep = np.asarray(keep, dtype=bool)
    if fmt == "jsonl":
        if edit is None:
            return write_kept_lines(path, locations[keep], dst, block_bytes)
        return write_edited_lines(path, locations, keep, edit.changed, edit.one, edit.field,
                                  dst, block_bytes)
    if fmt == "parquet":
        if edit is None:
            return write_kept_rows(path, locations, keep, dst)
        return write_kept_rows(path, locations, keep, dst, edit.many, edit.field)
    if fmt in ("arrow", "datasets"):
        return write_kept_ipc(path, locations[keep], dst,
                              files=datasets_files(path) if fmt == "datasets" else None,
                              edit=None if edit is None else _ipc_edit(edit, keep))
    return write_kept_files(path, files, keep, dst, None if edit is None else edit.one)


__all__ = ["TextEdit", "write_kept"]
