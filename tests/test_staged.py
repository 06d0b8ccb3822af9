"""The out-of-core run (the disk store, many partitions) gives the in-memory
run's outputs byte for byte, whatever the partitioning, input format or
configuration."""
from __future__ import annotations

import dataclasses
import gzip
import json
import os
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpu_dedup.config import Config
from gpu_dedup.pipeline import deduplicate
from gpu_dedup.errors import ConfigError, InputError
from gpu_dedup.kernels.buckets import bucket_edges, segment_bucket_edges
from gpu_dedup.pipeline import run as _pipeline_run
from gpu_dedup.engine import layout, runner as runner_module
from gpu_dedup.engine.plan import make_plan
from gpu_dedup.io.plan import plan_reads, stream_chunks
from gpu_dedup.output import SUCCESS_NAME
from gpu_dedup.reference import smallest_of_components

# Few words and narrow bands: many unrelated documents share buckets, so
# that, with a small bucket bound, the greedy selection needs scores outside
# the windows and several passes.
CFG = Config(shingle="word", ngram=1, normalize=("lower", "ws"), num_perm=32, bands=16, rows=2,
             threshold=0.7, bucket_limit=2)


def run(inputs, output, cfg, **kw):
    """The in-memory pipeline, the reference (without its HTML report)."""
    import inspect
    if "html" in inspect.signature(_pipeline_run).parameters:
        kw.setdefault("html", False)
    return _pipeline_run(inputs, output, cfg, **kw)


def run_staged(inputs, output, cfg, memory_limit=None, **kw):
    """Out of core: the disk store (a work directory beside ``output``), each
    task's share ``memory_limit`` (partitions of that size)."""
    import inspect
    if "html" in inspect.signature(_pipeline_run).parameters:
        kw.setdefault("html", False)
    kw.setdefault("work_dir", os.path.join(os.path.dirname(str(output)),
                                           ".work-" + os.path.basename(str(output))))
    return _pipeline_run(inputs, output, cfg, partition_bytes=memory_limit, **kw)


def anchor_edges_segments(keys, docs, seg):
    return segment_bucket_edges(keys, docs, seg)


def anchor_edges(keys):
    n, b = keys.shape
    flat = np.ascontiguousarray(keys.T).reshape(-1)
    return anchor_edges_segments(flat, np.zeros(0, np.int64), np.arange(b + 1) * n)


def make_texts(n_base: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}" for i in range(60)]
    texts = []
    for _ in range(n_base):
        words = [vocab[i] for i in rng.integers(0, 60, size=int(rng.integers(6, 14)))]
        texts.append(" ".join(words))
        r = rng.random()
        if r < 0.3:
            w = list(words)
            w[int(rng.integers(len(w)))] = vocab[int(rng.integers(60))]
            texts.append(" ".join(w))
        elif r < 0.4:
            texts.append(" ".join(words).upper())
    return texts + ["", "   ", "x"]


def write_inputs(folder, texts, parquet_row_group=64) -> list[str]:
    """The texts spread over a plain JSONL (one line of invalid UTF-8, a blank
    line), a .jsonl.gz with integer ids, a .jsonl.zst without ids and a
    Parquet file of many row groups."""
    import zstandard
    os.makedirs(folder, exist_ok=True)
    q = len(texts) // 4
    parts = [texts[:q], texts[q:2 * q], texts[2 * q:3 * q], texts[3 * q:]]
    a = os.path.join(folder, "a.jsonl")
    with open(a, "wb") as f:
        for i, t in enumerate(parts[0]):
            f.write(json.dumps({"id": f"a{i}", "text": t}).encode() + b"\n")
            if i == 5:
                f.write(b"\n")
            if i == 7:
                f.write(b'{"id": "a-bad", "text": "caf\xe9 w1 w2 w3"}\n')
    b = os.path.join(folder, "b.jsonl.gz")
    with open(b, "wb") as f:
        f.write(gzip.compress("".join(json.dumps({"id": 10_000 + i, "text": t}) + "\n"
                                      for i, t in enumerate(parts[1])).encode(), mtime=0))
    c = os.path.join(folder, "c.jsonl.zst")
    with open(c, "wb") as f:
        f.write(zstandard.ZstdCompressor(level=3).compress(
            "".join(json.dumps({"text": t}) + "\n" for t in parts[2]).encode()))
    d = os.path.join(folder, "d.parquet")
    pq.write_table(pa.table({"id": [f"d{i}" for i in range(len(parts[3]))],
                             "text": parts[3], "extra": list(range(len(parts[3])))}),
                   d, row_group_size=parquet_row_group)
    return [a, b, c, d]


