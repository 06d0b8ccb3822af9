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
off = np.array([0, 11], np.int64)
data = np.frombuffer(b"hello world", np.uint8)
cpu.text_hash128(off, data)
print(repr(before))
print(repr(compile_notice()))
"""


def test_the_first_run_says_it_compiles_and_the_next_does_not(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    before, after = out.stdout.strip().splitlines()[-2:]
    assert "compiling the kernels" in before and "once" in before and "seconds" in before
    assert after == "None"


def test_the_notice_comes_after_the_inputs_are_read():
    """A refused run says only why (one line): the notice waits for the
    first stage after ``read``, and is said once."""
    from gpu_dedup.progress import noticing
    said, seen = [], []
    on_stage = noticing("compiling", said.append, seen.append)
    on_stage("read")
    assert said == [] and seen == ["read"]
    on_stage("exact")
    on_stage("signatures")
    assert said == ["compiling"] and seen == ["read", "exact", "signatures"]
    assert noticing(None, said.append, None) is None


def test_a_bad_record_on_a_first_run_gets_one_line(tmp_path):
    """With nothing in Numba's cache, a run refused for a bad record prints
    only the line naming it (the compile notice would have come later)."""
    bad = tmp_path / "in.jsonl"
    bad.write_text('{"text": "fine"}\n{"text": oops}\n')
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    out = subprocess.run([sys.executable, "-m", "gpu_dedup.cli", "run", str(bad), "-o",
                          str(tmp_path / "out")], env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "in.jsonl:2" in lines[0], out.stderr
