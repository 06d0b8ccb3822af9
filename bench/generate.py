"""A realistic synthetic corpus of any size, with its planted truth.

    python bench/generate.py --docs 1000000 --out corpus.jsonl.zst [--mean-bytes 500] [--seed 0]

writes ``corpus.jsonl.zst`` (one ``{"id": "...", "text": "..."}`` per line;
``.jsonl``, ``.jsonl.gz`` or ``.jsonl.zst``) and beside it
``corpus.truth.parquet`` with one row per document: ``id``, ``cluster`` (the id
number of the original it was made from; its own for an original), ``kind``
(0 original, 1 near-duplicate, 2 exact copy) and ``parent`` (the document it
was edited from; -1 for an original).

What the documents look like:

* **Vocabulary**: 60,000 made-up lower-case words with Zipf-Mandelbrot
  frequencies (rank ``r`` drawn with weight ``1 / (r + 2.7) ** 1.07``), the
  frequent words short, plus dates (``2019-03-14``) and numbers (``94.2%``,
  ``1,250``) that make up about 3% of the tokens.
* **Lengths**: log-normal numbers of words (sigma 1.1) scaled to the mean
  size asked for, clipped to 8..8,000 words: from tens to thousands of words.
* **Boilerplate**: some originals carry a site footer; copies may gain or
  change a header ("Posted on DATE by ...") and a footer, as scraped pages do.
* **Near-duplicate clusters**: 22% of the originals get copies; the number of
  copies is 1 + a heavy-tailed (Pareto, alpha 1.6) draw capped at 200, so most clusters are pairs and
  a few are large (``--copies-share``, ``--copies-alpha`` and ``--max-copies``
  change them: ``bench/scale.py --heavy`` asks for clusters of up to 100,000). A copy is derived from the original, or (30%) from the
  previous copy, which makes chains. 20% of copies are exact; the rest get
  a mix of edits: word substitutions (up to 6% of the words), insertions and
  deletions (up to 3%), changed dates and numbers (as in "trained on
  2023-10-12" -> "trained on 2023-10-14"), and new headers and footers.
* **Order**: documents are shuffled within blocks of ``--batch`` documents,
  so copies are not next to their originals.

Generation is compiled with Numba and streams block by block: ten million
documents of 500 bytes take a few minutes on two cores. The same arguments
always give the same bytes.
"""
from __future__ import annotations

import argparse
import gzip
import os
import sys
import time

import numpy as np
from numba import njit, prange

N_WORDS = 60_000
N_DATES = 9_000          # days from 2000-01-01
N_NUMBERS = 3_000

HEADERS = [
    "Posted on {date} by admin",
    "Home | News | Sports | Business | Contact",
    "Last updated {date}. Reading time: 4 min",
    "Skip to main content. Menu. Search",
    "Breaking news from around the world, updated {date}",
    "You are here: Home / Articles / Archive",
    "Sponsored content. Advertisement",
    "From Wikipedia, the free encyclopedia",
    "Press release. For immediate release {date}",
    "Log in | Register | Help",
    "This article was first published on {date}",
    "Share on Facebook. Share on Twitter. Share by email",
]
FOOTERS = [
    "Copyright {year} Example Media Group. All rights reserved.",
    "Subscribe to our newsletter for weekly updates.",
    "Terms of use | Privacy policy | Cookie settings",
    "This page was last edited on {date}.",
    "Comments are closed.",
    "Related posts: more from this author.",
    "Read more. Click here to continue.",
    "All content is available under a free license unless otherwise noted.",
    "Follow us on social media for the latest news.",
    "Powered by a content management system. Theme by a designer.",
    "Report an error. Contact the editors.",
    "Tags: news, world, analysis, opinion",
]


# -- vocabulary --------------------------------------------------------------

def _dates(n: int) -> list[str]:
    base = np.datetime64("2000-01-01")
    return [str(base + np.timedelta64(int(d), "D")) for d in range(n)]


def _numbers(rng, n: int) -> list[str]:
    out = []
    for k in range(n):
        form = k % 5
        if form == 0:
            out.append(str(int(rng.integers(0, 100))))
        elif form == 1:
            out.append(f"{rng.integers(0, 1000) / 10:.1f}%")
        elif form == 2:
            out.append(f"{int(rng.integers(1, 1000))},{int(rng.integers(0, 1000)):03d}")
        elif form == 3:
            out.append(f"{rng.integers(0, 100000) / 100:.2f}")
        else:
            out.append(str(int(rng.integers(100, 10000))))
    return out


