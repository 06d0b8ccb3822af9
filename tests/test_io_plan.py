"""Read plans and input measurements (gpu_dedup.io.plan) and the resume
identity of inputs (gpu_dedup.io.identity)."""
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

from gpu_dedup.io.identity import input_identity
from gpu_dedup.io.jsonl import read_jsonl_shard
from gpu_dedup.io.plan import (COMPRESSED_RATIO, generated_ids, input_bytes, location,
                               parse_jsonl_piece, plan_jsonl_ranges, plan_reads, read_piece,
                               stream_chunks, sub_blocks)
from gpu_dedup.io.sources import read_shard


def _records(n, seed=0, long_every=0):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        words = " ".join(f"w{int(x)}" for x in rng.integers(0, 500, size=int(rng.integers(1, 30))))
        if long_every and i % long_every == 0:
            words = words + " " + "x" * 3000          # a line longer than a chunk
        out.append({"id": f"d{i}", "text": words})
    return out


def _jsonl(recs, blank_every=0) -> bytes:
    lines = []
    for i, r in enumerate(recs):
        lines.append(json.dumps(r))
        if blank_every and i % blank_every == 0:
            lines.append("")
    return ("\n".join(lines) + "\n").encode()


# ---------------------------------------------------------------------------
# plan_reads
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("chunk", [512, 1000, 4096])
def test_byte_ranges_cover_the_file_exactly_and_end_at_newlines(tmp_path, chunk):
    raw = _jsonl(_records(300, long_every=37), blank_every=11)
    p = tmp_path / "a.jsonl"
    p.write_bytes(raw)
    units = plan_reads([str(p)], chunk)
    assert len(units) > 3 and all(u["kind"] == "bytes" for u in units)
    assert units[0]["start"] == 0 and units[-1]["stop"] == len(raw)
    for a, b in zip(units, units[1:]):
        assert a["stop"] == b["start"]                      # no gap, no overlap
    for u in units:
        assert raw[u["stop"] - 1:u["stop"]] == b"\n"         # newline-aligned
        assert u["line_base"] == raw[:u["start"]].count(b"\n")
        # a range ends at the first newline at or past start + chunk - 1
        assert b"\n" not in raw[u["start"] + chunk - 1:u["stop"] - 1]
    assert [u["order"] for u in units] == list(range(len(units)))
    assert len({(u["file"], u["chunk"]) for u in units}) == len(units)
    assert plan_jsonl_ranges(str(p), chunk) == [(u["start"], u["stop"], u["line_base"])
                                                for u in units]


def test_pieces_read_back_to_the_whole_file(tmp_path):
    raw = b"\xef\xbb\xbf" + _jsonl(_records(200, seed=1), blank_every=7)
    p = tmp_path / "a.jsonl"
    p.write_bytes(raw)
    whole = read_jsonl_shard(str(p))
    units = plan_reads([str(p)], 700)
    parts = [read_piece(u, "text", "id") for u in units]
    texts = pa.concat_arrays([d["texts"] for d in parts])
    lines = np.concatenate([d["lines"] for d in parts])
    ids = pa.concat_arrays([d["ids"] for d in parts])
    assert texts.equals(whole.texts)
    assert np.array_equal(lines, whole.lines)
    assert ids.equals(whole.ids)
    assert sum(d["lines_read"] for d in parts) == raw.count(b"\n")
    assert all(d["generated"] is None and d["compression"] is None for d in parts)


def test_parquet_row_group_units(tmp_path):
    recs = _records(500, seed=2)
    p = tmp_path / "a.parquet"
    pq.write_table(pa.table({"id": [r["id"] for r in recs], "text": [r["text"] for r in recs]}),
                   p, row_group_size=50)
    units = plan_reads([str(p)], 4000)
    assert all(u["kind"] == "rowgroups" for u in units) and len(units) > 1
    assert [g for u in units for g in u["row_groups"]] == list(range(10))
    parts = [read_piece(u, "text", "id") for u in units]
    assert [u["row_base"] for u in units] == list(np.cumsum([0] + [len(d["texts"])
                                                                   for d in parts[:-1]]))
    assert np.array_equal(np.concatenate([d["lines"] for d in parts]), np.arange(1, 501))
    assert pa.concat_arrays([d["texts"] for d in parts]).to_pylist() == [r["text"] for r in recs]
    no_ids = read_piece(units[1], "text", None)
    assert no_ids["ids"] is None
    first = int(no_ids["lines"][0])
    assert no_ids["generated"][0].as_py() == f"{p}:{first}"


