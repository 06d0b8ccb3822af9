"""report.html: one self-contained page a person opens after a run.

It shows the counts (in, removed as exact and as near duplicates, kept), the
seconds per stage, the S-curve of the parameters used with the threshold
marked, the distribution of cluster sizes, the distribution of the
similarities of verified edges, and the largest clusters: the kept document
beside a few removed ones, with the words that differ highlighted.

Everything is inline (CSS and SVG); the page loads nothing and runs no script.
The page is built by :mod:`gpu_dedup.html_page`: all text from the corpus is
HTML-escaped, and every string shown passes through
:func:`gpu_dedup.edge.clean` (no credential of a URL; names that are not
valid UTF-8 escaped).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .arrays import unique
from .stages.summaries import size_counts, size_labels, top_clusters
from .edge import clean_tree
from .html_page import esc, page, write_page
from .io.fs import secrets_held
from .params import approx_threshold, collision_probability

#: Clusters shown, largest first, and removed documents shown per cluster.
TOP_CLUSTERS = 20
REMOVED_PER_CLUSTER = 3
#: Pairs whose similarities are counted at a time.
PAIR_ROWS = 1 << 20
#: Words of a document compared and shown at most; equal runs longer than
#: ``2 * CONTEXT_WORDS`` are shortened to their ends.
MAX_WORDS = 1000
CONTEXT_WORDS = 12

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d2430;
background:#f6f7f9}
main{max-width:1150px;margin:0 auto;padding:24px}
h1{font-size:24px;margin:0 0 4px} h2{font-size:18px;margin:28px 0 10px}
.sub{color:#5b6472;font-size:13px}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin-top:16px}
.card{background:#fff;border:1px solid #dde1e7;border-radius:8px;padding:12px 16px;min-width:150px}
.card .n{font-size:26px;font-weight:600} .card .l{color:#5b6472;font-size:13px}
.card.kept .n{color:#1f7a3a} .card.exact .n{color:#a33a3a} .card.fuzzy .n{color:#b86b00}
.panel{background:#fff;border:1px solid #dde1e7;border-radius:8px;padding:14px;margin-top:12px}
.grid{display:grid;grid-template-columns:1fr 1fr;gap:12px}
table{border-collapse:collapse;font-size:13px} td,th{padding:3px 10px;text-align:left;
border-bottom:1px solid #eceff3} th{color:#5b6472;font-weight:500}
td.num{text-align:right;font-variant-numeric:tabular-nums}
svg text{font-size:11px;fill:#3b4350} .axis{stroke:#8a93a0;stroke-width:1}
.cluster{background:#fff;border:1px solid #dde1e7;border-radius:8px;margin-top:12px;
padding:10px 14px}
.cluster h3{font-size:14px;margin:0 0 8px} .docs{display:flex;gap:10px;overflow-x:auto}
.docs.pair{margin-bottom:8px}
.doc{flex:1 1 0;min-width:240px;border:1px solid #e3e6eb;border-radius:6px;padding:8px;
font-size:12.5px;line-height:1.45;background:#fbfcfd;word-wrap:break-word}
.doc.kept{border-color:#7fc495;background:#f3fbf5} .doc .id{font-weight:600;font-size:12px;
margin-bottom:4px;color:#3b4350;word-break:break-all}
del{background:#ffd7d5;text-decoration:line-through;color:#8c1d18}
ins{background:#c9f2d0;text-decoration:none;color:#0f5a23}
.gap{color:#8a93a0;font-style:italic}
.note{color:#5b6472;font-size:12px} .warn{color:#9a3412;font-weight:600}
"""


def _fmt(x) -> str:
    if isinstance(x, (bool, np.bool_)):
        return "yes" if x else "no"
    if isinstance(x, float):
        return f"{x:,.3f}" if abs(x) < 100 else f"{x:,.1f}"
    if isinstance(x, (int, np.integer)):
        return f"{int(x):,}"
    return esc(x)


# ---------------------------------------------------------------------------
# SVG charts
# ---------------------------------------------------------------------------

