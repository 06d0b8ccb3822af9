"""report.html: one self-contained page with the counts, seconds per stage,
the S-curve, the cluster-size and similarity distributions and the largest
clusters with their differing words highlighted; corpus text escaped; loads
in a real headless browser without errors and renders something visible."""
from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import tempfile
import zlib
from html.parser import HTMLParser
from types import SimpleNamespace

import numpy as np
import pytest

from gpu_dedup.config import Config
from gpu_dedup.pipeline import run
from gpu_dedup.report_html import data_of_result, size_histogram, word_diff

CFG = Config(shingle="word", ngram=2, normalize=("lower", "ws"), num_perm=64, bands=16, rows=4,
             threshold=0.5)
EVIL = '<script>alert("x")</script> & <b>bold</b> "quoted" \'single\''


def _corpus(path):
    rng = np.random.default_rng(11)
    vocab = [f"word{i}" for i in range(300)]
    recs = []
    for c in range(30):
        base = [vocab[j] for j in rng.integers(0, 300, size=30)]
        if c == 4:                          # a cluster of five, shown first
            base = EVIL.split() + base
        recs.append(" ".join(base))
        for _ in range(c % 5):              # clusters of different sizes
            w = list(base)
            w[int(rng.integers(len(w)))] = "EDITED<i>"
            recs.append(" ".join(w))
    with open(path, "w") as f:
        for i, t in enumerate(recs):
            f.write(json.dumps({"id": f"doc<{i}>", "text": t}) + "\n")
    return recs


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    d = tmp_path_factory.mktemp("html")
    src = d / "c.jsonl"
    recs = _corpus(src)
    out = d / "out"
    report = run([str(src)], str(out), CFG)
    return out, (out / "report.html").read_text(encoding="utf-8"), report, recs


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags = []
        self.attrs = []
        self.text = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += attrs

    def handle_data(self, data):
        self.text.append(data)


def test_page_holds_the_counts_plots_and_clusters(page):
    out, html, report, _ = page
    p = _Collect()
    p.feed(html)
    assert p.tags.count("svg") == 5        # stages, S-curve, sizes, similarities, removals
    for key in ("in", "exact", "fuzzy", "kept"):
        m = re.search(rf'id="count-{key}"><div class="n">([\d,]+)<', html)
        want = {"in": "in", "exact": "exact_removed", "fuzzy": "fuzzy_removed",
                "kept": "kept"}[key]
        assert m and int(m.group(1).replace(",", "")) == report["documents"][want]
    b, r = report["parameters"]["bands"], report["parameters"]["rows"]
    assert f"{b} bands x {r} rows" in html and "threshold 0.5" in html
    for stage in ("read", "signatures", "buckets", "select", "write"):
        assert f">{stage}</text>" in html
    # the largest clusters first: sizes in the headings never grow
    sizes = [int(s.replace(",", "")) for s in re.findall(r"<h3>#\d+: ([\d,]+) documents", html)]
    assert 0 < len(sizes) <= 20 and sizes == sorted(sizes, reverse=True)
    assert sizes[0] == 5                           # one kept + four edits
    # texts as compared: normalized (lower-cased here), escaped
    assert "<del>" in html and "<ins>edited&lt;i&gt;</ins>" in html
    assert "after normalization" in html


def test_removed_documents_stand_beside_the_kept_one_they_name(page):
    import pyarrow.parquet as pq
    out, html, report, _ = page
    t = pq.read_table(out / "clusters.parquet").to_pydict()
    named = {i: d for i, k, d in zip(t["id"], t["kept"], t["duplicate_of"]) if not k}
    shown = re.findall(r'removed: (doc&lt;\d+&gt;) <span class="note">\(duplicate of '
                       r'(doc&lt;\d+&gt;), similarity ([\d.]+)', html)
    assert len(shown) >= 10
    for removed, kept, sim in shown:
        r = removed.replace("&lt;", "<").replace("&gt;", ">")
        assert named[r] == kept.replace("&lt;", "<").replace("&gt;", ">")
        assert float(sim) >= 0.5
    assert 'id="removals"' in html
    sel = report["selection"]
    assert sel["mode"] == "greedy" and sel["removed_similarity"]["below_threshold"] == 0
    assert sel["removed_similarity"]["removed"] == report["documents"]["removed"]


