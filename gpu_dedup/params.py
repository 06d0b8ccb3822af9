"""The band/row S-curve and the choice of bands and rows.

For a pair with Jaccard similarity ``s``, ``b`` bands of ``r`` rows make it a
candidate with probability ``1 - (1 - s**r)**b``; the curve rises through
about ``(1/b)**(1/r)``.

Example:
    >>> round(float(collision_probability(0.5, 32, 4)), 3)
    0.873
    >>> choose_bands_rows(0.8, 128).bands >= 1
    True
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from .errors import ConfigError

_GRID = np.linspace(0.0, 1.0, 2001)


def _power(x, n: int):
    """``x ** n`` for a whole ``n >= 0`` by squaring, in multiplications only.

    NumPy's ``power`` is vectorized differently by CPU (AVX-512 or not) and
    its last bit differs between machines; products are correctly rounded
    everywhere, so the S-curve, its areas and the choice of bands and rows
    are the same on every machine.
    """
    x = np.asarray(x, dtype=np.float64)
    out = np.ones_like(x)
    while n:
        if n & 1:
            out = out * x
        n >>= 1
        if n:
            x = x * x
    return out

#: False negatives cost recall for good (a missed pair stays in the output);
#: false positives only cost a verification, so the default weighs misses 99
#: to 1: at threshold 0.8 and 128 hashes, 18 bands of 7 rows, which put a pair
#: at the threshold in a shared bucket 98.6% of the time (bench/removals.py
#: measures what this buys in duplicates left).
DEFAULT_FP_WEIGHT = 0.01
DEFAULT_FN_WEIGHT = 0.99


def collision_probability(s, bands: int, rows: int):
    """Probability that a pair of similarity ``s`` collides in at least one band."""
    s = np.asarray(s, dtype=np.float64)
    return 1.0 - _power(1.0 - _power(s, rows), bands)


def approx_threshold(bands: int, rows: int) -> float:
    """Where the S-curve crosses about one half: ``(1/b)**(1/r)``."""
    return (1.0 / bands) ** (1.0 / rows)


def false_positive_area(threshold: float, bands: int, rows: int) -> float:
    """Integral of the collision probability over ``[0, threshold]``."""
    x = _GRID[_GRID <= threshold]
    if x.size < 2:
        return 0.0
    return float(np.trapezoid(collision_probability(x, bands, rows), x))


def false_negative_area(threshold: float, bands: int, rows: int) -> float:
    """Integral of the miss probability over ``[threshold, 1]``."""
    x = _GRID[_GRID >= threshold]
    if x.size < 2:
        return 0.0
    return float(np.trapezoid(1.0 - collision_probability(x, bands, rows), x))


@dataclass(frozen=True)
class BandChoice:
    """A split of the signature into ``bands`` bands of ``rows`` rows."""

    bands: int
    rows: int
    threshold: float
    fp_area: float
    fn_area: float

    @property
    def approx_threshold(self) -> float:
        return approx_threshold(self.bands, self.rows)

    def curve(self, similarities=(0.3, 0.5, 0.7, 0.8, 0.9)) -> dict[str, float]:
        return {f"{s:g}": float(collision_probability(s, self.bands, self.rows))
                for s in similarities}


def evaluate(threshold: float, bands: int, rows: int) -> BandChoice:
    return BandChoice(bands, rows, threshold,
                      false_positive_area(threshold, bands, rows),
                      false_negative_area(threshold, bands, rows))


def candidate_splits(num_perm: int):
    """Every (bands, rows) with ``bands * rows <= num_perm``."""
    for b in range(1, num_perm + 1):
        for r in range(1, num_perm // b + 1):
            yield b, r


#: The largest hash budget accepted (``--num-perm``): 131,072 hashes, a
#: signature of 512 KiB a document at 32 bits; beyond it no choice of bands
#: and rows helps, and the choice below (a few seconds at the most for
#: thresholds within one grid step of 0 or 1) would grow.
MAX_NUM_PERM = 1 << 17

#: Tie rule of the scan over every split: a split replaces the best so far
#: only when it scores lower by more than this.
_TIE = 1e-12
#: Splits whose bound is this far above the best score are never scored; the
#: bounds are exact up to rounding, far below it.
_MARGIN = 1e-9


def check_num_perm(num_perm: int) -> int:
    """``num_perm`` if it is a budget the engine accepts, else a
    :class:`ConfigError` naming ``--num-perm``."""
    if not 1 <= num_perm <= MAX_NUM_PERM:
        raise ConfigError(f"--num-perm must be from 1 to {MAX_NUM_PERM:,}, got {num_perm:,}")
    return num_perm


def choose_bands_rows(threshold: float, num_perm: int,
                      fp_weight: float = DEFAULT_FP_WEIGHT,
                      fn_weight: float = DEFAULT_FN_WEIGHT) -> BandChoice:
    """Pick (bands, rows) with ``bands * rows <= num_perm`` minimising
    ``fp_weight*FP + fn_weight*FN`` areas.

    Ties go to fewer bands (less work). Raises :class:`ConfigError` for a
    threshold outside (0, 1] or a budget outside [1, :data:`MAX_NUM_PERM`].

    The choice is that of scoring every split in order of bands, then rows
    (a split replaces the best so far when it scores lower by more than
    1e-12), but only splits that can matter are scored. At a fixed number of
    rows more bands raise the false-positive area and lower the
    false-negative one, and at a fixed number of bands more rows do the
    opposite; so over a box of splits ``[b1, b2] x [r1, r2]`` the score is at
    least ``fp_weight*FP(b1, r2) + fn_weight*FN(b2, r1)``, and when those two
    corners have equal areas every split of the box scores the same. Boxes
    are halved (geometrically), best bound first; a box is dropped when its
    bound is more than 1e-9 above the best score found, or when a split
    scored before it in the scan's order scores no more than its bound (none
    of its splits could replace that one); a box of equal scores keeps only
    its first split. Then the splits scored are taken in the scan's order
    with its tie rule. When only one area counts, :func:`_one_sided` walks
    the one row or column that can win. 100,000 hashes take a fraction of a
    second; ``tests/test_hostile_cli.py`` holds the choices of the full scan
    it is checked against.
    """
    if not 0.0 < threshold <= 1.0:
        raise ConfigError(f"--threshold must be in (0, 1], got {threshold}")
    K = check_num_perm(int(num_perm))
    lo = _GRID <= threshold
    hi = _GRID >= threshold
    x_lo, x_hi = _GRID[lo], _GRID[hi]
    use_lo, use_hi = lo.sum() > 1, hi.sum() > 1
    scores: dict = {}
    misses: dict = {}

    def score(b: int, r: int):
        # the arithmetic of the scan over every split, so that the choice stays
        v = scores.get((b, r))
        if v is None:
            q = misses.get(r)
            if q is None:
                q = misses[r] = 1.0 - _power(_GRID, r)
            p = 1.0 - _power(q, b)
            fp = float(np.trapezoid(p[lo], x_lo)) if use_lo else 0.0
            fn = float(np.trapezoid(1.0 - p[hi], x_hi)) if use_hi else 0.0
            v = scores[(b, r)] = (fp, fn, fp_weight * fp + fn_weight * fn)
        return v

    if not (use_hi and fn_weight) or not (use_lo and fp_weight):
        return _one_sided(K, threshold, score, one_band=not (use_hi and fn_weight))
    best, best_at = np.inf, (K + 1, 0)
    scored: set = set()

    def consider(b: int, r: int) -> None:
        nonlocal best, best_at
        scored.add((b, r))
        e = score(b, r)[2]
        if e < best or (e == best and (b, r) < best_at):
            best, best_at = e, (b, r)

    def box(r1: int, r2: int, b1: int, b2: int):
        """The box clipped to ``b * r <= K`` with its bound and whether it is
        flat, or None when nothing in it can matter."""
        b2 = min(b2, K // r1)
        if b1 > b2:
            return None
        r2 = min(r2, K // b1)
        low, high = score(b1, r2), score(b2, r1)
        bound = fp_weight * low[0] + fn_weight * high[1]
        if bound > best + _MARGIN or (best_at < (b1, r1) and best <= bound):
            return None
        return (bound, r1, r2, b1, b2, low[:2] == high[:2])

    heap = [box(1, K, 1, K)]
    while heap:
        bound, r1, r2, b1, b2, flat = heapq.heappop(heap)
        if bound > best + _MARGIN:
            break
        if best_at < (b1, r1) and best <= bound:
            continue
        if flat:
            consider(b1, r1)
            continue
        rm = max(r1, min(math.isqrt(r1 * r2), r2 - 1))
        bm = max(b1, min(math.isqrt(b1 * b2), b2 - 1))
        if min(bm, K // rm) >= b1:        # a split inside: a better best, sooner
            consider(min(bm, K // rm), rm)
        if r1 == r2 and b1 == b2:
            continue
        if r2 > r1 and (b2 == b1 or r2 * b1 >= b2 * r1):
            halves = ((r1, rm, b1, b2), (rm + 1, r2, b1, b2))
        else:
            halves = ((r1, r2, b1, bm), (r1, r2, bm + 1, b2))
        for half in halves:
            child = box(*half)
            if child is not None:
                heapq.heappush(heap, child)
    # the scan over every split, on the splits that can matter
    choice = None
    best_err = np.inf
    for b, r in sorted(scored):
        fp, fn, err = score(b, r)
        if err < best_err - _TIE:
            best_err = err
            choice = BandChoice(b, r, threshold, fp, fn)
    return choice


def _one_sided(K: int, threshold: float, score, one_band: bool) -> BandChoice:
    """The choice when only one area counts (a weight of 0, or a threshold
    within one grid step of 0 or 1).

    Only the false-positive area counting (``one_band``), a split ``(b, r)``
    scores no less than ``(1, r)``, which the scan meets first, so it never
    replaces the best: the scan's choice is that of its walk down ``(1, r)``,
    ``r = 1..K``, whose scores never rise. Only the false-negative area
    counting, the same holds of ``(b, 1)``, ``b = 1..K``. The scores are
    convex along the walk, so the first splits, each lower than the one
    before by more than the tie rule, end where a halving search finds; each
    next replacement after them, no nearer than the last, is found by doubling
    steps, then halving.
    """
    def at(i: int):
        return score(1, i) if one_band else score(i, 1)

    def lower(i: int, v: float) -> bool:
        return at(i)[2] < v - _TIE

    i = 1
    # the scores are convex (their drops shrink): the splits replace the one
    # before them one by one while the drop exceeds the tie rule
    if K > 1 and lower(2, at(1)[2]):
        lo, hi = 1, K                      # drop after lo exceeds it; after hi, not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if lower(mid + 1, at(mid)[2]):
                lo = mid
            else:
                hi = mid
        i = lo + 1
    v, gap = at(i)[2], 1
    while i < K:
        # the drops shrink, so the next replacement is no nearer than the last
        lo = min(i + gap - 1, K)          # not lower than v here (or lo == i)
        step, hi = 1, lo + 1
        while hi <= K and not lower(hi, v):
            lo, step = hi, step * 2
            hi = lo + step
        if hi > K:
            if lo >= K or not lower(K, v):
                break
            hi = K
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if lower(mid, v):
                hi = mid
            else:
                lo = mid
        gap, i, v = hi - i, hi, at(hi)[2]
    fp, fn, _ = at(i)
    b, r = (1, i) if one_band else (i, 1)
    return BandChoice(b, r, threshold, fp, fn)
