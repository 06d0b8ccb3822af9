"""Memory budgets: sizes, the default budget, the resident memory of the
process tree, and a staged run that stays within its budget."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from gpu_dedup.errors import ConfigError
from gpu_dedup.memory import (PeakMonitor, default_budget, format_size, machine_memory,
                              parse_size, process_rss, tree_rss)


@pytest.mark.parametrize("spec,want", [
    ("1GiB", 1 << 30), ("512MiB", 512 << 20), ("8GB", 8 * 10 ** 9), ("1.5G", 3 << 29),
    ("1024", 1024), (" 2 kib ", 2048), ("64KB", 64_000), ("2T", 2 << 40), ("0.5MiB", 1 << 19),
    (4096, 4096), ("3b", 3),
])
def test_parse_size(spec, want):
    assert parse_size(spec) == want


@pytest.mark.parametrize("spec", ["", "abc", "1XB", "-1", "0", "1.2.3", "GiB", "1 G B", True])
def test_parse_size_refuses_nonsense(spec):
    with pytest.raises(ConfigError, match="--memory-limit"):
        parse_size(spec)


def test_format_size():
    assert format_size(3 << 29) == "1.50 GiB"
    assert format_size(100) == "100 B"


def test_default_budget_is_a_safe_power_of_two():
    total, avail = machine_memory()
    b = default_budget()
    assert b & (b - 1) == 0
    assert 256 << 20 <= b <= max(total // 2, 256 << 20)
    assert b <= max(avail, 256 << 20)


def test_tree_rss_counts_children():
    child = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; b = bytearray(300 << 20); b[::4096] = b'x' * len(b[::4096]); "
         "print('ready', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline().strip() == b"ready"
        own = process_rss()
        assert tree_rss() - own >= 250 << 20
    finally:
        child.kill()
        child.wait()


def test_tree_pids_finds_grandchildren_as_psutil_does():
    """The process tree from each process's own list of children is the one
    psutil gives, grandchildren included."""
    import psutil

    from gpu_dedup.memory import tree_pids
    child = subprocess.Popen(
        [sys.executable, "-c",
         "import subprocess, sys, time; "
         "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
         "print(g.pid, flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE)
    try:
        grandchild = int(child.stdout.readline())
        got = tree_pids()
        assert child.pid in got and grandchild in got
        want = [os.getpid()] + [c.pid for c in psutil.Process().children(recursive=True)]
        assert sorted(got) == sorted(want)
    finally:
        for p in psutil.Process(child.pid).children(recursive=True):
            p.kill()
        child.kill()
        child.wait()


def test_peak_monitor_catches_a_spike_per_stage():
    mon = PeakMonitor(interval=0.5)        # slow sampling: the high-water mark must catch it
    with mon:
        with mon.stage("quiet"):
            time.sleep(0.05)
        with mon.stage("spike"):
            a = np.ones(200 << 17, dtype=np.float64)    # 200 MiB, touched
            a.sum()
            del a
        with mon.stage("after"):
            time.sleep(0.05)
    assert mon.peaks["spike"] >= mon.peaks["quiet"] + (180 << 20)
    assert mon.peaks["after"] < mon.peaks["spike"] - (150 << 20)
    assert mon.overall >= mon.peaks["spike"]


CHILD = r"""
import json, sys
from gpu_dedup.config import Config
from gpu_dedup.pipeline import run
a = json.loads(sys.argv[1])
r = run([a["src"]], a["out"], Config(), memory_limit=a["limit"])
print(json.dumps({"memory": r["memory"], "work": r["work"], "documents": r["documents"]}))
"""


def fixed_width_corpus(n: int, w: int, seed: int = 0) -> bytes:
    """JSONL of ``n`` documents of ``w`` random words ``wDDDD``, built with
    array operations; every tenth document repeats the one before it, and
    the sixth of every ten repeats the fifth with one word changed."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 10_000, size=(n, w))
    ids[9::10] = ids[8::10]
    ids[5::10] = ids[4::10]
    ids[5::10, 3] = rng.integers(0, 10_000, size=ids[5::10].shape[0])
    tok = np.empty((n, w, 6), np.uint8)
    tok[:, :, 0] = ord("w")
    for k in range(4):
        tok[:, :, 1 + k] = ord("0") + (ids // 10 ** (3 - k)) % 10
    tok[:, :, 5] = ord(" ")
    text = tok.reshape(n, w * 6)[:, :-1]
    num = np.arange(n)
    head = np.empty((n, 7), np.uint8)
    for k in range(7):
        head[:, k] = ord("0") + (num // 10 ** (6 - k)) % 10
    pre = np.frombuffer(b'{"id":"', np.uint8)
    mid = np.frombuffer(b'","text":"', np.uint8)
    end = np.frombuffer(b'"}\n', np.uint8)
    rows = np.concatenate([np.broadcast_to(pre, (n, pre.size)), head,
                           np.broadcast_to(mid, (n, mid.size)), text,
                           np.broadcast_to(end, (n, end.size))], axis=1)
    return rows.tobytes()


def test_staged_run_stays_within_its_budget(tmp_path):
    """A corpus of about 45 MB (whose in-memory run needs several times that)
    under a 320 MiB budget: the peak of the process tree stays below 1.5x."""
    n, w = 220_000, 32
    src = tmp_path / "corpus.jsonl"
    src.write_bytes(fixed_width_corpus(n, w))
    assert os.path.getsize(src) > 45 << 20
    limit = 320 << 20
    # Compiling the kernels (first run after install) holds LLVM's memory on
    # top of the budget; fill the on-disk kernel cache first, as any earlier
    # run would have.
    warm = tmp_path / "warm.jsonl"
    warm.write_bytes(fixed_width_corpus(2_000, w, seed=1))
    subprocess.run([sys.executable, "-c", CHILD, json.dumps(
        {"src": str(warm), "out": str(tmp_path / "warm-out"), "limit": limit})],
        capture_output=True, text=True, timeout=300, check=True)
    args = {"src": str(src), "out": str(tmp_path / "out"), "limit": limit}
    p = subprocess.run([sys.executable, "-c", CHILD, json.dumps(args)], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert r["documents"]["in"] == n
    peaks = r["memory"]["peak_rss_bytes"]
    assert set(peaks) >= {"read", "exact", "signatures", "buckets", "select", "assign",
                          "write"}
    assert r["work"]["store"] == "disk"              # the plan saw it may not fit
    assert r["memory"]["peak_rss_total_bytes"] <= 1.5 * limit, peaks
    assert r["work"]["chunks"] > 1                   # the input was read in pieces
