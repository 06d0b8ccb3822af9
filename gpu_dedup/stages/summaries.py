"""Summaries of a run's results computed part by part: each part (a chunk of
documents) gives a few numbers, and their merge is exactly what the whole
arrays would give, without any step holding them.

* the similarities of removed documents (:func:`similarity_part`,
  :func:`merge_similarity`): counts, minimum, a histogram and quantiles,
  the quantiles exact (bit for bit ``numpy.quantile``'s ``linear`` method)
  from a second look at the values of the few fine bins they fall in;
* cluster sizes (:func:`size_bin`, :func:`size_labels`): bins of fixed edges
  1, 2, 3, 4, 5-8, 9-16, ..., counted part by part;
* the largest clusters (:func:`top_clusters`): largest first, ties to the
  smallest label, from each part's own largest.
"""
from __future__ import annotations

import numpy as np

#: Fine bins over [0, 1] that locate a quantile's order statistics.
FINE_BINS = 4096
#: Histogram bins of the report's similarity summary, over [0, 1].
SUMMARY_BINS = 20
#: The quantiles of the similarity summary, by name.
QUANTILES = (("p1", 0.01), ("p5", 0.05), ("median", 0.5))


def fine_bin(sims: np.ndarray) -> np.ndarray:
    """The fine bin of each similarity (clipped to [0, 1]); monotone, so the
    k-th smallest value lies in the bin where the counts reach k."""
    s = np.clip(np.asarray(sims, dtype=np.float64), 0.0, 1.0)
    return np.minimum((s * FINE_BINS).astype(np.int64), FINE_BINS - 1)


def similarity_part(sims: np.ndarray, threshold: float) -> dict:
    """One part's numbers for :func:`merge_similarity` (JSON-ready)."""
    sims = np.asarray(sims, dtype=np.float64)
    edges = np.linspace(0.0, 1.0, SUMMARY_BINS + 1)
    hist = np.histogram(np.clip(sims, 0.0, 1.0), bins=edges)[0] if sims.size else None
    fine = np.bincount(fine_bin(sims), minlength=FINE_BINS) if sims.size else None
    nz = np.flatnonzero(fine) if fine is not None else np.zeros(0, np.int64)
    return {"n": int(sims.size), "below": int(np.count_nonzero(sims < threshold)),
            "min": float(sims.min()) if sims.size else None,
            "hist": [int(c) for c in hist] if hist is not None else [0] * SUMMARY_BINS,
            # the fine bins, sparse: (bin, count) of the non-empty ones
            "fine": [[int(b), int(fine[b])] for b in nz]}


def values_in_bins(sims: np.ndarray, bins) -> np.ndarray:
    """The similarities of one part that fall in the fine ``bins``."""
    sims = np.asarray(sims, dtype=np.float64)
    return sims[np.isin(fine_bin(sims), np.asarray(sorted(bins), dtype=np.int64))]


def _order_statistic_bins(n: int, qs) -> dict:
    """For each quantile, the two order statistics it interpolates between
    and the interpolation weight: ``{q: (i, j, gamma)}`` (``numpy.quantile``'s
    ``linear`` method, its arithmetic repeated)."""
    out = {}
    for q in qs:
        q64 = np.float64(q)
        virtual = np.float64(n - 1) * q64
        prev = np.floor(virtual)
        if virtual >= n - 1:
            i = j = n - 1
        elif virtual < 0:
            i = j = 0
        else:
            i, j = int(prev), int(prev) + 1
        gamma = np.float64(virtual - prev)
        out[q] = (i, j, gamma)
    return out


def _lerp(a: np.float64, b: np.float64, t: np.float64) -> float:
    """``numpy``'s interpolation between two order statistics, bit for bit."""
    d = b - a
    return float(b - d * (1 - t)) if t >= 0.5 else float(a + d * t)


