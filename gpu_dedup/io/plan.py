"""Read plans: the inputs cut into units that can be read independently, in
document order, and the measured size of the text each input will produce.

:func:`plan_reads` groups the inputs into shards as
:func:`gpu_dedup.io.sources.read_corpus` does and cuts each into units: a
whole shard (``whole``), a newline-aligned byte range of an uncompressed JSONL
file (``bytes``), some row groups of a Parquet file (``rowgroups``), or a
compressed JSONL file to be cut into chunks while it is decompressed
(``stream``, see :func:`stream_chunks`). :func:`read_piece` reads one unit of
the first three kinds; :func:`parse_jsonl_piece` parses one chunk of a
stream. Every record keeps the location (line, row or file number) a whole
read gives it, so :func:`location` and :func:`generated_ids` (both from
:mod:`gpu_dedup.io.sources`) say what :class:`gpu_dedup.io.sources.Shard` says.

:func:`input_bytes` measures how much text an input holds (from file sizes,
compressed-format trailers and headers, or Parquet metadata), which is what
a choice between an in-memory and an out-of-core run needs.
"""
from __future__ import annotations

import os

import numpy as np
import zstandard

from ..errors import InputError
from .arrow import datasets_files, is_datasets_folder
from .compression import compression_of
from .jsonl import BLOCK_BYTES, BOM, ShardReadState, TextSink, iter_blocks, parse_block
from .jsonl_scan import scanned
from .fs import getsize, is_url, open_binary
from .parquet import open_parquet, read_parquet_shard
from .sources import format_of, generated_ids, group_inputs, read_shard, record_location
from .stdin import resolve
from .txt import list_txt

#: Estimated decompressed bytes per compressed byte where a file does not say.
COMPRESSED_RATIO = 5
_ISIZE_WRAP = 1 << 32
#: Deflate never expands data more than about 1032 times.
_DEFLATE_MAX_RATIO = 1032
_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_SKIPPABLE = (0x184D2A50, 0x184D2A5F)
#: Zstandard blocks walked to sum a file's frames before falling back to an
#: estimate (at the usual 128 KiB per block, about 8 GiB of compressed data).
_ZSTD_MAX_BLOCKS = 1 << 16


# ---------------------------------------------------------------------------
# planning
# ---------------------------------------------------------------------------

def plan_jsonl_ranges(path: str, chunk_bytes: int) -> list[tuple[int, int, int]]:
    """``(start, stop, lines_before)`` of newline-aligned byte ranges: a range
    ends after the first newline at or past ``start + chunk_bytes - 1``."""
    path = resolve(path)
    size = getsize(path)
    out = []
    start = 0
    lines = 0
    with open_binary(path) as f:
        while start < size:
            target = start + chunk_bytes - 1
            stop = size
            if target < size:
                f.seek(target)
                pos = target
                while True:
                    block = f.read(1 << 20)
                    if not block:
                        break
                    nl = block.find(b"\n")
                    if nl >= 0:
                        stop = pos + nl + 1
                        break
                    pos += len(block)
            out.append((start, stop, lines))
            f.seek(start)
            left = stop - start
            while left:
                block = f.read(min(left, 16 << 20))
                if not block:
                    break
                lines += block.count(b"\n")
                left -= len(block)
            start = stop
    return out


