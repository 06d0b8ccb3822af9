"""Orchestration: read the inputs, run the engine, write the outputs.

Outputs are built in a temporary folder beside the output directory and moved
into place only when complete, so a failed run leaves nothing half-written and
an existing directory untouched.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .backend import get_backend
from .config import Config
from .engine import deduplicate, scurve_summary
from .errors import DedupError, InputError
from .io.sources import expand_inputs, read_corpus
from .report import build_report
from .timing import StageTimer

log = logging.getLogger("gpu_dedup")


def _inside(child: str, parent: str) -> bool:
    child = os.path.realpath(child)
    parent = os.path.realpath(parent)
    return child == parent or child.startswith(parent.rstrip(os.sep) + os.sep)


def check_output(output: str, inputs: list[str], raw_inputs, overwrite: bool) -> None:
    """Refuse an output directory that is, holds or sits inside an input, or
    that is non-empty without ``overwrite``."""
    for spec in list(raw_inputs) + list(inputs):
        spec = str(spec)
        if os.path.exists(spec) and (_inside(output, spec) or _inside(spec, output)):
            raise InputError(f"{output}: the output directory must not be an input, "
                             f"hold one or sit inside one ({spec}); choose another --output")
    if os.path.exists(output):
        if not os.path.isdir(output):
            raise InputError(f"{output}: exists and is not a directory; choose another --output")
        if os.listdir(output) and not overwrite:
            raise InputError(f"{output}: output directory is not empty; pass --overwrite "
                             f"to replace it, or choose another --output")


#: Peak resident memory of an in-memory run per byte of input (measured: about
#: 26x on a million 57-byte documents), with room to spare; compressed inputs
#: are counted at five times their size.
MEMORY_PER_INPUT_BYTE = 40


def fits_in_memory(paths: list[str]) -> bool:
    """Whether an in-memory run of ``paths`` fits the default memory budget."""
    from .memory import default_budget
    total = 0
    for p in paths:
        try:
            size = os.path.getsize(p)
        except OSError:
            continue
        total += size * (5 if p.endswith((".gz", ".zst", ".zstd", ".parquet", ".pq")) else 1)
    return total * MEMORY_PER_INPUT_BYTE <= default_budget()


def write_outputs(tmp: str, result, corpus, progress=None) -> dict:
    """clusters.parquet, pairs.parquet and data/ into ``tmp``."""
    ids = corpus.ids.cast(pa.string())
    pq.write_table(pa.table({"id": ids,
                             "cluster": pa.array(result.cluster, pa.int64()),
                             "kept": pa.array(result.kept, pa.bool_())}),
                   os.path.join(tmp, "clusters.parquet"))
    pq.write_table(pa.table({"id_a": ids.take(pa.array(result.pair_a)),
                             "id_b": ids.take(pa.array(result.pair_b)),
                             "similarity": pa.array(result.pair_similarity, pa.float64())}),
                   os.path.join(tmp, "pairs.parquet"))
    data_dir = os.path.join(tmp, "data")
    os.makedirs(data_dir)
    start = 0
    total = max(len(corpus), 1)
    for sh in corpus.shards:
        n = len(sh)
        path = os.path.join(data_dir, sh.out_name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        sh.write_kept(result.kept[start:start + n], path)
        start += n
        if progress is not None:
            progress(start / total)
    return {"clusters": "clusters.parquet", "pairs": "pairs.parquet", "data": "data/",
            "report": "report.json", "report_html": "report.html"}


def _swap_in(tmp: str, output: str) -> None:
    if os.path.exists(output):
        old = f"{output.rstrip(os.sep)}.old-{os.getpid()}"
        os.rename(output, old)
        os.rename(tmp, output)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, output)


def run(inputs, output: str, config: Config | None = None, *, device: str = "cpu",
        text_field: str = "text", id_field: str | None = "id", overwrite: bool = False,
        gpu_memory=None, on_stage=None, on_progress=None, on_bad_record: str = "error",
        html: bool = True, memory_limit=None, scheduler: str = "none", workers=None,
        work_dir=None, keep_work_dir: bool = False) -> dict:
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
        on_progress: called with the fraction done of the read and write stages.
        on_bad_record: ``"error"`` (stop at the first bad record) or ``"skip"``
            (leave bad records out, count them and list them in the report).
        html: also write ``report.html``.
        memory_limit, scheduler, workers, work_dir, keep_work_dir: given any
            of them, or when the inputs may not fit the default memory budget,
            the run goes through the bounded-memory, resumable
            :func:`gpu_dedup.staged.run_staged` (same outputs).

    Example:
        >>> report = run(["shards/"], "out", Config(threshold=0.8))  # doctest: +SKIP
        >>> report["documents"]["removed"]                          # doctest: +SKIP
    """
    t_start = time.perf_counter()
    cfg = (config or Config()).resolved()
    paths = expand_inputs(inputs)
    output = os.path.abspath(output)
    check_output(output, paths, inputs, overwrite)
    if (memory_limit is not None or scheduler not in (None, "none") or workers is not None
            or work_dir is not None or keep_work_dir or not fits_in_memory(paths)):
        from .staged import run_staged

        def staged_progress(stage, done, total):
            if on_stage is not None:
                on_stage(stage)
            if on_progress is not None and total:
                on_progress(done / total)
        return run_staged(inputs, output, cfg, device=device, text_field=text_field,
                          id_field=id_field, overwrite=overwrite, memory_limit=memory_limit,
                          scheduler=scheduler or "none", workers=workers, work_dir=work_dir,
                          keep_work_dir=keep_work_dir, gpu_memory=gpu_memory,
                          on_bad_record=on_bad_record, on_progress=staged_progress, html=html)
    backend, device_line = get_backend(device, gpu_memory=gpu_memory)
    log.info(device_line)
    timer = StageTimer(on_stage)
    with timer("read"):
        corpus = read_corpus(paths, text_field, id_field, on_bad_record, progress=on_progress)
    log.info("read %d documents from %d input(s)", len(corpus), len(corpus.shards))
    if corpus.skipped:
        log.warning("skipped %d bad record(s); the first: %s", len(corpus.skipped),
                    corpus.skipped[0])
    result = deduplicate(corpus.texts, cfg, backend, timer)

    parent = os.path.dirname(output)
    tmp = os.path.join(parent, f".{os.path.basename(output)}.tmp-{os.getpid()}")
    made_parent = None
    try:
        if not os.path.isdir(parent):
            made_parent = parent
            while not os.path.isdir(os.path.dirname(made_parent)):
                made_parent = os.path.dirname(made_parent)
            os.makedirs(parent)
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        with timer("write"):
            outputs = write_outputs(tmp, result, corpus, on_progress)
        seconds = dict(timer.seconds)
        seconds["total"] = time.perf_counter() - t_start
        report = build_report(result, corpus, cfg, scurve_summary(cfg), seconds,
                              device_line.split(": ", 1)[1], outputs,
                              on_bad_record=on_bad_record)
        if html:
            if on_stage is not None:
                on_stage("report")
            t0 = time.perf_counter()
            from .report_html import write_html
            write_html(os.path.join(tmp, "report.html"), report, result, corpus)
            report["seconds"]["report"] = time.perf_counter() - t0
            report["seconds"]["total"] = time.perf_counter() - t_start
        else:
            del report["outputs"]["report_html"]
        with open(os.path.join(tmp, "report.json"), "w") as f:
            json.dump(report, f, indent=2, sort_keys=False)
            f.write("\n")
        _swap_in(tmp, output)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if made_parent is not None:
            shutil.rmtree(made_parent, ignore_errors=True)
        if isinstance(exc, OSError) and not isinstance(exc, DedupError):
            raise DedupError(f"{output}: cannot write the outputs: "
                             f"{exc.strerror or exc}") from exc
        raise
    return report


def summary_line(report: dict) -> str:
    d = report["documents"]
    e = report["edges"]
    line = (f"{d['in']:,} documents: kept {d['kept']:,}, removed {d['removed']:,} "
            f"({d['exact_removed']:,} exact, {d['fuzzy_removed']:,} near-duplicate); "
            f"{e['candidates']:,} candidate edges, {e['verified']:,} verified; "
            f"{report['seconds']['total']:.2f}s")
    bad = report.get("bad_records", {}).get("skipped", 0)
    if bad:
        line += f"; skipped {bad:,} bad record(s)"
    return line


def kept_mask(output: str) -> np.ndarray:
    """The ``kept`` column of a finished run's clusters.parquet."""
    return pq.read_table(os.path.join(output, "clusters.parquet"))["kept"].to_numpy()
