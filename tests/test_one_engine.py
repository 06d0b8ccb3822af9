"""One engine, one behaviour: the same runner in memory, out of core, on Dask
threads, on a local Dask cluster and on the GPU backend (under Numba's CUDA
simulator) gives byte-identical clusters.parquet, pairs.parquet and data/,
and report.json with the same keys and stage names.

The corpus is real text: paragraphs of Debian's licence files (the committed
corpus of ``tests/realtext.py``), spread over JSONL (with a blank line and a
record of invalid UTF-8), gzip and zstd JSONL and a Parquet file of many row
groups (``test_staged.write_inputs``).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from gpu_dedup import Config
from gpu_dedup.pipeline import run
from realtext import paragraphs as real_paragraphs
from test_staged import output_bytes, write_inputs

CFG = Config(shingle="char", ngram=5, normalize=("lower", "ws"), num_perm=64, threshold=0.8)
N_DOCS = 4000


def paragraphs(limit: int, max_chars: int | None = None) -> list[str]:
    return [p for p in real_paragraphs() if max_chars is None or len(p) <= max_chars][:limit]


def key_paths(obj, prefix="") -> set[str]:
    """Every key of a nested report, except under the parts that name stages
    or units measured (their names are compared separately)."""
    out = set()
    if isinstance(obj, dict):
        for k, v in obj.items():
            p = f"{prefix}.{k}"
            out.add(p)
            if k not in ("peak_rss_bytes", "units", "reused", "scheduler", "plan"):
                out |= key_paths(v, p)
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("one-engine")
    paths = write_inputs(str(folder / "in"), paragraphs(N_DOCS))
    ref = str(folder / "memory")
    report = run(paths, ref, CFG)
    return folder, paths, ref, report


def assert_same_run(ref, ref_report, out, report):
    a, b = output_bytes(ref), output_bytes(out)
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name] == b[name], name
    assert key_paths(report) == key_paths(ref_report)
    assert list(report["seconds"]) == list(ref_report["seconds"])
    assert list(report["memory"]["peak_rss_bytes"]) == list(ref_report["memory"]
                                                            ["peak_rss_bytes"])
    for k in ("documents", "clusters", "edges", "bad_records", "parameters", "inputs",
              "outputs"):
        assert report[k] == ref_report[k], k


@pytest.mark.slow
def test_in_memory_reference_is_a_real_deduplication(corpus):
    _folder, _paths, ref, report = corpus
    assert report["work"]["store"] == "memory"
    assert report["documents"]["in"] == N_DOCS + 1     # write_inputs adds a record
    assert report["documents"]["exact_removed"] > 0
    assert report["documents"]["fuzzy_removed"] > 0
    assert list(report["seconds"]) == ["read", "exact", "signatures", "buckets", "select",
                                       "assign", "write", "report", "total"]


@pytest.mark.slow
def test_out_of_core_under_a_small_budget(corpus, tmp_path):
    _folder, paths, ref, ref_report = corpus
    out = str(tmp_path / "out")
    report = run(paths, out, CFG, memory_limit="256MiB", partition_bytes="96KiB",
                 work_dir=str(tmp_path / "work"))
    assert report["work"]["store"] == "disk"
    units = report["work"]["units"]
    assert report["work"]["chunks"] > len(paths)          # files cut into pieces
    assert units["exact"] > 1 and units["signatures"] > 1 and units["buckets"] > 1
    assert_same_run(ref, ref_report, out, report)
    assert not os.path.exists(report["work"]["dir"])        # removed after success


def test_plan_goes_to_disk_when_the_inputs_may_not_fit():
    from gpu_dedup.engine.plan import MEMORY_PER_INPUT_BYTE, make_plan
    budget = 256 << 20
    fits = make_plan(budget, 1, budget // (4 * MEMORY_PER_INPUT_BYTE))
    big = make_plan(budget, 1, budget // MEMORY_PER_INPUT_BYTE)
    assert fits.store == "memory" and big.store == "disk"
    assert "more than the budget" in big.reason
    assert make_plan(budget, 1, 0, shared_memory=False).store == "disk"


@pytest.mark.slow
def test_dask_threads(corpus, tmp_path):
    _folder, paths, ref, ref_report = corpus
    out = str(tmp_path / "out")
    seen = []
    report = run(paths, out, CFG, scheduler="threads", workers=2, partition_bytes="128KiB",
                 on_progress=seen.append)
    assert report["scheduler"]["scheduler"] == "threads"
    assert report["work"]["store"] == "memory"
    assert_same_run(ref, ref_report, out, report)
    # progress as tasks complete, reaching each stage's end
    assert seen and all(0 < f <= 1 for f in seen) and seen.count(1.0) >= 5


@pytest.mark.slow
def test_dask_local_cluster_of_two_processes(corpus, tmp_path):
    pytest.importorskip("distributed")
    _folder, paths, ref, ref_report = corpus
    out = str(tmp_path / "out")
    report = run(paths, out, CFG, scheduler="processes", workers=2, partition_bytes="128KiB")
    assert report["scheduler"]["workers"] == 2
    assert report["work"]["store"] == "disk"               # workers share the work directory
    assert_same_run(ref, ref_report, out, report)


SIM_RUN = textwrap.dedent(r"""
    import json, sys
    import numpy as np
    from gpu_dedup import Config
    from gpu_dedup.backend_gpu import GpuBackend
    from gpu_dedup.kernels import cuda as kc
    from gpu_dedup.pipeline import run
    a = json.loads(sys.argv[1])
    be = GpuBackend(xp=np)
    report = run(a["inputs"], a["output"], Config(**a["cfg"]), backend=be,
                 partition_bytes=a["partition"], work_dir=a.get("work"), html=False)
    print(json.dumps({"simulator": bool(kc.SIMULATOR), "backend": report["device"],
                      "documents": report["documents"]["in"]}))
""")


@pytest.mark.slow
def test_gpu_backend_under_the_simulator(tmp_path):
    """The simulator runs each CUDA thread in Python: a small corpus, out of
    core in many partitions (the memory store runs the same tasks)."""
    pytest.importorskip("numba.cuda")
    texts = paragraphs(120, max_chars=160)
    paths = write_inputs(str(tmp_path / "in"), texts)
    cfg = Config(shingle="char", ngram=5, normalize=("lower", "ws"), num_perm=32, bands=8,
                 rows=4, threshold=0.7)
    ref = str(tmp_path / "cpu")
    ref_report = run(paths, ref, cfg, html=False, partition_bytes="16KiB")
    assert ref_report["edges"]["verified"] > 0 and ref_report["documents"]["exact_removed"] > 0
    out = str(tmp_path / "gpu")
    args = {"inputs": paths, "output": out, "cfg": _cfg_dict(cfg), "partition": "16KiB",
            "work": str(tmp_path / "work")}
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    proc = subprocess.run([sys.executable, "-c", SIM_RUN, json.dumps(args)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    assert info["simulator"] is True and info["backend"].startswith("cuda-sim")
    with open(os.path.join(out, "report.json")) as f:
        report = json.load(f)
    assert report["work"]["store"] == "disk"
    assert report["work"]["units"]["signatures"] > 1
    assert_same_run(ref, ref_report, out, report)
    # the device normalized the ASCII documents and counted the others
    assert ref_report["work"]["normalized_on_host"] is None
    assert 0 <= report["work"]["normalized_on_host"] < report["documents"]["in"]


def _cfg_dict(cfg: Config) -> dict:
    d = cfg.to_dict()
    for k in ("fp_weight", "fn_weight"):
        d.pop(k, None)
    return d
