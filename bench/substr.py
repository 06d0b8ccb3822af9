"""Exact-substring deduplication on real text, beside a suffix-array baseline.

    python bench/substr.py                 # about 170 MB of real text; saves the "substr" section
    python bench/substr.py --max-mb 20     # a smaller run

The corpus: every blank-line-separated paragraph of every
``/usr/share/doc/*/changelog*.gz`` and ``/usr/share/doc/*/copyright`` (files
in sorted order), one document each. ``gpu-dedup substr`` (words, L = 50,
keep first) runs as its own process (``bench/measure.py``: wall seconds and
peak RSS), in memory and under ``--memory-limit 1GiB`` (out of core, through
the work directory); the two must write the same bytes. The baseline, in the
same run and also its own process: the documents split into words in
Python, the words numbered, a suffix array of the word sequence
(``pydivsufsort.divsufsort``, documents apart by separators) and its LCP
array (``kasai``); runs of suffixes sharing at least L words give the
repeated windows. Both must remove the same words of every document.
"""
from __future__ import annotations

import argparse
import glob
import gzip
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

import results  # noqa: E402
from run import fmt_bytes, gpu_dedup_command, run_process  # noqa: E402

LINES = results.Lines()
say = LINES.say


def corpus(max_bytes: int) -> list[str]:
    docs, total = [], 0
    paths = sorted(glob.glob("/usr/share/doc/*/changelog*.gz")) + \
        sorted(glob.glob("/usr/share/doc/*/copyright"))
    for p in paths:
        try:
            raw = gzip.open(p).read() if p.endswith(".gz") else open(p, "rb").read()
        except (OSError, EOFError):
            continue
        for para in raw.decode("utf-8", errors="replace").split("\n\n"):
            para = para.strip()
            if para:
                docs.append(para)
                total += len(para.encode("utf-8"))
        if total >= max_bytes:
            break
    return docs


def suffix_array_removed(texts: list[str], L: int) -> tuple[np.ndarray, dict]:
    """Words removed per document (keep first) by a suffix array, and seconds per phase."""
    from pydivsufsort import divsufsort, kasai
    t0 = time.perf_counter()
    vocab: dict = {}
    seq, doc, pos, lens = [], [], [], []
    for d, t in enumerate(texts):
        ws = t.split()
        lens.append(len(ws))
        for i, w in enumerate(ws):
            seq.append(vocab.setdefault(w, len(vocab)))
            doc.append(d)
            pos.append(i)
        seq.append(-1 - d)               # a separator, unique
        doc.append(d)
        pos.append(-1)
    s = np.array(seq, dtype=np.int64)
    s = np.where(s < 0, len(vocab) - 1 - s, s)
    doc, pos, lens = np.array(doc), np.array(pos), np.array(lens)
    t1 = time.perf_counter()
    sa = divsufsort(s)
    lcp = kasai(s, sa)
    t2 = time.perf_counter()
    # runs of adjacent suffixes sharing >= L words; all but the earliest removed
    start_ok = (pos[sa] >= 0) & (pos[sa] + L <= lens[doc[sa]])
    brk = np.ones(sa.size, bool)
    brk[1:] = lcp[:-1] < L
    grp = np.cumsum(brk) - 1
    first = np.full(grp[-1] + 1, np.iinfo(np.int64).max)
    np.minimum.at(first, grp[start_ok], sa[start_ok])
    rem = start_ok & (sa != first[grp])
    starts = sa[rem]
    flag = np.zeros(s.size + 1, np.int64)
    np.add.at(flag, starts, 1)
    np.add.at(flag, starts + L, -1)
    removed_tok = np.cumsum(flag)[:s.size] > 0
    words = pos >= 0
    out = np.bincount(doc[words & removed_tok], minlength=len(texts))
    t3 = time.perf_counter()
    return out, {"words": t1 - t0, "suffix array + LCP": t2 - t1, "windows": t3 - t2,
                 "total": t3 - t0}


def baseline_main(src: str, L: int, out: str) -> None:
    """The baseline as its own process: words removed per document to ``out``
    (.npy), its phases' seconds to ``out``.json."""
    with open(src, encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f]
    removed, phases = suffix_array_removed(texts, L)
    np.save(out, removed)
    with open(out + ".json", "w") as f:
        json.dump(phases, f)


def _same_bytes(a: str, b: str) -> bool:
    names = ["spans.parquet", "documents.parquet", "data/docs.jsonl"]
    return all(open(os.path.join(a, n), "rb").read() == open(os.path.join(b, n), "rb").read()
               for n in names)


