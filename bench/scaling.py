"""Scaling: time and peak memory against corpus size.

    python bench/scaling.py                      # 10k .. 1M documents
    python bench/scaling.py --sizes 10000 100000 1000000 10000000 --timeout 3600

Corpora come from the realistic generator (``bench/generate.py``, about 500
bytes a document, char 5-grams, threshold 0.8, 128 hashes). gpu_dedup runs as
the ``gpu-dedup run`` command (warm; median of ``--repeat`` runs); the peers
run once per size through ``bench/peers.py``, and are skipped at a size where
a linear projection of their previous run exceeds ``--timeout`` seconds or
``--max-memory`` of the machine's RAM (rensa and datasketch hold every
document's shingle list and sketch in Python objects). Fits the growth exponent
``k`` of ``seconds ~ N**k`` (least squares in log-log over the sizes of at
least ``--fit-from`` documents, where start-up no longer dominates), writes a
PNG plot (when matplotlib is installed) and saves a section of
bench/RESULTS.md.
"""
from __future__ import annotations

import argparse
import json
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

DEFAULT_SIZES = [10_000, 30_000, 100_000, 300_000, 1_000_000]
PLOT = os.path.join(HERE, "results", "scaling.png")


def fit_exponent(sizes, values, fit_from: int):
    pts = [(n, v) for n, v in zip(sizes, values) if n >= fit_from and v and v > 0]
    if len(pts) < 2:
        return None
    x = np.log([p[0] for p in pts])
    y = np.log([p[1] for p in pts])
    k, _ = np.polyfit(x, y, 1)
    return float(k)


