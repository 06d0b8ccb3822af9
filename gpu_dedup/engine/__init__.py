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

:func:`deduplicate` runs it over an Arrow array in memory; files go through
:func:`gpu_dedup.pipeline.run`, the same runner.
"""
from __future__ import annotations

import pyarrow as pa

from ..config import Config
from .result import DedupResult, scurve_summary

__all__ = ["DedupResult", "as_text_array", "deduplicate", "scurve_summary"]


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


def deduplicate(texts, config: Config | None = None, backend=None, *, memory_limit=None,
                scheduler: str = "none", workers: int | None = None,
                partition_bytes: int | None = None, on_stage=None,
                on_progress=None) -> DedupResult:
    """Cluster near-duplicate texts.

    Args:
        texts: an Arrow string array (or a list of str) with no nulls.
        config: the run's :class:`Config` (defaults if None).
        backend: a backend from :func:`gpu_dedup.backend.get_backend` (CPU if None).
        memory_limit: the budget that sizes the partitions (default: a safe
            share of the machine's memory); the result does not depend on it.
        scheduler, workers: ``none`` or ``threads`` (the array stays in this
            process's memory).
        partition_bytes: each task's share instead of the budget's split
            (small values give many partitions; the result never depends on it).
        on_stage, on_progress: as for :func:`gpu_dedup.pipeline.run`.

    Returns:
        A :class:`DedupResult`.

    Example:
        >>> r = deduplicate(["a cat sat on the mat", "a cat sat on the mat!"],
        ...                 Config(threshold=0.7))
        >>> r.kept.tolist()
        [True, False]
    """
    from ..backend import get_backend
    from ..errors import ConfigError
    from ..memory import default_budget, parse_size
    from .executors import make_executor
    from .plan import make_plan
    from .runner import Runner
    from .store import MemoryStore
    cfg = (config or Config()).resolved()
    be = backend if backend is not None else get_backend("cpu")[0]
    texts = as_text_array(texts)
    if texts.null_count:
        raise ValueError("texts must not contain nulls")
    budget = parse_size(memory_limit) if memory_limit is not None else default_budget()
    with make_executor(scheduler, workers, be.name) as ex:
        if not ex.shared_memory:
            raise ConfigError("deduplicate() over an array runs in this process: use "
                              "scheduler 'none' or 'threads'")
        raw = texts.nbytes
        plan = make_plan(budget, ex.concurrency, raw, partition_bytes=partition_bytes)
        store = MemoryStore()
        store.save_arrow("input/texts", {"text": texts})
        unit = {"kind": "array", "file": 0, "path": "<array>", "fmt": "array", "files": None,
                "chunk": 0, "key": "f00000c000000", "order": 0}
        runner = Runner(cfg, be, store, ex, plan, id_field=None, on_stage=on_stage,
                        on_progress=on_progress)
        runner.run([unit])
        f = runner.final
        result = DedupResult(f("cluster"), f("kept"), f("duplicate_of"), f("similarity"),
                             f("pair_a"), f("pair_b"),
                             f("pair_similarity"), f("pair_exact"), runner.stats(),
                             dict(runner.timer.seconds), cfg, be.name, plan.describe())
    return result


def result_arrays(runner) -> DedupResult:
    """A finished runner's arrays as a :class:`DedupResult` (memory-mapped
    from a disk store)."""
    f = runner.final
    return DedupResult(f("cluster", True), f("kept", True), f("duplicate_of", True),
                       f("similarity", True), f("pair_a", True),
                       f("pair_b", True), f("pair_similarity", True), f("pair_exact", True),
                       runner.stats(), dict(runner.timer.seconds), runner.cfg, runner.be.name,
                       runner.plan.describe())