def output_bytes(folder) -> dict[str, bytes]:
    out = {}
    for root, _dirs, names in os.walk(folder):
        for n in names:
            # timings (the manifest holds report.json's hash and the time written)
            if n in ("report.json", "report.html", SUCCESS_NAME) or n.startswith(".gpu-dedup"):
                continue
            p = os.path.join(root, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, folder)] = f.read()
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpus")
    paths = write_inputs(str(folder / "in"), make_texts(700))
    ref = str(folder / "ref")
    report = run(paths, ref, CFG)
    return paths, ref, report


def with_longer_copies(paths, tmp_path) -> list:
    """``paths`` and a file of later copies of early texts of the corpus,
    longer as written (upper case, blanks around), the same once
    normalized: groups of identical texts whose longest document is a
    member in another chunk than their first."""
    texts = make_texts(700)
    extra = tmp_path / "longer.jsonl"
    extra.write_text("".join(json.dumps({"id": f"x{i}", "text": "  " + texts[i].upper() + "   "})
                             + "\n" for i in range(0, 200, 5)))
    return list(paths) + [str(extra)]


def assert_same(report_a, out_a, report_b, out_b):
    a = output_bytes(out_a)
    b = output_bytes(out_b)
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name] == b[name], name
    for k in ("documents", "clusters", "edges"):
        assert report_a[k] == report_b[k], k


def test_default_budget_equals_in_memory_run(corpus, tmp_path):
    paths, ref, ref_report = corpus
    assert ref_report["work"]["selection_rounds"] > 1  # several passes are exercised
    assert ref_report["documents"]["invalid_utf8_replaced"] == 1
    report = run_staged(paths, str(tmp_path / "out"), CFG, html=True)
    assert_same(ref_report, ref, report, str(tmp_path / "out"))
    assert report["work"]["chunks"] == len(paths)     # every file fits: one chunk each
    assert set(report["memory"]["peak_rss_bytes"]) >= {"read", "exact", "signatures", "buckets",
                                                        "select", "assign", "write"}
    assert report["work"]["store"] == "disk"
    assert report["scheduler"]["scheduler"] == "none"
    assert not os.path.exists(report["work"]["dir"])  # removed after success
    assert os.path.getsize(tmp_path / "out" / "report.html") > 1000
    assert report["outputs"]["report_html"] == "report.html"


def test_small_memory_limit_gives_the_same_result(corpus, tmp_path, monkeypatch):
    paths, ref, ref_report = corpus
    # the few pairs their bound rows leave to score exactly, in batches of 16
    monkeypatch.setattr(runner_module, "MIN_SCORE_BATCH", 16)
    # the state ranges pass on: each message a file, deleted once read
    from gpu_dedup.engine import select_stage, store as store_module
    monkeypatch.setattr(select_stage, "BYTES_PER_LOAD", 1 << 20)     # several ranges
    from gpu_dedup.engine import exact_tasks
    monkeypatch.setattr(exact_tasks, "SPLIT_PARTS", 2)      # fingerprints split by partition
    sent, dropped, merged, loaded = [], [], [], []
    real_save, real_discard = store_module.DiskStore.save_npy, store_module.DiskStore.discard
    real_load = store_module.DiskStore.load_npy

    def save(self, rel, arr):
        if "/carry/" in rel:
            sent.append(rel)
        return real_save(self, rel, arr)

    def load(self, rel, mmap=False):
        loaded.append(rel)
        return real_load(self, rel, mmap)

    def discard(self, rel):
        assert os.path.exists(os.path.join(self.root, rel))
        (dropped if "/carry/" in rel else merged).append(rel)
        return real_discard(self, rel)
    monkeypatch.setattr(store_module.DiskStore, "save_npy", save)
    monkeypatch.setattr(store_module.DiskStore, "discard", discard)
    monkeypatch.setattr(store_module.DiskStore, "load_npy", load)
    report = run_staged(paths, str(tmp_path / "out"), CFG, memory_limit="64KiB")
    assert_same(ref_report, ref, report, str(tmp_path / "out"))
    assert report["work"]["selection_ranges"] > 1
    assert sent and sorted(sent) == sorted(dropped)
    # the exact stage's slices, merged from its partitions a chunk at a time,
    # are deleted once the stage's arrays hold them
    spills = [r for r in merged if r.startswith("buckets/")]
    # each chunk's text and id fingerprints ordered by partition, deleted
    # once every partition read its slice: a chunk's fingerprints are read
    # once, not once a partition
    split = r"(exact|read/ids)/(\d+)/c(\d{6})/(fp|ix|bounds)\.npy"
    splits = [r for r in merged if re.fullmatch(split, r)]
    assert {re.fullmatch(split, r).group(1) for r in splits} == {"exact", "read/ids"}
    assert all(int(re.fullmatch(split, r).group(2)) > 1 for r in splits)
    for name in (layout.FP, layout.IDFP):
        reads = [r for r in loaded if r.startswith("read/f") and r.endswith("/" + name)]
        assert reads and len(reads) == len(set(reads)), name
    slices = [r for r in merged if r not in spills and r not in splits]
    assert slices and all(re.fullmatch(r"exact/\d+/s\d{6}/[a-z_]+\.npy", r) for r in slices)
    # the band keys a sweep of every key partition wrote ordered by
    # partition, deleted once its units are done
    assert spills and all(re.fullmatch(r"buckets/p\d+g\d+/s\d{5}/r\d+\.(keys|pos|off)\.npy", r)
                          for r in spills)
    w = report["work"]
    # every file split into several chunks (ranges, stream pieces, row groups),
    # several exact partitions, blocks, band units and verification batches
    assert w["chunks"] >= 3 * len(paths)
    assert w["units"]["exact"] > 1
    assert w["units"]["signatures"] > 1
    assert w["units"]["buckets"] > CFG.bands
    assert w["units"]["select"] > 1
    assert 0 < w["selection_bounded"] < w["selection_scored"]
    assert report["work"]["plan"]["task_bytes"] == 64 * 1024