def svg_scurve(bands: int, rows: int, threshold: float, width: int = 520,
               height: int = 300) -> str:
    """The S-curve ``1-(1-s^r)^b`` with the threshold marked."""
    ml, mr, mt, mb = 46, 16, 16, 40
    w, h = width - ml - mr, height - mt - mb
    s = np.linspace(0, 1, 201)
    p = collision_probability(s, bands, rows)
    pts = " ".join(f"{ml + x * w:.1f},{mt + (1 - y) * h:.1f}" for x, y in zip(s, p))
    out = [f'<svg class="chart scurve" role="img" aria-label="S-curve" width="{width}" '
           f'height="{height}" viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">']
    for k in range(0, 11, 2):
        v = k / 10
        x = ml + v * w
        y = mt + (1 - v) * h
        out.append(f'<line x1="{x:.1f}" y1="{mt}" x2="{x:.1f}" y2="{mt + h}" stroke="#eef0f3"/>')
        out.append(f'<line x1="{ml}" y1="{y:.1f}" x2="{ml + w}" y2="{y:.1f}" stroke="#eef0f3"/>')
        out.append(f'<text x="{x:.1f}" y="{mt + h + 14}" text-anchor="middle">{v:g}</text>')
        out.append(f'<text x="{ml - 6}" y="{y + 4:.1f}" text-anchor="end">{v:g}</text>')
    out.append(f'<line class="axis" x1="{ml}" y1="{mt + h}" x2="{ml + w}" y2="{mt + h}"/>')
    out.append(f'<line class="axis" x1="{ml}" y1="{mt}" x2="{ml}" y2="{mt + h}"/>')
    tx = ml + threshold * w
    out.append(f'<rect x="{tx:.1f}" y="{mt}" width="{ml + w - tx:.1f}" height="{h}" '
               f'fill="#1f7a3a" fill-opacity="0.06"/>')
    out.append(f'<polyline points="{pts}" fill="none" stroke="#2f5fb3" stroke-width="2.5"/>')
    out.append(f'<line x1="{tx:.1f}" y1="{mt}" x2="{tx:.1f}" y2="{mt + h}" stroke="#c0392b" '
               f'stroke-width="1.5" stroke-dasharray="5,4"/>')
    py = float(collision_probability(threshold, bands, rows))
    out.append(f'<circle cx="{tx:.1f}" cy="{mt + (1 - py) * h:.1f}" r="4" fill="#c0392b"/>')
    out.append(f'<text x="{tx + 6:.1f}" y="{mt + 12}" fill="#c0392b">threshold {threshold:g}: '
               f'P(candidate) = {py:.3f}</text>')
    at = approx_threshold(bands, rows)
    out.append(f'<text x="{ml + w}" y="{mt + h - 8}" text-anchor="end">{bands} bands x {rows} '
               f'rows, (1/b)^(1/r) = {at:.3f}</text>')
    out.append(f'<text x="{ml + w / 2}" y="{height - 6}" text-anchor="middle">similarity of a '
               f'pair</text>')
    out.append(f'<text transform="rotate(-90)" x="{-(mt + h / 2)}" y="12" '
               f'text-anchor="middle">P(candidate)</text>')
    out.append("</svg>")
    return "".join(out)


def svg_bars(labels, values, title: str, xlabel: str, log: bool = False, width: int = 520,
             height: int = 300, color: str = "#2f5fb3") -> str:
    """A bar chart (``log``: heights on a log scale) with each count written
    above its bar."""
    ml, mr, mt, mb = 46, 12, 22, 46
    w, h = width - ml - mr, height - mt - mb
    vals = [float(v) for v in values]
    top = max(vals) if vals else 0.0

    def hgt(v):
        if top <= 0 or v <= 0:
            return 0.0
        if log:
            return h * math.log10(1 + v) / math.log10(1 + top)
        return h * v / top

    n = max(len(vals), 1)
    bw = w / n
    out = [f'<svg class="chart bars" role="img" aria-label="{esc(title)}" width="{width}" '
           f'height="{height}" viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">']
    out.append(f'<line class="axis" x1="{ml}" y1="{mt + h}" x2="{ml + w}" y2="{mt + h}"/>')
    step = max(1, int(math.ceil(n / 12)))
    for i, (lab, v) in enumerate(zip(labels, vals)):
        bh = hgt(v)
        x = ml + i * bw
        out.append(f'<rect x="{x + 1:.1f}" y="{mt + h - bh:.1f}" width="{max(bw - 2, 1):.1f}" '
                   f'height="{bh:.1f}" fill="{color}"><title>{esc(lab)}: {int(v):,}</title></rect>')
        if v > 0 and (n <= 24 or i % step == 0):
            out.append(f'<text x="{x + bw / 2:.1f}" y="{mt + h - bh - 3:.1f}" '
                       f'text-anchor="middle">{int(v):,}</text>')
        if i % step == 0:
            out.append(f'<text x="{x + bw / 2:.1f}" y="{mt + h + 14}" '
                       f'text-anchor="middle">{esc(lab)}</text>')
    out.append(f'<text x="{ml + w / 2}" y="{height - 8}" text-anchor="middle">{esc(xlabel)}'
               f'{" (log scale)" if log else ""}</text>')
    if not vals or top <= 0:
        out.append(f'<text x="{ml + w / 2}" y="{mt + h / 2}" text-anchor="middle">none</text>')
    out.append("</svg>")
    return "".join(out)


