"""One JSON Lines record, the slow and exact way: :func:`parse_record` reads
a line with Python's :mod:`json` and says, in one :class:`BadRecord`
message, what is wrong with a bad one (the kind of a field that is not a
string, the place of a syntax error).

A record nested too deeply for Python's parser is read by Arrow instead
(:func:`_arrow_one`): its text and id by their types first, which Arrow
reads at any depth, as the block reader does; only when that fails are the
fields' types inferred, which recurses once per level on the thread's stack
and is therefore asked only of records nested at most :data:`MAX_DEPTH`
deep. Deeper ones are bad records.
"""
from __future__ import annotations

import json
import re

import numpy as np
import pyarrow as pa
import pyarrow.json as pj

_SURROGATE = re.compile("[\ud800-\udfff]")


def one_line(exc) -> str:
    """An exception's whole message on one line."""
    return " ".join(str(exc).split())


class BadRecord(Exception):
    """A line that is not a valid record; the message says why."""


def _clean_str(s: str) -> tuple[str, bool]:
    """Lone surrogates (from ``\\udXXX`` escapes) replaced by U+FFFD."""
    if _SURROGATE.search(s) is None:
        return s, False
    return _SURROGATE.sub("\ufffd", s), True


#: The deepest nesting of arrays and objects (the record's own object
#: counted) a record may have when the line-by-line parser must ask Arrow to
#: type its fields: Arrow's type inference recurses once per level on the
#: thread's stack.
MAX_DEPTH = 1024
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')


def nesting_depth(line: bytes) -> int:
    """How deep arrays and objects nest in one JSON line (brackets inside
    strings not counted)."""
    if line.count(b"[") + line.count(b"{") <= 1:
        return int(b"[" in line or b"{" in line)
    bare = np.frombuffer(_JSON_STRING.sub(b'""', line), dtype=np.uint8)
    step = ((bare == 91) | (bare == 123)).astype(np.int32)
    step -= ((bare == 93) | (bare == 125)).astype(np.int32)
    return int(np.cumsum(step).max(initial=0))


def _arrow_one(line: bytes, text_field: str, id_field: str | None) -> dict:
    """Parse one ``{...}`` line with Arrow; only for objects nested too deeply
    for Python's parser. The text (and id) are asked for by type first, which
    Arrow reads at any depth; when that fails, the fields' types are inferred,
    which only records nested at most :data:`MAX_DEPTH` deep may ask."""
    ro = pj.ReadOptions(block_size=max(len(line) + 2, 1 << 16), use_threads=False)
    null_text = False
    id_types = [None]
    if id_field is not None and id_field != text_field:
        id_types = [pa.large_string(), pa.int64(), pa.float64(), pa.bool_()]
    for typ in id_types:
        fields = [(text_field, pa.large_string())] + ([] if typ is None else [(id_field, typ)])
        try:
            t = pj.read_json(pa.py_buffer(line + b"\n"), read_options=ro,
                             parse_options=pj.ParseOptions(explicit_schema=pa.schema(fields),
                                                           unexpected_field_behavior="ignore"))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            continue
        if t.num_rows != 1:
            break
        if t.column(text_field)[0].as_py() is None:
            null_text = True
            break
        row = {text_field: t.column(text_field)[0].as_py()}
        if typ is not None and t.column(id_field)[0].as_py() is not None:
            row[id_field] = t.column(id_field)[0].as_py()
        elif id_field == text_field:
            row[id_field] = row[text_field]
        return row
    depth = nesting_depth(line)
    if depth > MAX_DEPTH:
        if null_text:
            raise BadRecord(f"field {text_field!r} is missing or null")
        raise BadRecord(f"nested too deeply (arrays and objects {depth} levels deep; "
                        f"at most {MAX_DEPTH} are read)")
    try:
        t = pj.read_json(pa.py_buffer(line + b"\n"), read_options=ro,
                         parse_options=pj.ParseOptions(unexpected_field_behavior="infer"))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise BadRecord(f"malformed JSON ({one_line(exc)})") from None
    if t.num_rows != 1:
        raise BadRecord("malformed JSON (more than one value on the line)")
    row = {}
    for name in (text_field, id_field):
        if name is not None and name in t.column_names:
            col = t.column(name)
            if pa.types.is_struct(col.type):
                v = {}
            elif pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
                v = []
            else:
                v = col[0].as_py()
            row[name] = v
    return row


def parse_record(line: bytes, text_field: str, id_field: str | None):
    """``(text, id_or_None, replaced)`` of one non-blank line, or
    :class:`BadRecord`. ``replaced`` tells whether lone surrogates were
    replaced."""
    try:
        rec = json.loads(line.decode("utf-8"))
    except RecursionError:
        stripped = line.strip(b" \t\r")
        if not (stripped.startswith(b"{") and stripped.endswith(b"}")):
            raise BadRecord("malformed JSON (nested too deeply)") from None
        rec = _arrow_one(stripped, text_field, id_field)
    except ValueError as exc:
        raise BadRecord(_malformed(line, exc)) from None
    if not isinstance(rec, dict):
        raise BadRecord(f"expected a JSON object, got {_kind(rec)}")
    if text_field not in rec:
        raise BadRecord(f"missing text field {text_field!r}")
    t = rec[text_field]
    if not isinstance(t, str):
        raise BadRecord(f"field {text_field!r} is not a string ({_kind(t)})")
    t, replaced = _clean_str(t)
    v = None
    if id_field is not None:
        v = rec.get(id_field)
        if v is not None:
            if isinstance(v, (dict, list)):
                raise BadRecord(f"field {id_field!r} must be a string or a number, "
                                f"got {_kind(v)}")
            if isinstance(v, bool):
                v = "true" if v else "false"
            elif isinstance(v, str):
                v, r2 = _clean_str(v)
                replaced = replaced or r2
            else:
                v = str(v)
    return t, v, replaced


#: Characters of the record quoted on either side of a JSON error.
_QUOTE_CHARS = 40


def _malformed(line: bytes, exc: ValueError) -> str:
    """``malformed JSON (<the decoder's whole message>) near '<excerpt>'``:
    the message keeps the line and column; only the quoted record text is
    abbreviated, to ``_QUOTE_CHARS`` characters either side of the error."""
    msg = f"malformed JSON ({one_line(exc)})"
    pos = getattr(exc, "pos", None)
    text = getattr(exc, "doc", None)
    if pos is None or not isinstance(text, str) or not text:
        return msg
    pos = min(max(int(pos), 0), len(text))
    a = max(pos - _QUOTE_CHARS, 0)
    b = min(pos + _QUOTE_CHARS, len(text))
    excerpt = ("..." if a else "") + text[a:b] + ("..." if b < len(text) else "")
    return f"{msg} near {excerpt!r}"


def _kind(v) -> str:
    if v is None:
        return "null"
    return {dict: "object", list: "array", str: "string", bool: "boolean",
            int: "number", float: "number"}.get(type(v), type(v).__name__)
