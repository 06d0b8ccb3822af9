"""`--device cpu|gpu|auto`: where a run goes, what it says, and what it imports."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pyarrow.parquet as pq
import pytest

from gpu_dedup.backend_gpu import probe
from gpu_dedup.doctor import planted_texts

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLI = [sys.executable, "-m", "gpu_dedup.cli"]
GPU_PACKAGES = ("cupy", "cudf", "cugraph", "rmm", "dask_cuda")
GPU_USABLE, GPU_WHY = probe()
no_gpu_here = pytest.mark.skipif(GPU_USABLE, reason="a GPU is usable on this machine")


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def _run(*args, env=None):
    return subprocess.run(CLI + [str(a) for a in args], capture_output=True, text=True,
                          env=env or _env(), cwd=ROOT, timeout=600)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("corpus")
    path = d / "docs.jsonl"
    with open(path, "w") as f:
        for i, t in enumerate(planted_texts(150, seed=4)):
            f.write(json.dumps({"id": f"d{i}", "text": t}) + "\n")
    return path


@no_gpu_here
def test_device_gpu_without_gpu_exits_2_with_one_line_and_writes_nothing(corpus, tmp_path):
    out = tmp_path / "out"
    r = _run("run", corpus, "--output", out, "--device", "gpu")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: --device gpu: no usable GPU:")
    assert any(w in lines[0] for w in ("CuPy", "driver", "device", "numba", "kernel"))
    assert r.stdout == ""
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir()], "a failed run must leave nothing behind"


@no_gpu_here
def test_device_auto_runs_on_cpu_says_so_and_matches_cpu(corpus, tmp_path):
    auto = _run("run", corpus, "--output", tmp_path / "auto", "--device", "auto",
                "--threshold", "0.6")
    cpu = _run("run", corpus, "--output", tmp_path / "cpu", "--device", "cpu",
               "--threshold", "0.6")
    assert auto.returncode == 0, auto.stderr
    assert cpu.returncode == 0, cpu.stderr
    said = [line for line in auto.stderr.splitlines() if "chose cpu" in line]
    assert len(said) == 1, auto.stderr
    assert said[0].removeprefix("device: ").startswith("auto chose cpu ("), said[0]
    assert "chose" not in cpu.stderr
    a = pq.read_table(tmp_path / "auto" / "clusters.parquet")
    c = pq.read_table(tmp_path / "cpu" / "clusters.parquet")
    assert a.equals(c)
    assert a.num_rows == 153 and not all(a["kept"].to_pylist())
    report = json.loads((tmp_path / "auto" / "report.json").read_text())
    assert report["device"].startswith("auto chose cpu")


def _stub_packages(folder):
    """Importable stand-ins for the GPU packages: if anything imports one, it
    shows in ``sys.modules`` even where the real package is not installed."""
    for name in GPU_PACKAGES:
        pkg = folder / name
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text("STUB = True\n")
    return folder


def test_cpu_run_and_import_pull_in_no_gpu_package(corpus, tmp_path):
    stubs = _stub_packages(tmp_path / "stubs")
    out = tmp_path / "out"
    code = textwrap.dedent(f"""
        import json, sys
        import gpu_dedup
        after_import = sorted(m for m in sys.modules if m.split('.')[0] in {GPU_PACKAGES!r})
        from gpu_dedup.cli import main
        try:
            main(["run", {str(corpus)!r}, "--output", {str(out)!r}, "--device", "cpu", "-q"],
                 standalone_mode=False)
        except SystemExit as e:
            assert not e.code, e.code
        roots = {GPU_PACKAGES!r} + ("numba.cuda", "gpu_dedup.kernels.cuda")
        after_run = sorted(m for m in sys.modules
                           if m.split('.')[0] in roots or m in roots)
        print(json.dumps([after_import, after_run]))
    """)
    env = _env()
    env["PYTHONPATH"] = str(stubs) + os.pathsep + env["PYTHONPATH"]
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    after_import, after_run = json.loads(r.stdout.strip().splitlines()[-1])
    assert after_import == []
    assert after_run == []
    assert (out / "clusters.parquet").exists()
    # the stubs do import when asked for, so the check above can fail
    r = subprocess.run([sys.executable, "-c", "import cupy; print(cupy.STUB)"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.stdout.strip() == "True"


@no_gpu_here
def test_get_backend_auto_and_gpu_choices():
    from gpu_dedup.backend import CpuBackend, get_backend
    from gpu_dedup.errors import DeviceError
    be, line = get_backend("auto")
    assert isinstance(be, CpuBackend) and line.startswith("device: auto chose cpu (")
    with pytest.raises(DeviceError) as exc:
        get_backend("gpu", gpu_memory="8GiB")
    assert "no usable GPU" in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.gpu
@pytest.mark.skipif(not GPU_USABLE, reason=f"no usable GPU: {GPU_WHY}")
def test_device_gpu_runs_on_the_gpu_and_matches_cpu(corpus, tmp_path):
    g = _run("run", corpus, "--output", tmp_path / "gpu", "--device", "gpu",
             "--gpu-memory", "2GiB", "--threshold", "0.6")
    c = _run("run", corpus, "--output", tmp_path / "cpu", "--device", "cpu", "--threshold", "0.6")
    assert g.returncode == 0, g.stderr
    assert c.returncode == 0, c.stderr
    report = json.loads((tmp_path / "gpu" / "report.json").read_text())
    assert report["device"].startswith("gpu")
    for name in ("clusters.parquet", "pairs.parquet"):
        assert pq.read_table(tmp_path / "gpu" / name).equals(pq.read_table(tmp_path / "cpu" / name))
