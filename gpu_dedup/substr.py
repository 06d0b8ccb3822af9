"""Exact-substring deduplication: repeated passages cut out of documents.

The definition (after Lee et al., 2021), which the tests hold this to:

* **Units**: words (maximal runs of non-whitespace, Python's ``str.split()``)
  or characters (code points) of each document's original text. With
  normalization steps, two units are equal when their normalized forms are
  (each unit is normalized by itself, so every offset stays one of the
  original text).
* **Windows**: runs of ``L`` consecutive units inside one document.
* **Removed windows**: ``keep="first"``: every occurrence of a window but
  the first in input order (document order, then position); ``keep="none"``:
  every occurrence of a window that occurs more than once.
* **Removed units**: those inside a removed window. A document's removed
  *spans* are its maximal runs of removed units, from the start of the first
  to the end of the last (the text between two removed units goes with
  them), as code-point offsets ``[start, end)`` of the original text.

How: every distinct unit (after normalization) gets a 64-bit hash, checked
over the whole vocabulary to be an exact identity (two different units with
one hash make the run hash again with the next seed); every window gets a
polynomial rolling hash of its units' hashes; windows are sorted by hash and
those with equal hashes compared unit by unit, so a window hash collision
never merges two different windows (``kernels/substr.py``,
:mod:`gpu_dedup.engine.substr`). The result is exactly the set the
definition gives, whatever the hashes, in memory or out of core, on any
executor and device.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from .errors import ConfigError, InputError
from .io.sources import format_of

UNITS = ("word", "char")
KEEPS = ("first", "none")


@dataclass
class SubstrResult:
    """What :func:`exact_substrings` finds, per document and per span.

    Attributes:
        units: int64 units of each document.
        removed_units: int64 of them removed.
        span_doc, span_start, span_end: each span's document and code-point
            offsets ``[start, end)``, in document then position order.
        span_first_doc: the document holding the first occurrence of the
            span's first removed window.
        texts: each document with its spans cut out.
        repeated: the most repeated removed passages, ``(text, occurrences)``.
        windows: windows hashed; distinct: distinct windows among them.
    """

    units: np.ndarray
    removed_units: np.ndarray
    span_doc: np.ndarray
    span_start: np.ndarray
    span_end: np.ndarray
    span_first_doc: np.ndarray
    texts: pa.Array
    repeated: list
    windows: int
    distinct: int


def check_options(unit: str, min_length: int, keep: str) -> None:
    if unit not in UNITS:
        raise ConfigError(f"--unit must be 'word' or 'char', got {unit!r}")
    if not isinstance(min_length, (int, np.integer)) or min_length < 1:
        raise ConfigError(f"--min-length must be a positive number of units, got {min_length!r}")
    if keep not in KEEPS:
        raise ConfigError(f"--keep must be 'first' or 'none', got {keep!r}")


def _job(unit, min_length, keep, normalize, top) -> dict:
    return {"unit": unit, "L": int(min_length), "keep": keep, "normalize": list(normalize),
            "top": int(top)}


def exact_substrings(texts, unit: str = "word", min_length: int = 50, keep: str = "first",
                     normalize=(), top: int = 20, *, partition_bytes=None,
                     backend=None) -> SubstrResult:
    """Find and cut the repeated passages of ``texts`` (a string array).

    Runs the engine's stages (:mod:`gpu_dedup.engine.substr`) in memory;
    ``partition_bytes`` cuts the work into smaller ranges (the result never
    depends on it), ``backend`` is where it runs (the CPU if None).

    Example:
        >>> r = exact_substrings(pa.array(["a b c d", "x a b c y"]), min_length=3)
        >>> r.texts.to_pylist(), r.span_start.tolist(), r.span_end.tolist()
        (['a b c d', 'x  y'], [2], [7])
    """
    from .backend import get_backend
    from .engine import as_text_array
    from .engine.executors import make_executor
    from .engine.plan import make_plan
    from .engine.store import MemoryStore
    from .engine.substr import MEMORY_PER_BYTE, SubstrRunner
    from .memory import default_budget, parse_size
    check_options(unit, min_length, keep)
    texts = as_text_array(texts)
    if texts.null_count:
        raise ValueError("texts must not contain nulls")
    be = backend if backend is not None else get_backend("cpu")[0]
    with make_executor("none", None, be.name) as ex:
        plan = make_plan(default_budget(), 1, texts.nbytes,
                         partition_bytes=(None if partition_bytes is None
                                          else parse_size(partition_bytes, "partition_bytes")),
                         memory_per_byte=MEMORY_PER_BYTE[unit])
        store = MemoryStore()
        store.save_arrow("input/texts", {"text": texts})
        item = {"kind": "array", "file": 0, "path": "<array>", "fmt": "array", "files": None,
                "chunk": 0, "key": "f00000c000000", "order": 0}
        r = SubstrRunner(_job(unit, min_length, keep, normalize, top), be, store, ex, plan,
                         id_field=None)
        r.run([item])
        cat = (lambda name: np.concatenate([r.chunk_array(ci, name)
                                            for ci in range(len(r.chunks))]))
        w = r.windows_meta
        return SubstrResult(cat("units"), cat("removed"), cat("span_doc"), cat("span_start"),
                            cat("span_end"), cat("span_first"),
                            pa.concat_arrays([r.cut_texts(ci) for ci in range(len(r.chunks))]),
                            r.repeated(), w["windows"], w["distinct"])


# -- the command: inputs in, an output directory out ------------------------------

def run(inputs, output: str, *, unit: str = "word", min_length: int = 50,
        keep: str = "first", min_doc_length: int = 0, normalize=(), text_field: str = "text",
        id_field: str | None = "id", on_bad_record: str = "error", overwrite: bool = False,
        html: bool = True, device: str = "cpu", memory_limit=None, scheduler: str = "none",
        workers=None, work_dir=None, keep_work_dir: bool = False, partition_bytes=None,
        on_progress=None) -> dict:
    """``gpu-dedup substr``: cut the repeated passages of ``inputs`` into
    ``output`` (spans.parquet, documents.parquet, data/, report.json,
    report.html); returns the report.

    Runs out of core through the work directory when the inputs may not fit
    ``memory_limit`` (or when ``work_dir`` is given: a rerun after a crash
    resumes it), on the executor ``scheduler`` names, on ``device``; the
    outputs are the same bytes whichever way it runs.
    """
    import os
    import time

    from .backend import get_backend
    from .engine.session import open_run, os_error, session
    from .engine.substr import CHUNK_SHARE, MEMORY_PER_BYTE, SubstrRunner, report_dict
    from .report import write_report_json
    from .io.identity import input_identity
    from .io.plan import input_bytes, plan_reads
    from .io.sources import ON_BAD_RECORD, group_inputs
    from .memory import format_size
    t0 = time.perf_counter()
    check_options(unit, min_length, keep)
    if not isinstance(min_doc_length, int) or min_doc_length < 0:
        raise ConfigError(f"--min-doc-length must be 0 or more units, got {min_doc_length!r}")
    if on_bad_record not in ON_BAD_RECORD:
        raise ConfigError(f"--on-bad-record must be 'error' or 'skip', got {on_bad_record!r}")
    paths, out, budget, spec = open_run(inputs, output, overwrite=overwrite, work_dir=work_dir,
                                        memory_limit=memory_limit, scheduler=scheduler)
    be, device_line = get_backend(device)
    groups = group_inputs(paths)
    for p, files in groups:
        fmt = format_of(p) if files is None else "txt"
        if fmt not in ("jsonl", "parquet", "arrow", "datasets", "txt"):
            raise InputError(f"{p}: substr reads JSONL, Parquet, Arrow and text inputs only")
    measured = sum(input_bytes(p, files) for p, files in groups)
    job = _job(unit, min_length, keep, normalize, 20)
    key = {"substr": job, "text_field": text_field, "id_field": id_field,
           "on_bad_record": on_bad_record, "inputs": input_identity(paths)}
    params = {"unit": unit, "min_length": int(min_length), "keep": keep,
              "min_doc_length": int(min_doc_length), "normalize": list(normalize)}

    def progress(stage, done, total):
        if on_progress is not None and total:
            on_progress(stage, done / total)

    with session(f"substr-{unit}-{int(min_length)}-{keep}", key, measured=measured,
                 budget=budget, spec=spec, workers=workers, device=be.name, output=output,
                 work_dir=work_dir, keep_work_dir=keep_work_dir,
                 partition_bytes=partition_bytes, chunk_share=CHUNK_SHARE[unit],
                 memory_per_byte=MEMORY_PER_BYTE[unit]) as s:
        r = SubstrRunner(job, be, s.store, s.executor, s.plan, text_field=text_field,
                         id_field=id_field, on_bad_record=on_bad_record, monitor=s.monitor,
                         on_progress=progress)
        try:
            r.run(plan_reads(paths, s.plan.chunk_bytes))
            with out:
                folder = out.staging()
                with r.stage("write"):
                    counts = r.write(folder, min_doc_length, text_field)
                report = report_dict(r, counts, params, 0.0)
                peak = max(s.monitor.peaks.values(), default=0)
                report["device"] = device_line.split(": ", 1)[1]
                report["memory"] = {"limit_bytes": s.plan.budget,
                                    "limit": format_size(s.plan.budget),
                                    "peak_rss_bytes": dict(s.monitor.peaks),
                                    "peak_rss_total_bytes": peak}
                report["work"] = {"store": s.plan.store, "reason": s.plan.reason,
                                  "dir": s.store.root, "chunks": len(r.chunks),
                                  "units": dict(r.units), "reused": dict(r.reused),
                                  "plan": s.plan.describe(),
                                  "scheduler": s.executor.describe()}
                if html:
                    _html(os.path.join(folder, "report.html"), report)
                else:
                    report["outputs"].pop("report_html")
                report["seconds"] = {**dict(r.timer.seconds), "total": time.perf_counter() - t0}
                write_report_json(os.path.join(folder, "report.json"), report)
                out.publish()
        except OSError as exc:
            raise os_error(exc, s.store.root or output) from exc
    return report


def _html(path: str, report: dict) -> None:
    from .edge import clean_tree
    from .html_page import esc, page, table_css, write_page
    report = clean_tree(report)           # no credential, names printable
    d, u, b = report["documents"], report["units"], report["bytes"]
    h = report["spans"]["length_code_points"]
    hist = "".join(f"<tr><td>{e}</td><td>{c:,}</td></tr>" for e, c in
                   zip(h["edges"], h["counts"]))
    rep = "".join(f"<tr><td>{x['occurrences']:,}</td><td><pre>{esc(x['text'][:600])}"
                  f"</pre></td></tr>" for x in report["repeated"])
    body = f"""
<h1>Repeated passages</h1>
<p>{d['in']:,} documents, {d['with_spans']:,} with repeated passages cut, {d['dropped']:,}
dropped as too short. Removed {u['removed']:,} of {u['total']:,} {u['unit']}s
({100 * u['removed_share']:.2f}%), {100 * b['removed_share']:.2f}% of the bytes, in
{report['spans']['count']:,} spans.</p>
<h2>Span lengths (code points, from)</h2><table><tr><th>from</th><th>spans</th></tr>{hist}</table>
<h2>Most repeated passages</h2><table><tr><th>occurrences</th><th>passage (one window)</th></tr>
{rep}</table>"""
    write_page(path, page("gpu-dedup substr", body, table_css(50)))
