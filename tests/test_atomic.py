"""gpu_dedup.atomic: a file is written under a temporary name and renamed
into place, or not at all; the temporary-name rule is the one the work
directory's cleanup knows."""
from __future__ import annotations

import os
import threading

import pytest

from gpu_dedup import atomic


def _leftovers(folder) -> list[str]:
    return [n for n in os.listdir(folder) if atomic.is_tmp(n)]


def test_the_temporary_name_is_the_work_directory_rule(tmp_path):
    from gpu_dedup.engine import store
    p = str(tmp_path / "x.npy")
    t = atomic.tmp_path(p)
    assert os.path.dirname(t) == str(tmp_path) and t.startswith(p)
    assert atomic.TMP_MARK in os.path.basename(t) and atomic.is_tmp(os.path.basename(t))
    assert not atomic.is_tmp("x.npy") and not atomic.is_tmp("notes.tmp")
    # the work directory writes and cleans by this same rule
    assert store.write_atomic is atomic.write_atomic and store.is_tmp is atomic.is_tmp
    other = []
    th = threading.Thread(target=lambda: other.append(atomic.tmp_path(p)))
    th.start()
    th.join()
    assert other[0] != t                      # two threads never share one


def test_write_renames_into_place_and_returns_what_write_returns(tmp_path):
    p = tmp_path / "a.json"
    p.write_text("old")

    def write(tmp):
        assert tmp != str(p) and p.read_text() == "old"      # the old file stays until done
        with open(tmp, "w") as f:
            f.write("new")
        return 42
    assert atomic.write_atomic(str(p), write) == 42
    assert p.read_text() == "new" and not _leftovers(tmp_path)
    atomic.write_bytes(str(tmp_path / "b"), b"\x00\x01")
    atomic.write_text(str(tmp_path / "c"), "é\n")
    assert (tmp_path / "b").read_bytes() == b"\x00\x01"
    assert (tmp_path / "c").read_bytes() == "é\n".encode()
    assert not _leftovers(tmp_path)


@pytest.mark.parametrize("exc", [OSError(28, "No space left on device"), KeyboardInterrupt()])
def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, exc):
    p = tmp_path / "a.json"
    p.write_text("old")

    def write(tmp):
        with open(tmp, "w") as f:
            f.write("half")
        raise exc
    with pytest.raises(type(exc)):
        atomic.write_atomic(str(p), write)
    assert p.read_text() == "old" and not _leftovers(tmp_path)


def test_without_overwrite_an_existing_file_is_never_replaced(tmp_path):
    p = tmp_path / "plot.png"
    atomic.write_bytes(str(p), b"first", overwrite=False)
    assert p.read_bytes() == b"first"
    with pytest.raises(FileExistsError):
        atomic.write_bytes(str(p), b"second", overwrite=False)
    assert p.read_bytes() == b"first" and not _leftovers(tmp_path)


def test_durable_writes_sync_the_file_and_its_folder(tmp_path, monkeypatch):
    synced = []
    real = os.fsync

    def fsync(fd):
        synced.append(os.path.realpath(f"/proc/self/fd/{fd}"))
        real(fd)
    monkeypatch.setattr(os, "fsync", fsync)
    p = tmp_path / "index.json"
    atomic.write_text(str(p), "{}\n", durable=True)
    assert any(atomic.is_tmp(os.path.basename(s)) for s in synced)     # the data, before
    assert synced[-1] == os.path.realpath(tmp_path)                    # the rename, after
    synced.clear()
    atomic.write_text(str(p), "{}\n")
    assert synced == []
