"""Inputs as users have them: JSONL (plain, .gz, .zst), Parquet files and
directories of shards, plain-text directories, several inputs and globs; and
outputs that mirror them (one output shard per input shard, same format,
compression and columns, kept rows in input order)."""
from __future__ import annotations

import gzip
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from gpu_dedup.config import Config
from gpu_dedup.io.jsonl import read_jsonl_shard, write_kept_lines
from gpu_dedup.io.sources import expand_inputs, read_corpus
from gpu_dedup.pipeline import run

CFG = Config(shingle="word", ngram=2, normalize=("lower", "ws"), num_perm=64, bands=16, rows=4,
             threshold=0.5)


def make_docs(n=120, seed=3):
    """Documents with planted near-duplicates and one exact duplicate."""
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}" for i in range(400)]
    docs = []
    for i in range(n):
        words = [vocab[j] for j in rng.integers(0, 400, size=20)]
        docs.append(" ".join(words))
        if i % 4 == 0:
            w = list(words)
            w[int(rng.integers(20))] = "changed"
            docs.append(" ".join(w))
    docs.append(docs[0])
    return [{"id": f"d{i}", "text": t, "extra": i} for i, t in enumerate(docs)]


def jsonl_bytes(recs):
    return "".join(json.dumps(r) + "\n" for r in recs).encode()


def write_all_formats(folder, recs):
    os.makedirs(folder, exist_ok=True)
    paths = {}
    raw = jsonl_bytes(recs)
    paths["jsonl"] = [os.path.join(folder, "docs.jsonl")]
    with open(paths["jsonl"][0], "wb") as f:
        f.write(raw)
    paths["gz"] = [os.path.join(folder, "docs.jsonl.gz")]
    with open(paths["gz"][0], "wb") as f:
        f.write(gzip.compress(raw, mtime=0))
    paths["zst"] = [os.path.join(folder, "docs.jsonl.zst")]
    with open(paths["zst"][0], "wb") as f:
        f.write(zstandard.ZstdCompressor().compress(raw))
    half = len(recs) // 2
    pdir = os.path.join(folder, "pq")
    os.makedirs(pdir, exist_ok=True)
    paths["parquet"] = []
    for k, part in enumerate((recs[:half], recs[half:])):
        p = os.path.join(pdir, f"part-{k}.parquet")
        pq.write_table(pa.table({"id": [r["id"] for r in part], "text": [r["text"] for r in part],
                                 "extra": [r["extra"] for r in part]}), p, row_group_size=7)
        paths["parquet"].append(p)
    return paths


@pytest.fixture(scope="module")
def formats(tmp_path_factory):
    base = tmp_path_factory.mktemp("formats")
    recs = make_docs()
    paths = write_all_formats(str(base / "in"), recs)
    outs = {}
    for name, p in paths.items():
        out = str(base / f"out-{name}")
        run(p, out, CFG)
        outs[name] = out
    return recs, paths, outs


def clusters_by_id(out):
    t = pq.read_table(os.path.join(out, "clusters.parquet"))
    return dict(zip(t["id"].to_pylist(), zip(t["cluster"].to_pylist(), t["kept"].to_pylist())))


def test_every_format_gives_identical_clusters(formats):
    recs, _, outs = formats
    ref = clusters_by_id(outs["jsonl"])
    assert set(ref) == {r["id"] for r in recs}
    assert sum(k for _, k in ref.values()) < len(recs)       # duplicates were found
    for name in ("gz", "zst", "parquet"):
        assert clusters_by_id(outs[name]) == ref, name
        a = pq.read_table(os.path.join(outs["jsonl"], "pairs.parquet"))
        b = pq.read_table(os.path.join(outs[name], "pairs.parquet"))
        assert a.equals(b), name


