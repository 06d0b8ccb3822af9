"""Kernels of semantic deduplication (:mod:`gpu_dedup.semantic.search`).

:func:`pair_cosines` is the one definition of a pair's *exact cosine*: the
``float64`` dot product of two ``float32`` rows, summed one dimension after
the other in index order. Each product of two ``float32`` values is exact in
``float64`` (24 + 24 significant bits fit in 53), so a fused multiply-add
gives the very same sum and the value does not depend on the compiler or
the processor, nor on how many threads compute it. Every decision of the
selection uses this value alone.

:func:`decide_block` takes the decisions of one block of documents, in
priority order, from the screened candidate pairs of each document and
their exact cosines. :func:`cluster_sums` is the step of spherical k-means
that sums the rows of each cluster.
"""
from __future__ import annotations

import numpy as np

from .jit import njit

from .threads import for_range


@njit(cache=True)
def exact_dot(emb, a, b):
    """The exact cosine of rows ``a`` and ``b`` of ``emb`` (``float32``):
    ``float64`` products summed in index order."""
    s = 0.0
    for k in range(emb.shape[1]):
        s += np.float64(emb[a, k]) * np.float64(emb[b, k])
    return s


def pair_cosines(emb, ia, ib):
    """Exact cosines of the pairs ``(ia[e], ib[e])`` of rows of ``emb``.

    Args:
        emb: ``(n, d)`` ``float32`` matrix of unit rows.
        ia: ``int64`` row indices, one per pair.
        ib: ``int64`` row indices, as many as ``ia``.

    Returns:
        ``float64`` array, :func:`exact_dot` of each pair.
    """
    out = np.empty(ia.shape[0], np.float64)
    for_range(_cosine_range, ia.shape[0], emb, ia, ib, out, grain=4096)
    return out


@njit(cache=True, nogil=True)
def _cosine_range(emb, ia, ib, out, e0, e1):
    for e in range(e0, e1):
        out[e] = exact_dot(emb, ia[e], ib[e])


@njit(cache=True)
def cluster_sums(x, labels, k):
    """``float64`` sums of the rows of ``x`` per label in ``0..k-1``, added
    in row order (the same on every run)."""
    out = np.zeros((k, x.shape[1]), np.float64)
    for i in range(x.shape[0]):
        c = labels[i]
        for t in range(x.shape[1]):
            out[c, t] += x[i, t]
    return out


@njit(cache=True)
def decide_block(nb, jloc, local, prank, score, threshold):
    """Decide the ``nb`` documents of one block in priority order.

    Pair ``e`` joins document ``jloc[e]`` of the block (its position in the
    block, 0 first in priority) to a candidate partner earlier in priority:
    a kept document of an earlier block (``local[e] == -1``) or document
    ``local[e] < jloc[e]`` of the block itself, which counts only if it was
    kept. ``prank[e]`` is the partner's priority rank and ``score[e]`` the
    pair's exact cosine. The pairs are visited per document (a counting sort
    by ``jloc``), so they may come in any order.

    A document is removed when some counting pair scores ``>= threshold``;
    it names the partner of highest score, ties to the lower rank.

    Returns:
        ``(kept, best, listed)``: ``kept`` (``bool``, per document of the
        block), ``best`` (the pair naming each removed document's partner,
        -1 for a kept one) and ``listed`` (``bool`` per pair: its document
        was removed and the pair counted and scored ``>= threshold``).
    """
    m = jloc.shape[0]
    start = np.zeros(nb + 1, np.int64)
    for e in range(m):
        start[jloc[e] + 1] += 1
    for j in range(nb):
        start[j + 1] += start[j]
    fill = start[:nb].copy()
    by_doc = np.empty(m, np.int64)
    for e in range(m):
        j = jloc[e]
        by_doc[fill[j]] = e
        fill[j] += 1
    kept = np.ones(nb, np.bool_)
    best = np.full(nb, -1, np.int64)
    listed = np.zeros(m, np.bool_)
    for j in range(nb):
        b = -1
        bs = 0.0
        br = 0
        for q in range(start[j], start[j + 1]):
            e = by_doc[q]
            s = score[e]
            if not s >= threshold:
                continue
            i = local[e]
            if i >= 0 and (i >= j or not kept[i]):
                continue
            listed[e] = True
            if b < 0 or s > bs or (s == bs and prank[e] < br):
                b = e
                bs = s
                br = prank[e]
        if b >= 0:
            kept[j] = False
            best[j] = b
    return kept, best, listed