def _words(rng, n: int) -> list[str]:
    """``n`` distinct made-up words, shortest first (the most frequent ranks)."""
    letters = np.frombuffer(b"etaoinshrdlcumwfgypbvkjxqz", dtype=np.uint8)
    weights = np.array([12.7, 9.1, 8.2, 7.5, 7.0, 6.7, 6.3, 6.1, 6.0, 4.3, 4.0, 2.8, 2.8,
                        2.4, 2.4, 2.2, 2.0, 2.0, 1.9, 1.5, 1.0, 0.8, 0.15, 0.15, 0.1, 0.07])
    weights /= weights.sum()
    seen = set()
    out = []
    while len(out) < n:
        m = (n - len(out)) * 2
        lens = np.clip(np.round(rng.gamma(4.0, 1.6, size=m)).astype(int), 1, 18)
        chars = rng.choice(letters, size=int(lens.sum()), p=weights)
        pos = 0
        for L in lens.tolist():
            w = chars[pos:pos + L].tobytes().decode()
            pos += L
            if w not in seen:
                seen.add(w)
                out.append(w)
                if len(out) == n:
                    break
    out.sort(key=len)
    # a little disorder: frequent words are mostly, not strictly, the shortest
    idx = np.arange(n) + rng.normal(0, n * 0.02, size=n)
    return [out[i] for i in np.argsort(idx, kind="stable")]


class Vocabulary:
    """Token strings as one byte buffer, and the sampling distribution."""

    def __init__(self, seed: int = 0):
        rng = np.random.default_rng([seed, 17])
        words = _words(rng, N_WORDS)
        dates = _dates(N_DATES)
        numbers = _numbers(rng, N_NUMBERS)
        self.tokens = words + dates + numbers
        self.n_words = N_WORDS
        self.date_lo = N_WORDS
        self.n_dates = N_DATES
        self.num_lo = N_WORDS + N_DATES
        self.n_nums = N_NUMBERS
        enc = [t.encode("ascii") for t in self.tokens]
        self.off = np.zeros(len(enc) + 1, np.int64)
        self.off[1:] = np.cumsum([len(e) for e in enc])
        self.data = np.frombuffer(b"".join(enc), dtype=np.uint8).copy()
        ranks = np.arange(N_WORDS, dtype=np.float64)
        w = 1.0 / (ranks + 2.7) ** 1.07
        self.cdf = np.cumsum(w / w.sum())
        self.cdf[-1] = 1.0
        self.p_numeric = 0.03
        lens = np.diff(self.off)
        word_bytes = float((w / w.sum() * lens[:N_WORDS]).sum())
        other = float(lens[N_WORDS:].mean())
        self.mean_token_bytes = (1 - self.p_numeric) * word_bytes + self.p_numeric * other + 1.0
        self.headers, self.header_off = self._boiler(HEADERS, rng)
        self.footers, self.footer_off = self._boiler(FOOTERS, rng)

    @staticmethod
    def _boiler(templates, rng, variants: int = 8):
        """Each template rendered with a few dates: ``len(templates) * variants``
        strings as a byte buffer and offsets."""
        dates = _dates(N_DATES)
        texts = []
        for tpl in templates:
            for _ in range(variants):
                d = dates[int(rng.integers(len(dates)))]
                texts.append(tpl.format(date=d, year=d[:4]))
        enc = [t.encode("ascii") for t in texts]
        off = np.zeros(len(enc) + 1, np.int64)
        off[1:] = np.cumsum([len(e) for e in enc])
        return np.frombuffer(b"".join(enc), dtype=np.uint8).copy(), off


# -- one block of documents ----------------------------------------------------

@njit(cache=True)
def _zipf_word(cdf):
    return np.int64(np.searchsorted(cdf, np.random.random(), side="right"))


@njit(cache=True)
def _token(cdf, p_numeric, date_lo, n_dates, num_lo, n_nums):
    if np.random.random() < p_numeric:
        if np.random.random() < 0.5:
            return date_lo + np.random.randint(0, n_dates)
        return num_lo + np.random.randint(0, n_nums)
    w = _zipf_word(cdf)
    if w >= cdf.shape[0]:
        w = cdf.shape[0] - 1
    return w


@njit(cache=True)
def _grow(a, need):
    if need <= a.shape[0]:
        return a
    cap = a.shape[0] * 2
    while cap < need:
        cap *= 2
    b = np.empty(cap, a.dtype)
    b[:a.shape[0]] = a
    return b


