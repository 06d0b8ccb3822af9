"""The GPU backend against the CPU backend, bit for bit.

Without a GPU, every CUDA kernel runs in Numba's CUDA simulator, in a
subprocess started with ``NUMBA_ENABLE_CUDASIM=1`` (the simulator must be
chosen before ``numba.cuda`` is imported), and is compared with the CPU
kernels. The backend's array code is written against an array module and
runs here with NumPy; tests marked ``gpu`` run it with CuPy on a real device.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pytest

from gpu_dedup import Config, deduplicate
from gpu_dedup.backend import CpuBackend
from gpu_dedup.backend_gpu import (bucket_edges_frame, bucket_edges_sorted, parse_memory,
                                   probe)
from gpu_dedup.errors import ConfigError
from ptxcache import compile_ptx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _no_gpu_reason():
    ok, why = probe()
    return None if ok else why


NO_GPU = _no_gpu_reason()
needs_gpu = pytest.mark.skipif(NO_GPU is not None, reason=f"no usable GPU: {NO_GPU}")

# Runs in the simulator; prints one JSON object {check: [identical, detail]}.
SIM_CHECKS = textwrap.dedent(r'''
    import json, sys
    sys.setswitchinterval(2e-4)
    import numpy as np, pyarrow as pa
    from gpu_dedup import Config, deduplicate
    from gpu_dedup.backend import CpuBackend
    from gpu_dedup.backend_gpu import GpuBackend, bucket_edges_sorted
    from gpu_dedup.kernels import buckets, cpu, cuda as kc, cuda_kernels as kk, hashing
    from gpu_dedup.stages.normalize import text_buffers
    from gpu_dedup.stages.signatures import hash_params

    out = {}
    def check(name, got, want, detail=""):
        got, want = np.asarray(got), np.asarray(want)
        same = got.shape == want.shape and got.dtype == want.dtype and np.array_equal(
            got.view(np.uint8), want.view(np.uint8))
        out[name] = [bool(same), detail or f"{got.shape} {got.dtype}"]

    out["simulator"] = [bool(kc.SIMULATOR), kk.cuda.jit.__module__]
    # one definition: the simulated kernels call code objects of the @njit functions
    out["shared code"] = [kk._xxh64.__wrapped__.__code__ is hashing.xxh64.py_func.__code__
                          and kk._doc_shingle_hashes.__wrapped__.__code__
                          is cpu.doc_shingle_hashes.py_func.__code__
                          and kk._oph_row.__wrapped__.__code__ is hashing.oph_row.py_func.__code__,
                          ""]

    texts = ["", " ", "a", "ab", "abcd", "hello world", "the cat sat on the mat",
             "the cat sat on a mat!", "x" * 45, "naïve café résumé über straße",
             "日本語のテキストと重複の検出", "emoji 😀 rocket 🚀 and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
             "tabs\tand\nnew lines\u00a0nbsp\u3000ideographic  double",
             "the quick brown fox jumps over the lazy dog " * 2]
    off, data = text_buffers(pa.array(texts, pa.large_string()))
    data = np.ascontiguousarray(data[:off[-1]])
    bad = [b"ab\xf0cd\x80ef\xc3", b"\x80\x80x y", b"caf\xc3", b"\xe6\x97 \xa5 z"]
    for b_ in bad:
        data = np.concatenate([data, np.frombuffer(b_, np.uint8)])
        off = np.concatenate([off, [data.size]])
    N = off.size - 1
    docs = np.arange(N, dtype=np.int64)

    for word in (False, True):
        m = "word" if word else "char"
        check(f"has_shingles {m}", kc.has_shingles(np, off, data, word),
              cpu.has_shingles(off, data, word))
    check("text_hash128", kc.text_hash128(np, off, data), cpu.text_hash128(off, data))
    check("codepoint_lengths", kc.codepoint_lengths(np, off, data),
          cpu.codepoint_lengths(off, data))

    for word, n, K, bits in [(False, 1, 5, 32), (False, 3, 12, 64), (False, 5, 20, 32),
                             (False, 5, 20, 64), (True, 1, 12, 64), (True, 2, 20, 32),
                             (True, 3, 5, 64)]:
        a, b = hash_params(K, 7)
        tag = f"{'word' if word else 'char'}{n} K={K} {bits}-bit"
        sig, cnt = kc.minhash(np, off, data, docs, word, n, a, b, bits)
        csig = np.empty_like(sig)
        ccnt = np.empty(N, np.int64)
        cpu.minhash(off, data, docs, word, n, a, b, 32 if bits == 32 else 0, csig, ccnt)
        check(f"minhash {tag}", sig, csig)
        check(f"counts {tag}", cnt, ccnt)
        keys = kc.band_keys(np, sig, K // 4, 4)
        ckeys = np.empty_like(keys)
        cpu.band_keys(csig, K // 4, 4, ckeys)
        check(f"band_keys {tag}", keys, ckeys)
        active = cpu.has_shingles(off, data, word)
        check(f"bucket_edges {tag}", bucket_edges_sorted(np, keys, active),
              buckets.bucket_edges(ckeys, active))
        ia = np.array([0, 5, 6, 7, 9, 12, 13, 14, 3], np.int64)
        ib = np.array([1, 6, 7, 8, 10, 13, 15, 16, 3], np.int64)
        check(f"signature_agreement {tag}", kc.signature_agreement(np, sig, ia, ib),
              cpu.signature_agreement(csig, ia, ib))
        so, sv = kc.shingle_sets(np, off, data, docs, word, n)
        co, cv = cpu.shingle_sets(off, data, docs, word, n)
        check(f"shingle_sets offsets {tag}", so, co)
        check(f"shingle_sets values {tag}", sv, cv)
        check(f"jaccard_edges {tag}", kc.jaccard_edges(np, so, sv, ia, ib),
              cpu.jaccard_edges(co, cv, ia, ib))
        rows = np.empty((N, cpu.BOUND_WORDS), np.uint32)
        cpu.set_bounds(off, data, docs, word, n, rows)
        check(f"bound_rows {tag}", kc.set_bound_rows(np, so, sv), rows)
        wide = np.empty((N, 257), np.uint32)             # 1,024 bins, as long texts take
        cpu.set_bounds(off, data, docs, word, n, wide)
        check(f"bound_rows 1024 bins {tag}", kc.set_bound_rows(np, so, sv, 257), wide)
        # pairs across two handles of sets (row ~r: row r of the second),
        # joined on the device, and through the host under a tiny budget
        one, two = np.array([0, 3, 5, 7, 9, 12], np.int64), np.array([1, 2, 6, 13], np.int64)
        ra = np.array([0, 1, ~0, ~2, 3, 5], np.int64)
        rb = np.array([~1, 2, ~3, 4, ~0, ~1], np.int64)
        cb = CpuBackend()
        want = cb.jaccard_rows(cb.shingle_sets(off, data, word, n, one), ra, rb,
                               other=cb.shingle_sets(off, data, word, n, two))
        for mem, joined in ((None, True), (400, False)):
            gb = GpuBackend(gpu_memory=mem, xp=np)
            h1 = gb.shingle_sets(off, data, word, n, one)
            h2 = gb.shingle_sets(off, data, word, n, two)
            check(f"jaccard_rows two handles {tag} budget={mem}",
                  gb.jaccard_rows(h1, ra, rb, other=h2), want)
            out[f"jaccard_rows joined on the device {tag} budget={mem}"] = [
                gb._joins_on_device(h1, h2) == joined, str(joined)]

    # the one-permutation sketch: few bins (densified from many shingles) and
    # many (mostly empty, densified), each width, both shingle kinds
    for word, n, K, bits in [(False, 3, 8, 32), (False, 5, 64, 64), (True, 1, 70, 32),
                             (True, 2, 6, 64)]:
        a, b = hash_params(K, 5)
        tag = f"{'word' if word else 'char'}{n} K={K} {bits}-bit"
        sig, cnt = kc.minhash(np, off, data, docs, word, n, a, b, bits, sketch="oph")
        csig = np.empty_like(sig)
        ccnt = np.empty(N, np.int64)
        cpu.oph_minhash(off, data, docs, word, n, a[0], b[0], 32 if bits == 32 else 0, csig,
                        ccnt)
        check(f"minhash oph {tag}", sig, csig)
        check(f"counts oph {tag}", cnt, ccnt)

    # a subset of documents, out of order, through the general path's rounds
    sub = np.array([16, 3, 11, 0, 12, 9, 17], np.int64)
    a, b = hash_params(9, 3)
    for word in (False, True):
        sig, cnt = kc.minhash(np, off, data, sub, word, 3, a, b, 64, scratch_limit=64)
        csig = np.empty_like(sig)
        ccnt = np.empty(sub.size, np.int64)
        cpu.minhash(off, data, sub, word, 3, a, b, 0, csig, ccnt)
        check(f"minhash subset small scratch {'word' if word else 'char'}", sig, csig)
        so, sv = kc.shingle_sets(np, off, data, sub, word, 3, scratch_limit=64)
        co, cv = cpu.shingle_sets(off, data, sub, word, 3)
        check(f"shingle_sets subset small scratch {'word' if word else 'char'}",
              np.concatenate([so, sv.view(np.int64)]), np.concatenate([co, cv.view(np.int64)]))
        # bound rows through the backend, in rounds of a few documents
        be = GpuBackend(gpu_memory=400, xp=np)
        got = be.bound_rows(off, data, word, 3, sub)
        check(f"bound_rows backend rounds {'word' if word else 'char'}", got,
              CpuBackend().bound_rows(off, data, word, 3, sub))
        check(f"bound_rows backend rounds 128 bins {'word' if word else 'char'}",
              be.bound_rows(off, data, word, 3, sub, 33),
              CpuBackend().bound_rows(off, data, word, 3, sub, 33))

    # whole runs through the backend, with the whole budget and with a tiny one
    # that streams the text, keeps the matrices on the host and splits rounds
    run_texts = pa.array(texts[:14] + [texts[6] + " again", texts[7].upper(), texts[9]],
                         pa.large_string())
    for shingle, n, bits, similarity, mem, sketch in [
            ("char", 4, 32, "jaccard", None, "minhash"), ("word", 2, 64, "jaccard", 400, "minhash"),
            ("char", 3, 64, "signature", 400, "minhash"), ("char", 3, 32, "jaccard", 400, "oph")]:
        cfg = Config(shingle=shingle, ngram=n, num_perm=16, threshold=0.5, signature_bits=bits,
                     similarity=similarity, keep="longest", sketch=sketch)
        be = GpuBackend(gpu_memory=mem, xp=np)
        uploads = []
        upload = be._upload
        be._upload = lambda *a: uploads.append(a[3] - a[2]) or upload(*a)
        got = deduplicate(run_texts, cfg, be)
        want = deduplicate(run_texts, cfg, CpuBackend())
        tag = f"{shingle}{n} {bits}-bit {similarity} budget={mem} {sketch}"
        for f in ("cluster", "kept", "pair_a", "pair_b", "pair_similarity", "pair_exact"):
            check(f"run {tag} {f}", getattr(got, f), getattr(want, f),
                  f"{want.stats['verified_edges']} verified edges")
        out[f"run {tag} backend"] = [got.backend == "cuda-sim", got.backend]
        if mem is None:
            # the normalized text goes to the device once, the raw text once (keep=longest)
            out["cache uploads"] = [len(uploads) == 2 and be._text is not None, str(uploads)]
            be.release()
            out["cache released"] = [be._text is None, ""]
        else:
            out[f"streamed {tag}"] = [len(uploads) > 4, str(len(uploads))]
    print(json.dumps(out))
''')


def run_simulated(script: str):
    """Run ``script`` in a fresh interpreter under Numba's CUDA simulator; the
    JSON of its last line of output (skips without a CUDA target)."""
    if importlib.util.find_spec("numba.cuda") is None:
        why = "this Numba has no CUDA target, so no CUDA simulator: install numba-cuda"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{why} (the simulator tests must run in CI)", pytrace=False)
        pytest.skip(why)
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def sim_results():
    return run_simulated(SIM_CHECKS)


def test_simulator_ran_the_cuda_kernels(sim_results):
    assert sim_results["simulator"][0], sim_results["simulator"]
    assert sim_results["shared code"][0], "the CUDA kernels must call the shared hash code"


@pytest.mark.parametrize("prefix", ["has_shingles", "text_hash128", "codepoint_lengths",
                                    "minhash", "counts", "band_keys", "bucket_edges",
                                    "signature_agreement", "shingle_sets", "jaccard_edges",
                                    "bound_rows", "jaccard_rows"])
def test_simulated_kernels_match_cpu_kernels(sim_results, prefix):
    rows = {k: v for k, v in sim_results.items() if k.startswith(prefix)}
    assert rows, f"no {prefix} checks ran"
    diff = {k: v[1] for k, v in rows.items() if not v[0]}
    assert not diff, diff


def test_simulated_backend_runs_match_cpu_runs(sim_results):
    rows = {k: v for k, v in sim_results.items() if k.startswith("run ")}
    assert len(rows) == 4 * 7
    diff = {k: v[1] for k, v in rows.items() if not v[0]}
    assert not diff, diff


def test_text_goes_to_the_device_once_or_streams_within_budget(sim_results):
    for key in ("cache uploads", "cache released"):
        assert sim_results[key][0], (key, sim_results[key][1])
    streamed = {k: v for k, v in sim_results.items() if k.startswith("streamed ")}
    assert len(streamed) == 3 and all(v[0] for v in streamed.values()), streamed


# -- array code, parametrised over the array module ---------------------------

def _array_modules():
    mods = [pytest.param(np, id="numpy")]
    mods.append(pytest.param("cupy", id="cupy", marks=[pytest.mark.gpu, needs_gpu]))
    return mods


def _colliding_keys(seed, n=400, bands=6):
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, 40, size=(n, bands)).astype(np.uint64)
    keys *= np.uint64(0x9E3779B97F4A7C15)
    active = rng.random(n) > 0.1
    return keys, active


@pytest.mark.parametrize("xp", _array_modules())
@pytest.mark.parametrize("seed", [0, 1])
def test_bucket_edges_sorted_equals_cpu(xp, seed):
    from gpu_dedup.kernels import buckets
    if xp == "cupy":
        import cupy as xp
    keys, active = _colliding_keys(seed)
    got = bucket_edges_sorted(xp, xp.asarray(keys), xp.asarray(active))
    got = got.get() if hasattr(got, "get") and not isinstance(got, np.ndarray) else got
    want = buckets.bucket_edges(keys, active)
    assert want.size > 100
    assert got.dtype == np.uint64
    np.testing.assert_array_equal(got, want)


def test_bucket_edges_frame_equals_cpu_with_pandas():
    pd = pytest.importorskip("pandas", reason="pandas runs the cuDF grouping code on the host")
    from gpu_dedup.kernels import buckets
    keys, active = _colliding_keys(3)
    np.testing.assert_array_equal(bucket_edges_frame(pd, np, keys, active),
                                  buckets.bucket_edges(keys, active))


def test_bucket_edges_with_fewer_than_two_active_documents():
    keys, _ = _colliding_keys(4, n=5)
    one = np.array([False, True, False, False, False])
    assert bucket_edges_sorted(np, keys, one).size == 0
    assert bucket_edges_sorted(np, keys[:0], np.zeros(0, bool)).dtype == np.uint64


# -- options and probing --------------------------------------------------------

@pytest.mark.parametrize("spec,expected", [
    ("8GiB", 8 << 30), ("512MiB", 512 << 20), ("8GB", 8 * 10 ** 9), ("1.5G", 3 << 29),
    ("4096", 4096), (4096, 4096), ("  64 mib ", 64 << 20), ("2T", 2 << 40), (None, None),
])
def test_parse_memory(spec, expected):
    assert parse_memory(spec) == expected


@pytest.mark.parametrize("spec", ["8XB", "lots", "-1GiB", "0", "GiB", "1e9"])
def test_parse_memory_rejects_with_one_line(spec):
    with pytest.raises(ConfigError) as exc:
        parse_memory(spec)
    msg = str(exc.value)
    assert "--gpu-memory" in msg and "\n" not in msg


def test_probe_reports_the_simulator_without_touching_cupy(monkeypatch):
    import gpu_dedup.backend_probe as bp
    monkeypatch.setattr(bp, "_PROBE", None)
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")
    ok, why = bp.probe()
    assert not ok and "simulator" in why
    monkeypatch.setattr(bp, "_PROBE", None)


class _CudaRuntimeError(RuntimeError):
    """What CuPy's runtime calls raise (``CUDARuntimeError`` derives from RuntimeError)."""


