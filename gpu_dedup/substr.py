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

How: every unit gets an integer id (Arrow's dictionary encoding of the
units, after normalization), every window a polynomial rolling hash of its
ids; windows are sorted by hash and those with equal hashes compared id by
id, so a hash collision never merges two different windows
(``kernels/substr.py``). The result is exactly the set the definition gives,
whatever the hashes.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .arrays import string_ranges
from .errors import ConfigError

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


def _unit_ids(units: pa.Array, normalize) -> np.ndarray:
    """Equal ids exactly for equal (normalized) units."""
    enc = pc.dictionary_encode(units)
    idx = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    if normalize:
        from .stages.normalize import normalize_text
        again = pc.dictionary_encode(normalize_text(enc.dictionary, normalize))
        idx = again.indices.to_numpy(zero_copy_only=False).astype(np.int64)[idx]
    return idx


def exact_substrings(texts, unit: str = "word", min_length: int = 50, keep: str = "first",
                     normalize=(), top: int = 20) -> SubstrResult:
    """Find and cut the repeated passages of ``texts`` (a string array).

    Example:
        >>> r = exact_substrings(pa.array(["a b c d", "x a b c y"]), min_length=3)
        >>> r.texts.to_pylist(), r.span_start.tolist(), r.span_end.tolist()
        (['a b c d', 'x  y'], [2], [7])
    """
    from .kernels import substr as K
    from .stages.normalize import text_buffers
    check_options(unit, min_length, keep)
    if not isinstance(texts, (pa.Array, pa.ChunkedArray)):
        texts = pa.array(list(texts), pa.large_string())
    texts = texts.cast(pa.large_string())
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    n = len(texts)
    off, data = text_buffers(texts)
    off = np.asarray(off, np.int64)
    data = np.asarray(data)
    u_off, b0, b1, c0, c1 = K.units(off, data, unit == "word")
    U = int(u_off[-1])
    per_doc = np.diff(u_off)
    ids = (_unit_ids(string_ranges(data, b0, b1), tuple(normalize)) if U
           else np.zeros(0, np.int64))
    L = int(min_length)
    h, start = K.window_hashes(ids, u_off, L)
    W = int(h.size)
    flag = np.zeros(U, bool)
    first = count = np.zeros(0, np.int64)
    if W:
        order = np.argsort(h, kind="stable")
        first, count = K.distinct_windows(h[order], order, start, ids, L)
        widx = np.arange(W, dtype=np.int64)
        removed = first != widx if keep == "first" else count[first] > 1
        s = start[removed]
        delta = (np.bincount(s, minlength=U + 1) - np.bincount(s + L, minlength=U + 1))
        flag = np.cumsum(delta)[:U] > 0
    doc_of = np.repeat(np.arange(n, dtype=np.int64), per_doc)
    removed_units = np.bincount(doc_of[flag], minlength=n).astype(np.int64)
    # spans: maximal runs of removed units inside a document
    new = flag.copy()
    new[1:] &= ~(flag[:-1] & (doc_of[1:] == doc_of[:-1]))
    end = flag.copy()
    end[:-1] &= ~(flag[1:] & (doc_of[1:] == doc_of[:-1]))
    su, eu = np.flatnonzero(new), np.flatnonzero(end)
    span_doc = doc_of[su]
    # the removed window that starts at a span's first unit, and its first occurrence
    if su.size:
        wstart = np.concatenate([[0], np.cumsum(np.maximum(per_doc - L + 1, 0))])
        w_of = wstart[span_doc] + (su - u_off[span_doc])
        span_first = doc_of[start[first[w_of]]]
    else:
        span_first = np.zeros(0, np.int64)
    # the texts with their spans cut out (byte segments between the spans)
    seg_s = np.sort(np.concatenate([off[:-1], b1[eu]]))
    seg_e = np.sort(np.concatenate([b0[su], off[1:]]))
    seg_doc = np.searchsorted(off, seg_e, "left") - 1      # (right for non-empty segments)
    length = seg_e - seg_s
    new_len = np.bincount(seg_doc[length > 0], weights=length[length > 0],
                          minlength=n).astype(np.int64)
    cut = string_ranges(data, seg_s[length > 0], seg_e[length > 0])
    cut_off = np.concatenate([[0], np.cumsum(new_len)]).astype(np.int64)
    out = pa.LargeStringArray.from_buffers(n, pa.py_buffer(cut_off),
                                           cut.buffers()[2] if len(cut) else pa.py_buffer(b""))
    repeated = []
    if W and top:
        firsts = np.flatnonzero(first == np.arange(W))
        rem_first = firsts[count[firsts] > 1]
        best = rem_first[np.lexsort((rem_first, -count[rem_first]))][:top]
        for w in best.tolist():
            a = int(start[w])
            repeated.append((bytes(data[b0[a]:b1[a + L - 1]]).decode("utf-8"),
                             int(count[w])))
    return SubstrResult(per_doc.astype(np.int64), removed_units, span_doc, c0[su], c1[eu],
                        span_first, out, repeated, W,
                        int((first == np.arange(W)).sum()) if W else 0)


