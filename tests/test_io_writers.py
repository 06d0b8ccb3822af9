"""gpu_dedup.io.writers: one writer of kept records per format, with an
optional edit of their texts, used by a run's data/ (no edit) and by
substr's (texts cut)."""
from __future__ import annotations

import gzip
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpu_dedup.io.sources import read_shard
from gpu_dedup.io.writers import TextEdit, write_kept

N = 9
KEEP = np.array([i % 3 != 1 for i in range(N)])


def _inputs(tmp_path) -> dict[str, str]:
    """The same nine records as JSONL, gzip JSONL, Parquet, Arrow IPC and a
    text folder."""
    recs = [{"id": f"r{i}", "text": f"text number {i}", "n": i} for i in range(N)]
    out = {}
    p = tmp_path / "a.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in recs))
    out["jsonl"] = str(p)
    p = tmp_path / "b.jsonl.gz"
    with gzip.open(p, "wt") as f:
        f.write("".join(json.dumps(r) + "\n" for r in recs))
    out["gzip"] = str(p)
    p = tmp_path / "c.parquet"
    pq.write_table(pa.Table.from_pylist(recs), p, row_group_size=4)
    out["parquet"] = str(p)
    p = tmp_path / "d.arrow"
    t = pa.Table.from_pylist(recs)
    with pa.OSFile(str(p), "wb") as sink, pa.ipc.new_file(sink, t.schema) as w:
        for b in t.to_batches(max_chunksize=4):
            w.write_batch(b)
    out["arrow"] = str(p)
    d = tmp_path / "txt"
    d.mkdir()
    for r in recs:
        (d / f"{r['id']}.txt").write_text(r["text"])
    out["txt"] = str(d)
    return out


def _write(shard, dst, edit=None) -> int:
    return write_kept(shard.fmt, shard.path, shard.locations, KEEP, dst, files=shard.files,
                      edit=edit, block_bytes=64)


def _same_output(a, b, fmt: str) -> None:
    """The two outputs (files, or folders of a text shard) hold the same bytes."""
    if fmt == "txt":
        assert sorted(os.listdir(a)) == sorted(os.listdir(b))
        for n in os.listdir(a):
            assert (a / n).read_bytes() == (b / n).read_bytes()
    else:
        assert a.read_bytes() == b.read_bytes()


def _texts(path, fmt) -> list[str]:
    if fmt == "txt":
        return read_shard(path, "text", None).texts.to_pylist()
    return read_shard(path, "text", "id").texts.to_pylist()


@pytest.mark.parametrize("fmt", ["jsonl", "gzip", "parquet", "arrow", "txt"])
def test_kept_records_are_written_as_the_shard_writes_them(tmp_path, fmt):
    src = _inputs(tmp_path)[fmt]
    shard = read_shard(src, "text", "id")
    name = os.path.basename(src)
    a, b = tmp_path / "via_writer" / name, tmp_path / "via_shard" / name
    a.parent.mkdir()
    b.parent.mkdir()
    assert _write(shard, str(a)) == int(KEEP.sum())
    assert shard.write_kept(KEEP, str(b), 64) == int(KEEP.sum())
    _same_output(a, b, fmt)
    want = [t for t, k in zip(shard.texts.to_pylist(), KEEP) if k]
    assert _texts(str(a), shard.fmt) == want


@pytest.mark.parametrize("fmt", ["jsonl", "gzip", "parquet", "arrow", "txt"])
def test_the_kept_records_locations_alone_write_the_same_bytes(tmp_path, fmt):
    """A run's data/ hands the writer only its kept records' locations
    (gathered a chunk at a time); the output is the one of every record's
    location and flag."""
    src = _inputs(tmp_path)[fmt]
    shard = read_shard(src, "text", "id")
    name = os.path.basename(src)
    a, b = tmp_path / "flags" / name, tmp_path / "kept" / name
    a.parent.mkdir()
    b.parent.mkdir()
    assert _write(shard, str(a)) == int(KEEP.sum())
    assert write_kept(shard.fmt, shard.path, shard.locations[KEEP], None, str(b),
                      files=shard.files, block_bytes=64) == int(KEEP.sum())
    _same_output(a, b, fmt)
    if fmt == "txt":
        assert len(os.listdir(b)) == int(KEEP.sum())
    with pytest.raises(ValueError, match="edit"):
        write_kept(shard.fmt, shard.path, shard.locations[KEEP], None, str(b) + "x",
                   files=shard.files, edit=TextEdit("text", KEEP, str, str))


@pytest.mark.parametrize("fmt", ["jsonl", "gzip", "parquet", "arrow", "txt"])
def test_an_edit_replaces_the_texts_of_the_kept_records(tmp_path, fmt):
    src = _inputs(tmp_path)[fmt]
    shard = read_shard(src, "text", "id")
    old = shard.texts.to_pylist()
    new = [t.upper() if i % 2 else t for i, t in enumerate(old)]
    changed = np.array([i % 2 == 1 for i in range(N)])
    edit = TextEdit("text", changed, lambda i: new[i],
                    lambda i0, i1: pa.array(new[i0:i1], pa.large_string()))
    out = tmp_path / "out" / os.path.basename(src)
    out.parent.mkdir()
    assert _write(shard, str(out), edit) == int(KEEP.sum())
    assert _texts(str(out), shard.fmt) == [t for t, k in zip(new, KEEP) if k]
    if fmt == "jsonl":                     # the records not changed are copied byte for byte
        lines = open(src, "rb").read().splitlines()
        got = out.read_bytes().splitlines()
        kept = [i for i in range(N) if KEEP[i]]
        for line, i in zip(got, kept):
            if not changed[i]:
                assert line == lines[i]
            else:
                assert json.loads(line) == {"id": f"r{i}", "text": new[i], "n": i}


