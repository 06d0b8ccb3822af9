"""Where the code expects something to fail it names what: the failures it
expects are handled (a corrupt input measured by its size, a GPU that does
not start reported by doctor, a process gone), and anything else, a bug,
goes up with its traceback."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from gpu_dedup import memory
from gpu_dedup.errors import InputError
from gpu_dedup.io import plan


class Bug(TypeError):
    pass


def _raise(exc):
    def f(*_a, **_k):
        raise exc
    return f


def _parquet(tmp_path):
    p = tmp_path / "a.parquet"
    pq.write_table(pa.table({"text": [f"t {i}" for i in range(40)]}), p, row_group_size=10)
    return str(p)


def test_plan_reads_leaves_an_unreadable_parquet_file_to_its_reader(tmp_path, monkeypatch):
    p = _parquet(tmp_path)
    monkeypatch.setattr(plan, "open_parquet", _raise(InputError(f"{p}: not readable")))
    (u,) = plan.plan_reads([p], 64)
    assert u["kind"] == "whole"                    # read whole: the reader says what is wrong
    monkeypatch.setattr(plan, "open_parquet", _raise(Bug("a bug")))
    with pytest.raises(Bug):
        plan.plan_reads([p], 64)


def test_input_bytes_measures_corrupt_data_by_its_size_and_lets_bugs_through(tmp_path,
                                                                              monkeypatch):
    bad = tmp_path / "c.jsonl.zst"                 # zstd magic, then a header zstd refuses
    bad.write_bytes(zstandard.FRAME_HEADER + b"\xff" * 40)
    assert plan.input_bytes(str(bad)) == bad.stat().st_size
    good = tmp_path / "d.jsonl.zst"
    good.write_bytes(zstandard.ZstdCompressor().compress(b'{"text": "x"}\n' * 50))
    assert plan.input_bytes(str(good)) == 14 * 50
    monkeypatch.setattr(plan, "_zstd_bytes", _raise(Bug("a bug")))
    with pytest.raises(Bug):
        plan.input_bytes(str(good))
    p = _parquet(tmp_path)
    monkeypatch.setattr(plan, "open_parquet", _raise(InputError(f"{p}: not readable")))
    assert plan.input_bytes(p) == (tmp_path / "a.parquet").stat().st_size
    monkeypatch.setattr(plan, "open_parquet", _raise(Bug("a bug")))
    with pytest.raises(Bug):
        plan.input_bytes(p)


@pytest.fixture
def doctor_with_a_gpu(monkeypatch):
    """doctor.main on a machine that says it has a GPU, the CPU checks
    passed, and the GPU backend replaced by ``start``."""
    from gpu_dedup import backend_gpu, doctor
    monkeypatch.setattr(doctor, "environment_lines", lambda simulated: ([], True, "a GPU"))
    monkeypatch.setattr(doctor, "check_cpu", lambda cpu, cmp: cmp.add("cpu", True))
    monkeypatch.setattr(backend_gpu, "simulator_enabled", lambda: False)

    def run(start):
        monkeypatch.setattr(backend_gpu, "GpuBackend", start)
        out = []
        return doctor.main(out.append), out
    return run


@pytest.mark.parametrize("exc", [RuntimeError("cudaErrorNoDevice"), ImportError("no cupy"),
                                 OSError("libcuda.so")])
def test_doctor_reports_a_gpu_that_does_not_start(doctor_with_a_gpu, exc):
    rc, out = doctor_with_a_gpu(_raise(exc))
    assert rc == 2 and "the GPU backend does not start" in out[-1] and str(exc) in out[-1]


def test_doctor_lets_a_bug_in_the_gpu_backend_through(doctor_with_a_gpu):
    with pytest.raises(Bug):
        doctor_with_a_gpu(_raise(Bug("a bug")))


def test_process_rss_without_proc_uses_psutil_and_lets_bugs_through(monkeypatch):
    import psutil
    real_exists = memory.os.path.exists
    monkeypatch.setattr(memory.os.path, "exists",
                        lambda p: False if str(p).endswith("/statm") else real_exists(p))
    assert memory.process_rss() > 0
    monkeypatch.setattr(psutil, "Process", _raise(psutil.NoSuchProcess(1)))
    assert memory.process_rss() > 0                 # gone: this process's peak instead
    monkeypatch.setattr(psutil, "Process", _raise(Bug("a bug")))
    with pytest.raises(Bug):
        memory.process_rss()


def test_release_memory_lets_bugs_through(monkeypatch):
    class Pool:
        def release_unused(self):
            raise Bug("a bug")
    monkeypatch.setattr(pa, "default_memory_pool", lambda: Pool())
    with pytest.raises(Bug):
        memory.release_memory()
    monkeypatch.undo()
    memory.release_memory()
    assert np.asarray([1]).sum() == 1
