"""Property: fed random bytes and random JSON lines, the readers either return
every valid record (and, skipping, list every bad one) or raise the
documented :class:`InputError` naming the first bad line; nothing else.

The oracle below reads the same bytes line by line with Python's :mod:`json`,
straight from the documented rules, independently of the reader's Arrow path.
"""
from __future__ import annotations

import gzip
import json
import re

import pytest
import zstandard
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gpu_dedup.errors import InputError
from gpu_dedup.io.jsonl import read_jsonl_shard
from gpu_dedup.io.parquet import read_parquet_shard

SETTINGS = settings(max_examples=120, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])
_SURR = re.compile("[\ud800-\udfff]")


def oracle(data: bytes, id_field):
    """``(records, bad)``: records ``(line, text, id, replaced)`` and bad
    lines ``(line, stage)`` with stage 0 for a bad line and 1 for a missing id."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    recs, bad = [], []
    for ln, raw in enumerate(data.split(b"\n"), 1):
        try:
            s = raw.decode("utf-8")
            invalid = False
        except UnicodeDecodeError:
            s = raw.decode("utf-8", "replace")
            invalid = True
        if not s.strip(" \t\r"):
            continue
        try:
            rec = json.loads(s)
        except ValueError:
            bad.append((ln, 0))
            continue
        if not isinstance(rec, dict) or not isinstance(rec.get("text", 0), str):
            bad.append((ln, 0))
            continue
        text = rec["text"]
        rid = rec.get(id_field) if id_field else None
        if isinstance(rid, (dict, list)):
            bad.append((ln, 0))
            continue
        if isinstance(rid, bool):
            rid = "true" if rid else "false"
        elif rid is not None and not isinstance(rid, str):
            rid = str(rid)
        replaced = invalid or bool(_SURR.search(text)) or bool(
            isinstance(rid, str) and _SURR.search(rid))
        text = _SURR.sub("\ufffd", text)
        rid = _SURR.sub("\ufffd", rid) if isinstance(rid, str) else rid
        recs.append((ln, text, rid, replaced))
    if any(r[2] is not None for r in recs):
        bad += [(r[0], 1) for r in recs if r[2] is None]
        recs = [r for r in recs if r[2] is not None]
    return recs, bad


def check(path: str, data: bytes, id_field, block_bytes: int):
    recs, bad = oracle(data, id_field)
    # error mode: every valid record, or the documented error at the first bad line
    first_bad = min((b for b in bad if b[1] == 0), default=None) or min(bad, default=None)
    try:
        d = read_jsonl_shard(path, "text", id_field, "error", block_bytes)
    except InputError as exc:
        assert first_bad is not None, f"unexpected error: {exc}"
        assert str(exc).startswith(f"{path}:{first_bad[0]}: "), (str(exc), first_bad)
        assert "\n" not in str(exc)
    else:
        assert first_bad is None, f"missed bad line {first_bad}"
        _same(d, recs)
    # skip mode: every valid record, every bad line listed
    d = read_jsonl_shard(path, "text", id_field, "skip", block_bytes)
    _same(d, recs)
    assert [ln for ln, _ in d.skipped] == sorted(b[0] for b in bad)


def _same(d, recs):
    assert d.lines.tolist() == [r[0] for r in recs]
    assert d.texts.to_pylist() == [r[1] for r in recs]
    ids = [r[2] for r in recs]
    if any(i is not None for i in ids):
        assert d.ids is not None and d.ids.to_pylist() == ids
    else:
        assert d.ids is None
    assert d.invalid_utf8 == sum(r[3] for r in recs)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                  max_size=3),
    max_leaves=6)

texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
ids = st.one_of(st.none(), st.text(max_size=6), st.integers(-5, 10**20), st.booleans(),
                st.floats(allow_nan=False, allow_infinity=False, width=32))


@st.composite
def records(draw):
    rec = {}
    if draw(st.booleans()):
        rec["meta"] = draw(json_values)
    rec["text"] = draw(texts)
    i = draw(ids)
    if i is not None or draw(st.booleans()):
        rec["id"] = i
    keys = list(rec)
    order = draw(st.permutations(keys))
    return json.dumps({k: rec[k] for k in order}, ensure_ascii=draw(st.booleans())).encode()


SPECIAL = [b"", b"   ", b"\t\r", b"null", b"{}", b"[]", b'"text"', b"{", b"}",
           b'{"text": "a"}{"text": "b"}', b'{"text": "a", "x": Inf}', b'{"text": "a", "x": -Inf}',
           b'{"text": "a", "x": NaN}', b'{"text": "a", "x": -NaN}', b'{"text": "a", "x": Infinity}',
           b'{"text": "\\ud800 lone"}', b'{"text": "\\udc00", "id": "\\ud83d\\ude00"}',
           b'{"text": "a", "text": "b"}', b'{"text": 5}', b'{"text": null}', b'{"text": ["a"]}',
           b'{"id": {"a": 1}, "text": "x"}', b'{"text": "caf\xe9"}', b'{"text": "ok"} // c',
           b'{"text": "a\tb"}', b'  {"text": "padded"}  ', b'{"text": "x", }', b"\x0c",
           b'{"te\\u0078t": "escaped key"}', b'{"text": "a", "x": 1e400}',
           b'{"text": "deep", "x": ' + b"[" * 1200 + b"]" * 1200 + b"}"]


@st.composite
def mutated(draw):
    line = bytearray(draw(records()))
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.integers(0, 2))
        pos = draw(st.integers(0, max(len(line) - 1, 0)))
        if kind == 0 and line:
            del line[pos]
        elif kind == 1:
            line.insert(pos, draw(st.sampled_from(b'{}[]",:\\ax\xff')))
        elif line:
            line[pos] = draw(st.integers(0, 255))
    return bytes(line).replace(b"\n", b" ")


lines = st.one_of(records(), records(), records(), mutated(), st.sampled_from(SPECIAL),
                  st.binary(max_size=20).map(lambda b: b.replace(b"\n", b"")),
                  json_values.map(lambda v: json.dumps(v).encode()))


def _write(tmp_path, data: bytes, comp: str) -> str:
    if comp == "gzip":
        p = tmp_path / "x.jsonl.gz"
        p.write_bytes(gzip.compress(data, mtime=0))
    elif comp == "zstd":
        p = tmp_path / "x.jsonl.zst"
        p.write_bytes(zstandard.ZstdCompressor().compress(data))
    else:
        p = tmp_path / "x.jsonl"
        p.write_bytes(data)
    return str(p)


def _read_as_compressed(path: str, data: bytes, comp, block_bytes: int) -> bool:
    """Plain bytes that open with a gzip or zstd magic number are read as that
    compression: they decode, or the file is named corrupt. True when that
    case was checked here."""
    if comp is not None or not data.startswith((b"\x1f\x8b", b"\x28\xb5\x2f\xfd")):
        return False
    try:
        read_jsonl_shard(path, block_bytes=block_bytes, on_bad_record="skip")
    except InputError as exc:
        assert str(exc).startswith(f"{path}: corrupt or unreadable"), str(exc)
    return True


@SETTINGS
@given(body=st.lists(lines, max_size=14), sep=st.sampled_from([b"\n", b"\r\n"]),
       trailing=st.booleans(), bom=st.booleans(),
       comp=st.sampled_from([None, "gzip", "zstd"]), id_field=st.sampled_from(["id", None]),
       block_bytes=st.sampled_from([1, 9, 64, 1 << 20]))
# Two objects on one line and one object over two lines: Arrow's row count
# equals the number of lines, yet no line is a record.
@example(body=[b'{"text": "a"}{"text": "b"}', b'{"text": "c", "x":', b'{"y": 1}}'], sep=b"\n",
         trailing=True, bom=False, comp=None, id_field=None, block_bytes=1 << 20)
@example(body=[b'{"text": "a", "x": Inf}', b'{"text": "Info: Inf, NaN"}'], sep=b"\n",
         trailing=False, bom=True, comp="gzip", id_field="id", block_bytes=1 << 20)
@example(body=[b"\x1f\x8b"], sep=b"\n", trailing=False, bom=False, comp=None, id_field="id",
         block_bytes=1)
def test_random_json_lines(tmp_path, body, sep, trailing, bom, comp, id_field, block_bytes):
    data = (b"\xef\xbb\xbf" if bom else b"") + sep.join(body) + (sep if trailing else b"")
    path = _write(tmp_path, data, comp)
    if not _read_as_compressed(path, data, comp, block_bytes):
        check(path, data, id_field, block_bytes)


@SETTINGS
@given(data=st.binary(max_size=300), comp=st.sampled_from([None, "gzip", "zstd"]),
       raw=st.booleans(), block_bytes=st.sampled_from([3, 64, 1 << 20]))
@example(data=b"\x28\xb5\x2f\xfd", comp=None, raw=False, block_bytes=3)
def test_random_bytes(tmp_path, data, comp, raw, block_bytes):
    """Random bytes as a plain file, as valid compressed data, or as a file
    that claims a compression it does not have."""
    if raw and comp is not None:
        path = str(tmp_path / ("x.jsonl.gz" if comp == "gzip" else "x.jsonl.zst"))
        with open(path, "wb") as f:
            f.write(data)
        try:
            inner = gzip.decompress(data) if comp == "gzip" else \
                zstandard.ZstdDecompressor().decompress(data)
        except Exception:  # noqa: BLE001 - not decodable: the reader must say so
            with pytest.raises(InputError) as e:
                read_jsonl_shard(path, block_bytes=block_bytes, on_bad_record="skip")
            assert str(e.value).startswith(f"{path}: ")
            return
        try:
            read_jsonl_shard(path, block_bytes=block_bytes, on_bad_record="skip")
        except InputError:
            return
        check(path, inner, "id", block_bytes)
        return
    path = _write(tmp_path, data, comp)
    if _read_as_compressed(path, data, comp, block_bytes):
        return
    check(path, data, "id", block_bytes)
    # the Parquet reader refuses what is not Parquet, with the documented error
    pq_path = tmp_path / "x.parquet"
    pq_path.write_bytes(data)
    with pytest.raises(InputError) as e:
        read_parquet_shard(str(pq_path))
    assert str(e.value).startswith(f"{pq_path}: ")
