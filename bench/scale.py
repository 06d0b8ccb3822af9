"""Out-of-core scaling: documents per second and peak memory under a budget.

    python bench/scale.py                       # 1M, 3M and 10M documents, 4 GiB
    python bench/scale.py --sizes 100000,300000 --budget 1GiB --skip-real --skip-resume
    python bench/scale.py --heavy --skip-scale --skip-real --skip-resume   # heavy duplication
    python bench/scale.py --cluster --skip-scale --skip-real --skip-resume # a Dask cluster

Each run is a fresh process started by this small one (its peak resident
memory is its own, from ``wait4``) running :func:`gpu_dedup.pipeline.run` with
the default configuration (char 5-grams after NFKC, lower-casing and
whitespace folding, 128 hashes, threshold 0.8). ``bench/generate.py`` makes
the corpora: words of a made-up 60,000-word vocabulary with Zipfian
frequencies (and dates and numbers), log-normal lengths around the mean size
asked for, clusters of near-duplicates (words substituted, inserted or
deleted, dates and numbers changed, headers and footers added) and exact
copies, shuffled so copies are not next to their originals.

1. **Scale**: ~500-byte documents at each of ``--sizes`` under ``--budget``:
   seconds, documents per second, peak resident memory of the process tree
   and of the driver alone (``memory.processes``), the tree's over the budget,
   the work directory's bytes per document (kept, ``keep_work_dir=True``,
   summed, then deleted), the ranges of ranks greedy selection decided one
   after the other (``work.selection_ranges``), and the largest size's time
   over the smallest's.
2. **Real short documents** (``--real``, default the million-document
   ``debian-short`` corpus of ``bench/corpora.py``) under ``--real-budget``:
   peak memory, and clusters.parquet and pairs.parquet compared byte for byte
   with the in-memory ``gpu-dedup run`` of the same file.
3. **Resume**: the same run killed with SIGKILL halfway through and started
   again: the second start's seconds beside the full run's, outputs compared.
4. **Heavy duplication** (``--heavy``): short documents (``--heavy-mean-bytes``)
   in clusters of Pareto-distributed size up to 100,000 copies (:data:`HEAVY`),
   at ``--heavy-sizes`` under ``--heavy-budget``, in the scale table's columns.
   **Templated pages** (``--templated``): pages of a few templates, with dates
   and numbers added (:func:`ensure_templated`), whose near-copies give many
   verified pairs a document, at ``--templated-sizes`` under
   ``--templated-budget``.
5. **A Dask cluster** (``--cluster``): a scheduler and ``--cluster-workers``
   workers (``--nthreads 1 --nworkers 1 --memory-limit`` ``--cluster-budget``),
   processes of their own on loopback with Dask's spilling, pausing and
   restarting off, fresh for each run and torn down after it; ``--cluster-size``
   documents (the heavy corpus unless ``--no-cluster-heavy``) under the same
   budget, beside one process: seconds, the driver's peak, each worker's peak
   and limit, whether clusters.parquet, pairs.parquet and data/ are the same
   bytes; and the driver's peak at the full size over its peak at a third of
   it (at most 1.10).

Figures are printed as Markdown tables and saved as sections of
bench/RESULTS.md through ``bench/results.py``: ``out-of-core``,
``heavy-duplication`` (``--heavy``), ``templated-pages`` (``--templated``) and
``dask-cluster`` (``--cluster``).
"""
from __future__ import annotations

import argparse
import contextlib
import filecmp
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
                   workers=a.get("workers"), keep_work_dir=a.get("keep", False))
    keep = ("documents", "edges", "clusters", "seconds", "memory", "work", "scheduler",
            "selection")
    print("REPORT " + json.dumps({k: r[k] for k in keep}))