def plot(rows, tools, path: str) -> str | None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for tool in tools:
        pts = [(r["docs"], r["seconds"], r["peak_rss"]) for r in rows
               if r["tool"] == tool and "seconds" in r]
        if not pts:
            continue
        n, s, m = zip(*pts)
        ax1.loglog(n, s, "o-", label=tool)
        ax2.loglog(n, np.array(m) / 2 ** 20, "o-", label=tool)
    ax1.set_xlabel("documents")
    ax1.set_ylabel("seconds (whole process)")
    ax1.set_title("Time")
    ax2.set_xlabel("documents")
    ax2.set_ylabel("peak RSS (MiB)")
    ax2.set_title("Peak memory")
    for ax in (ax1, ax2):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", type=int, default=DEFAULT_SIZES)
    ap.add_argument("--tools", nargs="+", choices=harness.TOOLS,
                    default=["gpu_dedup", "rensa", "datasketch", "cookbook"])
    ap.add_argument("--mean-bytes", type=int, default=500)
    ap.add_argument("--timeout", type=float, default=400.0,
                    help="seconds; a peer projected to take longer is not run")
    ap.add_argument("--fit-from", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3,
                    help="timed runs of gpu_dedup per size (median; peers run once)")
    ap.add_argument("--max-memory", type=float, default=0.6,
                    help="skip a peer whose projected peak exceeds this share of RAM")
    ap.add_argument("--data", default=None)
    ap.add_argument("--keep-corpora", action="store_true",
                    help="keep generated corpora above 1M documents (deleted by default)")
    ap.add_argument("--no-save", action="store_true")
    ap.add_argument("--render", action="store_true",
                    help="rebuild the section from bench/results/scaling.json; measure nothing")
    args = ap.parse_args(argv)
    if args.render:
        with open(os.path.join(results.RESULTS_DIR, "scaling.json")) as f:
            data = json.load(f)
        data.setdefault("settings", {
            "sizes": sorted({r["docs"] for r in data["rows"]}),
            "tools": list(dict.fromkeys(r["tool"] for r in data["rows"])),
            "fit_from": args.fit_from, "repeat": args.repeat, "timeout": args.timeout,
            "max_memory": args.max_memory, "mean_bytes": args.mean_bytes})
        results.save("scaling", section_markdown(data), data)
        return 0
    tools = [t for t in args.tools if harness.available(t)]
    machine = results.machine()
    print(f"machine: {results.machine_line(machine)}", flush=True)
    out_root = tempfile.mkdtemp(prefix="gpu-dedup-scaling-")
    rows = []
    stopped = {}
    ram = results._mem_gib() * 2 ** 30
    t0 = time.perf_counter()
    try:
        for n in sorted(args.sizes):
            spec = corpora.realistic(n, mean_bytes=args.mean_bytes, data_dir=args.data)
            print(f"{n:,} documents ({spec.bytes / 1e6:.0f} MB)", flush=True)
            for tool in tools:
                if tool in stopped:
                    rows.append({"tool": tool, "docs": n, "skipped": stopped[tool]})
                    continue
                last = next((r for r in reversed(rows) if r["tool"] == tool and "seconds" in r),
                            None)
                if last is not None and tool != "gpu_dedup":
                    grow = n / last["docs"]
                    if last["peak_rss"] * grow > args.max_memory * ram:
                        stopped[tool] = (f"skipped: projected peak "
                                         f"{harness.fmt_bytes(last['peak_rss'] * grow)}")
                    elif last["seconds"] * grow > args.timeout:
                        stopped[tool] = f"skipped: projected {last['seconds'] * grow:.0f}s"
                    if tool in stopped:
                        print(f"  {tool}: {stopped[tool]}", flush=True)
                        rows.append({"tool": tool, "docs": n, "skipped": stopped[tool]})
                        continue
                out = os.path.join(out_root, f"{n}.{tool}")
                cmd = harness.tool_command(tool, spec, out)
                runs = 1
                if tool == "gpu_dedup":
                    harness.run_process(cmd, args.timeout)      # warm
                    runs = args.repeat
                got = []
                for _ in range(runs):
                    r = harness.run_process(cmd, args.timeout)
                    if r["timed_out"] or r["rc"] != 0:
                        break
                    got.append(r)
                row = {"tool": tool, "docs": n, "bytes": spec.bytes}
                if not got:
                    row["error"] = (f"over {args.timeout:.0f}s" if r["timed_out"]
                                    else f"exit {r['rc']}: {r['stderr']}")
                    stopped[tool] = row["error"]
                    print(f"  {tool}: {row['error']}", flush=True)
                else:
                    secs = float(np.median([g["seconds"] for g in got]))
                    row.update(seconds=secs, runs=len(got),
                               peak_rss=max(g["peak_rss"] for g in got),
                               docs_per_s=n / secs)
                    if tool == "gpu_dedup":
                        with open(os.path.join(out, "report.json")) as f:
                            rep = json.load(f)
                        row["stage_seconds"] = rep["seconds"]
                        row["store"] = rep.get("work", {}).get("store", "")
                        row["removed"] = rep["documents"]["removed"]
                    print(f"  {tool}: {r['seconds']:.1f}s, {n / r['seconds']:,.0f} docs/s, "
                          f"peak {harness.fmt_bytes(r['peak_rss'])}", flush=True)
                shutil.rmtree(out, ignore_errors=True)
                rows.append(row)
            if n > 1_000_000 and not args.keep_corpora:
                for p in (spec.path, spec.path + ".meta.json",
                          generate_truth_path(spec.path)):
                    if os.path.exists(p):
                        os.remove(p)
    finally:
        shutil.rmtree(out_root, ignore_errors=True)
    elapsed = time.perf_counter() - t0
    settings = {"sizes": sorted(set(args.sizes)), "tools": tools, "fit_from": args.fit_from,
                "repeat": args.repeat, "timeout": args.timeout, "max_memory": args.max_memory,
                "mean_bytes": args.mean_bytes}
    data = {"machine": machine, "rows": rows, "settings": settings, "seconds": elapsed}
    md = section_markdown(data)
    print()
    print(md)
    if not args.no_save:
        results.save("scaling", md, data)
    return 0


def out_of_core(row: dict) -> bool:
    """Whether gpu-dedup ran out of core: its report names the disk store
    (older reports: a ``prepare`` stage instead of ``read``)."""
    if "store" in row:
        return row["store"] == "disk"
    return "prepare" in row.get("stage_seconds", {})