def test_take_gives_the_texts_of_ascending_records():
    new = [f"t{i}" for i in range(10)]
    edit = TextEdit("text", np.ones(10, bool), lambda i: new[i],
                    lambda i0, i1: pa.array(new[i0:i1], pa.large_string()))
    assert edit.take(np.array([2, 3, 7])).to_pylist() == ["t2", "t3", "t7"]
    assert edit.take(np.zeros(0, np.int64)).to_pylist() == []


def test_an_edit_of_a_parquet_shard_with_string_view_columns(tmp_path):
    recs = {"id": [f"r{i}" for i in range(N)], "text": [f"text number {i}" for i in range(N)]}
    src = tmp_path / "v.parquet"
    pq.write_table(pa.table({k: pa.array(v, pa.string_view()) for k, v in recs.items()}), src,
                   row_group_size=4)
    new = [t.upper() for t in recs["text"]]
    edit = TextEdit("text", np.ones(N, bool), lambda i: new[i],
                    lambda i0, i1: pa.array(new[i0:i1], pa.large_string()))
    out = tmp_path / "out.parquet"
    assert write_kept("parquet", str(src), np.arange(1, N + 1), KEEP, str(out),
                      edit=edit) == int(KEEP.sum())
    got = pq.read_table(out)
    assert got.schema == pq.ParquetFile(src).schema_arrow
    assert got.column("text").to_pylist() == [t for t, k in zip(new, KEEP) if k]
    assert got.column("id").to_pylist() == [i for i, k in zip(recs["id"], KEEP) if k]


@pytest.mark.parametrize("compression", ["snappy", "zstd", "none"])
def test_the_parquet_writer_writes_pyarrow_parquets_bytes(tmp_path, compression):
    """:class:`gpu_dedup.io.parquet.ParquetWriter` (which leaves
    ``pyarrow.parquet`` unimported) writes what ``pyarrow.parquet``'s writer
    writes, table by table, with the schema's metadata; a table of another
    schema is refused and leaves the file to be closed."""
    from gpu_dedup.io.parquet import ParquetWriter, write_table
    schema = pa.schema([("id", pa.string()), ("cluster", pa.int64()), ("kept", pa.bool_()),
                        ("similarity", pa.float64()), ("text", pa.large_string())],
                       metadata={b"source": b"test"})
    rng = np.random.default_rng(3)
    tables = [pa.table({"id": [f"d{i}" for i in range(n)],
                        "cluster": rng.integers(0, 5, n),
                        "kept": rng.random(n) < 0.5,
                        "similarity": pa.array(rng.random(n), mask=rng.random(n) < 0.3),
                        "text": pa.array(["x" * int(k) for k in rng.integers(0, 40, n)],
                                         pa.large_string())}, schema=schema)
              for n in (0, 7, 300)]
    ours, theirs = tmp_path / "ours.parquet", tmp_path / "theirs.parquet"
    with ParquetWriter(str(ours), schema, compression) as w:
        for t in tables:
            w.write_table(t)
        with pytest.raises(ValueError, match="schema"):
            w.write_table(pa.table({"id": ["a"]}))
    with pq.ParquetWriter(str(theirs), schema, compression=compression) as w:
        for t in tables:
            w.write_table(t)
    assert ours.read_bytes() == theirs.read_bytes()
    assert pq.read_table(ours).equals(pa.concat_tables(tables))
    one = tmp_path / "one.parquet"
    write_table(tables[2], str(one), compression)
    pq.write_table(tables[2], theirs, compression=compression)
    assert one.read_bytes() == theirs.read_bytes()
    # some columns dictionary-encoded, the others plain: pyarrow's bytes again
    some = ["cluster", "similarity"]
    with ParquetWriter(str(ours), schema, compression, dictionary=some) as w:
        for t in tables:
            w.write_table(t)
    with pq.ParquetWriter(str(theirs), schema, compression=compression,
                          use_dictionary=some) as w:
        for t in tables:
            w.write_table(t)
    assert ours.read_bytes() == theirs.read_bytes()
    meta = pq.ParquetFile(ours).metadata.row_group(0)
    encoded = {meta.column(i).path_in_schema: meta.column(i).has_dictionary_page
               for i in range(meta.num_columns)}
    assert encoded == {"id": False, "cluster": True, "kept": False, "similarity": True,
                       "text": False}              # (booleans never have a dictionary)


def test_the_parquet_writer_falls_back_to_pyarrow_parquets(tmp_path, monkeypatch):
    """Where the writer beneath ``pyarrow.parquet``'s does not take its
    options (a pyarrow whose internals moved), ``pyarrow.parquet``'s own
    writer writes the file: the same bytes."""
    from gpu_dedup.io import parquet

    t = pa.table({"id": ["a", "b", None], "n": [1, 2, 3]})
    want = tmp_path / "want.parquet"
    pq.write_table(t, want)
    monkeypatch.setitem(parquet._WRITER_OPTIONS, "an_option_it_lacks", True)
    got = tmp_path / "got.parquet"
    with parquet.ParquetWriter(str(got), t.schema) as w:
        assert isinstance(w._w, pq.ParquetWriter)          # the fallback wrote it
        w.write_table(t)
    assert got.read_bytes() == want.read_bytes()