def svg_stage_seconds(seconds: dict, width: int = 520) -> str:
    items = [(k, float(v)) for k, v in seconds.items() if k != "total"]
    row = 22
    ml, mr = 90, 70
    height = 10 + row * max(len(items), 1)
    w = width - ml - mr
    top = max([v for _, v in items] + [1e-9])
    out = [f'<svg class="chart stages" role="img" aria-label="seconds per stage" width="{width}" '
           f'height="{height}" viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">']
    for i, (k, v) in enumerate(items):
        y = 5 + i * row
        bw = max(w * v / top, 1)
        out.append(f'<text x="{ml - 6}" y="{y + 14}" text-anchor="end">{esc(k)}</text>')
        out.append(f'<rect x="{ml}" y="{y + 3}" width="{bw:.1f}" height="{row - 8}" '
                   f'fill="#6b8fd6"/>')
        out.append(f'<text x="{ml + bw + 5:.1f}" y="{y + 14}">{v:.3f} s</text>')
    out.append("</svg>")
    return "".join(out)


def size_histogram(sizes: np.ndarray):
    """Cluster sizes in bins 1, 2, 3, 4, 5-8, 9-16, ...: ``(labels, counts)``."""
    return size_labels(size_counts(sizes))


def similarity_edges(lowest, threshold: float, bins: int = 20) -> np.ndarray:
    """The edges of a histogram of similarities from the lowest (or the
    threshold, if lower; rounded down to 0.05) to 1."""
    lo = float(threshold) if lowest is None else float(min(threshold, lowest))
    return np.linspace(math.floor(lo * 20) / 20, 1.0, bins + 1)


@dataclass
class HtmlData:
    """What the page shows of a run's results, gathered chunk by chunk
    (:func:`html_data`) or from a library result (:func:`data_of_result`).

    Attributes:
        sizes: cluster sizes, ``(labels, counts)``.
        pair_hist, removed_hist: ``(labels, counts)`` of the similarities of
            the near-duplicate pairs and of the removed documents.
        fuzzy_edges, exact_edges, removed, below: counts.
        groups: the largest clusters, largest first: ``(label, size,
            removed, shown)``; ``shown`` lists ``(document, duplicate_of,
            similarity)`` of the first removed members.
    """

    sizes: tuple
    pair_hist: tuple
    removed_hist: tuple
    fuzzy_edges: int
    exact_edges: int
    removed: int
    below: int
    groups: list


def html_data(chunks, threshold: float, size_bins, largest, fuzzy_min, removed_min) -> HtmlData:
    """The page's data in one pass over ``chunks``: an iterable of ``(d0,
    arrays)``, each chunk's first document and its ``cluster``, ``kept``,
    ``duplicate_of``, ``similarity``, ``removed`` (the documents of the
    output removed), ``pair_similarity`` and ``pair_exact``; the cluster
    sizes in bins (:func:`~gpu_dedup.stages.summaries.size_counts`), the
    largest clusters ``(labels, sizes)`` and the lowest similarities
    gathered before."""
    pe = similarity_edges(fuzzy_min, threshold)
    re_ = similarity_edges(removed_min, threshold)
    pair_c = np.zeros(pe.size - 1, np.int64)
    rem_c = np.zeros(re_.size - 1, np.int64)
    fuzzy = exact = removed = below = 0
    labels, sizes = (np.asarray(x, dtype=np.int64) for x in largest)
    order = np.argsort(labels)
    gone_n = np.zeros(labels.size, np.int64)      # removed members, by place in ``labels``
    shown_n = np.zeros(labels.size, np.int64)     # of them, those shown so far
    shown = []                       # (place, document, duplicate_of, similarity) per chunk
    for d0, r in chunks:
        n = len(r["pair_exact"])
        for s in range(0, n, PAIR_ROWS):       # the pairs may be many: a slice at a time
            fz = ~np.asarray(r["pair_exact"][s:s + PAIR_ROWS], dtype=bool)
            ps = np.asarray(r["pair_similarity"][s:s + PAIR_ROWS])[fz]
            pair_c += np.histogram(ps, bins=pe)[0]
            fuzzy += int(ps.size)
            exact += int(np.count_nonzero(~fz))
        rs = r["similarity"][r["removed"]]
        rem_c += np.histogram(rs, bins=re_)[0]
        removed += int(rs.size)
        below += int(np.count_nonzero(rs < threshold))
        at = np.flatnonzero(np.isin(r["cluster"], labels) & ~r["kept"])
        place = order[np.searchsorted(labels[order], r["cluster"][at])]
        gone_n += np.bincount(place, minlength=labels.size)
        # the first removed members of each cluster, in document order
        keep = np.zeros(at.size, dtype=bool)
        for p in unique(place):
            take = np.flatnonzero(place == p)[:max(0, REMOVED_PER_CLUSTER - int(shown_n[p]))]
            keep[take] = True
            shown_n[p] += take.size
        shown.append((place[keep], at[keep] + d0, r["duplicate_of"][at[keep]],
                      r["similarity"][at[keep]]))
    groups = []
    for i, (label, size) in enumerate(zip(labels.tolist(), sizes.tolist())):
        rows = [(int(d), int(t), float(s)) for pl, ds, ts, ss in shown
                for p, d, t, s in zip(pl, ds, ts, ss) if p == i]
        groups.append((label, size, int(gone_n[i]), rows))
    return HtmlData(size_labels(size_bins), ([f"{a:.2f}" for a in pe[:-1]], pair_c.tolist()),
                    ([f"{a:.2f}" for a in re_[:-1]], rem_c.tolist()), fuzzy, exact, removed,
                    below, groups)