# -- the command: inputs in, an output directory out ------------------------------

def _rewrite_jsonl(src: str, comp, locations: np.ndarray, texts: pa.Array, keep: np.ndarray,
                   changed: np.ndarray, text_field: str, dst: str) -> None:
    """The records of ``src`` with their new text (an unchanged record is
    copied as it is), those not kept left out."""
    import json
    from .io.jsonl import _open_stream, _Sink
    want = {int(loc): i for i, loc in enumerate(np.asarray(locations).tolist())}
    sink = _Sink(dst, comp)
    try:
        with _open_stream(src, comp) as f:
            for no, line in enumerate(f.read().splitlines(), start=1):
                i = want.get(no)
                if i is None or not keep[i]:
                    continue
                if not changed[i]:
                    sink.write(line + b"\n")
                    continue
                rec = json.loads(line)
                rec[text_field] = texts[i].as_py()
                sink.write((json.dumps(rec, ensure_ascii=False) + "\n").encode("utf-8"))
    finally:
        sink.close()


def _rewrite_parquet(src: str, locations: np.ndarray, texts: pa.Array, keep: np.ndarray,
                     text_field: str, dst: str) -> None:
    import pyarrow.parquet as pq
    t = pq.read_table(src)
    rows = np.asarray(locations, np.int64) - 1
    t = t.take(pa.array(rows))
    col = t.schema.get_field_index(text_field)
    t = t.set_column(col, pa.field(text_field, t.schema.field(col).type),
                     texts.cast(t.schema.field(col).type))
    pq.write_table(t.filter(pa.array(keep)), dst)


