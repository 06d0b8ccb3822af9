"""``gpu-dedup`` ends without tearing the interpreter down once nothing can
be lost (:func:`gpu_dedup.cli.quick_exit`), and the usual way otherwise."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

PRELUDE = textwrap.dedent("""
    import atexit, sys, threading, time
    from gpu_dedup.cli import quick_exit

    class Teardown:
        def __del__(self):
            sys.stdout.write("teardown\\n")

    kept_alive = Teardown()                   # freed only when the interpreter is torn down
    atexit.register(lambda: sys.stdout.write("at exit\\n"))
    sys.stdout.write("buffered\\n")           # a pipe: block-buffered, not yet written
""")


def _run(body: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body)],
                          capture_output=True, text=True, timeout=120)


def test_the_quick_way_keeps_output_and_exit_handlers_and_skips_the_teardown():
    r = _run("quick_exit(5)\n")
    assert r.returncode == 5, r.stderr
    assert r.stdout.splitlines() == ["buffered", "at exit"]       # no "teardown"


def test_a_thread_still_running_is_waited_for():
    r = _run("""
        def late():
            time.sleep(0.3)
            sys.stdout.write("thread done\\n")
        threading.Thread(target=late).start()
        quick_exit(3)
    """)
    assert r.returncode == 3, r.stderr
    lines = r.stdout.splitlines()
    assert lines[:3] == ["buffered", "thread done", "at exit"], lines


def test_a_daemon_thread_is_not_waited_for():
    r = _run("""
        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
        quick_exit(0)
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["buffered", "at exit"]


@pytest.mark.parametrize("code,status", [(None, 0), ("a message", 1)])
def test_other_statuses_end_as_sys_exit_ends_them(code, status):
    r = _run(f"quick_exit({code!r})\n")
    assert r.returncode == status
    assert ("a message" in r.stderr) == (code == "a message")
    assert r.stdout.splitlines()[:2] == ["buffered", "at exit"]


def test_the_program_is_the_console_entry(tmp_path):
    """The installed ``gpu-dedup`` (and ``python -m gpu_dedup.cli``) runs
    :func:`gpu_dedup.cli.console`: its status and whole output kept."""
    from importlib.metadata import entry_points
    (ep,) = [e for e in entry_points(group="console_scripts") if e.name == "gpu-dedup"]
    assert ep.value == "gpu_dedup.cli:console"
    src = tmp_path / "docs.jsonl"
    src.write_text("".join(f'{{"text": "line {i % 5} of some text"}}\n' for i in range(40)))
    r = subprocess.run([sys.executable, "-m", "gpu_dedup.cli", "run", str(src),
                        "-o", str(tmp_path / "out"), "--json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    import json
    summary = json.loads(r.stdout)
    assert (summary["documents"]["kept"], summary["documents"]["removed"]) == (5, 35)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"text": \n')
    r = subprocess.run([sys.executable, "-m", "gpu_dedup.cli", "run", str(bad),
                        "-o", str(tmp_path / "out2")], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1].startswith("error: ") and "bad.jsonl:2" in r.stderr


def test_a_run_of_the_program_ends_the_quick_way(tmp_path):
    """A whole ``run`` (which starts the reading thread; the kernels' pool,
    which a larger input starts, is started here too) still ends without
    the teardown: the package stops its own idle threads first."""
    src = tmp_path / "docs.jsonl"
    src.write_text("".join(f'{{"text": "line {i % 7} of a text long enough to shingle"}}\n'
                           for i in range(300)))
    r = _run(f"""
        from gpu_dedup.cli import console
        from gpu_dedup.kernels import threads
        threads._workers(2).submit(int).result()
        sys.argv = ["gpu-dedup", "run", {str(src)!r}, "-o", {str(tmp_path / "out")!r},
                    "--quiet"]
        console()
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["buffered", "at exit"], r.stdout    # no "teardown"
    assert (tmp_path / "out" / "report.json").exists()
