"""``run`` tried as a new user would: a full disk anywhere, the limits, and
inputs of every kind end to end (the module-level cases live in
test_output_dir.py, test_io_inputs.py and test_cli_options.py)."""
from __future__ import annotations

import dataclasses

import errno
import gzip
import json
import logging
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpu_dedup import Config
from gpu_dedup.errors import ConfigError, DedupError, InputError
from gpu_dedup.pipeline import run

CFG = Config(shingle="word", ngram=2, num_perm=32, bands=8, rows=4, threshold=0.5)
TEXTS = [f"document {i % 40} about topic {i % 7} with words {i % 5} here" for i in range(200)]


def _jsonl(path, texts=TEXTS):
    with open(path, "w") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": f"d{i}", "text": t}) + "\n")
    return str(path)


def _tmp_files(folder) -> list[str]:
    return [n for _d, _s, names in os.walk(folder) for n in names if ".tmp-" in n]


def test_full_disk_in_the_work_directory(tmp_path, monkeypatch):
    src = _jsonl(tmp_path / "a.jsonl")
    from gpu_dedup.engine import store
    real = store._write_npy
    calls = [0]

    def save(f, arr):              # the seventh array the store writes meets a full disk
        calls[0] += 1
        if calls[0] > 6:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(f, arr)
    monkeypatch.setattr(store, "_write_npy", save)
    work = tmp_path / "work"
    with pytest.raises(DedupError) as e:
        run([src], str(tmp_path / "out"), CFG, work_dir=str(work), html=False)
    msg = str(e.value)
    assert "No space left on device" in msg and "\n" not in msg
    assert not (tmp_path / "out").exists()
    assert _tmp_files(work) == []                   # nothing half-written left behind
    assert calls[0] > 6
    monkeypatch.setattr(store, "_write_npy", real)
    # the completed units are reused and the result is whole
    report = run([src], str(tmp_path / "out"), CFG, work_dir=str(work), html=False)
    assert report["work"]["reused"].get("read")
    assert report["documents"]["in"] == len(TEXTS)


def test_full_disk_while_writing_the_outputs(tmp_path, monkeypatch):
    src = _jsonl(tmp_path / "a.jsonl")
    from gpu_dedup.engine import runner

    def full(*a, **kw):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(runner.Runner, "_write_data", full)
    out = tmp_path / "out"
    with pytest.raises(DedupError) as e:
        run([src], str(out), CFG, html=False)
    assert "No space left on device" in str(e.value) and "\n" not in str(e.value)
    assert not out.exists()
    assert sorted(os.listdir(tmp_path)) == ["a.jsonl"]
    # an existing, empty output directory is left as it was
    out.mkdir()
    with pytest.raises(DedupError):
        run([src], str(out), CFG, html=False)
    assert os.listdir(out) == []


