"""The pure helpers of bench/scale.py: folder sizes and comparisons, the
processes of a report, and the commands that start a Dask cluster."""
from __future__ import annotations

import os
import stat
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "bench"))
import scale  # noqa: E402


def _write(path, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def test_tree_bytes_sums_every_file_below(tmp_path):
    _write(tmp_path / "a" / "x.bin", b"12345")
    _write(tmp_path / "a" / "b" / "y.bin", b"123")
    _write(tmp_path / "z.bin", b"")
    assert scale.tree_bytes(str(tmp_path)) == 8
    assert scale.tree_bytes(str(tmp_path / "missing")) == 0
    assert scale.tree_bytes(None) == 0


def test_same_files_compares_names_and_bytes(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for root in (a, b):
        _write(root / "one.jsonl", b"same")
        _write(root / "sub" / "two.jsonl", b"also")
    assert scale.same_files(str(a), str(b))
    _write(b / "sub" / "two.jsonl", b"alsO")
    assert not scale.same_files(str(a), str(b))
    _write(b / "sub" / "two.jsonl", b"also")
    _write(b / "three.jsonl", b"")
    assert not scale.same_files(str(a), str(b))
    assert not scale.same_files(str(a), str(tmp_path / "missing"))


REPORT = {"memory": {"processes": [
    {"role": "driver", "pid": 10, "peak_rss_bytes": 300, "limit_bytes": 1000},
    {"role": "worker", "pid": 12, "address": "tcp://127.0.0.1:2", "peak_rss_bytes": 500,
     "limit_bytes": 1000},
    {"role": "worker", "pid": 11, "address": "tcp://127.0.0.1:1", "peak_rss_bytes": 400,
     "limit_bytes": None},
]}}


def test_driver_and_worker_peaks_from_the_report():
    assert scale.driver_peak(REPORT) == 300
    assert [w["pid"] for w in scale.worker_peaks(REPORT)] == [11, 12]   # by address
    assert scale.driver_peak({"memory": {}}) is None
    assert scale.driver_peak(None) is None
    assert scale.worker_peaks({"memory": {"processes": []}}) == []
    assert scale.workers_cell(REPORT) == "0.00 GiB / no limit, 0.00 GiB / 0.00 GiB"
    assert scale.workers_cell({"memory": {"processes": []}}) == "–"


def test_driver_growth_is_held_to_ten_percent():
    assert scale.driver_growth(110, 100) == (1.1, True)
    ratio, ok = scale.driver_growth(111, 100)
    assert abs(ratio - 1.11) < 1e-12 and not ok
    assert scale.driver_growth(90, 100) == (0.9, True)


def test_dask_commands_prefer_the_console_script(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sched = scale.scheduler_cmd("/s.json", str(bin_dir))
    assert sched[:3] == [sys.executable, "-m", "distributed.cli.dask_scheduler"]
    assert sched[3:] == ["--host", "127.0.0.1", "--port", "0", "--scheduler-file", "/s.json",
                         "--no-dashboard"]
    work = scale.worker_cmd("/s.json", "1GiB", "/scratch", str(bin_dir))
    assert work[:3] == [sys.executable, "-m", "distributed.cli.dask_worker"]
    for flag, value in (("--nthreads", "1"), ("--nworkers", "1"), ("--memory-limit", "1GiB"),
                        ("--scheduler-file", "/s.json"), ("--local-directory", "/scratch")):
        assert work[work.index(flag) + 1] == value
    assert "--no-dashboard" in work
    dask = bin_dir / "dask"
    dask.write_text("#!/bin/sh\n")
    dask.chmod(dask.stat().st_mode | stat.S_IXUSR)
    assert scale.scheduler_cmd("/s.json", str(bin_dir))[:2] == [str(dask), "scheduler"]
    assert scale.worker_cmd("/s.json", "1GiB", "/scratch", str(bin_dir))[:2] == \
        [str(dask), "worker"]
