"""What a run found: :class:`DedupResult`, and the S-curve summary of its
parameters."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config import Config
from ..params import approx_threshold, collision_probability


@dataclass
class DedupResult:
    """What a run found, per document (in input order) and per edge.

    Attributes:
        cluster: int64 input index of the kept document of the document's
            cluster (greedy: itself, or the one it duplicates); components:
            the smallest input index of its component.
        kept: bool, exactly one ``True`` per cluster.
        duplicate_of: int64 input index of the kept document a removed one
            duplicates; -1 for kept documents.
        similarity: float64 similarity of a removed document to it (the
            configured similarity; 1 for identical texts); NaN when kept.
        pair_a, pair_b: int64 input indices of accepted edges (``a < b``).
        pair_similarity: float64, the value that accepted each edge.
        pair_exact: bool, whether the edge joined identical normalized texts.
        stats: counts (documents, candidates, verified edges, removals...).
        seconds: seconds per stage.
        config: the resolved configuration.
        backend: the backend's name (``cpu`` or ``gpu``).
        plan: the plan the run followed (store, budget, partitions).
    """

    cluster: np.ndarray
    kept: np.ndarray
    duplicate_of: np.ndarray
    similarity: np.ndarray
    pair_a: np.ndarray
    pair_b: np.ndarray
    pair_similarity: np.ndarray
    pair_exact: np.ndarray
    stats: dict
    seconds: dict
    config: Config
    backend: str = "cpu"
    plan: dict | None = None


def scurve_summary(cfg: Config) -> dict:
    """The parameters' S-curve: approximate threshold and a few probabilities."""
    c = cfg.resolved()
    sims = [0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95]
    return {
        "bands": c.bands, "rows": c.rows,
        "approx_threshold": approx_threshold(c.bands, c.rows),
        "collision_probability": {f"{s:g}": float(collision_probability(s, c.bands, c.rows))
                                  for s in sims},
        "at_threshold": float(collision_probability(float(c.threshold), c.bands, c.rows)),
    }
