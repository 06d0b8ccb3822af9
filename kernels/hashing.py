"""Hash functions shared by every backend.

Each function here is a Numba ``@njit`` function over unsigned 64-bit integers
and ``uint8`` buffers, with no allocation and no Python objects, so the same
source is compiled for the CPU (called from ``kernels.cpu`` and
``kernels.primitives``) and for the GPU (called from the ``@cuda.jit``
kernels of ``kernels.cuda_kernels``). The text they hash is cut by
``kernels.text`` and ``kernels.primitives``.

Definitions (these are the contract the tests pin down):

* **Base hash** of a shingle: ``xxh64(utf8_bytes, seed=0)``. A character
  shingle's bytes are the UTF-8 encoding of its ``n`` code points; a word
  shingle's bytes are its ``n`` tokens joined by one ASCII space.
* **Permutation** ``k``: the affine hash ``h_k(x) = (a_k * x + b_k) mod 2**64``
  of the 64-bit base hash ``x``, with ``a_k`` odd and ``b_k`` drawn from the
  seed. This is the cookbook's ``a*x + b`` family taken modulo ``2**64``
  instead of a Mersenne prime, ordered by its top bits (multiply-add-shift
  hashing): it needs no 128-bit product and vectorises, which makes the
  signature kernel about 1.8x faster than exact arithmetic modulo
  ``2**61 - 1`` on the same machine.
* A 64-bit signature stores ``min_x h_k(x)``; a 32-bit signature stores its
  top 32 bits, ``min_x h_k(x) >> 32``, which equals ``min_x (h_k(x) >> 32)``.
* **One-permutation sketch** (``--sketch oph``; one-permutation hashing
  with optimal densification, after Li, Owen & Zhang and Shrivastava):
  with keys ``(p, q)`` drawn from the seed, each shingle's base hash ``x``
  is permuted once, ``y = fmix(x ^ p)``, and falls in bin
  ``((y >> 32) * K) >> 32``; the bin keeps ``min y`` (``min (y >> 32)`` for
  32 bits). An empty bin ``k`` takes the value of the first non-empty bin
  along its own probe sequence ``bin(fmix(fmix(q ^ k) + t * C))``,
  ``t = 0, 1, ...`` (after ``8 * K`` probes, the next non-empty bin to its
  right), so two documents with the same non-empty bins fill their empty
  ones alike. Cost: one hash per shingle and a few per empty bin, instead of
  ``K`` per shingle.
* **Band key** of rows ``v_0..v_{r-1}`` of band ``j``:
  ``k = fmix(C * (j + 1))``, then ``k = fmix(k ^ v_i)`` for each row, where
  ``fmix`` is the SplitMix64 finalizer and ``C = 0x9E3779B97F4A7C15``.
"""
from __future__ import annotations

import numpy as np

from .jit import njit

U64 = np.uint64

PRIME64_1 = U64(0x9E3779B185EBCA87)
PRIME64_2 = U64(0xC2B2AE3D27D4EB4F)
PRIME64_3 = U64(0x165667B19E3779F9)
PRIME64_4 = U64(0x85EBCA77C2B2AE63)
PRIME64_5 = U64(0x27D4EB2F165667C5)

GOLDEN = U64(0x9E3779B97F4A7C15)
MIX_1 = U64(0xBF58476D1CE4E5B9)
MIX_2 = U64(0x94D049BB133111EB)

_S1 = U64(1)
_S3 = U64(3)
_S7 = U64(7)
_S8 = U64(8)
_S11 = U64(11)
_S12 = U64(12)
_S16 = U64(16)
_S18 = U64(18)
_S23 = U64(23)
_S24 = U64(24)
_S27 = U64(27)
_S29 = U64(29)
_S30 = U64(30)
_S31 = U64(31)
_S32 = U64(32)
_S33 = U64(33)
_S40 = U64(40)
_S48 = U64(48)
_S56 = U64(56)
_S61 = U64(61)
_S64 = U64(64)