def data_of_result(result, threshold: float) -> HtmlData:
    """The page's data of a library result (whole arrays, one chunk)."""
    cluster = np.asarray(result.cluster)
    kept = np.asarray(result.kept, dtype=bool)
    labels, sizes = unique(cluster, return_counts=True) if cluster.size else (
        np.zeros(0, np.int64), np.zeros(0, np.int64))
    multi = sizes > 1
    largest = top_clusters(labels[multi], sizes[multi], TOP_CLUSTERS)
    sims = np.asarray(result.pair_similarity, dtype=np.float64)
    ex = np.asarray(result.pair_exact, dtype=bool)
    dsim = np.asarray(result.similarity, dtype=np.float64)
    fz = sims[~ex]
    rs = dsim[~kept]
    arrays = {"cluster": cluster, "kept": kept, "duplicate_of": np.asarray(result.duplicate_of),
              "similarity": dsim, "removed": ~kept, "pair_similarity": sims, "pair_exact": ex}
    return html_data([(0, arrays)], threshold, size_counts(sizes), largest,
                     float(fz.min()) if fz.size else None, float(rs.min()) if rs.size else None)


# ---------------------------------------------------------------------------
# clusters and word differences
# ---------------------------------------------------------------------------

def _words(words) -> str:
    """Words shown one space apart: cleaned and escaped as one text (a
    credential split over words is masked too)."""
    return esc(" ".join(words))


def _collapse(ops, words_a, words_b):
    """Render both sides of a word diff, shortening long equal runs."""
    left, right = [], []
    for tag, a0, a1, b0, b1 in ops:
        if tag == "equal":
            n = a1 - a0
            if n > 2 * CONTEXT_WORDS + 4:
                head = _words(words_a[a0:a0 + CONTEXT_WORDS])
                tail = _words(words_a[a1 - CONTEXT_WORDS:a1])
                gap = f'<span class="gap">… {n - 2 * CONTEXT_WORDS:,} same words …</span>'
                left.append(f"{head} {gap} {tail}")
                right.append(f"{head} {gap} {tail}")
            else:
                t = _words(words_a[a0:a1])
                left.append(t)
                right.append(t)
            continue
        if a1 > a0:
            left.append("<del>" + _words(words_a[a0:a1]) + "</del>")
        if b1 > b0:
            right.append("<ins>" + _words(words_b[b0:b1]) + "</ins>")
    return " ".join(x for x in left if x), " ".join(x for x in right if x)


