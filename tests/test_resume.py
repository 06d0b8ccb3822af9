"""Resumable runs: a run killed with SIGKILL in the middle of a stage and run
again reuses the completed work and gives byte-identical outputs; changed
parameters or inputs never reuse stale work."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from gpu_dedup.config import Config
from gpu_dedup.errors import ConfigError
from gpu_dedup.engine import layout
from gpu_dedup.engine.store import DiskStore as WorkDir
from test_staged import CFG, make_texts, run, run_staged, write_inputs

LIMIT = "64KiB"          # many chunks and units, so a kill lands mid-stage

CHILD = r"""
import json, os, signal, sys
from gpu_dedup.config import Config
from gpu_dedup.engine import runner
from gpu_dedup.pipeline import run
a = json.loads(sys.argv[1])
if a.get("no_bounds"):       # a backend that makes no bound rows
    from gpu_dedup.backend import CpuBackend
    CpuBackend.bounds_pay = False
stage = [None]
def progress(fraction):
    pass
class Kill(runner.Runner):
    def _progress(self, name, done, total):
        if name == a.get("kill_stage") and done >= a["kill_after"]:
            os.kill(os.getpid(), signal.SIGKILL)
runner.Runner = Kill
import gpu_dedup.pipeline as pl
pl.Runner = Kill
run(a["inputs"], a["output"], Config(**a["cfg"]), partition_bytes=a["limit"],
    work_dir=a["work"], html=False)
