"""Side-by-side benchmark: gpu_dedup, the cookbook's code, datasketch and rensa.

    python bench/run.py --quick        # under 10 minutes on 2 cores
    python bench/run.py                # the full comparison (about an hour)
    python bench/run.py --speed        # short, medium and long documents: gpu_dedup vs rensa, datasketch

On each corpus, in one run on one machine, every tool reads the same JSONL
file with the same shingles (``--normalize none``), the same number of hash
functions (128) and the corpus's threshold, each choosing its bands the way
its documentation does. Every tool runs as its own process: gpu_dedup as the
``gpu-dedup run`` command (run once untimed first, so Numba's on-disk cache
is filled), the peers through ``bench/peers.py``. Timings are medians of
``--repeat`` rounds, each running every tool once in turn (a tool whose run
exceeds ``--slow`` seconds runs no more). Accuracy is scored against exact
truth (``gpu_dedup.truth``): see
``bench/results.py`` for what each column means.

Prints one table per run and saves it as a section of bench/RESULTS.md.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import corpora  # noqa: E402
import results  # noqa: E402

TOOLS = ("gpu_dedup", "gpu_dedup-minhash", "cookbook", "datasketch", "rensa", "rensa-dedup",
         "rensa-matrix")
#: gpu_dedup's own variants: the tool name, and its extra options
OURS = {"gpu_dedup": [], "gpu_dedup-minhash": ["--sketch", "minhash"]}
NUM_PERM = 128
SEED = 42

PRESETS = {
    "tiny": {"corpora": ["planted:400", "debian-short:3000"], "repeat": 1, "timeout": 300,
             "section": None},
    "quick": {"corpora": ["planted:8000", "realistic:10000", "debian-paragraphs:8000",
                          "debian-short:100000"], "repeat": 3, "timeout": 300, "slow": 15.0,
              "section": "comparison-quick"},
    "full": {"corpora": ["planted:8000", "planted:80000", "realistic:100000", "debian-files",
                         "debian-paragraphs", "debian-short:300000"], "repeat": 3,
             "timeout": 1800, "section": "comparison-full"},
    "speed": {"corpora": ["debian-short:1000000", "debian-entries", "long-documents"],
              "repeat": 3,
              # rensa's per-object path and datasketch: bench/run.py (comparison-full)
              "timeout": 1800, "tools": ["gpu_dedup", "gpu_dedup-minhash", "rensa-dedup",
                                         "rensa-matrix"],
              "section": "speed"},
}


# -- processes ------------------------------------------------------------------

def gpu_dedup_command() -> list[str]:
    """The ``gpu-dedup`` console script of this interpreter's environment."""
    beside = os.path.join(os.path.dirname(sys.executable), "gpu-dedup")
    if os.path.exists(beside):
        return [beside]
    found = shutil.which("gpu-dedup")
    return [found] if found else [sys.executable, "-m", "gpu_dedup.cli"]