@pytest.mark.parametrize("store", ["memory", "disk"])
def test_fingerprints_split_by_partition_give_the_same_bytes(corpus, tmp_path, monkeypatch,
                                                             store):
    """The exact stage and the ids check over fingerprints split by partition
    (:func:`gpu_dedup.engine.exact_tasks.task_split`, here from 2
    partitions on) give the outputs of the run in one partition, in memory
    and out of core; the split units are gone once they are read."""
    from gpu_dedup.engine import exact_tasks
    from gpu_dedup.engine import store as store_module
    paths, ref, ref_report = corpus
    monkeypatch.setattr(exact_tasks, "SPLIT_PARTS", 2)
    forgotten = []
    for cls in (store_module.MemoryStore, store_module.DiskStore):
        real = cls.forget
        monkeypatch.setattr(cls, "forget", lambda self, unit, real=real:
                            forgotten.append(unit) or real(self, unit))
    out = str(tmp_path / "out")
    report = (run_staged(paths, out, CFG, memory_limit="64KiB") if store == "disk"
              else run(paths, out, CFG, partition_bytes="64KiB"))
    assert report["work"]["store"] == store
    assert_same(ref_report, ref, report, out)
    assert report["work"]["units"]["exact"] > 2 * report["work"]["chunks"]
    splits = [u for u in forgotten if re.fullmatch(r"(exact|read/ids)/\d+/c\d{6}", u)]
    assert {u.split("/")[0] for u in splits} == {"exact", "read"}
    assert len(splits) == 2 * report["work"]["chunks"]


def test_outputs_written_in_slices_are_the_row_groups_of_one_write(corpus, tmp_path,
                                                                   monkeypatch):
    """clusters.parquet and pairs.parquet are written a few rows at a time
    (their ids gathered slice by slice) into row groups of a fixed size: the
    same bytes as one ``write_table`` of the whole table, whatever the slices."""
    from gpu_dedup.engine import outputs
    paths, _, _ = corpus
    monkeypatch.setattr(outputs, "ROW_GROUP", 64)
    got = {}
    for rows in (7, 1 << 20):
        monkeypatch.setattr(outputs, "NAME_ROWS", rows)
        out = str(tmp_path / f"out{rows}")
        run_staged(paths, out, CFG)
        got[rows] = output_bytes(out)
    assert got[7] == got[1 << 20]
    for name in ("clusters.parquet", "pairs.parquet"):
        path = str(tmp_path / "out7" / name)
        assert pq.ParquetFile(path).metadata.num_row_groups > 3, name
        t = pq.read_table(path)
        pq.write_table(t, str(tmp_path / name), row_group_size=64,
                       use_dictionary=outputs.dictionary_columns(t.schema))
        with open(tmp_path / name, "rb") as f:
            assert f.read() == got[7][name], name


def test_result_does_not_depend_on_the_budget(corpus, tmp_path):
    paths, ref, ref_report = corpus
    for lim in ("1MB",):
        out = str(tmp_path / lim)
        report = run_staged(paths, out, CFG, memory_limit=lim)
        assert_same(ref_report, ref, report, out)


@pytest.mark.parametrize("cfg", [
    Config(),                                                   # char 5-grams, nfkc,lower,ws
    Config(shingle="word", ngram=2, normalize=(), num_perm=64, bands=8, rows=8, threshold=0.5,
           keep="longest"),
    Config(shingle="word", ngram=1, num_perm=32, bands=16, rows=2, threshold=0.7,
           similarity="signature", exact=False),
    Config(shingle="char", ngram=3, num_perm=32, bands=8, rows=4, threshold=0.6, verify=False,
           signature_bits=64),
], ids=["default", "longest", "signature-noexact", "noverify-64bit"])
def test_configurations(corpus, tmp_path, cfg):
    paths = corpus[0]
    ref = str(tmp_path / "ref")
    ref_report = run(paths, ref, cfg)
    out = str(tmp_path / "out")
    report = run_staged(paths, out, cfg, memory_limit="96KiB")
    assert_same(ref_report, ref, report, out)


