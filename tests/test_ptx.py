"""Every CUDA kernel compiles for a real device (PTX for sm_90, an H200),
with the argument types the backend launches it with.

The simulator runs the kernels as Python, so it cannot catch code that
Numba's CUDA target rejects. Here a run in the simulator records the types
of every launch (a varied workload: both shingle kinds, 32- and 64-bit
signatures, the one-permutation sketch, every cluster mode, normalization,
exact substrings), and a second process, without the simulator, compiles
each kernel for those types with NVVM. No GPU is needed, only Numba's CUDA
target with NVVM (``numba-cuda[cu13]``, which ``[test]`` installs); without
it the test skips and says so, and under ``CI=true`` it fails. The kernels
compiled are kept for the process (:mod:`ptxcache`): ``test_gpu_backend``
reads the PTX of the same kernels.
"""
from __future__ import annotations

import json
import os
import textwrap

import pytest

from ptxcache import compile_ptx
from test_gpu_backend import run_simulated

RECORD = textwrap.dedent(r'''
    import json
    import numba
    import numpy as np
    import pyarrow as pa
    from numba.core import types
    from gpu_dedup import Config, deduplicate
    from gpu_dedup.backend_gpu import GpuBackend
    from gpu_dedup.kernels import cuda as kc, cuda_kernels as kk
    from gpu_dedup.substr import exact_substrings

    def sig_of(a):
        t = numba.typeof(a)
        if isinstance(t, types.Array):
            dims = [":"] * t.ndim
            if t.layout == "C":
                dims[-1] = "::1"
            return f"{t.dtype}[{', '.join(dims)}]"
        return "boolean" if str(t) == "bool" else str(t)

    names = {id(v): k for k, v in vars(kk).items() if k.endswith("_kernel")}
    seen = {}
    launch = kc.launch

    def record(kernel, blocks, threads, *args):
        sig = "(" + ", ".join(sig_of(a) for a in args) + ")"
        seen.setdefault(names[id(kernel)], set()).add(sig)
        return launch(kernel, blocks, threads, *args)
    kc.launch = record

    texts = ["the cat sat on the mat", "the cat sat on a mat!", "THE CAT SAT ON THE MAT",
             "naïve café «résumé» ¼", "naïve café «résumé» ½", "日本語のテキスト、重複。",
             "日本語のテキスト、重複!", "tabs\tand\u00a0nbsp  double", "x" * 40, "",
             "a b c d e f g h", "a b c d e f g i", "emoji 😀 rocket 🚀"]
    arr = pa.array(texts, pa.large_string())
    for cfg in (Config(ngram=3, num_perm=16, threshold=0.5),
                Config(ngram=3, num_perm=16, threshold=0.5, signature_bits=64, keep="longest"),
                Config(shingle="word", ngram=2, num_perm=16, threshold=0.5, cluster="components"),
                Config(ngram=3, num_perm=16, threshold=0.5, sketch="minhash"),
                Config(shingle="word", ngram=2, num_perm=16, threshold=0.5, sketch="minhash"),
                Config(ngram=3, num_perm=16, threshold=0.5, similarity="signature"),
                Config(ngram=3, num_perm=16, threshold=0.5,
                       normalize="nfkc,lower,punct,digits,ws")):
        deduplicate(arr, cfg, GpuBackend(xp=np))
    # a small budget streams the text and splits the rounds
    deduplicate(arr, Config(ngram=3, num_perm=16, threshold=0.5, keep="longest"),
                GpuBackend(gpu_memory=400, xp=np))
    # a crowded bucket, with kept members beyond the windows
    sim = np.full((60, 60), 0.9)
    sim[:, [10, 20]] = sim[[10, 20], :] = 0.0          # kept: 0, 10 and 20
    score = lambda p: sim[(p >> np.uint64(32)).astype(int),
                          (p & np.uint64(0xFFFFFFFF)).astype(int)]
    sel = GpuBackend(xp=np).select(np.array([0, 60]), np.arange(60), 60, score, 0.5, 2)
    assert sel.where == "device", sel.where
    for unit, L in (("word", 3), ("char", 8)):
        exact_substrings(arr, unit, L, backend=GpuBackend(xp=np), partition_bytes="64KiB")
    print(json.dumps({"kernels": sorted(names.values()),
                      "seen": {k: sorted(v) for k, v in seen.items()}}))
''')

@pytest.mark.xdist_group("ptx")          # shares the compiled kernels with test_gpu_backend
def test_every_kernel_is_launched_and_compiles_for_sm_90():
    launches = run_simulated(RECORD)
    missing = set(launches["kernels"]) - set(launches["seen"])
    assert not missing, f"kernels never launched, so never compiled here: {sorted(missing)}"
    got = compile_ptx(launches["seen"])
    if got["nvvm"]:
        why = f"no NVVM to compile PTX with: {got['nvvm']} (pip install 'numba-cuda[cu13]')"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{why}; [test] brings it, so CI must compile", pytrace=False)
        pytest.skip(why)
    failed = {f"{name}{sig}": r["error"] for (name, sig), r in got["ptx"].items() if "error" in r}
    assert not failed, json.dumps(failed, indent=1)
    compiled = sum("floats" in r for r in got["ptx"].values())
    assert compiled >= len(launches["seen"])
