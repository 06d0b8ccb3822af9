"""The one command shell: how every command that runs a runner opens a run,
carries it through and publishes it.

A command over files (``gpu-dedup run``, ``gpu-dedup substr``, and the runs
that build and add to an index) goes:

1. :func:`open_files`: the inputs expanded, the output directory checked,
   the budget, the scheduler and the backend (:class:`Opened`);
2. :func:`run_files`: the run's session (plan, store, executor, memory
   monitor: :func:`gpu_dedup.engine.session.session`), the command's runner
   over the read units, then, in the output's staging folder, the
   command's outputs (stage ``write``), its report, report.html (stage
   ``report``) and report.json, and the output published whole.

A library call over an array in memory (:func:`gpu_dedup.deduplicate`,
:func:`gpu_dedup.exact_substrings`) goes through :func:`run_array`: the same
runner over a memory store.

What differs between commands is a :class:`Command`: the work directory's
name and key, how its runner is made, and what it writes and reports.
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Protocol

from .backend import get_backend
from .engine import layout
from .engine.plan import INTERPRET_MAX_BYTES, interpreted_kernels
from .engine.session import Session, os_error, session
from .errors import ConfigError
from .io.plan import input_bytes, input_records, plan_reads
from .io.sources import ON_BAD_RECORD, group_inputs
from .kernels import ahead
from .kernels.jit import interpreted, load_numba_ahead
from .memory import format_size, parse_size

log = logging.getLogger("gpu_dedup")

#: The read unit of an array given to a library call.
ARRAY_UNIT = {"kind": "array", "file": 0, "path": "<array>", "fmt": "array", "files": None,
              "chunk": 0, "order": 0}


def choose_backend(device: str = "cpu", gpu_memory=None, backend=None) -> tuple[object, str]:
    """The backend a run uses and the line that says so: ``backend`` when
    given, else the one ``device`` names (:func:`gpu_dedup.backend.get_backend`)."""
    if backend is not None:
        return backend, f"device: {backend.name} (given)"
    return get_backend(device, gpu_memory=gpu_memory)


def check_on_bad_record(on_bad_record: str) -> None:
    if on_bad_record not in ON_BAD_RECORD:
        raise ConfigError(f"--on-bad-record must be 'error' or 'skip', got {on_bad_record!r}")


@dataclass
class Opened:
    """A command over files, opened: nothing is read or written yet.

    Attributes:
        paths: the expanded input files and folders.
        out: the checked :class:`gpu_dedup.output.OutputDir`.
        output: the output directory as given.
        budget: the memory budget in bytes.
        spec: the scheduler.
        backend: the backend object.
        device_line: how the backend was chosen (``"device: NAME (...)"``).
        t_start: when the command started (``time.perf_counter``).
    """

    paths: list
    out: object
    output: str
    budget: int
    spec: str
    backend: object
    device_line: str
    t_start: float

    @property
    def device(self) -> str:
        """What runs the kernels, in words (the report's ``device``)."""
        return self.device_line.split(": ", 1)[1]


def open_files(inputs, output: str, *, overwrite: bool = False, work_dir=None,
               memory_limit=None, scheduler: str = "none", device: str = "cpu",
               gpu_memory=None, backend=None, device_line: str | None = None) -> Opened:
    """What every command over files starts with: the inputs expanded, the
    output directory checked (refused when non-empty unless ``overwrite``,
    or when it is, holds or sits inside an input), the budget, the
    scheduler and the backend (``backend`` when given, described by
    ``device_line``; else the one ``device`` names)."""
    from .io.sources import expand_inputs
    from .memory import default_budget
    from .output import OutputDir
    from .engine.executors import parse_scheduler
    from .engine.plan import check_budget
    t_start = time.perf_counter()
    paths = expand_inputs(inputs)
    out = OutputDir(output, inputs=[str(x) for x in inputs] + paths, overwrite=overwrite,
                    work_dir=work_dir)
    out.check()
    budget = parse_size(memory_limit) if memory_limit is not None else default_budget()
    check_budget(budget)
    spec = parse_scheduler(scheduler)
    be, line = choose_backend(device, gpu_memory, backend)
    if backend is not None and device_line:
        line = device_line
    log.info(line)
    return Opened(paths, out, output, budget, spec, be, line, t_start)


class Command(Protocol):
    """What a command adds to the shell."""

    #: The work directory's name prefix (what made it).
    name: str
    #: The plan's chunk share and peak memory per input byte
    #: (:func:`gpu_dedup.engine.plan.make_plan`; None: the defaults).
    chunk_share: int
    memory_per_byte: int | None
    #: Whether a small run of it may run its kernels interpreted
    #: (:func:`gpu_dedup.engine.plan.interpreted_kernels`): every kernel it
    #: runs has a whole-array stand-in or is cheap interpreted.
    interpretable: bool

    def key(self, paths: list) -> dict:
        """What determines the stored results, besides the plan."""
        ...

    def runner(self, opened: Opened, s: Session):
        """The runner over the session's store and executor."""
        ...

    def write(self, runner, folder: str) -> dict:
        """The outputs into ``folder``; what :meth:`report` needs of them."""
        ...

    def report(self, runner, written: dict, opened: Opened, s: Session) -> dict:
        """report.json's contents (``seconds`` is set by the shell)."""
        ...

    def html(self, runner, folder: str, report: dict) -> None:
        """report.html into ``folder``."""
        ...


def memory_report(s: Session) -> dict:
    """The budget, the peak resident memory of each stage (this process and
    its children), and of each process by role: the driver (this process),
    the executor's workers, each beside its limit, and the run's other
    processes (``s.processes``)."""
    processes = ([{"role": "driver", "pid": os.getpid(), "peak_rss_bytes": s.monitor.own,
                   "limit_bytes": s.plan.budget}] + s.executor.process_peaks() + s.processes)
    return {"limit_bytes": s.plan.budget, "limit": format_size(s.plan.budget),
            "peak_rss_bytes": dict(s.monitor.peaks),
            "peak_rss_total_bytes": max(s.monitor.peaks.values(), default=0),
            "processes": processes}


def work_report(runner, s: Session) -> dict:
    """The store, the work directory, and the units each stage ran and reused."""
    return {"store": s.plan.store, "reason": s.plan.reason, "dir": s.store.root,
            "chunks": len(runner.chunks), "units": dict(runner.units),
            "reused": dict(runner.reused), "plan": s.plan.describe(),
            # per stage, this process's CPU seconds and bytes read from and
            # written to storage (the page cache's hits apart)
            "stage_usage": {k: dict(v) for k, v in runner.timer.usage.items()}}


def run_files(opened: Opened, command: Command, *, workers=None, work_dir=None,
              keep_work_dir: bool = False, partition_bytes=None, html: bool = True) -> dict:
    """Run ``command`` over the opened inputs and publish its output
    directory; returns the report (also written as report.json).

    Runs out of core through the work directory when the inputs may not fit
    the budget (or when ``work_dir`` is given: a rerun after a crash resumes
    it), on the executor the scheduler names; the outputs are the same bytes
    whichever way it runs.
    """
    paths = opened.paths
    groups = group_inputs(paths)
    measured = sum(input_bytes(p, files) for p, files in groups)
    with session(command.name, command.key(paths), measured=measured, budget=opened.budget,
                 spec=opened.spec, workers=workers, device=opened.backend.name,
                 output=opened.output, work_dir=work_dir, keep_work_dir=keep_work_dir,
                 partition_bytes=partition_bytes, chunk_share=command.chunk_share,
                 memory_per_byte=command.memory_per_byte) as s:
        runner = command.runner(opened, s)
        helper = None
        try:
            small = command.interpretable and interpreted_kernels(
                measured, s.executor, opened.backend, _records(groups, measured))
            if not small and s.executor.shared_memory and opened.backend.name == "cpu":
                load_numba_ahead()                # while the inputs are read
                helper = ahead.start(s.plan.budget)     # a first run: a second compiler
            with interpreted(small):
                return _run_and_publish(runner, command, opened, s, paths, html, helper)
        except OSError as exc:
            raise os_error(exc, s.store.root or opened.output) from exc
        finally:
            ahead.finish(helper)


def _records(groups, measured: int) -> int | None:
    """The documents of the inputs ``groups`` (``group_inputs``' shards) of
    ``measured`` bytes when they may be few enough to run interpreted and
    each shard's are counted cheaply (:func:`gpu_dedup.io.plan.input_records`),
    else None."""
    if measured > INTERPRET_MAX_BYTES:
        return None
    total = 0
    for p, files in groups:
        n = input_records(p, files)
        if n is None:
            return None
        total += n
    return total


def _run_and_publish(runner, command: Command, opened: Opened, s: Session, paths,
                     html: bool, helper=None) -> dict:
    """:func:`run_files`' run, outputs, report and publication; ``helper``:
    the process compiling kernels ahead (:mod:`.kernels.ahead`), finished
    once the run's stages are done, so that the report shows it."""
    from .report import write_report_json
    runner.run(plan_reads(paths, s.plan.chunk_bytes))
    ahead.finish(helper)
    if helper is not None and (compiler := helper.report()) is not None:
        s.processes.append(compiler)
    with opened.out:
        folder = opened.out.staging()
        with runner.stage("write"):
            written = command.write(runner, folder)
        report = command.report(runner, written, opened, s)
        if html:
            with runner.stage("report"):
                command.html(runner, folder, report)
        else:
            report["outputs"].pop("report_html", None)
        report["seconds"] = {**dict(runner.timer.seconds),
                             "total": time.perf_counter() - opened.t_start}
        write_report_json(os.path.join(folder, "report.json"), report)
        opened.out.publish()
    return report


def run_array(texts, make_runner, backend=None, *, memory_limit=None, scheduler: str = "none",
              workers=None, partition_bytes=None, memory_per_byte: int | None = None,
              interpretable: bool = False):
    """Run the runner ``make_runner(backend, store, executor, plan)`` over the
    string array ``texts`` in this process's memory; the finished runner.

    ``scheduler`` is ``none`` or ``threads`` (the array stays in this
    process); ``partition_bytes`` cuts the work into smaller partitions (the
    result never depends on it); ``interpretable``: as
    :attr:`Command.interpretable`.
    """
    from .engine import as_text_array
    from .engine.executors import make_executor
    from .engine.plan import make_plan
    from .engine.store import MemoryStore
    from .memory import default_budget
    texts = as_text_array(texts)
    if texts.null_count:
        raise ValueError("texts must not contain nulls")
    be = backend if backend is not None else get_backend("cpu")[0]
    budget = parse_size(memory_limit) if memory_limit is not None else default_budget()
    with make_executor(scheduler, workers, be.name) as ex:
        if not ex.shared_memory:
            raise ConfigError("a library call over an array runs in this process: use "
                              "scheduler 'none' or 'threads'")
        plan = make_plan(budget, ex.concurrency, texts.nbytes,
                         partition_bytes=(None if partition_bytes is None
                                          else parse_size(partition_bytes, "partition_bytes")),
                         memory_per_byte=memory_per_byte)
        store = MemoryStore()
        store.save_arrow(layout.INPUT_TEXTS, {"text": texts})
        runner = make_runner(be, store, ex, plan)
        with interpreted(interpretable and interpreted_kernels(texts.nbytes, ex, be,
                                                               len(texts))):
            runner.run([dict(ARRAY_UNIT)])
    return runner