@pytest.mark.parametrize("cfg", [CFG, dataclasses.replace(CFG, keep="longest"),
                                 dataclasses.replace(CFG, cluster="components")],
                         ids=["first", "longest", "components"])
def test_pairs_merged_a_few_rows_at_a_time_give_the_same_bytes(corpus, tmp_path, monkeypatch,
                                                                cfg):
    """The similar pairs of a range of first members (selection) and of a
    chunk (assign) are merged from their sorted sources a slice of rows at
    a time, so that the first copies of large clusters, which hold most
    pairs, never bring them all at once: slices of five rows give the bytes
    of the run that merged everything in one slice."""
    from gpu_dedup.engine import plan as plan_module
    paths = corpus[0]
    ref = str(tmp_path / "ref")
    ref_report = run(paths, ref, cfg)
    assert pq.read_metadata(os.path.join(ref, "pairs.parquet")).num_rows > 100
    asked = []

    def five(self):
        asked.append(1)
        return 5
    monkeypatch.setattr(plan_module.Plan, "pair_slice_rows", property(five))
    out = str(tmp_path / "out")
    report = run_staged(paths, out, cfg, memory_limit="96KiB")
    assert_same(ref_report, ref, report, out)
    assert asked


def key_partition(keys: np.ndarray, parts: int) -> np.ndarray:
    """The key-space partition of each band key, as the band stage defines
    it (``kernels.buckets.keys_of_partition``): high bits, so that the hash
    tables keep using the well-mixed low bits."""
    return ((keys >> np.uint64(40)) % np.uint64(parts)).astype(np.int64)


def test_key_partitions_give_the_bucket_edges_of_the_whole():
    """The band stage's units: any split of a band's keys by key partition,
    positions kept, gives the engine's candidate edges over the whole."""
    rng = np.random.default_rng(3)
    for n, b, distinct in [(1, 1, 1), (50, 3, 5), (2000, 7, 300), (5000, 4, 4000)]:
        keys = rng.integers(0, distinct, size=(n, b)).astype(np.uint64)
        keys *= np.uint64(0x9E3779B97F4A7C15)
        want = bucket_edges(keys, np.ones(n, dtype=np.bool_))
        assert np.array_equal(anchor_edges(keys), want)
        for parts in (2, 5):
            flat, docs, seg = [], [], [0]
            for j in range(b):
                col = keys[:, j]
                for p in range(parts):
                    sel = np.flatnonzero(key_partition(col, parts) == p)
                    flat.append(col[sel])
                    docs.append(sel.astype(np.int64))
                    seg.append(seg[-1] + sel.size)
            got = anchor_edges_segments(np.concatenate(flat), np.concatenate(docs),
                                        np.array(seg, dtype=np.int64))
            assert np.array_equal(got, want)


@pytest.mark.parametrize("parts", [2, 3, 8])
def test_the_keys_of_a_partition_in_one_pass(parts):
    """``keys_of_partition``: the keys ``key_partition`` puts in each
    partition, in order, with their positions; every key in one."""
    from gpu_dedup.kernels.buckets import keys_of_partition
    rng = np.random.default_rng(parts)
    keys = rng.integers(0, 2**63, size=200_001, dtype=np.int64).astype(np.uint64) * np.uint64(2)
    seen = 0
    for p in range(parts):
        sel = np.flatnonzero(key_partition(keys, parts) == p)
        got_k, got_d = keys_of_partition(keys, parts, p, 7)
        assert np.array_equal(got_k, keys[sel])
        assert np.array_equal(got_d, sel + 7)
        seen += sel.size
    assert seen == keys.size
    # every partition at once: the same keys and positions, one after another
    from gpu_dedup.kernels.buckets import partition_order
    for n in (0, 1, keys.size):
        out_k, out_p, off = partition_order(keys[:n], parts)
        assert out_p.dtype == np.uint32 and off.shape == (parts + 1,) and off[-1] == n
        for p in range(parts):
            sel = np.flatnonzero(key_partition(keys[:n], parts) == p)
            assert np.array_equal(out_k[off[p]:off[p + 1]], keys[sel])
            assert np.array_equal(out_p[off[p]:off[p + 1]], sel)