def test_data_holds_exactly_the_kept_rows(formats):
    recs, paths, outs = formats
    kept_ids = [i for i, (_, k) in clusters_by_id(outs["jsonl"]).items() if k]
    kept_recs = [r for r in recs if r["id"] in set(kept_ids)]
    want = jsonl_bytes(kept_recs)
    # plain: byte for byte; compressed: same compression, same content
    assert os.listdir(os.path.join(outs["jsonl"], "data")) == ["docs.jsonl"]
    assert open(os.path.join(outs["jsonl"], "data", "docs.jsonl"), "rb").read() == want
    gz = open(os.path.join(outs["gz"], "data", "docs.jsonl.gz"), "rb").read()
    assert gz[:2] == b"\x1f\x8b" and gzip.decompress(gz) == want
    assert gz == gzip.compress(want, compresslevel=6, mtime=0)     # deterministic
    zs = open(os.path.join(outs["zst"], "data", "docs.jsonl.zst"), "rb").read()
    assert zstandard.ZstdDecompressor().decompress(zs) == want
    # two Parquet shards in, two out, same columns, kept rows in input order
    names = sorted(os.listdir(os.path.join(outs["parquet"], "data")))
    assert names == ["part-0.parquet", "part-1.parquet"]
    got = []
    for n, src in zip(names, paths["parquet"]):
        t = pq.read_table(os.path.join(outs["parquet"], "data", n))
        assert t.schema.equals(pq.read_schema(src))
        got += t.to_pylist()
    assert got == kept_recs


def test_parquet_output_keeps_row_groups_schema_metadata_and_codec(tmp_path):
    texts = [r["text"] for r in make_docs(40, seed=9) if "changed" not in r["text"]][:40]
    texts[5] = texts[4]
    schema = pa.schema([("text", pa.string()), ("n", pa.int32())],
                       metadata={b"huggingface": b'{"info": "kept as is"}'})
    src = tmp_path / "s.parquet"
    pq.write_table(pa.table({"text": texts, "n": list(range(40))}, schema=schema), src,
                   row_group_size=10, compression="zstd")
    out = tmp_path / "out"
    run([str(src)], str(out), CFG)
    dst = pq.ParquetFile(out / "data" / "s.parquet")
    assert dst.schema_arrow.metadata[b"huggingface"] == b'{"info": "kept as is"}'
    assert dst.metadata.num_row_groups == 4
    assert dst.metadata.row_group(0).column(0).compression == "ZSTD"
    assert 5 not in dst.read()["n"].to_pylist() and 4 in dst.read()["n"].to_pylist()


def test_hugging_face_layout_directory_and_globs(tmp_path):
    recs = make_docs(40)
    root = tmp_path / "hf"
    for split, part in (("train", recs[:30]), ("test", recs[30:])):
        d = root / "default" / split
        d.mkdir(parents=True)
        pq.write_table(pa.table({"text": [r["text"] for r in part],
                                 "id": [r["id"] for r in part]}), d / "0000.parquet")
    (root / "README.md").write_text("# a dataset card, not data")
    (root / ".cache").mkdir()
    (root / ".cache" / "x.parquet").write_bytes(b"not parquet: hidden folders are skipped")
    paths = expand_inputs([str(root)])
    assert [os.path.relpath(p, root) for p in paths] == [
        os.path.join("default", "test", "0000.parquet"),
        os.path.join("default", "train", "0000.parquet")]
    out = tmp_path / "out"
    report = run([str(root)], str(out), CFG)
    assert report["documents"]["in"] == len(recs)
    assert sorted(os.path.relpath(os.path.join(d, f), out / "data")
                  for d, _, fs in os.walk(out / "data") for f in fs) == [
        os.path.join("test", "0000.parquet"), os.path.join("train", "0000.parquet")]
    # several inputs and a glob in one run
    a = tmp_path / "a.jsonl"
    a.write_bytes(jsonl_bytes(recs[:10]))
    b = tmp_path / "b.jsonl"
    b.write_bytes(jsonl_bytes(recs[10:20]))
    out2 = tmp_path / "out2"
    report = run([str(tmp_path / "*.jsonl"), str(root / "default" / "test")], str(out2), CFG)
    assert report["documents"]["in"] == 20 + len(recs) - 30
    assert [i["path"] for i in report["inputs"]] == [str(a), str(b), str(
        root / "default" / "test" / "0000.parquet")]