"""


def gib(n: float | None) -> str:
    return "–" if n is None else f"{n / 2 ** 30:.2f} GiB"


def share(part, whole, fmt: str) -> str:
    """``part / whole`` formatted, or a dash when either is unknown."""
    return "–" if part is None or not whole else format(part / whole, fmt)


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


def staged_cmd(inputs, output, budget, work=None, keep: bool = False, scheduler: str = "none",
               workers: int | None = None) -> list[str]:
    args = {"inputs": inputs, "output": output, "budget": budget, "work": work, "keep": keep,
            "scheduler": scheduler, "workers": workers}
    return [sys.executable, "-c", CHILD, json.dumps(args)]


#: ``bench/generate.py`` options of the heavy-duplication corpus: three
#: originals in five get copies, their number Pareto(1.1)-distributed up to
#: 100,000 (a block of a million documents holds whole clusters).
HEAVY = ["--copies-share", "0.6", "--copies-alpha", "1.1", "--max-copies", "100000",
         "--batch", "1000000"]


#: Pages made from a few templates (:func:`ensure_templated`): each template's
#: share of the documents, and its text.
TEMPLATES = [
    (0.5, "Welcome to the Example Store. Free shipping on orders over fifty dollars. "
          "Sign up for our newsletter to get the latest deals on shoes, shirts and hats. "
          "Customer service is open Monday to Friday, nine to five."),
    (0.25, "This page is part of the city council archive. Minutes of the meeting are "
           "published within ten working days. Contact the clerk's office for copies of "
           "older records and for questions about public comment."),
    (0.15, "Error 404: the page you asked for could not be found. It may have moved, or "
           "the link may be out of date. Try the search box above or go back to the home "
           "page to find what you were looking for."),
    (0.1, "Terms of use. By using this site you agree to these terms. We may change them at "
          "any time; the date of the last change is shown below. Questions go to the "
          "address on the contact page."),
]


def ensure_templated(n: int, seed: int = 0) -> str:
    """``n`` pages made from :data:`TEMPLATES`, each one as it is (20%) or
    with a date or an order number added (80%, at the end or in front):
    a few clusters of near-copies of hundreds of thousands of documents
    each, the way boilerplate pages fill a web crawl."""
    import numpy as np
    os.makedirs(DATA, exist_ok=True)
    path = os.path.join(DATA, f"scale_{n}_templated_s{seed}.jsonl")
    if os.path.exists(path):
        return path
    rng = np.random.default_rng(seed)
    which = rng.choice(len(TEMPLATES), size=n, p=[w for w, _ in TEMPLATES])
    kind = rng.random(n)
    dates = [f"{y}-{m:02d}-{d:02d}" for y, m, d in zip(rng.integers(2000, 2027, n),
                                                       rng.integers(1, 13, n),
                                                       rng.integers(1, 29, n))]
    numbers = rng.integers(0, 10 ** 9, n)
    tmp = path + ".part"
    with open(tmp, "w") as f:
        for i in range(n):
            page = TEMPLATES[which[i]][1]
            if kind[i] < 0.3:
                text = f"{page} Updated {dates[i]}."
            elif kind[i] < 0.6:
                text = f"{page} Order number {numbers[i]} shipped on {dates[i]}."
            elif kind[i] < 0.8:
                text = f"[{dates[i]}] {page}"
            else:
                text = page
            f.write(json.dumps({"id": str(i), "text": text}) + "\n")
    os.replace(tmp, path)
    return path


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


def tree_bytes(path: str | None) -> int:
    """The sizes of every file under ``path`` added up (0: no such folder)."""
    return sum(os.path.getsize(os.path.join(folder, name))
               for folder, _, files in os.walk(path or "") for name in files)


def same_files(a: str, b: str) -> bool:
    """Whether two folders hold the same files (relative names) with the same bytes."""
    names = [sorted(os.path.relpath(os.path.join(folder, name), root)
                    for folder, _, files in os.walk(root) for name in files) for root in (a, b)]
    return (os.path.isdir(a) and os.path.isdir(b) and names[0] == names[1]
            and all(filecmp.cmp(os.path.join(a, n), os.path.join(b, n), shallow=False)
                    for n in names[0]))


def _processes(report: dict | None, role: str) -> list[dict]:
    procs = ((report or {}).get("memory") or {}).get("processes") or []
    return sorted((p for p in procs if p.get("role") == role), key=lambda p: p.get("address") or "")


def driver_peak(report: dict | None) -> int | None:
    """The driver's own peak resident memory from ``memory.processes``."""
    return next((p["peak_rss_bytes"] for p in _processes(report, "driver")), None)


def worker_peaks(report: dict | None) -> list[dict]:
    """The workers of ``memory.processes``, by address."""
    return _processes(report, "worker")


