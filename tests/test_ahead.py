"""A first run's helper process (``kernels/ahead.py``): what it compiles is
what the demo and a default run call, the run loads what the helper
compiled instead of compiling it again, and it starts only where it should."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from gpu_dedup.kernels import ahead, jit


def _recorded(run) -> list:
    seen: dict = {}

    def on_call(k, args):
        seen.setdefault((k.name, ahead.types_text(args)), None)
    jit.on_call = on_call
    try:
        with jit.compiling():
            run()
    finally:
        jit.on_call = None
    return list(seen)


def test_the_list_is_what_the_demo_and_a_default_run_call(tmp_path, monkeypatch):
    """Every kernel the demo's options and the default options call from
    Python, with those types, is listed, and nothing else: a kernel added,
    renamed or called with other types makes ``python bench/first_run.py
    --record`` due."""
    from gpu_dedup.config import Config
    from gpu_dedup.kernels import densify
    monkeypatch.setattr(densify, "_hits_cache", {})   # as in a new process
    from gpu_dedup.demo import COOKBOOK_CONFIG, planted_corpus
    from gpu_dedup.pipeline import run
    texts, _ = planted_corpus(600, 1)
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    calls = _recorded(lambda: (
        run([str(src)], str(tmp_path / "a"), COOKBOOK_CONFIG, html=False),
        run([str(src)], str(tmp_path / "b"), Config(), html=False)))
    listed = set(ahead.SIGNATURES)
    assert [c for c in calls if c not in listed] == []
    assert sorted(listed - set(calls)) == []


def test_types_read_back_as_written():
    from numba import typeof
    a = np.zeros(3, np.int64)
    ro = np.frombuffer(b"abc", np.uint8)              # read-only
    args = (a, ro, np.zeros((2, 4), np.uint32), 5, np.uint64(7), 0.5, True)
    assert ahead.parse_types(ahead.types_text(args)) == tuple(typeof(x) for x in args)
    with pytest.raises(ValueError):
        ahead.parse_types("1, 2")
    with pytest.raises(NameError):                    # nothing but Numba's types
        ahead.parse_types("__import__('os')")


CHILD = r"""
import json, os, sys, time
import numpy as np
from gpu_dedup.kernels import ahead, jit, sorting, cpu

a, b = "cpu._key_directory", "sorting._counting_order"
h = ahead.Helper([a, b], only=[b])       # the process compiles only b
jit.on_call = h.before_call
first, shift = cpu._key_directory(np.array([3, 5, 9], np.int64))   # a: called first, the run's
h.launch()
folder = h.folder
assert os.path.exists(os.path.join(folder, "claim." + a))           # claimed before it started
while not os.path.exists(os.path.join(folder, "claim." + b)):
    time.sleep(0.01)
keys = np.array([0, 1, 1, 2], np.int64)
order = sorting._counting_order(keys, np.array([0, 1, 3, 4], np.int64),
                                np.empty(4, np.int64))
d = sorting._counting_order.compiled
k = cpu._key_directory.compiled
h.finish()
print(json.dumps({"order": order.tolist(),
                  "b_hits": sum(d._cache_hits.values()), "b_misses": sum(d._cache_misses.values()),
                  "a_hits": sum(k._cache_hits.values()), "a_misses": sum(k._cache_misses.values()),
                  "from_helper": h.from_helper, "hook": jit.on_call is None,
                  "folder_left": os.path.exists(folder), "report": h.report()}))
"""


def test_the_run_loads_what_the_helper_compiled(tmp_path):
    """A cold cache: the helper claims and compiles one kernel, the run
    waits for it and loads it from the cache (a hit, no compile of its
    own), and compiles the kernel it called first itself; the helper's
    peak is in its report, the hook is removed and the folder cleaned up."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    out = subprocess.run([sys.executable, "-c", CHILD], env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["order"] == [0, 1, 2, 3]
    assert r["from_helper"] == ["sorting._counting_order"]
    assert (r["b_hits"], r["b_misses"]) == (1, 0)     # loaded what the helper wrote
    assert (r["a_hits"], r["a_misses"]) == (0, 1)     # compiled by the run
    assert r["hook"] and not r["folder_left"]
    rep = r["report"]
    assert rep["role"] == "compiler" and rep["kernels"] == 1 and rep["waited_for"] == 1
    assert 20 << 20 < rep["peak_rss_bytes"] < 2 << 30
    locks = [f for _, _, fs in os.walk(tmp_path / "cache") for f in fs if f == "gpu-dedup.lock"]
    assert locks                                       # the cache was written under the lock


def test_the_helper_passes_over_what_the_run_claimed(tmp_path):
    """The helper goes from the last kernel listed and skips those the run
    claimed; with a stop file it compiles nothing more."""
    sigs = (("sorting._counting_order", "Array(int64, 1, 'C', False, aligned=True), " * 2
             + "Array(int64, 1, 'C', False, aligned=True)"),
            ("cpu._key_directory", "Array(int64, 1, 'C', False, aligned=True)"))
    assert ahead._claim(str(tmp_path), "cpu._key_directory")
    assert ahead.compile_from_last(str(tmp_path), sigs) == ["sorting._counting_order"]
    assert os.path.exists(tmp_path / "done.sorting._counting_order")
    assert not os.path.exists(tmp_path / "done.cpu._key_directory")
    stop = tmp_path / "s"
    stop.mkdir()
    (stop / "stop").write_text("")
    assert ahead.compile_from_last(str(stop), sigs) == []


def test_no_helper_where_it_would_not_pay(monkeypatch):
    """Not for a budget under MIN_BUDGET, one CPU, kernels run interpreted,
    or while another hook is set; a finished helper is finished once."""
    assert ahead.start(ahead.MIN_BUDGET - 1) is None
    monkeypatch.setattr(ahead, "_cpus", lambda: 1)
    assert ahead.start(ahead.MIN_BUDGET) is None
    monkeypatch.setattr(ahead, "_cpus", lambda: 2)
    with jit.interpreted():
        assert ahead.start(ahead.MIN_BUDGET) is None
    monkeypatch.setattr(jit, "on_call", lambda k, a: None)
    assert ahead.start(ahead.MIN_BUDGET) is None


def test_a_warm_cache_starts_no_process(monkeypatch):
    monkeypatch.setattr(ahead, "cold", lambda: False)
    h = ahead.start(ahead.MIN_BUDGET)
    assert h is not None
    h.thread.join(60)
    assert h.proc is None and jit.on_call is None     # stood down
    assert h.folder is None                           # no folder made for it
    ahead.finish(h)
    ahead.finish(h)
    assert h.report() is None


ORPHAN = r"""
import os, sys
from gpu_dedup.kernels import ahead
h = ahead.Helper(["sorting._counting_order"])
h.launch()
print(h.folder, flush=True)
os._exit(0)                                   # a run killed: its folder left behind
"""


def test_a_helper_whose_run_is_gone_stops_and_removes_its_folder(tmp_path):
    import pathlib
    import time
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    out = subprocess.run([sys.executable, "-c", ORPHAN], env=env, check=True,
                         capture_output=True, text=True, timeout=120)
    folder = pathlib.Path(out.stdout.strip().splitlines()[-1])
    assert folder.name.startswith("gpu-dedup-compile-")
    deadline = time.monotonic() + 120
    while folder.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not folder.exists()
