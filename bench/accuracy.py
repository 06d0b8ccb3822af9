"""Accuracy against exact ground truth on real text, at full size.

    python bench/accuracy.py

Runs ``gpu-dedup run`` with char 5-grams, ``--normalize none``, 128 hashes
and threshold 0.8 on every Debian licence file (one document per file), on
every paragraph of them, and on the million short documents of the speed
benchmark, and scores the output against the exact duplicate graph
(``gpu_dedup.truth``, an exact set-similarity join):

* recall: the share of pairs of *different* texts with exact Jaccard >= 0.8
  that end up in one cluster (target: at least 0.95), with the misses broken
  down by similarity;
* the share of reported edges whose exact Jaccard is >= 0.75 (target: at
  least 0.98) and >= 0.8;
* documents removed beside what the exact graph removes.

Saves a section of bench/RESULTS.md; exits 1 when a target is missed.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import corpora  # noqa: E402
import results  # noqa: E402
import run as harness  # noqa: E402

CORPORA = ["debian-files", "debian-paragraphs", "debian-short:1000000"]
BUCKETS = [0.8, 0.85, 0.9, 0.95, 1.0000001]


def evaluate(spec, out_root: str, timeout: float) -> dict:
    scorer = harness.Scorer(spec)
    ids = harness.read_ids(spec.path)
    out = os.path.join(out_root, os.path.basename(spec.path))
    cmd = harness.tool_command("gpu_dedup", spec, out)
    r = harness.run_process(cmd, timeout)
    if r["rc"] != 0 or r["timed_out"]:
        return {"corpus": spec.name, "error": r["stderr"] or "timed out"}
    labels, a, b, report = harness.read_gpu_dedup(out, ids)
    shutil.rmtree(out, ignore_errors=True)
    row = {"corpus": spec.name, "docs": spec.docs, "seconds": r["seconds"],
           "bands": report["parameters"]["bands"], "rows": report["parameters"]["rows"]}
    row.update(scorer.score(labels, a, b))
    sim = scorer.similarity(a, b) if a.size else np.zeros(0)
    row["edges"] = int(a.size)
    row["edges_ge_075"] = float((sim >= 0.75).mean()) if sim.size else 1.0
    row["edges_ge_t"] = float((sim >= spec.threshold).mean()) if sim.size else 1.0
    t = scorer.truth
    same = labels[t.pair_a] == labels[t.pair_b]
    by = []
    for lo, hi in zip(BUCKETS[:-1], BUCKETS[1:]):
        sel = (t.similarity >= lo) & (t.similarity < hi)
        by.append({"from": lo, "to": min(hi, 1.0), "pairs": int(sel.sum()),
                   "recall": float(same[sel].mean()) if sel.any() else None})
    row["recall_by_similarity"] = by
    row["ok"] = row["recall"] >= 0.95 and row["edges_ge_075"] >= 0.98
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpora", nargs="+", default=CORPORA)
    ap.add_argument("--timeout", type=float, default=1800.0)
    ap.add_argument("--data", default=None)
    ap.add_argument("--no-save", action="store_true")
    args = ap.parse_args(argv)
    if not corpora.debian_files_available():
        print(f"no files match {corpora.DEBIAN_GLOB}: nothing to measure")
        return 0
    machine = results.machine()
    print(f"machine: {results.machine_line(machine)}", flush=True)
    out_root = tempfile.mkdtemp(prefix="gpu-dedup-accuracy-")
    t0 = time.perf_counter()
    rows, specs = [], []
    try:
        # warm Numba's cache once, on a small corpus
        warm = corpora.debian_short(2000, data_dir=args.data)
        harness.run_process(harness.tool_command("gpu_dedup", warm,
                                                 os.path.join(out_root, "warm")), 600)
        for name in args.corpora:
            print(f"corpus {name}", flush=True)
            spec = harness.build_corpus(name, args.data)
            specs.append(spec)
            row = evaluate(spec, out_root, args.timeout)
            rows.append(row)
            if "error" in row:
                print(f"  error: {row['error']}", flush=True)
                continue
            print(f"  recall {row['recall']:.4f} of {row['truth_pairs']:,} pairs; "
                  f"{row['edges_ge_075']:.4f} of {row['edges']:,} edges >= 0.75; removed "
                  f"{row['removed']:,} (exact graph {row['exact_removed']:,})", flush=True)
    finally:
        shutil.rmtree(out_root, ignore_errors=True)
    elapsed = time.perf_counter() - t0
    lines = ["| corpus | documents | bands×rows | pairs J>=0.8 (different texts) | recall | "
             "edges | edges J>=0.75 | edges J>=0.8 | removed (exact) | targets met |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['corpus']} | error: {r['error'][:60]} |" + " |" * 8)
            continue
        lines.append(f"| {r['corpus']} | {r['docs']:,} | {r['bands']}×{r['rows']} | "
                     f"{r['truth_pairs']:,} | {r['recall']:.4f} | {r['edges']:,} | "
                     f"{r['edges_ge_075']:.4f} | {r['edges_ge_t']:.4f} | {r['removed']:,} "
                     f"({r['exact_removed']:,}) | {'yes' if r['ok'] else 'NO'} |")
    by_lines = ["| corpus | " + " | ".join(f"[{lo:g}, {min(hi, 1.0):g}{']' if hi > 1 else ')'}"
                                            for lo, hi in zip(BUCKETS[:-1], BUCKETS[1:]))
                + " |", "|---|" + "---|" * (len(BUCKETS) - 1)]
    for r in rows:
        if "error" in r:
            continue
        by_lines.append(f"| {r['corpus']} | " + " | ".join(
            "–" if b["recall"] is None else f"{b['recall']:.4f} of {b['pairs']:,}"
            for b in r["recall_by_similarity"]) + " |")
    md = "\n".join(lines)
    print()
    print(md)
    print("\n".join(by_lines))
    if not args.no_save:
        body = [f"Measured {machine['date']} with `python bench/accuracy.py` "
                f"({elapsed / 60:.1f} minutes in all).", "",
                f"Machine: {results.machine_line(machine)}.", "",
                "`gpu-dedup run --shingle char --ngram 5 --normalize none --num-perm 128 "
                "--threshold 0.8`; targets: recall >= 0.95 and edges with J >= 0.75 >= 0.98.",
                "", "Corpora:", "",
                harness.corpus_lines([s.to_dict() for s in specs],
                                     {r["corpus"]: r for r in rows if "truth_pairs" in r}),
                "", md, "",
                "Recall by exact similarity of the pair:", "", "\n".join(by_lines), ""]
        results.save("accuracy", "\n".join(body), {"machine": machine, "rows": rows,
                                                   "seconds": elapsed})
    return 0 if all(r.get("ok") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
