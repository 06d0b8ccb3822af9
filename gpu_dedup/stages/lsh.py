"""LSH banding: band keys, bucket collisions, and candidate edges.

A bucket is a (band, key) pair. Its members (documents whose band rows agree
exactly), in input order ``m0, m1, ..., mk``, are joined by *anchor edges*
``(m0, mi)`` and *chain edges* ``(m(i-1), mi)``: at most ``2k`` edges, never
all pairs.

Verification could still lose a true pair that shares a bucket with unrelated
documents. So edges are produced in rounds: the members of a bucket whose edge
to its anchor failed verification are re-anchored on the first of them, and
the new edges are verified in the next round, up to ``max_rounds``. An edge whose two ends are already joined by accepted edges
of earlier rounds is not scored again (it cannot change the clusters), which
keeps dense clusters from multiplying the work. Every round's edges are a
pure function of the previous rounds, so the result does not depend on how
the work is split.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..arrays import unique
from ..kernels.buckets import bucket_hashes, connected, union_edges


def check_bands(sig, bands: int, rows: int) -> None:
    """Refuse band keys that would read past a signature's ``K`` values."""
    if bands < 1 or rows < 1 or bands * rows > sig.shape[1]:
        raise ValueError(f"{bands} bands x {rows} rows do not fit signatures of "
                         f"{sig.shape[1]} values")


_LOW32 = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)


def _as_u64(x: np.ndarray) -> np.ndarray:
    """Non-negative indices as uint64: a view of int64 (no copy), else a cast."""
    if isinstance(x, np.ndarray) and x.dtype == np.int64:
        return x.view(np.uint64)
    return x.astype(np.uint64)