"""


def _cfg_dict(cfg: Config) -> dict:
    d = cfg.to_dict()
    d.pop("fp_weight", None)
    d.pop("fn_weight", None)
    return d


def child(inputs, output, work, kill_stage=None, kill_after=0, cfg=CFG, no_bounds=False):
    args = {"inputs": inputs, "output": output, "work": work, "limit": LIMIT,
            "cfg": _cfg_dict(cfg), "kill_stage": kill_stage, "kill_after": kill_after,
            "no_bounds": no_bounds}
    return subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def read(path):
    with open(path, "rb") as f:
        return f.read()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("resume")
    paths = write_inputs(str(folder / "in"), make_texts(500, seed=4))
    ref = str(folder / "ref")
    run(paths, ref, CFG)
    return paths, ref


def assert_same_outputs(ref, out):
    for name in ("clusters.parquet", "pairs.parquet"):
        assert read(os.path.join(ref, name)) == read(os.path.join(out, name)), name


@pytest.mark.parametrize("stage,after", [("read", 3), ("signatures", 2), ("select", 1)])
def test_killed_mid_stage_resumes_with_identical_outputs(corpus, tmp_path, stage, after):
    paths, ref = corpus
    out = str(tmp_path / "out")
    work = str(tmp_path / "work")
    p = child(paths, out, work, stage, after)
    _, err = p.communicate(timeout=300)
    assert p.returncode == -signal.SIGKILL, err.decode()[-2000:]
    assert not os.path.exists(out)
    report = run_staged(paths, out, CFG, memory_limit=LIMIT, work_dir=work)
    assert_same_outputs(ref, out)
    reused = report["work"]["reused"]
    # the units finished before the kill were not computed again ...
    assert reused.get(stage, 0) >= after
    # ... and every earlier stage was reused whole
    order = ["read", "exact", "signatures", "buckets", "select"]
    for earlier in order[:order.index(stage)]:
        assert reused.get(earlier, 0) == report["work"]["units"][earlier], earlier
    assert not os.path.exists(report["work"]["dir"])


def test_signatures_made_partly_without_bound_rows_resume_to_the_same_bytes(corpus, tmp_path):
    """A run killed in its signatures on a backend that makes no bound rows
    (the GPU's) and resumed on one that does: the blocks made before the
    kill have none, so selection settles no pair by its bounds, and the
    outputs are the same."""
    paths, ref = corpus
    out = str(tmp_path / "out")
    work = str(tmp_path / "work")
    p = child(paths, out, work, "signatures", 2, no_bounds=True)
    _, err = p.communicate(timeout=300)
    assert p.returncode == -signal.SIGKILL, err.decode()[-2000:]
    bounds = [n for _d, _s, ns in os.walk(work) for n in ns if n.endswith(layout.BOUNDS)]
    assert not bounds
    report = run_staged(paths, out, CFG, memory_limit=LIMIT, work_dir=work, keep_work_dir=True)
    assert_same_outputs(ref, out)
    assert report["work"]["reused"]["signatures"] >= 2
    made = [n for _d, _s, ns in os.walk(work) for n in ns if n.endswith(layout.BOUNDS)]
    assert 0 < len(made) < report["work"]["units"]["signatures"]
    assert report["work"]["selection_bounded"] == 0
    assert report["work"]["selection_scored"] > 0
    fresh = run_staged(paths, str(tmp_path / "again"), CFG, memory_limit=LIMIT,
                       work_dir=str(tmp_path / "work2"))
    assert fresh["work"]["selection_bounded"] > 0


def test_sigkill_from_outside_after_a_stage_marker(corpus, tmp_path):
    paths, ref = corpus
    out = str(tmp_path / "out")
    work = str(tmp_path / "work")
    p = child(paths, out, work)
    deadline = time.monotonic() + 240
    marker = None
    while time.monotonic() < deadline and p.poll() is None:
        found = [os.path.join(d, n) for d, _s, ns in os.walk(work) for n in ns
                 if n == "exact" + layout.MARKER and os.path.basename(d) == layout.STAGE]
        if found:
            marker = found[0]
            os.kill(p.pid, signal.SIGKILL)
            break
        time.sleep(0.005)
    p.communicate(timeout=60)
    assert marker is not None and p.returncode == -signal.SIGKILL
    report = run_staged(paths, out, CFG, memory_limit=LIMIT, work_dir=work)
    assert_same_outputs(ref, out)
    assert report["work"]["reused"]["read"] == report["work"]["units"]["read"]
    assert report["work"]["reused"]["exact"] == report["work"]["units"]["exact"]


def test_completed_stages_are_reused_and_changes_are_not(corpus, tmp_path):
    paths, ref = corpus
    work = str(tmp_path / "work")
    first = run_staged(paths, str(tmp_path / "a"), CFG, memory_limit=LIMIT, work_dir=work,
                       keep_work_dir=True)
    assert first["work"]["reused"] == {}
    again = run_staged(paths, str(tmp_path / "b"), CFG, memory_limit=LIMIT, work_dir=work,
                       keep_work_dir=True)
    assert again["work"]["dir"] == first["work"]["dir"]
    for stage in ("read", "exact", "signatures", "buckets", "select", "assign"):
        assert again["work"]["reused"].get(stage), stage
    assert_same_outputs(ref, str(tmp_path / "b"))
    # another threshold: another work directory, nothing reused
    other = Config(**{**_cfg_dict(CFG), "threshold": 0.6})
    changed = run_staged(paths, str(tmp_path / "c"), other, memory_limit=LIMIT, work_dir=work,
                         keep_work_dir=True)
    assert changed["work"]["dir"] != first["work"]["dir"]
    assert changed["work"]["reused"] == {}
    # a touched input with the same bytes is the same input: its work is reused
    st = os.stat(paths[0])
    os.utime(paths[0], ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    touched = run_staged(paths, str(tmp_path / "d"), CFG, memory_limit=LIMIT, work_dir=work,
                         keep_work_dir=True)
    assert touched["work"]["dir"] == first["work"]["dir"]
    # an input changed in place, same size and modification time: nothing reused
    st = os.stat(paths[0])
    with open(paths[0], "r+b") as f:
        raw = f.read()
        at = raw.index(b"w1")
        f.seek(at)
        f.write(b"w2" if raw[at:at + 2] != b"w2" else b"w3")
    os.utime(paths[0], ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(paths[0]).st_size == st.st_size
    changed = run_staged(paths, str(tmp_path / "e"), CFG, memory_limit=LIMIT, work_dir=work)
    assert changed["work"]["dir"] != first["work"]["dir"]
    assert changed["work"]["reused"] == {}


def test_work_dir_lock_and_leftover_temporary_files(tmp_path):
    root = tmp_path / "w"
    root.mkdir()
    (root / "x.npy.tmp-12345-1").write_bytes(b"partial")
    (root / "keep.npy").write_bytes(b"done")
    wd = WorkDir(str(root)).open()
    try:
        assert not (root / "x.npy.tmp-12345-1").exists()
        assert (root / "keep.npy").exists()
        with pytest.raises(ConfigError, match="in use"):
            WorkDir(str(root)).open()
    finally:
        wd.close()
    WorkDir(str(root)).open().close()          # free again once closed