@pytest.mark.parametrize("sweep", ["spill", "memory", "unit by unit"])
def test_bucket_units_swept_by_group_of_bands_or_one_by_one_give_the_same_bytes(
        corpus, tmp_path, monkeypatch, sweep):
    """Several key partitions: each group of bands read once and routed to
    its partitions (a sweep, its routed keys spilt to the store or held in
    memory), or read by every unit of the group for its own partition: the
    same outputs as in memory."""
    from gpu_dedup.engine import bucket_tasks as tasks_module, store as store_module
    paths, ref, ref_report = corpus
    routed, made, spilt = [], [], []
    real = tasks_module.partition_order
    monkeypatch.setattr(tasks_module, "partition_order",
                        lambda keys, parts: routed.append(parts) or real(keys, parts))
    real_sweep, real_sweeping = tasks_module.task_lsh_sweep, runner_module.Runner.sweeping
    monkeypatch.setattr(tasks_module, "task_lsh_sweep", lambda sw, ctx, blocks: real_sweep(
        {**sw, "in_memory": sweep == "memory"}, ctx, blocks))

    def sweeping(self, parts, groups):
        made.append(parts)
        return sweep != "unit by unit" and real_sweeping(self, parts, groups)
    monkeypatch.setattr(runner_module.Runner, "sweeping", sweeping)
    real_save = store_module.DiskStore.save_npy
    monkeypatch.setattr(store_module.DiskStore, "save_npy", lambda self, rel, arr: (
        spilt.append(rel) if re.search(r"/s\d{5}/", rel) else None, real_save(self, rel, arr)))
    out = str(tmp_path / "out")
    report = run_staged(paths, out, CFG, memory_limit="64KiB")
    assert_same(ref_report, ref, report, out)
    assert made and made[0] > 1                       # several partitions
    assert bool(routed) == (sweep != "unit by unit") and set(routed) <= {made[0]}
    assert bool(spilt) == (sweep == "spill")


@pytest.mark.parametrize("implicit", [True, False])
def test_split_segments_give_the_same_distinct_buckets(implicit):
    """Band segments cut into parts by key bits before grouping: the same
    buckets once made distinct, whether positions are given or implicit."""
    from gpu_dedup.stages.lsh import split_ways
    from gpu_dedup.kernels.buckets import segment_buckets, split_segments
    from gpu_dedup.stages.lsh import distinct_buckets
    rng = np.random.default_rng(11)
    sizes = [50_000, 0, 3, 20_000]
    seg = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    keys = (rng.integers(0, 9_000, seg[-1]).astype(np.uint64)
            * np.uint64(0x9E3779B97F4A7C15))
    docs = (np.zeros(0, np.int64) if implicit
            else np.concatenate([np.sort(rng.choice(10**6, n, replace=False))
                                 for n in sizes]).astype(np.int64))
    want = distinct_buckets(*segment_buckets(keys, docs, seg))
    for ways in (2, 8, 64):
        k, d, s = split_segments(keys, docs, seg, ways)
        assert s.size == 4 * ways + 1 and s[-1] == keys.size
        got = distinct_buckets(*segment_buckets(k, d, s))
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    assert want[0].size > 100
    assert split_ways(np.array([0, 1000], np.int64)) == 1
    assert split_ways(np.array([0, 25_000_000], np.int64)) == 64


def test_anchor_edges_empty():
    got = anchor_edges_segments(np.zeros(0, np.uint64), np.zeros(0, np.int64),
                                np.zeros(1, np.int64))
    assert got.size == 0


def test_plan_reads_cover_each_file_exactly(tmp_path):
    texts = make_texts(300, seed=5)
    paths = write_inputs(str(tmp_path), texts, parquet_row_group=32)
    units = plan_reads(paths, 2048)
    a = [u for u in units if u["file"] == 0]
    assert all(u["kind"] == "bytes" for u in a) and len(a) > 2
    assert a[0]["start"] == 0 and a[-1]["stop"] == os.path.getsize(paths[0])
    assert all(x["stop"] == y["start"] for x, y in zip(a, a[1:]))
    raw = open(paths[0], "rb").read()
    for u in a:      # every range ends after a newline, line counts add up
        assert raw[u["stop"] - 1:u["stop"]] == b"\n"
        assert u["line_base"] == raw[:u["start"]].count(b"\n")
    assert [u["kind"] for u in units if u["file"] in (1, 2)] == ["stream", "stream"]
    d = [u for u in units if u["file"] == 3]
    assert all(u["kind"] == "rowgroups" for u in d)
    n_groups = pq.ParquetFile(paths[3]).num_row_groups
    assert sum((u["row_groups"] for u in d), []) == list(range(n_groups))
    # the stream is cut by the same rule as the ranges
    import zstandard
    body = zstandard.ZstdDecompressor().stream_reader(open(paths[2], "rb")).read()
    pieces = [b"".join(blocks) for _k, blocks in stream_chunks(paths[2], 1024)]
    assert len(pieces) > 2
    assert b"".join(pieces) == body
    assert all(p.endswith(b"\n") and len(p) >= 1024 for p in pieces[:-1])


def test_plan_scales_with_the_budget():
    small = make_plan(256 << 20)
    big = make_plan(8 << 30)
    assert small.chunk_bytes < big.chunk_bytes
    assert big.chunk_bytes & (big.chunk_bytes - 1) == 0
    assert make_plan(4 << 30, 4).task_bytes * 4 <= 4 << 30
    assert make_plan(1 << 30, 1).task_bytes == (1 << 30) - (256 << 20)


