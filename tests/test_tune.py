"""`gpu-dedup tune`: the cookbook's bands/rows table for a budget, the
recommended split (the engine's own choice), and the S-curves as a PNG."""
from __future__ import annotations

import json

import numpy as np
import pytest

import forkcli
from gpu_dedup.config import Config
from gpu_dedup.params import choose_bands_rows
from gpu_dedup.tune import format_table, table_splits, tune_table


def _run(*args):
    return forkcli.run([str(a) for a in args], text=True)


def test_table_reproduces_the_cookbook_rows():
    t = tune_table(0.8, 128, similarities=(0.5, 0.8))
    text = format_table(t)
    # the cookbook's table for 128 hashes: bands, rows, threshold~, P at 0.5, P at 0.8
    for b, r, thr, p5, p8 in [(64, 2, "0.12", "1.000", "1.000"), (32, 4, "0.42", "0.873", "1.000"),
                              (16, 8, "0.71", "0.061", "0.947"), (8, 16, "0.88", "0.000", "0.204")]:
        row = [ln for ln in text.splitlines() if ln[2:].split()[:2] == [str(b), str(r)]]
        assert len(row) == 1, (b, r)
        cells = row[0][2:].split()
        assert cells[3] == thr and cells[4] == p5 and cells[5] == p8, row[0]


@pytest.mark.parametrize("threshold,k", [(0.8, 128), (0.5, 127), (0.9, 256), (0.4, 64)])
def test_recommended_split_is_the_engines(threshold, k):
    t = tune_table(threshold, k)
    want = choose_bands_rows(threshold, k)
    assert (t.recommended.bands, t.recommended.rows) == (want.bands, want.rows)
    assert (want.bands, want.rows) in table_splits(k, want)
    engine = Config(threshold=threshold, num_perm=k).resolved()
    assert (engine.bands, engine.rows) == (want.bands, want.rows)
    assert all(c.bands * c.rows <= k for c in t.rows)
    starred = [ln for ln in format_table(t).splitlines() if ln.startswith("*")]
    assert len(starred) == 1 and starred[0][2:].split()[:2] == [str(want.bands), str(want.rows)]
    # FP and FN areas move in opposite directions as rows grow at a fixed budget
    exact = sorted((c for c in t.rows if c.bands * c.rows == k), key=lambda c: c.rows)
    assert all(a.fp_area >= b.fp_area for a, b in zip(exact, exact[1:]))
    assert all(a.fn_area <= b.fn_area for a, b in zip(exact, exact[1:]))


def test_cli_prints_table_and_writes_png(tmp_path):
    image = pytest.importorskip("matplotlib.image", reason="tune --plot needs matplotlib")
    png = tmp_path / "curves.png"
    r = _run("tune", "--threshold", "0.7", "--num-perm", "128", "--plot", png)
    assert r.returncode == 0, r.stderr
    rec = choose_bands_rows(0.7, 128)
    assert f"recommended (*): {rec.bands} bands x {rec.rows} rows" in r.stdout
    assert "P(candidate)" in r.stdout and "FP area" in r.stdout and "FN area" in r.stdout
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    img = image.imread(str(png))
    assert img.shape[0] > 200 and img.shape[1] > 300
    colours = np.unique((img[..., :3] * 255).astype(np.uint8).reshape(-1, 3), axis=0)
    assert len(colours) > 20                       # curves, text and the threshold line
    # the threshold line is drawn in its own red
    red = (img[..., 0] > 0.65) & (img[..., 1] < 0.35) & (img[..., 2] < 0.3)
    cols = np.flatnonzero(red.sum(axis=0) > img.shape[0] * 0.3)
    assert cols.size > 0


def test_cli_json_and_bad_arguments():
    r = _run("tune", "-t", "0.85", "-k", "96", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    want = choose_bands_rows(0.85, 96)
    assert (d["recommended"]["bands"], d["recommended"]["rows"]) == (want.bands, want.rows)
    assert {"0.85", "0.5"} <= set(d["rows"][0]["p_candidate"])
    r = _run("tune", "--threshold", "1.5")
    assert r.returncode == 2 and "--threshold must be in (0, 1]" in r.stderr
    assert "Traceback" not in r.stderr
