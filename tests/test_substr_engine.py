"""Exact-substring deduplication through the engine: out of core, on Dask,
resumed after a kill, under forced hash collisions and on the simulated GPU,
the outputs are the bytes of the in-memory run, and the in-memory run is the
definition's (``test_substr.oracle``)."""
from __future__ import annotations

import gzip
import json
import os
import random
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gpu_dedup.kernels.substr as KS
from gpu_dedup.substr import exact_substrings, run
from test_substr import oracle

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUTPUTS = ("spans.parquet", "documents.parquet")


def make_texts(n=240, seed=3):
    """Documents of random words with shared passages (boilerplate of 6 to
    30 words) planted at random places, some twice, a few exact copies."""
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(300)] + ["Ünï", "日本", "ß", "x"]
    passages = [" ".join(rng.choice(vocab) for _ in range(rng.randint(6, 30)))
                for _ in range(12)]
    texts = []
    for i in range(n):
        parts = [" ".join(rng.choice(vocab) for _ in range(rng.randint(0, 25)))]
        for _ in range(rng.randint(0, 3)):
            parts.append(rng.choice(passages))
            parts.append(" ".join(rng.choice(vocab) for _ in range(rng.randint(0, 8))))
        texts.append(rng.choice([" ", "  ", "\n", "\t "]).join(parts))
    texts[7] = texts[3]
    texts[n // 5] = ""
    return texts


def write_corpus(folder, texts):
    """Three shards: JSONL, gzipped JSONL and Parquet."""
    os.makedirs(folder, exist_ok=True)
    k = len(texts) // 3
    parts = [texts[:k], texts[k:2 * k], texts[2 * k:]]
    paths = [os.path.join(folder, "a.jsonl"), os.path.join(folder, "b.jsonl.gz"),
             os.path.join(folder, "c.parquet")]
    base = 0
    for path, part in zip(paths, parts):
        ids = [f"doc{base + i}" for i in range(len(part))]
        base += len(part)
        if path.endswith(".parquet"):
            pq.write_table(pa.table({"id": ids, "text": part, "n": list(range(len(part)))}),
                           path, row_group_size=17)
            continue
        raw = "".join(json.dumps({"id": i, "text": t, "meta": {"k": j}}, ensure_ascii=False)
                      + "\n" for j, (i, t) in enumerate(zip(ids, part))).encode("utf-8")
        with open(path, "wb") as f:
            f.write(gzip.compress(raw, mtime=0) if path.endswith(".gz") else raw)
    return paths


def read(path):
    with open(path, "rb") as f:
        return f.read()


def assert_same(ref, out):
    for name in OUTPUTS:
        assert read(os.path.join(ref, name)) == read(os.path.join(out, name)), name
    for name in ("a.jsonl", "b.jsonl.gz", "c.parquet"):
        assert read(os.path.join(ref, "data", name)) == read(os.path.join(out, "data", name)), \
            name
    a = json.loads(read(os.path.join(ref, "report.json")))
    b = json.loads(read(os.path.join(out, "report.json")))
    for k in ("documents", "units", "bytes", "spans", "windows", "repeated"):
        assert a[k] == b[k], k


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("substr")
    texts = make_texts()
    paths = write_corpus(str(folder / "in"), texts)
    ref = str(folder / "ref")
    report = run(paths, ref, min_length=8, min_doc_length=3, html=False)
    assert report["work"]["store"] == "memory"
    return texts, paths, ref, report


def test_the_in_memory_run_is_the_definition(corpus):
    texts, paths, ref, report = corpus
    spans, cut = oracle(texts, "word", 8, "first")
    got = pq.read_table(os.path.join(ref, "spans.parquet")).to_pylist()
    ids = [f"doc{i}" for i in range(len(texts))]
    assert [(s["id"], s["start"], s["end"], s["first_id"]) for s in got] == \
        [(ids[d], a, b, ids[f]) for d, a, b, f in spans]
    assert len(got) > 50 and report["units"]["removed"] > 500
    docs = pq.read_table(os.path.join(ref, "documents.parquet")).to_pylist()
    kept = [i for i, d in enumerate(docs) if not d["dropped"]]
    data = [json.loads(x)["text"] for x in open(os.path.join(ref, "data", "a.jsonl"))]
    data += [json.loads(x)["text"] for x in gzip.open(os.path.join(ref, "data", "b.jsonl.gz"))]
    data += pq.read_table(os.path.join(ref, "data", "c.parquet")).column("text").to_pylist()
    assert data == [cut[i] for i in kept]
    assert len(kept) < len(texts)


@pytest.mark.parametrize("how", [
    {"work_dir": True, "partition_bytes": "48KiB"},
    {"work_dir": True, "partition_bytes": "48KiB", "scheduler": "threads", "workers": 2},
    {"partition_bytes": "20KiB"},
    {"memory_limit": "256MiB", "partition_bytes": "32KiB", "scheduler": "processes",
     "workers": 2},
])
def test_out_of_core_and_on_dask_the_outputs_are_the_same_bytes(corpus, tmp_path, how):
    texts, paths, ref, _ = corpus
    how = dict(how)
    if how.pop("work_dir", False):
        how["work_dir"] = str(tmp_path / "work")
    out = str(tmp_path / "out")
    report = run(paths, out, min_length=8, min_doc_length=3, html=False, **how)
    assert report["work"]["chunks"] > 3
    assert report["work"]["units"]["windows"] > 1          # several hash ranges
    if "work_dir" in how or how.get("scheduler") == "processes":
        assert report["work"]["store"] == "disk"
        assert not os.path.exists(report["work"]["dir"])   # removed after success
    assert_same(ref, out)


def test_a_memory_limit_puts_the_run_on_disk_with_the_same_bytes(corpus, tmp_path):
    texts, paths, ref, _ = corpus
    big = str(tmp_path / "big.jsonl")
    rng = random.Random(0)
    with open(big, "w") as f:                               # ~12 MB of text
        for i in range(3000):
            a = rng.randrange(len(texts) - 40)
            f.write(json.dumps({"id": f"b{i}", "text": " ".join(texts[a:a + 40])[:4000]})
                    + "\n")
    mem = run([big], str(tmp_path / "mem"), min_length=8, html=False)
    disk = run([big], str(tmp_path / "disk"), min_length=8, memory_limit="256MiB", html=False)
    assert mem["work"]["store"] == "memory" and disk["work"]["store"] == "disk"
    assert disk["work"]["chunks"] >= 2 and disk["units"]["removed_share"] > 0.5
    for name in OUTPUTS + ("data/big.jsonl",):
        assert read(tmp_path / "mem" / name) == read(tmp_path / "disk" / name), name


CHILD = r"""
import json, os, signal, sys
from gpu_dedup.engine import substr as es
import gpu_dedup.substr as s
a = json.loads(sys.argv[1])
class Kill(es.SubstrRunner):
    def _progress(self, name, done, total):
        if name == a["stage"] and done >= a["after"]:
            os.kill(os.getpid(), signal.SIGKILL)
es.SubstrRunner = Kill
s.run(a["inputs"], a["output"], min_length=8, min_doc_length=3, html=False,
      partition_bytes="32KiB", work_dir=a["work"])
"""


@pytest.mark.parametrize("stage,after", [("read", 2), ("hash", 3), ("windows", 1),
                                         ("cut", 2)])
def test_a_kill_mid_stage_resumes_to_the_same_bytes(corpus, tmp_path, stage, after):
    texts, paths, ref, _ = corpus
    out, work = str(tmp_path / "out"), str(tmp_path / "work")
    args = {"inputs": paths, "output": out, "work": work, "stage": stage, "after": after}
    p = subprocess.run([sys.executable, "-c", CHILD, json.dumps(args)], capture_output=True,
                       text=True, cwd=ROOT, timeout=300)
    assert p.returncode == -signal.SIGKILL, p.stderr[-3000:]
    assert not os.path.exists(out)
    report = run(paths, out, min_length=8, min_doc_length=3, html=False,
                 partition_bytes="32KiB", work_dir=work)
    assert_same(ref, out)
    reused = report["work"]["reused"]
    assert reused.get(stage, 0) >= after, reused
    if stage != "read":
        assert reused.get("read", 0) == report["work"]["units"]["read"]


def _weak_strings(real):
    def weak(offsets, data, seed):
        h = real(offsets, data, seed)
        return h & np.uint64(0x7) if seed == 0 else h        # seed 0: 8 hashes in all
    return weak


def test_unit_and_window_hash_collisions_change_nothing(monkeypatch):
    texts = make_texts(120, seed=9)
    want = exact_substrings(pa.array(texts, pa.large_string()), "word", 6, "first")
    real_windows = KS.window_hashes

    def weak_windows(uh, unit_off, L):
        h, s = real_windows(uh, unit_off, L)
        return h & np.uint64(0x3), s                           # four window hashes in all
    monkeypatch.setattr(KS, "string_hashes", _weak_strings(KS.string_hashes))
    monkeypatch.setattr(KS, "window_hashes", weak_windows)
    got = exact_substrings(pa.array(texts, pa.large_string()), "word", 6, "first",
                           partition_bytes="8KiB")
    for f in ("units", "removed_units", "span_doc", "span_start", "span_end", "span_first_doc"):
        assert np.array_equal(getattr(got, f), getattr(want, f)), f
    assert got.texts.equals(want.texts)
    assert got.distinct == want.distinct and got.repeated == want.repeated
    spans, cut = oracle(texts, "word", 6, "first")
    assert got.texts.to_pylist() == cut


def test_a_unit_hash_collision_is_reported_and_hashed_again(tmp_path, monkeypatch, caplog):
    texts = make_texts(60, seed=1)
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"id": str(i), "text": t}) + "\n"
                           for i, t in enumerate(texts)))
    ref = run([str(src)], str(tmp_path / "ref"), min_length=5, html=False)
    monkeypatch.setattr(KS, "string_hashes", _weak_strings(KS.string_hashes))
    with caplog.at_level("WARNING", logger="gpu_dedup"):
        got = run([str(src)], str(tmp_path / "out"), min_length=5, html=False)
    assert ref["hash_seed"] == 0 and got["hash_seed"] == 1
    assert "share a 64-bit hash" in caplog.text
    for name in OUTPUTS + ("data/in.jsonl",):
        assert read(tmp_path / "ref" / name) == read(tmp_path / "out" / name)


