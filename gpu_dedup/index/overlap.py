"""Train/test contamination: every item of an evaluation set against an index.

Candidates come from two lookups: the items' band keys against the indexed
documents' (near-duplicates), and the band keys of the items' windows
against the indexed windows (passages cut from inside longer documents; see
:mod:`gpu_dedup.index.windows`). Each candidate is verified on the shingle
sets of the normalized texts: Jaccard ``|E ∩ D| / |E ∪ D|`` and containment
``|E ∩ D| / |E|``. An item is flagged ``near-duplicate`` when its best
Jaccard reaches the threshold, else ``contained`` when its best containment
does. Outputs: ``overlap.parquet`` (``id``, ``match_id``, ``similarity``,
``jaccard``, ``containment``, ``flagged``, ``kind``), ``report.json`` and
``report.html`` (the flagged items beside their matches).
"""
from __future__ import annotations

import json
import logging
import os
import time

import numpy as np
import pyarrow as pa

from ..html_page import esc, page, table_css, write_page
from ..io.parquet import write_table
from .keys import keys_of
from .store import BadIndex, Index
from .windows import QUERY_STRIDE, window_keys

log = logging.getLogger("gpu_dedup")

#: Candidates kept per item at most (the most often matched first).
MAX_CANDIDATES = 256


