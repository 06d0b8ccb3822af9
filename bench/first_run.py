"""The first run after an install, and a warm start.

    python bench/first_run.py [--repeat 3] [--no-save]

First run: ``gpu-dedup demo`` with an empty Numba cache (``NUMBA_CACHE_DIR``
pointing at a new folder), which is what a fresh install has: every kernel
the demo's options need is compiled once. Wall seconds of the whole
process, each run with its own empty cache; the median is reported.

Warm start: ``gpu-dedup run`` on 100 short documents once the cache holds
the kernels, and importing the CLI alone (medians of 5, as
``bench/run.py --speed`` measures them).
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import results  # noqa: E402
from run import gpu_dedup_command, startup  # noqa: E402


def first_runs(repeat: int) -> list[float]:
    """Wall seconds of ``gpu-dedup demo`` on an empty Numba cache, each time."""
    secs = []
    for i in range(repeat):
        tmp = tempfile.mkdtemp(prefix="gpu-dedup-first-run-")
        try:
            env = dict(os.environ, NUMBA_CACHE_DIR=os.path.join(tmp, "numba-cache"))
            t0 = time.perf_counter()
            p = subprocess.run(gpu_dedup_command() + ["demo", "--output", os.path.join(tmp, "d")],
                               capture_output=True, text=True, env=env, timeout=900)
            secs.append(time.perf_counter() - t0)
            if p.returncode != 0:
                raise SystemExit(f"gpu-dedup demo failed: {p.stderr.strip()[-2000:]}")
            print(f"first run {i + 1}: {secs[-1]:.1f} s", flush=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return secs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-save", action="store_true")
    args = ap.parse_args(argv)
    m = results.machine()
    first = first_runs(args.repeat)
    warm = startup()
    med = statistics.median(first)
    lines = results.Lines()
    lines.say(f"`python bench/first_run.py`, {results.machine_line(m)}; load {m['load_average']}.")
    lines.say()
    lines.say("| measure | runs | seconds (median) | each run |")
    lines.say("|---|---|---|---|")
    lines.say(f"| first `gpu-dedup demo`, empty Numba cache | {len(first)} | {med:.1f} | "
              + ", ".join(f"{s:.1f}" for s in first) + " |")
    lines.say(f"| warm `gpu-dedup run`, 100 documents | 5 | {warm['run_100_docs']:.2f} | – |")
    lines.say(f"| `import gpu_dedup.cli` | 5 | {warm['import_cli']:.2f} | – |")
    if not args.no_save:
        results.save("first-run", "\n".join(lines),
                      {"machine": m, "first_run_s": first, "first_run_median_s": med, **warm})
    return 0


if __name__ == "__main__":
    sys.exit(main())