def _fake_cupy(count):
    import types
    def device_count():
        if isinstance(count, BaseException):
            raise count
        return count
    runtime = types.SimpleNamespace(getDeviceCount=device_count)
    return types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=runtime))


@pytest.fixture
def fresh_probe(monkeypatch):
    import gpu_dedup.backend_probe as bp
    monkeypatch.setattr(bp, "_PROBE", None)
    monkeypatch.delenv("NUMBA_ENABLE_CUDASIM", raising=False)
    yield bp
    monkeypatch.setattr(bp, "_PROBE", None)


def test_probe_turns_a_cuda_error_into_a_reason(fresh_probe, monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(_CudaRuntimeError("no driver found")))
    ok, why = fresh_probe.probe()
    assert not ok
    assert why == "no usable CUDA driver or device (_CudaRuntimeError: no driver found)"


def _test_kernel_raises(bp, monkeypatch, exc):
    """A device and Numba's CUDA target are there; the probe's test kernel raises ``exc``."""
    from numba import cuda
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(1))
    monkeypatch.setattr(cuda, "is_available", lambda: True)

    def smoke():
        raise exc
    monkeypatch.setattr(bp, "_smoke_test", smoke)


def test_probe_turns_a_failing_test_kernel_into_a_reason(fresh_probe, monkeypatch):
    from numba.cuda.cudadrv.error import CudaDriverError
    _test_kernel_raises(fresh_probe, monkeypatch, CudaDriverError("CUDA_ERROR_NO_BINARY_FOR_GPU"))
    ok, why = fresh_probe.probe()
    assert (ok, why) == (False, "a test kernel failed (CudaDriverError: "
                                "CUDA_ERROR_NO_BINARY_FOR_GPU)")