def pack_edges(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``(a, b)`` index pairs as sortable uint64 keys ``a << 32 | b``."""
    out = _as_u64(a) << _S32
    out |= _as_u64(b)
    return out


def unpack_edges(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(packed, np.ndarray) and packed.dtype == np.uint64:
        # both halves are below 2**32: their bits read as int64 directly
        return (packed >> _S32).view(np.int64), (packed & _LOW32).view(np.int64)
    return (packed >> _S32).astype(np.int64), (packed & _LOW32).astype(np.int64)


#: Failed pairs whose band keys :func:`reanchor` gathers at once.
REANCHOR_SLICE = 1 << 20


def reanchor(failed: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Next round's edges from this round's failed edges (packed, sorted).

    For every band in which both ends of a failed edge ``(a, m)`` share a
    bucket, the failed members ``m`` of bucket ``(band, a)`` are joined to
    their first member.
    """
    if failed.size == 0:
        return failed
    fa, fb = unpack_edges(failed)
    out = []
    for j in range(keys.shape[1]):
        # band ``j`` of both ends compared a slice of the pairs at a time (the
        # keys may be read from disk, and two gathers of every pair's key
        # would be 16 bytes a pair at once)
        same = np.empty(failed.size, dtype=bool)
        for s in range(0, failed.size, REANCHOR_SLICE):
            e = min(failed.size, s + REANCHOR_SLICE)
            same[s:e] = keys[fa[s:e], j] == keys[fb[s:e], j]
        if not same.any():
            continue
        a = fa[same]
        m = fb[same]          # sorted by (a, m) since `failed` is sorted
        start = np.ones(a.size, dtype=bool)
        start[1:] = a[1:] != a[:-1]
        group = np.cumsum(start) - 1
        anchor = m[start][group]
        sel = ~start
        if sel.any():
            out.append(pack_edges(anchor[sel], m[sel]))
    if not out:
        return np.zeros(0, dtype=np.uint64)
    return unique(np.concatenate(out))


@dataclass
class EdgeResult:
    accepted: np.ndarray       # packed edges (positions in the fuzzy document list)
    scores: np.ndarray         # similarity of each accepted edge
    candidates: int            # distinct candidate edges scored
    rounds: int                # rounds run
    unresolved: int            # edges left unscored after max_rounds


def verified_edges(first_round: np.ndarray, keys: np.ndarray, score_fn,
                   threshold: float, max_rounds: int, accept_all: bool = False) -> EdgeResult:
    """Score candidate edges round by round (see the module docstring).

    ``score_fn(packed) -> float64 scores``. An edge is accepted when its score
    is at least ``threshold`` (or always, with ``accept_all``). ``keys`` is
    the host copy of the band keys (one row per document).
    """
    memo_keys = np.zeros(0, dtype=np.uint64)
    memo_scores = np.zeros(0, dtype=np.float64)
    parent = np.arange(keys.shape[0], dtype=np.int64)
    edges = first_round
    if edges.size > 1 and bool(np.any(edges[1:] <= edges[:-1])):
        edges = unique(edges)            # every round's edges sorted and distinct, as
                                         # re-anchoring makes them: merged into the memo
    rounds = 0
    while edges.size and rounds < max(1, max_rounds):
        rounds += 1
        if rounds > 1:
            ea, eb = unpack_edges(edges)
            edges = edges[~connected(parent, ea, eb)]
            if not edges.size:
                break
        pos = np.searchsorted(memo_keys, edges)
        pos_c = np.minimum(pos, max(memo_keys.size - 1, 0))
        known = (pos < memo_keys.size) & (memo_keys[pos_c] == edges) if memo_keys.size else \
            np.zeros(edges.size, dtype=bool)
        new = edges[~known]
        if new.size:
            new_scores = np.asarray(score_fn(new), dtype=np.float64)
            # both sorted and none of ``new`` known: merged, where a sort of
            # their concatenation would hold an order array and two copies
            at = np.searchsorted(memo_keys, new)
            memo_keys = np.insert(memo_keys, at, new)
            memo_scores = np.insert(memo_scores, at, new_scores)
            del at
        if accept_all:
            edges = edges[:0]
            break
        scores = memo_scores[np.searchsorted(memo_keys, edges)]
        good = scores >= threshold
        ga, gb = unpack_edges(edges[good])
        union_edges(parent, ga, gb)
        failed = edges[~good]
        fa, fb = unpack_edges(failed)
        failed = failed[~connected(parent, fa, fb)]
        edges = reanchor(failed, keys)
    ok = np.ones(memo_keys.size, dtype=bool) if accept_all else memo_scores >= threshold
    return EdgeResult(memo_keys[ok], memo_scores[ok], int(memo_keys.size), rounds,
                      int(edges.size))


def take_buckets(off, members, which, xp=np):
    """Buckets ``which`` (in that order) of ``(off, members)``, arrays of the
    array module ``xp`` (NumPy or CuPy)."""
    sizes = (off[1:] - off[:-1])[which]
    new_off = xp.zeros(sizes.shape[0] + 1, dtype=xp.int64)
    new_off[1:] = xp.cumsum(sizes)
    total = int(new_off[-1])
    pos = xp.arange(total, dtype=xp.int64)
    b = xp.searchsorted(new_off[1:], pos, side="right")
    return new_off, members[off[:-1][which][b] + (pos - new_off[b])]


def distinct_buckets(off: np.ndarray, members: np.ndarray):
    """Buckets with the same members (two documents close enough to share
    several bands) kept once, in a canonical order: by first member, then
    by a hash of the members. The result depends only on the set of member
    lists, not on how bands and keys were split into units.

    Args:
        off: int64 bucket boundaries; members: int64, ascending in a bucket.

    Returns:
        ``(off, members)`` of the distinct buckets.
    """
    off = np.ascontiguousarray(off, dtype=np.int64)
    members = np.ascontiguousarray(members, dtype=np.int64)
    nb = off.size - 1
    if nb <= 0:
        return np.zeros(1, np.int64), np.zeros(0, np.int64)
    h = bucket_hashes(off, members)
    first = members[off[:-1]]
    order = np.lexsort((h[:, 1], h[:, 0], first))
    hs, fs = h[order], first[order]
    keep = np.ones(nb, bool)
    keep[1:] = (fs[1:] != fs[:-1]) | (hs[1:, 0] != hs[:-1, 0]) | (hs[1:, 1] != hs[:-1, 1])
    return take_buckets(off, members, order[keep])


#: Keys a part of a band segment holds at most, about, when the segment is
#: split before its keys are grouped (a hash table that fits a cache).
SPLIT_KEYS = 1 << 18


def split_ways(seg: np.ndarray) -> int:
    """Parts each key segment is cut into before grouping: a power of two
    (at most 4,096: the key bits 52 and up) giving parts of about
    :data:`SPLIT_KEYS` keys; 1 when the segments are small. Equal keys fall
    in one part, so the buckets are the same (their order differs, and
    ``distinct_buckets`` puts them in its canonical order)."""
    largest = int(np.diff(seg).max()) if seg.size > 1 else 0
    ways = 1
    while ways < 4096 and largest // ways > 2 * SPLIT_KEYS:
        ways *= 2
    return ways
