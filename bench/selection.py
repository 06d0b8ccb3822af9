"""Greedy selection: the sequential passes (the CPU's) beside the parallel
rounds (the GPU's algorithm, here on its CPU kernels), on the same buckets
and scores, in one run.

    python bench/selection.py [--corpora short,entries] [--repeat 3] [--limits 32]

For each corpus (char 5-grams, ``--normalize none``, 128 hashes, threshold
0.8) the engine runs once; at its selection step both algorithms take the
same buckets and the same scoring function, alternating, ``--repeat`` times.
It prints the median seconds of each, the rounds or passes, the pairs
scored, and whether every output (kept, ``duplicate_of``, similarities, the
pairs written, the comparisons skipped) is the same. On a GPU the rounds run
as CUDA kernels (``bench/gpu_check.py``); the CPU's default stays the
sequential passes, which this shows to be faster on a CPU.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import corpora  # noqa: E402
import results  # noqa: E402

CORPORA = {"short": lambda: corpora.debian_short(1_000_000),
           "entries": lambda: corpora.debian_entries()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpora", default="short,entries")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--limits", default="32", help="--bucket-limit values, comma-separated")
    ap.add_argument("--no-save", action="store_true", help="print only")
    a = ap.parse_args(argv)
    from gpu_dedup import Config, deduplicate
    from gpu_dedup.backend import CpuBackend
    from gpu_dedup.kernels import greedy as K
    from gpu_dedup.stages.select import greedy_rounds, greedy_select

    lines = results.Lines()
    say = lines.say
    say(f"Machine: {results.machine_line(results.machine())}.")
    say()
    say("| corpus | --bucket-limit | sequential passes: s (median) | passes | parallel rounds: "
        "s (median) | rounds | pairs scored (passes / rounds) | removed | same outputs |")
    say("|---|---|---|---|---|---|---|---|---|")
    data = []
    for name in a.corpora.split(","):
        spec = CORPORA[name]()
        with open(spec.path) as f:
            texts = [json.loads(line)["text"] for line in f]
        for limit in [int(x) for x in a.limits.split(",")]:
            row = {}

            class Both(CpuBackend):
                def select(self, *args, **kw):
                    times = {"passes": [], "rounds": []}
                    for _ in range(a.repeat):
                        t = time.perf_counter()
                        s = greedy_select(*args, **kw)
                        times["passes"].append(time.perf_counter() - t)
                        t = time.perf_counter()
                        r = greedy_rounds(np, K, *args, **kw)
                        times["rounds"].append(time.perf_counter() - t)
                    row.update(seq=statistics.median(times["passes"]), passes=s.rounds,
                               par=statistics.median(times["rounds"]), rounds=r.rounds,
                               scored=(s.scored, r.scored),
                               removed=int((~s.kept).sum()), same=s.same_as(r))
                    return s
            cfg = Config(shingle="char", ngram=5, normalize="none", num_perm=128,
                         threshold=0.8, bucket_limit=limit)
            deduplicate(texts[:2000], cfg, Both())              # compile, untimed
            deduplicate(texts, cfg, Both())
            say(f"| {spec.name} | {limit} | {row['seq']:.2f} | {row['passes']} | "
                f"{row['par']:.2f} | {row['rounds']} | {row['scored'][0]:,} / "
                f"{row['scored'][1]:,} | {row['removed']:,} | {'yes' if row['same'] else 'NO'} |")
            data.append({"corpus": spec.name, "limit": limit, **row})
    say()
    say("The rounds score fewer pairs (nothing ahead against members that are then "
        "removed) and decide in parallel, but each round rescans the documents still held "
        "back: on two CPU cores the sequential passes are faster, which is why they stay "
        "the CPU's path; the rounds are for a device.")
    if not a.no_save:
        results.save("selection", "\n".join(lines), {"rows": data})
    return 0 if all(r["same"] for r in data) else 1


if __name__ == "__main__":
    sys.exit(main())
