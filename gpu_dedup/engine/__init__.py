"""The engine: the deduplication stages as tasks over partitions, run by one
runner over a store through an executor.

* :mod:`~gpu_dedup.engine.plan`: the budget split and the choice of store;
* :mod:`~gpu_dedup.engine.store`: memory or the work directory on disk;
* :mod:`~gpu_dedup.engine.records`: what the stages hand each other;
* :mod:`~gpu_dedup.engine.base`: what every runner needs, and the ``read``
  stage;
* :mod:`~gpu_dedup.engine.tasks`: one function per stage over one partition;
* :mod:`~gpu_dedup.engine.runner`: the near-duplicate stages in order (the
  last one in :mod:`~gpu_dedup.engine.assign_stage`), and the outputs
  (:mod:`~gpu_dedup.engine.outputs`);
* :mod:`~gpu_dedup.engine.executors`: in process, Dask threads, a Dask cluster;
* :mod:`~gpu_dedup.engine.substr`: exact-substring deduplication over the same
  machinery (its outputs in :mod:`~gpu_dedup.engine.substr_output`).

Commands open and run it through :mod:`gpu_dedup.shell`:
:func:`gpu_dedup.pipeline.deduplicate` over an Arrow array in memory,
:func:`gpu_dedup.pipeline.run` over files, the same runner.
"""
from __future__ import annotations

import pyarrow as pa

from .result import DedupResult, scurve_summary

__all__ = ["DedupResult", "as_text_array", "result_arrays", "scurve_summary"]


def as_text_array(texts) -> pa.Array:
    """``texts`` (an Arrow string array, chunked or not, or a list of str) as
    one ``large_string`` array; ValueError for anything else."""
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    if not isinstance(texts, pa.Array):
        texts = pa.array(list(texts), type=pa.large_string())
    if pa.types.is_string_view(texts.type) or pa.types.is_string(texts.type):
        texts = texts.cast(pa.large_string())
    if not pa.types.is_large_string(texts.type):
        raise ValueError(f"texts must be strings, got Arrow type {texts.type}")
    return texts


def result_arrays(runner) -> DedupResult:
    """A finished runner's arrays as a :class:`DedupResult`, in memory."""
    f = runner.final
    return DedupResult(f("cluster"), f("kept"), f("duplicate_of"), f("similarity"),
                       f("pair_a"), f("pair_b"), f("pair_similarity"), f("pair_exact"),
                       runner.stats(), dict(runner.timer.seconds), runner.cfg, runner.be.name,
                       runner.plan.describe())


