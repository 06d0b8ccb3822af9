"""The warm command runner of the tests (``tests/forkcli.py``) gives what a
fresh ``python -m gpu_dedup.cli`` gives: exit status, stdout and stderr, byte
for byte, standard input, undecodable names, and a fresh interpreter when the
environment changes what one reads at start-up."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import forkcli

CLI = [sys.executable, "-m", "gpu_dedup.cli"]


def _fresh(args, **kw):
    return subprocess.run(CLI + args, capture_output=True, **kw)


def test_the_same_status_and_bytes_as_a_fresh_interpreter(tmp_path):
    bad = os.fsdecode(b"caf\xe9.jsonl")                # not UTF-8: escaped when named
    cases = [["tune", "--threshold", "0.7", "--num-perm", "64"],
             ["run", str(tmp_path / "missing.jsonl"), "-o", str(tmp_path / "o")],
             ["nosuchcommand"],
             ["run", "--threshold", "lots", "x.jsonl", "-o", str(tmp_path / "o")],
             ["run", os.path.join(str(tmp_path), bad), "-o", str(tmp_path / "o")]]
    for args in cases:
        warm = forkcli.run(args, cwd=str(tmp_path))
        fresh = _fresh(args, cwd=str(tmp_path))
        assert (warm.returncode, warm.stdout, warm.stderr) == \
            (fresh.returncode, fresh.stdout, fresh.stderr), args
    assert not os.path.exists(tmp_path / "o")


def test_standard_input_text_and_a_run_that_writes(tmp_path):
    docs = "".join(json.dumps({"id": f"d{i}", "text": t}) + "\n"
                   for i, t in enumerate(["the cat sat on the mat"] * 2 + ["another text"]))
    p = forkcli.run(["run", "-", "-o", str(tmp_path / "out"), "-q", "--json"],
                    input=docs.encode(), text=True)
    assert p.returncode == 0, p.stderr
    assert isinstance(p.stdout, str) and p.stderr == ""
    report = json.loads(p.stdout)
    assert report["documents"]["in"] == 3 and report["documents"]["kept"] == 2
    assert (tmp_path / "out" / "clusters.parquet").exists()


def test_an_environment_read_at_start_up_gets_a_fresh_interpreter(monkeypatch):
    base = {"PATH": "/bin", "NUMBA_NUM_THREADS": "2"}
    assert not forkcli._startup_env_changed(dict(base, AWS_ACCESS_KEY_ID="k"), base)
    assert forkcli._startup_env_changed(dict(base, NUMBA_NUM_THREADS="1"), base)
    assert forkcli._startup_env_changed(dict(base, PYTHONHASHSEED="0"), base)
    assert forkcli._startup_env_changed({"PATH": "/bin"}, base)
    fresh, real = [], subprocess.run
    monkeypatch.setattr(forkcli.subprocess, "run",
                        lambda *a, **kw: fresh.append(a) or real(*a, **kw))
    p = forkcli.run(["--version"], env=dict(os.environ, NUMBA_NUM_THREADS="1"))
    assert p.returncode == 0 and fresh
    assert p.stdout == _fresh(["--version"]).stdout