def run(inputs, output: str, *, unit: str = "word", min_length: int = 50,
        keep: str = "first", min_doc_length: int = 0, normalize=(), text_field: str = "text",
        id_field: str | None = "id", on_bad_record: str = "error", overwrite: bool = False,
        html: bool = True) -> dict:
    """``gpu-dedup substr``: cut the repeated passages of ``inputs`` into
    ``output`` (spans.parquet, documents.parquet, data/, report.json,
    report.html); returns the report."""
    import json
    import os
    import time

    import pyarrow.parquet as pq

    from .errors import InputError
    from .io.sources import expand_inputs, output_names, read_corpus
    from .output import OutputDir
    t0 = time.perf_counter()
    check_options(unit, min_length, keep)
    if not isinstance(min_doc_length, int) or min_doc_length < 0:
        raise ConfigError(f"--min-doc-length must be 0 or more units, got {min_doc_length!r}")
    paths = expand_inputs(inputs)
    out = OutputDir(output, inputs=[str(x) for x in inputs] + paths, overwrite=overwrite)
    out.check()
    corpus = read_corpus(paths, text_field, id_field, on_bad_record)
    shards = corpus.shards
    texts = corpus.texts.cast(pa.large_string())
    ids = corpus.ids.cast(pa.string())
    for sh in shards:
        if sh.fmt not in ("jsonl", "parquet"):
            raise InputError(f"{sh.path}: substr writes JSONL and Parquet inputs only")
    r = exact_substrings(texts, unit, min_length, keep, normalize)
    left = r.units - r.removed_units
    dropped = left < min_doc_length
    n = len(texts)
    with out:
        folder = out.staging()
        pq.write_table(pa.table({"id": ids.take(pa.array(r.span_doc)),
                                 "start": pa.array(r.span_start, pa.int64()),
                                 "end": pa.array(r.span_end, pa.int64()),
                                 "first_id": ids.take(pa.array(r.span_first_doc))}),
                       os.path.join(folder, "spans.parquet"))
        pq.write_table(pa.table({"id": ids, "units": pa.array(r.units, pa.int64()),
                                 "removed_units": pa.array(r.removed_units, pa.int64()),
                                 "dropped": pa.array(dropped, pa.bool_())}),
                       os.path.join(folder, "documents.parquet"))
        os.makedirs(os.path.join(folder, "data"))
        names = output_names([sh.path for sh in shards])
        d0 = 0
        for sh, name in zip(shards, names):
            d1 = d0 + len(sh)
            dst = os.path.join(folder, "data", name)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            part, keep_rows = r.texts.slice(d0, d1 - d0), ~dropped[d0:d1]
            if sh.fmt == "jsonl":
                _rewrite_jsonl(sh.path, sh.compression, sh.locations, part, keep_rows,
                               r.removed_units[d0:d1] > 0, text_field, dst)
            else:
                _rewrite_parquet(sh.path, sh.locations, part, keep_rows, text_field, dst)
            d0 = d1
        span_units = np.zeros(0, np.int64)
        if r.span_doc.size:
            span_units = r.span_end - r.span_start
        in_bytes = int(pc.sum(pc.binary_length(texts)).as_py() or 0) if n else 0
        out_bytes = int(pc.sum(pc.binary_length(r.texts)).as_py() or 0) if n else 0
        hist_edges = [0, 50, 100, 200, 500, 1000, 2000, 5000, 10 ** 9]
        counts = np.histogram(span_units, bins=hist_edges)[0] if span_units.size else \
            np.zeros(len(hist_edges) - 1, np.int64)
        report = {
            "documents": {"in": n, "with_spans": int(np.unique(r.span_doc).size),
                          "dropped": int(dropped.sum()), "out": int(n - dropped.sum())},
            "units": {"unit": unit, "total": int(r.units.sum()),
                      "removed": int(r.removed_units.sum()),
                      "removed_share": float(r.removed_units.sum() / max(1, r.units.sum()))},
            "bytes": {"in": in_bytes, "out": out_bytes,
                      "removed_share": float(1 - out_bytes / in_bytes) if in_bytes else 0.0},
            "spans": {"count": int(r.span_doc.size),
                      "length_code_points": {"edges": hist_edges[:-1] + ["more"],
                                             "counts": [int(c) for c in counts]}},
            "windows": {"hashed": r.windows, "distinct": r.distinct},
            "repeated": [{"text": t, "occurrences": c} for t, c in r.repeated],
            "parameters": {"unit": unit, "min_length": int(min_length), "keep": keep,
                           "min_doc_length": int(min_doc_length),
                           "normalize": list(normalize)},
            "inputs": [sh.path for sh in shards],
            "outputs": {"spans": "spans.parquet", "documents": "documents.parquet",
                        "data": "data/", "report": "report.json", "report_html": "report.html"},
            "seconds": time.perf_counter() - t0,
        }
        with open(os.path.join(folder, "report.json"), "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
        if html:
            _html(os.path.join(folder, "report.html"), report)
        out.publish()
    return report


def _html(path: str, report: dict) -> None:
    import html as H
    d, u, b = report["documents"], report["units"], report["bytes"]
    h = report["spans"]["length_code_points"]
    hist = "".join(f"<tr><td>{e}</td><td>{c:,}</td></tr>" for e, c in
                   zip(h["edges"], h["counts"]))
    rep = "".join(f"<tr><td>{x['occurrences']:,}</td><td><pre>{H.escape(x['text'][:600])}"
                  f"</pre></td></tr>" for x in report["repeated"])
    doc = f"""<!doctype html><html><head><meta charset="utf-8"><title>gpu-dedup substr</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px;vertical-align:top}}pre{{white-space:pre-wrap;
max-width:50em;margin:0}}</style></head><body>
<h1>Repeated passages</h1>
<p>{d['in']:,} documents, {d['with_spans']:,} with repeated passages cut, {d['dropped']:,}
dropped as too short. Removed {u['removed']:,} of {u['total']:,} {u['unit']}s
({100 * u['removed_share']:.2f}%), {100 * b['removed_share']:.2f}% of the bytes, in
{report['spans']['count']:,} spans.</p>
<h2>Span lengths (code points, from)</h2><table><tr><th>from</th><th>spans</th></tr>{hist}</table>
<h2>Most repeated passages</h2><table><tr><th>occurrences</th><th>passage (one window)</th></tr>
{rep}</table></body></html>
"""
    with open(path, "w", encoding="utf-8") as f:
        f.write(doc)