def workers_cell(report: dict | None) -> str:
    """Each worker's peak beside its limit, for a table cell."""
    return ", ".join(f"{gib(p['peak_rss_bytes'])} / "
                     f"{gib(p['limit_bytes']) if p.get('limit_bytes') else 'no limit'}"
                     for p in worker_peaks(report)) or "–"


#: The most the driver's peak may grow from a third of the cluster size to all of it.
DRIVER_GROWTH = 1.10


def driver_growth(big: int, small: int) -> tuple[float, bool]:
    """``big / small`` and whether it is within :data:`DRIVER_GROWTH`."""
    return big / small, big / small <= DRIVER_GROWTH


def _dask(bin_dir: str, command: str) -> list[str]:
    script = os.path.join(bin_dir, "dask")
    if os.path.isfile(script) and os.access(script, os.X_OK):
        return [script, command]
    return [sys.executable, "-m", f"distributed.cli.dask_{command}"]


def scheduler_cmd(scheduler_file: str, bin_dir: str) -> list[str]:
    """A Dask scheduler on loopback that writes its address to ``scheduler_file``."""
    return _dask(bin_dir, "scheduler") + ["--host", "127.0.0.1", "--port", "0",
                                          "--scheduler-file", scheduler_file, "--no-dashboard"]


def worker_cmd(scheduler_file: str, limit: str, scratch: str, bin_dir: str) -> list[str]:
    """One single-threaded Dask worker process with memory limit ``limit``."""
    return _dask(bin_dir, "worker") + ["--host", "127.0.0.1", "--nthreads", "1",
                                       "--nworkers", "1", "--memory-limit", limit,
                                       "--scheduler-file", scheduler_file,
                                       "--local-directory", scratch, "--no-dashboard"]


def warm_up(out_root: str) -> None:
    """Fill Numba's on-disk cache so no timed run compiles."""
    src = os.path.join(out_root, "warm.jsonl")
    with open(src, "w") as f:
        for i in range(2000):
            f.write(json.dumps({"id": str(i), "text": f"warm up document {i % 700} " * 4}) + "\n")
    r = measured(staged_cmd([src], os.path.join(out_root, "warm-out"), "256MiB"))
    if r["rc"] != 0:
        sys.exit(f"warm-up run failed:\n{r['stderr']}")


