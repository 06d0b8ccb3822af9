"""Removals you can trust: what each selection removes, judged by exact Jaccard.

    python bench/removals.py [--corpora licences,changelogs,short] [--repeat 3]

For every corpus (char 5-grams, ``--normalize none``, 128 hashes, threshold
0.8), side by side in one run:

* ``gpu-dedup run`` with ``--cluster greedy`` (the default) and
  ``--cluster components``, each as its own process, alternating, ``--repeat``
  times (median seconds, whole process);
* rensa's ``RMinHashDeduplicator`` (LSH, its default bands), fed the same
  shingles through ``add_pairs`` in input order, its shingling counted in its
  time: a document is removed when rensa finds it a duplicate of one it has
  added.

And for each, against the exact truth (``gpu_dedup.truth``):

* **justified**: removed documents whose named kept document
  (``duplicate_of``) is at exact Jaccard >= 0.8 (rensa names none: its column
  is the share with any kept document at >= 0.8, which is what "supported"
  measures for every tool);
* **supported**: removed documents with any kept document at >= 0.8;
* **residual**: kept documents that still have another kept document at
  >= 0.8;
* **again**: what a second ``gpu-dedup run`` over the first run's ``data/``
  removes (idempotence).

``--splits 21x6`` adds greedy runs with other LSH splits (bands x rows), to
measure what favouring recall costs and gives.

The corpora: ``licences``, every paragraph of ``/usr/share/doc/*/copyright``
(licence texts and notices, which chain); ``changelogs``, entries of
``changelog.Debian.gz``; ``short``, the million short documents of
``bench/corpora.debian_short``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import pyarrow.parquet as pq

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import corpora  # noqa: E402
import results  # noqa: E402

ARGS = ["--shingle", "char", "--ngram", "5", "--normalize", "none", "--num-perm", "128",
        "--threshold", "0.8"]
THRESHOLD = 0.8


def corpus(name: str):
    if name == "licences":
        return corpora.debian_paragraphs()
    if name == "changelogs":
        return corpora.debian_changelogs(60000)
    if name == "short":
        return corpora.debian_short(1_000_000)
    raise SystemExit(f"unknown corpus {name!r}")


def gpu_dedup_run(path: str, out: str, mode: str, extra=()) -> float:
    """Seconds of one ``gpu-dedup run`` process."""
    cmd = [sys.executable, "-m", "gpu_dedup.cli", "run", path, "-o", out, "--overwrite",
           "--cluster", mode, "--no-html", *ARGS, *extra]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if p.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stderr}")
    return dt


def selection(out: str) -> tuple[np.ndarray, np.ndarray]:
    """(kept, duplicate_of as input indices) from clusters.parquet."""
    t = pq.read_table(os.path.join(out, "clusters.parquet"))
    ids = t.column("id").to_pylist()
    index = {x: i for i, x in enumerate(ids)}
    kept = np.asarray(t.column("kept").to_numpy(zero_copy_only=False), dtype=bool)
    dup = np.array([-1 if d is None else index[d] for d in t.column("duplicate_of").to_pylist()],
                   dtype=np.int64)
    return kept, dup


def again(out: str, tmp: str, mode: str, extra=()) -> int:
    """Documents a second run over ``out/data/`` with the same options removes."""
    data = os.path.join(out, "data")
    files = [os.path.join(data, f) for f in sorted(os.listdir(data))]
    out2 = os.path.join(tmp, f"again-{mode}")
    cmd = [sys.executable, "-m", "gpu_dedup.cli", "run", *files, "-o", out2, "--overwrite",
           "--cluster", mode, "--no-html", *ARGS, *extra]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stderr}")
    with open(os.path.join(out2, "report.json")) as f:
        return int(json.load(f)["documents"]["removed"])


def run_rensa(texts) -> tuple[np.ndarray, float]:
    """Kept mask and seconds of rensa's deduplicator (``peers.run_rensa_dedup``),
    the Arrow texts' conversion to Python strings and their shingling included."""
    from peers import char_shingles, run_rensa_dedup
    t0 = time.perf_counter()
    shingles = [char_shingles(t, 5) for t in texts.to_pylist()]
    kept, _, _ = run_rensa_dedup(shingles, 128, THRESHOLD, 42)
    return kept, time.perf_counter() - t0