def test_text_directory_one_document_per_file(tmp_path):
    root = tmp_path / "notes"
    (root / "sub").mkdir(parents=True)
    body = "the quick brown fox jumps over the lazy dog near the river bank today"
    files = {"a.txt": body, "sub/b.txt": body + " again", "c.txt": "something else entirely",
             "sub/d.txt": body}
    for rel, text in files.items():
        (root / rel).write_text(text)
    (root / "sub" / "bad.txt").write_bytes(b"caf\xe9 latin-1 text here")
    (root / "ignored.md").write_text("not a .txt file")
    out = tmp_path / "out"
    report = run([str(root)], str(out), CFG)
    assert report["documents"]["in"] == 5
    assert report["documents"]["invalid_utf8_replaced"] == 1
    cl = pq.read_table(out / "clusters.parquet")
    ids = cl["id"].to_pylist()
    assert ids == ["a.txt", "c.txt", "sub/b.txt", "sub/bad.txt", "sub/d.txt"]
    kept = dict(zip(ids, cl["kept"].to_pylist()))
    assert kept["a.txt"] and not kept["sub/d.txt"]           # exact copy of a.txt
    written = sorted(os.path.relpath(os.path.join(d, f), out / "data")
                     for d, _, fs in os.walk(out / "data") for f in fs)
    assert written == sorted(os.path.join("notes", i) for i, k in kept.items() if k)
    assert (out / "data" / "notes" / "sub" / "bad.txt").read_bytes() == \
        (root / "sub" / "bad.txt").read_bytes()


def test_reading_is_the_same_whatever_the_block_size(tmp_path):
    recs = make_docs(60)
    body = bytearray()
    for i, r in enumerate(recs):
        body += json.dumps(r).encode() + (b"\r\n" if i % 3 == 0 else b"\n")
        if i % 11 == 0:
            body += b"   \n\n"
    p = tmp_path / "x.jsonl"
    p.write_bytes(b"\xef\xbb\xbf" + bytes(body))
    ref = read_jsonl_shard(str(p))
    assert ref.texts.to_pylist() == [r["text"] for r in recs]
    assert ref.slow_blocks == 0                       # clean input: Arrow only
    for bs in (1, 50, 333, 4096):
        d = read_jsonl_shard(str(p), block_bytes=bs)
        assert d.texts.equals(ref.texts) and d.ids.equals(ref.ids)
        assert np.array_equal(d.lines, ref.lines)
    lines = bytes(body).split(b"\n")
    for k, ln in zip(range(5), ref.lines):
        assert json.loads(lines[ln - 1])["text"] == recs[k]["text"]
    keep = ref.lines[::2]
    out = tmp_path / "k.jsonl"
    write_kept_lines(str(p), keep, str(out), block_bytes=64)
    # lines copied byte for byte: the byte-order mark belongs to the first line
    assert keep[0] == 1
    assert out.read_bytes() == b"\xef\xbb\xbf" + b"".join(lines[i - 1] + b"\n" for i in keep)


