"""Dask execution: a local cluster of two worker processes, Dask's threads
and a real scheduler with two workers on loopback all give the single-process
run's outputs, byte for byte."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from gpu_dedup.engine import layout
from gpu_dedup.engine.executors import InProcess, make_executor, parse_scheduler
from gpu_dedup.errors import ConfigError
from test_staged import CFG, make_texts, output_bytes, run, run_staged, write_inputs

distributed = pytest.importorskip(
    "distributed", reason="Dask's distributed scheduler is not installed "
                          "(pip install 'dask[distributed]')")

LIMIT = "512KiB"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dist")
    paths = write_inputs(str(folder / "in"), make_texts(500, seed=11))
    ref = str(folder / "ref")
    report = run(paths, ref, CFG)
    return paths, ref, report


def assert_same(ref, out):
    a, b = output_bytes(ref), output_bytes(out)
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name] == b[name], name


def task_pids(work_dir: str) -> set[int]:
    """Processes that wrote the signature, band and exact units."""
    pids = set()
    for d, _dirs, names in os.walk(work_dir):
        top = os.path.relpath(d, work_dir).split(os.sep)[0]
        for n in names:
            if n.endswith(layout.MARKER) and top in (layout.SIGNATURES, layout.BUCKETS,
                                                     layout.EXACT):
                with open(os.path.join(d, n)) as f:
                    meta = json.load(f)
                if "pid" in meta:
                    pids.add(meta["pid"])
    return pids


def test_local_cluster_of_two_processes_equals_single_process(corpus, tmp_path):
    paths, ref, ref_report = corpus
    out = str(tmp_path / "out")
    report = run_staged(paths, out, CFG, memory_limit=LIMIT, scheduler="processes", workers=2,
                        work_dir=str(tmp_path / "work"), keep_work_dir=True)
    assert_same(ref, out)
    assert report["edges"] == ref_report["edges"]
    assert report["scheduler"]["scheduler"] == "processes"
    assert report["scheduler"]["workers"] == 2
    # the band stage was shuffled into at least one key partition per worker,
    # and the units really ran in two other processes
    assert report["work"]["units"]["buckets"] >= 2
    pids = task_pids(report["work"]["dir"])
    assert len(pids) == 2 and os.getpid() not in pids
    shutil.rmtree(report["work"]["dir"])


def test_dask_threads_equal_single_process(corpus, tmp_path):
    paths, ref, _ = corpus
    out = str(tmp_path / "out")
    report = run_staged(paths, out, CFG, memory_limit=LIMIT, scheduler="threads", workers=2)
    assert_same(ref, out)
    assert report["scheduler"] == {"scheduler": "threads", "workers": 2}


def _wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_real_scheduler_and_two_workers_on_loopback(corpus, tmp_path):
    paths, ref, _ = corpus
    dask = shutil.which("dask", path=os.path.dirname(sys.executable)) or shutil.which("dask")
    if dask is None:
        pytest.skip("the dask command line is not installed")
    sched_file = str(tmp_path / "scheduler.json")
    env = {**os.environ, "DASK_DISTRIBUTED__WORKER__DAEMON": "False"}
    procs = [subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port", "0",
                               "--no-dashboard", "--scheduler-file", sched_file],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)]
    try:
        _wait_for(lambda: os.path.exists(sched_file), 60, "the scheduler")
        for _ in range(2):
            procs.append(subprocess.Popen([dask, "worker", "--scheduler-file", sched_file,
                                           "--nthreads", "1", "--no-nanny", "--no-dashboard",
                                           "--memory-limit", "0", "--host", "127.0.0.1"],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          env=env))
        with open(sched_file) as f:
            address = json.load(f)["address"]
        assert address.startswith("tcp://127.0.0.1:")
        out = str(tmp_path / "out")
        report = run_staged(paths, out, CFG, memory_limit=LIMIT, scheduler=address, workers=2,
                            work_dir=str(tmp_path / "work"), keep_work_dir=True)
        assert_same(ref, out)
        assert report["scheduler"]["workers"] == 2
        worker_pids = {p.pid for p in procs[1:]}
        assert task_pids(report["work"]["dir"]) == worker_pids
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def test_scheduler_specs():
    assert parse_scheduler(None) == "none"
    assert parse_scheduler("processes") == "processes"
    assert parse_scheduler("tcp://10.0.0.1:8786") == "tcp://10.0.0.1:8786"
    for bad in ("mpi", "tcp://nohost", "process"):
        with pytest.raises(ConfigError, match="scheduler"):
            parse_scheduler(bad)
    with pytest.raises(ConfigError, match="workers"):
        make_executor("threads", workers=0)
    ex = make_executor("none")
    assert isinstance(ex, InProcess)
    assert ex.map(lambda x, k: x * k, [1, 2, 3], 10) == [10, 20, 30]
