"""bench/RESULTS.md, assembled from what the benchmark scripts measured.

Each script saves its section as ``bench/results/<section>.json`` (the
figures) and ``bench/results/<section>.md`` (its tables); :func:`render`
rebuilds RESULTS.md from every saved section, in a fixed order, so a rerun of
one script replaces only its own section.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS_DIR = os.path.join(HERE, "results")
RESULTS_MD = os.path.join(HERE, "RESULTS.md")

ORDER = ["checks", "removals", "speed", "first-run", "warm-start", "reading", "writing", "sketch", "speed-stages", "selection", "index", "substr", "storage", "one-engine", "gpu", "comparison-quick", "comparison-full", "scaling", "out-of-core", "heavy-duplication", "templated-pages", "dask-cluster", "accuracy", "semantic", "encoder"]
TITLES = {
    "checks": "Checks that guard the user's files, 2026-12-02 (2 cores, no device lent)",
    "removals": "Removals you can trust: `python bench/removals.py`",
    "speed": "Speed on short, medium and long documents, beside rensa: `python bench/run.py --speed`",
    "first-run": "The first run after an install, and a warm start: `python bench/first_run.py`",
    "warm-start": "A warm start as installed, on 100 real documents of each length: "
                  "`python bench/warm_start.py`",
    "reading": "Reading JSONL, each read in a fresh process: `python bench/read_speed.py`",
    "writing": "Writing the outputs, each write in a fresh process: `python bench/write_speed.py`",
    "sketch": "Sketches: the one-permutation sketch beside the classic one, at the same bands and rows",
    "speed-stages": "Per stage, before and after: `python bench/one_engine.py --speed --old OLD "
                    "--section speed-stages`",
    "selection": "Greedy selection, sequential passes beside parallel rounds: "
                 "`python bench/selection.py`",
    "index": "Deduplicating against an index, and contamination: `python bench/index.py`",
    "substr": "Repeated passages: `python bench/substr.py`",
    "storage": "Object storage beside local disk: `python bench/storage.py`",
    "one-engine": "One engine: every command and mode, the same bytes as the previous tree, "
                  "and its speed: `python bench/one_engine.py --matrix --speed --old OLD`",
    "gpu": "One H200: `python bench/gpu_check.py`",
    "comparison-quick": "Side by side: `python bench/run.py --quick`",
    "comparison-full": "Side by side: `python bench/run.py` (full)",
    "scaling": "Scaling: `python bench/scaling.py`",
    "out-of-core": "Out of core, under a memory budget: `python bench/scale.py`",
    "heavy-duplication": "Heavy near-duplication under a budget: `python bench/scale.py --heavy`",
    "templated-pages": "Pages of a few templates under a budget: "
                       "`python bench/scale.py --templated`",
    "dask-cluster": "A Dask scheduler and workers on loopback beside one process: "
                    "`python bench/scale.py --cluster`",
    "accuracy": "Accuracy on real text at full size: `python bench/accuracy.py`",
    "semantic": "Semantic deduplication beside semhash and WordLlama: "
                "`python bench/semantic.py`",
    "encoder": "Embedding with a sentence-transformers encoder, without torch: "
               "`python bench/encoder_speed.py`",
}


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_gib() -> float:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal"):
                    return int(line.split()[1]) / 2 ** 20
    except OSError:
        pass
    return float("nan")


def _version(mod: str) -> str:
    import importlib.metadata as md
    try:
        return md.version(mod)
    except md.PackageNotFoundError:
        return "not installed"


def _commit() -> str:
    try:
        out = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", HERE, "status", "--porcelain", "--", "."],
                               capture_output=True, text=True, timeout=10)
        return out.stdout.strip() + (" (bench/ modified)" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def machine() -> dict:
    """Where and with what the figures were measured."""
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "load_average": load,
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": round(_mem_gib(), 1),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "commit": _commit(),
        "versions": {m: _version(m) for m in ("gpu-dedup", "numpy", "numba", "pyarrow", "scipy",
                                              "datasketch", "rensa")},
    }


def machine_line(m: dict) -> str:
    v = m["versions"]
    return (f"{m['date']}; {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, {m['os']}, "
            f"Python {m['python']}; gpu-dedup {v['gpu-dedup']} (commit {m['commit']}), "
            f"numpy {v['numpy']}, numba {v['numba']}, pyarrow {v['pyarrow']}, "
            f"datasketch {v['datasketch']}, rensa {v['rensa']}")


class Lines(list):
    """The lines of a section, printed as they are added."""

    def say(self, line: str = "") -> None:
        print(line, flush=True)
        self.append(line)


def save(section: str, markdown: str, data: dict) -> None:
    """Store one section and regenerate RESULTS.md."""
    os.makedirs(RESULTS_DIR, exist_ok=True)
    with open(os.path.join(RESULTS_DIR, f"{section}.json"), "w") as f:
        json.dump(data, f, indent=1, default=str)
        f.write("\n")
    with open(os.path.join(RESULTS_DIR, f"{section}.md"), "w") as f:
        f.write(markdown.rstrip() + "\n")
    render()


INTRO = """# Benchmark results

