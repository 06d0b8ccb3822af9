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

from .config import Config
from .engine.result import DedupResult
from .engine.runner import Context, Runner
from .engine.session import Session
from .io.identity import input_identity
from .memory import format_size
from .report import build_report
from .shell import (Opened, check_on_bad_record, memory_report, open_files, run_array,
                    run_files, work_report)

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


class Dedup:
    """Near-duplicate deduplication as a :class:`gpu_dedup.shell.Command`."""

    chunk_share = 12
    interpretable = True
    memory_per_byte = None

    def __init__(self, cfg: Config, *, text_field, id_field, on_bad_record, gpu_memory,
                 on_stage, on_progress, on_bytes, fixed: Fixed | None):
        self.cfg = cfg
        self.name = cfg.name
        self.text_field, self.id_field = text_field, id_field
        self.on_bad_record = on_bad_record
        self.gpu_memory = gpu_memory
        self.on_stage, self.on_progress, self.on_bytes = on_stage, on_progress, on_bytes
        self.fixed = fixed

    def key(self, paths: list) -> dict:
        return {"config": self.cfg.to_dict(), "text_field": self.text_field,
                "id_field": self.id_field, "on_bad_record": self.on_bad_record,
                "inputs": input_identity(paths)}

    def runner(self, opened: Opened, s: Session) -> Runner:
        def progress(stage, done, total):
            if self.on_progress is not None and total:
                self.on_progress(done / total)
        return Runner(self.cfg, opened.backend, s.store, s.executor, s.plan,
                      text_field=self.text_field, id_field=self.id_field,
                      on_bad_record=self.on_bad_record, gpu_memory=self.gpu_memory,
                      on_stage=self.on_stage, on_progress=progress, monitor=s.monitor,
                      context=None if self.fixed is None else self.fixed.context,
                      on_bytes=self.on_bytes)

    def write(self, runner: Runner, folder: str) -> dict:
        return runner.write(folder, runner.on_progress)

    def report(self, runner: Runner, outputs: dict, opened: Opened, s: Session) -> dict:
        plan = s.plan
        stats = runner.stats()
        memory = memory_report(s)
        memory["measured"] = ("stages: resident set of this process and its children; "
                              "processes: each one's own")
        memory["device_peak_bytes"] = stats.get("device_peak_bytes")  # None: no device
        memory["warning"] = None
        over = [p for p in memory["processes"]
                if p["limit_bytes"] and p["peak_rss_bytes"] > PEAK_WARNING * p["limit_bytes"]]
        if over:
            p = over[0]
            memory["warning"] = (f"peak resident memory {format_size(p['peak_rss_bytes'])} of "
                                 f"the {p['role']} (pid {p['pid']}) exceeded {PEAK_WARNING:g}x "
                                 f"its budget of {format_size(p['limit_bytes'])}")
            log.warning("%s; pass a larger --memory-limit", memory["warning"])
        work = {**work_report(runner, s),
                # on a device: documents whose normalization needed the host (not ASCII)
                "normalized_on_host": stats.get("normalized_on_host"),
                # greedy selection: "device", "host", or why a device run did it on the host
                "selection_ran_on": stats.get("selection_ran_on"),
                # its rounds (passes on a CPU) and the pairs it scored
                "selection_rounds": stats.get("selection_rounds"),
                "selection_scored": stats.get("selection_scored"),
                # of those, the pairs settled below the threshold by their
                # bound rows, without their shingle sets
                "selection_bounded": stats.get("selection_bounded"),
                # the ranges of ranks it was decided in, one after the other
                "selection_ranges": stats.get("selection_ranges")}
        seconds = {**dict(runner.timer.seconds), "total": time.perf_counter() - opened.t_start}
        report = build_report(runner, seconds, opened.device, outputs,
                              on_bad_record=self.on_bad_record, memory=memory,
                              scheduler=s.executor.describe(), work=work)
        if report["selection"]["warning"]:
            log.warning("%s", report["selection"]["warning"])
        if self.fixed is not None:
            report.update(self.fixed.report)
        return report

    def html(self, runner: Runner, folder: str, report: dict) -> None:
        """report.html from the runner's results, read a chunk at a time; the
        clusters it shows are read back (their normalized text) one document
        at a time."""
        from .report_html import html_data, write_html

        class _Corpus:
            texts = runner.texts("text.arrow")
            ids = runner.texts("ids.arrow")
        m = runner.assign_meta
        pairs = ("pair_similarity", "pair_exact")
        chunks = ((int(runner.doc_starts[ci]), r) for ci, r in runner.chunk_results(
            ("cluster", "kept", "duplicate_of", "similarity") + pairs, streamed=pairs))
        data = html_data(chunks, float(self.cfg.threshold), m["cluster_sizes"], m["largest"],
                         m["pairs"]["fuzzy_min"], m["removed_similarity"]["min"])
        write_html(os.path.join(folder, "report.html"), report, data, _Corpus)


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
            (:func:`gpu_dedup.shell.choose_backend`; default
            ``"device: NAME (given)"``).
        prior: finds documents that come before the inputs, kept already
            (:class:`Prior`), once the inputs and the output are checked and
            the backend is chosen; ``run --against`` passes the documents of
            indexes this way (:func:`gpu_dedup.index.run_against`).

    Example:
        >>> report = run(["shards/"], "out", Config(threshold=0.8))  # doctest: +SKIP
        >>> report["documents"]["removed"]                          # doctest: +SKIP
    """
    cfg = (config or Config()).resolved()
    check_on_bad_record(on_bad_record)
    opened = open_files(inputs, output, overwrite=overwrite, work_dir=work_dir,
                        memory_limit=memory_limit, scheduler=scheduler, device=device,
                        gpu_memory=gpu_memory, backend=backend, device_line=device_line)
    fixed = folder = None
    if prior is not None:
        parent = os.path.dirname(os.path.abspath(output))
        os.makedirs(parent, exist_ok=True)
        folder = tempfile.mkdtemp(prefix=".gpu-dedup-against-", dir=parent)
        try:
            fixed = prior.prepare(opened.paths, folder, opened.backend)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        if fixed.path is not None:
            opened.paths = [fixed.path] + opened.paths
    command = Dedup(cfg, text_field=text_field, id_field=id_field, on_bad_record=on_bad_record,
                    gpu_memory=gpu_memory, on_stage=on_stage, on_progress=on_progress,
                    on_bytes=on_bytes, fixed=fixed)
    try:
        return run_files(opened, command, workers=workers, work_dir=work_dir,
                         keep_work_dir=keep_work_dir, partition_bytes=partition_bytes,
                         html=html)
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


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
        on_stage, on_progress: as for :func:`run`.

    Returns:
        A :class:`~gpu_dedup.engine.result.DedupResult`.

    Example:
        >>> r = deduplicate(["a cat sat on the mat", "a cat sat on the mat!"],
        ...                 Config(threshold=0.7))
        >>> r.kept.tolist()
        [True, False]
    """
    from .engine import result_arrays
    cfg = (config or Config()).resolved()

    def make(be, store, ex, plan):
        return Runner(cfg, be, store, ex, plan, id_field=None, on_stage=on_stage,
                      on_progress=on_progress)
    runner = run_array(texts, make, backend, memory_limit=memory_limit, scheduler=scheduler,
                       workers=workers, partition_bytes=partition_bytes, interpretable=True)
    return result_arrays(runner)


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
