"""Exact-substring deduplication on real text, beside a suffix-array baseline.

    python bench/substr.py                 # about 170 MB of real text; saves the "substr" section
    python bench/substr.py --max-mb 20     # a smaller run

The corpus: every blank-line-separated paragraph of every
``/usr/share/doc/*/changelog*.gz`` and ``/usr/share/doc/*/copyright`` (files
in sorted order), one document each. ``gpu-dedup substr`` (words, L = 50,
keep first) runs as its own process (``bench/measure.py``: wall seconds and
peak RSS). The baseline, in the same run: the documents split into words in
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


def main(argv=None) -> int:
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
                                     str(a.min_length)]
        run_process(cmd + ["--overwrite"], 3600)           # fills Numba's cache
        r = run_process(cmd + ["--overwrite"], 3600)
        if r["rc"] != 0:
            raise SystemExit(r["stderr"])
        with open(os.path.join(out, "report.json")) as f:
            rep = json.load(f)
        import pyarrow.parquet as pq
        ours = pq.read_table(os.path.join(out, "documents.parquet"))["removed_units"].to_numpy()
        base, phases = suffix_array_removed(texts, a.min_length)
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
    say(f"| `gpu-dedup substr` (in memory) | {r['seconds']:.1f} | {fmt_bytes(r['peak_rss'])} | "
        f"{rep['units']['removed']:,} of {rep['units']['total']:,} "
        f"({100 * rep['units']['removed_share']:.2f}%) |")
    ph = ", ".join(f"{k} {v:.1f}s" for k, v in phases.items() if k != "total")
    say(f"| pydivsufsort suffix array + LCP (in this process; {ph}) | {phases['total']:.1f} | "
        f"– | {int(base.sum()):,} |")
    say()
    say(f"The same words removed from every document: **{same}**. "
        f"{rep['bytes']['removed_share'] * 100:.2f}% of the bytes removed, in "
        f"{rep['spans']['count']:,} spans; the most repeated passage occurs "
        f"{rep['repeated'][0]['occurrences'] if rep['repeated'] else 0:,} times.")
    if not a.no_save:
        results.save("substr", "\n".join(LINES), {"lines": LINES})
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
