"""Writing the outputs: MB a second of clusters.parquet, pairs.parquet and
data/, each write in a fresh process.

    python bench/write_speed.py [--repeat 5] [--no-save] [--old REV]

On a million short lines, the real documents of a few hundred bytes and the
long documents of ``bench/corpora.py`` (``--normalize none``, defaults
otherwise), each corpus is run once with a work directory; then ``gpu-dedup
run`` is started again ``--repeat`` times on that work directory, into a new
output folder: every stage before it is reused (after its files are
checked), so what is timed is the ``write`` stage that every run ends with,
from report.json. MB are the bytes of the output folder's three outputs.

``--old REV``: the same, alternating with the writer of another revision
(the writer's modules of ``REV``, :data:`WRITER`, put in place for its runs
and put back after), run after run, so that load hits both alike.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import corpora  # noqa: E402
import results  # noqa: E402

#: The writer's modules, as ``--old`` swaps them (kernels stay: swapping
#: them would make every run compile them again).
WRITER = [os.path.join("gpu_dedup", "engine", "outputs.py"),
          os.path.join("gpu_dedup", "io", "jsonl.py"),
          os.path.join("gpu_dedup", "io", "parquet.py")]


def run(path: str, work: str, out: str) -> dict:
    """One ``gpu-dedup run`` in a fresh process; report.json's write stage."""
    cmd = [sys.executable, "-m", "gpu_dedup.cli", "run", path, "--output", out,
           "--normalize", "none", "--work-dir", work, "--keep-work-dir",
           "--scheduler", "none", "--quiet"]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=3600)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {p.stderr.strip()[-2000:]}")
    with open(os.path.join(out, "report.json")) as f:
        r = json.load(f)
    size = os.path.getsize(os.path.join(out, "clusters.parquet")) \
        + os.path.getsize(os.path.join(out, "pairs.parquet"))
    for base, _, files in os.walk(os.path.join(out, "data")):
        size += sum(os.path.getsize(os.path.join(base, f)) for f in files)
    return {"seconds": r["seconds"]["write"], "mb": size / 1e6,
            "peak_mib": r["memory"]["peak_rss_bytes"]["write"] / 2 ** 20}


def put(files: dict) -> None:
    """Write ``{path: bytes}`` into the tree."""
    for w, data in files.items():
        with open(os.path.join(ROOT, w), "wb") as f:
            f.write(data)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--old", default=None, help="a revision whose writer runs alternately")
    ap.add_argument("--no-save", action="store_true")
    args = ap.parse_args(argv)
    m = results.machine()
    trees = {"this tree": None}
    if args.old:
        trees[f"{args.old}'s writer"] = {
            w: subprocess.run(["git", "show", f"{args.old}:{w}"], cwd=ROOT, check=True,
                              capture_output=True).stdout for w in WRITER}
    mine = {}
    for w in WRITER:
        with open(os.path.join(ROOT, w), "rb") as f:
            mine[w] = f.read()
    specs = [corpora.debian_short(), corpora.debian_entries(), corpora.long_documents()]
    lines = results.Lines()
    lines.say(f"`python bench/write_speed.py --repeat {args.repeat}"
              + (f" --old {args.old}" if args.old else "")
              + f"`, {results.machine_line(m)}; load {m['load_average']}.")
    lines.say()
    lines.say("| corpus | documents | writer | MB written | seconds (median) | MB/s (median) "
              "| each run (MB/s) | write stage's peak |")
    lines.say("|---|---:|---|---:|---:|---:|---|---:|")
    data = {"machine": m, "rows": []}
    scratch = tempfile.mkdtemp(prefix="write-speed-")
    try:
        for spec in specs:
            work = os.path.join(scratch, "work")
            run(spec.path, work, os.path.join(scratch, "first"))
            shutil.rmtree(os.path.join(scratch, "first"))
            got: dict = {t: [] for t in trees}
            for i in range(args.repeat):
                for t, source in trees.items():     # alternating, so that load hits both
                    out = os.path.join(scratch, f"out{i}")
                    try:
                        put(source or mine)
                        got[t].append(run(spec.path, work, out))
                    finally:
                        put(mine)
                        shutil.rmtree(out, ignore_errors=True)
            for t, runs in got.items():
                secs = statistics.median(r["seconds"] for r in runs)
                mb = runs[0]["mb"]
                rates = [r["mb"] / r["seconds"] for r in runs]
                peak = statistics.median(r["peak_mib"] for r in runs)
                lines.say(f"| {spec.name} | {spec.docs:,} | {t} | {mb:.0f} | {secs:.2f} | "
                          f"{statistics.median(rates):.0f} | "
                          + ", ".join(f"{x:.0f}" for x in rates) + f" | {peak:.0f} MiB |")
                data["rows"].append({"corpus": spec.name, "docs": spec.docs, "writer": t,
                                     "mb": mb, "runs": runs})
            shutil.rmtree(work, ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if not args.no_save:
        results.save("writing", "\n".join(lines), data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
