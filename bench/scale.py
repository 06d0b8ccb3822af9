"""Out-of-core scaling: documents per second and peak memory under a budget.

    python bench/scale.py                       # 1M, 3M and 10M documents, 4 GiB
    python bench/scale.py --sizes 100000,300000 --budget 1GiB --skip-real --skip-resume
    python bench/scale.py --heavy --skip-scale --skip-real --skip-resume   # heavy duplication

Three measurements, each a fresh process started by this small one (so its
peak resident memory is its own, read from ``wait4``) running
:func:`gpu_dedup.pipeline.run` with the default configuration (char
5-grams after NFKC, lower-casing and whitespace folding, 128 hashes,
threshold 0.8):

1. **Scale**: generated corpora of about 500-byte documents
   (``bench/generate.py``: Zipfian words, near-duplicate clusters, exact
   copies) of each size, with the budget ``--budget``; the table gives the
   seconds of the whole process, documents per second, the peak resident
   memory of the process tree and its ratio to the budget, and the ratio of
   the largest size's time to the smallest's.
2. **Real short documents** (``--real``, default the million-document
   ``debian-short`` corpus of ``bench/corpora.py``) under ``--real-budget``
   (1 GiB): peak memory, and clusters.parquet and pairs.parquet compared byte
   for byte with the in-memory ``gpu-dedup run`` of the same file.
3. **Resume**: the same run killed with SIGKILL halfway through (half the
   seconds of a full run) and started again: the second start's seconds
   beside the full run's, and the outputs compared byte for byte.

4. **Heavy duplication** (``--heavy``): generated short documents in
   clusters of Pareto-distributed size up to 100,000 near and exact copies
   (:data:`HEAVY`), at ``--heavy-sizes`` under ``--heavy-budget``.

Figures are printed as Markdown tables and saved as the ``out-of-core``
section of bench/RESULTS.md (the heavy-duplication runs as the
``heavy-duplication`` section), through ``bench/results.py``.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.environ.get("GPU_DEDUP_BENCH_DATA", os.path.join(HERE, "data"))

CHILD = r"""
import json, sys
from gpu_dedup.config import Config
from gpu_dedup.pipeline import run
a = json.loads(sys.argv[1])
if __name__ == "__main__":
    r = run(a["inputs"], a["output"], Config(), memory_limit=a["budget"],
                   work_dir=a.get("work"), overwrite=True, scheduler=a.get("scheduler", "none"),
                   workers=a.get("workers"))
    keep = ("documents", "edges", "clusters", "seconds", "memory", "work", "scheduler")
    print("REPORT " + json.dumps({k: r[k] for k in keep}))