def test_probe_lets_a_bug_through(fresh_probe, monkeypatch):
    _test_kernel_raises(fresh_probe, monkeypatch, KeyError("a bug, not a missing GPU"))
    with pytest.raises(KeyError):
        fresh_probe.probe()


def test_rapids_available_is_false_for_a_module_that_does_not_import(monkeypatch):
    from gpu_dedup.backend_probe import rapids_available
    monkeypatch.setitem(sys.modules, "no_such_rapids_module", None)    # import raises ImportError
    assert rapids_available("no_such_rapids_module") is False


def _cugraph_backend(monkeypatch, exc):
    """A stand-in for a GpuBackend whose cuGraph raises ``exc``, on NumPy."""
    import contextlib
    import types

    import gpu_dedup.backend_gpu as bg

    def cugraph_components(*_args):
        raise exc
    monkeypatch.setattr(bg, "cugraph_components", cugraph_components)
    fake = types.SimpleNamespace(_components="cuGraph weakly connected components", xp=np,
                                 to_host=np.asarray, _dev=np.asarray,
                                 _tracked=contextlib.nullcontext)
    return lambda n, ea, eb: bg.GpuBackend.components(fake, n, np.asarray(ea), np.asarray(eb))


def test_components_fall_back_to_label_propagation_when_cugraph_fails(monkeypatch, caplog):
    components = _cugraph_backend(monkeypatch, RuntimeError("cuGraph: out of device memory"))
    with caplog.at_level("WARNING", logger="gpu_dedup"):
        labels = components(4, [0, 2], [1, 3])
    assert labels.tolist() == [0, 0, 2, 2]
    assert "cuGraph components failed (RuntimeError: cuGraph: out of device memory)" in caplog.text


