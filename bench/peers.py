"""The peers gpu_dedup is compared with, each run as its own process.

    python bench/peers.py {cookbook,datasketch,rensa} --input CORPUS.jsonl --out DIR \\
        [--shingle char --ngram 5 --num-perm 128 --threshold 0.8 --seed 42]

Every peer reads the same JSONL file (Arrow's JSON reader, the fastest way
Python has), builds the same shingle sets as ``gpu-dedup run --normalize none``
(character n-grams of code points, or word n-grams of ``text.split()``; a
text shorter than n is one shingle; an empty text has none and is left out),
uses the same number of hash functions, chooses its bands for the threshold
the way its documentation does, and writes the pairs it reports:

* ``DIR/pairs.npy``: ``int64`` array ``(E, 2)``, ``a < b`` document indices;
* ``DIR/meta.json``: seconds per phase, bands and rows, whether the pairs
  were verified.

The harness (``bench/run.py``) clusters the pairs (connected components,
i.e. union-find) and scores them against exact truth.

The peers:

* ``cookbook``: the cookbook's from-scratch code, re-typed from its text:
  CRC32 base hash of ``str(shingle)``, ``K`` affine hashes ``(a*x + b) mod
  (2**61 - 1)`` over int64 (``np.outer``, as printed), a dict of buckets per
  band and every pair of each bucket as a candidate. Bands: ``b*r = K`` with
  the S-curve's approximate threshold ``(1/b)**(1/r)`` closest to the
  threshold, as its "How do I pick the similarity threshold?" answer says.
  Candidates are reported unverified, as in the cookbook.
* ``datasketch``: ``MinHash.bulk`` (SHA-1 based default hash) and
  ``MinHashLSH(threshold, num_perm)``, which picks ``(b, r)`` by minimising
  the weighted false-positive and false-negative areas; inserted in an
  insertion session, each document queried; candidates unverified, as in its
  documentation's examples.
* ``rensa``: ``RMinHash.from_token_sets`` and ``RMinHashLSH``, with the number
  of bands that rensa's own deduplicator picks for the threshold
  (``RMinHashDeduplicator(num_bands=None)``: 4 bands from 0.9, 8 from 0.8,
  16 from 0.7, 32 from 0.5, else ``K/2``); ``query_all`` for the candidates,
  each kept when the sketches' estimated Jaccard reaches the threshold, as
  that deduplicator does.
* ``rensa-dedup``: rensa's own pipeline to keep decisions,
  ``RMinHashDeduplicator(threshold, num_perm, use_lsh=True).add_pairs`` over
  the token lists in input order; writes ``DIR/kept.npy`` (bool per document)
  instead of pairs.
* ``rensa-matrix``: rensa's bulk path, ``digest_matrix_from_token_sets`` and
  ``RMinHashLSH.query_duplicate_flags_matrix_one_shot``; it flags both ends of
  a pair, so its ``kept.npy`` (the unflagged rows) is timed for speed, not a
  deduplication.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
import zlib

import numpy as np

PEERS = ("cookbook", "datasketch", "rensa", "rensa-dedup", "rensa-matrix")


# -- shared: read and shingle ------------------------------------------------

def read_texts(path: str) -> list[str]:
    import pyarrow as pa
    import pyarrow.json as pj
    t = pj.read_json(path, parse_options=pj.ParseOptions(
        explicit_schema=pa.schema([("text", pa.large_string())]),
        unexpected_field_behavior="ignore"),
        read_options=pj.ReadOptions(block_size=16 << 20))
    return t.column("text").to_pylist()


def char_shingles(text: str, n: int) -> set[str]:
    if len(text) < n:
        return {text} if text else set()
    return {text[i:i + n] for i in range(len(text) - n + 1)}


def word_shingles(text: str, n: int) -> set[str]:
    toks = text.split()
    if len(toks) < n:
        return {" ".join(toks)} if toks else set()
    return {" ".join(toks[i:i + n]) for i in range(len(toks) - n + 1)}


def shingle_all(texts, kind: str, n: int) -> list[set[str]]:
    """Each text's shingle set, by a set comprehension over the texts already
    in memory: the fastest plain Python, and what every peer is given."""
    if kind == "char":
        return [char_shingles(t, n) for t in texts]
    return [word_shingles(t, n) for t in texts]


def pairs_array(pairs) -> np.ndarray:
    if isinstance(pairs, np.ndarray):
        arr = pairs.reshape(-1, 2).astype(np.int64)
    else:
        arr = np.array(sorted(pairs), dtype=np.int64).reshape(-1, 2)
    if arr.size:
        arr = np.unique(np.sort(arr, axis=1), axis=0)
    return arr


# -- the cookbook ---------------------------------------------------------------

P61 = (1 << 61) - 1


def cookbook_bands(threshold: float, num_perm: int) -> tuple[int, int]:
    """``b * r = K`` whose ``(1/b)**(1/r)`` is closest to the threshold."""
    best = None
    for r in range(1, num_perm + 1):
        if num_perm % r:
            continue
        b = num_perm // r
        gap = abs((1.0 / b) ** (1.0 / r) - threshold)
        if best is None or gap < best[0]:
            best = (gap, b, r)
    return best[1], best[2]


def run_cookbook(sets, num_perm, threshold, seed, bands=None, rows=None):
    rng = np.random.default_rng(seed)
    a_h = rng.integers(1, P61, size=num_perm)
    b_h = rng.integers(0, P61, size=num_perm)

    def base_hash(shingle):
        return zlib.crc32(str(shingle).encode()) & 0x7fffffffffffffff

    def signature(shingle_set):
        ids = np.fromiter((base_hash(s) for s in shingle_set), dtype=np.int64)
        return np.min((np.outer(a_h, ids) + b_h[:, None]) % P61, axis=1)

    if bands is None:
        bands, rows = cookbook_bands(threshold, num_perm)
    t0 = time.perf_counter()
    live = [i for i, s in enumerate(sets) if s]
    sigs = np.stack([signature(set(sets[i])) for i in live]) if live else \
        np.zeros((0, num_perm), np.int64)
    t1 = time.perf_counter()
    pairs = set()
    for band in range(bands):
        block = sigs[:, band * rows:(band + 1) * rows]
        buckets = {}
        for i in range(len(sigs)):
            key = (band, block[i].tobytes())
            buckets.setdefault(key, []).append(i)
        for members in buckets.values():
            for x in range(len(members)):
                for y in range(x + 1, len(members)):
                    pairs.add((members[x], members[y]))
    live = np.array(live, dtype=np.int64)
    arr = pairs_array(pairs)
    if arr.size:
        arr = live[arr]
    t2 = time.perf_counter()
    return arr, {"sketch": t1 - t0, "lsh": t2 - t1}, {"bands": bands, "rows": rows,
                                                      "verified": False}


# -- datasketch ---------------------------------------------------------------

def run_datasketch(sets, num_perm, threshold, seed, bands=None, rows=None):
    from datasketch import MinHash, MinHashLSH
    t0 = time.perf_counter()
    live = [i for i, s in enumerate(sets) if s]
    mhs = MinHash.bulk(([s.encode("utf-8") for s in sets[i]] for i in live),
                       num_perm=num_perm, seed=seed)
    t1 = time.perf_counter()
    params = (bands, rows) if bands is not None else None
    lsh = MinHashLSH(threshold=threshold, num_perm=num_perm, params=params)
    with lsh.insertion_session() as session:
        for k, m in enumerate(mhs):
            session.insert(k, m, check_duplication=False)
    pairs = []
    for k, m in enumerate(mhs):
        for j in lsh.query(m):
            if j > k:
                pairs.append((k, j))
    live = np.array(live, dtype=np.int64)
    arr = pairs_array(np.array(pairs, dtype=np.int64))
    if arr.size:
        arr = live[arr]
    t2 = time.perf_counter()
    return arr, {"sketch": t1 - t0, "lsh": t2 - t1}, {"bands": lsh.b, "rows": lsh.r,
                                                      "verified": False}


# -- rensa ----------------------------------------------------------------------

def rensa_bands(threshold: float, num_perm: int) -> int:
    """The number of bands rensa's ``RMinHashDeduplicator`` picks by default."""
    if threshold >= 0.9:
        b = 4
    elif threshold >= 0.8:
        b = 8
    elif threshold >= 0.7:
        b = 16
    elif threshold >= 0.5:
        b = 32
    else:
        b = max(1, num_perm // 2)
    if num_perm % b:
        b = next(x for x in range(min(b, num_perm), 0, -1) if num_perm % x == 0)
    return b


def run_rensa(sets, num_perm, threshold, seed, bands=None, rows=None):
    from rensa import RMinHash, RMinHashLSH
    t0 = time.perf_counter()
    live = [i for i, s in enumerate(sets) if s]
    mhs = RMinHash.from_token_sets([sets[i] for i in live], num_perm=num_perm, seed=seed)
    t1 = time.perf_counter()
    nb = bands if bands is not None else rensa_bands(threshold, num_perm)
    lsh = RMinHashLSH(threshold=threshold, num_perm=num_perm, num_bands=nb)
    lsh.insert_many(mhs)
    cands = lsh.query_all(mhs)
    t2 = time.perf_counter()
    # candidate pairs k < j, flattened without a Python loop over candidates
    lens = np.fromiter(map(len, cands), dtype=np.int64, count=len(cands))
    flat = np.fromiter(itertools.chain.from_iterable(cands), dtype=np.int64,
                       count=int(lens.sum()))
    rows_ = np.repeat(np.arange(len(cands), dtype=np.int64), lens)
    sel = flat > rows_
    ca, cb = rows_[sel], flat[sel]
    get = mhs.__getitem__
    est = np.fromiter(map(RMinHash.jaccard, map(get, ca.tolist()), map(get, cb.tolist())),
                      dtype=np.float64, count=ca.size)
    keep = est >= threshold
    live = np.array(live, dtype=np.int64)
    arr = pairs_array(np.stack([ca[keep], cb[keep]], axis=1))
    if arr.size:
        arr = live[arr]
    t3 = time.perf_counter()
    return arr, {"sketch": t1 - t0, "lsh": t2 - t1, "verify": t3 - t2}, \
        {"bands": nb, "rows": num_perm // nb, "verified": True, "candidates": int(ca.size)}


def run_rensa_dedup(sets, num_perm, threshold, seed, bands=None, rows=None):
    """rensa's own deduplication pipeline, its fastest path to keep decisions:
    ``RMinHashDeduplicator.add_pairs`` over the token lists, in input order (a
    document is removed when rensa finds it a duplicate of one already added)."""
    from rensa import RMinHashDeduplicator
    t0 = time.perf_counter()
    live = [i for i, s in enumerate(sets) if s]
    kw = {} if bands is None else {"num_bands": bands}
    dd = RMinHashDeduplicator(threshold=threshold, num_perm=num_perm, use_lsh=True, seed=seed,
                              **kw)
    added = np.asarray(dd.add_pairs([(str(i), sets[i]) for i in live]), dtype=bool)
    kept = np.ones(len(sets), dtype=bool)
    kept[np.array(live, dtype=np.int64)[~added]] = False
    nb = bands if bands is not None else rensa_bands(threshold, num_perm)
    return kept, {"dedup": time.perf_counter() - t0}, \
        {"bands": nb, "rows": num_perm // nb, "verified": True, "keep_decisions": True}


def run_rensa_matrix(sets, num_perm, threshold, seed, bands=None, rows=None):
    """rensa's bulk matrix path: ``digest_matrix_from_token_sets`` and
    ``RMinHashLSH.query_duplicate_flags_matrix_one_shot``. It flags every row
    that shares a band with another row, so both ends of a pair are flagged:
    flags, not keep decisions (timed for speed only)."""
    from rensa import RMinHash, RMinHashLSH
    t0 = time.perf_counter()
    live = [i for i, s in enumerate(sets) if s]
    mat = RMinHash.digest_matrix_from_token_sets([sets[i] for i in live], num_perm, seed)
    t1 = time.perf_counter()
    nb = bands if bands is not None else rensa_bands(threshold, num_perm)
    lsh = RMinHashLSH(threshold=threshold, num_perm=num_perm, num_bands=nb)
    flags = np.asarray(lsh.query_duplicate_flags_matrix_one_shot(mat), dtype=bool)
    kept = np.ones(len(sets), dtype=bool)
    kept[np.array(live, dtype=np.int64)[flags]] = False
    return kept, {"sketch": t1 - t0, "lsh": time.perf_counter() - t1}, \
        {"bands": nb, "rows": num_perm // nb, "verified": False, "keep_decisions": False}


RUNNERS = {"cookbook": run_cookbook, "datasketch": run_datasketch, "rensa": run_rensa,
           "rensa-dedup": run_rensa_dedup, "rensa-matrix": run_rensa_matrix}
#: Peers that decide what is kept (``kept.npy``) rather than report pairs.
KEEPERS = ("rensa-dedup", "rensa-matrix")


def version_of(peer: str) -> str:
    import importlib.metadata as md
    if peer == "cookbook":
        return "from the cookbook's text"
    peer = peer.split("-")[0]
    try:
        return md.version(peer)
    except md.PackageNotFoundError:
        return "not installed"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Run one peer on a JSONL corpus.")
    ap.add_argument("peer", choices=PEERS)
    ap.add_argument("--input", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--shingle", choices=("char", "word"), default="char")
    ap.add_argument("--ngram", type=int, default=5)
    ap.add_argument("--num-perm", type=int, default=128)
    ap.add_argument("--threshold", type=float, default=0.8)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--bands", type=int, default=None)
    ap.add_argument("--rows", type=int, default=None)
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    texts = read_texts(args.input)
    t_read = time.perf_counter()
    sets = shingle_all(texts, args.shingle, args.ngram)
    t_sh = time.perf_counter()
    result, phases, info = RUNNERS[args.peer](sets, args.num_perm, args.threshold, args.seed,
                                              args.bands, args.rows)
    os.makedirs(args.out, exist_ok=True)
    if args.peer in KEEPERS:
        np.save(os.path.join(args.out, "kept.npy"), result)
        pairs = np.zeros((0, 2), np.int64)
    else:
        pairs = result
    np.save(os.path.join(args.out, "pairs.npy"), pairs)
    seconds = {"read": t_read - t_start, "shingle": t_sh - t_read, **phases,
               "total": time.perf_counter() - t_start}
    meta = {"peer": args.peer, "version": version_of(args.peer), "documents": len(texts),
            "pairs": int(len(pairs)), "seconds": seconds, **info}
    with open(os.path.join(args.out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
