"""Reading JSONL: MB of input a second, each read in a fresh process.

    python bench/read_speed.py [--repeat 7] [--no-save]

On a million short lines, the real documents of a few hundred bytes and the
long documents of ``bench/corpora.py``, three readers side by side, in
alternating fresh processes (a fresh process is what a run is: its memory is
touched for the first time), medians of ``--repeat``:

* ``gpu_dedup``: :func:`gpu_dedup.io.jsonl.read_jsonl_shard` with its
  default blocks (every check the run makes: UTF-8, one object a line, the
  number literals JSON does not allow, the line numbers);
* ``gpu_dedup, 32 MiB blocks``: the same with the blocks it read before;
* ``Arrow alone``: ``pyarrow.json.read_json`` of the whole file with the
  text field's type given, and nothing checked: the reader of its class
  that the issue names, as a ceiling.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import corpora  # noqa: E402
import results  # noqa: E402

_OURS = """
import sys, time
from gpu_dedup.io.jsonl import read_jsonl_shard
t = time.perf_counter()
d = read_jsonl_shard(sys.argv[1], block_bytes=int(sys.argv[2]))
print(time.perf_counter() - t, len(d.texts))
"""
_ARROW = """
import sys, time
import pyarrow as pa, pyarrow.json as pj
t = time.perf_counter()
schema = pa.schema([("text", pa.large_string())])
tab = pj.read_json(sys.argv[1], parse_options=pj.ParseOptions(
    explicit_schema=schema, unexpected_field_behavior="ignore"))
text = tab.column("text").combine_chunks()
print(time.perf_counter() - t, len(text))
"""

READERS = {
    "gpu_dedup": (_OURS, str(8 << 20)),
    "gpu_dedup, 32 MiB blocks": (_OURS, str(32 << 20)),
    "Arrow alone": (_ARROW, "0"),
}


def one(reader: str, path: str) -> tuple[float, int]:
    code, arg = READERS[reader]
    p = subprocess.run([sys.executable, "-c", code, path, arg], capture_output=True,
                       text=True, timeout=600)
    if p.returncode != 0:
        raise SystemExit(f"{reader} on {path} failed: {p.stderr.strip()[-2000:]}")
    secs, docs = p.stdout.split()
    return float(secs), int(docs)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--no-save", action="store_true")
    args = ap.parse_args(argv)
    m = results.machine()
    specs = [corpora.debian_short(), corpora.debian_entries(), corpora.long_documents()]
    lines = results.Lines()
    lines.say(f"`python bench/read_speed.py --repeat {args.repeat}`, {results.machine_line(m)}; "
              f"load {m['load_average']}.")
    lines.say()
    lines.say("| corpus | documents | MB | reader | MB/s (median) | each run (MB/s) |")
    lines.say("|---|---:|---:|---|---:|---|")
    data = {"machine": m, "rows": []}
    for spec in specs:
        size = os.path.getsize(spec.path) / 1e6
        secs: dict[str, list[float]] = {r: [] for r in READERS}
        for _ in range(args.repeat):
            for r in READERS:                  # alternating, so that load hits all alike
                s, docs = one(r, spec.path)
                if docs != spec.docs:
                    raise SystemExit(f"{r} read {docs:,} documents of {spec.path}, "
                                     f"expected {spec.docs:,}")
                secs[r].append(s)
        for r in READERS:
            rates = [size / s for s in secs[r]]
            med = statistics.median(rates)
            lines.say(f"| {spec.name} | {spec.docs:,} | {size:.0f} | {r} | {med:.0f} | "
                      + ", ".join(f"{x:.0f}" for x in rates) + " |")
            data["rows"].append({"corpus": spec.name, "docs": spec.docs, "mb": size,
                                 "reader": r, "mb_per_s": rates, "median": med})
    if not args.no_save:
        results.save("reading", "\n".join(lines), data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
