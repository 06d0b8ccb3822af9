"""Throughput from object storage beside local disk, on the same corpus.

    python bench/storage.py               # 1M short real documents (86 MB); saves "storage"
    python bench/storage.py --docs 200000 --rounds 1 --no-save

The corpus (``debian-short``, bench/corpora.py) is cut into 8 JSONL shards,
written to a local folder and uploaded to a SeaweedFS S3 server started on
loopback (``tests/s3server.py``). Then, alternating in each round and each
its own process (``bench/measure.py``): ``gpu-dedup run`` from the local
folder to a local output, and from ``s3://`` to ``s3://`` (reads by ranged
requests, the outputs built locally, uploaded under a temporary prefix,
copied into place and marked complete). Both must write the same
clusters.parquet. Medians of the rounds.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

import corpora  # noqa: E402
import results  # noqa: E402
from run import fmt_bytes, gpu_dedup_command, run_process  # noqa: E402

LINES = results.Lines()
say = LINES.say
SHARDS = 8


def split(src: str, folder: str, shards: int) -> int:
    os.makedirs(folder, exist_ok=True)
    with open(src, "rb") as f:
        lines = f.readlines()
    per = -(-len(lines) // shards)
    for k in range(shards):
        with open(os.path.join(folder, f"part-{k:02d}.jsonl"), "wb") as out:
            out.writelines(lines[k * per:(k + 1) * per])
    return sum(len(x) for x in lines)


def main(argv=None) -> int:
    from s3server import S3Server
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args(argv)
    spec = corpora.debian_short(a.docs)
    tmp = tempfile.mkdtemp(prefix="gpu-dedup-storage-bench-")
    times = {"local": [], "s3": []}
    try:
        local = os.path.join(tmp, "in")
        nbytes = split(spec.path, local, SHARDS)
        with S3Server(os.path.join(tmp, "s3")) as s3:
            os.environ.update(s3.env())
            s3.make_bucket("corpus")
            s3.make_bucket("out")
            fs = s3.filesystem()
            for name in sorted(os.listdir(local)):
                with fs.open_output_stream(f"corpus/shards/{name}", compression=None) as o, \
                        open(os.path.join(local, name), "rb") as f:
                    shutil.copyfileobj(f, o, 16 << 20)
            base = gpu_dedup_command() + ["run", "-q", "--no-html", "--overwrite"]
            cmds = {"local": base + [local, "-o", os.path.join(tmp, "out")],
                    "s3": base + ["s3://corpus/shards/", "-o", "s3://out/run"]}
            run_process(cmds["local"], 3600)                  # fills Numba's cache
            for r in range(a.rounds):
                order = ("local", "s3") if r % 2 == 0 else ("s3", "local")
                for name in order:
                    res = run_process(cmds[name], 3600)
                    if res["rc"] != 0:
                        raise SystemExit(f"{name}: {res['stderr']}")
                    times[name].append(res)
            with fs.open_input_stream("out/run/clusters.parquet", compression=None) as f:
                remote = f.read()
            with open(os.path.join(tmp, "out", "clusters.parquet"), "rb") as f:
                same = remote == f.read()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    say(f"Machine: {results.machine_line(results.machine())}.")
    say()
    say(f"Corpus: {a.docs:,} short real documents (debian-short), {nbytes / 1e6:.1f} MB in "
        f"{SHARDS} JSONL shards; default settings; {a.rounds} alternating rounds, medians.")
    say()
    say("| inputs -> outputs | seconds (median) | MB/s of input | peak RSS |")
    say("|---|---|---|---|")
    med = {}
    for name, label in (("local", "local disk -> local disk"),
                        ("s3", "`s3://` (SeaweedFS on loopback) -> `s3://`")):
        secs = statistics.median(t["seconds"] for t in times[name])
        med[name] = secs
        peak = max(t["peak_rss"] for t in times[name])
        say(f"| {label} | {secs:.2f} | {nbytes / 1e6 / secs:.1f} | {fmt_bytes(peak)} |")
    say()
    say(f"S3 / local time: **{med['s3'] / med['local']:.2f}x**. The same clusters.parquet "
        f"bytes: **{same}**. The S3 run lists the prefix, reads each shard by ranged requests "
        f"(and again to write data/), builds the outputs locally and publishes them through a "
        f"temporary prefix with a `_SUCCESS` manifest.")
    if not a.no_save:
        results.save("storage", "\n".join(LINES), {"lines": LINES})
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
