"""report.json: what a run read, found, removed, and how long it took."""
from __future__ import annotations

import platform
import sys

from . import __version__


def versions() -> dict:
    out = {"gpu_dedup": __version__, "python": platform.python_version()}
    for mod in ("numpy", "pyarrow", "numba", "scipy"):
        m = sys.modules.get(mod)
        if m is None:
            try:
                m = __import__(mod)
            except ImportError:
                continue
        out[mod] = getattr(m, "__version__", "?")
    for mod in ("cupy", "cudf", "cugraph"):
        m = sys.modules.get(mod)
        if m is not None:
            out[mod] = getattr(m, "__version__", "?")
    return out


def build_report(result, corpus, cfg, scurve: dict, seconds: dict, device: str, outputs: dict) -> dict:
    s = result.stats
    return {
        "documents": {
            "in": s["documents"],
            "kept": s["kept"],
            "removed": s["removed"],
            "exact_removed": s["exact_removed"],
            "fuzzy_removed": s["fuzzy_removed"],
            "without_shingles": s["documents_without_shingles"],
            "invalid_utf8_replaced": corpus.invalid_utf8,
        },
        "clusters": {"total": s["clusters"], "with_duplicates": s["duplicate_clusters"]},
        "edges": {
            "exact": s["exact_edges"],
            "candidates": s["candidate_edges"],
            "first_round_candidates": s["first_round_candidates"],
            "verified": s["verified_edges"],
            "rounds": s["rounds"],
            "unresolved": s["unresolved_edges"],
        },
        "parameters": {**cfg.to_dict(), "name": cfg.name, "s_curve": scurve},
        "device": device,
        "seconds": seconds,
        "inputs": [{"path": sh.path, "format": sh.fmt, "compression": sh.compression,
                    "documents": len(sh), "output": "data/" + sh.out_name} for sh in corpus.shards],
        "outputs": outputs,
        "versions": versions(),
    }