@njit(cache=True)
def _gen_block(seed, n, mu, sigma, min_words, max_words, cdf, p_numeric, date_lo, n_dates,
               num_lo, n_nums, n_headers, n_footers, p_dup, p_exact, p_chain,
               p_orig_footer, max_copies, alpha):
    """Documents of one block, in generation order (originals before their
    copies). Returns tokens (CSR), header and footer ids (-1 none), kind,
    parent (generation index; -1 for originals) and the output permutation."""
    np.random.seed(seed)
    src = np.full(n, -1, np.int64)
    kind = np.zeros(n, np.int8)
    i = 0
    while i < n:
        orig = i
        i += 1
        if np.random.random() < p_dup:
            u = 1.0 - np.random.random()
            c = 1 + np.int64(min(u ** (-1.0 / alpha) - 1.0, max_copies - 1))
            prev = orig
            for _ in range(c):
                if i >= n:
                    break
                parent = prev if np.random.random() < p_chain else orig
                src[i] = parent
                kind[i] = 2 if np.random.random() < p_exact else 1
                prev = i
                i += 1
    tok = np.empty(max(16, n * 64), np.int64)
    off = np.zeros(n + 1, np.int64)
    header = np.full(n, -1, np.int64)
    footer = np.full(n, -1, np.int64)
    for d in range(n):
        start = off[d]
        if src[d] < 0:
            L = np.int64(np.exp(mu + sigma * np.random.standard_normal()))
            L = max(min_words, min(max_words, L))
            tok = _grow(tok, start + L)
            for k in range(L):
                tok[start + k] = _token(cdf, p_numeric, date_lo, n_dates, num_lo, n_nums)
            off[d + 1] = start + L
            if np.random.random() < p_orig_footer:
                footer[d] = np.random.randint(0, n_footers)
            continue
        p = src[d]
        p0 = off[p]
        p1 = off[p + 1]
        if kind[d] == 2:
            tok = _grow(tok, start + (p1 - p0))
            tok[start:start + (p1 - p0)] = tok[p0:p1]
            off[d + 1] = start + (p1 - p0)
            header[d] = header[p]
            footer[d] = footer[p]
            continue
        sub = np.random.random() * 0.06 if np.random.random() < 0.7 else 0.0
        indel = np.random.random() * 0.03 if np.random.random() < 0.5 else 0.0
        renum = np.random.random() < 0.5
        tok = _grow(tok, start + 2 * (p1 - p0) + 2)
        m = start
        changed = False
        for q in range(p0, p1):
            t = tok[q]
            r = np.random.random()
            if r < indel * 0.5:
                changed = True
                continue
            if r < indel:
                tok[m] = _token(cdf, p_numeric, date_lo, n_dates, num_lo, n_nums)
                m += 1
                changed = True
            if renum and t >= date_lo and np.random.random() < 0.7:
                if t < num_lo:
                    t = date_lo + min(n_dates - 1, max(0, t - date_lo + np.random.randint(-30, 31)))
                else:
                    t = num_lo + np.random.randint(0, n_nums)
            elif sub > 0.0 and np.random.random() < sub:
                t = _token(cdf, p_numeric, date_lo, n_dates, num_lo, n_nums)
            if t != tok[q]:
                changed = True
            tok[m] = t
            m += 1
        if m == start:
            tok[m] = tok[p0]
            m += 1
        r = np.random.random()
        header[d] = np.random.randint(0, n_headers) if r < 0.3 else header[p]
        r = np.random.random()
        if r < 0.2:
            footer[d] = np.random.randint(0, n_footers)
        elif r < 0.3:
            footer[d] = -1
        else:
            footer[d] = footer[p]
        if not changed and header[d] == header[p] and footer[d] == footer[p]:
            # a near-duplicate differs from its parent: substitute one word
            q = start + np.random.randint(0, m - start)
            t = tok[q]
            while t == tok[q]:
                t = _token(cdf, p_numeric, date_lo, n_dates, num_lo, n_nums)
            tok[q] = t
        off[d + 1] = m
    perm = np.random.permutation(n)
    return tok[:off[n]], off, header, footer, kind, src, perm


@njit(cache=True)
def _piece(out, pos, data, a, b):
    for k in range(a, b):
        out[pos] = data[k]
        pos += 1
    return pos


@njit(cache=True)
def _digits(v):
    c = 1
    while v >= 10:
        v //= 10
        c += 1
    return c


@njit(cache=True)
def _write_int(out, pos, v):
    c = _digits(v)
    for k in range(c - 1, -1, -1):
        out[pos + k] = 48 + v % 10
        v //= 10
    return pos + c


