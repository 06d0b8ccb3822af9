"""Where the host time of a GPU run goes: one end-to-end run of
``deduplicate`` on the GPU backend under cProfile, after a first run of the
same corpus that compiles the kernels it needs, printing the stage seconds and the functions that take
the most time of their own and in total.

    python bench/gpu_profile.py [--docs 1000000] [--doc-len 1024] [--top 40]

The corpus is ``gpu_check.host_corpus`` (random text with near-copies).
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from gpu_check import host_corpus  # noqa: E402

from gpu_dedup.config import Config  # noqa: E402
from gpu_dedup.pipeline import deduplicate  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--docs", type=int, default=1_000_000)
    p.add_argument("--doc-len", type=int, default=1024)
    p.add_argument("--top", type=int, default=40)
    p.add_argument("--cpu", action="store_true", help="profile the CPU backend instead")
    args = p.parse_args(argv)
    if args.cpu:
        from gpu_dedup.backend import CpuBackend as make
    else:
        from gpu_dedup.backend_gpu import GpuBackend as make
    cfg = Config(num_perm=128, threshold=0.8, normalize=())
    arr = host_corpus(args.docs, args.doc_len)
    t = time.perf_counter()
    deduplicate(arr, cfg, make())       # compiles what this size needs
    print(f"first run (compiling): {time.perf_counter() - t:.2f} s")
    be = make()
    prof = cProfile.Profile()
    t = time.perf_counter()
    prof.enable()
    res = deduplicate(arr, cfg, be)
    prof.disable()
    secs = time.perf_counter() - t
    print(f"{args.docs:,} docs of {args.doc_len} B on {res.backend}: {secs:.2f} s, "
          f"{args.docs / secs:,.0f} docs/s; removed {res.stats['removed']:,}; selection on "
          f"{res.stats.get('selection_ran_on')}")
    print("stages: " + ", ".join(f"{k} {v:.2f}s" for k, v in res.seconds.items()))
    for key in ("tottime", "cumulative"):
        print(f"--- by {key}")
        pstats.Stats(prof).sort_stats(key).print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
