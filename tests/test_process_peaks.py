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