@njit(parallel=True, cache=True)
def _render(tok, off, header, footer, order, first_id, vdata, voff, hdata, hoff, fdata, foff):
    """JSONL lines of the documents ``order[0], order[1], ...`` (generation
    indices), with ids ``first_id + position``. Texts are ASCII with no
    character JSON must escape."""
    n = order.shape[0]
    pre = np.frombuffer(b'{"id": "', np.uint8)
    mid = np.frombuffer(b'", "text": "', np.uint8)
    end = np.frombuffer(b'"}\n', np.uint8)
    size = np.empty(n, np.int64)
    text_len = np.empty(n, np.int64)
    for o in prange(n):
        d = order[o]
        L = 0
        for q in range(off[d], off[d + 1]):
            L += voff[tok[q] + 1] - voff[tok[q]] + 1
        L -= 1
        if header[d] >= 0:
            L += hoff[header[d] + 1] - hoff[header[d]] + 1
        if footer[d] >= 0:
            L += foff[footer[d] + 1] - foff[footer[d]] + 1
        text_len[o] = L
        size[o] = pre.shape[0] + _digits(first_id + o) + mid.shape[0] + L + end.shape[0]
    start = np.zeros(n + 1, np.int64)
    for o in range(n):
        start[o + 1] = start[o] + size[o]
    out = np.empty(start[n], np.uint8)
    for o in prange(n):
        d = order[o]
        p = _piece(out, start[o], pre, 0, pre.shape[0])
        p = _write_int(out, p, first_id + o)
        p = _piece(out, p, mid, 0, mid.shape[0])
        if header[d] >= 0:
            p = _piece(out, p, hdata, hoff[header[d]], hoff[header[d] + 1])
            out[p] = 32
            p += 1
        for q in range(off[d], off[d + 1]):
            if q > off[d]:
                out[p] = 32
                p += 1
            p = _piece(out, p, vdata, voff[tok[q]], voff[tok[q] + 1])
        if footer[d] >= 0:
            out[p] = 32
            p += 1
            p = _piece(out, p, fdata, foff[footer[d]], foff[footer[d] + 1])
        p = _piece(out, p, end, 0, end.shape[0])
    return out, text_len


# -- the corpus ------------------------------------------------------------------

def _open_out(path: str, name: str):
    """Open ``path`` for writing, compressed as the suffix of ``name`` says."""
    p = name.lower()
    if p.endswith(".gz"):
        return gzip.open(path, "wb", compresslevel=1)
    if p.endswith(".zst") or p.endswith(".zstd"):
        import zstandard
        raw = open(path, "wb")
        return zstandard.ZstdCompressor(level=1, threads=-1).stream_writer(raw, closefd=True)
    return open(path, "wb", buffering=16 << 20)


def truth_path_for(out: str) -> str:
    """``corpus.jsonl.zst`` -> ``corpus.truth.parquet``."""
    base = out
    for suffix in (".gz", ".zst", ".zstd"):
        if base.lower().endswith(suffix):
            base = base[: -len(suffix)]
    for suffix in (".jsonl", ".ndjson", ".json"):
        if base.lower().endswith(suffix):
            base = base[: -len(suffix)]
    return base + ".truth.parquet"