def test_compressed_jsonl_is_streamed_and_small_files_are_whole(tmp_path):
    raw = _jsonl(_records(400, seed=3))
    gz = tmp_path / "a.jsonl.gz"
    gz.write_bytes(gzip.compress(raw, mtime=0))
    small = tmp_path / "b.jsonl"
    small.write_bytes(_jsonl(_records(3)))
    units = plan_reads([str(gz), str(small)], 2048)
    assert [u["kind"] for u in units] == ["stream", "whole"]
    assert units[0]["compression"] == "gzip"
    got = []
    lines = 0
    for k, blocks in stream_chunks(str(gz), 2048):
        d = parse_jsonl_piece(str(gz), blocks, lines, "text", "id")
        lines += d["lines_read"]
        got.append(d)
    assert len(got) > 1
    whole = read_jsonl_shard(str(gz))
    assert pa.concat_arrays([d["texts"] for d in got]).equals(whole.texts)
    assert np.array_equal(np.concatenate([d["lines"] for d in got]), whole.lines)
    d = read_piece(units[1], "text", "id")
    assert d["texts"].to_pylist() == [r["text"] for r in _records(3)]


def test_sub_blocks_are_newline_aligned_and_complete():
    raw = _jsonl(_records(100, seed=4, long_every=9))
    pieces = list(sub_blocks(raw, 600))
    assert b"".join(pieces) == raw
    assert all(p.endswith(b"\n") for p in pieces)
    assert len(pieces) > 5
    assert all(len(p) <= 600 or p.count(b"\n") == 1 for p in pieces)
    assert all(len(p + q.split(b"\n")[0]) >= 600 for p, q in zip(pieces, pieces[1:]))


def test_text_units_location_and_generated_ids(tmp_path):
    d = tmp_path / "docs"
    (d / "sub").mkdir(parents=True)
    (d / "a.txt").write_text("one two")
    (d / "sub" / "b.txt").write_text("three four")
    units = plan_reads([str(d)], 1 << 20)
    assert [u["kind"] for u in units] == ["whole"] and units[0]["fmt"] == "txt"
    piece = read_piece(units[0], "text", "id")
    assert piece["files"] == ["a.txt", os.path.join("sub", "b.txt")]
    assert piece["ids"].to_pylist() == ["a.txt", "sub/b.txt"]
    assert location(piece | {"fmt": "txt"}, 2) == os.path.join(str(d), "sub", "b.txt")
    assert location({"fmt": "jsonl", "path": "x.jsonl", "files": None}, 7) == "x.jsonl:7"
    assert location({"fmt": "parquet", "path": "x.pq", "files": None}, 7) == "x.pq: row 7"
    assert generated_ids("x.jsonl", np.array([3, 5])).to_pylist() == ["x.jsonl:3", "x.jsonl:5"]


def test_locations_and_generated_ids_have_one_definition(tmp_path):
    """A read unit and a whole shard say where a record is, and make its
    generated id, through the same two functions of io.sources, for every
    format; a text shard's generated ids are its files' paths."""
    from gpu_dedup.io import plan, sources
    assert plan.generated_ids is sources.generated_ids
    d = tmp_path / "docs"
    (d / "sub").mkdir(parents=True)
    (d / "a.txt").write_text("one two")
    (d / "sub" / "b.txt").write_text("three four")
    sh = read_shard(str(d), "text", None)
    assert sh.generated_ids().to_pylist() == [str(d / "a.txt"), str(d / "sub" / "b.txt")]
    assert sources.generated_ids(sh.path, sh.locations, sh.files).equals(sh.generated_ids())
    assert sources.generated_ids(sh.path, np.array([2]), sh.files).to_pylist() == \
        [str(d / "sub" / "b.txt")]
    for fmt, path, files in (("jsonl", "x.jsonl", None), ("parquet", "x.pq", None),
                             ("arrow", "x.arrow", None), ("datasets", "ds", None),
                             ("txt", str(d), sh.files)):
        meta = {"fmt": fmt, "path": path, "files": files}
        shard = sources.Shard(path, fmt, None, pa.array([], pa.large_string()), None,
                              np.array([1, 2]), files=files)
        for loc in (1, 2):
            assert location(meta, loc) == shard.location(loc) == \
                sources.record_location(fmt, path, loc, files)