def run_scale(args, out_root: str, heavy: bool = False,
              templated: bool = False) -> tuple[list, str]:
    sizes = (args.templated_sizes if templated else args.heavy_sizes if heavy else args.sizes)
    budget_spec = (args.templated_budget if templated else args.heavy_budget if heavy
                   else args.budget)
    mean_bytes = args.heavy_mean_bytes if heavy else args.mean_bytes
    rows = []
    for n in [int(x) for x in sizes.split(",")]:
        src = ensure_templated(n) if templated else ensure_generated(n, mean_bytes, heavy)
        out = os.path.join(out_root, f"scale-{n}")
        r = measured(staged_cmd([src], out, budget_spec, os.path.join(out_root, "work"),
                                keep=True))
        if r["rc"] != 0:
            sys.exit(f"run of {n} documents failed:\n{r['stderr']}")
        rep = r["report"]
        work_bytes = tree_bytes(rep["work"].get("dir"))     # kept: measured, then deleted
        if rep["work"].get("dir"):
            shutil.rmtree(rep["work"]["dir"], ignore_errors=True)
        budget = rep["memory"]["limit_bytes"]
        peak = peak_of(r)
        row = {"documents": n, "bytes": os.path.getsize(src), "seconds": r["seconds"],
               "docs_per_s": n / r["seconds"], "peak_rss": peak, "budget": budget,
               "driver_peak_rss": driver_peak(rep), "processes": rep["memory"].get("processes"),
               "work_bytes": work_bytes, "work_bytes_per_doc": work_bytes / n,
               "selection_ranges": rep["work"].get("selection_ranges"),
               "comparisons": rep["selection"].get("comparisons"),
               "bounded": rep["work"].get("selection_bounded"),
               "stage_seconds": rep["seconds"], "stage_peaks": rep["memory"]["peak_rss_bytes"],
               "stage_usage": rep["work"].get("stage_usage", {}),
               "pairs": rep["edges"].get("verified"),
               "chunks": rep["work"]["chunks"], "units": rep["work"]["units"],
               "removed": rep["documents"]["removed"]}
        rows.append(row)
        print(f"{n:>12,} docs  {r['seconds']:9.1f} s  {row['docs_per_s']:9,.0f} docs/s  "
              f"peak {gib(peak)} ({peak / budget:.2f}x budget), driver "
              f"{gib(row['driver_peak_rss'])}; work directory {work_bytes / n:,.0f} bytes/doc; "
              f"{row['selection_ranges']} selection range(s)", flush=True)
        shutil.rmtree(out, ignore_errors=True)
    lines = ["| documents | input | seconds | docs/s | peak RSS (tree) | driver's peak | "
             "peak / budget | work directory bytes / doc | selection ranges | "
             "comparisons / doc | settled by bounds |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        lines.append(f"| {row['documents']:,} | {row['bytes'] / 2 ** 30:.2f} GiB | "
                     f"{row['seconds']:.1f} | {row['docs_per_s']:,.0f} | {gib(row['peak_rss'])} | "
                     f"{gib(row['driver_peak_rss'])} | {row['peak_rss'] / row['budget']:.2f} | "
                     f"{row['work_bytes_per_doc']:,.0f} | {row['selection_ranges'] or '–'} | "
                     f"{share(row['comparisons'], row['documents'], '.2f')} | "
                     f"{share(row['bounded'], row['comparisons'], '.1%')} |")
    if len(rows) > 1:
        ratio = rows[-1]["seconds"] / rows[0]["seconds"]
        size_ratio = rows[-1]["documents"] / rows[0]["documents"]
        lines.append("")
        lines.append(f"Time for {rows[-1]['documents']:,} documents / time for "
                     f"{rows[0]['documents']:,}: **{ratio:.2f}x** for {size_ratio:.0f}x the "
                     f"documents (budget {budget_spec}).")
        if len(rows) > 2:
            steps = [f"{b['documents']:,} / {a['documents']:,}: **{b['seconds'] / a['seconds']:.2f}x**"
                     f" for {b['documents'] / a['documents']:.0f}x the documents"
                     for a, b in zip(rows, rows[1:])]
            lines.append("Each size against the one before: " + "; ".join(steps) + ".")
    stage_names = [s for s in rows[0]["stage_seconds"] if s in rows[0]["stage_peaks"]] \
        if rows else []
    lines += ["", "Seconds and peak RSS per stage:", "",
              "| documents | " + " | ".join(stage_names) + " |",
              "|---:|" + "---:|" * len(stage_names)]
    for row in rows:
        cells = [f"{row['stage_seconds'].get(s, 0):.0f} s / "
                 f"{row['stage_peaks'].get(s, 0) / 2 ** 30:.2f} GiB" for s in stage_names]
        lines.append(f"| {row['documents']:,} | " + " | ".join(cells) + " |")
    if any(row["stage_usage"] for row in rows):
        lines += ["", "The driver process's CPU seconds (of them in the system) and bytes "
                  "read from storage, per stage:", "",
                  "| documents | " + " | ".join(stage_names) + " |",
                  "|---:|" + "---:|" * len(stage_names)]
        for row in rows:
            use = row["stage_usage"]
            cells = [f"{use[s]['cpu_seconds']:.0f} s ({use[s].get('cpu_system_seconds', 0):.0f}) / "
                     f"{use[s].get('storage_read_bytes', 0) / 2 ** 30:.1f} GiB"
                     if s in use else "–" for s in stage_names]
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


#: Dask's spilling, pausing and restarting at a worker's memory limit turned
#: off, as in gpu-dedup's own local cluster: the report holds each worker to it.
NO_DASK_MEMORY_MANAGEMENT = {f"DASK_DISTRIBUTED__WORKER__MEMORY__{k}": "False"
                             for k in ("TARGET", "SPILL", "PAUSE", "TERMINATE")}

WAIT_FOR_WORKERS = ("import sys; from distributed import Client; c = Client(scheduler_file="
                    "sys.argv[1], timeout='60s'); c.wait_for_workers(int(sys.argv[2]), "
                    "timeout=120); c.close()")      # the client waits for the file first


def _stop(procs: list) -> None:
    """Terminate the workers, then the scheduler; kill the group of any alive after 20 s."""
    for group in (procs[1:], procs[:1]):
        for p in group:
            if p.poll() is None:
                p.terminate()
        for p in group:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)     # its own session: its group is its pid
                p.wait()


