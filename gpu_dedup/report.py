"""report.json: what a run read, found, removed, and how long it took.

``report.html``, the same for a person, is :mod:`gpu_dedup.report_html`.
"""
from __future__ import annotations

import json
import platform
import sys

from .version import __version__
from .edge import clean_tree


def kernels_mode() -> str:
    """How the CPU kernels ran: ``compiled`` (Numba) or ``interpreted`` (a
    small run: :func:`gpu_dedup.kernels.jit.interpreted`)."""
    from .kernels.jit import interpreting
    return "interpreted" if interpreting() else "compiled"


def versions() -> dict:
    out = {"gpu_dedup": __version__, "python": platform.python_version()}
    for mod in ("numpy", "pyarrow", "numba", "scipy"):
        m = sys.modules.get(mod)         # those the run loaded (an interpreted run: no Numba)
        if m is not None:
            out[mod] = getattr(m, "__version__", "?")
    for mod in ("cupy", "cudf", "cugraph"):
        m = sys.modules.get(mod)
        if m is not None:
            out[mod] = getattr(m, "__version__", "?")
    return out


#: At most this many skipped records are listed in report.json (all are counted).
MAX_LISTED_BAD_RECORDS = 10_000


def selection_warning(stats: dict, threshold: float) -> str | None:
    """What a user should know about the removals, in one line, or None:
    removed documents far from the kept document they name (components
    chain), or comparisons the bucket bound left out."""
    rs = stats["removed_similarity"]
    ch = stats.get("chaining") or {}
    parts = []
    if rs["below_threshold"]:
        msg = (f"{rs['below_threshold']:,} removed document(s) "
               f"({100 * rs['below_threshold_share']:.2f}%) are below the threshold "
               f"{threshold:g} with the kept document they name")
        if ch.get("chained_clusters"):
            msg += (f": {ch['chained_clusters']:,} cluster(s) chain dissimilar documents, "
                    f"the largest of {ch['largest_chained_cluster']:,}; --cluster greedy "
                    f"removes only documents similar to a kept one")
        parts.append(msg)
    if stats.get("skipped_comparisons"):
        parts.append(f"{stats['skipped_comparisons']:,} bucket comparison(s) skipped by "
                     f"--bucket-limit; raise it to compare them")
    return "; ".join(parts) or None


def build_report(runner, seconds: dict, device: str, outputs: dict, *,
                 on_bad_record: str = "error", memory: dict | None = None,
                 scheduler: dict | None = None, work: dict | None = None) -> dict:
    """report.json of a finished run, the same keys whichever store, executor
    or device ran it.

    Args:
        runner: the :class:`gpu_dedup.engine.runner.Runner` that ran.
        seconds: seconds per stage (and ``total``).
        device: what ran the kernels, in words.
        outputs: the output files by role.
        on_bad_record: the bad-record policy.
        memory: the budget and the peak resident memory per stage.
        scheduler: the executor's description.
        work: the store and the work directory, and what was reused.
    """
    from .engine.result import scurve_summary
    s = runner.stats()
    cfg = runner.cfg
    shards = runner.shards()
    skipped = [x for sh in shards for x in sh["skipped"]]
    return {
        "documents": {
            "in": s["documents"],
            "kept": s["kept"],
            "removed": s["removed"],
            "exact_removed": s["exact_removed"],
            "fuzzy_removed": s["fuzzy_removed"],
            "without_shingles": s["documents_without_shingles"],
            "invalid_utf8_replaced": sum(sh["invalid_utf8"] for sh in shards),
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
        "selection": {
            "mode": s["cluster_mode"],
            "buckets": s["buckets"],
            "bucket_entries": s["bucket_entries"],
            "comparisons": s["candidate_edges"],
            "skipped_comparisons": s["skipped_comparisons"],
            "bucket_limit": cfg.bucket_limit,
            "removed_similarity": s["removed_similarity"],
            "chaining": s["chaining"],
            "warning": selection_warning(s, float(cfg.threshold)),
        },
        "bad_records": {
            "policy": on_bad_record,
            "skipped": len(skipped),
            "records": skipped[:MAX_LISTED_BAD_RECORDS],
            "listed_all": len(skipped) <= MAX_LISTED_BAD_RECORDS,
        },
        "parameters": {**cfg.to_dict(), "name": cfg.name, "s_curve": scurve_summary(cfg)},
        "device": device,
        "kernels": kernels_mode(),
        "seconds": seconds,
        "inputs": [{"path": sh["path"], "format": sh["format"],
                    "compression": sh["compression"], "documents": sh["documents"],
                    "skipped": len(sh["skipped"]), "output": sh["output"]} for sh in shards],
        "outputs": outputs,
        "memory": memory or {},
        "scheduler": scheduler or {},
        "work": work or {},
        "versions": versions(),
    }


def write_report_json(path: str, report: dict) -> None:
    """report.json: the report with every string cleaned (no credential of a
    URL, names that are not valid UTF-8 escaped: :func:`gpu_dedup.edge.clean`)."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(clean_tree(report), f, indent=2, sort_keys=False)
        f.write("\n")