Generated by the scripts in `bench/` (do not edit by hand: rerun them). Each
section says when, where and with which command it was measured. The
machine is shared and noisy: every figure compares tools measured side by
side in one run, timings are medians of repeated runs, and a ratio is
gpu_dedup's documents per second over the peer's in the same run.

How to read the tables:

* **docs/s**: documents over the wall-clock seconds of the whole process
  (start, imports, reading the JSONL file, all stages, writing results);
  gpu_dedup is the `gpu-dedup run` command, run once untimed first so
  Numba's on-disk cache is filled.
* **CPU s**: user + system seconds of the process, all cores together
  (gpu_dedup's kernels run on every core; the peers' Python work on one).
* **peak RSS**: the largest resident set of the process (`wait4` rusage).
* **recall**: of the pairs of *different* texts whose exact Jaccard is at
  least the threshold (`gpu_dedup.truth`, an exact set-similarity join), the
  share that ends up in one cluster (connected components of the pairs the
  tool reports; union-find for the peers).
* **precision**: the share of reported pairs whose exact Jaccard is at least
  the threshold (identical texts count as similarity 1).
* **removed**: documents removed keeping one per cluster, beside **exact**,
  what keeping one per component of the exact duplicate graph removes. For
  gpu_dedup and the peers that decide what is kept (`rensa-dedup`), what the
  tool itself removed.
* **justified**: removed documents whose named kept document is at exact
  Jaccard >= the threshold (a peer that reports pairs names its component's
  first document; `–` where a tool names none). **residual**: kept documents
  that still have another kept document at >= the threshold. Recall for
  gpu_dedup is taken over the connected components of the pairs it reports,
  as for the peers; its greedy selection does not report pairs between two
  removed documents, so that recall understates what it finds.
* The peers and how each chooses its bands are described in
  `bench/peers.py`; the corpora in `bench/corpora.py` and below.

To reproduce (`pip install -e '.[bench]'` adds datasketch, rensa and
matplotlib):

    python bench/removals.py         # what each selection removes, by exact Jaccard (about 10 min)
    python bench/run.py --quick      # side by side on four small corpora, < 10 min on 2 cores
    python bench/run.py --speed      # one million short documents
    python bench/first_run.py        # the first run after an install, and a warm start
    python bench/read_speed.py       # reading JSONL in fresh processes, beside Arrow alone
    python bench/write_speed.py      # writing data/ and the Parquet files, in fresh processes
    python bench/encoder_speed.py    # a sentence-transformers encoder's tokens a second
    python bench/run.py              # side by side, larger corpora (about an hour)
    python bench/scaling.py          # time and memory from 10k to 1M documents
    PYTHONPATH=. python bench/gpu_check.py   # on a GPU: bit-identity and throughput
    python bench/accuracy.py         # recall and edge precision on real text, full size
    python bench/generate.py --docs 1000000 --out corpus.jsonl.zst   # a realistic corpus
"""


def render() -> str:
    parts = [INTRO]
    names = [s for s in ORDER if os.path.exists(os.path.join(RESULTS_DIR, f"{s}.md"))]
    extra = sorted(f[:-3] for f in os.listdir(RESULTS_DIR) if f.endswith(".md")
                   and f[:-3] not in ORDER) if os.path.isdir(RESULTS_DIR) else []
    for s in names + extra:
        with open(os.path.join(RESULTS_DIR, f"{s}.md")) as f:
            body = f.read().rstrip()
        parts.append(f"## {TITLES.get(s, s)}\n\n{body}\n")
    if not names and not extra:
        parts.append("No results yet: run `python bench/run.py --quick`.\n")
    text = "\n".join(parts)
    tmp = RESULTS_MD + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, RESULTS_MD)
    return text


if __name__ == "__main__":
    sys.stdout.write(render())