@contextlib.contextmanager
def dask_cluster(n_workers: int, limit: str, root: str):
    """A Dask scheduler and ``n_workers`` workers on loopback, each in a session of
    its own; yields the scheduler's address, tears them all down on leaving."""
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    sfile, bin_dir = os.path.join(root, "scheduler.json"), os.path.dirname(sys.executable)
    env = dict(os.environ, **NO_DASK_MEMORY_MANAGEMENT)
    cmds = [("scheduler", scheduler_cmd(sfile, bin_dir))] + [
        (f"worker-{i}", worker_cmd(sfile, limit, os.path.join(root, f"scratch-{i}"), bin_dir))
        for i in range(n_workers)]
    procs = []
    try:
        for name, cmd in cmds:
            with open(os.path.join(root, f"{name}.log"), "w") as log:
                procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                              env=env, start_new_session=True))
        try:
            rc = subprocess.run([sys.executable, "-c", WAIT_FOR_WORKERS, sfile, str(n_workers)],
                                timeout=300).returncode
        except subprocess.TimeoutExpired:
            rc = "timed out"
        if rc != 0:
            sys.exit(f"a Dask scheduler and {n_workers} workers did not start ({rc}); their "
                     f"logs are in {root}")
        with open(sfile) as f:
            address = json.load(f)["address"]
        yield address
    finally:
        _stop(procs)