def section_markdown(data: dict) -> str:
    """The scaling section of RESULTS.md (fits and plot included) from the
    saved figures."""
    rows, machine, st = data["rows"], data["machine"], data["settings"]
    sizes, tools = st["sizes"], st["tools"]
    fits = {}
    for tool in tools:
        got = {r["docs"]: r for r in rows if r["tool"] == tool and "seconds" in r}
        ns = [n for n in sizes if n in got]
        fits[tool] = {
            "time": fit_exponent(ns, [got[n]["seconds"] for n in ns], st["fit_from"]),
            "memory": fit_exponent(ns, [got[n]["peak_rss"] for n in ns], st["fit_from"]),
        }
    data["fits"] = fits
    lines = ["| documents | " + " | ".join(f"{t} seconds | {t} peak RSS" for t in tools) + " |",
             "|---|" + "---|---|" * len(tools)]
    for n in sizes:
        cells = []
        for t in tools:
            r = next((r for r in rows if r["tool"] == t and r["docs"] == n), None)
            if r is None:
                cells += ["–", "–"]
            elif r.get("skipped"):
                cells += [r["skipped"], "–"]
            elif "error" in r:
                cells += [r["error"][:40], "–"]
            else:
                mark = " (out of core)" if out_of_core(r) else ""
                cells += [f"{r['seconds']:.1f}{mark}", harness.fmt_bytes(r["peak_rss"])]
        lines.append(f"| {n:,} | " + " | ".join(cells) + " |")
    fit_lines = []
    for t in tools:
        f = fits[t]
        if f["time"] is None:
            fit_lines.append(f"* {t}: not enough sizes of at least {st['fit_from']:,} "
                             f"documents to fit")
        else:
            fit_lines.append(f"* {t}: time grows as N^{f['time']:.2f}, peak memory as "
                             f"N^{f['memory']:.2f} (sizes >= {st['fit_from']:,})")
    gd = [r for r in rows if r["tool"] == "gpu_dedup" and "stage_seconds" in r]
    stage_names = []
    for r in gd:
        for k in r["stage_seconds"]:
            if k not in stage_names:
                stage_names.append(k)
    stage_lines = ["| documents | " + " | ".join(stage_names) + " |",
                   "|---|" + "---|" * len(stage_names)]
    for r in gd:
        s = r["stage_seconds"]
        stage_lines.append(f"| {r['docs']:,} | " + " | ".join(
            f"{s[k]:.1f}" if isinstance(s.get(k), (int, float)) else "" for k in stage_names)
            + " |")
    png = plot(rows, tools, PLOT)
    print(f"plot: {png}" if png else
          "plot skipped: matplotlib is not installed (pip install matplotlib)")
    cmd = "python bench/scaling.py" + ("" if sizes == DEFAULT_SIZES else
                                       " --sizes " + " ".join(map(str, sizes)))
    body = [f"Measured {machine['date']} with `{cmd}` ({data['seconds'] / 60:.1f} minutes in "
            f"all).", "", f"Machine: {results.machine_line(machine)}.", "",
            f"Corpus: `bench/generate.py` documents of about {st['mean_bytes']} bytes (char "
            f"5-grams, threshold 0.8, 128 hashes, `--normalize none`); gpu_dedup: median of "
            f"{st['repeat']} timed runs per size after an untimed warm-up; peers: one run per "
            f"size, skipped at the sizes where a linear projection of their last run exceeds "
            f"{st['timeout']:.0f}s or {st['max_memory']:.0%} of RAM.", "",
            "\n".join(lines), ""]
    if any(out_of_core(r) for r in gd):
        body += ["\"out of core\": the input did not fit gpu-dedup's default memory budget, so "
                 "`gpu-dedup run` took its bounded-memory staged path (shards streamed, "
                 "signatures on disk): peak memory falls, time keeps growing linearly.", ""]
    body += ["Fitted growth:", "", "\n".join(fit_lines), ""]
    if png:
        body += ["![time and peak memory against documents](results/scaling.png)", ""]
    else:
        body += ["(plot skipped: matplotlib is not installed)", ""]
    body += ["gpu_dedup seconds per stage (report.json):", "", "\n".join(stage_lines), ""]
    return "\n".join(body)


def generate_truth_path(path: str) -> str:
    import generate
    return generate.truth_path_for(path)


if __name__ == "__main__":
    sys.exit(main())
