"""What every runner needs: the run's context, stages that are timed and
announced, tasks mapped through the executor with reuse counted, and the
``read`` stage that every command starts with.

:class:`RunnerBase` is extended by the near-duplicate runner
(:class:`gpu_dedup.engine.runner.Runner`) and the exact-substring runner
(:class:`gpu_dedup.engine.substr.SubstrRunner`); neither inherits the
other's stages.
"""
from __future__ import annotations

import logging
import math
from contextlib import contextmanager

import numpy as np
import pyarrow as pa

from ..errors import InputError
from ..ids import duplicate_id_error
from ..io.plan import location
from ..kernels.jit import interpreting
from ..memory import release_memory
from ..timing import StageTimer
from . import exact_tasks, layout
from .records import Documents
from .tasks import Ctx, gather_ids

log = logging.getLogger("gpu_dedup")

#: The first stage of every runner: read the inputs into chunks.
READ = "read"


class RunnerBase:
    """The machinery of a runner over ``store`` with ``executor``.

    Args:
        backend: the backend object (its tasks in this process use it).
        store: a :class:`MemoryStore` or an opened :class:`DiskStore`.
        executor: from :func:`gpu_dedup.engine.executors.make_executor`.
        plan: the :class:`gpu_dedup.engine.plan.Plan`.
        cfg: the resolved :class:`gpu_dedup.config.Config` (None when the
            command has no use for one).
        on_stage: ``on_stage(name)`` as each stage starts.
        on_progress: ``on_progress(stage, done, total)`` as its tasks complete.
        on_bytes: ``on_bytes(read, total)`` (input bytes) as units are read.
        monitor: a started :class:`gpu_dedup.memory.PeakMonitor`, or None.
    """

    def __init__(self, backend, store, executor, plan, *, cfg=None, text_field="text",
                 id_field="id", on_bad_record="error", gpu_memory=None, on_stage=None,
                 on_progress=None, monitor=None, on_bytes=None):
        self.cfg = cfg
        self.be = backend
        self.store = store
        self.ex = executor
        self.plan = plan
        self.on_stage = on_stage
        self.on_progress = on_progress
        self.on_bytes = on_bytes
        self.monitor = monitor
        self.ctx = Ctx(store, cfg, backend.name, text_field, id_field, plan,
                       on_bad_record=on_bad_record, gpu_memory=gpu_memory, backend=backend)
        self.timer = StageTimer()
        self.reused: dict[str, int] = {}
        self.units: dict[str, int] = {}
        self.docs: Documents | None = None

    # -- what the read stage found ------------------------------------------
    @property
    def chunks(self) -> tuple:
        return self.docs.chunks

    @property
    def doc_starts(self) -> np.ndarray:
        return self.docs.starts

    @property
    def N(self) -> int:
        return self.docs.count

    @property
    def shard_paths(self) -> list:
        return self.docs.shard_paths

    # -- machinery ------------------------------------------------------------
    @contextmanager
    def stage(self, name: str):
        """Time a stage, record its peak memory and announce it."""
        if self.on_stage is not None:
            self.on_stage(name)
        with self.timer(name):
            if self.monitor is None:
                yield
            else:
                with self.monitor.stage(name, release=self.store.kind == "disk"):
                    yield

    def release(self, collect: bool = True) -> None:
        """Give freed memory back to the system (:func:`release_memory`),
        unless the run is small enough to run its kernels interpreted: it
        holds little, and each page it gave back would cost a fault again."""
        if not interpreting():
            release_memory(collect)

    def _progress(self, stage: str, done: int, total: int) -> None:
        if self.on_progress is not None and total:
            self.on_progress(stage, done, total)

    def _map(self, stage: str, task, items: list, *inputs, stop_on_error: bool = False) -> list:
        """``task(item, ctx, *inputs)`` for every item through the executor,
        counting units, reused units and (``read``) input bytes."""
        total = len(items)
        self.units[stage] = self.units.get(stage, 0) + total
        done = [0]
        sequential = self.ex.name == "none"
        read = [0]
        to_read = sum(int(u.get("bytes", 0)) for u in items) if stage == READ else 0

        def on_done(i, result):
            done[0] += 1
            if to_read and self.on_bytes is not None:
                read[0] += int(items[i].get("bytes", 0))
                self.on_bytes(read[0], to_read)
            if stop_on_error and sequential and isinstance(result, dict) and "error" in result:
                raise result["error"]     # in order: nothing earlier can fail any more
            if isinstance(result, dict) and result.get("reused"):
                self.reused[stage] = self.reused.get(stage, 0) + int(result["reused"])
            self._progress(stage, done[0], total)

        out = self.ex.map(task, items, self.ctx, *inputs, on_done=on_done)
        if self.reused.get(stage):
            log.info("%s: reused %d completed unit(s) from %s", stage, self.reused[stage],
                     self.store.root)
        return out

    def _stage_done(self, name: str, label: str | None = None):
        """The metadata of stage ``name`` if a disk store holds it complete
        (counted as reused under ``label``, by default the name)."""
        meta = self.store.done(layout.stage(name))
        if meta is not None:
            log.info("%s: reusing the completed stage from %s", name, self.store.root)
            label = label or name
            n = max(1, int(meta.get("units", 1)))
            self.reused[label] = self.reused.get(label, 0) + n
            self.units[label] = self.units.get(label, 0) + n
        return meta

    # -- the read stage -------------------------------------------------------
    def read(self, units: list, task) -> Documents:
        """Read every unit (``task``: how each chunk is stored); the chunks,
        checked: ids present on every record of a file that has them, and
        unique."""
        meta = self._stage_done(READ)
        if meta is None:
            results = self._map(READ, task, units, stop_on_error=True)
            errors = [(u["order"], r["error"]) for u, r in zip(units, results) if "error" in r]
            if errors:
                raise min(errors, key=lambda e: e[0])[1]
            chunks = [c for r in results for c in r["chunks"]]
            self._check_id_presence(chunks)
            docs = Documents.of(chunks)
            self._check_unique_ids(docs)
            meta = {"chunks": chunks, "units": len(units)}
            # every later stage reads the chunks' files: checked with the stage
            self.store.mark_done(layout.stage(READ), meta,
                                 units=[layout.chunk(c["key"]) for c in chunks])
        self.docs = Documents.of(meta["chunks"])
        return self.docs

    def _check_id_presence(self, chunks) -> None:
        """A file whose records have ids must have one on every record; across
        chunks, the first record without one is named."""
        by_file: dict[int, list] = {}
        for c in chunks:
            by_file.setdefault(c["file"], []).append(c)
        for cs in by_file.values():
            if len(cs) < 2 or not any(c["has_ids"] for c in cs):
                continue
            missing = [c["first_missing_id"] for c in cs if c.get("first_missing_id") is not None]
            missing += [c["first_line"] for c in cs if not c["has_ids"] and c["n"]]
            if missing:
                raise InputError(f"{location(cs[0], min(missing))}: missing id field "
                                 f"{self.ctx.id_field!r} (other records of this file have one)")

    def _check_unique_ids(self, docs: Documents) -> None:
        """The first repeated id (:mod:`gpu_dedup.ids`), found per partition
        of the id fingerprints, is one error naming both places."""
        if not any(c["has_ids"] for c in docs.chunks):
            return
        parts, split = self._fingerprint_parts(
            docs, layout.IDFP, lambda task, items: self.ex.map(task, items, self.ctx, docs))
        found = [r for r in self.ex.map(exact_tasks.task_ids,
                                        [(p, parts, split) for p in range(parts)],
                                        self.ctx, docs) if r is not None]
        if split:
            self._forget_split(docs, layout.IDFP, parts)
        if not found:
            return
        first, second = min(found)
        ids = gather_ids(self.ctx, docs, np.array([first, second])).to_pylist()
        if ids[0] == ids[1]:          # not two ids with one fingerprint
            raise duplicate_id_error(ids[0], self._locate(docs, second),
                                     self._locate(docs, first))

    def _fingerprint_parts(self, docs: Documents, name: str, run, active: bool = False,
                           lengths: bool = False) -> tuple[int, bool]:
        """The partitions of the 128-bit fingerprints ``name`` (``fp.npy`` or
        ``idfp.npy``), a task's share each, and whether each chunk's are
        first ordered by partition (from
        :data:`~gpu_dedup.engine.exact_tasks.SPLIT_PARTS` partitions on):
        then by :func:`~gpu_dedup.engine.exact_tasks.task_split`, through
        ``run(task, items)``, with ``active`` and ``lengths`` as the
        partitions read them. :meth:`_forget_split` deletes them once read."""
        parts = max(1, math.ceil(docs.count * exact_tasks.FINGERPRINT_TASK_BYTES
                                / self.plan.task_bytes))
        split = parts >= exact_tasks.SPLIT_PARTS
        if split:
            run(exact_tasks.task_split, [(name, c, parts, active, lengths)
                                         for c in range(len(docs.chunks))])
        return parts, split

    def _forget_split(self, docs: Documents, name: str, parts: int) -> None:
        """The units of :meth:`_fingerprint_parts`' split, deleted."""
        for c in range(len(docs.chunks)):
            self.store.forget(layout.fingerprint_split(name, parts, c))

    def _locate(self, docs: Documents, i: int) -> str:
        ci = int(docs.chunk_of(i))
        c = docs.chunks[ci]
        loc = self.store.load_npy(layout.chunk_file(c["key"], layout.LOC),
                                  mmap=True)[i - docs.starts[ci]]
        return location(c, int(loc))

    def locate(self, i: int) -> str:
        """Where document ``i`` is, for messages."""
        return self._locate(self.docs, i)

    def ids_of(self, docs) -> pa.Array:
        """The ids (``large_string``) of global document positions, in order."""
        return gather_ids(self.ctx, self.docs, docs)
