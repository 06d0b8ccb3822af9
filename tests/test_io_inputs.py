"""Inputs as a new user has them, at the level of the readers and writers:
data/ lines copied byte for byte (invalid UTF-8, BOM, CRLF, gzip, zstd),
compression recognised by magic bytes, Parquet string columns of every
encoding, whole JSON error messages, and ``-`` for standard input."""
from __future__ import annotations

import gzip
import io
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from gpu_dedup.errors import InputError
from gpu_dedup.io import stdin as stdin_mod
from gpu_dedup.io.compression import compression_of
from gpu_dedup.io.jsonl import BOM, read_jsonl_shard, write_kept_lines
from gpu_dedup.io.jsonl_scan import line_bounds, sparse_line_bounds
from gpu_dedup.io.parquet import read_parquet_shard, write_kept_rows
from gpu_dedup.io.plan import generated_ids, location, plan_reads, read_piece
from gpu_dedup.io.sources import expand_inputs, output_names, read_corpus, read_shard

GZ, ZST = b"\x1f\x8b", b"\x28\xb5\x2f\xfd"


def _compress(raw: bytes, comp: str | None) -> bytes:
    if comp == "gzip":
        return gzip.compress(raw, mtime=0)
    if comp == "zstd":
        return zstandard.ZstdCompressor().compress(raw)
    return raw


def _decompress(data: bytes) -> bytes:
    if data.startswith(GZ):
        return gzip.decompress(data)
    if data.startswith(ZST):
        return zstandard.ZstdDecompressor().decompressobj().decompress(data)
    return data


def _messy_lines() -> list[bytes]:
    """Lines as found in the wild: a BOM on line 1, invalid UTF-8 inside a
    text, CRLF endings, a blank line, a record with trailing blanks."""
    return [
        BOM + b'{"id": "a", "text": "first record"}\r',
        b'{"id": "b", "text": "bad \xff\xfe bytes \xc3 here"}\r',
        b'{"id": "c", "text": "caf\xc3\xa9 ok"}',
        b"",
        b'{"id": "d", "text": "lone \xed\xa0\x80 surrogate bytes"}\r',
        b'  {"id": "e", "text": "indented"}  ',
        b'{"id": "f", "text": "\\u00e9 escaped"}\r',
        b'{"id": "g", "text": "last, no newline"}',
    ]


# ---------------------------------------------------------------------------
# data/ byte for byte
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("name,comp", [("a.jsonl", None), ("a.jsonl.gz", "gzip"),
                                       ("a.jsonl.zst", "zstd"), ("gz-inside.jsonl", "gzip"),
                                       ("zst-inside.jsonl", "zstd")])
@pytest.mark.parametrize("keep_first", [True, False])
def test_kept_lines_are_copied_exactly(tmp_path, name, comp, keep_first):
    lines = _messy_lines()
    raw = b"\n".join(lines)                       # the last line has no newline
    src = tmp_path / name
    src.write_bytes(_compress(raw, comp))
    d = read_jsonl_shard(str(src))
    assert d.lines.tolist() == [1, 2, 3, 5, 6, 7, 8]
    assert d.invalid_utf8 == 2
    assert "\ufffd" in d.texts[1].as_py()          # the repair is what is read
    assert d.texts[0].as_py() == "first record"    # without the BOM
    kept = [1, 2, 5, 8] if keep_first else [2, 3, 7, 8]
    dst = tmp_path / ("out-" + name)
    assert write_kept_lines(str(src), np.array(kept), str(dst), block_bytes=64) == len(kept)
    out = dst.read_bytes()
    assert out[:2] == {None: out[:2], "gzip": GZ, "zstd": ZST[:2]}[comp]
    assert compression_of(str(dst)) == comp          # the input's actual compression
    assert _decompress(out) == b"".join(lines[k - 1] + b"\n" for k in kept)
    assert _decompress(out).startswith(BOM) == keep_first