def test_texts_gathered_into_one_buffer_are_those_arrow_concatenates(tmp_path):
    """A plain file's texts are copied block by block into one buffer of the
    file's size (:class:`~gpu_dedup.io.jsonl.TextSink`), which grows where
    replaced invalid UTF-8 makes them longer than the file: the same array
    as the blocks' arrays concatenated, and the same as a gzip file of the
    same lines (read without a size)."""
    from gpu_dedup.io.jsonl import TextSink
    parts = [pa.array(["ab", "", "cdé"], pa.large_string()),
             pa.array(["x", "yz", "w"], pa.large_string()).slice(1, 2),
             pa.array([], pa.large_string()), pa.array(["q" * 50], pa.large_string())]
    for cap in (None, 1, 8, 1000):
        sink = TextSink(cap)
        sink.add(parts)
        got = sink.array()
        got.validate(full=True)
        assert got.equals(pa.concat_arrays(parts)) and len(sink) == len(got)
    # 200 invalid bytes become 200 replacement characters (600 bytes): the
    # texts outgrow the file, in every block size
    recs = [b'{"id":"%d","text":"%s"}' % (i, (b"\xff" * 200 if i % 4 == 0 else b"ok %d" % i))
            for i in range(30)]
    raw = b"\n".join(recs) + b"\n"
    p = tmp_path / "x.jsonl"
    p.write_bytes(raw)
    g = tmp_path / "x.jsonl.gz"
    g.write_bytes(gzip.compress(raw))
    want = ["\ufffd" * 200 if i % 4 == 0 else f"ok {i}" for i in range(30)]
    assert sum(len(t.encode()) for t in want) > len(raw)
    for bs in (1, 64, 4096):
        d = read_jsonl_shard(str(p), block_bytes=bs)
        assert d.texts.to_pylist() == want and d.invalid_utf8 == 8
        d.texts.validate(full=True)
        z = read_jsonl_shard(str(g), block_bytes=bs)
        assert z.texts.equals(d.texts) and z.ids.equals(d.ids)
    # ids gathered the same way, until a record without one (skipped): the
    # same texts, ids and lines as the gzip file's
    raw = b"".join(b'{"id":"%d","text":"t%d"}\n' % (i, i) if i != 17 else b'{"text":"none"}\n'
                   for i in range(40))
    p.write_bytes(raw)
    g.write_bytes(gzip.compress(raw))
    for bs in (1, 64, 4096):
        d = read_jsonl_shard(str(p), block_bytes=bs, on_bad_record="skip")
        z = read_jsonl_shard(str(g), block_bytes=bs, on_bad_record="skip")
        assert d.ids.to_pylist() == [str(i) for i in range(40) if i != 17]
        assert d.texts.equals(z.texts) and d.ids.equals(z.ids)
        assert np.array_equal(d.lines, z.lines) and d.skipped == z.skipped