def run_process(cmd: list[str], timeout: float) -> dict:
    """Run ``cmd`` through ``bench/measure.py``; its wall-clock seconds, peak
    RSS (bytes), CPU seconds and exit status, or ``timed_out``."""
    fd, result = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    launcher = [sys.executable, os.path.join(HERE, "measure.py"), result, "--"] + cmd
    proc = subprocess.Popen(launcher, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        _, err = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
        timed_out = True
    try:
        with open(result) as f:
            out = json.load(f)
    except (OSError, ValueError):
        out = {"seconds": float("nan"), "peak_rss": 0, "rc": proc.returncode or -1}
    finally:
        os.remove(result)
    tail = err.decode("utf-8", "replace").strip().splitlines()[-5:]
    out.update(timed_out=timed_out, stderr="\n".join(tail))
    return out


def tool_command(tool: str, spec, out: str, bands=None, rows=None) -> list[str]:
    if tool in OURS:
        cmd = gpu_dedup_command() + [
            "run", spec.path, "-o", out, "--overwrite", "--quiet", "--shingle", spec.shingle,
            "--ngram", str(spec.ngram), "--normalize", "none", "--num-perm", str(NUM_PERM),
            "--threshold", str(spec.threshold), "--seed", str(SEED)] + OURS[tool]
    else:
        cmd = [sys.executable, os.path.join(HERE, "peers.py"), tool, "--input", spec.path,
               "--out", out, "--shingle", spec.shingle, "--ngram", str(spec.ngram),
               "--num-perm", str(NUM_PERM), "--threshold", str(spec.threshold),
               "--seed", str(SEED)]
    if bands is not None:
        cmd += ["--bands", str(bands), "--rows", str(rows)]
    return cmd


# -- truth and scoring ---------------------------------------------------------

class Scorer:
    """Exact truth of one corpus, and the scores of a tool's clusters and pairs."""

    def __init__(self, spec, data_dir: str | None = None, verbose: bool = True):
        from gpu_dedup import truth as T
        self.spec = spec
        self.texts = corpora.read_texts(spec.path)
        self.n = len(self.texts)
        key = f"{spec.shingle}{spec.ngram}_t{spec.threshold:g}"
        cache = f"{spec.path}.{key}.truth.npz"
        stamp = os.path.getmtime(spec.path)
        t0 = time.perf_counter()
        if os.path.exists(cache) and os.path.getmtime(cache) >= stamp:
            z = np.load(cache)
            self.truth = T.Truth(int(z["n"]), z["rep"], z["pair_a"], z["pair_b"],
                                 z["similarity"], float(z["threshold"]), z["empty"])
            self.truth_seconds = float(z["seconds"])
        else:
            self.truth = T.exact_truth(self.texts, spec.shingle, spec.ngram, "none",
                                       spec.threshold)
            self.truth_seconds = time.perf_counter() - t0
            np.savez(cache, n=self.truth.n, rep=self.truth.rep, pair_a=self.truth.pair_a,
                     pair_b=self.truth.pair_b, similarity=self.truth.similarity,
                     threshold=self.truth.threshold, empty=self.truth.empty,
                     seconds=self.truth_seconds)
        self.exact_removed = self.truth.removed
        self._sets = None
        if verbose:
            print(f"  exact truth: {self.truth.pair_a.size:,} pairs of different texts with "
                  f"Jaccard >= {spec.threshold:g}; exact graph removes {self.exact_removed:,} "
                  f"({self.truth_seconds:.1f}s)", flush=True)

    def similarity(self, a, b) -> np.ndarray:
        from gpu_dedup.kernels.cpu import jaccard_edges
        from gpu_dedup.truth import shingle_sets
        if self._sets is None:
            self._sets = shingle_sets(self.texts, self.spec.shingle, self.spec.ngram, "none")
        off, vals = self._sets
        return jaccard_edges(off, vals, np.asarray(a, np.int64), np.asarray(b, np.int64))

    def removals(self, kept: np.ndarray, dup) -> dict:
        """justified, supported and residual (``Truth.removal_quality``) of what
        a tool keeps; ``dup`` is the kept document each removed one names, or
        None when the tool names none."""
        from gpu_dedup.truth import shingle_sets
        if self._sets is None:
            self._sets = shingle_sets(self.texts, self.spec.shingle, self.spec.ngram, "none")
        dup = np.full(self.n, -1, np.int64) if dup is None else dup
        q = self.truth.removal_quality(kept, dup, *self._sets)
        named = bool((dup >= 0).any())
        return {"removed": q["removed"], "justified": q["justified_share"] if named else None,
                "supported": q["supported_share"], "residual": q["residual_share"]}

    def score(self, labels: np.ndarray, a: np.ndarray, b: np.ndarray) -> dict:
        t = self.truth
        same = labels[t.pair_a] == labels[t.pair_b]
        recall = float(same.mean()) if same.size else 1.0
        if a.size:
            sim = self.similarity(a, b)
            precision = float((sim >= self.spec.threshold).mean())
        else:
            precision = 1.0
        return {"recall": recall, "precision": precision, "pairs": int(a.size),
                "truth_pairs": int(t.pair_a.size), "missed": int((~same).sum()),
                "removed": int(self.n - np.unique(labels).size),
                "exact_removed": int(self.exact_removed),
                "truth_seconds": float(self.truth_seconds)}


def read_gpu_dedup(out: str, ids) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """Labels, pairs and report of a run. The labels are the connected
    components of the pairs it reports, as for the peers (its own clusters
    are the greedy selection's: a kept document and those naming it), so that
    recall means the same for every tool; bench/removals.py judges what the
    selection removes."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from gpu_dedup.truth import components
    cl = pq.read_table(os.path.join(out, "clusters.parquet"))
    pairs = pq.read_table(os.path.join(out, "pairs.parquet"))
    with open(os.path.join(out, "report.json")) as f:
        report = json.load(f)
    got = cl["id"].combine_chunks().cast(ids.type)
    if not got.equals(ids):
        raise RuntimeError(f"{out}: clusters.parquet is not in input order")
    a = pc.index_in(pairs["id_a"], value_set=ids).to_numpy(zero_copy_only=False)
    b = pc.index_in(pairs["id_b"], value_set=ids).to_numpy(zero_copy_only=False)
    a, b = a.astype(np.int64), b.astype(np.int64)
    return components(len(ids), a, b), a, b, report


def read_selection(out: str, ids) -> tuple[np.ndarray, np.ndarray]:
    """What a gpu_dedup run kept, and the kept document each removed one names."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    cl = pq.read_table(os.path.join(out, "clusters.parquet"))
    kept = cl["kept"].to_numpy(zero_copy_only=False).astype(bool)
    dup = pc.index_in(cl["duplicate_of"], value_set=ids).fill_null(-1)
    return kept, dup.to_numpy(zero_copy_only=False).astype(np.int64)


def read_ids(path: str):
    import pyarrow as pa
    import pyarrow.json as pj
    t = pj.read_json(path, parse_options=pj.ParseOptions(
        explicit_schema=pa.schema([("id", pa.string())]), unexpected_field_behavior="ignore"),
        read_options=pj.ReadOptions(block_size=16 << 20))
    return t.column("id").combine_chunks()


# -- one tool on one corpus ----------------------------------------------------

def start_tool(tool: str, spec, out_root: str, timeout: float) -> dict:
    """The row of one tool on one corpus, before its timed runs; gpu_dedup
    runs once untimed first, so Numba's on-disk cache is filled."""
    out = os.path.join(out_root, f"{os.path.basename(spec.path)}.{tool}")
    row = {"corpus": spec.name, "tool": tool, "docs": spec.docs, "runs": [], "out": out,
           "cmd": tool_command(tool, spec, out)}
    if tool in OURS:
        warm = run_process(row["cmd"], timeout)
        if warm["rc"] != 0:
            row["error"] = f"exit {warm['rc']}: {warm['stderr']}"
    return row


def time_tool(row: dict, timeout: float, slow: float) -> None:
    """One timed run of a tool, unless it failed or was too slow to repeat."""
    if "error" in row or (row["runs"] and row["runs"][-1]["seconds"] > slow):
        return
    r = run_process(row["cmd"], timeout)
    if r["timed_out"]:
        row["error"] = f"timed out after {timeout:.0f}s"
    elif r["rc"] != 0:
        row["error"] = f"exit {r['rc']}: {r['stderr']}"
    else:
        row["runs"].append(r)


def finish_tool(row: dict, spec, scorer: Scorer, ids) -> dict:
    """Medians and scores of a tool's timed runs (its last run's output)."""
    from gpu_dedup.truth import components
    tool, out = row["tool"], row.pop("out")
    row.pop("cmd")
    if "error" in row:
        return row
    secs = [r["seconds"] for r in row["runs"]]
    row["seconds"] = statistics.median(secs)
    row["docs_per_s"] = spec.docs / row["seconds"]
    row["peak_rss"] = max(r["peak_rss"] for r in row["runs"])
    kept = dup = None
    keeper = False            # a peer that decides what is kept and reports no pairs
    if tool in OURS:
        labels, a, b, report = read_gpu_dedup(out, ids)
        kept, dup = read_selection(out, ids)
        p = report["parameters"]
        row.update(bands=p["bands"], rows=p["rows"], verified=p.get("verify", True),
                   stage_seconds=report["seconds"], keep_decisions=True)
    else:
        with open(os.path.join(out, "meta.json")) as f:
            meta = json.load(f)
        pairs = np.load(os.path.join(out, "pairs.npy"))
        a, b = pairs[:, 0], pairs[:, 1]
        labels = components(spec.docs, a, b)
        if os.path.exists(os.path.join(out, "kept.npy")):
            kept = np.load(os.path.join(out, "kept.npy"))
            keeper = True
        row.update(bands=meta["bands"], rows=meta["rows"], verified=meta["verified"],
                   stage_seconds=meta["seconds"], version=meta["version"],
                   keep_decisions=meta.get("keep_decisions", False))
    row.update(scorer.score(labels, a, b))
    if kept is None:
        # a peer that reports pairs keeps one document per component, its first
        idx = np.arange(spec.docs, dtype=np.int64)
        kept, dup = labels == idx, np.where(labels == idx, -1, labels)
    if keeper:
        row.update(recall=None, precision=None)
    row.update(scorer.removals(kept, dup))
    return row


def bench_tools(tools, spec, scorer: Scorer, out_root: str, repeat: int, timeout: float,
                slow: float, ids) -> list[dict]:
    """Every tool on one corpus: ``repeat`` rounds, each running every tool
    once in turn, so that the machine's load moves all tools alike."""
    rows = [start_tool(t, spec, out_root, timeout) for t in tools]
    for k in range(repeat):
        for row in rows:
            time_tool(row, timeout, slow)
    return [finish_tool(row, spec, scorer, ids) for row in rows]


# -- tables ---------------------------------------------------------------------

def fmt_bytes(n: float) -> str:
    if n >= 2 ** 30:
        return f"{n / 2 ** 30:.2f} GiB"
    return f"{n / 2 ** 20:.0f} MiB"


def table(rows: list[dict]) -> str:
    head = ("| corpus | tool | runs | seconds | CPU s | docs/s | gpu_dedup × | peak RSS "
            "| bands×rows | recall | precision | removed (exact) | justified | residual |")
    lines = [head, "|" + "---|" * 14]
    by_corpus = {}
    for r in rows:
        by_corpus.setdefault(r["corpus"], []).append(r)
    for corpus, rs in by_corpus.items():
        gd = next((r for r in rs if r["tool"] == "gpu_dedup" and "docs_per_s" in r), None)
        for r in rs:
            if "error" in r:
                lines.append(f"| {corpus} | {r['tool']} | – | – | – | – | – | – | – | – | – | "
                             f"{r['error'].splitlines()[-1][:80]} | – | – |")
                continue
            ratio = (f"{gd['docs_per_s'] / r['docs_per_s']:.2f}" if gd is not None else "–")
            if r["tool"] == "gpu_dedup":
                ratio = "1"
            verified = "" if r.get("verified") else " (unverified)"
            lines.append(
                f"| {corpus} | {r['tool']} | {len(r['runs'])} | {r['seconds']:.2f} | "
                f"{cpu_seconds(r)} | {r['docs_per_s']:,.0f} | {ratio} | {fmt_bytes(r['peak_rss'])} | "
                f"{r['bands']}×{r['rows']}{verified} | {_share(r.get('recall'))} | "
                f"{_share(r.get('precision'))} | {r['removed']:,} ({r['exact_removed']:,}) | "
                f"{_pct(r.get('justified'))} | {_pct(r.get('residual'))} |")
    return "\n".join(lines)


def _share(x) -> str:
    return "–" if x is None else f"{x:.4f}"


def _pct(x) -> str:
    return "–" if x is None else f"{100 * x:.2f}%"


def cpu_seconds(row: dict) -> str:
    """Median user + system seconds of the runs (all cores together)."""
    cpu = [r["user_seconds"] + r["system_seconds"] for r in row["runs"]
           if "user_seconds" in r]
    return f"{statistics.median(cpu):.1f}" if cpu else "–"


def stage_table(rows: list[dict]) -> str:
    gd = [r for r in rows if r["tool"] in OURS and "stage_seconds" in r]
    if not gd:
        return ""
    names = []
    for r in gd:
        for k in r["stage_seconds"]:
            if k not in names:
                names.append(k)
    lines = ["| corpus | tool | " + " | ".join(names) + " |",
             "|---|---|" + "---|" * len(names)]
    for r in gd:
        s = r["stage_seconds"]
        lines.append(f"| {r['corpus']} | {r['tool']} | " + " | ".join(
            f"{s[k]:.2f}" if isinstance(s.get(k), (int, float)) else "" for k in names) + " |")
    return "\n".join(lines)


def peer_phase_table(rows: list[dict]) -> str:
    ps = [r for r in rows if r["tool"] not in OURS and "stage_seconds" in r]
    if not ps:
        return ""
    names = ["read", "shingle", "sketch", "lsh", "verify", "total"]
    lines = ["| corpus | tool | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for r in ps:
        s = r["stage_seconds"]
        lines.append(f"| {r['corpus']} | {r['tool']} | " + " | ".join(
            f"{s[k]:.2f}" if k in s else "" for k in names) + " |")
    return "\n".join(lines)


def corpus_lines(specs: list[dict], truths: dict) -> str:
    """One line per corpus; ``truths[name]`` holds ``truth_pairs``,
    ``exact_removed`` and ``truth_seconds`` where known."""
    out = []
    for spec in specs:
        t = truths.get(spec["name"])
        extra = ""
        if t is not None:
            join = (f" (exact join: {t['truth_seconds']:.1f}s)" if "truth_seconds" in t
                    else "")
            extra = (f"; exact truth: {t['truth_pairs']:,} pairs of different texts with "
                     f"Jaccard >= {spec['threshold']:g}, the exact graph removes "
                     f"{t['exact_removed']:,} documents{join}")
        out.append(f"* **{spec['name']}** ({spec['docs']:,} documents, "
                   f"{spec['bytes'] / 1e6:.1f} MB of text; {spec['shingle']} "
                   f"{spec['ngram']}-grams, threshold {spec['threshold']:g}): "
                   f"{spec['description']}{extra}.")
    return "\n".join(out)


def speed_notes(rows: list[dict]) -> str:
    """What the million-document comparison shows, in words."""
    out = []
    for corpus in dict.fromkeys(r["corpus"] for r in rows):
        rs = {r["tool"]: r for r in rows if r["corpus"] == corpus and "docs_per_s" in r}
        # against rensa's fastest path to keep decisions, else its per-object one
        gd = rs.get("gpu_dedup")
        peer = "rensa-dedup" if "rensa-dedup" in rs else "rensa"
        rn = rs.get(peer)
        if gd is None:
            continue
        st = gd.get("stage_seconds", {})
        inside = st.get("total")
        if inside:
            startup = gd["seconds"] - inside
            top = sorted(((k, v) for k, v in st.items() if k != "total"
                          and isinstance(v, (int, float))), key=lambda kv: -kv[1])
            share = ", ".join(f"{k} {v:.1f}s ({100 * v / gd['seconds']:.0f}%)"
                              for k, v in top[:5])
            out.append(f"* **{corpus}**: gpu_dedup's {gd['seconds']:.1f}s are {startup:.1f}s of "
                       f"process start-up, imports and exit, then by stage: {share}.")
        if rn is not None:
            ratio = gd["docs_per_s"] / rn["docs_per_s"]
            goal = 3
            verdict = "meets" if ratio >= goal else "does not meet"
            ph = rn.get("stage_seconds", {})
            py = ph.get("read", 0) + ph.get("shingle", 0)
            core = sum(ph.get(k, 0) for k in ("sketch", "lsh", "verify", "dedup"))
            cpu_gd, cpu_rn = cpu_seconds(gd), cpu_seconds(rn)
            cpu = ""
            if "–" not in (cpu_gd, cpu_rn):
                cpu = (f" In CPU time (all cores together) gpu_dedup used {cpu_gd}s to "
                       f"rensa's {cpu_rn}s ({float(cpu_rn) / float(cpu_gd):.2f}x less): part "
                       f"of the wall-clock lead comes from using both cores.")
            out.append(f"* gpu_dedup / {peer} = **{ratio:.2f}x** documents per second, which "
                       f"{verdict} the {goal}x goal.{cpu} Of rensa's {rn['seconds']:.1f}s, "
                       f"{py:.1f}s go to reading and building the shingle lists in Python "
                       f"and {core:.1f}s to rensa itself (sketches, LSH, verification): "
                       f"against those phases alone, gpu_dedup's whole process gives "
                       f"{core / gd['seconds']:.2f}x the documents per second.")
        if rn is not None:
            out.append(f"* Peak RSS: gpu_dedup {fmt_bytes(gd['peak_rss'])}, {peer} "
                       f"{fmt_bytes(rn['peak_rss'])} "
                       f"({'no higher' if gd['peak_rss'] <= rn['peak_rss'] else 'higher'}).")
        mh = rs.get("gpu_dedup-minhash")
        if mh is not None:
            so, sg = (x.get("stage_seconds", {}).get("signatures") for x in (gd, mh))
            sig = (f"; the signature stage {so:.2f}s with oph, {sg:.2f}s with minhash "
                   f"({sg / so:.1f}x)" if sg and so else "")
            delta = [f"{name} {100 * (gd[k] - mh[k]):+.2f} points"
                     for k, name in (("recall", "recall"), ("residual", "residual"),
                                     ("justified", "justified"))
                     if gd.get(k) is not None and mh.get(k) is not None]
            out.append(f"* `--sketch oph` (the default): {gd['seconds']:.2f}s against "
                       f"{mh['seconds']:.2f}s with `--sketch minhash` "
                       f"({mh['seconds'] / gd['seconds']:.2f}x){sig}; against the classic "
                       f"sketch at the same bands and rows: {', '.join(delta)}.")
        ds = rs.get("datasketch")
        if ds is not None:
            out.append(f"* gpu_dedup / datasketch = {gd['docs_per_s'] / ds['docs_per_s']:.1f}x.")
    return "\n".join(out)


def startup(repeat: int = 5) -> dict:
    """Wall seconds of a warm ``gpu-dedup run`` on 100 short documents
    (default options, after ``gpu-dedup demo`` has filled Numba's cache) and
    of importing the CLI alone: medians of ``repeat`` runs. The package's
    byte code is written first, as ``pip install`` writes it (an editable
    install under ``PYTHONDONTWRITEBYTECODE`` would otherwise compile every
    module from source at each start)."""
    import compileall
    import gpu_dedup
    import gpu_dedup.kernels
    for pkg in (gpu_dedup, gpu_dedup.kernels):
        compileall.compile_dir(os.path.dirname(pkg.__file__), quiet=1)
    tmp = tempfile.mkdtemp(prefix="gpu-dedup-startup-")
    try:
        path = os.path.join(tmp, "docs.jsonl")
        corpora.write_jsonl(path, [f"document number {i} says hello to the world"
                                   for i in range(100)])
        subprocess.run(gpu_dedup_command() + ["demo", "--quiet"], capture_output=True,
                       cwd=tmp, timeout=600)
        run = gpu_dedup_command() + ["run", path, "-o", os.path.join(tmp, "out"),
                                     "--overwrite", "--quiet"]
        imp = [sys.executable, "-c", "import gpu_dedup.cli"]
        out = {}
        for name, cmd in (("run_100_docs", run), ("import_cli", imp)):
            subprocess.run(cmd, capture_output=True, timeout=600)
            secs = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                subprocess.run(cmd, capture_output=True, timeout=600, check=True)
                secs.append(time.perf_counter() - t0)
            out[name] = statistics.median(secs)
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


HISTORY = os.path.join(results.RESULTS_DIR, "speed-history.json")


def speed_history(data: dict) -> str:
    """Add this run to ``results/speed-history.json`` (once) and tabulate all."""
    try:
        with open(HISTORY) as f:
            hist = json.load(f)
    except (OSError, ValueError):
        hist = []
    m = data["machine"]
    first = data["rows"][0]["corpus"] if data["rows"] else None     # the million
    docs = {r["tool"]: r["docs_per_s"] for r in data["rows"]
            if "docs_per_s" in r and r["corpus"] == first}
    entry = {"date": m["date"], "commit": m["commit"], "load_average": m.get("load_average"),
             "docs_per_s": docs}
    if not any(h["date"] == entry["date"] for h in hist):
        hist.append(entry)
        hist.sort(key=lambda h: h["date"])
        os.makedirs(results.RESULTS_DIR, exist_ok=True)
        with open(HISTORY, "w") as f:
            json.dump(hist, f, indent=1)
            f.write("\n")
    lines = ["| date | commit | load | gpu_dedup docs/s | rensa-dedup docs/s | "
             "gpu_dedup / rensa-dedup | rensa per-object docs/s | gpu_dedup / rensa | "
             "datasketch docs/s |", "|---|---|---|---|---|---|---|---|---|"]

    def num(x, fmt=",.0f"):
        return "–" if x is None else format(x, fmt)
    for h in hist:
        d = h["docs_per_s"]
        gd, rd, rn, ds = (d.get(k) for k in ("gpu_dedup", "rensa-dedup", "rensa", "datasketch"))
        load = h.get("load_average")
        lines.append(f"| {h['date']} | {h['commit']} | {load[0] if load else 'not recorded'} | "
                     f"{num(gd)} | {num(rd)} | {num(gd / rd if gd and rd else None, '.2f')} | "
                     f"{num(rn)} | {num(gd / rn if gd and rn else None, '.2f')} | {num(ds)} |")
    return "\n".join(lines)


def section_markdown(section: str, data: dict) -> str:
    machine, rows = data["machine"], data["rows"]
    cmd = "python bench/run.py" + {"comparison-quick": " --quick", "speed": " --speed"}.get(
        section, "")
    truths = {}
    for r in rows:
        if "truth_pairs" in r:
            truths[r["corpus"]] = r
    body = [f"Measured {machine['date']} with `{cmd}` ({data['seconds'] / 60:.1f} minutes "
            f"in all).", "", f"Machine: {results.machine_line(machine)}.", "", "Corpora:", "",
            corpus_lines(data["corpora"], truths), "", table(rows), ""]
    if section == "speed":
        notes = speed_notes(rows)
        st = data.get("startup")
        if st:
            notes += (f"\n* Start-up: a warm `gpu-dedup run` on 100 documents (default "
                      f"options, after `gpu-dedup demo`) takes {st['run_100_docs']:.2f}s; "
                      f"importing the CLI alone {st['import_cli']:.2f}s (medians of 5).")
        if notes:
            body += ["What it shows:", "", notes, ""]
        hist = speed_history(data)
        if hist:
            body += ["Every run of `python bench/run.py --speed` recorded here (the machine is "
                     "shared: other jobs' load moves the figures; 1-minute load average at "
                     "the start where recorded):", "", hist, ""]
    stages = stage_table(rows)
    if stages:
        body += ["gpu_dedup seconds per stage (report.json of the last timed run; `total` is "
                 "inside the process, the table's seconds include start-up):", "", stages, ""]
    phases = peer_phase_table(rows)
    if phases:
        body += ["Peers' seconds per phase (inside the process):", "", phases, ""]
    return "\n".join(body)


# -- main -------------------------------------------------------------------------

def build_corpus(name: str, data_dir: str | None):
    kind, _, arg = name.partition(":")
    if kind not in corpora.BUILDERS:
        raise SystemExit(f"unknown corpus {kind!r}; choose from {', '.join(corpora.BUILDERS)}")
    builder = corpora.BUILDERS[kind]
    if kind.startswith("debian") and not corpora.debian_files_available():
        print(f"  skipping {name}: no files match {corpora.DEBIAN_GLOB}", flush=True)
        return None
    if arg:
        return builder(int(arg), data_dir=data_dir)
    return builder(data_dir=data_dir)


def available(tool: str) -> bool:
    if tool in OURS or tool == "cookbook":
        return True
    import importlib.util
    return importlib.util.find_spec(tool.split("-")[0]) is not None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help="small corpora, under 10 minutes")
    g.add_argument("--speed", action="store_true",
                   help="a million short documents, 50k real ones of a few hundred bytes "
                        "and 20k long ones: gpu_dedup vs rensa and datasketch")
    g.add_argument("--tiny", action="store_true", help="a smoke test of the harness (seconds)")
    ap.add_argument("--corpora", nargs="+", help="e.g. planted:8000 realistic:20000 "
                    "debian-files debian-paragraphs debian-short:100000")
    ap.add_argument("--tools", nargs="+", choices=TOOLS)
    ap.add_argument("--repeat", type=int, help="timed runs per tool (median reported)")
    ap.add_argument("--slow", type=float, default=None,
                    help="a tool whose run takes longer than this many seconds runs once "
                         "(default 120; 15 with --quick)")
    ap.add_argument("--timeout", type=float, help="seconds before a run is abandoned")
    ap.add_argument("--data", default=None, help="corpus folder (default bench/data)")
    ap.add_argument("--out", default=None, help="run outputs (default: a temporary folder)")
    ap.add_argument("--json", default=None, help="also write the rows as JSON here")
    ap.add_argument("--no-save", action="store_true", help="do not update bench/RESULTS.md")
    ap.add_argument("--render", metavar="SECTION",
                    help="rebuild a section of RESULTS.md from bench/results/SECTION.json "
                         "without measuring anything")
    args = ap.parse_args(argv)
    if args.render:
        with open(os.path.join(results.RESULTS_DIR, f"{args.render}.json")) as f:
            data = json.load(f)
        results.save(args.render, section_markdown(args.render, data), data)
        print(f"rebuilt section {args.render} of {results.RESULTS_MD}")
        return 0
    preset = PRESETS["quick" if args.quick else "speed" if args.speed else
                     "tiny" if args.tiny else "full"]
    names = args.corpora or preset["corpora"]
    tools = args.tools or preset.get("tools") or list(TOOLS)
    repeat = args.repeat or preset["repeat"]
    timeout = args.timeout or preset["timeout"]
    slow = args.slow or preset.get("slow", 120.0)
    section = None if (args.no_save or args.corpora or args.tools) else preset["section"]
    out_root = args.out or tempfile.mkdtemp(prefix="gpu-dedup-bench-")
    os.makedirs(out_root, exist_ok=True)
    missing = [t for t in tools if not available(t)]
    for t in missing:
        print(f"skipping {t}: not installed (pip install -e '.[bench]')", flush=True)
    tools = [t for t in tools if t not in missing]
    machine = results.machine()
    print(f"machine: {results.machine_line(machine)}", flush=True)
    t_start = time.perf_counter()
    rows, specs = [], []
    try:
        for name in names:
            print(f"corpus {name}: building", flush=True)
            spec = build_corpus(name, args.data)
            if spec is None:
                continue
            specs.append(spec)
            scorer = Scorer(spec)
            ids = read_ids(spec.path)
            for row in bench_tools(tools, spec, scorer, out_root, repeat, timeout, slow, ids):
                rows.append(row)
                tool = row["tool"]
                if "error" in row:
                    print(f"  {tool}: {row['error']}", flush=True)
                else:
                    print(f"  {tool}: {row['docs_per_s']:,.0f} docs/s ({row['seconds']:.2f}s, "
                          f"{len(row['runs'])} run(s)), recall {_share(row['recall'])}, "
                          f"precision {_share(row['precision'])}, removed {row['removed']:,}, "
                          f"justified {_pct(row['justified'])}, residual "
                          f"{_pct(row['residual'])}", flush=True)
    finally:
        if args.out is None:
            shutil.rmtree(out_root, ignore_errors=True)
    elapsed = time.perf_counter() - t_start
    md = table(rows)
    print()
    print(md)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine, "rows": rows, "corpora": [s.to_dict() for s in specs],
                       "seconds": elapsed}, f, indent=1, default=str)
    if section:
        data = {"machine": machine, "rows": rows, "corpora": [s.to_dict() for s in specs],
                "seconds": elapsed}
        if section == "speed":
            data["startup"] = startup()
            print(f"start-up: {data['startup']}", flush=True)
        results.save(section, section_markdown(section, data), data)
        print(f"\nsaved to {results.RESULTS_MD}")
    failed = [r for r in rows if "error" in r and r["tool"] in OURS]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
