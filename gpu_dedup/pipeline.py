"""``gpu-dedup run`` as a library call: inputs in, an output directory out.

:func:`run` checks the inputs and the output directory, plans the run,
hands the read units to the engine's one :class:`~gpu_dedup.engine.runner.
Runner` (in memory or out of core, in process or on Dask, as planned) and
writes clusters.parquet, pairs.parquet, data/, report.json and report.html
through :class:`gpu_dedup.output.OutputDir`: built in a staging folder and
moved into place only when complete.

A run may be given documents that come before its inputs, kept already
(:class:`Prior`, :class:`Fixed`): how ``run --against`` deduplicates against
indexes, which the index package opens and checks before it calls :func:`run`.
The pipeline knows only those documents, not where they come from.
"""
from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from .backend import get_backend
from .config import Config
from .engine.runner import Context, Runner
from .engine.session import open_run, os_error, session
from .errors import ConfigError
from .io.identity import input_identity
from .io.plan import input_bytes, plan_reads
from .io.sources import ON_BAD_RECORD, group_inputs
from .memory import format_size
from .report import build_report, write_report_json

log = logging.getLogger("gpu_dedup")

#: A peak resident memory above this multiple of the budget is warned about.
PEAK_WARNING = 1.5


@dataclass
class Fixed:
    """Documents that come before a run's inputs: kept already, never
    compared with each other, and left out of every output but
    ``duplicate_of`` (``greedy_select(fixed=...)``).

    Attributes:
        path: a Parquet file of them (the text field, and the id field when
            the run has one), read as the run's first input; None when there
            are none.
        context: what the engine keeps of them
            (:class:`gpu_dedup.engine.runner.Context`: their ids, and where
            each comes from for ``duplicate_of_index``).
        report: entries added to report.json.
    """

    path: str | None
    context: Context
    report: dict = field(default_factory=dict)


@runtime_checkable
class Prior(Protocol):
    """What finds the :class:`Fixed` documents of a run from its inputs."""

    def prepare(self, paths: list[str], folder: str, backend) -> Fixed:
        """The fixed documents a run over the expanded inputs ``paths``
        must see, found with the run's ``backend``; their files are written
        in ``folder``, which the run removes when it ends."""
        ...


def choose_backend(device: str = "cpu", gpu_memory=None, backend=None) -> tuple[object, str]:
    """The backend a run uses and the line that says so: ``backend`` when
    given, else the one ``device`` names (:func:`gpu_dedup.backend.get_backend`)."""
    if backend is not None:
        return backend, f"device: {backend.name} (given)"
    return get_backend(device, gpu_memory=gpu_memory)


