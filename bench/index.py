"""The persistent index: incremental equals whole, contamination, scale.

    python bench/index.py                     # all three; saves the "index" section
    python bench/index.py --scale-docs 3000000 --query-docs 100000

* **Incremental equals whole**: debian-entries (57,795 real documents),
  shuffled and cut in two halves A and B. `gpu-dedup index build A`, then
  `gpu-dedup run B --against`, against one `gpu-dedup run` over A then B:
  the kept documents of B must be the same; seconds of each.
* **Contamination**: the distinct documents of debian-entries are the
  training corpus; the evaluation set has near-copies of training documents
  (a word in 40 replaced), passages of 60-90 words cut from inside training
  documents of 200 words or more, and unrelated real text (docstrings of
  Python's standard library). Share of each kind flagged by `gpu-dedup
  overlap`.
* **Scale**: an index of generated documents (``bench/generate.py``, 500
  bytes on average) built under a memory budget, then a query of
  ``--query-docs`` documents (half of them edited copies of indexed ones):
  seconds, peak RSS, and how many key files the query read.

Every step runs as its own ``gpu-dedup`` process (``bench/measure.py``:
wall seconds and peak RSS of the process tree).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import corpora  # noqa: E402
import results  # noqa: E402
from run import fmt_bytes, gpu_dedup_command, run_process  # noqa: E402

LINES = results.Lines()
say = LINES.say


def gd(*args, timeout: float = 3600) -> dict:
    r = run_process(gpu_dedup_command() + list(args), timeout)
    if r["rc"] != 0:
        raise SystemExit(f"gpu-dedup {' '.join(args[:2])} failed: {r['stderr'][-2000:]}")
    return r


def _write(path: str, rows) -> str:
    with open(path, "w", encoding="utf-8") as f:
        for i, t in rows:
            f.write(json.dumps({"id": i, "text": t}) + "\n")
    return path


def _kept(out: str) -> dict:
    import pyarrow.parquet as pq
    t = pq.read_table(os.path.join(out, "clusters.parquet"), columns=["id", "kept",
                                                                       "duplicate_of"])
    return {r["id"]: (r["kept"], r["duplicate_of"]) for r in t.to_pylist()}


def _texts(path: str) -> list[str]:
    t = corpora.read_texts(path)
    return t.to_pylist() if hasattr(t, "to_pylist") else list(t)


def incremental(tmp: str) -> None:
    spec = corpora.debian_entries()
    texts = _texts(spec.path)
    rows = [(f"d{i}", t) for i, t in enumerate(texts)]
    random.Random(0).shuffle(rows)
    half = len(rows) // 2
    a = _write(os.path.join(tmp, "A.jsonl"), rows[:half])
    b = _write(os.path.join(tmp, "B.jsonl"), rows[half:])
    ab = _write(os.path.join(tmp, "AB.jsonl"), rows)
    idx = os.path.join(tmp, "idx")
    r_build = gd("index", "build", a, "--index", idx, "-q")
    r_query = gd("run", b, "-o", os.path.join(tmp, "inc"), "--against", idx, "-q", "--no-html")
    r_whole = gd("run", ab, "-o", os.path.join(tmp, "whole"), "-q", "--no-html")
    inc, whole = _kept(os.path.join(tmp, "inc")), _kept(os.path.join(tmp, "whole"))
    same_kept = all(inc[i][0] == whole[i][0] for i in inc)
    removed = [i for i in inc if not inc[i][0]]
    same_dup = sum(inc[i][1] == whole[i][1] for i in removed)
    n_kept = sum(v[0] for v in inc.values())
    with open(os.path.join(tmp, "inc", "report.json")) as f:
        against = json.load(f)["against"][0]
    say(f"**Incremental equals whole** ({spec.name}, shuffled, halves of {half:,} and "
        f"{len(rows) - half:,} documents; defaults: char 5-grams after nfkc,lower,ws, "
        f"t = 0.8):")
    say()
    say("| step | seconds | peak RSS |")
    say("|---|---|---|")
    say(f"| `index build A` | {r_build['seconds']:.2f} | {fmt_bytes(r_build['peak_rss'])} |")
    say(f"| `run B --against` | {r_query['seconds']:.2f} | {fmt_bytes(r_query['peak_rss'])} |")
    say(f"| `run A+B` (one run) | {r_whole['seconds']:.2f} | "
        f"{fmt_bytes(r_whole['peak_rss'])} |")
    say()
    say(f"B's kept documents identical to the whole run's: **{same_kept}** ({n_kept:,} kept, "
        f"{len(removed):,} removed); `duplicate_of` the same for {same_dup:,} of the "
        f"{len(removed):,} removed (a document identical to one that A removed may name "
        f"another indexed document, as similar). The query read {against['matched']:,} of "
        f"the {against['indexed']:,} indexed documents and {against['key_files_read']} of "
        f"{against['key_files']} key files.")
    say()


def contamination(tmp: str) -> None:
    import pyarrow.parquet as pq
    spec = corpora.debian_entries()
    train = list(dict.fromkeys(_texts(spec.path)))
    rng = random.Random(2)
    doc = corpora.stdlib_docstrings()
    items = corpora.contamination_items(train, rng, 500, 500,
                                        rng.sample(doc, min(1000, len(doc))))
    tr = _write(os.path.join(tmp, "train.jsonl"), [(f"t{i}", t) for i, t in enumerate(train)])
    ev = _write(os.path.join(tmp, "eval.jsonl"),
                [(f"{k}-{i}", t) for i, (k, t) in enumerate(items)])
    idx = os.path.join(tmp, "cidx")
    r_build = gd("index", "build", tr, "--index", idx, "-q")
    r_ov = gd("overlap", ev, "--against", idx, "-o", os.path.join(tmp, "ov"), "-q")
    t = pq.read_table(os.path.join(tmp, "ov", "overlap.parquet")).to_pylist()
    by: dict = {}
    for r in t:
        by.setdefault(r["id"].split("-")[0], []).append(r)
    say(f"**Contamination** (`gpu-dedup overlap`, threshold 0.8): {len(train):,} distinct "
        f"documents of {spec.name} indexed in {r_build['seconds']:.1f}s; {len(items):,} "
        f"evaluation items checked in {r_ov['seconds']:.2f}s "
        f"(peak RSS {fmt_bytes(r_ov['peak_rss'])}).")
    say()
    say("| items | count | flagged | as near-duplicate | as contained |")
    say("|---|---|---|---|---|")
    for k, label in (("near", "near-copies (a word in 40 replaced)"),
                     ("passage", "passages of 60-90 words from inside longer documents"),
                     ("unrelated", "unrelated real text (standard-library docstrings)")):
        rs = by.get(k, [])
        f = sum(r["flagged"] for r in rs)
        nd = sum(r["kind"] == "near-duplicate" for r in rs)
        ct = sum(r["kind"] == "contained" for r in rs)
        say(f"| {label} | {len(rs):,} | {f:,} ({100 * f / max(1, len(rs)):.1f}%) | {nd:,} | "
            f"{ct:,} |")
    say()


def scale(tmp: str, docs: int, query_docs: int, budget: str, shards: int) -> None:
    import generate
    folder = os.path.join(tmp, "scale")
    os.makedirs(folder)
    per = -(-docs // shards)
    for k in range(shards):
        generate.main(["--docs", str(min(per, docs - k * per)), "--out",
                       os.path.join(folder, f"part-{k:03d}.jsonl"), "--seed", str(k),
                       "--quiet"])
    for name in os.listdir(folder):             # the generator's truth: not an input
        if name.endswith(".truth.parquet"):
            os.unlink(os.path.join(folder, name))
    src = os.path.join(folder, "part-000.jsonl")
    qsrc = os.path.join(tmp, f"gen_q_{query_docs}.jsonl")
    generate.main(["--docs", str(query_docs), "--out", qsrc, "--seed", "9999", "--quiet"])
    # half of the query: edited copies of indexed documents
    with open(src, encoding="utf-8") as f:
        base = [json.loads(next(f))["text"] for _ in range(query_docs // 2)]
    rng = random.Random(5)
    q = os.path.join(tmp, "query.jsonl")
    with open(q, "w", encoding="utf-8") as out, open(qsrc, encoding="utf-8") as f:
        for i, t in enumerate(base):
            w = t.split()
            w[rng.randrange(len(w))] = "edited"
            out.write(json.dumps({"id": f"copy{i}", "text": " ".join(w)}) + "\n")
        for i, line in enumerate(f):
            if i >= query_docs - len(base):
                break
            out.write(json.dumps({"id": f"new{i}", "text": json.loads(line)["text"]}) + "\n")
    idx = os.path.join(tmp, "sidx")
    # each shard numbers its documents from 0: ids are generated (FILE:LINE)
    r_build = gd("index", "build", folder, "--index", idx, "-q", "--memory-limit", budget,
                 "--id-field", "none")
    r_query = gd("run", q, "-o", os.path.join(tmp, "sq"), "--against", idx, "-q", "--no-html",
                 "--memory-limit", budget)
    with open(os.path.join(tmp, "sq", "report.json")) as f:
        rep = json.load(f)
    a = rep["against"][0]
    size = sum(os.path.getsize(os.path.join(dp, n)) for dp, _, ns in os.walk(idx) for n in ns)
    say(f"**Scale**: an index of {docs:,} generated documents (`bench/generate.py`, about "
        f"500 bytes each, {shards} shards), `--memory-limit {budget}`:")
    say()
    say("| step | seconds | peak RSS | detail |")
    say("|---|---|---|---|")
    say(f"| `index build` | {r_build['seconds']:.1f} | {fmt_bytes(r_build['peak_rss'])} | "
        f"{a['indexed']:,} documents kept and indexed, {size / 2 ** 30:.2f} GiB on disk |")
    say(f"| `run --against` ({query_docs:,} documents, half edited copies) | "
        f"{r_query['seconds']:.1f} | {fmt_bytes(r_query['peak_rss'])} | read "
        f"{a['matched']:,} indexed documents; opened {a['key_files_read']:,} of "
        f"{a['key_files']:,} key files (memory-mapped, binary-searched: "
        f"{a['key_entries_matched']:,} entries matched); removed "
        f"{rep['documents']['removed']:,} |")
    say()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale-docs", type=int, default=1_000_000)
    ap.add_argument("--query-docs", type=int, default=100_000)
    ap.add_argument("--memory-limit", default="4GiB")
    ap.add_argument("--scale-shards", type=int, default=4, help="input shards of the scale corpus")
    ap.add_argument("--skip-scale", action="store_true")
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="gpu-dedup-index-bench-")
    try:
        say(f"Machine: {results.machine_line(results.machine())}.")
        say()
        incremental(tmp)
        contamination(tmp)
        if not a.skip_scale:
            scale(tmp, a.scale_docs, a.query_docs, a.memory_limit, a.scale_shards)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if not a.no_save:
        results.save("index", "\n".join(LINES), {"lines": LINES})
    return 0


if __name__ == "__main__":
    sys.exit(main())
