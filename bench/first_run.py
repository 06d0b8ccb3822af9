"""The first run after an install, and a warm start.

    python bench/first_run.py [--repeat 3] [--no-save]

First run: ``gpu-dedup demo`` with an empty Numba cache (``NUMBA_CACHE_DIR``
pointing at a new folder), which is what a fresh install has: every kernel
the demo's options need is compiled once. Wall seconds of the whole
process, each run with its own empty cache; the median is reported.

Warm start: ``gpu-dedup run`` on 100 short documents once the cache holds
the kernels, and importing the CLI alone (medians of 5, as
``bench/run.py --speed`` measures them).

Interpreted or compiled: a run of that little text runs its kernels
interpreted (``kernels/jit.py``), with no Numba loaded. The same ``gpu-dedup
run`` on the first 100 to 3,000 real documents of ``bench/corpora.py``
(``debian_entries``) and on 1,000 to 16,000 short lines with heavy
near-duplication, in fresh processes, each way (interpreted forced past the
size where a run would compile; compiled forced below it), alternating,
medians of ``--repeat``: where the two cross is where a run should switch.
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
import corpora  # noqa: E402
import results  # noqa: E402
from run import gpu_dedup_command, startup  # noqa: E402

#: A run forced to one way: ``python -c MODE_RUN way input output``.
MODE_RUN = """
import contextlib, sys
from gpu_dedup import shell
from gpu_dedup.cli import main
from gpu_dedup.kernels.jit import compiling
way, src, out = sys.argv[1:4]
if way == "interpreted":
    shell.interpreted_kernels = lambda *a: True
with compiling() if way == "compiled" else contextlib.nullcontext():
    main(["run", src, "-o", out, "--overwrite", "-q"], standalone_mode=False)
