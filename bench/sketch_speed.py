"""Signature kernels alone, in MB of text a second a core.

    python bench/sketch_speed.py                 # the speed corpora (bench/data), and
                                                 # two multilingual ones
    python bench/sketch_speed.py FILE.jsonl ...

Each kernel runs over the Arrow buffers of a whole JSONL corpus in one
Numba thread (char 5-grams, 128 values, 32 bits): ``shingle_sets`` (base
hashes, sorted and made distinct: what verification reads),
``oph_minhash`` (the default sketch) and ``minhash`` (the classic one).
Medians of ``--repeat`` runs after one untimed run.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import corpora  # noqa: E402


def buffers(path: str):
    import pyarrow as pa
    import pyarrow.json as pj
    t = pj.read_json(path, parse_options=pj.ParseOptions(
        explicit_schema=pa.schema([("text", pa.large_string())]),
        unexpected_field_behavior="ignore")).column("text").combine_chunks()
    off = np.frombuffer(t.buffers()[1], np.int64)[:len(t) + 1].copy()
    return off, np.frombuffer(t.buffers()[2], np.uint8)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    from gpu_dedup.kernels import cpu, threads
    from gpu_dedup.stages.signatures import hash_params
    threads.set_threads(1)
    paths = args.paths or [corpora.debian_short(1_000_000).path, corpora.debian_entries().path,
                           corpora.long_documents().path, corpora.locale_strings().path,
                           corpora.translated_man_pages().path]
    a, b = hash_params(128, 42)
    for path in paths:
        off, data = buffers(path)
        n = off.size - 1
        docs = np.arange(n, dtype=np.int64)
        nbytes = int(off[-1] - off[0])
        out = np.empty((n, 128), np.uint32)
        cnt = np.empty(n, np.int64)
        kernels = {
            "shingle_sets": lambda: cpu.shingle_sets(off, data, docs, False, 5),
            "oph_minhash": lambda: cpu.oph_minhash(off, data, docs, False, 5, a[0], b[0], 32,
                                                   out, cnt),
            "minhash": lambda: cpu.minhash(off, data, docs, False, 5, a, b, 32, out, cnt)}
        for name, fn in kernels.items():
            fn()
            secs = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                fn()
                secs.append(time.perf_counter() - t0)
            s = statistics.median(secs)
            print(f"{os.path.basename(path)}: {n:,} documents, {nbytes / n:.0f} B mean; "
                  f"{name}: {s:.3f} s, {nbytes / s / 1e6:.0f} MB/s a core", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
