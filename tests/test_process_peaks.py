"""report.json's memory by process: the driver and each Dask worker, its
own peak beside its limit, and the warning held to each process's limit."""
from __future__ import annotations

import os

import pytest

from test_distributed import task_pids
from test_staged import CFG, make_texts, run, run_staged, write_inputs

pytest.importorskip("distributed", reason="Dask's distributed scheduler is not installed "
                                          "(pip install 'dask[distributed]')")


def test_a_local_cluster_reports_the_driver_and_each_worker(tmp_path):
    paths = write_inputs(str(tmp_path / "in"), make_texts(300, seed=5))
    report = run_staged(paths, str(tmp_path / "out"), CFG, memory_limit="256KiB",
                        scheduler="processes", workers=2, work_dir=str(tmp_path / "work"),
                        keep_work_dir=True)
    procs = report["memory"]["processes"]
    budget = report["memory"]["limit_bytes"]
    driver = [p for p in procs if p["role"] == "driver"]
    workers = [p for p in procs if p["role"] == "worker"]
    assert len(driver) == 1 and driver[0]["pid"] == os.getpid()
    assert len(workers) == 2 and len({w["pid"] for w in workers}) == 2
    # the workers are the processes that ran the tasks
    assert task_pids(report["work"]["dir"]) == {w["pid"] for w in workers}
    for p in procs:
        # an interpreter with NumPy holds tens of MiB: a real reading
        assert p["peak_rss_bytes"] > 20 << 20, p
        assert p["limit_bytes"] == budget, p
    assert report["memory"]["warning"] is None


def test_in_process_the_driver_is_the_only_process(tmp_path, monkeypatch):
    import gpu_dedup.pipeline as pl
    paths = write_inputs(str(tmp_path / "in"), make_texts(100, seed=6))
    report = run(paths, str(tmp_path / "out"), CFG)
    procs = report["memory"]["processes"]
    assert [p["role"] for p in procs] == ["driver"]
    assert procs[0]["peak_rss_bytes"] <= report["memory"]["peak_rss_total_bytes"]
    monkeypatch.setattr(pl, "PEAK_WARNING", 0.0)
    report = run(paths, str(tmp_path / "out2"), CFG)
    assert "of the driver (pid" in report["memory"]["warning"]


def test_a_first_runs_compiler_is_a_process_of_its_report_only(tmp_path, monkeypatch):
    """The helper that compiled kernels ahead (``kernels/ahead.py``) is
    listed as the ``compiler`` of the run that started it, and of no later
    run of the same process."""
    import gpu_dedup.shell as shell
    from gpu_dedup.kernels import ahead

    class Compiler:                       # what a helper reports once it has ended
        finished = False

        def finish(self):
            self.finished = True

        def report(self):
            return {"role": "compiler", "pid": 12345, "peak_rss_bytes": 300 << 20,
                    "limit_bytes": None, "kernels": 13, "waited_for": 2,
                    "waited_seconds": 0.1}
    started = []
    monkeypatch.setattr(shell, "interpreted_kernels", lambda *a: False)   # a compiled run
    monkeypatch.setattr(ahead, "start", lambda budget: started.append(budget) or Compiler())
    paths = write_inputs(str(tmp_path / "in"), make_texts(100, seed=7))
    report = run(paths, str(tmp_path / "out"), CFG)
    procs = report["memory"]["processes"]
    assert [p["role"] for p in procs] == ["driver", "compiler"] and started
    assert procs[1]["pid"] == 12345 and procs[1]["peak_rss_bytes"] == 300 << 20
    assert report["memory"]["warning"] is None         # no limit of its own to exceed
    monkeypatch.setattr(ahead, "start", lambda budget: None)           # a warm cache
    report = run(paths, str(tmp_path / "out2"), CFG)
    assert [p["role"] for p in report["memory"]["processes"]] == ["driver"]