def run(inputs, output: str, config: Config | None = None, *, device: str = "cpu",
        text_field: str = "text", id_field: str | None = "id", overwrite: bool = False,
        gpu_memory=None, on_stage=None, on_progress=None, on_bad_record: str = "error",
        html: bool = True, memory_limit=None, scheduler: str = "none", workers=None,
        work_dir=None, keep_work_dir: bool = False, partition_bytes=None,
        backend=None, device_line: str | None = None, prior: Prior | None = None,
        on_bytes=None) -> dict:
    """Deduplicate ``inputs`` into ``output``; returns the report (also written
    as ``report.json``).

    Args:
        inputs: files, directories and glob patterns (see :mod:`gpu_dedup.io.sources`).
        output: the output directory; refused when it is non-empty (unless
            ``overwrite``) or when it is, holds or sits inside an input.
        config: the :class:`Config` (defaults if None).
        device: ``"cpu"``, ``"gpu"`` or ``"auto"``.
        text_field, id_field: the fields holding the text and a unique id
            (``id_field=None``: ids are generated as ``FILE:LINE``).
        on_stage: called with each stage's name as it starts.
        on_progress: called with the fraction done of the current stage, as
            its tasks complete.
        on_bytes: called as ``on_bytes(read, total)`` (input bytes) while the
            inputs are read.
        on_bad_record: ``"error"`` (stop at the first bad record) or ``"skip"``
            (leave bad records out, count them and list them in the report).
        html: also write ``report.html``.
        memory_limit: the budget (bytes or ``"4GiB"``; default a safe share of
            the machine's memory). Inputs that may not fit it run out of core,
            through the work directory.
        scheduler, workers: where tasks run (see :mod:`gpu_dedup.engine.executors`).
        work_dir: root of the work directory (default ``.gpu-dedup-work``
            beside ``output``); giving one makes the run resumable.
        keep_work_dir: keep the work directory after success.
        partition_bytes: each task's share of memory instead of the budget's
            split (bytes or a size string); it cuts even a small corpus into
            many partitions and never changes a result.
        backend: a backend object to use instead of the one ``device`` names.
        device_line: how ``backend`` was chosen, as the report says it
            (:func:`choose_backend`; default ``"device: NAME (given)"``).
        prior: finds documents that come before the inputs, kept already
            (:class:`Prior`), once the inputs and the output are checked and
            the backend is chosen; ``run --against`` passes the documents of
            indexes this way (:func:`gpu_dedup.index.run_against`).

    Example:
        >>> report = run(["shards/"], "out", Config(threshold=0.8))  # doctest: +SKIP
        >>> report["documents"]["removed"]                          # doctest: +SKIP
    """
    t_start = time.perf_counter()
    cfg = (config or Config()).resolved()
    if on_bad_record not in ON_BAD_RECORD:
        raise ConfigError(f"--on-bad-record must be 'error' or 'skip', got {on_bad_record!r}")
    paths, out, budget, spec = open_run(inputs, output, overwrite=overwrite, work_dir=work_dir,
                                        memory_limit=memory_limit, scheduler=scheduler)
    be, line = choose_backend(device, gpu_memory, backend)
    device_line = device_line if backend is not None and device_line else line
    log.info(device_line)
    fixed = folder = None
    if prior is not None:
        parent = os.path.dirname(os.path.abspath(output))
        os.makedirs(parent, exist_ok=True)
        folder = tempfile.mkdtemp(prefix=".gpu-dedup-against-", dir=parent)
        try:
            fixed = prior.prepare(paths, folder, be)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        if fixed.path is not None:
            paths = [fixed.path] + paths
    try:
        return _run(paths, out, cfg, be, device_line, t_start, output, budget, spec, fixed,
                    text_field=text_field, id_field=id_field,
                    on_stage=on_stage, on_progress=on_progress, on_bad_record=on_bad_record,
                    html=html, workers=workers, work_dir=work_dir,
                    keep_work_dir=keep_work_dir, partition_bytes=partition_bytes,
                    gpu_memory=gpu_memory, on_bytes=on_bytes)
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def _run(paths, out, cfg, be, device_line, t_start, output, budget, spec, fixed, *,
         text_field, id_field, on_stage, on_progress, on_bad_record, html,
         workers, work_dir, keep_work_dir, partition_bytes, gpu_memory, on_bytes=None) -> dict:
    measured = sum(input_bytes(p, files) for p, files in group_inputs(paths))

    def progress(stage, done, total):
        if on_progress is not None and total:
            on_progress(done / total)

    key = {"config": cfg.to_dict(), "text_field": text_field, "id_field": id_field,
           "on_bad_record": on_bad_record, "inputs": input_identity(paths)}
    with session(cfg.name, key, measured=measured, budget=budget, spec=spec, workers=workers,
                 device=be.name, output=output, work_dir=work_dir,
                 keep_work_dir=keep_work_dir, partition_bytes=partition_bytes) as s:
        plan, store, executor, monitor = s.plan, s.store, s.executor, s.monitor
        runner = Runner(cfg, be, store, executor, plan, text_field=text_field,
                        id_field=id_field, on_bad_record=on_bad_record, gpu_memory=gpu_memory,
                        on_stage=on_stage, on_progress=progress, monitor=monitor,
                        context=None if fixed is None else fixed.context,
                        on_bytes=on_bytes)
        try:
            runner.run(plan_reads(paths, plan.chunk_bytes))
        except OSError as exc:
            raise os_error(exc, store.root or output) from exc
        with out:
            folder = out.staging()
            with runner.stage("write"):
                outputs = runner.write(folder, progress)
            report = _report(runner, outputs, device_line, on_bad_record, monitor, executor,
                             t_start)
            if fixed is not None:
                report.update(fixed.report)
            if html:
                with runner.stage("report"):
                    _write_html(folder, report, runner)
                report["seconds"] = {**dict(runner.timer.seconds),
                                     "total": time.perf_counter() - t_start}
            else:
                report["outputs"].pop("report_html", None)
            write_report_json(os.path.join(folder, "report.json"), report)
            out.publish()
    return report


