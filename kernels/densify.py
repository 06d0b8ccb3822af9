"""Densification of one-permutation sketches on the CPU, many documents at
once (``kernels.hashing.oph_densify``'s values, bit for bit).

An empty bin takes the value of the first filled bin along its own probe
sequence, and that sequence is the same in every document. So the first
:data:`FIRST_PROBES` probes of every bin are tested for :data:`LANES`
documents together: their filled flags, bin by bin, are rows of
``flags[bin, document]`` that vector registers read whole. A bin none of
them reached is found one of two ways: a document with few filled bins
(``F * F <= K``) takes, of its ``F`` filled bins, the one that comes first
in the bin's sequence, from a table of first probes (:func:`first_hits`);
probing would take about ``K / F`` steps a bin, some 16,000 for a document
of one shingle and 128 bins. Others go on probing
(``kernels.hashing.oph_source``).
"""
from __future__ import annotations

import numpy as np

from .hashing import U64, oph_filled, oph_probe, oph_source
from .jit import interpreting, njit

U32 = np.uint32

#: Probes of each bin tested for a group of documents at once.
FIRST_PROBES = 24
#: Probes of each bin kept in :func:`probe_table`.
TABLE_PROBES = 64
#: Documents in a group: one vector lane each.
LANES = 64
#: The largest number of bins given a :func:`first_hits` table (``K x K``).
HITS_BINS = 512

_NONE = U32(0xFFFFFFFF)
_hits_cache: dict = {}


@njit(cache=True, stand_in="vector_misc.probe_table")
def probe_table(q, K):
    """The first :data:`TABLE_PROBES` probes of every bin (``K x
    TABLE_PROBES`` uint32, unsigned so that indexing by them needs no test
    for a negative index; :func:`kernels.hashing.oph_probe`)."""
    out = np.empty((K, TABLE_PROBES), np.uint32)
    for k in range(K):
        for t in range(TABLE_PROBES):
            out[k, t] = oph_probe(q, k, t, K)
    return out


@njit(cache=True)
def _first_hits(q, K):
    out = np.full((K, K), 0xFFFFFFFF, np.uint32)
    for k in range(K):
        row = out[k]
        for t in range(8 * K):
            c = U64(oph_probe(q, k, t, K))
            if row[c] == U32(0xFFFFFFFF):
                row[c] = U32(t)
    return out


def first_hits(q, K: int) -> np.ndarray:
    """``hits[k, f]``: the first probe ``t < 8 * K`` of bin ``k`` that names
    bin ``f`` (``kernels.hashing.oph_probe``), 0xFFFFFFFF where none does;
    kept for the next calls (the last few). An empty table where ``K`` is
    above :data:`HITS_BINS` (``K * K`` entries), or while kernels run
    interpreted (their whole-array stand-in needs none)."""
    if K > HITS_BINS or interpreting():
        return np.zeros((0, 0), np.uint32)
    key = (int(q), int(K))
    hits = _hits_cache.get(key)
    if hits is None:
        hits = _first_hits(U64(q), K)
        if len(_hits_cache) >= 4:
            _hits_cache.clear()
        _hits_cache[key] = hits
    return hits


@njit(cache=True)
def _filled_bins(flags, g, few, bits):
    """Row ``g``'s filled bins (``flags[:, g]``): ascending into ``few``,
    and as the bits ``kernels.hashing.oph_filled`` reads into ``bits``;
    their number."""
    for w in range(bits.shape[0]):
        bits[w] = U64(0)
    m = 0
    for k in range(flags.shape[0]):
        if flags[U64(k), g]:
            few[m] = U32(k)
            bits[k >> 6] |= U64(1) << U64(k & 63)
            m += 1
    return m


@njit(cache=True)
def _hit_source(hits, filled, few, k):
    """``kernels.hashing.oph_source`` of the empty bin ``k`` from the table
    ``hits`` and the filled bins ``few``: the one its probes name first,
    else (none named in ``8 * K`` probes) the next filled bin to its
    right."""
    row = hits[U64(k)]
    best = _NONE
    c = _NONE
    for i in range(few.shape[0]):
        f = few[i]
        t = row[f]
        if t < best:
            best = t
            c = f
    if best != _NONE:
        return c
    K = hits.shape[0]
    j = k
    while not oph_filled(filled, j):
        j = (j + 1) % K
    return U32(j)


@njit(cache=True, nogil=True)
def densify_group(q, probes, hits, flags, counts, rows, src, few, bits):
    """Fill the empty bins of the sketches ``rows`` (``G <= LANES`` rows of
    ``K`` values) as ``kernels.hashing.oph_densify`` does. A row's filled
    bins are ``flags[:, g]`` (uint8, ``K x LANES``, zero in the columns of
    rows not given); a row whose ``counts[g]`` is 0 has none and is left as
    it is. ``probes``: :func:`probe_table`; ``hits``: :func:`first_hits`
    (or an empty table); ``src`` (uint32, ``K x LANES``), ``few`` (uint32,
    ``K``) and ``bits`` (uint64, ``(K + 63) // 64``): scratch. Every index
    is unsigned (Numba tests each signed one for wrapping around)."""
    K = rows.shape[1]
    for k in range(K):
        c = src[U64(k)]
        for g in range(LANES):
            c[g] = _NONE
        for t in range(FIRST_PROBES - 1, -1, -1):
            pk = probes[U64(k), U64(t)]
            f = flags[pk]
            for g in range(LANES):
                c[g] = pk if f[g] else c[g]
        f = flags[U64(k)]
        for g in range(LANES):
            c[g] = U32(k) if f[g] else c[g]
    table = hits.shape[0] == K
    for g in range(rows.shape[0]):
        if counts[g] == 0:
            continue
        row = rows[g]
        nf = -1
        for k in range(K):
            c = src[U64(k), U64(g)]
            if c == _NONE:
                if nf < 0:              # the filled bins, once a bin needs them
                    nf = _filled_bins(flags, U64(g), few, bits)
                if table and nf * nf <= K:
                    c = _hit_source(hits, bits, few[:nf], k)
                else:
                    c = U32(oph_source(q, probes, bits, k, FIRST_PROBES))
            row[k] = row[c]