def test_an_error_in_a_later_block_names_its_line_and_file(tmp_path):
    """Blocks before it were parsed; a bad record, or a compressed stream that
    ends half-way, is still one error naming the line or the file."""
    from gpu_dedup.errors import InputError
    recs = make_docs(40)
    lines = [json.dumps(r).encode() for r in recs]
    lines[33] = b'{"text": "cut short'
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(InputError, match=r"bad\.jsonl:34"):
        read_jsonl_shard(str(bad), block_bytes=200)
    gz = tmp_path / "cut.jsonl.gz"
    whole = gzip.compress(b"".join(ln + b"\n" for ln in lines[:30]) * 50)
    gz.write_bytes(whole[:len(whole) // 2])          # the stream ends half-way
    with pytest.raises(InputError, match=r"cut\.jsonl\.gz"):
        read_jsonl_shard(str(gz), block_bytes=200)


def _awkward_jsonl(n=400, seed=11) -> bytes:
    """Records with everything a block may meet: blank lines, carriage
    returns, invalid UTF-8, literals JSON does not allow, a line that is
    not a record, ids missing on some records."""
    import random
    rng = random.Random(seed)
    out = []
    for i in range(n):
        r = rng.random()
        if r < 0.05:
            out.append(b"")
        elif r < 0.08:
            out.append(b'{"id": "%d", "text": "bad \xff byte %d"}' % (i, i))
        elif r < 0.10:
            out.append(b'{"id": "%d", "text": "score", "score": Inf}' % i)
        elif r < 0.12:
            out.append(b'{"id": "%d", "text": "nan", "score": NaN}\r' % i)
        elif r < 0.13:
            out.append(b"not a record %d" % i)
        elif r < 0.15:
            out.append(b'{"text": "no id %d"}' % i)
        else:
            out.append(json.dumps({"id": str(i), "text": f"doc {i} " + "w" * rng.randint(0, 300),
                                   "n": rng.random()}).encode())
    return b"\n".join(out) + b"\n"


def test_scanning_the_next_block_ahead_reads_the_same(tmp_path):
    """With the next block scanned in a worker thread (from a file's or
    piece's fourth block on) the reader gives what it gives block after
    block: texts, ids, line numbers, repaired records, skipped records; a
    piece of fewer blocks holds none ahead; every read, also one a bad
    record stops, uses the same one worker (a thread per file would take an
    allocator arena each)."""
    import threading
    from gpu_dedup.errors import InputError
    from gpu_dedup.io import jsonl_scan
    from gpu_dedup.io.plan import parse_jsonl_piece, sub_blocks
    p = tmp_path / "awkward.jsonl"
    raw = _awkward_jsonl()
    p.write_bytes(raw)

    def same(a, b):
        assert a.texts.equals(b.texts) and a.ids.equals(b.ids)
        assert np.array_equal(a.lines, b.lines) and a.skipped == b.skipped
        assert a.invalid_utf8 == b.invalid_utf8 > 0

    def workers():
        return [t for t in threading.enumerate() if t.name.startswith("gpu-dedup-read")]

    ahead = []                                  # per block scanned: by the worker?
    real_step = jsonl_scan.scan_block

    def counted(block):
        ahead.append(threading.current_thread().name.startswith("gpu-dedup-read"))
        return real_step(block)

    jsonl_scan.scan_block = counted
    try:
        one = read_jsonl_shard(str(p), on_bad_record="skip", block_bytes=len(raw) + 1)
        assert ahead == [False]                 # one block: read alone
        ahead.clear()
        plain = parse_jsonl_piece(str(p), sub_blocks(raw, len(raw) // 3 + 1), 0, "text", "id",
                                  "skip")
        # the first AHEAD_BLOCKS - 1 blocks in turn, the others ahead
        k = jsonl_scan.AHEAD_BLOCKS - 1
        assert len(ahead) > k and not any(ahead[:k]) and all(ahead[k:])
        ahead.clear()
        assert one.skipped and len(one.texts) > 300
        for bb in (300, 1000, 4096):
            got = read_jsonl_shard(str(p), on_bad_record="skip", block_bytes=bb)
            same(got, one)
            assert got.fast_blocks and got.slow_blocks
            piece = parse_jsonl_piece(str(p), sub_blocks(raw, bb), 0, "text", "id", "skip")
            assert piece["texts"].equals(plain["texts"]) and piece["ids"].equals(plain["ids"])
            assert np.array_equal(piece["lines"], plain["lines"])
            assert piece["skipped"] == plain["skipped"] and len(piece["texts"]) > len(one.texts)
            # each read: its first AHEAD_BLOCKS - 1 blocks in turn, every later one ahead
            k = jsonl_scan.AHEAD_BLOCKS - 1
            runs = [i for i in range(len(ahead)) if not ahead[i] and (i == 0 or ahead[i - 1])]
            assert len(runs) == 2 and all(not any(ahead[r:r + k]) for r in runs)
            assert sum(ahead) == len(ahead) - 2 * k > 2 * k
            ahead.clear()
    finally:
        jsonl_scan.scan_block = real_step
    first_bad = min(ln for ln, _ in one.skipped)
    for _ in range(3):
        with pytest.raises(InputError, match=rf"awkward\.jsonl:{first_bad}:"):
            read_jsonl_shard(str(p), block_bytes=300)
    assert len(workers()) == 1
    if hasattr(os, "fork"):             # a forked child starts a reader of its own
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:                        # pragma: no cover - the child
            try:
                got = read_jsonl_shard(str(p), on_bad_record="skip", block_bytes=300)
                os.write(w, b"1" if got.texts.equals(one.texts) else b"0")
            finally:
                os._exit(0)
        os.close(w)
        import select
        import signal
        ready, _, _ = select.select([r], [], [], 120)
        ok = os.read(r, 1) if ready else b"hung"
        if not ready:
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        assert ok == b"1", ok


def test_integer_and_mixed_ids(tmp_path):
    p = tmp_path / "ints.jsonl"
    p.write_text("".join(json.dumps({"id": 10 + i, "text": f"t {i}"}) + "\n" for i in range(5)))
    d = read_jsonl_shard(str(p))
    assert d.ids.to_pylist() == ["10", "11", "12", "13", "14"]
    q = tmp_path / "mixed.jsonl"
    q.write_text('{"id": 1, "text": "a"}\n{"id": "x", "text": "b"}\n{"id": 2.5, "text": "c"}\n'
                 '{"id": true, "text": "d"}\n')
    d = read_jsonl_shard(str(q))
    assert d.ids.to_pylist() == ["1", "x", "2.5", "true"]
    c = read_corpus([str(q)], id_field=None)
    assert c.ids.to_pylist() == [f"{q}:{i}" for i in range(1, 5)]
