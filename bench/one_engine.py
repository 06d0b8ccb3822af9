"""One engine: every way of running gives the same bytes as before, and the
in-memory run is as fast as before.

    python bench/one_engine.py --matrix --old DIR       # every mode, this tree and another
    python bench/one_engine.py --speed --old DIR        # this tree against another checkout

``--matrix`` runs every command and mode with this tree and, given ``--old``,
with the checkout ``DIR`` too (e.g. ``git worktree add /tmp/old COMMIT``):

* ``gpu-dedup run`` over 40,000 real paragraphs (``debian-text`` of
  ``bench/corpora.py``: Debian's licence paragraphs and changelog entries;
  char 5-grams, normalize none, 128 hashes, threshold 0.8) in memory, out
  of core under a small budget (the disk store, small partitions), on Dask
  threads and on a local Dask cluster of two processes;
* ``gpu-dedup substr`` (word windows of 20) over 5,000 of them, in memory,
  out of core, on Dask threads and processes;
* both commands under Numba's CUDA simulator (the GPU backend's kernels run
  thread by thread, its array code on NumPy) on 20 of them with 10 edited
  and 5 exact copies, beside the CPU backend on the same documents.

For each it prints the seconds and the store, whether the outputs
(clusters.parquet, pairs.parquet, spans.parquet, documents.parquet, data/)
are byte-identical to this tree's in-memory run of the same command and to
the old tree's run of the same mode, and whether report.json has the same
keys and stage names as the in-memory run.

``--speed`` times the whole ``gpu-dedup run`` process on the million short
documents (``debian-short``) with this tree and with the checkout ``--old``,
alternating, ``--repeat`` times each (after one untimed run each, which
fills Numba's cache), and prints the medians and their ratio.
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


def installed(tree: str, tmp: str) -> str:
    """A folder to put first on ``PYTHONPATH`` to run ``tree``'s code: this
    tree's own for this checkout, else ``tree`` installed into a folder of
    its own (an editable install of this checkout would otherwise lend every
    tree its ``kernels/``, and so would Dask's worker processes)."""
    tree = os.path.abspath(tree)
    if tree == ROOT:
        return ROOT
    site = os.path.join(tmp, "site-" + hashlib.sha1(tree.encode()).hexdigest()[:8])
    if not os.path.isdir(site):
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                        "--target", site, tree], check=True)
    return site


def gd(tree: str, *args) -> tuple[float, subprocess.CompletedProcess]:
    """``gpu-dedup ARGS`` with the code at ``tree`` (:func:`installed`)."""
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
            # _SUCCESS lists report.json's hash, and report.json has the timings
            if n in ("report.json", "report.html", "_SUCCESS") or n.startswith(".gpu-dedup"):
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


SUBSTR_ARGS = ["--unit", "word", "--min-length", "20", "--overwrite", "--quiet"]

#: Under the simulator: each command through the library, with the CPU
#: backend and the GPU backend (NumPy arrays, simulated kernels); the
#: outputs' digests as JSON.
SIMULATED = r"""
import hashlib, json, os, sys
import numpy as np
from gpu_dedup.backend import CpuBackend
from gpu_dedup.backend_gpu import GpuBackend
from gpu_dedup.config import Config
from gpu_dedup.pipeline import run
src, tmp = sys.argv[1], sys.argv[2]
out = {}
for dev, be in (("cpu", CpuBackend()), ("simulator", GpuBackend(xp=np))):
    o = os.path.join(tmp, "sim-" + dev)
    rep = run([src], o, Config(shingle="char", ngram=5, normalize=(), num_perm=128,
                               threshold=0.8), backend=be, html=False, overwrite=True)
    out[dev] = {"device": rep["device"], "files": {}}
    for root, _d, names in os.walk(o):
        for n in sorted(names):
            if (n not in ("report.json", "report.html", "_SUCCESS")
                    and not n.startswith(".gpu-dedup")):
                p = os.path.join(root, n)
                out[dev]["files"][os.path.relpath(p, o)] = hashlib.sha256(
                    open(p, "rb").read()).hexdigest()
print(json.dumps(out))
"""


