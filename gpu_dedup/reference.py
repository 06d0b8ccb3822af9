"""A slow, plain-Python oracle written straight from the method.

Nothing here is compiled or vectorised: it is what the fast kernels are
tested against, bit for bit. It implements the same definitions as
:mod:`gpu_dedup.kernels.hashing` independently (its own XXH64, Python's
arbitrary-precision integers for the affine hashes).
"""
from __future__ import annotations

import numpy as np

M64 = (1 << 64) - 1
_P1, _P2, _P3, _P4, _P5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9,
                           0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5)


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M64


def _round(acc, lane):
    return (_rotl((acc + lane * _P2) & M64, 31) * _P1) & M64


def xxh64(data: bytes, seed: int = 0) -> int:
    """XXH64, from the published specification."""
    n = len(data)
    p = 0
    if n >= 32:
        v = [(seed + _P1 + _P2) & M64, (seed + _P2) & M64, seed, (seed - _P1) & M64]
        while p + 32 <= n:
            for i in range(4):
                v[i] = _round(v[i], int.from_bytes(data[p + 8 * i:p + 8 * i + 8], "little"))
            p += 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & M64
        for i in range(4):
            h = ((h ^ _round(0, v[i])) * _P1 + _P4) & M64
    else:
        h = (seed + _P5) & M64
    h = (h + n) & M64
    while p + 8 <= n:
        h ^= _round(0, int.from_bytes(data[p:p + 8], "little"))
        h = (_rotl(h, 27) * _P1 + _P4) & M64
        p += 8
    if p + 4 <= n:
        h ^= (int.from_bytes(data[p:p + 4], "little") * _P1) & M64
        h = (_rotl(h, 23) * _P2 + _P3) & M64
        p += 4
    while p < n:
        h ^= (data[p] * _P5) & M64
        h = (_rotl(h, 11) * _P1) & M64
        p += 1
    h ^= h >> 33
    h = (h * _P2) & M64
    h ^= h >> 29
    h = (h * _P3) & M64
    return h ^ (h >> 32)


def shingles(text: str, kind: str, n: int) -> set[str]:
    """The shingle set: character n-grams of code points, or word n-grams of
    ``text.split()`` joined by one space. A text shorter than ``n`` is one
    shingle; an empty text has none."""
    if kind == "char":
        if not text:
            return set()
        if len(text) < n:
            return {text}
        return {text[i:i + n] for i in range(len(text) - n + 1)}
    toks = text.split()
    if not toks:
        return set()
    if len(toks) < n:
        return {" ".join(toks)}
    return {" ".join(toks[i:i + n]) for i in range(len(toks) - n + 1)}


def base_hashes(text: str, kind: str, n: int) -> set[int]:
    return {xxh64(s.encode("utf-8")) for s in shingles(text, kind, n)}


def permutations(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``K`` affine hashes ``(a, b)``: 64-bit words from ``default_rng(seed)``,
    ``a`` forced odd."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 1 << 64, size=num_perm, dtype=np.uint64, endpoint=False) | np.uint64(1)
    b = rng.integers(0, 1 << 64, size=num_perm, dtype=np.uint64, endpoint=False)
    return a, b


def signature(hashes: set[int], a, b, bits: int = 32) -> list[int]:
    """Per-hash minima of ``(a*x + b) mod 2**64``; 32-bit signatures keep the top half."""
    if not hashes:
        return [(1 << bits) - 1] * len(a)
    out = []
    for ai, bi in zip(a.tolist(), b.tolist()):
        m = min((ai * x + bi) & M64 for x in hashes)
        out.append(m >> 32 if bits == 32 else m)
    return out


def _fmix(x):
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def oph_signature(hashes: set[int], K: int, p: int, q: int, bits: int = 32) -> list[int]:
    """The one-permutation sketch (``kernels.hashing``), written out plainly:
    ``y = fmix(x ^ p)`` into bin ``((y >> 32) * K) >> 32``, the minimum per
    bin, then each empty bin copies the first non-empty one along its probe
    sequence."""
    if not hashes:
        return [(1 << bits) - 1] * K
    shift = 32 if bits == 32 else 0
    bins: dict[int, int] = {}
    for x in hashes:
        y = _fmix(x ^ p)
        k = ((y >> 32) * K) >> 32
        bins[k] = min(bins.get(k, y), y)
    out = []
    for k in range(K):
        if k in bins:
            out.append(bins[k] >> shift)
            continue
        base = _fmix(q ^ k)
        probes = (((_fmix((base + t * 0x9E3779B97F4A7C15) & M64) >> 32) * K) >> 32
                  for t in range(8 * K))
        j = next((c for c in probes if c in bins), None)
        if j is None:
            j = next((k + i) % K for i in range(K) if (k + i) % K in bins)
        out.append(bins[j] >> shift)
    return out


def band_key(values, band: int) -> int:
    k = _fmix((0x9E3779B97F4A7C15 * (band + 1)) & M64)
    for v in values:
        k = _fmix(k ^ int(v))
    return k


def jaccard(x: set, y: set) -> float:
    u = len(x | y)
    return len(x & y) / u if u else 0.0


def anchor_edges(keys_by_band, active) -> set[tuple[int, int]]:
    """Every bucket of every band, members in input order ``m0, m1, ...``:
    the anchor edges ``(m0, mi)`` and the chain edges ``(m(i-1), mi)``."""
    edges = set()
    for keys in keys_by_band:
        buckets = {}
        for i, k in enumerate(keys):
            if active[i]:
                buckets.setdefault(k, []).append(i)
        for members in buckets.values():
            for x in range(1, len(members)):
                edges.add((members[0], members[x]))
                edges.add((members[x - 1], members[x]))
    return edges


def smallest_of_components(n: int, edges) -> list[int]:
    """Connected components of ``n`` nodes joined by ``edges`` (pairs of
    node numbers): each node's label is the smallest node of its component."""
    parent = list(range(n))

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x
    for a, b in edges:
        ra, rb = find(a), find(b)
        parent[max(ra, rb)] = min(ra, rb)          # a root is its component's smallest
    return [find(x) for x in range(n)]
