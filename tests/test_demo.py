"""`gpu-dedup demo`: runs the main job on the planted corpus, scores it
against the plant, and leaves the corpus, the output and the report in a
folder it names."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pyarrow.parquet as pq

CLI = [sys.executable, "-m", "gpu_dedup.cli"]


def _run(*args):
    return subprocess.run(CLI + [str(a) for a in args], capture_output=True, text=True)


def test_demo_leaves_output_and_report_in_the_folder_it_names(tmp_path):
    folder = tmp_path / "demo"
    r = _run("demo", "--docs", "600", "--output", folder)
    assert r.returncode == 0, r.stderr
    m = re.search(r"found ([\d,]+) of ([\d,]+) planted pairs: recall ([\d.]+), precision ([\d.]+)",
                  r.stdout)
    assert m, r.stdout
    found, planted = int(m.group(1).replace(",", "")), int(m.group(2).replace(",", ""))
    assert planted > 100 and float(m.group(3)) >= 0.9 and float(m.group(4)) >= 0.99
    assert found == round(float(m.group(3)) * planted)
    out = folder / "result"
    assert f"report: {out / 'report.html'}" in r.stdout and f"output: {out}" in r.stdout
    for name in ("clusters.parquet", "pairs.parquet", "report.json", "report.html"):
        assert (out / name).is_file(), name
    assert (folder / "corpus.jsonl").is_file() and (out / "data" / "corpus.jsonl").is_file()
    report = json.loads((out / "report.json").read_text())
    assert report["parameters"]["bands"] == 32 and report["parameters"]["rows"] == 4
    kept = pq.read_table(out / "clusters.parquet")["kept"].to_pylist()
    assert len((out / "data" / "corpus.jsonl").read_text().splitlines()) == sum(kept)
    assert "<svg" in (out / "report.html").read_text()
    # again into its own folder: fine; into someone else's non-empty folder: refused
    assert _run("demo", "--docs", "100", "--output", folder).returncode == 0
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    r = _run("demo", "--docs", "100", "--output", other)
    assert r.returncode == 2 and "not empty" in r.stderr
    assert os.listdir(other) == ["notes.txt"]


def test_demo_default_folder_is_named(tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path))
    r = subprocess.run(CLI + ["demo", "--docs", "200"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    m = re.search(r"^report: (.+report\.html)$", r.stdout, re.M)
    assert m and os.path.isfile(m.group(1))
    assert os.path.realpath(m.group(1)).startswith(os.path.realpath(str(tmp_path)))