@njit(cache=True)
def rotl64(x, r):
    return (x << r) | (x >> (_S64 - r))


@njit(cache=True)
def read_u64(buf, p):
    return (U64(buf[p]) | (U64(buf[p + 1]) << _S8) | (U64(buf[p + 2]) << _S16)
            | (U64(buf[p + 3]) << _S24) | (U64(buf[p + 4]) << _S32)
            | (U64(buf[p + 5]) << _S40) | (U64(buf[p + 6]) << _S48)
            | (U64(buf[p + 7]) << _S56))


@njit(cache=True)
def read_u32(buf, p):
    return (U64(buf[p]) | (U64(buf[p + 1]) << _S8) | (U64(buf[p + 2]) << _S16)
            | (U64(buf[p + 3]) << _S24))


@njit(cache=True)
def _xxh_round(acc, lane):
    acc = acc + lane * PRIME64_2
    acc = rotl64(acc, _S31)
    return acc * PRIME64_1


@njit(cache=True)
def _xxh_merge(acc, val):
    acc = acc ^ _xxh_round(U64(0), val)
    return acc * PRIME64_1 + PRIME64_4


@njit(cache=True)
def xxh_tail8(h, lane):
    """XXH64's step over 8 more bytes (``lane``, little endian) of the tail."""
    return rotl64(h ^ _xxh_round(U64(0), lane), _S27) * PRIME64_1 + PRIME64_4


@njit(cache=True)
def xxh_tail4(h, lane):
    """XXH64's step over 4 more bytes (``lane``, below 2**32) of the tail."""
    return rotl64(h ^ (lane * PRIME64_1), _S23) * PRIME64_2 + PRIME64_3


@njit(cache=True)
def xxh_tail1(h, byte):
    """XXH64's step over one more byte of the tail."""
    return rotl64(h ^ (byte * PRIME64_5), _S11) * PRIME64_1


@njit(cache=True)
def xxh_avalanche(h):
    """XXH64's final mix."""
    h = (h ^ (h >> _S33)) * PRIME64_2
    h = (h ^ (h >> _S29)) * PRIME64_3
    return h ^ (h >> _S32)


@njit(cache=True)
def xxh64(buf, start, end, seed):
    """XXH64 of ``buf[start:end]`` (a ``uint8`` array) with a 64-bit seed."""
    p = start
    length = U64(end - start)
    if end - start >= 32:
        v1 = seed + PRIME64_1 + PRIME64_2
        v2 = seed + PRIME64_2
        v3 = seed
        v4 = seed - PRIME64_1
        limit = end - 32
        while p <= limit:
            v1 = _xxh_round(v1, read_u64(buf, p))
            v2 = _xxh_round(v2, read_u64(buf, p + 8))
            v3 = _xxh_round(v3, read_u64(buf, p + 16))
            v4 = _xxh_round(v4, read_u64(buf, p + 24))
            p += 32
        h = rotl64(v1, _S1) + rotl64(v2, _S7) + rotl64(v3, _S12) + rotl64(v4, _S18)
        h = _xxh_merge(h, v1)
        h = _xxh_merge(h, v2)
        h = _xxh_merge(h, v3)
        h = _xxh_merge(h, v4)
    else:
        h = seed + PRIME64_5
    h = h + length
    while p + 8 <= end:
        h = xxh_tail8(h, read_u64(buf, p))
        p += 8
    if p + 4 <= end:
        h = xxh_tail4(h, read_u32(buf, p))
        p += 4
    while p < end:
        h = xxh_tail1(h, U64(buf[p]))
        p += 1
    return xxh_avalanche(h)


@njit(cache=True)
def fmix64(x):
    """SplitMix64 finalizer: a bijective 64-bit mixer."""
    x = (x ^ (x >> _S30)) * MIX_1
    x = (x ^ (x >> U64(27))) * MIX_2
    return x ^ (x >> _S31)


