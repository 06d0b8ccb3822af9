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

    Runs the engine's stages (:mod:`gpu_dedup.engine.substr`) in memory
    (:func:`gpu_dedup.shell.run_array`); ``partition_bytes`` cuts the work
    into smaller ranges (the result never depends on it), ``backend`` is
    where it runs (the CPU if None).

    Example:
        >>> r = exact_substrings(pa.array(["a b c d", "x a b c y"]), min_length=3)
        >>> r.texts.to_pylist(), r.span_start.tolist(), r.span_end.tolist()
        (['a b c d', 'x  y'], [2], [7])
    """
    from .engine.substr import MEMORY_PER_BYTE, SubstrRunner
    from .shell import run_array
    check_options(unit, min_length, keep)
    job = _job(unit, min_length, keep, normalize, top)

    def make(be, store, ex, plan):
        return SubstrRunner(job, be, store, ex, plan, id_field=None)
    r = run_array(texts, make, backend, partition_bytes=partition_bytes,
                  memory_per_byte=MEMORY_PER_BYTE[unit])
    cat = (lambda name: np.concatenate([r.chunk_array(ci, name)
                                        for ci in range(len(r.chunks))]))
    w = r.windows_meta
    return SubstrResult(cat("units"), cat("removed"), cat("span_doc"), cat("span_start"),
                        cat("span_end"), cat("span_first"),
                        pa.concat_arrays([r.cut_texts(ci) for ci in range(len(r.chunks))]),
                        r.repeated(), w["windows"], w["distinct"])


# -- the command: inputs in, an output directory out ------------------------------

class Substr:
    """Exact-substring deduplication as a :class:`gpu_dedup.shell.Command`."""

    memory_per_byte = None
    interpretable = False           # its suffix-array kernels have no stand-ins

    def __init__(self, params: dict, job: dict, *, text_field, id_field, on_bad_record,
                 on_progress):
        from .engine.substr import CHUNK_SHARE, MEMORY_PER_BYTE
        unit = params["unit"]
        self.params, self.job = params, job
        self.name = f"substr-{unit}-{params['min_length']}-{params['keep']}"
        self.chunk_share, self.memory_per_byte = CHUNK_SHARE[unit], MEMORY_PER_BYTE[unit]
        self.text_field, self.id_field = text_field, id_field
        self.on_bad_record = on_bad_record
        self.on_progress = on_progress

    def key(self, paths: list) -> dict:
        from .io.identity import input_identity
        return {"substr": self.job, "text_field": self.text_field, "id_field": self.id_field,
                "on_bad_record": self.on_bad_record, "inputs": input_identity(paths)}

    def runner(self, opened, s):
        from .engine.substr import SubstrRunner

        def progress(stage, done, total):
            if self.on_progress is not None and total:
                self.on_progress(stage, done / total)
        return SubstrRunner(self.job, opened.backend, s.store, s.executor, s.plan,
                            text_field=self.text_field, id_field=self.id_field,
                            on_bad_record=self.on_bad_record, monitor=s.monitor,
                            on_progress=progress)

    def write(self, runner, folder: str) -> dict:
        return runner.write(folder, self.params["min_doc_length"], self.text_field)

    def report(self, runner, counts: dict, opened, s) -> dict:
        from .engine.substr import report_dict
        from .shell import memory_report, work_report
        report = report_dict(runner, counts, self.params, 0.0)
        report["device"] = opened.device
        report["memory"] = memory_report(s)
        report["work"] = {**work_report(runner, s), "scheduler": s.executor.describe()}
        return report

    def html(self, runner, folder: str, report: dict) -> None:
        import os
        _html(os.path.join(folder, "report.html"), report)


def run(inputs, output: str, *, unit: str = "word", min_length: int = 50,
        keep: str = "first", min_doc_length: int = 0, normalize=(), text_field: str = "text",
        id_field: str | None = "id", on_bad_record: str = "error", overwrite: bool = False,
        html: bool = True, device: str = "cpu", memory_limit=None, scheduler: str = "none",
        workers=None, work_dir=None, keep_work_dir: bool = False, partition_bytes=None,
        on_progress=None) -> dict:
    """``gpu-dedup substr``: cut the repeated passages of ``inputs`` into
    ``output`` (spans.parquet, documents.parquet, data/, report.json,
    report.html); returns the report.

    Runs through :mod:`gpu_dedup.shell`: out of core through the work
    directory when the inputs may not fit ``memory_limit`` (or when
    ``work_dir`` is given: a rerun after a crash resumes it), on the executor
    ``scheduler`` names, on ``device``; the outputs are the same bytes
    whichever way it runs.
    """
    from .io.sources import group_inputs
    from .shell import check_on_bad_record, open_files, run_files
    check_options(unit, min_length, keep)
    if not isinstance(min_doc_length, int) or min_doc_length < 0:
        raise ConfigError(f"--min-doc-length must be 0 or more units, got {min_doc_length!r}")
    check_on_bad_record(on_bad_record)
    opened = open_files(inputs, output, overwrite=overwrite, work_dir=work_dir,
                        memory_limit=memory_limit, scheduler=scheduler, device=device)
    for p, files in group_inputs(opened.paths):
        fmt = format_of(p) if files is None else "txt"
        if fmt not in ("jsonl", "parquet", "arrow", "datasets", "txt"):
            raise InputError(f"{p}: substr reads JSONL, Parquet, Arrow and text inputs only")
    params = {"unit": unit, "min_length": int(min_length), "keep": keep,
              "min_doc_length": int(min_doc_length), "normalize": list(normalize)}
    command = Substr(params, _job(unit, min_length, keep, normalize, 20),
                     text_field=text_field, id_field=id_field, on_bad_record=on_bad_record,
                     on_progress=on_progress)
    return run_files(opened, command, workers=workers, work_dir=work_dir,
                     keep_work_dir=keep_work_dir, partition_bytes=partition_bytes, html=html)


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
