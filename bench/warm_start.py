"""A warm start as installed: ``gpu-dedup run`` on 100 real documents of
each length, in fresh processes, the package as ``pip install`` puts it.

    python bench/warm_start.py [--repeat 15] [--old REV] [--no-save]

The package (the working tree, and with ``--old`` the tree of revision
``REV``) is installed with ``pip install --no-deps --target`` into a
folder of its own, byte code written as pip writes it, and run by this
interpreter with that folder first on its path, as the ``gpu-dedup``
console script runs it (:func:`gpu_dedup.cli.console`). The inputs are the
first 100 documents of the short lines, the paragraphs, the long documents
and the translated manual pages of ``bench/corpora.py``; each is run once
untimed, then ``--repeat`` times, the trees and corpora alternating, so
that the machine's load hits them alike. Reported: the median and the
smallest wall seconds of each, and the median seconds inside the process
(report.json's ``total``).
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
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import corpora  # noqa: E402
import results  # noqa: E402

#: The console script's body (what ``pip`` writes for ``gpu-dedup``).
CONSOLE = "import sys\nfrom gpu_dedup.cli import console\nsys.argv[0] = 'gpu-dedup'\nconsole()\n"
DOCUMENTS = 100


def inputs(folder: str) -> list[tuple[str, str]]:
    """``(name, path)`` of the first :data:`DOCUMENTS` documents of each corpus."""
    specs = [("short lines", corpora.debian_short()),
             ("paragraphs", corpora.debian_entries()),
             ("long documents", corpora.long_documents())]
    if os.path.isdir(corpora.MAN_ROOT):
        specs.append(("translated man pages", corpora.translated_man_pages()))
    out = []
    for name, spec in specs:
        path = os.path.join(folder, name.replace(" ", "_") + ".jsonl")
        with open(spec.path, "rb") as src, open(path, "wb") as dst:
            for _ in range(DOCUMENTS):
                line = src.readline()
                if not line:
                    break
                dst.write(line)
        out.append((name, path))
    return out


def install(source: str, target: str) -> None:
    """``pip install --no-deps --target target source``."""
    p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                        "--target", target, source], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"pip install {source} failed: {p.stderr.strip()[-2000:]}")
    where = subprocess.run([sys.executable, "-c",
                            "import gpu_dedup.kernels as k; print(k.__file__)"],
                           env=dict(os.environ, PYTHONPATH=target), cwd=target,
                           capture_output=True, text=True, check=True).stdout.strip()
    if not where.startswith(target + os.sep):
        raise SystemExit(f"the package installed in {target} is not the one imported ({where})")


def checkout(rev: str, folder: str) -> str:
    """The tree of ``rev`` (its tracked files) in ``folder``."""
    os.makedirs(folder)
    archive = subprocess.run(["git", "archive", rev], cwd=ROOT, capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", folder], input=archive, check=True)
    return folder


def run_once(target: str, path: str, out: str) -> tuple[float, float]:
    """Wall seconds of one run in a fresh process, and its report's total;
    the package imported from ``target``."""
    env = dict(os.environ, PYTHONPATH=target)
    t0 = time.perf_counter()
    # from the install's folder: ``-c`` puts the working folder first on the path
    subprocess.run([sys.executable, "-c", CONSOLE, "run", path, "-o", out, "--overwrite",
                    "--quiet"], env=env, check=True, capture_output=True, timeout=600,
                   cwd=target)
    wall = time.perf_counter() - t0
    with open(os.path.join(out, "report.json")) as f:
        return wall, float(json.load(f)["seconds"]["total"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--old", help="a revision to install and run alternately")
    ap.add_argument("--no-save", action="store_true")
    args = ap.parse_args(argv)
    m = results.machine()
    tmp = tempfile.mkdtemp(prefix="gpu-dedup-warm-")
    try:
        trees = [("this tree", ROOT)]
        if args.old:
            trees.append((f"{args.old}", checkout(args.old, os.path.join(tmp, "old-src"))))
        targets = []
        for i, (name, src) in enumerate(trees):
            target = os.path.join(tmp, f"site{i}")
            install(src, target)
            targets.append((name, target))
        docs = inputs(tmp)
        walls: dict = {}
        inside: dict = {}
        for rep in range(args.repeat + 1):
            for corpus, path in docs:
                for name, target in targets:
                    wall, total = run_once(target, path, os.path.join(tmp, "out"))
                    if rep:                       # the first round is not timed
                        walls.setdefault((corpus, name), []).append(wall)
                        inside.setdefault((corpus, name), []).append(total)
        sizes = {corpus: os.path.getsize(path) for corpus, path in docs}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    lines = results.Lines()
    lines.say(f"`python bench/warm_start.py --repeat {args.repeat}"
              + (f" --old {args.old}" if args.old else "") + f"`, {results.machine_line(m)}; "
              f"load {m['load_average']}.")
    lines.say()
    lines.say(f"The first {DOCUMENTS} documents of each corpus, the package installed with "
              "`pip install --no-deps --target` and run as its console script; fresh "
              f"processes, alternating, {args.repeat} timed runs each:")
    lines.say()
    lines.say("| corpus | KB of JSONL | tree | wall s (median) | wall s (smallest) | "
              "in the process (median) |")
    lines.say("|---|---:|---|---:|---:|---:|")
    rows = []
    for corpus, _ in docs:
        for name, _ in targets:
            w = walls[(corpus, name)]
            t = inside[(corpus, name)]
            rows.append({"corpus": corpus, "bytes": sizes[corpus], "tree": name,
                         "wall_median_s": statistics.median(w), "wall_min_s": min(w),
                         "inside_median_s": statistics.median(t), "walls": w})
            lines.say(f"| {corpus} | {sizes[corpus] / 1e3:.0f} | {name} | "
                      f"{statistics.median(w):.3f} | {min(w):.3f} | "
                      f"{statistics.median(t):.3f} |")
    if not args.no_save:
        results.save("warm-start", "\n".join(lines),
                     {"machine": m, "repeat": args.repeat, "old": args.old, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
