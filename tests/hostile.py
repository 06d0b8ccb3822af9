"""The contract every hostile case is held to, shared by the
``tests/test_hostile*.py`` files.

A run of the command line, however bad its input, either exits 0 or exits 2
with exactly one line on stderr and no traceback; and it changes nothing
outside the folders it was given to write (its output, its work directory,
an index it updates). :func:`guarded` hashes every file in a tree around the
run before and after, so a write through a hostile path is caught wherever
it lands.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import forkcli

CLI = [sys.executable, "-m", "gpu_dedup.cli"]


def tree_state(root: str, skip: tuple[str, ...] = ()) -> dict[str, tuple]:
    """Every entry under ``root``, relative name -> (kind, size, sha256),
    except those at or below a path in ``skip``. Links are not followed."""
    skip = tuple(os.path.abspath(s) for s in skip)
    state: dict[str, tuple] = {}
    for dirpath, dirs, names in os.walk(root):
        if any(os.path.abspath(dirpath) == s or os.path.abspath(dirpath).startswith(s + os.sep)
               for s in skip):
            dirs[:] = []
            continue
        for n in sorted(dirs + names):
            p = os.path.join(dirpath, n)
            if any(os.path.abspath(p) == s for s in skip):
                continue
            rel = os.path.relpath(p, root)
            if os.path.islink(p):
                state[rel] = ("link", os.readlink(p))
            elif os.path.isdir(p):
                state[rel] = ("dir",)
            elif os.path.isfile(p):
                with open(p, "rb") as f:
                    state[rel] = ("file", os.path.getsize(p), hashlib.sha256(f.read()).hexdigest())
            else:
                state[rel] = ("other",)
    return state


def run_cli(*args, cwd=None, timeout: float = 300, input: bytes | None = None,
            env: dict | None = None) -> subprocess.CompletedProcess:
    """``gpu-dedup ARGS`` in a child process (:func:`forkcli.run`: started warm);
    stdout and stderr as text."""
    e = dict(os.environ)
    e.pop("GPU_DEDUP_DEBUG", None)
    e.update(env or {})
    p = forkcli.run([str(a) for a in args], cwd=cwd, timeout=timeout, input=input, env=e)
    p.stdout = p.stdout.decode("utf-8", "replace")
    p.stderr = p.stderr.decode("utf-8", "replace")
    return p


def assert_clean_outcome(p: subprocess.CompletedProcess, *, expect: int | None = None,
                         says: str | None = None) -> None:
    """Exit 0, or exit 2 with one line on stderr starting ``error:`` (no
    traceback); ``expect`` pins the status, ``says`` a text the line holds."""
    err_lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    assert p.returncode in (0, 2), (p.returncode, p.stderr[-3000:])
    if expect is not None:
        assert p.returncode == expect, (p.returncode, p.stderr[-3000:])
    if p.returncode == 2:
        errors = [ln for ln in err_lines if ln.startswith("error:")]
        assert len(errors) == 1, p.stderr[-3000:]
        if says is not None:
            assert says in errors[0], errors[0]


def guarded(root: str, *args, writable: tuple[str, ...] = (), expect: int | None = None,
            says: str | None = None, **kw) -> subprocess.CompletedProcess:
    """Run the CLI and hold it to the contract: a clean outcome, and no entry
    under ``root`` changed except at or below the ``writable`` paths."""
    before = tree_state(root, skip=writable)
    p = run_cli(*args, **kw)
    assert_clean_outcome(p, expect=expect, says=says)
    after = tree_state(root, skip=writable)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    assert not changed, f"changed outside the output: {changed[:20]}"
    return p
