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
    chunk: a block of lines is parsed at once by Arrow's JSON reader, or line
    by line where it cannot be (a line that is not JSON, a value that is not
    a list of numbers: the check then names the line)."""
    from ..io.jsonl import iter_blocks
    want = [np.asarray(loc, dtype=np.int64) for loc in locations]
    ci = 0
    pieces: list = []           # the current chunk's values, block by block
    got = 0
    line = 0
    for block in iter_blocks(path):
        lines = block.split(b"\n")
        if block.endswith(b"\n"):
            lines.pop()
        first, line = line + 1, line + len(lines)
        while ci < len(want):
            loc = want[ci]
            hi = got + int(np.searchsorted(loc[got:], line, side="right"))
            if hi > got:
                pieces.append(_values(path, lines, first, loc[got:hi], field))
            got = hi
            if got < loc.size:
                break
            yield ci, _checked(pieces, path, loc)
            ci, pieces, got = ci + 1, [], 0
    while ci < len(want) and want[ci].size == 0:
        yield ci, _checked([], path, want[ci])
        ci += 1
    if ci < len(want):
        raise InputError(f"{path}: changed while it was read (line {int(want[ci][got])} is "
                         f"gone); run again")


def _values(path: str, lines: list, first: int, numbers: np.ndarray, field: str):
    """The values of ``field`` on lines ``numbers`` of a block whose lines
    ``lines`` start at line ``first``: an Arrow list array, or (where Arrow's
    reader cannot take the block) a Python list."""
    import io

    import pyarrow as pa
    import pyarrow.json as pj
    blank = np.array([not x.strip() for x in lines], dtype=bool)
    try:
        table = pj.read_json(io.BytesIO(b"\n".join(lines)), parse_options=pj.ParseOptions(
            explicit_schema=pa.schema([(field, pa.list_(pa.float64()))]),
            unexpected_field_behavior="ignore"))
        if table.num_rows == int((~blank).sum()):
            row = np.cumsum(~blank) - 1              # a non-blank line's row
            return table.column(field).combine_chunks().take(row[numbers - first])
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    out = []
    for n in numbers:
        try:
            out.append(json.loads(lines[int(n) - first]).get(field))
        except (ValueError, AttributeError):
            raise InputError(f"{path}:{int(n)}: not a JSON object with an embedding "
                             f"field {field!r}") from None
    return out


def _checked(pieces: list, path: str, loc: np.ndarray) -> np.ndarray:
    """A chunk's embeddings from its pieces, checked, rows named by line."""
    import pyarrow as pa
    if pieces and all(isinstance(p, pa.Array) for p in pieces):
        values = pa.concat_arrays(pieces)
    else:
        values = [v for p in pieces for v in (p.to_pylist() if isinstance(p, pa.Array) else p)]
    return embeddings_from_column(values, path, rows=loc)