def _bad_line_file(tmp_path, line_no, payload=b"{not json"):
    p = tmp_path / "bad.jsonl"
    with open(p, "wb") as f:
        for i in range(1, 400):
            if i == line_no:
                f.write(payload + b"\n")
            else:
                f.write(json.dumps({"id": str(i), "text": f"document {i} words"}).encode() + b"\n")
    return str(p)


@pytest.mark.parametrize("payload", [b"{not json", b'{"id": "z"}', b'{"id": "z", "text": 5}'])
def test_bad_line_in_a_later_chunk_is_named_as_in_memory(tmp_path, payload):
    src = _bad_line_file(tmp_path, 333, payload)
    with pytest.raises(InputError) as want:
        run([src], str(tmp_path / "o1"), CFG)
    with pytest.raises(InputError) as got:
        run_staged([src], str(tmp_path / "o2"), CFG, memory_limit="64KiB")
    assert str(got.value) == str(want.value)
    assert ":333:" in str(got.value)
    assert not os.path.exists(tmp_path / "o2")


def test_duplicate_id_across_chunks_is_named_as_in_memory(tmp_path):
    p = tmp_path / "dup.jsonl"
    with open(p, "w") as f:
        for i in range(600):
            f.write(json.dumps({"id": "same" if i in (40, 500, 550) else str(i),
                                "text": f"text {i}"}) + "\n")
    with pytest.raises(InputError) as want:
        run([str(p)], str(tmp_path / "o1"), CFG)
    with pytest.raises(InputError) as got:
        run_staged([str(p)], str(tmp_path / "o2"), CFG, memory_limit="64KiB")
    assert str(got.value) == str(want.value)


def test_ids_missing_in_a_later_chunk(tmp_path):
    p = tmp_path / "mixed.jsonl"
    with open(p, "w") as f:
        for i in range(600):
            rec = {"text": f"text {i}"} if i >= 300 else {"id": str(i), "text": f"text {i}"}
            f.write(json.dumps(rec) + "\n")
    with pytest.raises(InputError) as want:
        run([str(p)], str(tmp_path / "o1"), CFG)
    with pytest.raises(InputError) as got:
        run_staged([str(p)], str(tmp_path / "o2"), CFG, memory_limit="64KiB")
    assert str(got.value) == str(want.value)


def test_refuses_non_empty_output_and_bad_options(corpus, tmp_path):
    paths = corpus[0]
    out = tmp_path / "full"
    out.mkdir()
    (out / "x").write_text("keep me")
    with pytest.raises(InputError):
        run_staged(paths, str(out), CFG)
    assert (out / "x").read_text() == "keep me"
    with pytest.raises(ConfigError, match="memory-limit"):
        _pipeline_run(paths, str(tmp_path / "o"), CFG, memory_limit="lots")
    with pytest.raises(ConfigError, match="scheduler"):
        run_staged(paths, str(tmp_path / "o"), CFG, scheduler="mpi")
    with pytest.raises(ConfigError, match="work-dir"):
        run_staged(paths, str(tmp_path / "o"), CFG, work_dir=os.path.dirname(paths[0]))
    # a budget below what a run can honour is refused at once, naming the smallest
    with pytest.raises(ConfigError, match=r"memory-limit 1.00 KiB is below .* 256.00 MiB"):
        _pipeline_run(paths, str(tmp_path / "o"), CFG, memory_limit="1KiB")
    assert not (tmp_path / "o").exists()


def test_overwrite_replaces_the_output(corpus, tmp_path):
    paths, ref, ref_report = corpus
    out = tmp_path / "o"
    out.mkdir()
    (out / "old").write_text("x")
    with pytest.raises(InputError, match="old"):   # not ours: refused and left alone
        run_staged(paths, str(out), CFG, overwrite=True, memory_limit="256KiB")
    assert (out / "old").read_text() == "x"
    (out / "old").unlink()
    run_staged(paths, str(out), CFG, memory_limit="256KiB")
    report = run_staged(paths, str(out), CFG, overwrite=True, memory_limit="256KiB")
    assert_same(ref_report, ref, report, str(out))


def test_engine_agrees_on_a_single_array(tmp_path):
    """The staged run over one file equals ``deduplicate`` over its texts."""
    texts = make_texts(300, seed=9)
    src = tmp_path / "one.jsonl"
    with open(src, "w") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": i, "text": t}) + "\n")
    res = deduplicate(texts, CFG)
    run_staged([str(src)], str(tmp_path / "o"), CFG, memory_limit="64KiB")
    cl = pq.read_table(tmp_path / "o" / "clusters.parquet")
    assert np.array_equal(cl["cluster"].to_numpy(), res.cluster)
    assert np.array_equal(cl["kept"].to_numpy(), res.kept)


