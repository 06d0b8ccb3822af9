"""The band/row S-curve and the choice of bands and rows.

For a pair with Jaccard similarity ``s``, ``b`` bands of ``r`` rows make it a
candidate with probability ``1 - (1 - s**r)**b``; the curve rises through
about ``(1/b)**(1/r)``.

Example:
    >>> round(collision_probability(0.5, 32, 4), 3)
    0.873
    >>> choose_bands_rows(0.8, 128).bands >= 1
    True
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import ConfigError

_GRID = np.linspace(0.0, 1.0, 2001)

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
    return 1.0 - (1.0 - s ** rows) ** bands


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


def choose_bands_rows(threshold: float, num_perm: int,
                      fp_weight: float = DEFAULT_FP_WEIGHT,
                      fn_weight: float = DEFAULT_FN_WEIGHT) -> BandChoice:
    """Pick (bands, rows) minimising ``fp_weight*FP + fn_weight*FN`` areas.

    Ties go to fewer bands (less work). Raises :class:`ConfigError` for a
    threshold outside (0, 1].
    """
    if not 0.0 < threshold <= 1.0:
        raise ConfigError(f"--threshold must be in (0, 1], got {threshold}")
    if num_perm < 1:
        raise ConfigError(f"--num-perm must be at least 1, got {num_perm}")
    best = None
    best_err = np.inf
    # Vectorised over the grid: one pass per (b, r).
    lo = _GRID <= threshold
    hi = _GRID >= threshold
    for b, r in candidate_splits(num_perm):
        p = 1.0 - (1.0 - _GRID ** r) ** b
        fp = float(np.trapezoid(p[lo], _GRID[lo])) if lo.sum() > 1 else 0.0
        fn = float(np.trapezoid(1.0 - p[hi], _GRID[hi])) if hi.sum() > 1 else 0.0
        err = fp_weight * fp + fn_weight * fn
        if err < best_err - 1e-12:
            best_err = err
            best = BandChoice(b, r, threshold, fp, fn)
    return best