def run_cluster(args, out_root: str) -> tuple[dict, str]:
    n, nw, budget = args.cluster_size, args.cluster_workers, args.cluster_budget
    heavy = args.cluster_heavy
    mean_bytes = args.heavy_mean_bytes if heavy else args.mean_bytes

    def one(size: int, tag: str, cluster: bool) -> tuple[str, dict]:
        src = ensure_generated(size, mean_bytes, heavy)
        out = os.path.join(out_root, f"cluster-{tag}")
        work = os.path.join(out_root, f"work-cluster-{tag}")
        shutil.rmtree(work, ignore_errors=True)
        if cluster:
            with dask_cluster(nw, budget, os.path.join(out_root, f"dask-{tag}")) as address:
                r = measured(staged_cmd([src], out, budget, work, scheduler=address, workers=nw))
        else:
            r = measured(staged_cmd([src], out, budget, work))
        if r["rc"] != 0:
            sys.exit(f"{tag} run of {size} documents failed:\n{r['stderr']}")
        rep = r["report"]
        row = {"run": f"{nw} workers" if cluster else "one process", "documents": size,
               "seconds": r["seconds"], "peak_rss": peak_of(r), "driver_peak_rss": driver_peak(rep),
               "budget": rep["memory"]["limit_bytes"], "workers": worker_peaks(rep),
               "workers_cell": workers_cell(rep), "scheduler": rep["scheduler"],
               "removed": rep["documents"]["removed"],
               "selection_ranges": rep["work"].get("selection_ranges")}
        print(f"{row['run']}: {size:,} docs  {r['seconds']:.1f} s  driver "
              f"{gib(row['driver_peak_rss'])}; workers {row['workers_cell']}", flush=True)
        return out, row

    cl_out, cl = one(n, "full", True)
    one_out, single = one(n, "one-process", False)
    parquet = same_outputs(cl_out, one_out)
    data = same_files(os.path.join(cl_out, "data"), os.path.join(one_out, "data"))
    same = parquet and data
    small_n = max(1, n // 3)
    small_out, small = one(small_n, "third", True)
    ratio, ok = driver_growth(cl["driver_peak_rss"], small["driver_peak_rss"])
    for out in (cl_out, one_out, small_out):
        shutil.rmtree(out, ignore_errors=True)
    lines = ["| run | documents | seconds | driver's peak | driver's peak / budget | "
             "each worker: peak / limit | same bytes as one process |",
             "|---|---:|---:|---:|---:|---|---|"]
    for row, verdict in ((cl, "yes" if same else "no"), (single, "(itself)"), (small, "–")):
        lines.append(f"| {row['run']} | {row['documents']:,} | {row['seconds']:.1f} | "
                     f"{gib(row['driver_peak_rss'])} | "
                     f"{row['driver_peak_rss'] / row['budget']:.2f} | {row['workers_cell']} | "
                     f"{verdict} |")
    lines += ["", f"Same bytes (clusters.parquet, pairs.parquet and every file under data/, "
              f"cluster beside one process): **{'yes' if same else 'no'}**. The driver's peak "
              f"at {n:,} documents over its peak at {small_n:,}: **{ratio:.2f}x** (at most "
              f"{DRIVER_GROWTH:.2f}: {'yes' if ok else 'no'})."]
    res = {"documents": n, "budget": budget, "workers": nw, "heavy": heavy,
           "rows": [cl, single, small], "same_outputs": parquet, "same_data": data,
           "driver_growth": ratio, "driver_growth_ok": ok}
    return res, "\n".join(lines)


def save(section: str, text: str, data: dict, argv) -> None:
    """``text`` as a section of bench/RESULTS.md under the command and machine; ``data`` too."""
    sys.path.insert(0, HERE)
    import results  # bench/results.py
    data["machine"] = results.machine()
    results.save(section, f"`python bench/scale.py {' '.join(argv or sys.argv[1:])}`; "
                          f"{results.machine_line(data['machine'])}.\n\n{text}", data)


def described(kind: str, args, rows: list) -> str:
    """What the heavy or the templated corpus is, for its section."""
    if kind == "heavy":
        return (f"Generated documents of about {args.heavy_mean_bytes} bytes with heavy "
                f"near-duplication (`bench/generate.py {' '.join(HEAVY)}`: made-up Zipfian "
                f"words, dates and numbers; clusters of Pareto-distributed size up to 100,000 "
                f"copies, each copy exact (20%) or edited: words substituted, inserted or "
                f"deleted, dates and numbers changed, headers and footers added), budget "
                f"`--memory-limit {args.heavy_budget}`, one process")
    return (f"Pages made from {len(TEMPLATES)} templates (`ensure_templated`: each page as "
            f"it is, or with a date or an order number added at the end or in front; a few "
            f"clusters of hundreds of thousands of near-copies), budget `--memory-limit "
            f"{args.templated_budget}`, one process; verified pairs: "
            + ", ".join(f"{r['pairs']:,} at {r['documents']:,}" for r in rows))


def shown(section: str, text: str, data: dict, args, argv) -> None:
    """Print a section, and save it unless ``--no-save``."""
    print()
    print(text)
    if not args.no_save:
        save(section, text, data, argv)


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
    ap.add_argument("--templated", action="store_true",
                    help="also pages made from a few templates (saved as its own section)")
    ap.add_argument("--templated-sizes", default="200000,600000")
    ap.add_argument("--templated-budget", default="1GiB")
    ap.add_argument("--cluster", action="store_true",
                    help="also a Dask cluster on loopback beside one process (its own section)")
    ap.add_argument("--cluster-size", type=int, default=3000000)
    ap.add_argument("--cluster-budget", default="1GiB")
    ap.add_argument("--cluster-workers", type=int, default=2)
    ap.add_argument("--cluster-heavy", action=argparse.BooleanOptionalAction, default=True,
                    help="the heavy-duplication corpus (default) or the scale corpus")
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
    for kind, section in (("heavy", "heavy-duplication"), ("templated", "templated-pages")):
        if getattr(args, kind):
            rows, md = run_scale(args, args.out, **{kind: True})
            shown(section, f"{described(kind, args, rows)}:\n\n{md}", {"rows": rows}, args,
                  argv)
    if args.cluster:
        res, md = run_cluster(args, args.out)
        corpus = (f"documents of about {args.heavy_mean_bytes} bytes with heavy "
                  f"duplication (`bench/generate.py {' '.join(HEAVY)}`)" if args.cluster_heavy
                  else f"documents of about {args.mean_bytes} bytes (`bench/generate.py`)")
        text = (f"A Dask scheduler and {args.cluster_workers} workers on loopback, each its "
                f"own process (`dask worker --nthreads 1 --nworkers 1 --memory-limit "
                f"{args.cluster_budget}`, Dask's spilling, pausing and restarting off), fresh "
                f"for each run, the run given `--scheduler tcp://...` and `--memory-limit "
                f"{args.cluster_budget}`, beside one process (`--scheduler none`), on "
                f"{corpus}:\n\n{md}")
        shown("dask-cluster", text, res, args, argv)
    text = "\n\n".join(sections)
    print()
    print(text)
    if not args.no_save and sections:
        save("out-of-core", text, data, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