def plan_reads(paths: list[str], chunk_bytes: int) -> list[dict]:
    """The read units of the inputs, in document order.

    Inputs are grouped into shards as :func:`gpu_dedup.io.sources.read_corpus`
    groups them. A unit is one chunk of a shard (``whole``: the shard through
    :func:`gpu_dedup.io.sources.read_shard`; ``bytes``: a newline-aligned
    range of an uncompressed JSONL file; ``rowgroups``: some row groups of a
    Parquet file; ``batches``: some record batches of an Arrow IPC file, or
    of one data file of a ``datasets`` folder) or a compressed JSONL file cut
    into chunks while it is decompressed (``stream``).

    Every unit has ``file`` (shard index), ``path``, ``fmt``, ``files`` (the
    text files of a text shard, else None), ``kind``, ``chunk`` (its number
    in the file) and ``order``; ``bytes`` units add ``start``,
    ``stop`` and ``line_base`` (lines before ``start``), ``rowgroups`` units
    ``row_groups`` and ``row_base`` (rows before them), ``batches`` units
    ``ipc`` (the file), ``batches`` and ``row_base``, ``stream`` units
    ``compression``.
    """
    units = []
    for fi, (path, files) in enumerate(group_inputs(paths)):
        fmt = format_of(path) if files is None else "txt"
        base = {"file": fi, "path": path, "fmt": fmt, "files": files}
        if fmt == "jsonl":
            size = getsize(path)
            comp = compression_of(path)
            if comp is None and size > chunk_bytes:
                for k, (a, b, lines) in enumerate(plan_jsonl_ranges(path, chunk_bytes)):
                    units.append({**base, "kind": "bytes", "start": a, "stop": b,
                                  "line_base": lines, "chunk": k})
                continue
            if comp is not None and size * 4 > chunk_bytes:
                units.append({**base, "kind": "stream", "compression": comp, "chunk": 0})
                continue
        elif fmt == "parquet":
            try:
                md = open_parquet(path).metadata
                sizes = [md.row_group(i).total_byte_size for i in range(md.num_row_groups)]
                rows = [md.row_group(i).num_rows for i in range(md.num_row_groups)]
            except InputError:           # read whole: read_shard reports it in order
                sizes = []
            if len(sizes) > 1 and sum(sizes) > chunk_bytes:
                groups, cur, acc = [], [], 0
                for i, sz in enumerate(sizes):
                    if cur and acc + sz > chunk_bytes:
                        groups.append(cur)
                        cur, acc = [], 0
                    cur.append(i)
                    acc += sz
                groups.append(cur)
                row_base = 0
                for k, g in enumerate(groups):
                    units.append({**base, "kind": "rowgroups", "row_groups": g,
                                  "row_base": row_base, "chunk": k})
                    row_base += sum(rows[i] for i in g)
                continue
        elif fmt in ("arrow", "datasets"):
            got = _ipc_units(base, path, fmt, chunk_bytes)
            if got:
                units += got
                continue
        units.append({**base, "kind": "whole", "chunk": 0})
    for i, u in enumerate(units):
        u["order"] = i
        u["bytes"] = _unit_bytes(u)
    return units


def _ipc_units(base: dict, path: str, fmt: str, chunk_bytes: int) -> list[dict]:
    """Record-batch units of an IPC shard larger than a chunk (none: read it
    whole, which also reports a broken file in order)."""
    from .arrow import batch_sizes
    try:
        files = ([os.path.join(path, f) for f in datasets_files(path)] if fmt == "datasets"
                 else [path])
        sizes = [(f, batch_sizes(f)) for f in files]
    except (InputError, OSError):
        return []
    if sum(b for _, bs in sizes for _, b in bs) <= chunk_bytes:
        return []
    units, rows = [], 0
    for f, bs in sizes:
        cur, acc, start = [], 0, rows
        for i, (n, b) in enumerate(bs):
            if cur and acc + b > chunk_bytes:
                units.append({**base, "kind": "batches", "ipc": f, "batches": cur,
                              "row_base": start, "nbytes": acc})
                cur, acc, start = [], 0, rows
            cur.append(i)
            acc += b
            rows += n
        if cur:
            units.append({**base, "kind": "batches", "ipc": f, "batches": cur,
                          "row_base": start, "nbytes": acc})
    for k, u in enumerate(units):
        u["chunk"] = k
    return units


def _unit_bytes(u: dict) -> int:
    """The input bytes a read unit reads (for progress)."""
    try:
        if u["kind"] == "bytes":
            return int(u["stop"] - u["start"])
        if u["kind"] == "batches":
            return int(u["nbytes"])
        if u["kind"] == "rowgroups":
            md = open_parquet(u["path"]).metadata
            return int(sum(md.row_group(i).total_byte_size for i in u["row_groups"]))
        if u["files"] is not None:
            return int(sum(os.path.getsize(os.path.join(u["path"], f)) for f in u["files"]))
        if is_datasets_folder(u["path"]):
            return int(sum(os.path.getsize(os.path.join(u["path"], f))
                           for f in datasets_files(u["path"])))
        return int(getsize(resolve(u["path"])))
    except (OSError, InputError, ValueError):
        return 0