def test_duplicate_ids_are_refused_out_of_core(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"id": "a" if i in (3, 40) else str(i),
                                       "text": f"t {i}"}) + "\n" for i in range(60)))
    p = subprocess.run([sys.executable, "-m", "gpu_dedup.cli", "substr", str(src), "-o",
                        str(tmp_path / "o"), "--work-dir", str(tmp_path / "w")],
                       capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 2
    assert "in.jsonl:41: duplicate id 'a' (first at" in p.stderr and "in.jsonl:4" in p.stderr
    assert not (tmp_path / "o").exists()


SIM = textwrap.dedent(r'''
    import json, sys
    import numpy as np, pyarrow as pa
    sys.path.insert(0, "tests")
    from gpu_dedup.backend import CpuBackend
    from gpu_dedup.backend_gpu import GpuBackend
    from gpu_dedup.kernels import cuda as kc, substr as ks
    from gpu_dedup.stages.normalize import text_buffers
    from gpu_dedup.substr import exact_substrings
    from test_substr_engine import make_texts
    out = {"simulator": bool(kc.SIMULATOR)}
    texts = make_texts(40, seed=5) + ["日本語 テキスト 😀 " * 9, "naïve café " * 12]
    arr = pa.array(texts, pa.large_string())
    off, data = text_buffers(arr)
    off, data = np.asarray(off, np.int64), np.asarray(data)
    out["string_hashes"] = bool(np.array_equal(kc.string_hashes(np, off, data, 3),
                                               ks.string_hashes(off, data, 3)))
    u_off = ks.units(off, data, True)[0]
    uh = np.random.default_rng(0).integers(0, 2 ** 63, int(u_off[-1]), dtype=np.uint64) * 3
    for L in (1, 5, 50):
        h, s = kc.substr_windows(np, uh, u_off, L)
        ch, cs = ks.window_hashes(uh, u_off, L)
        out[f"windows L={L}"] = bool(np.array_equal(h, ch) and np.array_equal(s, cs)
                                     and h.size > 0)
    be = GpuBackend(xp=np)
    for unit, L, keep in (("word", 4, "first"), ("char", 12, "none")):
        g = exact_substrings(arr, unit, L, keep, backend=be, partition_bytes="16KiB")
        c = exact_substrings(arr, unit, L, keep, backend=CpuBackend(), partition_bytes="16KiB")
        out[f"run {unit} {keep}"] = bool(
            all(np.array_equal(getattr(g, f), getattr(c, f)) for f in
                ("units", "removed_units", "span_doc", "span_start", "span_end",
                 "span_first_doc")) and g.texts.equals(c.texts) and c.removed_units.sum() > 0)
    out["backend"] = be.name
    print(json.dumps(out))
''')


def test_the_simulated_gpu_gives_the_cpu_result_bit_for_bit():
    from test_gpu_backend import run_simulated
    res = run_simulated(SIM)
    assert res.pop("simulator") and res.pop("backend") == "cuda-sim"
    assert all(res.values()), res