def _opcodes(a: list, b: list) -> list:
    """``difflib``'s opcodes turning the words ``a`` into ``b``: the words
    both start and end with are equal runs as they are, and the matcher
    runs on what lies between (its search is the slow part, and
    near-duplicates mostly differ in a few places)."""
    n = min(len(a), len(b))
    head = 0
    while head < n and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < n - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    ea, eb = len(a) - tail, len(b) - tail
    ops = [("equal", 0, head, 0, head)] if head else []
    if head < ea or head < eb:
        import difflib                  # only where two shown texts differ
        mid = difflib.SequenceMatcher(None, a[head:ea], b[head:eb], autojunk=False)
        ops += [(t, a0 + head, a1 + head, b0 + head, b1 + head)
                for t, a0, a1, b0, b1 in mid.get_opcodes()]
    if tail:
        ops.append(("equal", ea, len(a), eb, len(b)))
    return ops


def word_diff(kept: str, other: str) -> tuple[str, str, int]:
    """HTML of ``kept`` with the words ``other`` lacks struck out, of ``other``
    with the words ``kept`` lacks highlighted, and the number of words that
    differ (either side)."""
    a = kept.split()
    b = other.split()
    more = ""
    if len(a) > MAX_WORDS or len(b) > MAX_WORDS:
        more = f' <span class="gap">… (first {MAX_WORDS:,} words compared)</span>'
        a, b = a[:MAX_WORDS], b[:MAX_WORDS]
    ops = _opcodes(a, b)
    diff = sum(max(a1 - a0, b1 - b0) for tag, a0, a1, b0, b1 in ops if tag != "equal")
    left, right = _collapse(ops, a, b)
    return left + more, right + more, diff


def _strings_of(strings, docs: list) -> dict:
    """``{doc: str}`` of the documents ``docs`` of ``strings`` (an Arrow
    array, or the stored texts or ids), read in one pass over the sorted
    distinct documents rather than one read each."""
    want = unique(np.asarray(docs, dtype=np.int64))
    got = strings.take(want).to_pylist() if want.size else []
    return dict(zip(want.tolist(), got))


def _clusters_html(data: HtmlData, corpus) -> str:
    """The largest clusters: each removed document beside the kept document
    it names (``duplicate_of``), with the words that differ marked."""
    parts = []
    if not data.groups:
        return '<p class="note">No duplicates were found.</p>'
    shown_docs = [int(x) for _, _, _, shown in data.groups for m, d, _ in shown for x in (m, d)]
    texts = _strings_of(corpus.texts, shown_docs)
    ids = _strings_of(corpus.ids, shown_docs)
    for rank, (label, size, n_removed, shown) in enumerate(data.groups, 1):
        rows = []
        for m, d, sim in shown:
            kept_text = texts[int(d)]
            other = texts[int(m)]
            left, right, nd = word_diff(kept_text, other)
            same = "identical text" if other == kept_text else f"{nd:,} word(s) differ"
            rows.append(
                f'<div class="docs pair"><div class="doc kept"><div class="id">kept: '
                f'{esc(ids[int(d)])}</div>{left}</div>'
                f'<div class="doc removed"><div class="id">removed: {esc(ids[int(m)])} '
                f'<span class="note">(duplicate of {esc(ids[int(d)])}, similarity '
                f'{sim:.3f}; {same})</span></div>{right}</div></div>')
        parts.append(
            f'<div class="cluster"><h3>#{rank}: {size:,} documents '
            f'<span class="note">(cluster {label}; showing {len(shown)} of {n_removed:,} '
            f'removed, each beside the kept document it duplicates; struck-out words of the '
            f'kept document are missing from the removed one)</span></h3>{"".join(rows)}</div>')
    return "".join(parts)


def _table(rows) -> str:
    body = "".join(f"<tr><th>{esc(k)}</th><td class=\"num\">{_fmt(v)}</td></tr>" for k, v in rows)
    return f"<table>{body}</table>"