def main(argv=None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--baseline":
        baseline_main(sys.argv[2], int(sys.argv[3]), sys.argv[4])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-mb", type=float, default=1000.0, help="stop reading at this size")
    ap.add_argument("--min-length", type=int, default=50)
    ap.add_argument("--no-save", action="store_true")
    a = ap.parse_args(argv)
    texts = corpus(int(a.max_mb * 1e6))
    nbytes = sum(len(t.encode("utf-8")) for t in texts)
    tmp = tempfile.mkdtemp(prefix="gpu-dedup-substr-bench-")
    try:
        src = os.path.join(tmp, "docs.jsonl")
        with open(src, "w", encoding="utf-8") as f:
            for i, t in enumerate(texts):
                f.write(json.dumps({"id": str(i), "text": t}) + "\n")
        out = os.path.join(tmp, "out")
        cmd = gpu_dedup_command() + ["substr", src, "-o", out, "-q", "--min-length",
                                     str(a.min_length), "--overwrite"]
        run_process(cmd, 3600)                            # fills Numba's cache
        r = run_process(cmd, 3600)
        if r["rc"] != 0:
            raise SystemExit(r["stderr"])
        with open(os.path.join(out, "report.json")) as f:
            rep = json.load(f)
        out_b = os.path.join(tmp, "out-1g")
        cmd_b = gpu_dedup_command() + ["substr", src, "-o", out_b, "-q", "--min-length",
                                       str(a.min_length), "--memory-limit", "1GiB"]
        rb = run_process(cmd_b, 3600)
        if rb["rc"] != 0:
            raise SystemExit(rb["stderr"])
        with open(os.path.join(out_b, "report.json")) as f:
            rep_b = json.load(f)
        same_bytes = _same_bytes(out, out_b)
        import pyarrow.parquet as pq
        ours = pq.read_table(os.path.join(out, "documents.parquet"))["removed_units"].to_numpy()
        npy = os.path.join(tmp, "baseline.npy")
        rs = run_process([sys.executable, os.path.abspath(__file__), "--baseline", src,
                          str(a.min_length), npy], 3600)
        if rs["rc"] != 0:
            raise SystemExit(rs["stderr"])
        base = np.load(npy)
        with open(npy + ".json") as f:
            phases = json.load(f)
        same = bool(np.array_equal(ours, base))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    say(f"Machine: {results.machine_line(results.machine())}.")
    say()
    say(f"Corpus: {len(texts):,} real documents, {nbytes / 1e6:.1f} MB (paragraphs of "
        f"/usr/share/doc/*/changelog*.gz and */copyright); words, L = {a.min_length}, keep "
        f"first.")
    say()
    say("| system | seconds | peak RSS | words removed |")
    say("|---|---|---|---|")
    removed = (f"{rep['units']['removed']:,} of {rep['units']['total']:,} "
               f"({100 * rep['units']['removed_share']:.2f}%)")
    say(f"| `gpu-dedup substr` (in memory) | {r['seconds']:.1f} | {fmt_bytes(r['peak_rss'])} | "
        f"{removed} |")
    w = rep_b["work"]
    say(f"| `gpu-dedup substr --memory-limit 1GiB` ({w['store']} store: {w['chunks']} chunks, "
        f"{w['units'].get('windows', 0)} window ranges) | {rb['seconds']:.1f} | "
        f"{fmt_bytes(rb['peak_rss'])} | {rep_b['units']['removed']:,} |")
    ph = ", ".join(f"{k} {v:.1f}s" for k, v in phases.items() if k != "total")
    say(f"| pydivsufsort suffix array + LCP ({ph}) | {rs['seconds']:.1f} | "
        f"{fmt_bytes(rs['peak_rss'])} | {int(base.sum()):,} |")
    say()
    say(f"The same words removed from every document as the suffix array: **{same}**; the "
        f"out-of-core run wrote the same bytes as the in-memory one: **{same_bytes}**. "
        f"{rep['bytes']['removed_share'] * 100:.2f}% of the bytes removed, in "
        f"{rep['spans']['count']:,} spans; the most repeated passage occurs "
        f"{rep['repeated'][0]['occurrences'] if rep['repeated'] else 0:,} times. Seconds are "
        f"wall time of each process, reading and writing included (the suffix array's: "
        f"reading the JSONL and splitting words in Python included).")
    if not a.no_save:
        results.save("substr", "\n".join(LINES), {"lines": LINES})
    return 0 if same and same_bytes else 1


if __name__ == "__main__":
    sys.exit(main())
