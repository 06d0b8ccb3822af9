"""The first run on a machine says that the kernels are being compiled, once,
and how long that takes; a run whose kernels are in Numba's cache says
nothing of it."""
from __future__ import annotations

import os
import subprocess
import sys

CHILD = r"""
import numpy as np
from gpu_dedup.progress import compile_notice
before = compile_notice()
from gpu_dedup.kernels import cpu
from gpu_dedup.stages.signatures import hash_params
a, b = hash_params(4, 1)
off = np.array([0, 11], np.int64)
data = np.frombuffer(b"hello world", np.uint8)
sig = np.empty((1, 4), np.uint64)
cpu.minhash(off, data, np.array([0], np.int64), False, 3, a, b, 0, sig, np.empty(1, np.int64))
print(repr(before))
print(repr(compile_notice()))
"""


def test_the_first_run_says_it_compiles_and_the_next_does_not(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    before, after = out.stdout.strip().splitlines()[-2:]
    assert "compiling the kernels" in before and "once" in before and "minute" in before
    assert after == "None"