def test_whole_unit_matches_read_shard(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_bytes(_jsonl(_records(20, seed=5)))
    (u,) = plan_reads([str(p)], 1 << 20)
    d = read_piece(u, "text", None)
    sh = read_shard(str(p), "text", None)
    assert d["texts"].equals(sh.texts) and d["ids"] is None
    assert d["generated"].equals(sh.generated_ids())
    assert d["generated"][0].as_py() == f"{p}:1"


# ---------------------------------------------------------------------------
# input_bytes
# ---------------------------------------------------------------------------

def test_input_bytes_text_folder_counts_its_txt_files(tmp_path):
    d = tmp_path / "docs"
    (d / "sub").mkdir(parents=True)
    (d / "a.txt").write_bytes(b"x" * 1000)
    (d / "sub" / "b.txt").write_bytes(b"y" * 234)
    (d / "notes.md").write_bytes(b"z" * 50000)          # not a text document
    assert input_bytes(str(d)) == 1234
    assert input_bytes(str(d), ["a.txt"]) == 1000
    assert input_bytes(str(d / "a.txt")) == 1000
    assert input_bytes(str(tmp_path / "missing.jsonl")) == 0


def test_input_bytes_gzip_uses_the_trailer(tmp_path):
    raw = _jsonl(_records(2000, seed=6))
    p = tmp_path / "a.jsonl.gz"
    p.write_bytes(gzip.compress(raw, mtime=0))
    assert os.path.getsize(p) * 2 < len(raw)
    assert input_bytes(str(p)) == len(raw)
    unnamed = tmp_path / "b.jsonl"                       # gzip without the suffix
    unnamed.write_bytes(gzip.compress(raw, mtime=0))
    assert input_bytes(str(unnamed)) == len(raw)
    # two members: the trailer holds the last one's size only, so never trust
    # it below the file size; the estimate must not undercount
    multi = tmp_path / "c.jsonl.gz"
    multi.write_bytes(gzip.compress(raw, mtime=0) + gzip.compress(b'{"text": "a"}\n', mtime=0))
    assert input_bytes(str(multi)) >= len(raw)
    fake = tmp_path / "d.jsonl.gz"                       # not gzip: no trailer to read
    fake.write_bytes(b"plain text pretending")
    assert input_bytes(str(fake)) == len(b"plain text pretending")


def test_input_bytes_zstd_uses_the_frame_header(tmp_path):
    raw = _jsonl(_records(2000, seed=7))
    p = tmp_path / "a.jsonl.zst"
    p.write_bytes(zstandard.ZstdCompressor().compress(raw))
    assert input_bytes(str(p)) == len(raw)
    two = tmp_path / "two.jsonl.zst"                     # frames of concatenated files
    two.write_bytes(zstandard.ZstdCompressor().compress(raw)
                    + zstandard.ZstdCompressor(write_checksum=True).compress(raw[:999]))
    assert input_bytes(str(two)) == len(raw) + 999
    buf = io.BytesIO()                                   # streamed: no content size
    with zstandard.ZstdCompressor().stream_writer(buf, closefd=False) as w:
        w.write(raw)
    q = tmp_path / "b.jsonl.zst"
    q.write_bytes(buf.getvalue())
    assert input_bytes(str(q)) == COMPRESSED_RATIO * os.path.getsize(q)
    fake = tmp_path / "c.jsonl.zst"
    fake.write_bytes(b"plain text pretending")
    assert input_bytes(str(fake)) == len(b"plain text pretending")


def test_input_bytes_parquet_from_metadata(tmp_path):
    recs = _records(3000, seed=8)
    p = tmp_path / "a.parquet"
    pq.write_table(pa.table({"text": [r["text"] for r in recs]}), p, row_group_size=1000,
                   compression="zstd")
    md = pq.ParquetFile(p).metadata
    assert md.num_row_groups == 3
    want = sum(md.row_group(i).total_byte_size for i in range(3))
    assert input_bytes(str(p)) == want
    assert want > sum(len(r["text"]) for r in recs) > os.path.getsize(p)


def test_input_bytes_plain_file_is_its_size(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_bytes(_jsonl(_records(50)))
    assert input_bytes(str(p)) == os.path.getsize(p)


# ---------------------------------------------------------------------------
# input_identity
# ---------------------------------------------------------------------------

def _rewrite_same_size_and_mtime(path, data: bytes):
    st = os.stat(path)
    assert len(data) == st.st_size
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    st2 = os.stat(path)
    assert (st2.st_size, st2.st_mtime_ns) == (st.st_size, st.st_mtime_ns)


def test_identity_changes_with_content_at_same_size_and_mtime(tmp_path):
    p = tmp_path / "a.jsonl"
    raw = _jsonl(_records(100, seed=9))
    p.write_bytes(raw)
    before = input_identity([str(p)])
    assert input_identity([str(p)]) == before             # stable
    assert json.loads(json.dumps(before)) == before        # JSON-serialisable
    assert before[0]["path"] == os.path.abspath(p) and before[0]["size"] == len(raw)
    changed = raw.replace(b"w1", b"w7", 1)
    assert changed != raw
    _rewrite_same_size_and_mtime(p, changed)
    after = input_identity([str(p)])
    assert after[0]["hash"] != before[0]["hash"]
    assert after[0]["size"] == before[0]["size"]


def test_one_read_buffer_grows_to_the_largest_file_and_hashes_the_same(tmp_path, monkeypatch):
    import xxhash
    from gpu_dedup import digest
    monkeypatch.setattr(digest, "READ_BYTES", 64)
    buf = digest.ReadBuffer()
    sizes = (10, 0, 40, 20, 300)
    for i, n in enumerate(sizes):
        p = tmp_path / f"f{i}"
        p.write_bytes((bytes(range(256)) * 2)[:n])
        want = (n, xxhash.xxh3_128((bytes(range(256)) * 2)[:n]).hexdigest())
        assert digest.file_sum(str(p), buf) == want == digest.file_sum(str(p))
        assert len(buf.fit(0)) == min(64, max(sizes[:i + 1]) + 1)   # never shrinks


def test_identity_of_a_text_folder(tmp_path):
    d = tmp_path / "docs"
    d.mkdir()
    (d / "a.txt").write_bytes(b"alpha beta")
    (d / "b.txt").write_bytes(b"gamma delta")
    before = input_identity([str(d)])
    assert len(before) == 1 and before[0]["size"] == 21
    _rewrite_same_size_and_mtime(d / "b.txt", b"gamma delte")
    assert input_identity([str(d)])[0]["hash"] != before[0]["hash"]
    (d / "b.txt").write_bytes(b"gamma delta")
    assert input_identity([str(d)])[0]["hash"] == before[0]["hash"]
    os.rename(d / "b.txt", d / "c.txt")                 # same bytes, another name
    assert input_identity([str(d)])[0]["hash"] != before[0]["hash"]


def test_identity_of_txt_files_named_together_is_one_shard(tmp_path):
    d = tmp_path / "docs"
    d.mkdir()
    (d / "a.txt").write_bytes(b"alpha")
    (d / "b.txt").write_bytes(b"beta")
    ident = input_identity([str(d / "a.txt"), str(d / "b.txt")])
    assert len(ident) == 1 and ident[0]["path"] == str(d) and ident[0]["size"] == 9
    _rewrite_same_size_and_mtime(d / "a.txt", b"alphb")
    assert input_identity([str(d / "a.txt"), str(d / "b.txt")]) != ident