# ---------------------------------------------------------------------------
# reading units
# ---------------------------------------------------------------------------

def sub_blocks(raw: bytes, size: int = BLOCK_BYTES):
    """``raw`` cut into pieces that end at a newline (the last one may not):
    each ends at the last newline within ``size`` bytes of its start, or, for
    a line longer than that, at that line's end."""
    n = len(raw)
    pos = 0
    while pos < n:
        end = pos + size
        if end >= n:
            yield raw[pos:]
            return
        nl = raw.rfind(b"\n", pos, end)
        if nl < 0:
            nl = raw.find(b"\n", end)
            if nl < 0:
                yield raw[pos:]
                return
        yield raw[pos:nl + 1]
        pos = nl + 1


def parse_jsonl_piece(path: str, blocks, lines_before: int, text_field: str,
                      id_field: str | None, on_bad_record: str = "error",
                      size: int | None = None) -> dict:
    """A newline-aligned piece of a JSONL file, parsed block by block with
    :func:`gpu_dedup.io.jsonl.parse_block`; line numbers continue from
    ``lines_before``; from its second block on, the next block is scanned
    while this one is parsed (:func:`gpu_dedup.io.jsonl_scan.scanned`).

    ``size``: the bytes of the blocks, when known (their texts and ids are
    then gathered in one buffer each as they are parsed: :class:`TextSink`).

    Returns texts, ids (nulls where a record has none; None when no record
    has one), line numbers, the invalid-UTF-8 count, the skipped records,
    the first line without an id, and the number of lines read.
    """
    st = ShardReadState(path, text_field, id_field, on_bad_record, texts=TextSink(size),
                        ids=TextSink(size))
    st.line_base = lines_before
    for sc in scanned(blocks):
        parse_block(sc, st)
    texts = st.texts.array()
    lines = np.concatenate(st.lines) if st.lines else np.zeros(0, np.int64)
    ids = None
    first_missing = None
    if id_field is not None and len(st.ids):
        ids = st.ids.array()
        if ids.null_count == len(ids):
            ids = None
        elif ids.null_count:
            miss = np.flatnonzero(ids.is_null().to_numpy(zero_copy_only=False))
            first_missing = int(lines[miss[0]])
    invalid = int(sum(int(np.count_nonzero(r)) for r in st.replaced))   # a flag per record
    return {"texts": texts, "ids": ids, "lines": lines, "invalid": invalid,
            "skipped": list(st.skipped), "first_missing_id": first_missing,
            "lines_read": st.line_base - lines_before}


def stream_chunks(path: str, chunk_bytes: int):
    """Consecutive blocks of :func:`gpu_dedup.io.jsonl.iter_blocks` grouped
    into chunks of at least ``chunk_bytes``; yields ``(k, blocks)``."""
    k = 0
    cur, size = [], 0
    for block in iter_blocks(path, min(chunk_bytes, BLOCK_BYTES)):
        cur.append(block)
        size += len(block)
        if size >= chunk_bytes:
            yield k, cur
            k += 1
            cur, size = [], 0
    if cur or k == 0:
        yield k, cur


def read_parquet_groups(path: str, row_groups: list[int], row_base: int, text_field: str,
                        id_field: str | None, on_bad_record: str = "error") -> dict:
    """Some row groups of a Parquet file, read and checked as
    :func:`gpu_dedup.io.parquet.read_parquet_shard` reads a whole file; rows
    are numbered from ``row_base + 1``."""
    d = read_parquet_shard(path, text_field, id_field, on_bad_record, row_groups=row_groups,
                           row_base=row_base)
    return {"texts": d.texts, "ids": d.ids, "lines": d.rows, "invalid": 0,
            "skipped": d.skipped, "first_missing_id": None, "compression": d.compression}