def measure(name: str, repeat: int, skip_rensa: bool, splits=()) -> list[dict]:
    from gpu_dedup import truth
    spec = corpus(name)
    texts = corpora.read_texts(spec.path)
    print(f"{name}: {len(texts):,} documents ({spec.description})", flush=True)
    t0 = time.perf_counter()
    exact = truth.exact_truth(texts, "char", 5, "none", THRESHOLD)
    off, vals = truth.shingle_sets(texts, "char", 5, "none")
    print(f"  truth: {exact.pair_a.size:,} pairs of different texts at >= {THRESHOLD} "
          f"({time.perf_counter() - t0:.1f} s)", flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="removals-") as tmp:
        outs = {m: os.path.join(tmp, m) for m in ("greedy", "components")}
        gpu_dedup_run(spec.path, outs["greedy"], "greedy")          # warm the caches
        secs = {m: [] for m in outs}
        for _ in range(repeat):
            for m in outs:
                secs[m].append(gpu_dedup_run(spec.path, outs[m], m))
        for m, out in outs.items():
            kept, dup = selection(out)
            q = exact.removal_quality(kept, dup, off, vals)
            rows.append({"corpus": name, "documents": len(texts), "tool": f"gpu_dedup {m}",
                         **q, "seconds": statistics.median(secs[m]), "runs": secs[m],
                         "again": again(out, tmp, m)})
        for b, r in splits:                  # recall-leaning LSH splits, greedy
            out = os.path.join(tmp, f"b{b}r{r}")
            split = ["--bands", str(b), "--rows", str(r)]
            secs = [gpu_dedup_run(spec.path, out, "greedy", split) for _ in range(repeat)]
            kept, dup = selection(out)
            q = exact.removal_quality(kept, dup, off, vals)
            rows.append({"corpus": name, "documents": len(texts),
                         "tool": f"gpu_dedup greedy {b}x{r}", **q,
                         "seconds": statistics.median(secs), "runs": secs,
                         "again": again(out, tmp, "greedy", split)})
    if not skip_rensa:
        kept, dt = run_rensa(texts)
        q = exact.removal_quality(kept, np.full(len(texts), -1), off, vals)
        q["justified"], q["justified_share"] = None, None
        rows.append({"corpus": name, "documents": len(texts),
                     "tool": "rensa RMinHashDeduplicator", **q, "seconds": dt, "runs": [dt],
                     "again": None})
    g = next(r for r in rows if r["tool"] == "gpu_dedup greedy")
    c = next(r for r in rows if r["tool"] == "gpu_dedup components")
    g["ratio_to_components"] = g["seconds"] / c["seconds"]
    for r in rows:
        print("  " + line(r), flush=True)
    return rows


def pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.2f}%"


def line(r: dict) -> str:
    return (f"{r['tool']:<28} removed {r['removed']:>9,}  justified {pct(r['justified_share']):>8}"
            f"  supported {pct(r['supported_share']):>8}  residual {pct(r['residual_share']):>7}"
            f"  {r['seconds']:7.2f} s  again {r['again'] if r['again'] is not None else 'n/a'}")


def markdown(rows: list[dict], repeat: int, machine: dict) -> str:
    out = [f"Machine: {results.machine_line(machine)}", "",
           "`python bench/removals.py` (char 5-grams, `--normalize none`, 128 hashes, "
           f"threshold 0.8; gpu_dedup seconds are the median of {repeat} whole-process runs, "
           "alternating greedy and components; rensa's include its shingling).", "",
           "| corpus | documents | tool | removed | justified | supported | residual | seconds "
           "| second run removes |",
           "|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['corpus']} | {r['documents']:,} | {r['tool']} | {r['removed']:,} | "
                   f"{pct(r['justified_share'])} | {pct(r['supported_share'])} | "
                   f"{pct(r['residual_share'])} | {r['seconds']:.2f} | "
                   f"{r['again'] if r['again'] is not None else 'n/a'} |")
    out.append("")
    for r in rows:
        if "ratio_to_components" in r:
            out.append(f"* {r['corpus']}: greedy takes {r['ratio_to_components']:.3f}x the time "
                       f"of components (runs: greedy "
                       f"{', '.join(f'{x:.2f}' for x in r['runs'])} s).")
    out += ["", "justified: removed documents whose `duplicate_of` is at exact Jaccard >= 0.8 "
            "(rensa names no kept document: n/a). supported: removed documents with any kept "
            "document at >= 0.8. residual: kept documents with another kept document at "
            ">= 0.8. `greedy BxR`: greedy with that LSH split instead of the default "
            "(same `--bucket-limit`), to show what favouring recall costs and gives."]
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpora", default="licences,changelogs,short")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-rensa", action="store_true")
    ap.add_argument("--splits", default="",
                    help="extra LSH splits for greedy, e.g. 21x6,25x5 (bands x rows)")
    ap.add_argument("--no-save", action="store_true", help="print only; leave RESULTS.md")
    a = ap.parse_args(argv)
    rows = []
    for name in a.corpora.split(","):
        splits = [tuple(int(x) for x in s.split("x")) for s in a.splits.split(",") if s]
        rows += measure(name.strip(), a.repeat, a.skip_rensa, splits)
    machine = results.machine()
    md = markdown(rows, a.repeat, machine)
    print(md)
    if not a.no_save:
        results.save("removals", md, {"rows": rows, "machine": machine, "repeat": a.repeat})
    return 0


if __name__ == "__main__":
    sys.exit(main())