def test_components_let_a_bug_through(monkeypatch):
    components = _cugraph_backend(monkeypatch, KeyError("a bug"))
    with pytest.raises(KeyError):
        components(4, [0, 2], [1, 3])


@pytest.mark.skipif(NO_GPU is None, reason="a GPU is usable here")
def test_probe_without_gpu_says_what_is_missing():
    ok, why = probe()
    assert not ok
    assert why and "\n" not in why
    assert any(w in why for w in ("CuPy", "driver", "device", "numba", "kernel"))


@pytest.mark.skipif(importlib.util.find_spec("numba.cuda") is None,
                    reason="this Numba has no CUDA target: install numba-cuda")
def test_gpu_backend_refuses_to_run_host_arrays_outside_the_simulator():
    # without NUMBA_ENABLE_CUDASIM the kernels module targets a real GPU
    code = ("import numpy as np\nfrom gpu_dedup.backend_gpu import GpuBackend\n"
            "from gpu_dedup.errors import DeviceError\n"
            "try:\n    GpuBackend(xp=np)\nexcept DeviceError as e:\n    print('refused', e)\n")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("refused")


# -- a real GPU -------------------------------------------------------------------

@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("shingle,n,bits", [("char", 5, 32), ("word", 3, 64)])
def test_gpu_run_is_bit_identical_to_cpu(shingle, n, bits):
    from gpu_dedup.backend_gpu import GpuBackend
    from gpu_dedup.doctor import planted_texts
    texts = pa.array(planted_texts(600, seed=11), pa.large_string())
    cfg = Config(shingle=shingle, ngram=n, signature_bits=bits, threshold=0.7)
    be = GpuBackend()
    got = deduplicate(texts, cfg, be)
    want = deduplicate(texts, cfg, CpuBackend())
    assert got.backend == "gpu"
    assert want.stats["removed"] > 0
    for f in ("cluster", "kept", "pair_a", "pair_b", "pair_similarity", "pair_exact"):
        np.testing.assert_array_equal(getattr(got, f), getattr(want, f), err_msg=f)
    assert got.stats["device_peak_bytes"] > 0