"""


def heavy_lines(n: int, seed: int = 3) -> list[str]:
    """Short lines with heavy near-duplication: ``n`` lines drawn from 200
    base lines of eight words of an eight-word vocabulary, each with one of
    31 suffixes (the most candidate pairs per byte a small run meets)."""
    import random
    rng = random.Random(seed)
    vocab = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"]
    base = [" ".join(rng.choice(vocab) for _ in range(8)) for _ in range(200)]
    return [f"{rng.choice(base)} v{rng.randint(0, 30)}" for _ in range(n)]


def mode_sweep(sizes=(100, 300, 1000, 3000), repeat: int = 3, kind="real") -> list[dict]:
    """Wall seconds of a run of the first ``n`` real documents (``kind``
    ``real``), ``n`` heavily duplicated lines (``heavy``, :func:`heavy_lines`)
    or ``n`` long documents (``long``, every 50th of ``long_documents``),
    interpreted and compiled, in fresh processes (medians of ``repeat``),
    and the way a run chooses (``gpu_dedup.engine.plan.interpreted_kernels``
    with the input's documents counted)."""
    import json
    from types import SimpleNamespace
    from gpu_dedup.engine.plan import interpreted_kernels
    from gpu_dedup.io.plan import input_records
    in_process, cpu = SimpleNamespace(name="none"), SimpleNamespace(name="cpu")
    if kind == "heavy":
        texts = heavy_lines(max(sizes))
    elif kind == "long":
        texts = [json.loads(line)["text"]
                 for line in open(corpora.long_documents().path)][::50]
    else:
        texts = [json.loads(line)["text"] for line in open(corpora.debian_entries().path)]
    rows = []
    tmp = tempfile.mkdtemp(prefix="gpu-dedup-modes-")
    try:
        for n in sizes:
            src = os.path.join(tmp, f"docs{n}.jsonl")
            corpora.write_jsonl(src, texts[:n])
            secs = {"interpreted": [], "compiled": []}
            for way in secs:                              # once untimed: the cache
                subprocess.run([sys.executable, "-c", MODE_RUN, way, src,
                                os.path.join(tmp, "out")], check=True, timeout=600)
            for _ in range(repeat):
                for way in secs:
                    t0 = time.perf_counter()
                    subprocess.run([sys.executable, "-c", MODE_RUN, way, src,
                                    os.path.join(tmp, "out")], check=True, timeout=600)
                    secs[way].append(time.perf_counter() - t0)
            size = os.path.getsize(src)
            chosen = interpreted_kernels(size, in_process, cpu, input_records(src))
            row = {"corpus": kind, "documents": n, "bytes": size,
                   "chosen": "interpreted" if chosen else "compiled",
                   **{f"{w}_s": statistics.median(v) for w, v in secs.items()}}
            print(f"{kind} {n} documents ({row['bytes'] / 1024:.0f} KiB): interpreted "
                  f"{row['interpreted_s']:.2f} s, compiled {row['compiled_s']:.2f} s, "
                  f"a run chooses {row['chosen']}", flush=True)
            rows.append(row)
        return rows
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


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


def record(path: str) -> int:
    """Write ``kernels/ahead_list.py``: the kernels that ``gpu-dedup demo``
    and a default run of its corpus call from Python, with the Numba types
    of their arguments, in the order of their first call (what a first
    run's helper compiles ahead, ``kernels/ahead.py``). Runs compiled, in
    this process. Parquet inputs and out-of-core runs pass some kernels
    read-only arrays: those are compiled by the run itself."""
    from gpu_dedup.cli import main as cli
    from gpu_dedup.kernels import ahead, jit
    seen: dict = {}

    def on_call(k, args):
        seen.setdefault((k.name, ahead.types_text(args)), None)

    tmp = tempfile.mkdtemp(prefix="gpu-dedup-record-")
    try:
        jit.on_call = on_call
        with jit.compiling():
            demo = os.path.join(tmp, "demo")
            cli(["demo", "--quiet", "--output", demo], standalone_mode=False)
            cli(["run", os.path.join(demo, "corpus.jsonl"), "-o", os.path.join(tmp, "out"),
                 "--quiet"], standalone_mode=False)
    finally:
        jit.on_call = None
        shutil.rmtree(tmp, ignore_errors=True)
    lines = ['"""What a default run calls from Python, with the Numba types of the',
             "arguments, in the order of the first call (see :mod:`.ahead`). Made by",
             '``python bench/first_run.py --record``; edit by running that."""',
             "SIGNATURES: tuple[tuple[str, str], ...] = ("]
    for name, text in seen:
        lines.append(f"    ({name!r},")
        lines.append(f"     {text!r}),")
    lines.append(")")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{len(seen)} signatures of {len({n for n, _ in seen})} kernels: {path}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-save", action="store_true")
    ap.add_argument("--record", action="store_true",
                    help="write kernels/ahead_list.py (what a first run compiles ahead) and stop")
    args = ap.parse_args(argv)
    if args.record:
        return record(os.path.join(os.path.dirname(HERE), "kernels", "ahead_list.py"))
    m = results.machine()
    first = first_runs(args.repeat)
    warm = startup()
    sweep = (mode_sweep(repeat=args.repeat)
             + mode_sweep((100, 300), repeat=args.repeat, kind="long")
             + mode_sweep((1000, 4000, 16000), repeat=args.repeat, kind="heavy"))
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
    lines.say()
    lines.say("A run each way (fresh processes, alternating, medians of "
              f"{args.repeat}) of the first real documents of `debian_entries`, of long "
              "documents (every 50th of `long_documents`) and of short lines with heavy "
              "near-duplication (`heavy_lines`), and the way a run chooses:")
    lines.say()
    lines.say("| corpus | documents | KiB of JSONL | interpreted (s) | compiled (s) | a run "
              "chooses |")
    lines.say("|---|---:|---:|---:|---:|---|")
    for r in sweep:
        lines.say(f"| {r['corpus']} | {r['documents']:,} | {r['bytes'] / 1024:.0f} | "
                  f"{r['interpreted_s']:.2f} | {r['compiled_s']:.2f} | {r['chosen']} |")
    if not args.no_save:
        results.save("first-run", "\n".join(lines),
                     {"machine": m, "first_run_s": first, "first_run_median_s": med, **warm,
                      "modes": sweep})
    return 0


if __name__ == "__main__":
    sys.exit(main())
