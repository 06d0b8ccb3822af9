"""report.json: what a run read, found, removed, and how long it took.

``report.html``, the same for a person, is :mod:`gpu_dedup.report_html`.
"""
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


#: At most this many skipped records are listed in report.json (all are counted).
MAX_LISTED_BAD_RECORDS = 10_000


def build_report(result, corpus, cfg, scurve: dict, seconds: dict, device: str, outputs: dict,
                 on_bad_record: str = "error") -> dict:
    s = result.stats
    skipped = corpus.skipped if hasattr(corpus, "skipped") else []
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
        "bad_records": {
            "policy": on_bad_record,
            "skipped": len(skipped),
            "records": skipped[:MAX_LISTED_BAD_RECORDS],
            "listed_all": len(skipped) <= MAX_LISTED_BAD_RECORDS,
        },
        "parameters": {**cfg.to_dict(), "name": cfg.name, "s_curve": scurve},
        "device": device,
        "seconds": seconds,
        "inputs": [{"path": sh.path, "format": sh.fmt, "compression": sh.compression,
                    "documents": len(sh), "skipped": len(getattr(sh, "skipped", [])),
                    "output": "data/" + sh.out_name} for sh in corpus.shards],
        "outputs": outputs,
        "versions": versions(),
    }