"""


def gib(n: float) -> str:
    return f"{n / 2 ** 30:.2f} GiB"


def measured(cmd: list[str], kill_after: float | None = None) -> dict:
    """Run ``cmd``; its wall seconds, peak RSS (``wait4``), exit status and
    the report line it printed. ``kill_after``: SIGKILL it after that many
    seconds. This process imports nothing large, so the child's high-water
    mark is its own."""
    import tempfile
    import threading
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True)
        lock = threading.Lock()
        state = {"reaped": False}

        def kill():
            with lock:
                if not state["reaped"]:
                    os.kill(proc.pid, signal.SIGKILL)

        timer = threading.Timer(kill_after, kill) if kill_after is not None else None
        if timer is not None:
            timer.start()
        _, status, usage = os.wait4(proc.pid, 0)
        with lock:
            state["reaped"] = True
        proc.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - t0
        if timer is not None:
            timer.cancel()
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    report = None
    for line in stdout.splitlines():
        if line.startswith("REPORT "):
            report = json.loads(line[len("REPORT "):])
    return {"seconds": seconds, "rc": proc.returncode, "report": report,
            "max_rss": usage.ru_maxrss * 1024, "stderr": stderr[-3000:]}


def staged_cmd(inputs, output, budget, work=None) -> list[str]:
    args = {"inputs": inputs, "output": output, "budget": budget, "work": work}
    return [sys.executable, "-c", CHILD, json.dumps(args)]


#: ``bench/generate.py`` options of the heavy-duplication corpus: three
#: originals in five get copies, their number Pareto(1.1)-distributed up to
#: 100,000 (a block of a million documents holds whole clusters).
HEAVY = ["--copies-share", "0.6", "--copies-alpha", "1.1", "--max-copies", "100000",
         "--batch", "1000000"]


def ensure_generated(n: int, mean_bytes: int, heavy: bool = False) -> str:
    os.makedirs(DATA, exist_ok=True)
    path = os.path.join(DATA, f"scale_{n}_b{mean_bytes}_s0{'_heavy' if heavy else ''}.jsonl")
    if os.path.exists(path):
        return path
    gen = os.path.join(HERE, "generate.py")
    tmp = path + ".part.jsonl"
    if os.path.exists(gen):
        subprocess.run([sys.executable, gen, "--docs", str(n), "--out", tmp,
                        "--mean-bytes", str(mean_bytes), "--quiet"] + (HEAVY if heavy else []),
                       check=True)
        truth = tmp[:-len(".jsonl")] + ".truth.parquet"
        if os.path.exists(truth):
            os.replace(truth, path[:-len(".jsonl")] + ".truth.parquet")
    else:                                    # a simple stand-in: random words, copies
        import numpy as np
        rng = np.random.default_rng(0)
        words = [f"w{i}" for i in range(20000)]
        with open(tmp, "w") as f:
            prev = ""
            for i in range(n):
                if i and rng.random() < 0.1:
                    text = prev
                else:
                    k = max(8, int(mean_bytes / 6))
                    text = " ".join(words[j] for j in rng.integers(0, 20000, size=k))
                f.write(json.dumps({"id": str(i), "text": text}) + "\n")
                prev = text
    os.replace(tmp, path)
    return path


def same_outputs(a: str, b: str) -> bool:
    for name in ("clusters.parquet", "pairs.parquet"):
        with open(os.path.join(a, name), "rb") as fa, open(os.path.join(b, name), "rb") as fb:
            if fa.read() != fb.read():
                return False
    return True


def peak_of(r: dict) -> int:
    """The larger of the run's own sampled peak of its process tree and the
    process's high-water mark from ``wait4``."""
    rep = r["report"] or {}
    sampled = rep.get("memory", {}).get("peak_rss_total_bytes", 0)
    return max(sampled, r["max_rss"])


def warm_up(out_root: str) -> None:
    """Fill Numba's on-disk cache so no timed run compiles."""
    src = os.path.join(out_root, "warm.jsonl")
    with open(src, "w") as f:
        for i in range(2000):
            f.write(json.dumps({"id": str(i), "text": f"warm up document {i % 700} " * 4}) + "\n")
    r = measured(staged_cmd([src], os.path.join(out_root, "warm-out"), "256MiB"))
    if r["rc"] != 0:
        sys.exit(f"warm-up run failed:\n{r['stderr']}")


def run_scale(args, out_root: str, heavy: bool = False) -> tuple[list, str]:
    sizes = args.heavy_sizes if heavy else args.sizes
    budget_spec = args.heavy_budget if heavy else args.budget
    mean_bytes = args.heavy_mean_bytes if heavy else args.mean_bytes
    rows = []
    for n in [int(x) for x in sizes.split(",")]:
        src = ensure_generated(n, mean_bytes, heavy)
        out = os.path.join(out_root, f"scale-{n}")
        r = measured(staged_cmd([src], out, budget_spec, os.path.join(out_root, "work")))
        if r["rc"] != 0:
            sys.exit(f"run of {n} documents failed:\n{r['stderr']}")
        rep = r["report"]
        budget = rep["memory"]["limit_bytes"]
        peak = peak_of(r)
        row = {"documents": n, "bytes": os.path.getsize(src), "seconds": r["seconds"],
               "docs_per_s": n / r["seconds"], "peak_rss": peak, "budget": budget,
               "stage_seconds": rep["seconds"], "stage_peaks": rep["memory"]["peak_rss_bytes"],
               "chunks": rep["work"]["chunks"], "units": rep["work"]["units"],
               "removed": rep["documents"]["removed"]}
        rows.append(row)
        print(f"{n:>12,} docs  {r['seconds']:9.1f} s  {row['docs_per_s']:9,.0f} docs/s  "
              f"peak {gib(peak)} ({peak / budget:.2f}x budget)", flush=True)
        shutil.rmtree(out, ignore_errors=True)
    lines = ["| documents | input | seconds | docs/s | peak RSS (tree) | peak / budget |",
             "|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        lines.append(f"| {row['documents']:,} | {row['bytes'] / 2 ** 30:.2f} GiB | "
                     f"{row['seconds']:.1f} | {row['docs_per_s']:,.0f} | {gib(row['peak_rss'])} | "
                     f"{row['peak_rss'] / row['budget']:.2f} |")
    if len(rows) > 1:
        ratio = rows[-1]["seconds"] / rows[0]["seconds"]
        size_ratio = rows[-1]["documents"] / rows[0]["documents"]
        lines.append("")
        lines.append(f"Time for {rows[-1]['documents']:,} documents / time for "
                     f"{rows[0]['documents']:,}: **{ratio:.2f}x** for {size_ratio:.0f}x the "
                     f"documents (budget {budget_spec}).")
    stage_names = [s for s in rows[0]["stage_seconds"] if s in rows[0]["stage_peaks"]] \
        if rows else []
    lines += ["", "Seconds and peak RSS per stage:", "",
              "| documents | " + " | ".join(stage_names) + " |",
              "|---:|" + "---:|" * len(stage_names)]
    for row in rows:
        cells = [f"{row['stage_seconds'].get(s, 0):.0f} s / "
                 f"{row['stage_peaks'].get(s, 0) / 2 ** 30:.2f} GiB" for s in stage_names]
        lines.append(f"| {row['documents']:,} | " + " | ".join(cells) + " |")
    return rows, "\n".join(lines)