def generate(docs: int, out: str, mean_bytes: int = 500, seed: int = 0, batch: int = 100_000,
             truth_path: str | None = None, progress=None, copies_share: float = 0.22,
             copies_alpha: float = 1.6, max_copies: int = 200) -> dict:
    """Write ``docs`` documents to ``out`` and the planted truth beside it.

    ``copies_share`` of the originals get copies; their number is 1 + a
    Pareto(``copies_alpha``) draw capped at ``max_copies`` (a cluster lies
    within one block of ``batch`` documents).

    Returns counts: documents, text bytes, originals, near duplicates, exact
    copies, clusters with copies, and the largest cluster.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq
    if docs < 0:
        raise ValueError("--docs must be >= 0")
    if mean_bytes < 20:
        raise ValueError("--mean-bytes must be at least 20")
    voc = Vocabulary(seed)
    sigma = 1.1
    overhead = 0.15 * 40 + 0.12 * 45      # expected header and footer bytes per document
    mean_words = max(8.0, (mean_bytes - overhead) / voc.mean_token_bytes)
    mu = float(np.log(mean_words) - sigma ** 2 / 2)
    truth_path = truth_path or truth_path_for(out)
    tmp_out = f"{out}.tmp-{os.getpid()}"
    tmp_truth = f"{truth_path}.tmp-{os.getpid()}"
    schema = pa.schema([("id", pa.string()), ("cluster", pa.int64()), ("kind", pa.int8()),
                        ("parent", pa.int64())])
    stats = {"documents": docs, "text_bytes": 0, "originals": 0, "near_duplicates": 0,
             "exact_copies": 0, "clusters_with_copies": 0, "largest_cluster": 1}
    n_headers = len(voc.header_off) - 1
    n_footers = len(voc.footer_off) - 1
    t0 = time.perf_counter()
    f = _open_out(tmp_out, out)
    writer = pq.ParquetWriter(tmp_truth, schema)
    try:
        done = 0
        block = 0
        while done < docs:
            n = min(batch, docs - done)
            tok, off, header, footer, kind, src, perm = _gen_block(
                np.int64((seed * 1_000_003 + block) % (2 ** 32)), n, mu, sigma, 8, 8000,
                voc.cdf, voc.p_numeric, voc.date_lo, voc.n_dates, voc.num_lo, voc.n_nums,
                n_headers, n_footers, copies_share, 0.2, 0.3, 0.1, max_copies,
                float(copies_alpha))
            # perm[g] is the output position of generation index g
            order = np.empty(n, np.int64)
            order[perm] = np.arange(n, dtype=np.int64)
            lines, text_len = _render(tok, off, header, footer, order, done, voc.data, voc.off,
                                      voc.headers, voc.header_off, voc.footers, voc.footer_off)
            f.write(memoryview(lines))
            root = _roots(src)
            ids = done + perm
            cluster = done + perm[root]
            parent = np.where(src >= 0, done + perm[np.maximum(src, 0)], -1)
            t = pa.table({"id": pa.array(ids.astype(str)), "cluster": cluster,
                          "kind": kind, "parent": parent}, schema=schema)
            writer.write_table(t.take(pa.array(order)))
            stats["text_bytes"] += int(text_len.sum())
            stats["originals"] += int((kind == 0).sum())
            stats["near_duplicates"] += int((kind == 1).sum())
            stats["exact_copies"] += int((kind == 2).sum())
            sizes = np.bincount(root, minlength=n)
            stats["clusters_with_copies"] += int((sizes > 1).sum())
            stats["largest_cluster"] = max(stats["largest_cluster"], int(sizes.max(initial=1)))
            done += n
            block += 1
            if progress:
                progress(done, docs, time.perf_counter() - t0)
    except BaseException:
        f.close()
        writer.close()
        for p in (tmp_out, tmp_truth):
            if os.path.exists(p):
                os.remove(p)
        raise
    f.close()
    writer.close()
    os.replace(tmp_out, out)
    os.replace(tmp_truth, truth_path)
    stats["mean_bytes"] = stats["text_bytes"] / max(1, docs)
    stats["seconds"] = time.perf_counter() - t0
    stats["truth"] = truth_path
    return stats


@njit(cache=True)
def _roots(src):
    root = np.arange(src.shape[0])
    for g in range(src.shape[0]):
        if src[g] >= 0:
            root[g] = root[src[g]]
    return root


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, required=True, help="number of documents")
    ap.add_argument("--out", required=True, help="output .jsonl, .jsonl.gz or .jsonl.zst")
    ap.add_argument("--mean-bytes", type=int, default=500, help="mean text size (default 500)")
    ap.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    ap.add_argument("--batch", type=int, default=100_000,
                    help="documents per block (shuffled within a block; default 100000)")
    ap.add_argument("--copies-share", type=float, default=0.22,
                    help="share of the originals that get copies (default 0.22)")
    ap.add_argument("--copies-alpha", type=float, default=1.6,
                    help="Pareto exponent of the number of copies (default 1.6; "
                         "smaller: heavier tail)")
    ap.add_argument("--max-copies", type=int, default=200,
                    help="most copies of one original (default 200)")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)

    def progress(done, total, secs):
        if not args.quiet:
            print(f"\r{done:,}/{total:,} documents, {secs:.1f}s", end="", file=sys.stderr)

    try:
        stats = generate(args.docs, args.out, args.mean_bytes, args.seed, args.batch,
                         progress=progress, copies_share=args.copies_share,
                         copies_alpha=args.copies_alpha, max_copies=args.max_copies)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not args.quiet:
        print(file=sys.stderr)
        print(f"{stats['documents']:,} documents ({stats['mean_bytes']:.0f} bytes mean), "
              f"{stats['near_duplicates']:,} near-duplicates and {stats['exact_copies']:,} exact "
              f"copies in {stats['clusters_with_copies']:,} clusters (largest "
              f"{stats['largest_cluster']}); {stats['seconds']:.1f}s; truth: {stats['truth']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