def render(report: dict, data: HtmlData, corpus) -> str:
    """The page, as a string."""
    d = report["documents"]
    e = report["edges"]
    p = report["parameters"]
    cards = [("in", d["in"], "documents in", ""), ("exact", d["exact_removed"],
             "removed as exact duplicates", "exact"),
             ("fuzzy", d["fuzzy_removed"], "removed as near duplicates", "fuzzy"),
             ("kept", d["kept"], "kept", "kept")]
    cards_html = "".join(f'<div class="card {cls}" id="count-{key}"><div class="n">{n:,}</div>'
                         f'<div class="l">{esc(label)}</div></div>'
                         for key, n, label, cls in cards)
    sl, sc = data.sizes
    hl, hc = data.pair_hist
    sel = report.get("selection", {})
    rl, rc = data.removed_hist
    warn_html = (f'<p class="warn" id="selection-warning">{esc(sel["warning"])}</p>'
                 if sel.get("warning") else "")
    bad = report.get("bad_records", {})
    details = [("clusters", report["clusters"]["total"]),
               ("clusters with duplicates", report["clusters"]["with_duplicates"]),
               ("pairs compared", e["candidates"]), ("similar pairs", e["verified"]),
               ("exact edges", e["exact"]), ("verification rounds", e["rounds"]),
               ("comparisons skipped (bucket limit)", sel.get("skipped_comparisons", 0)),
               ("documents without shingles", d["without_shingles"]),
               ("invalid UTF-8 replaced", d["invalid_utf8_replaced"]),
               ("bad records skipped", bad.get("skipped", 0))]
    details = [(k, v) for k, v in details if v is not None]    # no rounds in greedy mode
    params = [(k, p[k]) for k in ("shingle", "ngram", "num_perm", "bands", "rows", "threshold",
                                  "seed", "similarity", "verify", "exact", "keep", "cluster",
                                  "bucket_limit")
              if k in p]
    params.insert(2, ("normalize", ", ".join(p.get("normalize") or []) or "none"))
    bad_html = ""
    if bad.get("skipped"):
        items = "".join(f"<li>{esc(r)}</li>" for r in bad.get("records", [])[:50])
        bad_html = (f'<h2>Bad records skipped</h2><div class="panel"><p>{bad["skipped"]:,} '
                    f'record(s) were left out; report.json lists them.</p><ul>{items}</ul></div>')
    inputs = "".join(f"<tr><td>{esc(i['path'])}</td><td>{esc(i['format'])}"
                     f"{' / ' + esc(i['compression']) if i.get('compression') else ''}</td>"
                     f"<td class=\"num\">{i['documents']:,}</td><td>{esc(i['output'])}</td></tr>"
                     for i in report.get("inputs", []))
    body = f"""<main>
<h1>Deduplication report</h1>
<div class="sub">{esc(p.get('name', ''))} · device {esc(report.get('device', ''))} ·
gpu-dedup {esc(report.get('versions', {}).get('gpu_dedup', ''))} ·
{report['seconds'].get('total', 0.0):.2f} s</div>
<div class="cards">{cards_html}</div>
<div class="grid">
<section><h2>Seconds per stage</h2>
<div class="panel">{svg_stage_seconds(report['seconds'])}</div></section>
<section><h2>Counts</h2><div class="panel">{_table(details)}</div></section>
</div>
<div class="grid">
<section id="scurve"><h2>S-curve of the parameters used</h2><div class="panel">
{svg_scurve(int(p['bands']), int(p['rows']), float(p['threshold']))}</div></section>
<section><h2>Parameters</h2><div class="panel">{_table(params)}</div></section>
</div>
<div class="grid">
<section id="sizes"><h2>Cluster sizes</h2><div class="panel">
{svg_bars(sl, sc, "cluster sizes", "documents per cluster", log=True)}</div></section>
<section id="similarities"><h2>Similarity of verified edges</h2><div class="panel">
{svg_bars(hl, hc, "similarity of verified edges", "similarity", color="#b86b00")}
<p class="note">{data.fuzzy_edges:,} near-duplicate edges; {data.exact_edges:,} exact-duplicate edges
(similarity 1) are not drawn.</p></div></section>
</div>
<section id="removals"><h2>Each removed document against the kept document it names</h2>
<div class="panel">{warn_html}
{svg_bars(rl, rc, "similarity of removed documents", "similarity", color="#2f7d4f")}
<p class="note">{data.removed:,} removed documents ({esc(sel.get("mode", ""))} selection);
{data.below:,} below the threshold {float(p["threshold"]):g}.</p></div></section>
<h2 id="largest">The {TOP_CLUSTERS} largest clusters</h2>
<p class="note">Texts as they were compared: after normalization
({esc(",".join(report["parameters"].get("normalize") or ["none"]))}).</p>
{_clusters_html(data, corpus)}
{bad_html}
<h2>Inputs</h2><div class="panel"><table><tr><th>input</th><th>format</th><th>documents</th>
<th>kept rows in</th></tr>{inputs}</table></div>
</main>"""
    return page(f"gpu-dedup report: {p.get('name', '')}", body, _CSS)


def write_html(path: str, report: dict, data, corpus) -> None:
    """Write ``report.html`` for a finished run: ``data`` is its
    :class:`HtmlData`, or a library result (:func:`data_of_result`)."""
    if not isinstance(data, HtmlData):
        data = data_of_result(data, float(report["parameters"]["threshold"]))
    with secrets_held():
        write_page(path, render(clean_tree(report), data, corpus))