def read_piece(unit: dict, text_field: str, id_field: str | None,
               on_bad_record: str = "error") -> dict:
    """Read one ``whole``, ``bytes``, ``rowgroups`` or ``batches`` unit of
    :func:`plan_reads`.

    Returns ``texts``, ``ids`` (None when the shard has none), ``lines`` (the
    location of each record), ``invalid`` (records whose invalid UTF-8 was
    replaced), ``skipped`` (``(location, reason)``), ``compression``,
    ``path`` (the shard's path: a text shard's folder), ``files`` (a text
    shard's files, else None), ``generated`` (the ids to use when the shard
    has none, else None) and ``first_missing_id`` (a ``bytes`` piece of a
    file whose other records have ids: the first line without one); a
    ``bytes`` unit adds ``lines_read``. Raises
    :class:`gpu_dedup.errors.InputError` for bad input.
    """
    kind = unit["kind"]
    path = resolve(unit["path"])
    if kind == "whole":
        sh = read_shard(path, text_field, id_field, on_bad_record, files=unit["files"])
        return {"texts": sh.texts, "ids": sh.ids, "lines": sh.locations,
                "invalid": sh.invalid_utf8, "skipped": sh.skipped,
                "compression": sh.compression, "path": sh.path, "files": sh.files,
                "generated": sh.generated_ids() if sh.ids is None else None,
                "first_missing_id": None}
    if kind == "bytes":
        with open_binary(path) as f:
            f.seek(unit["start"])
            raw = f.read(unit["stop"] - unit["start"])
        if unit["start"] == 0 and raw.startswith(BOM):
            raw = raw[len(BOM):]
        d = parse_jsonl_piece(path, sub_blocks(raw), unit["line_base"], text_field, id_field,
                              on_bad_record, size=len(raw))
        del raw
        d.update(path=path, compression=None, files=None)
    elif kind == "batches":
        from .arrow import read_arrow_batches
        d = read_arrow_batches(unit["ipc"], unit["batches"], unit["row_base"], text_field,
                               id_field, on_bad_record)
        d = {"texts": d.texts, "ids": d.ids, "lines": d.rows, "invalid": 0,
             "skipped": d.skipped, "first_missing_id": None, "compression": None,
             "path": path, "files": None}
    elif kind == "rowgroups":
        d = read_parquet_groups(path, unit["row_groups"], unit["row_base"], text_field,
                                id_field, on_bad_record)
        d.update(path=path, files=None)
    else:
        raise ValueError(f"read_piece reads whole, bytes and rowgroups units, not {kind!r}; "
                         f"read a stream with stream_chunks and parse_jsonl_piece")
    d["generated"] = generated_ids(path, d["lines"]) if d["ids"] is None else None
    return d


def location(meta: dict, loc: int) -> str:
    """Where a record is (:func:`gpu_dedup.io.sources.record_location`);
    ``meta`` is a unit of :func:`plan_reads` (or anything with its ``fmt``,
    ``path`` and ``files``)."""
    return record_location(meta["fmt"], meta["path"], loc, meta.get("files"))


# ---------------------------------------------------------------------------
# measured sizes
# ---------------------------------------------------------------------------

def input_bytes(path: str, files: list[str] | None = None) -> int:
    """The bytes of text an input will produce, measured without reading it:

    * an uncompressed file: its size;
    * a text folder (``files``: the ``.txt`` files of a text shard, relative
      to ``path``; default: all of them): the sum of the files' sizes;
    * gzip: the ISIZE trailer (the size modulo 2**32). Where it cannot be
      the size, :data:`COMPRESSED_RATIO` times the file size: a file of 4 GiB
      or more, a trailer smaller than the file (several members) or beyond
      deflate's largest ratio, and, as a floor, a file large enough (over
      about 819 MiB) that the trailer may have wrapped;
    * zstd: the sum of the frames' content sizes from their headers, or
      :data:`COMPRESSED_RATIO` times the file size when a frame does not
      record it;
    * a compressed name whose data does not start with that format's magic
      bytes: the file size (the readers report the corrupt data);
    * Parquet: the sum of the row groups' ``total_byte_size`` (uncompressed,
      every column).

    An input that cannot be measured counts its file size, one that does not
    exist 0 (the readers report it).
    """
    path = resolve(path)
    try:
        if files is not None:
            return sum(os.path.getsize(os.path.join(path, f)) for f in files)
        if is_datasets_folder(path):
            return sum(os.path.getsize(os.path.join(path, f)) for f in datasets_files(path))
        if os.path.isdir(path):
            return sum(os.path.getsize(os.path.join(path, f)) for f in list_txt(path))
        size = getsize(path)
    except (OSError, InputError):
        return 0
    fmt = format_of(path)
    try:
        if fmt == "parquet":
            md = open_parquet(path).metadata
            return int(sum(md.row_group(i).total_byte_size for i in range(md.num_row_groups)))
        if fmt == "jsonl":
            comp = compression_of(path)
            if comp == "gzip":
                return _gzip_bytes(path, size)
            if comp == "zstd":
                return _zstd_bytes(path, size)
    except (InputError, OSError, ValueError, zstandard.ZstdError):
        return size                      # corrupt metadata: the readers report it
    return size