def test_exact_arrays_merged_a_chunk_at_a_time(corpus, tmp_path):
    """The exact stage's arrays, merged chunk by chunk from several
    partitions of the fingerprints, are those of the whole corpus at once:
    the first active document of each group of identical texts, the others in
    position order with their representative and its number, and the pairs
    sorted by representative."""
    paths, _, _ = corpus
    work = str(tmp_path / "work")
    report = run_staged(paths, str(tmp_path / "out"), CFG, memory_limit="64KiB", work_dir=work,
                        keep_work_dir=True)
    assert report["work"]["chunks"] >= 3 * len(paths)

    def arrays(name):
        found = [os.path.join(d, n) for d, _s, ns in os.walk(work) for n in ns
                 if os.path.join(d, n).endswith(os.path.join(layout.EXACT, name))]
        return [np.load(p) for p in sorted(found)]
    parts = [d for d, _s, _n in os.walk(work) if re.search(r"/exact/\d+/p\d{5}$", d)]
    assert len(parts) > 1
    fps, acts = [], []
    for d, _s, ns in sorted(os.walk(work)):
        if "fp.npy" in ns and "/read/" in d + "/":
            fps.append((d, np.load(os.path.join(d, "fp.npy")),
                        np.load(os.path.join(d, "active.npy"))))
    fps.sort(key=lambda x: x[0])                   # chunk keys sort in position order
    fp = np.concatenate([f for _, f, _ in fps])
    active = np.concatenate([a for _, _, a in fps])
    first: dict = {}
    rep_of = np.full(len(fp), -1)
    for i in np.flatnonzero(active).tolist():
        rep_of[i] = first.setdefault((int(fp[i, 0]), int(fp[i, 1])), i)
    pos = np.arange(len(fp))
    reps = pos[active & (rep_of == pos)]
    members = pos[active & (rep_of != pos)]
    member_rep = rep_of[members]
    assert members.size > 10
    order = np.lexsort((members, member_rep))
    want = {"reps": reps, "members": members, "member_rep": member_rep,
            "member_group": np.searchsorted(reps, member_rep),
            "pair_rep": member_rep[order], "pair_member": members[order]}
    for name, w in want.items():
        (got,) = arrays(f"{name}.npy")
        assert got.dtype == np.int64 and np.array_equal(got, w), name
    # the slices are gone once the stage's arrays hold them
    assert not [d for d, _s, _n in os.walk(work) if re.search(r"/exact/\d+/s\d{6}$", d)
                and os.listdir(d)]


@pytest.mark.parametrize("keep,scheduler", [("first", "none"), ("longest", "none"),
                                            ("first", "processes")])
def test_ranks_numbered_past_32_bits_give_the_same_bytes(corpus, tmp_path, monkeypatch,
                                                         keep, scheduler):
    """No cap on documents: the selection's ranks (and the pairs of them)
    are 64-bit throughout. With the ranks numbered across 2**32 (some
    below, most above), as a run of more than 2**32 documents numbers them,
    out of core in several ranges, and in worker processes (which take the
    numbering from their tasks, not from this process), the outputs are
    those of the ranks numbered from 0."""
    from gpu_dedup.engine import select_stage
    paths, ref, ref_report = corpus
    cfg = dataclasses.replace(CFG, keep=keep)
    monkeypatch.setattr(select_stage, "BYTES_PER_LOAD", 1 << 20)     # several ranges
    kw = dict(memory_limit="64KiB", scheduler=scheduler,
              **({"workers": 2} if scheduler != "none" else {}))
    base = run_staged(paths, str(tmp_path / "base"), cfg, **kw)
    far = (1 << 32) - 100
    monkeypatch.setattr(select_stage, "RANK_BASE", far)
    seen = []
    real = select_stage.RangeSelector.problem

    def problem(self, k, r0, entries, heads):
        seen.extend([int(entries[1].min()), int(entries[1].max())])
        return real(self, k, r0, entries, heads)
    monkeypatch.setattr(select_stage.RangeSelector, "problem", problem)
    report = run_staged(paths, str(tmp_path / "out"), cfg, **kw)
    # the ranges read ranks on both sides of 2**32, none below the first
    assert seen and far <= min(seen) < 1 << 32 < max(seen)
    assert report["work"]["selection_ranges"] > 1
    assert_same(base, str(tmp_path / "base"), report, str(tmp_path / "out"))
    if keep == "first":
        assert_same(ref_report, ref, report, str(tmp_path / "out"))