def default_real() -> str | None:
    for name in sorted(os.listdir(DATA)) if os.path.isdir(DATA) else []:
        if name.startswith("debian_short_1000000") and name.endswith(".jsonl"):
            return os.path.join(DATA, name)
    return None


def run_real(args, out_root: str) -> tuple[dict, str]:
    src = args.real or default_real()
    if src is None:
        sys.path.insert(0, HERE)
        from corpora import build  # noqa: E402  (bench/corpora.py)
        src = build("debian-short", docs=1_000_000).path
    ref = os.path.join(out_root, "real-in-memory")
    cli = shutil.which("gpu-dedup", path=os.path.dirname(sys.executable)) or "gpu-dedup"
    r_mem = measured([cli, "run", src, "--output", ref, "--overwrite", "-q"])
    if r_mem["rc"] != 0:
        sys.exit(f"in-memory run failed:\n{r_mem['stderr']}")
    out = os.path.join(out_root, "real-staged")
    r = measured(staged_cmd([src], out, args.real_budget, os.path.join(out_root, "work")))
    if r["rc"] != 0:
        sys.exit(f"staged run failed:\n{r['stderr']}")
    budget = r["report"]["memory"]["limit_bytes"]
    peak = peak_of(r)
    same = same_outputs(ref, out)
    docs = r["report"]["documents"]["in"]
    res = {"source": src, "documents": docs, "budget": budget, "seconds": r["seconds"],
           "peak_rss": peak, "identical": same, "in_memory_seconds": r_mem["seconds"],
           "in_memory_peak_rss": r_mem["max_rss"],
           "stage_peaks": r["report"]["memory"]["peak_rss_bytes"]}
    print(f"real: {docs:,} docs under {args.real_budget}: {r['seconds']:.1f} s, peak "
          f"{gib(peak)} ({peak / budget:.2f}x); identical to in-memory: {same}", flush=True)
    md = ("| corpus | documents | budget | peak RSS (tree) | peak / budget | seconds | "
          "in-memory run: seconds, peak RSS | clusters & pairs identical |\n"
          "|---|---:|---:|---:|---:|---:|---:|---|\n"
          f"| {os.path.basename(src)} | {docs:,} | {args.real_budget} | {gib(peak)} | "
          f"{peak / budget:.2f} | {r['seconds']:.1f} | {r_mem['seconds']:.1f} s, "
          f"{gib(r_mem['max_rss'])} | {'yes' if same else 'NO'} |")
    return res, md