def input_records(path: str, files: list[str] | None = None) -> int | None:
    """The documents an input holds, where counting them costs a read of a
    small local file at most: a text shard's files, an uncompressed JSONL
    file's lines (blank ones included: a bound from above), a Parquet
    file's rows (its footer); None for the others (compressed, remote or
    Arrow inputs) and for an input that cannot be read (the readers report
    it)."""
    if files is not None:
        return len(files)
    if is_url(path):
        return None
    fmt = format_of(path)
    path = resolve(path)
    try:
        if fmt == "parquet":
            return int(open_parquet(path).metadata.num_rows)
        if fmt != "jsonl" or os.path.isdir(path) or compression_of(path) is not None:
            return None
        with open_binary(path) as f:        # a regular file, or refused
            data = f.read()
    except (InputError, OSError, ValueError):
        return None
    return data.count(b"\n") + (bool(data) and not data.endswith(b"\n"))


def _gzip_bytes(path: str, size: int) -> int:
    guess = COMPRESSED_RATIO * size
    with open_binary(path) as f:
        if f.read(2) != b"\x1f\x8b" or size < 18:
            return size                        # not gzip: the reader reports it
        if size >= _ISIZE_WRAP:
            return guess
        f.seek(size - 4)
        isize = int.from_bytes(f.read(4), "little")
    if isize < size or isize > size * _DEFLATE_MAX_RATIO:
        return guess
    if guess >= _ISIZE_WRAP:
        return max(isize, guess)
    return isize


def _zstd_bytes(path: str, size: int) -> int:
    guess = COMPRESSED_RATIO * size
    total = 0
    blocks = 0
    with open_binary(path) as f:
        pos = 0
        while pos < size:
            f.seek(pos)
            head = f.read(18)
            if len(head) < 8:
                return guess
            magic = int.from_bytes(head[:4], "little")
            if _ZSTD_SKIPPABLE[0] <= magic <= _ZSTD_SKIPPABLE[1]:
                pos += 8 + int.from_bytes(head[4:8], "little")
                continue
            if magic != _ZSTD_MAGIC:
                return guess if total else size    # not zstd: the reader reports it
            params = zstandard.get_frame_parameters(head)
            if params.content_size == zstandard.CONTENTSIZE_UNKNOWN:
                return guess
            total += int(params.content_size)
            pos += zstandard.frame_header_size(head)
            while True:                       # the frame's blocks
                f.seek(pos)
                bh = f.read(3)
                if len(bh) < 3:
                    return guess
                v = int.from_bytes(bh, "little")
                btype = (v >> 1) & 3
                if btype == 3:
                    return guess
                pos += 3 + (1 if btype == 1 else v >> 3)
                blocks += 1
                if blocks > _ZSTD_MAX_BLOCKS:
                    return max(total, guess)
                if v & 1:
                    break
            if params.has_checksum:
                pos += 4
    return total


__all__ = ["plan_jsonl_ranges", "plan_reads", "sub_blocks", "parse_jsonl_piece",
           "stream_chunks", "read_parquet_groups", "read_piece", "location",
           "generated_ids", "input_bytes", "COMPRESSED_RATIO"]