def test_full_disk_exits_2_with_one_line_on_the_command_line(tmp_path):
    src = _jsonl(tmp_path / "a.jsonl")
    code = ("import errno, sys\n"
            "from gpu_dedup.engine import runner\n"
            "def full(*a, **k): raise OSError(errno.ENOSPC, 'No space left on device')\n"
            "runner.Runner._write_data = full\n"
            "from gpu_dedup.cli import main\n"
            "sys.exit(main())\n")
    p = subprocess.run([sys.executable, "-c", code, "run", src, "-o", str(tmp_path / "o"),
                        "--quiet"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0 and "No space left on device" in p.stderr


def test_peak_above_the_budget_warns_with_the_figure(tmp_path, monkeypatch, caplog):
    import gpu_dedup.pipeline as pl
    monkeypatch.setattr(pl, "PEAK_WARNING", 0.0)
    src = _jsonl(tmp_path / "a.jsonl")
    with caplog.at_level(logging.WARNING, logger="gpu_dedup"):
        report = run([src], str(tmp_path / "out"), CFG, html=False, memory_limit="512MiB")
    w = report["memory"]["warning"]
    assert "peak resident memory" in w and "512.00 MiB" in w
    assert any("peak resident memory" in r.message for r in caplog.records)


def test_components_refuse_more_documents_than_their_pairs_hold(tmp_path, monkeypatch):
    """Connected components pack pairs of positions into 64 bits and are
    refused above that many documents; greedy selection, which keeps its
    pairs as two 64-bit columns, takes the same run."""
    from gpu_dedup.engine import runner
    monkeypatch.setattr(runner, "MAX_DOCUMENTS", 100)
    src = _jsonl(tmp_path / "a.jsonl")
    with pytest.raises(InputError, match="components takes at most 100 .*--cluster greedy"):
        run([src], str(tmp_path / "out"), dataclasses.replace(CFG, cluster="components"))
    assert not (tmp_path / "out").exists()
    report = run([src], str(tmp_path / "greedy"), CFG, html=False)
    assert report["documents"]["in"] == len(TEXTS) > 100


def test_work_dir_inside_the_output_is_refused(tmp_path):
    src = _jsonl(tmp_path / "a.jsonl")
    with pytest.raises(ConfigError, match="--work-dir"):
        run([src], str(tmp_path / "out"), CFG, work_dir=str(tmp_path / "out" / "w"))
    with pytest.raises(ConfigError, match="--work-dir"):
        run([src], str(tmp_path / "out"), CFG, work_dir=str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def _clusters(out):
    t = pq.read_table(os.path.join(out, "clusters.parquet"))
    return t["id"].to_pylist(), t["cluster"].to_pylist(), t["kept"].to_pylist()


def test_text_directory_is_measured_by_its_files(tmp_path):
    d = tmp_path / "docs"
    d.mkdir()
    for i, t in enumerate(TEXTS):
        (d / f"{i:04d}.txt").write_text(t)
    report = run([str(d)], str(tmp_path / "out"), CFG, html=False)
    assert report["work"]["plan"]["input_bytes"] == sum(len(t.encode()) for t in TEXTS)
    assert report["documents"]["in"] == len(TEXTS)


@pytest.mark.parametrize("kind", ["string_view", "large_string", "dictionary"])
def test_parquet_string_columns_of_every_kind(tmp_path, kind):
    col = pa.array(TEXTS)
    if kind == "string_view":
        col = col.cast(pa.string_view())
    elif kind == "large_string":
        col = col.cast(pa.large_string())
    else:
        col = col.dictionary_encode()
    ids = [f"d{i}" for i in range(len(TEXTS))]
    pq.write_table(pa.table({"id": ids, "text": col}), tmp_path / "a.parquet")
    ref = run([_jsonl(tmp_path / "a.jsonl")], str(tmp_path / "ref"), CFG, html=False)
    got = run([str(tmp_path / "a.parquet")], str(tmp_path / "out"), CFG, html=False)
    assert _clusters(tmp_path / "out") == _clusters(tmp_path / "ref")
    assert got["documents"] == ref["documents"]
    kept = pq.read_table(tmp_path / "out" / "data" / "a.parquet")
    assert kept.num_rows == got["documents"]["kept"]


def test_compressed_data_under_a_plain_jsonl_name(tmp_path):
    plain = _jsonl(tmp_path / "a.jsonl")
    with open(plain, "rb") as f:
        raw = f.read()
    hidden = tmp_path / "in" / "a.jsonl"
    hidden.parent.mkdir()
    hidden.write_bytes(gzip.compress(raw, mtime=0))
    run([plain], str(tmp_path / "ref"), CFG, html=False)
    run([str(hidden)], str(tmp_path / "out"), CFG, html=False, id_field="id")
    assert _clusters(tmp_path / "out") == _clusters(tmp_path / "ref")
    with open(tmp_path / "out" / "data" / "a.jsonl", "rb") as f:
        kept = gzip.decompress(f.read())                # mirrored: compressed again
    with open(tmp_path / "ref" / "data" / "a.jsonl", "rb") as f:
        assert kept == f.read()


def test_standard_input(tmp_path):
    src = _jsonl(tmp_path / "a.jsonl")
    run([src], str(tmp_path / "ref"), CFG, html=False)
    with open(src, "rb") as f:
        p = subprocess.run([sys.executable, "-m", "gpu_dedup.cli", "run", "-", "-o",
                            str(tmp_path / "out"), "--quiet", "--shingle", "word", "--ngram",
                            "2", "--num-perm", "32", "--bands", "8", "--rows", "4",
                            "--threshold", "0.5", "--no-html"], stdin=f, capture_output=True,
                           text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert _clusters(tmp_path / "out") == _clusters(tmp_path / "ref")
    assert os.listdir(tmp_path / "out" / "data") == ["stdin.jsonl"]
