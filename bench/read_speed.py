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

``--old REV`` adds the first reader of another revision (its package
checked out into a temporary folder, ``git worktree``), alternating with
the others run after run.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import corpora  # noqa: E402
import results  # noqa: E402

_OURS = """
import sys, time
if len(sys.argv) > 3:                  # another revision's package first
    sys.path.insert(0, sys.argv[3])
from gpu_dedup.io.jsonl import read_jsonl_shard
import gpu_dedup
if len(sys.argv) > 3 and not gpu_dedup.__file__.startswith(sys.argv[3]):
    raise SystemExit("the other revision's package was not the one imported")
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


def one(reader: str, path: str, readers: dict = READERS) -> tuple[float, int]:
    code, *args = readers[reader]
    p = subprocess.run([sys.executable, "-c", code, os.path.abspath(path), *args],
                       capture_output=True, text=True, timeout=600, cwd=tempfile.gettempdir())
    if p.returncode != 0:
        raise SystemExit(f"{reader} on {path} failed: {p.stderr.strip()[-2000:]}")
    secs, docs = p.stdout.split()
    return float(secs), int(docs)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--no-save", action="store_true")
    ap.add_argument("--old", default=None, help="a revision whose reader runs alternately")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="read-speed-") as tmp:
        readers = dict(READERS)
        if args.old:
            tree = os.path.join(tmp, "old")
            subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", "-q", tree,
                            args.old], check=True)
            try:
                readers[f"gpu_dedup at {args.old}"] = (_OURS, str(8 << 20), tree)
                return _measure(args, readers)
            finally:
                subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", tree],
                               check=False)
        return _measure(args, readers)


def _measure(args, readers: dict) -> int:
    m = results.machine()
    specs = [corpora.debian_short(), corpora.debian_entries(), corpora.long_documents()]
    lines = results.Lines()
    old = f" --old {args.old}" if args.old else ""
    lines.say(f"`python bench/read_speed.py --repeat {args.repeat}{old}`, "
              f"{results.machine_line(m)}; load {m['load_average']}.")
    lines.say()
    lines.say("| corpus | documents | MB | reader | MB/s (median) | each run (MB/s) |")
    lines.say("|---|---:|---:|---|---:|---|")
    data = {"machine": m, "rows": []}
    for spec in specs:
        size = os.path.getsize(spec.path) / 1e6
        secs: dict[str, list[float]] = {r: [] for r in readers}
        for _ in range(args.repeat):
            for r in readers:                  # alternating, so that load hits all alike
                s, docs = one(r, spec.path, readers)
                if docs != spec.docs:
                    raise SystemExit(f"{r} read {docs:,} documents of {spec.path}, "
                                     f"expected {spec.docs:,}")
                secs[r].append(s)
        for r in readers:
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