def _report(runner, outputs, device_line, on_bad_record, monitor, executor, t_start) -> dict:
    plan = runner.plan
    peak = max(monitor.peaks.values(), default=0)
    memory = {
        "limit_bytes": plan.budget,
        "limit": format_size(plan.budget),
        "peak_rss_bytes": dict(monitor.peaks),
        "peak_rss_total_bytes": peak,
        "measured": "resident set of this process and its children",
    }
    memory["device_peak_bytes"] = runner.stats().get("device_peak_bytes")   # None: no device
    memory["warning"] = None
    if peak > PEAK_WARNING * plan.budget:
        memory["warning"] = (f"peak resident memory {format_size(peak)} exceeded "
                             f"{PEAK_WARNING:g}x the budget of {format_size(plan.budget)}")
        log.warning("%s; pass a larger --memory-limit", memory["warning"])
    work = {"store": plan.store, "reason": plan.reason, "dir": runner.store.root,
            "chunks": len(runner.chunks), "units": dict(runner.units),
            "reused": dict(runner.reused), "plan": plan.describe(),
            # on a device: documents whose normalization needed the host (not ASCII)
            "normalized_on_host": runner.stats().get("normalized_on_host"),
            # greedy selection: "device", "host", or why a device run did it on the host
            "selection_ran_on": runner.stats().get("selection_ran_on"),
            # its rounds (passes on a CPU) and the pairs it scored
            "selection_rounds": runner.stats().get("selection_rounds"),
            "selection_scored": runner.stats().get("selection_scored")}
    seconds = {**dict(runner.timer.seconds), "total": time.perf_counter() - t_start}
    report = build_report(runner, seconds, device_line.split(": ", 1)[1], outputs,
                          on_bad_record=on_bad_record, memory=memory,
                          scheduler=executor.describe(), work=work)
    if report["selection"]["warning"]:
        log.warning("%s", report["selection"]["warning"])
    return report


def _write_html(folder: str, report: dict, runner) -> None:
    """report.html from the runner's arrays; the clusters it shows are read
    back (their normalized text) one document at a time."""
    from .engine import result_arrays
    from .report_html import write_html

    class _Corpus:
        texts = runner.texts("text.arrow")
        ids = runner.texts("ids.arrow")
    write_html(os.path.join(folder, "report.html"), report, result_arrays(runner), _Corpus)


def summary_line(report: dict) -> str:
    """One line for the terminal: what was read, kept and removed."""
    d = report["documents"]
    e = report["edges"]
    line = (f"{d['in']:,} documents: kept {d['kept']:,}, removed {d['removed']:,} "
            f"({d['exact_removed']:,} exact, {d['fuzzy_removed']:,} near-duplicate); "
            f"{e['candidates']:,} pairs compared, {e['verified']:,} similar; "
            f"{report['seconds']['total']:.2f}s")
    bad = report.get("bad_records", {}).get("skipped", 0)
    if bad:
        line += f"; skipped {bad:,} bad record(s)"
    return line
