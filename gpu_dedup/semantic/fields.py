"""Precomputed embeddings read from the input files (``--embedding-field``).

The ``read`` stage stores each chunk's texts, ids and locations (line
numbers of a JSONL file, 1-based row numbers of a Parquet or Arrow file).
:func:`chunk_embeddings` reads one input shard once more, taking only the
embedding field of the records the chunks hold, by those locations, and
yields each chunk's embeddings checked (:func:`gpu_dedup.semantic.embed.
embeddings_from_column`: a bad row is named by its file and line).
"""
from __future__ import annotations

import json

import numpy as np

from ..errors import InputError
from .embed import embeddings_from_column

#: The formats whose records can carry an embedding field.
FORMATS = ("jsonl", "parquet", "arrow")


def check_format(chunk: dict, field: str) -> None:
    """One line when a shard's format cannot carry ``field``."""
    if chunk["fmt"] not in FORMATS:
        raise InputError(f"{chunk['path']}: --embedding-field {field} reads JSONL, Parquet and "
                         f"Arrow inputs; this one is {chunk['fmt']}")


def chunk_embeddings(chunks: list[dict], locations: list[np.ndarray], field: str):
    """``(i, embeddings)`` for each chunk ``chunks[i]`` of one input shard (in
    file order, their records' ``locations``), read in one pass of the file."""
    first = chunks[0]
    check_format(first, field)
    path = first["path"]
    if first["fmt"] == "jsonl":
        yield from _jsonl(path, locations, field)
        return
    column = _columnar(path, first["fmt"], field)
    for i, loc in enumerate(locations):
        loc = np.asarray(loc, dtype=np.int64)
        yield i, embeddings_from_column(column.take(loc - 1), path, rows=loc)


def _columnar(path: str, fmt: str, field: str):
    """Column ``field`` of a Parquet or Arrow file, read alone."""
    import pyarrow as pa
    from ..io.arrow import batches_of
    from ..io.parquet import open_parquet
    from ..io.stdin import resolve
    path = resolve(path)
    try:
        if fmt == "parquet":
            pf = open_parquet(path)
            if field not in pf.schema_arrow.names:
                raise InputError(f"{path}: no field {field!r} to read embeddings from")
            return pf.read(columns=[field]).column(field).combine_chunks()
        batches = list(batches_of(path))
    except (OSError, pa.ArrowException) as exc:
        raise InputError(f"{path}: cannot read the embedding field {field!r}: "
                         f"{str(exc).splitlines()[0]}") from exc
    if not batches or field not in batches[0].schema.names:
        raise InputError(f"{path}: no field {field!r} to read embeddings from")
    return pa.concat_arrays([b.column(field) for b in batches])


def _jsonl(path: str, locations: list[np.ndarray], field: str):
    """The JSONL records at ``locations`` (line numbers, ascending), chunk by
    chunk, each line parsed only when one of them is on it."""
    from ..io.jsonl import iter_blocks
    want = [np.asarray(loc, dtype=np.int64) for loc in locations]
    ci, k = 0, 0
    while ci < len(want) and want[ci].size == 0:
        yield ci, embeddings_from_column([], path)
        ci += 1
    rows: list = []
    line = 0
    for block in iter_blocks(path):
        for raw in block.split(b"\n")[:-1] if block.endswith(b"\n") else block.split(b"\n"):
            line += 1
            if ci >= len(want) or line != want[ci][k]:
                continue
            try:
                value = json.loads(raw).get(field)
            except (ValueError, AttributeError):
                raise InputError(f"{path}:{line}: not a JSON object with an embedding "
                                 f"field {field!r}") from None
            rows.append(value)
            k += 1
            if k == want[ci].size:
                yield ci, embeddings_from_column(rows, path, rows=want[ci])
                rows, k = [], 0
                ci += 1
                while ci < len(want) and want[ci].size == 0:
                    yield ci, embeddings_from_column([], path)
                    ci += 1
    if ci < len(want):
        raise InputError(f"{path}: changed while it was read (line {int(want[ci][k])} is "
                         f"gone); run again")