def test_corpus_text_is_escaped_and_nothing_is_fetched(page):
    _, html, _, _ = page
    assert "<script>" not in html and "<b>bold</b>" not in html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html
    assert re.search(r"kept: doc&lt;\d+&gt;", html)
    p = _Collect()
    p.feed(html)
    assert not {"script", "link", "img", "iframe", "object", "embed"} & set(p.tags)
    for name, value in p.attrs:
        assert name not in ("src", "href"), (name, value)
    stripped = html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "http://" not in stripped and "https://" not in stripped and "url(" not in stripped


def test_word_opcodes_are_a_diff_and_the_matcher_s_between_common_ends():
    import difflib
    import random
    from gpu_dedup.report_html import _opcodes
    rng = random.Random(1)
    for _ in range(2000):
        a = [rng.choice("abcde") for _ in range(rng.randint(0, 30))]
        b = list(a)
        for _ in range(rng.randint(0, 4)):
            j = rng.randint(0, len(b))
            op = rng.random()
            if op < .4:
                b.insert(j, rng.choice("abcdeX"))
            elif b and op < .8:
                del b[min(j, len(b) - 1)]
            elif b:
                b[min(j, len(b) - 1)] = "Y"
        ops = _opcodes(a, b)
        # the opcodes cover both sides in order, and equal runs are equal
        assert [x for _, a0, a1, _, _ in ops for x in a[a0:a1]] == a
        assert [x for _, _, _, b0, b1 in ops for x in b[b0:b1]] == b
        assert all(a[a0:a1] == b[b0:b1] for t, a0, a1, b0, b1 in ops if t == "equal")
        assert all(t in ("equal", "replace", "insert", "delete") for t, *_ in ops)
        if a == b:
            assert ops == difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    # between the common ends, the matcher's own opcodes
    a = "x y a b c z w".split()
    b = "x y c b a z w".split()
    mid = difflib.SequenceMatcher(None, a[2:5], b[2:5], autojunk=False).get_opcodes()
    assert _opcodes(a, b) == ([("equal", 0, 2, 0, 2)]
                              + [(t, a0 + 2, a1 + 2, b0 + 2, b1 + 2) for t, a0, a1, b0, b1 in mid]
                              + [("equal", 5, 7, 5, 7)])


def test_word_diff_and_histograms():
    left, right, n = word_diff("a b c d e", "a b X d e f")
    assert left == "a b <del>c</del> d e" and right == "a b <ins>X</ins> d e <ins>f</ins>"
    assert n == 2
    long_a = " ".join(f"w{i}" for i in range(200))
    long_b = long_a.replace("w100", "CHANGED")
    left, right, n = word_diff(long_a, long_b)
    assert n == 1 and "same words" in left and "<ins>CHANGED</ins>" in right and len(right) < 600
    labels, counts = size_histogram(np.array([1, 1, 1, 2, 3, 5, 9, 17]))
    assert labels == ["1", "2", "3", "4", "5-8", "9-16", "17-32"]
    assert counts == [3, 1, 1, 0, 1, 1, 1]
    # the largest clusters, largest first, each with its removed members
    # (the first ones shown beside the document they name)
    result = SimpleNamespace(cluster=np.array([0, 0, 2, 0, 4, 4, 6]),
                             kept=np.array([True, False, True, False, True, False, True]),
                             duplicate_of=np.array([-1, 0, -1, 0, -1, 4, -1]),
                             similarity=np.array([np.nan, 0.9, np.nan, 1.0, np.nan, 0.7, np.nan]),
                             pair_similarity=np.array([0.9, 1.0, 0.7]),
                             pair_exact=np.array([False, True, False]))
    data = data_of_result(result, 0.8)
    assert data.groups == [(0, 3, 2, [(1, 0, 0.9), (3, 0, 1.0)]), (4, 2, 1, [(5, 4, 0.7)])]
    assert data.sizes == (["1", "2", "3"], [2, 1, 1])
    assert (data.fuzzy_edges, data.exact_edges, data.removed, data.below) == (2, 1, 3, 1)
    assert data.pair_hist[0][0] == "0.70" and sum(data.pair_hist[1]) == 2