@pytest.mark.gpu
@needs_gpu
def test_gpu_kernels_match_cpu_kernels_with_small_budget():
    from gpu_dedup.backend_gpu import GpuBackend
    from gpu_dedup.doctor import Comparison, compare_kernels, malformed_buffers, planted_texts
    from gpu_dedup.stages.normalize import text_buffers
    off, data = malformed_buffers(*text_buffers(pa.array(planted_texts(300, seed=5),
                                                         pa.large_string())))
    cmp = Comparison()
    for budget in (None, "64KiB"):
        be = GpuBackend(gpu_memory=budget)
        for shingle, n, bits in [("char", 5, 32), ("char", 2, 64), ("word", 3, 32)]:
            K = 128 if bits == 32 else 40
            compare_kernels(be, CpuBackend(), off, data, shingle, n, K, bits, K // 4, 4, 1, cmp)
    assert cmp.identical, [r for r in cmp.rows if not r[1]]


# -- the kernels compile for a real device ----------------------------------------

# Compiles every kernel to PTX for sm_90 without a GPU (numba-cuda with NVVM
# installed), and lists floating-point instructions: the hash kernels must
# have none (a mixed signed/unsigned expression silently becomes float64 in
# Numba, which the simulator, running Python, would not show). The kernels
# compiled are shared with test_ptx (tests/ptxcache.py).
_V, _M = "[::1]", "[:, ::1]"
PTX_SIGS = {
    "minhash_char_kernel": [f"(int64{_V}, uint8{_V}, int64{_V}, int64, uint64{_V}, uint64{_V}, "
                            f"int64, {s}{_M}, int64{_V}, uint8{_V})" for s in ("uint32", "uint64")],
    "general_hashes_kernel": [f"(int64{_V}, uint8{_V}, int64{_V}, boolean, int64, int64{_V}, "
                              f"int64{_V}, int64{_V}, uint8{_V}, int64{_V}, uint64{_V}, "
                              f"int64{_V})"],
    "minhash_hashes_kernel": [f"(int64{_V}, uint64{_V}, int64{_V}, int64{_V}, uint64{_V}, "
                              f"uint64{_V}, int64, {s}{_M})" for s in ("uint32", "uint64")],
    "char_slots_kernel": [f"(int64{_V}, uint8{_V}, int64{_V}, int64, int64{_V}, uint64{_V}, "
                          f"uint8{_V})"],
    "has_shingles_kernel": [f"(int64{_V}, uint8{_V}, boolean, uint8{_V})"],
    "text_hash128_kernel": [f"(int64{_V}, uint8{_V}, uint64{_M})"],
    "codepoint_lengths_kernel": [f"(int64{_V}, uint8{_V}, int64{_V})"],
    "band_keys_kernel": [f"({s}{_M}, int64, int64, uint64{_M})" for s in ("uint32", "uint64")],
    "agreement_kernel": [f"({s}{_M}, int64{_V}, int64{_V}, float64{_V})"
                         for s in ("uint32", "uint64")],
    "jaccard_kernel": [f"(int64{_V}, uint64{_V}, int64{_V}, int64{_V}, float64{_V})"],
}


@pytest.mark.slow
@pytest.mark.xdist_group("ptx")          # shares the compiled kernels with test_ptx
def test_cuda_kernels_compile_and_hash_in_integers_only():
    got = compile_ptx(PTX_SIGS)
    if got["target"]:
        pytest.skip(f"numba-cuda with NVVM is needed to compile PTX: {got['target']}")
    assert not got["nvvm"], got["nvvm"]
    errors = {f"{name}{sig}": r["error"] for (name, sig), r in got["ptx"].items() if "error" in r}
    assert not errors, errors
    floats = {f"{name}{sig}": r["floats"] for (name, sig), r in got["ptx"].items()}
    assert len(floats) == 14
    for name, ops in floats.items():
        if name.startswith(("agreement_kernel", "jaccard_kernel")):
            assert ops, name                      # they do divide in float64
        else:
            assert ops == [], (name, ops)


SHARED_RACE = textwrap.dedent(r'''
    import json, time
    import numpy as np
    from numba import cuda
    from gpu_dedup.kernels import simulator

    alloc = simulator.shared_alloc

    def slow(shape, dtype):               # every thread of a block reaches the line first
        time.sleep(0.005)
        return alloc(shape, dtype)
    simulator.shared_alloc = slow

    @cuda.jit
    def total(out):
        sh = cuda.shared.array(16, np.int64)
        t = cuda.threadIdx.x
        sh[t] = t
        cuda.syncthreads()
        s = 0
        for j in range(16):
            s += sh[j]
        out[cuda.blockIdx.x, t] = s
    out = np.zeros((4, 16), np.int64)
    total[4, 16](out)
    print(json.dumps({"wrong": int((out != 120).sum())}))
''')


def test_in_the_simulator_a_block_shares_one_shared_array_even_when_threads_race():
    # the simulator allocates a block's shared array when its first thread
    # reaches the line; threads arriving together must still share one
    assert run_simulated(SHARED_RACE)["wrong"] == 0