def _mode_outputs(tree: str, command: str, src: str, extra: list, out: str):
    args = ARGS if command == "run" else SUBSTR_ARGS
    secs, _ = gd(tree, command, src, "-o", out, *args, *extra)
    with open(os.path.join(out, "report.json")) as f:
        rep = json.load(f)
    got = (digests(out), keys(rep), list(rep["seconds"]))
    shutil.rmtree(out, ignore_errors=True)
    return secs, rep["work"]["store"], got


def _simulated(tree: str, src: str, tmp: str) -> dict:
    env = dict(os.environ, PYTHONPATH=tree, NUMBA_ENABLE_CUDASIM="1")
    p = subprocess.run([sys.executable, "-c", SIMULATED, src, tmp], env=env,
                       capture_output=True, text=True, cwd=tempfile.gettempdir())
    if p.returncode != 0:
        sys.exit(f"the simulated run failed ({tree}):\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def matrix(tmp: str, old: str | None) -> None:
    spec = corpora.debian_text(40_000)
    small = os.path.join(tmp, "small.jsonl")
    tiny = os.path.join(tmp, "tiny.jsonl")
    texts = corpora.read_texts(spec.path).to_pylist()
    corpora.write_jsonl(small, texts[:5000])
    # the simulator runs a kernel thread by thread: 20 documents, 10 of them
    # again with a word added and 5 exactly again
    corpora.write_jsonl(tiny, texts[:20] + [t + " again" for t in texts[:10]] + texts[:5])
    trees = {"this": ROOT}
    if old:
        trees["old"] = installed(old, tmp)
    say(f"`python bench/one_engine.py --matrix --old OLD`: this tree = {_commit(ROOT)}"
        + (f", OLD = {_commit(old)}" if old else "") + f"; {spec.name}, {spec.docs:,} real "
        f"documents, {spec.bytes / 2**20:.1f} MiB (`substr`: the first 5,000; the simulator: "
        f"the first 20, 10 of them edited, 5 copied); `run`: char 5-grams, normalize none, "
        f"128 hashes, t = 0.8; `substr`: word windows of 20.")
    say()
    modes = {
        "in memory": [],
        "256MiB budget, work directory": ["--memory-limit", "256MiB",
                                          "--work-dir", f"{tmp}/work"],
        "dask threads x2": ["--scheduler", "threads", "--workers", "2"],
        "dask processes x2": ["--scheduler", "processes", "--workers", "2"],
    }
    say("| command | mode | store | seconds | outputs = this tree in memory | "
        "outputs = OLD, same mode | report keys = in memory |")
    say("|---|---|---|---|---|---|---|")
    for command, src in (("run", spec.path), ("substr", small)):
        ref = None
        for name, extra in modes.items():
            out = os.path.join(tmp, "m" + hashlib.sha1(name.encode()).hexdigest()[:8])
            secs, store, got = _mode_outputs(ROOT, command, src, extra, out)
            if ref is None:
                ref = got
            same_old = "no old tree"
            if old:
                _, _, was = _mode_outputs(trees["old"], command, src, extra, out)
                same_old = str(got[0] == was[0])
            say(f"| {command} | {name} | {store} | {secs:.1f} | {got[0] == ref[0]} | "
                f"{same_old} | {got[1:] == ref[1:]} |")
    sim = {label: _simulated(tree, tiny, tmp) for label, tree in trees.items()}
    now = sim["this"]
    say(f"| run | CUDA simulator ({now['simulator']['device']}) | memory | | "
        f"{now['simulator']['files'] == now['cpu']['files']} (CPU backend, same documents) | "
        + (str(now["simulator"]["files"] == sim["old"]["simulator"]["files"]) if old
           else "no old tree") + " | |")


def speed(old: str, repeat: int, tmp: str) -> None:
    spec = corpora.debian_short(1_000_000)
    trees = {"this tree": ROOT, "old": installed(old, tmp)}
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
    ap.add_argument("--old", help="the checkout to compare with")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-save", action="store_true", help="do not update bench/RESULTS.md")
    ap.add_argument("--section", default="one-engine",
                    help="the section of bench/RESULTS.md to save to (default one-engine; "
                         "speed-stages: the per-stage table before and after)")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="gpu-dedup-one-engine-")
    try:
        if a.matrix:
            matrix(tmp, a.old)
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