def _candidates(q: np.ndarray, o: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct ``(item, ordinal)`` pairs, at most MAX_CANDIDATES per item
    (those matched by the most keys)."""
    if not q.size:
        return q, o
    pair = (q.astype(np.int64) << 40) | o.astype(np.int64)
    u, hits = np.unique(pair, return_counts=True)
    qi, oi = u >> 40, u & ((1 << 40) - 1)
    order = np.lexsort((oi, -hits, qi))
    qi, oi = qi[order], oi[order]
    first = np.searchsorted(qi, qi, "left")
    keep = (np.arange(qi.size) - first) < MAX_CANDIDATES
    return qi[keep], oi[keep]


def overlap(inputs, index: str, output: str, *, threshold: float | None = None,
            text_field: str = "text", id_field: str | None = "id",
            on_bad_record: str = "error", overwrite: bool = False, backend=None,
            device: str = "cpu", gpu_memory=None) -> dict:
    """Write the contamination report of ``inputs`` against ``index`` (a
    folder, or a URL: copied locally for the command) into ``output``;
    returns report.json's content.

    The keys and the similarities are computed on ``backend``, else on the
    one ``device`` names (``"cpu"``, ``"gpu"`` or ``"auto"``, as for ``run``).
    """
    from .remote import local_index
    with local_index(index) as local:
        return _overlap(inputs, local, output, threshold=threshold, text_field=text_field,
                        id_field=id_field, on_bad_record=on_bad_record, overwrite=overwrite,
                        backend=backend, device=device, gpu_memory=gpu_memory)


def _overlap(inputs, index: str, output: str, *, threshold: float | None = None,
             text_field: str = "text", id_field: str | None = "id",
             on_bad_record: str = "error", overwrite: bool = False, backend=None,
             device: str = "cpu", gpu_memory=None) -> dict:
    """Write the contamination report of ``inputs`` against ``index`` into
    ``output``; returns report.json's content."""
    from ..errors import ConfigError
    from ..io.sources import expand_inputs, read_corpus
    from ..output import OutputDir
    from ..shell import choose_backend
    from ..stages.normalize import text_buffers
    t0 = time.perf_counter()
    idx = Index(index)
    idx.check_files()                   # a damaged index stops it before anything is read
    cfg = idx.config()
    t = float(cfg.threshold if threshold is None else threshold)
    if not 0.0 < t <= 1.0:
        raise ConfigError(f"--threshold must be in (0, 1], got {t}")
    paths = expand_inputs(inputs)
    out = OutputDir(output, inputs=[str(x) for x in inputs] + paths, overwrite=overwrite)
    out.check()
    be, line = choose_backend(device, gpu_memory, backend)
    log.info(line)
    corpus = read_corpus(paths, text_field, id_field, on_bad_record)
    texts = corpus.texts.cast(pa.large_string())
    ids = corpus.ids.cast(pa.string())
    n = len(texts)
    keys, kd = keys_of(texts, cfg, be)
    q1, o1, r1 = idx.lookup_pairs(keys, kd)
    wk, wd = window_keys(texts, cfg, be, stride=QUERY_STRIDE)
    q2, o2, r2 = idx.lookup_pairs(wk, wd, windows=True)
    qi, oi = _candidates(np.concatenate([q1, q2]), np.concatenate([o1, o2]), n)
    ords = np.unique(oi)
    found = idx.fetch(ords)
    if found.num_rows != ords.size:
        raise BadIndex(f"{idx.path}: {ords.size:,} documents looked up, "
                       f"{found.num_rows:,} read back; the index is damaged")
    # shingle sets of the items, then of the candidates, over normalized text
    both = pa.concat_arrays([texts, found.column("text").combine_chunks().cast(pa.large_string())])
    norm = be.normalize(both, cfg.normalize)
    off, data = text_buffers(norm)
    # the handle (docs, set offsets, values): every document, so rows are positions
    sets = be.shingle_sets(off, data, cfg.shingle == "word", cfg.ngram,
                           np.arange(len(both), dtype=np.int64))
    size = np.diff(np.asarray(be.to_host(sets[1]), dtype=np.int64))
    ia = qi.astype(np.int64)
    ib = n + np.searchsorted(ords, oi).astype(np.int64)
    if ia.size and (ia.min() < 0 or ia.max() >= n or ib.max() >= len(both)
                    or size.size != len(both)):
        raise BadIndex(f"{idx.path}: candidates outside the documents read back; the index "
                       f"is damaged")
    jac = (np.asarray(be.to_host(be.jaccard_rows(sets, ia, ib)), dtype=np.float64)
           if ia.size else np.zeros(0))
    inter = np.rint(jac * (size[ia] + size[ib]) / (1.0 + jac))
    cont = np.where(size[ia] > 0, inter / np.maximum(size[ia], 1), 0.0)
    # the best match of each item: a near-duplicate first, else the most contained
    near = jac >= t
    score = np.where(near, 2.0 + jac, np.where(cont >= t, 1.0 + cont, jac))
    best = np.full(n, -1, np.int64)
    if ia.size:
        order = np.lexsort((oi, -score, ia))
        head = np.ones(order.size, bool)
        head[1:] = ia[order][1:] != ia[order][:-1]
        best[ia[order[head]]] = order[head]
    has = best >= 0
    b = best[has]
    j_best = np.full(n, np.nan)
    c_best = np.full(n, np.nan)
    j_best[has], c_best[has] = jac[b], cont[b]
    kind = np.full(n, None, dtype=object)
    is_near = has & (j_best >= t)
    is_cont = has & ~is_near & (c_best >= t)
    kind[is_near] = "near-duplicate"
    kind[is_cont] = "contained"
    flagged = is_near | is_cont
    sim = np.where(is_cont, c_best, j_best)
    match_pos = np.full(n, -1, np.int64)
    match_pos[has] = np.searchsorted(ords, oi[b])
    mslot = pa.array(match_pos, mask=match_pos < 0)
    match_id = found.column("id").combine_chunks().take(mslot)
    table = pa.table({"id": ids, "match_id": match_id,
                      "similarity": pa.array(sim, pa.float64(), mask=~has),
                      "jaccard": pa.array(j_best, pa.float64(), mask=~has),
                      "containment": pa.array(c_best, pa.float64(), mask=~has),
                      "flagged": pa.array(flagged, pa.bool_()),
                      "kind": pa.array(kind, pa.string())})
    summary = {"items": n, "flagged": int(flagged.sum()), "near_duplicate": int(is_near.sum()),
               "contained": int(is_cont.sum()), "threshold": t,
               "flagged_share": float(flagged.mean()) if n else 0.0}
    report = {"summary": summary, "index": idx.info(),
              "lookups": {"documents": r1, "windows": r2, "candidates": int(ia.size)},
              "inputs": paths, "seconds": time.perf_counter() - t0,
              "outputs": {"overlap": "overlap.parquet", "report": "report.json",
                          "report_html": "report.html"}}
    with out:
        folder = out.staging()
        write_table(table, os.path.join(folder, "overlap.parquet"))
        with open(os.path.join(folder, "report.json"), "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
        _html(os.path.join(folder, "report.html"), report, table, texts, found, match_pos)
        out.publish()
    return report


def _html(path: str, report: dict, table: pa.Table, texts, found, match_pos) -> None:
    s = report["summary"]
    flagged = np.flatnonzero(table.column("flagged").to_numpy(zero_copy_only=False))
    rows = []
    ids = table.column("id")
    mids = table.column("match_id")
    sims = table.column("similarity")
    kinds = table.column("kind")
    ftext = found.column("text")

    def cut(x: str) -> str:
        return esc(x if len(x) <= 400 else x[:400] + " …")
    for i in flagged[:2000].tolist():
        rows.append(f"<tr><td>{esc(ids[i])}</td><td>{esc(kinds[i])}</td>"
                    f"<td>{sims[i].as_py():.3f}</td><td>{esc(mids[i])}</td>"
                    f"<td><pre>{cut(texts[i].as_py())}</pre></td>"
                    f"<td><pre>{cut(ftext[int(match_pos[i])].as_py())}</pre></td></tr>")
    more = (f"<p>{len(flagged) - 2000:,} more flagged items are in overlap.parquet.</p>"
            if len(flagged) > 2000 else "")
    body = f"""
<h1>Contamination report</h1>
<p>{s['items']:,} evaluation items against the index {esc(report['index']['index'])}
({report['index']['docs']:,} documents): <b>{s['flagged']:,} flagged</b>
({s['near_duplicate']:,} near-duplicates, {s['contained']:,} contained in a longer
document) at threshold {s['threshold']:g}.</p>
<table><tr><th>item</th><th>kind</th><th>similarity</th><th>training match</th>
<th>item text</th><th>match text</th></tr>
{''.join(rows)}</table>{more}"""
    write_page(path, page("gpu-dedup overlap", body, table_css(40)))
