"""`gpu-dedup doctor` and `bench/gpu_check.py`: they compare the GPU kernels
with the CPU kernels bit for bit, say what they compared, and fail loudly."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from gpu_dedup import Config
from gpu_dedup.backend import CpuBackend
from gpu_dedup.backend_gpu import probe
from gpu_dedup.doctor import (Comparison, compare_kernels, compare_runs, malformed_buffers,
                              planted_texts)
from gpu_dedup.stages.normalize import text_buffers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GPU_USABLE, GPU_WHY = probe()


def _env(sim: bool):
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_ENABLE_CUDASIM", "OUT")}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    if sim:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    return env


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    """The simulated doctor and the simulated bench check, run side by side
    (the simulator mostly waits on its own threads)."""
    if importlib.util.find_spec("numba.cuda") is None:
        pytest.skip("this Numba has no CUDA target, so no CUDA simulator: install numba-cuda")
    out = tmp_path_factory.mktemp("gpu_check")
    procs = {
        "doctor": subprocess.Popen([sys.executable, "-m", "gpu_dedup.cli", "doctor"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   env=_env(True), cwd=ROOT),
        "bench": subprocess.Popen([sys.executable, os.path.join(ROOT, "bench", "gpu_check.py"),
                                   "--simulate", "--out", str(out)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=_env(False), cwd=ROOT),
    }
    results = {}
    for name, p in procs.items():
        stdout, stderr = p.communicate(timeout=600)
        results[name] = (p.returncode, stdout, stderr)
    results["bench_out"] = out
    return results


def test_simulated_doctor_exits_0_after_comparing(simulated):
    code, stdout, stderr = simulated["doctor"]
    assert code == 0, stdout + stderr[-3000:]
    lines = stdout.strip().splitlines()
    assert lines[-1].startswith("verdict: identical: the CUDA kernels in Numba's simulator")
    assert "Numba CUDA simulator (NUMBA_ENABLE_CUDASIM=1)" in stdout
    assert "not compared here: CuPy" in stdout
    oks = [line for line in lines if line.strip().startswith("ok ")]
    assert len(oks) >= 30
    for what in ("signatures", "band keys", "bucket edges", "shingle sets", "Jaccard",
                 "signature agreement", "text_hash128", "run char5", "normalization",
                 "exact grouping", "greedy selection", "components"):
        assert any(what in line for line in oks), what
    # each stage is listed with where it runs, and the ones the issue names on the device
    listed = {}
    for line in lines[lines.index("stages on this machine:") + 1:]:
        if not line.startswith("  "):
            break
        if not line.strip().startswith("("):
            stage, where = line.strip().split(": ", 1)
            listed[stage] = where
    for stage in ("normalization", "exact grouping", "signatures", "band keys", "bucketing",
                  "selection", "components"):
        assert "device" in listed.get(stage, ""), (stage, listed.get(stage))
    sel = [line for line in oks if "greedy selection" in line]
    assert len(sel) == 3 and all(line.endswith("ran on: device") for line in sel), sel
    assert not any(line.strip().startswith("DIFF") for line in lines)
    for pkg in ("CuPy:", "numba-cuda:", "cuDF:", "cuGraph:", "Dask-CUDA:"):
        assert pkg in stdout


@pytest.mark.skipif(GPU_USABLE, reason="a GPU is usable on this machine")
def test_doctor_without_gpu_or_simulator_checks_the_cpu_and_exits_0():
    r = subprocess.run([sys.executable, "-m", "gpu_dedup.cli", "doctor"], capture_output=True,
                       text=True, env=_env(False), cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    lines = r.stdout.strip().splitlines()
    assert any(line.strip().startswith("ok   CPU") for line in lines)
    last = lines[-1]
    assert last.startswith("verdict: CPU path healthy")
    assert f"no GPU compared: none usable ({GPU_WHY})" in last
    assert "NUMBA_ENABLE_CUDASIM=1" in last


def test_gpu_check_help():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "gpu_check.py"), "--help"],
                       capture_output=True, text=True, env=_env(False), timeout=120)
    assert r.returncode == 0, r.stderr
    for opt in ("--quick", "--simulate", "--identity-docs", "--throughput-docs", "--budget"):
        assert opt in r.stdout
    assert "bit-identity" in r.stdout or "Bit-identity" in r.stdout


def test_gpu_check_simulated_prints_and_writes_one_table(simulated):
    code, stdout, stderr = simulated["bench"]
    assert code == 0, stdout + stderr[-3000:]
    table = [line for line in stdout.splitlines() if line.startswith("|")]
    checks = [line.split("|")[1].strip() for line in table[2:]]
    for prefix in ("warm-up", "bit-identity with the CPU backend", "signatures, device-resident",
                   "band keys", "bucket collisions", "host-to-device", "end to end",
                   "peak device memory", "total"):
        assert any(c.startswith(prefix) for c in checks), prefix
    assert not any("FAILED" in line or "DIFFERENT" in line for line in table)
    assert "identical" in stdout
    out = simulated["bench_out"]
    md = (out / "gpu_check.md").read_text()
    assert md.strip().splitlines()[0].startswith("### gpu_check.py") and "bit-identical" in md
    data = json.loads((out / "gpu_check.json").read_text())
    assert data["verdict"] == "bit-identical"
    assert "signatures_32_gbps" in data["figures"]


# -- the comparisons notice differences ----------------------------------------------

class _FlipOneBit(CpuBackend):
    """A CPU backend whose signatures differ in one bit of one value."""

    name = "flipped"

    def minhash(self, *args, **kw):
        sig, counts = super().minhash(*args, **kw)
        sig = sig.copy()
        sig[len(sig) // 2, 3] ^= sig.dtype.type(1)
        return sig, counts


def _buffers():
    texts = pa.array(planted_texts(60, seed=2, max_words=20, long_docs=False),
                     pa.large_string())
    return malformed_buffers(*text_buffers(texts))


def test_compare_kernels_finds_one_flipped_bit():
    off, data = _buffers()
    cmp = Comparison()
    compare_kernels(_FlipOneBit(), CpuBackend(), off, data, "char", 3, 16, 32, 8, 2, 1, cmp)
    bad = {name: detail for name, ok, detail in cmp.rows if not ok}
    assert "char3 32-bit K=16: signatures" in bad
    assert "1 of" in bad["char3 32-bit K=16: signatures"]
    assert "char3 32-bit K=16: shingle counts" not in bad
    assert not cmp.identical


def test_compare_kernels_identical_backends_are_identical():
    off, data = _buffers()
    cmp = Comparison()
    compare_kernels(CpuBackend(), CpuBackend(), off, data, "word", 2, 12, 64, 6, 2, 1, cmp)
    assert cmp.identical and len(cmp.rows) == 9


def test_compare_runs_checks_results_and_which_backend_ran():
    texts = planted_texts(40, seed=3, max_words=15, long_docs=False)
    cfg = Config(num_perm=16, threshold=0.5)
    cmp = Comparison()
    compare_runs(CpuBackend(), CpuBackend(), texts, cfg, cmp, "same", expect="cpu")
    assert cmp.identical
    # identical results, but the CPU did the work where a GPU was expected
    cmp = Comparison()
    compare_runs(CpuBackend(), CpuBackend(), texts, cfg, cmp, "cpu as gpu", expect="gpu")
    assert not cmp.identical and "ran on 'cpu', not 'gpu'" in cmp.rows[0][2]
    # different signatures that change the clusters are caught too
    cmp = Comparison()
    compare_runs(_Shuffled(), CpuBackend(), texts, cfg, cmp, "shuffled")
    assert not cmp.identical


class _Shuffled(CpuBackend):
    """Signatures of the wrong documents: clusters come out different."""

    def minhash(self, offsets, data, docs, *args, **kw):
        return super().minhash(offsets, data, np.asarray(docs)[::-1].copy(), *args, **kw)


def test_planted_texts_are_deterministic_and_hold_duplicates():
    a = planted_texts(200, seed=9)
    assert a == planted_texts(200, seed=9)
    assert a != planted_texts(200, seed=10)
    assert len(a) == 203
    assert len(set(a)) < len(a)                      # exact copies
    assert "" in a and any(any(ord(c) > 0xFFFF for c in t) for t in a)
    assert any(len(t.encode()) > 1500 for t in a)


def test_malformed_buffers_append_invalid_utf8():
    off, data = text_buffers(pa.array(["ok", "fine"], pa.large_string()))
    o2, d2 = malformed_buffers(off, data)
    assert o2.size > off.size and o2[0] == 0 and np.all(np.diff(o2) >= 0)
    tail = bytes(d2[o2[off.size - 1]:o2[-1]])
    with pytest.raises(UnicodeDecodeError):
        tail.decode("utf-8")
