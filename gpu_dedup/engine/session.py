"""One run's machinery: its plan, store, executor and memory monitor.

Every command that runs the engine over files (``run``, ``substr``, through
:func:`gpu_dedup.shell.run_files`) opens a :func:`session`: the executor the
scheduler names, the plan from the budget and the measured inputs, the store
the plan chooses (memory, or a work directory on disk named by what
determines its contents, so that a rerun resumes it), and a peak-memory
monitor. On success the work directory is removed (unless kept); on failure
it stays for the rerun.
"""
from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from dataclasses import dataclass, field

from ..errors import DedupError
from ..memory import PeakMonitor, parse_size
from .executors import make_executor
from .plan import Plan, make_plan
from ..io.fs import is_url
from .remote_store import RemoteStore
from .store import FORMAT_VERSION, DiskStore, MemoryStore, work_dir_for

log = logging.getLogger("gpu_dedup")


def os_error(exc: OSError, where: str) -> DedupError:
    """An OSError as one line naming the file."""
    path = exc.filename or where
    return DedupError(f"{path}: {exc.strerror or exc}")


@dataclass
class Session:
    plan: Plan
    store: object
    executor: object
    monitor: PeakMonitor
    #: other processes of the run, as the report lists them (a first run's
    #: kernel compiler, :mod:`gpu_dedup.kernels.ahead`)
    processes: list = field(default_factory=list)


@contextmanager
def session(name: str, key: dict, *, measured: int, budget: int, spec: str, workers,
            device: str, output: str, work_dir=None, keep_work_dir: bool = False,
            partition_bytes=None, chunk_share: int = 12, memory_per_byte: int | None = None):
    """Open a run's plan, store, executor and monitor.

    Args:
        name: the work directory's name prefix (what made it).
        key: what determines the stored results (the plan's key is added).
        measured: the inputs' text bytes (:func:`gpu_dedup.io.plan.input_bytes`).
        chunk_share, memory_per_byte: as for :func:`~gpu_dedup.engine.plan.make_plan`.
    """
    monitor = PeakMonitor()
    monitor.start()
    executor = None
    store = None
    try:
        executor = make_executor(spec, workers, device, memory_limit=budget)
        force = ("a work directory was asked for" if work_dir is not None or keep_work_dir
                 else "")
        plan = make_plan(budget, executor.concurrency, measured,
                         shared_memory=executor.shared_memory, force_disk=force,
                         partition_bytes=(None if partition_bytes is None
                                          else parse_size(partition_bytes, "partition_bytes")),
                         chunk_share=chunk_share, memory_per_byte=memory_per_byte)
        log.info("plan: %s store (%s)", plan.store, plan.reason)
        if plan.store == "disk":
            root = work_dir_for(output, work_dir, name,
                                {"format": FORMAT_VERSION, **key, "plan": plan.key()})
            try:
                store = (RemoteStore(root) if is_url(root) else DiskStore(root)).open()
            except OSError as exc:
                raise os_error(exc, root) from exc
            log.info("work directory: %s", getattr(store, "url", store.root))
        else:
            store = MemoryStore()
        yield Session(plan, store, executor, monitor)
    finally:
        if executor is not None:
            executor.close()
        monitor.stop()
        if store is not None:
            store.close()
    if store.kind == "disk" and not keep_work_dir:
        store.remove()
        if work_dir is None and not is_url(store.root):
            try:
                os.rmdir(os.path.dirname(store.root))
            except OSError:
                pass