@pytest.mark.parametrize("seed", range(6))
def test_kept_lines_are_the_lines_of_the_input_in_blocks_of_any_size(tmp_path, seed):
    """Random lines (empty ones, carriage returns, invalid UTF-8, a last line
    with or without its newline), random kept lines, blocks of a few bytes
    to many lines: the output is the kept lines of the input, each with a
    newline (a run of kept lines is copied as one slice of its block)."""
    rng = np.random.default_rng(seed)
    pieces = [b"", b"\r", b"\xff\xfe", b'{"text": "x"}', b"abc " * 7, "é".encode()]
    lines = [b"".join(pieces[int(i)] for i in rng.integers(0, len(pieces), rng.integers(0, 5)))
             for _ in range(int(rng.integers(1, 300)))]
    raw = b"\n".join(lines) + (b"\n" if seed % 2 else b"")
    src = tmp_path / "in.jsonl"
    src.write_bytes(raw)
    want_lines = raw.split(b"\n")
    if raw.endswith(b"\n"):
        want_lines = want_lines[:-1]
    for share in (0.0, 0.3, 0.9, 1.0):
        kept = np.flatnonzero(rng.random(len(want_lines)) < share) + 1
        for block in (16, 200, 1 << 20):
            dst = tmp_path / f"out-{share}-{block}.jsonl"
            assert write_kept_lines(str(src), kept, str(dst), block_bytes=block) == kept.size
            assert dst.read_bytes() == b"".join(want_lines[k - 1] + b"\n" for k in kept)