@njit(cache=True)
def permute(a, x, b):
    """Permutation ``k`` of a base hash: ``(a_k * x + b_k) mod 2**64``."""
    return a * x + b


@njit(cache=True)
def band_key_start(band):
    return fmix64(GOLDEN * (U64(band) + _S1))


@njit(cache=True)
def band_key_step(key, value):
    return fmix64(key ^ U64(value))


@njit(cache=True)
def oph_bin(y, K):
    """The bin of a permuted hash: its top 32 bits scaled to ``0 .. K - 1``."""
    return np.int64(((y >> _S32) * U64(K)) >> _S32)


#: Probes of each empty bin precomputed by :func:`oph_probes` (the rest, rarely
#: needed, are computed as they are reached).
OPH_PROBES = 16


@njit(cache=True)
def oph_probe(q, k, t, K):
    """Probe ``t`` of empty bin ``k``: ``bin(fmix(fmix(q ^ k) + t * C))``."""
    return oph_bin(fmix64(fmix64(q ^ U64(k)) + U64(t) * GOLDEN), K)


@njit(cache=True)
def oph_probes(q, K, out):
    """The first ``out.shape[1]`` probes of every bin ``0 .. K - 1`` into ``out``
    (the same for every document: computed once per sketch)."""
    for k in range(K):
        for t in range(out.shape[1]):
            out[k, t] = oph_probe(q, k, t, K)


@njit(cache=True)
def oph_start(row, filled, shift):
    """Empty the sketch ``row`` and its ``filled`` bits: each value the
    largest, so that a bin's first hash needs no branch."""
    for w in range(filled.shape[0]):
        filled[w] = U64(0)
    top = ~U64(0) >> shift
    for k in range(row.shape[0]):
        row[k] = top


@njit(cache=True)
def oph_put(y, shift, row, filled):
    """Fold the permuted hash ``y`` into its bin of ``row``."""
    k = oph_bin(y, row.shape[0])
    filled[k >> 6] |= U64(1) << U64(k & 63)
    v = y >> shift
    row[k] = v if v < row[k] else row[k]


@njit(cache=True)
def oph_filled(filled, k):
    """Whether bin ``k`` holds a hash of the document."""
    return (filled[k >> 6] >> U64(k & 63)) & U64(1)


@njit(cache=True)
def oph_source(q, probes, filled, k, t0):
    """The bin whose value the empty bin ``k`` takes: the first filled one
    along its probes from probe ``t0`` on (``probes``: :func:`oph_probes` of
    ``q``); after ``8 * K`` probes, the next filled bin to its right. At
    least one bin is filled."""
    K = probes.shape[0]
    T = probes.shape[1]
    for t in range(t0, 8 * K):
        c = probes[k, t] if t < T else oph_probe(q, k, t, K)
        if oph_filled(filled, c):
            return c
    j = k
    while not oph_filled(filled, j):
        j = (j + 1) % K
    return j


@njit(cache=True)
def oph_densify(q, probes, row, filled):
    """Give each empty bin of ``row`` the value of the bin
    :func:`oph_source` names."""
    for k in range(row.shape[0]):
        if not oph_filled(filled, k):
            row[k] = row[oph_source(q, probes, filled, k, 0)]


@njit(cache=True)
def oph_row(hashes, cnt, p, q, shift, probes, row, filled):
    """The one-permutation sketch of the base hashes ``hashes[:cnt]`` into
    ``row`` (``K`` values, each ``min y >> shift``); ``probes`` is
    :func:`oph_probes` of ``q``; ``filled`` is scratch of ``(K + 63) // 64``
    words. A row without hashes is left as it is."""
    if cnt == 0:
        return
    oph_start(row, filled, shift)
    for s in range(cnt):
        oph_put(fmix64(hashes[s] ^ p), shift, row, filled)
    oph_densify(q, probes, row, filled)