def merge_similarity(parts: list, threshold: float, values_in) -> dict:
    """The summary of every part's similarities, as :func:`similarity_summary`
    of their concatenation would give it.

    Args:
        parts: the parts' :func:`similarity_part`.
        threshold: the run's threshold.
        values_in: ``values_in(bins) -> float64 array``: every part's values
            that fall in the fine ``bins`` (:func:`values_in_bins`), any order.
    """
    n = sum(p["n"] for p in parts)
    below = sum(p["below"] for p in parts)
    hist = np.zeros(SUMMARY_BINS, np.int64)
    fine = np.zeros(FINE_BINS, np.int64)
    for p in parts:
        hist += np.asarray(p["hist"], dtype=np.int64)
        for b, c in p["fine"]:
            fine[b] += c
    mins = [p["min"] for p in parts if p["min"] is not None]
    edges = np.linspace(0.0, 1.0, SUMMARY_BINS + 1)
    quant = {name: None for name, _ in QUANTILES}
    if n:
        stats = _order_statistic_bins(n, [q for _, q in QUANTILES])
        upto = np.cumsum(fine)
        ranks = sorted({r for i, j, _ in stats.values() for r in (i, j)})
        where = {r: int(np.searchsorted(upto, r, side="right")) for r in ranks}
        found = np.sort(values_in({where[r] for r in ranks}))
        # the values of the chosen bins, in order; a rank's place among them
        starts = {b: int(upto[b] - fine[b]) for b in set(where.values())}
        bins_sorted = sorted(starts)
        offset, first = 0, {}
        for b in bins_sorted:
            first[b] = offset
            offset += int(fine[b])

        def value(r):
            b = where[r]
            return found[first[b] + r - starts[b]]
        for name, q in QUANTILES:
            i, j, gamma = stats[q]
            quant[name] = _lerp(value(i), value(j), gamma)
    return {"removed": n, "below_threshold": below,
            "below_threshold_share": below / n if n else 0.0,
            "min": float(min(mins)) if mins else None, **quant,
            "histogram": {"edges": [round(float(e), 4) for e in edges],
                          "counts": [int(c) for c in hist]}}


def similarity_summary(sims: np.ndarray, threshold: float) -> dict:
    """How similar removed documents are to the kept document they name.

    Args:
        sims: float64 similarity of each removed document to its kept one.
        threshold: the run's threshold.

    Returns:
        ``removed``, ``below_threshold`` (count and ``below_threshold_share``),
        ``min``, ``p1``, ``p5``, ``median`` (None without removals) and
        ``histogram`` (``edges`` and ``counts``, 20 bins over ``[0, 1]``).
    """
    sims = np.asarray(sims, dtype=np.float64)
    return merge_similarity([similarity_part(sims, threshold)], threshold,
                            lambda bins: values_in_bins(sims, bins))


# -- cluster sizes ------------------------------------------------------------------

def size_bin(sizes: np.ndarray) -> np.ndarray:
    """The bin of each cluster size (>= 1): 0, 1, 2, 3 for sizes 1 to 4, then
    4 for 5-8, 5 for 9-16, and so on."""
    s = np.asarray(sizes, dtype=np.int64)
    out = s - 1
    big = s >= 5
    if big.any():                    # the bit length of size - 1, exact below 2**53
        out[big] = np.frexp((s[big] - 1).astype(np.float64))[1].astype(np.int64) + 1
    return out


def size_counts(sizes: np.ndarray) -> np.ndarray:
    """How many of ``sizes`` fall in each bin of :func:`size_bin`."""
    return np.bincount(size_bin(sizes)) if np.asarray(sizes).size else np.zeros(0, np.int64)


def add_counts(a, b) -> np.ndarray:
    """Two bin counts of different lengths, summed."""
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    out = np.zeros(max(a.size, b.size), np.int64)
    out[:a.size] += a
    out[:b.size] += b
    return out


def size_labels(counts) -> tuple[list, list]:
    """``(labels, counts)`` of the bins, the trailing empty ones left out."""
    counts = [int(c) for c in counts]
    while counts and counts[-1] == 0:
        counts.pop()
    labels = []
    for k in range(len(counts)):
        if k < 4:
            labels.append(str(k + 1))
        else:
            lo = (1 << (k - 2)) + 1
            labels.append(f"{lo}-{2 * lo - 2}")
    return labels, counts


def top_clusters(labels: np.ndarray, sizes: np.ndarray, top: int) -> tuple:
    """The ``top`` largest of clusters ``labels`` of ``sizes``: largest first,
    ties to the smallest label."""
    labels = np.asarray(labels, dtype=np.int64)
    sizes = np.asarray(sizes, dtype=np.int64)
    order = np.lexsort((labels, -sizes))[:top]
    return labels[order], sizes[order]
