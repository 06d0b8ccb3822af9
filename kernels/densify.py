"""Densification of one-permutation sketches on the CPU, many documents at
once (``kernels.hashing.oph_densify``'s values, bit for bit).

An empty bin takes the value of the first filled bin along its own probe
sequence, and that sequence is the same in every document. So the first
:data:`FIRST_PROBES` probes of every bin are tested for :data:`LANES`
documents together: their filled flags, bin by bin, are rows of
``flags[bin, document]`` that vector registers read whole, and what each
document finds is the number of the probe, a byte, whatever the number of
bins (a byte a lane: 32 lanes to a vector register). A document with few filled
bins (``F * F <= K``) takes, for each empty bin, the one of its ``F``
filled bins that comes first in the bin's sequence, from a table of first
probes (:func:`first_hits`): one vector pass over the ``K`` bins for each
filled bin, where probing would take about ``K / F`` steps a bin, some
16,000 for a document of one shingle and 128 bins. Others go on probing
the bins the first probes left (``kernels.hashing.oph_source``).
"""
from __future__ import annotations

import numpy as np

from .hashing import U64, oph_probe, oph_source
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
U8 = np.uint8
#: In :func:`densify_group`'s table of first probes: none of the first
#: :data:`FIRST_PROBES` probes is filled, or the bin itself is.
_NO_PROBE = U8(255)
_ITSELF = U8(254)
#: Below this many bins, the table holds the first filled bin itself.
_BYTE_BINS = 255
#: Keeps both of them, and every first probe, inside the probe table's rows.
_PROBE_MASK = U8(31)
#: A row with ``F`` filled bins, ``F * _WHOLE <= K``, has its empty bins
#: filled from :func:`first_hits` in one vector pass a filled bin, as most
#: of them are still empty after the first probes; one with ``F * F <= K``
#: looks up only those (``F`` entries a bin); the others probe on.
_WHOLE = 32
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
        for t in range(8 * K):
            c = U64(oph_probe(q, k, t, K))
            if out[c, k] == U32(0xFFFFFFFF):
                out[c, k] = U32(t)
    return out


def first_hits(q, K: int) -> np.ndarray:
    """``hits[f, k]``: the first probe ``t < 8 * K`` of bin ``k`` that names
    bin ``f`` (``kernels.hashing.oph_probe``), 0xFFFFFFFF where none does
    (a filled bin's row holds what it offers every bin, side by side);
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
def _hit_source(hits, bits, few, k):
    """``kernels.hashing.oph_source`` of the empty bin ``k`` from the table
    ``hits`` (:func:`first_hits`) and the filled bins ``few`` (their bits:
    ``bits``): the one its probes name first, else (none named in ``8 *
    K`` probes) the next filled bin to its right."""
    best = _NONE
    c = U64(0)
    for i in range(few.shape[0]):
        f = U64(few[i])
        t = hits[f, U64(k)]
        if t < best:
            best = t
            c = f
    if best != _NONE:
        return c
    K = hits.shape[0]
    j = U64(k)
    while not (bits[j >> U64(6)] >> (j & U64(63))) & U64(1):
        j = (j + U64(1)) % U64(K)
    return j


@njit(cache=True)
def _densify_few(hits, few, flags, g, row, best, arg):
    """Fill the empty bins of ``row``, document ``g`` of ``flags`` with the
    filled bins ``few``, from the table ``hits`` (:func:`first_hits`) as
    ``kernels.hashing.oph_source`` would: each takes the filled bin its
    probes name first (the smallest ``hits[f, k]`` over the filled bins
    ``f``, one vector pass over the bins for each), else (none named in
    ``8 * K`` probes) the next filled bin to its right. ``best`` and
    ``arg``: uint32 scratch of ``K``."""
    K = row.shape[0]
    for k in range(K):
        best[k] = _NONE
        arg[k] = U32(0)
    for i in range(few.shape[0]):
        f = few[i]
        h = hits[U64(f)]
        for k in range(K):
            t = h[k]
            b = best[k]
            best[k] = t if t < b else b
            arg[k] = f if t < b else arg[k]
    for k in range(K):
        if flags[U64(k), g]:
            continue
        if best[k] != _NONE:
            c = U64(arg[k])
        else:
            c = U64(k)
            while not flags[c, g]:
                c = U64((c + U64(1)) % U64(K))
        row[k] = row[c]


@njit(cache=True, nogil=True)
def densify_group(q, probes, hits, flags, counts, rows, src, few, bits):
    """Fill the empty bins of the sketches ``rows`` (``G <= LANES`` rows of
    ``K`` values) as ``kernels.hashing.oph_densify`` does. A row's filled
    bins are ``flags[:, g]`` (uint8, ``K x LANES``, zero in the columns of
    rows not given); a row whose ``counts[g]`` is 0 has none and is left as
    it is. ``probes``: :func:`probe_table`; ``hits``: :func:`first_hits`
    (or an empty table); ``src`` (uint8, ``K x LANES``: the first filled
    probe of each bin of each row), ``few`` (uint32, ``K``) and ``bits``
    (uint64, ``(K + 63) // 64``): scratch. Every index is unsigned (Numba
    tests each signed one for wrapping around)."""
    K = rows.shape[1]
    small = K < _BYTE_BINS
    for k in range(K):
        c = src[U64(k)]
        for g in range(LANES):
            c[g] = _NO_PROBE
        for t in range(FIRST_PROBES - 1, -1, -1):
            pk = probes[U64(k), U64(t)]
            f = flags[pk]
            tt = U8(pk) if small else U8(t)
            for g in range(LANES):
                c[g] = tt if f[g] else c[g]
        f = flags[U64(k)]
        tt = U8(k) if small else _ITSELF
        for g in range(LANES):
            c[g] = tt if f[g] else c[g]
    table = hits.shape[0] == K
    best = np.empty((0, 0), np.uint32)  # the few rows' scratch, made when one comes
    for g in range(rows.shape[0]):
        if counts[g] == 0:
            continue
        row = rows[g]
        nf = -1
        for k in range(K):
            t = src[U64(k), U64(g)]
            # selects, not branches: whether a bin is filled is a coin toss
            c = U64(t) if small else (
                U64(k) if t == _ITSELF else U64(probes[U64(k), U64(t & _PROBE_MASK)]))
            if t == _NO_PROBE:
                if nf < 0:              # the filled bins, once a bin needs them
                    nf = _filled_bins(flags, U64(g), few, bits)
                    if table and nf * _WHOLE <= K:
                        break
                if table and nf * nf <= K:
                    c = _hit_source(hits, bits, few[:nf], k)
                else:
                    c = U64(oph_source(q, probes, bits, k, FIRST_PROBES))
            row[k] = row[c]
        if table and 0 <= nf and nf * _WHOLE <= K:
            if best.shape[1] != K:
                best = np.empty((2, K), np.uint32)
            _densify_few(hits, few[:nf], flags, U64(g), row, best[0], best[1])
