"""One engine: every way of running gives the same bytes, and the in-memory
run is as fast as before.

    python bench/one_engine.py --matrix                 # every mode on real text
    python bench/one_engine.py --speed --old DIR        # this tree against another checkout

``--matrix`` runs ``gpu-dedup run`` over 40,000 real paragraphs (``debian-text``
of ``bench/corpora.py``: Debian's licence paragraphs and changelog entries;
char 5-grams, normalize none, 128 hashes, threshold 0.8) in
memory, out of core under a small budget (the disk store, small
partitions), on Dask threads and on a local Dask cluster of two processes.
It prints each mode's seconds and store, and whether clusters.parquet,
pairs.parquet and data/ are byte-identical to the in-memory run and
report.json has the same keys and stage names.

``--speed`` times the whole ``gpu-dedup run`` process on the million short
documents (``debian-short``) with this tree and with the checkout ``--old``
(e.g. ``git worktree add /tmp/old COMMIT``), alternating, ``--repeat``
times each (after one untimed run each, which fills Numba's cache), and
prints the medians and their ratio.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import corpora  # noqa: E402
import results  # noqa: E402

LINES = results.Lines()
say = LINES.say

ARGS = ["--shingle", "char", "--ngram", "5", "--normalize", "none", "--num-perm", "128",
        "--threshold", "0.8", "--overwrite", "--quiet", "--no-html"]


def gd(tree: str, *args) -> tuple[float, subprocess.CompletedProcess]:
    env = dict(os.environ, PYTHONPATH=tree)
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "gpu_dedup.cli", *args], env=env,
                       capture_output=True, text=True, cwd=tempfile.gettempdir())
    secs = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"gpu-dedup failed ({tree}):\n{p.stderr[-3000:]}")
    return secs, p


def digests(folder: str) -> dict:
    out = {}
    for root, _dirs, names in os.walk(folder):
        for n in sorted(names):
            if n in ("report.json", "report.html") or n.startswith(".gpu-dedup"):
                continue
            p = os.path.join(root, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, folder)] = hashlib.sha256(f.read()).hexdigest()
    return out


def keys(obj, prefix=""):
    out = set()
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.add(f"{prefix}.{k}")
            if k not in ("peak_rss_bytes", "units", "reused", "scheduler", "plan"):
                out |= keys(v, f"{prefix}.{k}")
    return out


def matrix(tmp: str) -> None:
    spec = corpora.debian_text(40_000)
    say(f"`python bench/one_engine.py --matrix`: {spec.name}, {spec.docs:,} real documents, "
        f"{spec.bytes / 2**20:.1f} MiB; char 5-grams, normalize none, 128 hashes, t = 0.8.")
    say()
    modes = {
        "in memory": [],
        "256MiB budget, work directory": ["--memory-limit", "256MiB",
                                                           "--work-dir", f"{tmp}/work"],
        "dask threads x2": ["--scheduler", "threads", "--workers", "2"],
        "dask processes x2": ["--scheduler", "processes", "--workers", "2"],
    }
    ref = None
    say("| mode | store | seconds | outputs identical | report keys identical |")
    say("|---|---|---|---|---|")
    for name, extra in modes.items():
        out = os.path.join(tmp, "m" + hashlib.sha1(name.encode()).hexdigest()[:8])
        secs, _ = gd(ROOT, "run", spec.path, "-o", out, *ARGS, *extra)
        with open(os.path.join(out, "report.json")) as f:
            rep = json.load(f)
        got = (digests(out), keys(rep), list(rep["seconds"]))
        if ref is None:
            ref = got
        say(f"| {name} | {rep['work']['store']} | {secs:.1f} | {got[0] == ref[0]} | "
            f"{got[1:] == ref[1:]} |")
        shutil.rmtree(out, ignore_errors=True)


def speed(old: str, repeat: int, tmp: str) -> None:
    spec = corpora.debian_short(1_000_000)
    trees = {"this tree": ROOT, "old": os.path.abspath(old)}
    for label, tree in trees.items():           # untimed: fills each tree's kernel cache
        gd(tree, "run", spec.path, "-o", os.path.join(tmp, "warm"), *ARGS)
    times = {label: [] for label in trees}
    stages = {label: {} for label in trees}
    for _ in range(repeat):
        for label, tree in trees.items():
            out = os.path.join(tmp, "o")
            secs, _ = gd(tree, "run", spec.path, "-o", out, *ARGS)
            times[label].append(secs)
            with open(os.path.join(out, "report.json")) as f:
                for k, v in json.load(f)["seconds"].items():
                    stages[label].setdefault(k, []).append(v)
            print(f"  {label}: {secs:.2f}s", flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    say()
    say(f"Measured {results.machine()['date']} on this machine.")
    say()
    say(f"`python bench/one_engine.py --speed --old OLD`: {spec.name}, {spec.docs:,} documents, "
        f"the whole `gpu-dedup run` process, medians of {repeat} alternating runs; OLD = "
        f"{_commit(old)}.")
    say()
    say("| tree | seconds | docs/s |")
    say("|---|---|---|")
    for k, v in med.items():
        say(f"| {k} | {v:.2f} | {spec.docs / v:,.0f} |")
    say()
    say(f"This tree takes {med['this tree'] / med['old']:.3f}x the old tree's time.")
    names = list(dict.fromkeys(k for v in stages.values() for k in v))
    say()
    say("Seconds per stage (report.json; medians of the same runs):")
    say()
    say("| tree | " + " | ".join(names) + " |")
    say("|---|" + "---|" * len(names))
    for label, st in stages.items():
        say(f"| {label} | " + " | ".join(
            f"{statistics.median(st[k]):.2f}" if k in st else "" for k in names) + " |")


def _commit(tree: str) -> str:
    try:
        return subprocess.run(["git", "-C", tree, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True).stdout.strip() or tree
    except OSError:
        return tree


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--matrix", action="store_true")
    ap.add_argument("--speed", action="store_true")
    ap.add_argument("--old", help="the checkout to compare with (for --speed)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-save", action="store_true", help="do not update bench/RESULTS.md")
    ap.add_argument("--section", default="one-engine",
                    help="the section of bench/RESULTS.md to save to (default one-engine; "
                         "speed-stages: the per-stage table before and after)")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="gpu-dedup-one-engine-")
    try:
        if a.matrix:
            matrix(tmp)
        if a.speed:
            if not a.old:
                ap.error("--speed needs --old DIR")
            speed(a.old, a.repeat, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if LINES and not a.no_save:
        results.save(a.section, "\n".join(LINES), {"lines": LINES})
    return 0


if __name__ == "__main__":
    sys.exit(main())