# ---------------------------------------------------------------------------
# in a real browser
# ---------------------------------------------------------------------------

def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        p = shutil.which(name)
        if p:
            return p
    return None


def _png_pixels(data: bytes):
    """Decode an 8-bit RGB/RGBA PNG with the standard library: (w, h, rows)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, w = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and ctype in (2, 6), (depth, ctype)
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows, prev = [], bytearray(stride)
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                pa_, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                line[i] = (line[i] + (a if pa_ <= pb and pa_ <= pc else b if pb <= pc else c)) \
                    & 255
        rows.append(bytes(line))
        prev = line
    return w, h, bpp, rows


@pytest.mark.skipif(_chromium() is None,
                    reason="no chromium here (.ci/run installs Debian's chromium)")
def test_page_loads_in_headless_chromium_and_is_not_blank(page, tmp_path):
    out, _, report, _ = page
    url = "file://" + os.path.abspath(out / "report.html")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--enable-logging=stderr", "--v=0"]
    profile = tempfile.mkdtemp(dir=tmp_path)
    shot = tmp_path / "shot.png"
    r = subprocess.run([_chromium(), *flags, f"--user-data-dir={profile}",
                        f"--screenshot={shot}", "--window-size=1200,1600", url],
                       capture_output=True, text=True, timeout=120)
    assert shot.exists(), r.stderr[-2000:]
    console = [ln for ln in r.stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln]
    assert not console, console
    w, h, bpp, rows = _png_pixels(shot.read_bytes())
    assert (w, h) == (1200, 1600)
    colours = set()
    for row in rows[::4]:
        for x in range(0, len(row), bpp * 3):
            colours.add(row[x:x + 3])
    assert len(colours) > 30, len(colours)           # text, charts, cards: not blank
    # the browser parsed the whole page: the DOM it built holds the last section
    profile2 = tempfile.mkdtemp(dir=tmp_path)
    r = subprocess.run([_chromium(), *flags, f"--user-data-dir={profile2}", "--dump-dom", url],
                       capture_output=True, text=True, timeout=120)
    dom = r.stdout
    assert "<h2>Inputs</h2>" in dom and dom.count("<svg") == 5
    assert f'id="count-kept"><div class="n">{report["documents"]["kept"]:,}<' in dom
    assert "<script>alert" not in dom


def test_every_page_has_one_scaffolding(tmp_path):
    """report.html of a run and of substr are built by gpu_dedup.html_page:
    the same head (doctype, language, viewport, escaped title, inline
    style), texts escaped and cleaned the same way, written the same way."""
    from gpu_dedup.html_page import table_css, esc, page, write_page
    from gpu_dedup.substr import _html as substr_html

    doc = page('a <b> & "c"', "<p>body</p>", "p{color:red}")
    assert doc == ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
                   '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
                   '<title>a &lt;b&gt; &amp; &quot;c&quot;</title>\n'
                   '<style>p{color:red}</style></head>\n<body><p>body</p></body></html>\n')
    assert esc("s3://user:secret@bucket/x <i>") == "s3://***@bucket/x &lt;i&gt;"
    import html
    for t in ("&amp; <a href='x'>\"q\"</a> &&lt;", "plain", "", "é & 日本 <>"):
        assert esc(t) == html.escape(t, quote=True)
    assert "max-width:50em" in table_css(50) and "max-width:40em" in table_css(40)
    out = tmp_path / "p.html"
    write_page(str(out), page("t", "\udcff", ""))          # a lone surrogate: escaped
    assert "\\udcff" in out.read_text(encoding="utf-8")

    report = {"documents": {"in": 3, "with_spans": 1, "dropped": 0},
              "units": {"removed": 4, "total": 30, "unit": "word", "removed_share": 4 / 30},
              "bytes": {"removed_share": 0.1},
              "spans": {"count": 1, "length_code_points": {"edges": [1], "counts": [1]}},
              "repeated": [{"occurrences": 2, "text": EVIL}]}
    substr_html(str(tmp_path / "s.html"), report)
    got = (tmp_path / "s.html").read_text(encoding="utf-8")
    assert got.startswith(page("gpu-dedup substr", "", table_css(50)).split("<body>")[0])
    assert "<script>" not in got and esc(EVIL) in got