@pytest.mark.parametrize("seed", range(4))
def test_long_lines_found_one_newline_after_another(tmp_path, seed):
    """Once the lines written so far are long (``SPARSE_LINE_BYTES`` on
    average), the writer finds a block's newlines with ``find``: the same
    bounds as NumPy's, empty lines and a block without a final newline
    included, and the same output."""
    rng = np.random.default_rng(seed)
    lines = [b"" if rng.random() < 0.3 else bytes(rng.integers(11, 255, int(rng.integers(1, 3000)),
                                                            dtype=np.uint8))
             for _ in range(int(rng.integers(20, 200)))]
    raw = b"\n".join(lines) + (b"\n" if seed % 2 else b"")
    for cut in (0, 1, len(raw) // 2, len(raw)):
        block = raw[:cut]
        want = line_bounds(np.frombuffer(block, dtype=np.uint8))
        for data in (block, bytearray(block + b"\n\n")):   # only the first n bytes count
            got = sparse_line_bounds(data, len(block))
            assert [g.tolist() for g in got] == [w.tolist() for w in want]
    src = tmp_path / "long.jsonl"
    src.write_bytes(raw)
    want_lines = raw.split(b"\n")
    if raw.endswith(b"\n"):                     # a final newline opens no line
        want_lines = want_lines[:-1]
    kept = np.flatnonzero(rng.random(len(want_lines)) < 0.5) + 1
    for block_bytes in (16, 4096, 1 << 20):
        dst = tmp_path / f"out-{block_bytes}.jsonl"
        assert write_kept_lines(str(src), kept, str(dst), block_bytes=block_bytes) == kept.size
        assert dst.read_bytes() == b"".join(want_lines[k - 1] + b"\n" for k in kept)


@pytest.mark.parametrize("comp", [None, "gzip"])
def test_kept_lines_longer_than_the_reading_buffer(tmp_path, comp):
    """A line longer than the buffer the writer reads into (a block and
    64 KiB) makes it take a larger one: the lines around it come out whole."""
    lines = [b'{"text": "short"}', b'{"text": "' + b"x" * 300_000 + b'"}', b"tail",
             b'{"text": "' + "é".encode() * 100_000 + b'"}', b"last"]
    raw = b"\n".join(lines)                       # the last line has no newline
    src = tmp_path / ("in.jsonl" + (".gz" if comp else ""))
    src.write_bytes(_compress(raw, comp))
    for kept in ([1, 2, 3, 4, 5], [2, 4], [1, 3, 5], [5]):
        for block in (16, 1 << 20):
            dst = tmp_path / f"out-{block}.jsonl"
            assert write_kept_lines(str(src), np.array(kept), str(dst),
                                    block_bytes=block) == len(kept)
            assert _decompress(dst.read_bytes()) == b"".join(lines[k - 1] + b"\n" for k in kept)


def test_shard_write_kept_mirrors_the_input(tmp_path):
    lines = _messy_lines()
    src = tmp_path / "docs.jsonl"
    src.write_bytes(gzip.compress(b"\n".join(lines) + b"\n", mtime=0))
    sh = read_shard(str(src))
    assert sh.compression == "gzip"
    keep = np.array([True, True, False, False, True, False, True])
    dst = tmp_path / "out.jsonl"
    assert sh.write_kept(keep, str(dst)) == 4
    assert dst.read_bytes()[:2] == GZ
    assert gzip.decompress(dst.read_bytes()) == b"".join(
        lines[k - 1] + b"\n" for k in sh.locations[keep].tolist())


# ---------------------------------------------------------------------------
# compression by magic bytes
# ---------------------------------------------------------------------------

def _plain_records(n=40):
    return "".join(json.dumps({"id": f"r{i}", "text": f"words {i} and {i * 7}"}) + "\n"
                   for i in range(n)).encode()


@pytest.mark.parametrize("comp", ["gzip", "zstd"])
def test_compressed_data_in_a_jsonl_name(tmp_path, comp):
    raw = _plain_records()
    p = tmp_path / "docs.jsonl"
    p.write_bytes(_compress(raw, comp))
    assert compression_of(str(p)) == comp
    d = read_jsonl_shard(str(p))
    assert d.ids.to_pylist() == [f"r{i}" for i in range(40)]
    units = plan_reads([str(p)], 64)
    assert [u["kind"] for u in units] == ["stream"] and units[0]["compression"] == comp
    (whole,) = plan_reads([str(p)], 1 << 30)
    assert read_piece(whole, "text", "id")["compression"] == comp
    c = read_corpus([str(p)])
    assert c.shards[0].compression == comp and len(c) == 40


def test_plain_jsonl_is_not_taken_for_compressed(tmp_path):
    p = tmp_path / "docs.jsonl"
    p.write_bytes(_plain_records())
    assert compression_of(str(p)) is None
    assert compression_of(str(tmp_path / "missing.jsonl")) is None
    e = tmp_path / "empty.jsonl"
    e.write_bytes(b"")
    assert compression_of(str(e)) is None and len(read_jsonl_shard(str(e)).texts) == 0


def test_gz_name_without_gzip_data_is_a_clear_error(tmp_path):
    p = tmp_path / "docs.jsonl.gz"
    p.write_bytes(_plain_records())
    with pytest.raises(InputError, match=r"docs\.jsonl\.gz: corrupt or unreadable gzip data") as ei:
        read_jsonl_shard(str(p))
    assert "\n" not in str(ei.value)


# ---------------------------------------------------------------------------
# Parquet string columns
# ---------------------------------------------------------------------------

_STRING_TYPES = {
    "string_view": pa.string_view(),
    "large_string": pa.large_string(),
    "dictionary": pa.dictionary(pa.int32(), pa.string()),
    "dictionary_large": pa.dictionary(pa.int8(), pa.large_string()),
}


@pytest.mark.parametrize("kind", list(_STRING_TYPES))
def test_parquet_string_encodings_read_and_write(tmp_path, kind):
    typ = _STRING_TYPES[kind]
    texts = [f"text number {i % 7} of many" for i in range(30)]
    table = pa.table({"id": pa.array([f"p{i}" for i in range(30)]).cast(typ),
                      "text": pa.array(texts).cast(typ),
                      "extra": pa.array([str(i) for i in range(30)]).cast(typ),
                      "n": pa.array(range(30), pa.int64()),
                      "nested": pa.StructArray.from_arrays(
                          [pa.array([f"s{i}" for i in range(30)])], names=["s"])})
    src = tmp_path / "a.parquet"
    pq.write_table(table, src, row_group_size=10)
    stored = pq.ParquetFile(src).schema_arrow.field("text").type
    assert stored == typ or (pa.types.is_dictionary(typ) and pa.types.is_dictionary(stored))
    d = read_parquet_shard(str(src))
    assert d.texts.type == pa.large_string() and d.texts.to_pylist() == texts
    assert d.ids.type == pa.large_string() and d.ids[29].as_py() == "p29"
    (u,) = [u for u in plan_reads([str(src)], 1 << 30)]
    assert read_piece(u, "text", "id")["texts"].to_pylist() == texts
    dst = tmp_path / "out.parquet"
    kept = np.array([1, 2, 11, 25, 30])
    assert write_kept_rows(str(src), kept, np.ones(kept.size, dtype=bool), str(dst)) == 5
    out = pq.read_table(dst)
    assert out.schema == pq.ParquetFile(src).schema_arrow
    assert out.column("extra").to_pylist() == [str(k - 1) for k in kept]
    assert out.column("n").to_pylist() == (kept - 1).tolist()
    assert [x["s"] for x in out.column("nested").to_pylist()] == [f"s{k - 1}" for k in kept]


def test_parquet_integer_ids_are_strings(tmp_path):
    src = tmp_path / "a.parquet"
    pq.write_table(pa.table({"id": pa.array([7, 8, 9], pa.int32()), "text": ["a", "b", "c"]}),
                   src)
    assert read_parquet_shard(str(src)).ids.to_pylist() == ["7", "8", "9"]


@pytest.mark.parametrize("column,values", [
    ("text", pa.array([1, 2], pa.int64())),
    ("text", pa.array([b"a", b"b"], pa.binary())),
    ("id", pa.array([[1], [2]], pa.list_(pa.int64()))),
    ("id", pa.array([1.5, 2.5], pa.float64())),
])
def test_parquet_column_of_another_type_is_refused(tmp_path, column, values):
    cols = {"id": pa.array(["x", "y"]), "text": pa.array(["a b", "c d"])}
    cols[column] = values
    src = tmp_path / "bad.parquet"
    pq.write_table(pa.table(cols), src)
    with pytest.raises(InputError) as ei:
        read_parquet_shard(str(src))
    msg = str(ei.value)
    stored = pq.ParquetFile(src).schema_arrow.field(column).type
    assert msg.startswith(f"{src}: field {column!r}") and f"({stored}" in msg
    assert "\n" not in msg
    (u,) = plan_reads([str(src)], 1 << 30)
    with pytest.raises(InputError, match=f"field {column!r}"):
        read_piece(u, "text", "id")


# ---------------------------------------------------------------------------
# JSON error messages
# ---------------------------------------------------------------------------

def _decoder_message(line: bytes) -> str:
    try:
        json.loads(line)
    except json.JSONDecodeError as exc:
        return str(exc)
    raise AssertionError("valid JSON")


@pytest.mark.parametrize("bad", [
    b'{"id": "x", "text": "a" "b"}',
    b'{"id": "x", "text": "unclosed',
    b'{"id": "x", "text": "' + b"long " * 400 + b'", oops}',
    b'{"id": "x", "text": "' + b"long " * 400 + b'"} trailing',
])
@pytest.mark.parametrize("on_bad_record", ["error", "skip"])
def test_malformed_json_message_is_whole(tmp_path, bad, on_bad_record):
    p = tmp_path / "a.jsonl"
    p.write_bytes(b'{"id": "ok", "text": "fine"}\n' + bad + b"\n")
    want = _decoder_message(bad)
    assert ": line 1 column " in want
    if on_bad_record == "error":
        with pytest.raises(InputError) as ei:
            read_jsonl_shard(str(p))
        msg = str(ei.value)
        assert msg.startswith(f"{p}:2: malformed JSON ({want})")
    else:
        d = read_jsonl_shard(str(p), on_bad_record="skip")
        ((line, msg),) = d.skipped
        assert line == 2 and msg.startswith(f"malformed JSON ({want})")
    assert "\n" not in msg
    assert len(msg) < len(want) + len(str(p)) + 140      # the record itself is abbreviated


# ---------------------------------------------------------------------------
# standard input
# ---------------------------------------------------------------------------

class _FakeStdin:
    def __init__(self, data: bytes, tty: bool = False):
        self.buffer = io.BytesIO(data)
        self._tty = tty

    def isatty(self):
        return self._tty


@pytest.fixture
def fake_stdin(monkeypatch):
    stdin_mod.cleanup()

    def feed(data: bytes, tty: bool = False):
        monkeypatch.setattr("sys.stdin", _FakeStdin(data, tty))

    yield feed
    stdin_mod.cleanup()


def test_stdin_is_a_jsonl_shard_named_stdin(fake_stdin):
    raw = _plain_records(5)
    fake_stdin(raw)
    (path,) = expand_inputs(["-"])
    assert os.path.isfile(path) and open(path, "rb").read() == raw
    assert expand_inputs(["-", "-"]) == [path]            # read once
    assert output_names([path]) == ["stdin.jsonl"]
    assert output_names(["-"]) == ["stdin.jsonl"]
    sh = read_shard("-", "text", None)
    assert sh.texts.to_pylist() == [f"words {i} and {i * 7}" for i in range(5)]
    assert sh.generated_ids().to_pylist()[:2] == ["<stdin>:1", "<stdin>:2"]
    assert sh.location(3) == "<stdin>:3"
    (u,) = plan_reads(["-"], 1 << 20)
    assert u["path"] == path and u["fmt"] == "jsonl"
    assert location(u, 4) == "<stdin>:4"
    assert generated_ids(u["path"], np.array([2])).to_pylist() == ["<stdin>:2"]
    assert read_piece(u, "text", None)["generated"].to_pylist()[-1] == "<stdin>:5"
    c = read_corpus(expand_inputs(["-"]), id_field=None)
    assert c.shards[0].out_name == "stdin.jsonl" and c.ids[0].as_py() == "<stdin>:1"
    stdin_mod.cleanup()
    assert not os.path.exists(path)


def test_stdin_messages_name_stdin(fake_stdin, tmp_path):
    fake_stdin(b'{"id": "a", "text": "x"}\n{"id": "b", "text": oops}\n')
    with pytest.raises(InputError, match=r"^<stdin>:2: malformed JSON \(Expecting value: line 1"):
        read_shard("-")
    (u,) = plan_reads(["-"], 1 << 20)
    with pytest.raises(InputError, match=r"^<stdin>:2: "):
        read_piece(u, "text", "id")


def test_stdin_beside_a_file_named_stdin_jsonl(fake_stdin, tmp_path):
    fake_stdin(_plain_records(2))
    other = tmp_path / "stdin.jsonl"
    other.write_bytes(_plain_records(3))
    names = output_names(expand_inputs([str(other), "-"]))
    assert len(set(names)) == 2 and all(n.endswith("stdin.jsonl") for n in names)


@pytest.mark.parametrize("comp,suffix", [("gzip", ".gz"), ("zstd", ".zst")])
def test_compressed_stdin(fake_stdin, tmp_path, comp, suffix):
    raw = _plain_records(6)
    fake_stdin(_compress(raw, comp))
    (path,) = expand_inputs(["-"])
    assert compression_of(path) == comp
    assert output_names([path]) == ["stdin.jsonl" + suffix]
    sh = read_shard(path)
    assert sh.compression == comp and sh.ids.to_pylist() == [f"r{i}" for i in range(6)]
    dst = tmp_path / "out"
    assert sh.write_kept(np.array([True, False] * 3), str(dst)) == 3
    assert _decompress(dst.read_bytes()) == b"".join(raw.splitlines(True)[0::2])
    assert dst.read_bytes()[:2] == (GZ if comp == "gzip" else ZST[:2])


def test_stdin_from_a_terminal_is_refused(fake_stdin):
    fake_stdin(b"", tty=True)
    with pytest.raises(InputError, match="standard input is a terminal"):
        expand_inputs(["-"])
