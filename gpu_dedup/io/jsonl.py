"""JSON Lines shards (plain, ``.gz``, ``.zst``).

Reading parses the whole buffer with Arrow's JSON reader, asking only for the
text and id fields. When Arrow refuses the buffer, or the result does not line
up one record per non-blank line, a line-by-line pass finds the first bad
line and names it; that pass also reads valid files that Arrow's type
inference cannot (ids of mixed types, for example).
"""
from __future__ import annotations

import gzip
import io
import json

import numpy as np
import pyarrow as pa
import pyarrow.json as pj

from ..errors import InputError

_BLOCK = 16 << 20


def compression_of(path: str) -> str | None:
    p = path.lower()
    if p.endswith(".gz"):
        return "gzip"
    if p.endswith(".zst") or p.endswith(".zstd"):
        return "zstd"
    return None


def read_bytes(path: str) -> bytes:
    """The file's bytes, decompressed by its extension."""
    comp = compression_of(path)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    try:
        if comp == "gzip":
            return gzip.decompress(raw)
        if comp == "zstd":
            import zstandard
            with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw)) as r:
                return r.read()
    except Exception as exc:
        raise InputError(f"{path}: corrupt or unreadable {comp} data ({exc})") from exc
    return raw


def compress_bytes(data: bytes, comp: str | None) -> bytes:
    if comp == "gzip":
        return gzip.compress(data, compresslevel=6, mtime=0)
    if comp == "zstd":
        import zstandard
        return zstandard.ZstdCompressor(level=3).compress(data)
    return data


def _replace_invalid_utf8(raw: bytes) -> tuple[bytes, int]:
    """Replace invalid UTF-8 with U+FFFD; count the lines that had any."""
    bad = 0
    out = []
    for line in raw.split(b"\n"):
        try:
            line.decode("utf-8")
            out.append(line)
        except UnicodeDecodeError:
            bad += 1
            out.append(line.decode("utf-8", errors="replace").encode("utf-8"))
    return b"\n".join(out), bad


def line_spans(raw: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(starts, ends, line_numbers)`` of the non-blank lines (1-based numbers)."""
    buf = np.frombuffer(raw, dtype=np.uint8)
    nl = np.flatnonzero(buf == 10)
    starts = np.concatenate([[0], nl + 1]).astype(np.int64)
    ends = np.concatenate([nl, [buf.size]]).astype(np.int64)
    ws = (buf == 32) | (buf == 9) | (buf == 13) | (buf == 10)
    cs = np.concatenate([[0], np.cumsum(~ws, dtype=np.int64)])
    nonblank = (cs[ends] - cs[starts]) > 0
    idx = np.flatnonzero(nonblank)
    return starts[idx], ends[idx], idx + 1


def _fast_column(raw: bytes, field: str, types) -> pa.Array | None:
    """Parse one field of every record with Arrow, or None if Arrow refuses."""
    for typ in types:
        try:
            t = pj.read_json(pa.py_buffer(raw),
                             read_options=pj.ReadOptions(block_size=_BLOCK, use_threads=True),
                             parse_options=pj.ParseOptions(
                                 explicit_schema=pa.schema([(field, typ)]),
                                 unexpected_field_behavior="ignore"))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError):
            continue
        return t.column(field).combine_chunks()
    return None


def _slow_parse(path: str, raw: bytes, starts, ends, lines, text_field: str, id_field: str | None):
    """Line by line: the texts and ids, or an InputError naming the first bad line."""
    texts = []
    ids = []
    any_id = False
    for s, e, ln in zip(starts.tolist(), ends.tolist(), lines.tolist()):
        chunk = raw[s:e]
        try:
            rec = json.loads(chunk)
        except ValueError as exc:
            msg = str(exc).split(":")[0]
            raise InputError(f"{path}:{ln}: malformed JSON ({msg})") from None
        if not isinstance(rec, dict):
            raise InputError(f"{path}:{ln}: expected a JSON object, got {type(rec).__name__}")
        if text_field not in rec:
            raise InputError(f"{path}:{ln}: missing text field {text_field!r}")
        t = rec[text_field]
        if not isinstance(t, str):
            kind = "null" if t is None else type(t).__name__
            raise InputError(f"{path}:{ln}: field {text_field!r} is not a string ({kind})")
        texts.append(t)
        if id_field is not None:
            v = rec.get(id_field)
            if v is not None:
                any_id = True
                if isinstance(v, (dict, list)):
                    raise InputError(f"{path}:{ln}: field {id_field!r} must be a string or a number")
                v = json.dumps(v) if isinstance(v, bool) else str(v)
            ids.append(v)
    id_arr = None
    if any_id:
        for ln, v in zip(lines.tolist(), ids):
            if v is None:
                raise InputError(f"{path}:{ln}: missing id field {id_field!r} "
                                 f"(other records of this file have one)")
        id_arr = pa.array(ids, type=pa.large_string())
    return pa.array(texts, type=pa.large_string()), id_arr


def read_jsonl(path: str, text_field: str, id_field: str | None):
    """Read a JSONL shard.

    Returns ``(raw, starts, ends, line_numbers, texts, ids_or_None, invalid_utf8_lines)``.
    """
    raw = read_bytes(path)
    invalid = 0
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        raw, invalid = _replace_invalid_utf8(raw)
    starts, ends, lines = line_spans(raw)
    n = lines.size
    texts = ids = None
    ok = False
    if n:
        texts = _fast_column(raw, text_field, [pa.large_string()])
        if texts is not None and len(texts) == n and texts.null_count == 0:
            ok = True
            if id_field is not None:
                ids = _fast_column(raw, id_field, [pa.large_string(), pa.int64()])
                if ids is None or len(ids) != n:
                    ok = False
                elif ids.null_count == n:
                    ids = None
                elif ids.null_count:
                    ok = False
                elif ids.type != pa.large_string():
                    ids = ids.cast(pa.large_string())
    else:
        texts = pa.array([], type=pa.large_string())
        ok = True
    if not ok:
        texts, ids = _slow_parse(path, raw, starts, ends, lines, text_field, id_field)
    return raw, starts, ends, lines, texts, ids, invalid


def write_jsonl_rows(raw: bytes, starts, ends, keep: np.ndarray, path: str, comp: str | None):
    """Write the kept records' original lines, byte for byte, to ``path``."""
    mv = memoryview(raw)
    idx = np.flatnonzero(keep)
    parts = [mv[s:e] for s, e in zip(starts[idx].tolist(), ends[idx].tolist())]
    body = b"\n".join(parts) + (b"\n" if parts else b"")
    with open(path, "wb") as f:
        f.write(compress_bytes(body, comp))
