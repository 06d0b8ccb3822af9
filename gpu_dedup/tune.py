"""``gpu-dedup tune``: the bands/rows table for a threshold and a hash budget.

For ``K`` hashes, every split into ``b`` bands of ``r`` rows with ``b * r = K``
(and at least two of each) is a row of the cookbook's table: the approximate
threshold ``(1/b)^(1/r)``, the probability of becoming a candidate at a few
similarities, and the false-positive and false-negative areas under the
S-curve on either side of the threshold. The recommended split is
:func:`gpu_dedup.params.choose_bands_rows`, the one the engine uses.

Example:
    >>> t = tune_table(0.8, 128)
    >>> (t.recommended.bands, t.recommended.rows)
    (18, 7)
    >>> [(r.bands, r.rows) for r in t.rows][:4]
    [(64, 2), (32, 4), (18, 7), (16, 8)]
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from .atomic import write_atomic
from .errors import ConfigError, DedupError
from .params import (DEFAULT_FN_WEIGHT, DEFAULT_FP_WEIGHT, BandChoice, check_num_perm,
                     choose_bands_rows, collision_probability, evaluate)


@dataclass(frozen=True)
class TuneTable:
    threshold: float
    num_perm: int
    similarities: tuple
    rows: list             # BandChoice, most bands first
    recommended: BandChoice
    fp_weight: float
    fn_weight: float


def table_splits(num_perm: int, recommended: BandChoice) -> list[tuple[int, int]]:
    """The splits shown: ``b * r = K`` with ``b, r >= 2``, the recommended
    one, and for budgets with few divisors ``b = K // r`` for powers of two."""
    splits = {(num_perm // r, r) for r in range(2, num_perm // 2 + 1) if num_perm % r == 0}
    if len(splits) < 4:
        r = 2
        while r <= num_perm // 2:
            splits.add((num_perm // r, r))
            r *= 2
    splits.add((recommended.bands, recommended.rows))
    return sorted(splits, key=lambda br: (-br[0], br[1]))


def tune_table(threshold: float, num_perm: int, fp_weight: float = DEFAULT_FP_WEIGHT,
               fn_weight: float = DEFAULT_FN_WEIGHT, similarities=None) -> TuneTable:
    """The table for ``threshold`` and ``num_perm`` hashes."""
    if not 0.0 < threshold <= 1.0:
        raise ConfigError(f"--threshold must be in (0, 1], got {threshold}")
    if num_perm < 2:
        raise ConfigError(f"--num-perm must be at least 2, got {num_perm}")
    check_num_perm(num_perm)
    if fp_weight < 0 or fn_weight < 0 or fp_weight + fn_weight <= 0:
        raise ConfigError("--fp-weight and --fn-weight must be non-negative, not both zero")
    rec = choose_bands_rows(threshold, num_perm, fp_weight, fn_weight)
    sims = similarities or sorted({0.3, 0.5, 0.7, round(threshold, 4), 0.9})
    rows = [evaluate(threshold, b, r) for b, r in table_splits(num_perm, rec)]
    return TuneTable(threshold, num_perm, tuple(sims), rows, rec, fp_weight, fn_weight)


def format_table(t: TuneTable) -> str:
    """The table as text, the recommended row marked with ``*``."""
    sim_cols = "".join(f"{'s=' + format(s, 'g'):>8}" for s in t.similarities)
    out = [f"bands/rows for {t.num_perm} hashes at threshold {t.threshold:g} "
           f"(weights: false positives {t.fp_weight:g}, false negatives {t.fn_weight:g})",
           "",
           f"  {'bands':>5} {'rows':>5} {'hashes':>6} {'threshold~':>10}  P(candidate) at"
           f"{'':>{max(len(sim_cols) - 15, 0)}}  {'FP area':>8} {'FN area':>8}",
           f"  {'':>5} {'':>5} {'':>6} {'':>10}{sim_cols}"]
    for c in t.rows:
        mark = "*" if (c.bands, c.rows) == (t.recommended.bands, t.recommended.rows) else " "
        probs = "".join(f"{float(collision_probability(s, c.bands, c.rows)):8.3f}"
                        for s in t.similarities)
        out.append(f"{mark} {c.bands:5d} {c.rows:5d} {c.bands * c.rows:6d} "
                   f"{c.approx_threshold:10.2f}{probs}  {c.fp_area:8.4f} {c.fn_area:8.4f}")
    r = t.recommended
    out += ["",
            f"recommended (*): {r.bands} bands x {r.rows} rows ({r.bands * r.rows} of "
            f"{t.num_perm} hashes): threshold~ {r.approx_threshold:.3f}, P(candidate) at "
            f"{t.threshold:g} = {float(collision_probability(t.threshold, r.bands, r.rows)):.3f}, "
            f"FP area {r.fp_area:.4f}, FN area {r.fn_area:.4f}",
            f"use it: gpu-dedup run ... --num-perm {t.num_perm} --bands {r.bands} "
            f"--rows {r.rows} --threshold {t.threshold:g}"]
    return "\n".join(out)


def to_dict(t: TuneTable) -> dict:
    def row(c):
        return {"bands": c.bands, "rows": c.rows, "hashes": c.bands * c.rows,
                "approx_threshold": c.approx_threshold, "fp_area": c.fp_area,
                "fn_area": c.fn_area,
                "p_candidate": {f"{s:g}": float(collision_probability(s, c.bands, c.rows))
                                for s in t.similarities}}
    return {"threshold": t.threshold, "num_perm": t.num_perm,
            "weights": {"fp": t.fp_weight, "fn": t.fn_weight},
            "rows": [row(c) for c in t.rows], "recommended": row(t.recommended)}


def plot(t: TuneTable, path: str, overwrite: bool = False) -> None:
    """The S-curves of the table as a PNG, the recommended one bold, the
    threshold marked. Needs matplotlib.

    An existing ``path`` is refused unless ``overwrite``. The image is drawn
    into a temporary file beside ``path`` and renamed over it when complete,
    so ``path`` is never left half written; without ``overwrite`` the rename
    never replaces a file that appeared meanwhile.
    """
    if os.path.isdir(path):
        raise DedupError(f"{path}: is a folder; give --plot a file name")
    if os.path.lexists(path) and not overwrite:
        raise DedupError(f"{path}: already exists; pass --overwrite to replace it, or choose "
                         f"another --plot file")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise DedupError("tune --plot needs matplotlib: pip install matplotlib") from exc
    fig = _figure(t, plt)
    try:
        write_atomic(path, lambda tmp: fig.savefig(tmp, format="png"), overwrite=overwrite)
    except FileExistsError:
        raise DedupError(f"{path}: already exists; pass --overwrite to replace it, or choose "
                         f"another --plot file") from None
    except OSError as exc:
        raise DedupError(f"{path}: cannot write the plot: {exc.strerror or exc}") from exc
    finally:
        plt.close(fig)


def _figure(t: TuneTable, plt):
    s = np.linspace(0.0, 1.0, 401)
    fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
    for c in t.rows:
        rec = (c.bands, c.rows) == (t.recommended.bands, t.recommended.rows)
        ax.plot(s, collision_probability(s, c.bands, c.rows),
                lw=2.8 if rec else 1.1, alpha=1.0 if rec else 0.75,
                label=f"{c.bands} x {c.rows}" + ("  (recommended)" if rec else ""))
    ax.axvline(t.threshold, color="#c0392b", ls="--", lw=1.4,
               label=f"threshold {t.threshold:g}")
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("Jaccard similarity of a pair")
    ax.set_ylabel("P(candidate) = 1 - (1 - s^r)^b")
    ax.set_title(f"S-curves for {t.num_perm} hashes (bands x rows)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right", ncol=2 if len(t.rows) > 8 else 1)
    fig.tight_layout()
    return fig