def test_keep_longest_priority_by_tasks_is_the_sort_of_every_key(corpus, tmp_path,
                                                                 monkeypatch):
    """keep="longest": the priority computed by tasks, in several parts of
    the order and chunks (``engine/priority.py``), is the order of one sort
    of every representative's key (the length of the longest document of
    its group, longest first, then that document's position), its inverse,
    and each group's kept document, as the work directory holds them."""
    import glob

    import numpy as np
    from gpu_dedup.engine import priority
    paths = with_longer_copies(corpus[0], tmp_path)
    cfg = dataclasses.replace(CFG, keep="longest")
    sizes = []
    real = priority.task_order

    def task_order(item, ctx, rep_starts):
        out = real(item, ctx, rep_starts)
        sizes.append(out["n"])
        return out
    monkeypatch.setattr(priority, "task_order", task_order)
    monkeypatch.setattr(priority, "BYTES_PER_KEY", 1024)        # parts of about 64 keys
    report = run_staged(paths, str(tmp_path / "out"), cfg, memory_limit="64KiB",
                        work_dir=str(tmp_path / "work"), keep_work_dir=True)
    assert report["work"]["chunks"] > 3
    assert len(sizes) > 5 and max(sizes) <= 3 * 64             # parts bounded by the samples
    root = glob.glob(str(tmp_path / "work" / "*"))[0]

    def load(rel):
        return np.load(os.path.join(root, rel))
    reps, members = load(layout.exact("reps")), load(layout.exact("members"))
    member_rep = load(layout.exact("member_rep"))
    chunk_keys = sorted(os.path.basename(p)[:-len(".done")]
                        for p in glob.glob(os.path.join(root, "read", "*.done")))
    lengths = np.concatenate([load(layout.chunk_file(k, layout.LENGTHS)) for k in chunk_keys])
    assert lengths.size == report["documents"]["in"]
    # the reference: every key at once
    group = np.concatenate([np.arange(reps.size), np.searchsorted(reps, member_rep)])
    docs = np.concatenate([reps, members])
    length = lengths[docs].astype(np.int64)
    order = np.lexsort((docs, -length, group))
    head = np.ones(order.size, bool)
    head[1:] = group[order][1:] != group[order][:-1]
    best, best_len = docs[order[head]], length[order[head]]
    pos_of_rank = np.lexsort((best, -best_len))
    assert np.array_equal(load(layout.BEST), best)
    # the members' lengths, kept beside the pairs by the exact stage
    pair_member = load(layout.exact("pair_member"))
    assert pair_member.size and np.array_equal(load(layout.exact(layout.PAIR_LENGTHS)),
                                               lengths[pair_member])
    assert (best != reps).any()              # groups that keep a longer member
    assert np.array_equal(load(layout.POS_OF_RANK), pos_of_rank)
    assert np.array_equal(load(layout.POS_RANK)[pos_of_rank], np.arange(reps.size))
    assert (np.diff(best_len[pos_of_rank]) <= 0).all() and len(set(best_len.tolist())) > 3
    assert not glob.glob(os.path.join(root, layout.PRIORITY, "**", "*.npy"), recursive=True)


@pytest.mark.parametrize("keep", ["first", "longest"])
def test_components_over_many_chunks_are_the_components_of_the_pairs(corpus, tmp_path, keep):
    """--cluster components labels only the documents with a pair (the
    others are clusters of their own): out of core in many chunks it
    writes what the in-memory run writes, each document's cluster is the
    smallest document of its component in the graph of pairs.parquet, each
    cluster keeps one document (keep first: that smallest one) and every
    removed one names it."""
    paths = with_longer_copies(corpus[0], tmp_path)
    cfg = dataclasses.replace(CFG, cluster="components", keep=keep)
    ref = str(tmp_path / "ref")
    ref_report = run(paths, ref, cfg)
    out = str(tmp_path / "out")
    report = run_staged(paths, out, cfg, memory_limit="64KiB")
    assert report["work"]["chunks"] > 3
    assert_same(ref_report, ref, report, out)
    cl = pq.read_table(os.path.join(out, "clusters.parquet")).to_pydict()
    pairs = pq.read_table(os.path.join(out, "pairs.parquet")).to_pydict()
    row = {x: i for i, x in enumerate(cl["id"])}
    n = len(row)
    assert len(pairs["id_a"]) > 50 and cl["kept"].count(False) > 50
    assert cl["cluster"] == smallest_of_components(
        n, [(row[a], row[b]) for a, b in zip(pairs["id_a"], pairs["id_b"])])
    kept_of = {}
    for i in range(n):
        if cl["kept"][i]:
            assert cl["cluster"][i] not in kept_of             # one kept document a cluster
            kept_of[cl["cluster"][i]] = cl["id"][i]
    assert set(kept_of) == set(cl["cluster"])
    for i in range(n):
        if not cl["kept"][i]:
            assert cl["duplicate_of"][i] == kept_of[cl["cluster"][i]]
    if keep == "first":
        assert all(k == (c == i) for i, (k, c) in enumerate(zip(cl["kept"], cl["cluster"])))
    else:                                          # a longer copy kept in some cluster
        assert any(k and c != i for i, (k, c) in enumerate(zip(cl["kept"], cl["cluster"])))
