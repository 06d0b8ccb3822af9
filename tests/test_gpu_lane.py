"""The whole GPU path against the CPU, bit for bit: in memory and out of core,
every ``--cluster`` mode, every normalization step, 64-bit signatures, and
exact-substring deduplication.

The matrix runs on a real device (marked ``gpu``: ``pytest -m gpu``, which
fails rather than skips without one); four of its cases run here too, in
Numba's CUDA simulator with the GPU backend's array code on NumPy, on a small
corpus (the simulator runs a kernel thread by thread).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from test_gpu_backend import needs_gpu, run_simulated
from test_staged import make_texts

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: (name, command-line options) of the run cases.
CASES = [
    ("memory-greedy-default", []),
    ("out-of-core-greedy", ["--memory-limit", "256MiB", "--work-dir", "{work}"]),
    ("components", ["--cluster", "components"]),
    ("out-of-core-components", ["--cluster", "components", "--work-dir", "{work}"]),
    ("nfkc", ["--normalize", "nfkc"]), ("lower", ["--normalize", "lower"]),
    ("punct", ["--normalize", "punct"]), ("digits", ["--normalize", "digits"]),
    ("ws", ["--normalize", "ws"]), ("all-steps", ["--normalize", "nfkc,lower,punct,digits,ws"]),
    ("none", ["--normalize", "none"]),
    ("64-bit", ["--signature-bits", "64"]),
    ("word-shingles", ["--shingle", "word", "--ngram", "3", "--threshold", "0.6"]),
    ("signature-similarity", ["--similarity", "signature"]),
]


#: The array modules of the backend's array code: NumPy here, CuPy on a device.
ARRAY_MODULES = [pytest.param("numpy", id="numpy"),
                 pytest.param("cupy", id="cupy", marks=[pytest.mark.gpu, needs_gpu])]

#: The cases the simulator runs (it runs a kernel thread by thread: slow).
SIM_CASES = ("memory-greedy-default", "out-of-core-components", "all-steps", "64-bit")


def _texts(n):
    texts = make_texts(n, seed=17)
    mixed = ["Ünïcödé «text» with ¼ and ﬁ ligatures, 12 345 digits!",
             "Ünïcödé «TEXT» with ¼ and ﬁ ligatures, 99 digits!", "日本語のテキスト、重複。",
             "日本語のテキスト、重複!", "tabs\tand\u00a0nbsp\u3000and  double", "TABS and nbsp"]
    return texts + mixed


def _write(folder, texts):
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "in.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": f"d{i}", "text": t}, ensure_ascii=False) + "\n")
    return path


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "gpu_dedup.cli", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=900)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("name,opts", CASES, ids=[c[0] for c in CASES])
def test_on_the_device_every_mode_gives_the_cpu_bytes(tmp_path, name, opts):
    src = _write(str(tmp_path), _texts(3000))
    outs = {}
    for device in ("cpu", "gpu"):
        o = [x.replace("{work}", str(tmp_path / f"work-{device}")) for x in opts]
        out = str(tmp_path / device)
        p = _cli("run", src, "-o", out, "-q", "--device", device, *o)
        assert p.returncode == 0, p.stderr
        outs[device] = out
    report = json.load(open(os.path.join(outs["gpu"], "report.json")))
    assert report["device"].startswith("gpu"), report["device"]
    for f in ("clusters.parquet", "pairs.parquet", "data/in.jsonl"):
        a = open(os.path.join(outs["cpu"], f), "rb").read()
        b = open(os.path.join(outs["gpu"], f), "rb").read()
        assert a == b, f


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("unit,L", [("word", 8), ("char", 40)])
def test_on_the_device_substr_gives_the_cpu_bytes(tmp_path, unit, L):
    src = _write(str(tmp_path), _texts(3000))
    for device in ("cpu", "gpu"):
        p = _cli("substr", src, "-o", str(tmp_path / device), "-q", "--device", device,
                 "--unit", unit, "-L", str(L))
        assert p.returncode == 0, p.stderr
    for f in ("spans.parquet", "documents.parquet", "data/in.jsonl"):
        assert (tmp_path / "cpu" / f).read_bytes() == (tmp_path / "gpu" / f).read_bytes(), f


SIM = textwrap.dedent(r'''
    import json, os, shlex, sys, tempfile
    sys.path.insert(0, "tests")
    import numpy as np
    from gpu_dedup.backend import CpuBackend
    from gpu_dedup.backend_gpu import GpuBackend
    from gpu_dedup.config import Config
    from gpu_dedup.pipeline import run
    from test_gpu_lane import CASES, SIM_CASES, _texts, _write
    tmp = tempfile.mkdtemp()
    src = _write(tmp, _texts(int(sys.argv[1])))
    out = {}
    for name, opts in [c for c in CASES if c[0] in SIM_CASES]:
        kw, cfg = {}, {}
        it = iter(opts)
        for o in it:
            v = next(it)
            if o == "--memory-limit": kw["memory_limit"] = v
            elif o == "--work-dir": kw["work_dir"] = os.path.join(tmp, "w-" + name)
            elif o == "--normalize":
                cfg["normalize"] = () if v == "none" else tuple(v.split(","))
            else: cfg[o[2:].replace("-", "_")] = int(v) if v.isdigit() else (
                float(v) if v.replace(".", "").isdigit() else v)
        if "work_dir" in kw: kw["partition_bytes"] = "16KiB"
        res = {}
        for dev, be in (("cpu", CpuBackend()), ("sim", GpuBackend(xp=np))):
            o = os.path.join(tmp, f"{name}-{dev}")
            rep = run([src], o, Config(**cfg), backend=be, html=False, **kw)
            res[dev] = [open(os.path.join(o, f), "rb").read() for f in
                        ("clusters.parquet", "pairs.parquet", "data/in.jsonl")]
            if dev == "sim": out[name + " backend"] = rep["device"]
        out[name] = res["cpu"] == res["sim"]
    print(json.dumps(out))
''')


def test_in_the_simulator_every_mode_gives_the_cpu_bytes():
    got = run_simulated(SIM.replace("int(sys.argv[1])", "16"))
    for name in SIM_CASES:
        assert got[name], name
        assert "cuda-sim" in got[name + " backend"], got[name + " backend"]



NORM = textwrap.dedent(r'''
    import json, sys
    import numpy as np, pyarrow as pa
    from gpu_dedup.backend_gpu import GpuBackend
    from gpu_dedup.stages.normalize import normalize_text
    texts = ["Hello,  World! 123", "naïve café «x» 12", "TABS\tand\nlines  ", "日本語 テキスト。",
             "", "  ", "A1B22-C333...", "ﬁ ligature ¼", "plain ascii only", "x\u00a0nbsp"]
    arr = pa.array(texts * 3, pa.large_string())
    be = GpuBackend(xp=np)
    out = {}
    for steps in (("lower",), ("punct",), ("digits",), ("ws",), ("nfkc",),
                  ("nfkc", "lower", "ws"), ("lower", "punct", "digits", "ws"),
                  ("ws", "punct"), ("nfkc", "lower", "punct", "digits", "ws")):
        got, on_host = be.normalize_counted(arr, steps)
        want = normalize_text(arr, steps)
        out[",".join(steps)] = [got.equals(want), on_host]
    print(json.dumps(out))
''')


def test_in_the_simulator_normalization_runs_on_the_device_for_ascii_documents():
    got = run_simulated(NORM)
    non_ascii = 3 * 4                # the documents with a code point above 127
    for steps, (same, on_host) in got.items():
        assert same, steps
        assert on_host == non_ascii, (steps, on_host)


@pytest.mark.parametrize("xp", ARRAY_MODULES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exact_grouping_by_a_device_sort_equals_the_cpu_hash_table(xp, seed):
    import numpy as np

    from gpu_dedup.backend_gpu import exact_representatives_sorted
    from gpu_dedup.stages.exact import exact_representatives
    xp = __import__(xp)
    rng = np.random.default_rng(seed)
    n = 5000
    pool = rng.integers(0, 2 ** 63, size=(300, 2), dtype=np.uint64)
    fp = pool[rng.integers(0, 300, size=n)]
    fp[rng.random(n) < 0.3, 1] ^= np.uint64(1)            # same first word, other second
    active = rng.random(n) > 0.1
    want = exact_representatives(fp, active)
    got = exact_representatives_sorted(xp, xp.asarray(fp), xp.asarray(active))
    got = got.get() if hasattr(got, "get") else got
    assert (want != np.arange(n)).sum() > 1000 and (want == -1).sum() > 100
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("xp", ARRAY_MODULES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_components_by_label_propagation_equal_scipys(xp, seed):
    import numpy as np

    from gpu_dedup.backend_gpu import components_propagation
    from gpu_dedup.stages.components import scipy_components
    xp = __import__(xp)
    rng = np.random.default_rng(seed)
    n = 3000
    m = [0, 1200, 5000][seed]
    ea = rng.integers(0, n, m)
    eb = rng.integers(0, n, m)
    chain = np.arange(0, 400)                      # a long path: many rounds of hooking
    ea, eb = np.concatenate([ea, chain[1:]]), np.concatenate([eb, chain[:-1]])
    got = components_propagation(xp, n, xp.asarray(ea), xp.asarray(eb))
    got = got.get() if hasattr(got, "get") else got
    want = scipy_components(n, ea, eb)
    smallest = np.full(want.max() + 1, n)
    np.minimum.at(smallest, want, np.arange(n))
    np.testing.assert_array_equal(got, smallest[want])     # each node: its component's least
    assert len(np.unique(got)) < n


SELECT = textwrap.dedent(r'''
    import json, sys
    import numpy as np
    sys.path.insert(0, "tests")
    from test_greedy import _flat, _random_case
    from gpu_dedup.backend import CpuBackend
    from gpu_dedup.backend_gpu import GpuBackend
    from gpu_dedup.stages.select import unpack
    rng = np.random.default_rng(5)
    gpu, cpu = GpuBackend(xp=np), CpuBackend()
    out = {"same": 0, "cases": 0, "where": set(), "removed": 0}
    for it in range(15):
        n, buckets, sim = _random_case(rng, n_max=40, size_max=20)
        kw = {"threshold": float(rng.choice([0.3, 0.5, 0.8])), "limit": int(rng.integers(1, 5)),
              "fixed": int(rng.integers(0, n + 1)) if it % 3 == 0 else 0,
              "accept_all": it % 5 == 0}
        score = lambda p: sim[unpack(p)]
        g = gpu.select(*_flat(buckets), n, score, **kw)
        c = cpu.select(*_flat(buckets), n, score, **kw)
        out["cases"] += 1
        out["where"].add(g.where)
        out["removed"] += int((~c.kept).sum())
        out["same"] += g.same_as(c)
    out["where"] = sorted(out["where"])
    print(json.dumps(out))
''')


def test_in_the_simulator_greedy_selection_runs_on_the_device_and_equals_the_cpu():
    got = run_simulated(SELECT)
    assert got["where"] == ["device"], got
    assert got["removed"] > 30
    assert got["same"] == got["cases"], got


MERGE = textwrap.dedent(r'''
    import json
    import numpy as np
    from gpu_dedup.backend import CpuBackend
    from gpu_dedup.backend_gpu import GpuBackend
    from gpu_dedup.doctor import Comparison, compare_segment_edges
    out = {}
    for budget in (16 << 10, 1 << 20, 256 << 20):
        be = GpuBackend(gpu_memory=budget, xp=np)
        fits = []
        merge_fits = be._merge_fits
        be._merge_fits = lambda items: fits.append(merge_fits(items)) or fits[-1]
        cmp = Comparison()
        compare_segment_edges(be, CpuBackend(), cmp, seed=3, keys_per_segment=300)
        k = np.random.default_rng(1).integers(0, 40, 1500).astype(np.uint64)
        seg = np.array([0, 200, 700, 700, 1500])
        got = be.segment_buckets(k, np.zeros(0, np.int64), seg)
        want = CpuBackend().segment_buckets(k, np.zeros(0, np.int64), seg)
        same = all(np.array_equal(be.to_host(g), w) for g, w in zip(got, want))
        out[str(budget)] = [cmp.identical and same, sorted(set(fits))]
    print(json.dumps(out))
''')


def test_in_the_simulator_split_bucketing_merges_on_the_device_when_it_fits():
    got = run_simulated(MERGE)
    assert all(same for same, _ in got.values()), got
    assert got[str(16 << 10)][1] == [False]          # split, merged on the host
    assert got[str(1 << 20)][1] == [True]            # split, merged on the device
    assert got[str(256 << 20)][1] == []              # one group: no merge