def run_resume(args, out_root: str, src: str | None) -> tuple[dict, str]:
    src = src or args.real or default_real()
    budget = args.real_budget
    full_out = os.path.join(out_root, "resume-full")
    full = measured(staged_cmd([src], full_out, budget, os.path.join(out_root, "work-full")))
    if full["rc"] != 0:
        sys.exit(f"full run failed:\n{full['stderr']}")
    work = os.path.join(out_root, "work-resume")
    out = os.path.join(out_root, "resume-out")
    shutil.rmtree(work, ignore_errors=True)
    half = full["seconds"] / 2
    killed = measured(staged_cmd([src], out, budget, work), kill_after=half)
    if killed["rc"] != -signal.SIGKILL:
        sys.exit(f"the run was not killed halfway (exit status {killed['rc']})")
    again = measured(staged_cmd([src], out, budget, work))
    if again["rc"] != 0:
        sys.exit(f"rerun failed:\n{again['stderr']}")
    same = same_outputs(full_out, out)
    reused = again["report"]["work"]["reused"]
    res = {"source": src, "full_seconds": full["seconds"], "killed_after": half,
           "rerun_seconds": again["seconds"], "identical": same, "reused": reused,
           "units": again["report"]["work"]["units"]}
    print(f"resume: full {full['seconds']:.1f} s; killed at {half:.1f} s; rerun "
          f"{again['seconds']:.1f} s; identical: {same}; reused {reused}", flush=True)
    md = ("| corpus | full run | killed after | rerun | rerun / full | outputs identical | "
          "reused units |\n|---|---:|---:|---:|---:|---|---|\n"
          f"| {os.path.basename(src)} | {full['seconds']:.1f} s | {half:.1f} s | "
          f"{again['seconds']:.1f} s | {again['seconds'] / full['seconds']:.2f} | "
          f"{'yes' if same else 'NO'} | "
          + ", ".join(f"{k} {v}/{again['report']['work']['units'].get(k, v)}"
                      for k, v in reused.items()) + " |")
    return res, md


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000000,3000000,10000000")
    ap.add_argument("--budget", default="4GiB")
    ap.add_argument("--mean-bytes", type=int, default=500)
    ap.add_argument("--real", default=None, help="JSONL of real short documents")
    ap.add_argument("--real-budget", default="1GiB")
    ap.add_argument("--out", default=os.path.join(HERE, "out", "scale"),
                    help="folder for outputs and work directories")
    ap.add_argument("--heavy", action="store_true",
                    help="also the heavy-duplication corpus (saved as its own section)")
    ap.add_argument("--heavy-sizes", default="1000000,3000000")
    ap.add_argument("--heavy-budget", default="1GiB")
    ap.add_argument("--heavy-mean-bytes", type=int, default=60)
    ap.add_argument("--skip-scale", action="store_true")
    ap.add_argument("--skip-real", action="store_true")
    ap.add_argument("--skip-resume", action="store_true")
    ap.add_argument("--no-save", action="store_true", help="print only")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    warm_up(args.out)
    data = {"command": "python bench/scale.py " + " ".join(argv or sys.argv[1:])}
    sections = []
    if not args.skip_scale:
        rows, md = run_scale(args, args.out)
        data["scale"] = rows
        sections.append(f"Generated documents of about {args.mean_bytes} bytes "
                        f"(`bench/generate.py`), budget `--memory-limit {args.budget}`, "
                        f"one process (`--scheduler none`):\n\n{md}")
    if not args.skip_real:
        res, md = run_real(args, args.out)
        data["real"] = res
        sections.append(f"A million real short documents under `--memory-limit "
                        f"{args.real_budget}`, beside the in-memory run:\n\n{md}")
    if not args.skip_resume:
        res, md = run_resume(args, args.out, None)
        data["resume"] = res
        sections.append(f"Killed with SIGKILL halfway and run again (same command, same "
                        f"work directory), `--memory-limit {args.real_budget}`:\n\n{md}")
    if args.heavy:
        rows, md = run_scale(args, args.out, heavy=True)
        text = (f"Generated short documents of about {args.heavy_mean_bytes} bytes with heavy "
                f"near-duplication (`bench/generate.py {' '.join(HEAVY)}`: made-up Zipfian "
                f"words, dates and numbers; clusters of Pareto-distributed size up to 100,000 "
                f"copies, each copy exact (20%) or edited: words substituted, inserted or "
                f"deleted, dates and numbers changed, headers and footers added), budget "
                f"`--memory-limit {args.heavy_budget}`, one process:\n\n{md}")
        print()
        print(text)
        if not args.no_save:
            sys.path.insert(0, HERE)
            import results  # bench/results.py
            machine = results.machine()
            results.save("heavy-duplication",
                         f"`python bench/scale.py {' '.join(argv or sys.argv[1:])}`; "
                         f"{results.machine_line(machine)}.\n\n{text}",
                         {"rows": rows, "machine": machine})
    text = "\n\n".join(sections)
    print()
    print(text)
    if not args.no_save and sections:
        sys.path.insert(0, HERE)
        import results  # bench/results.py
        data["machine"] = results.machine()
        text = (f"`{data['command']}`; {results.machine_line(data['machine'])}.\n\n" + text)
        results.save("out-of-core", text, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
