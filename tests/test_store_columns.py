"""Several columns written by the store in one pass over their pieces: each
piece made once, every file whole once the pass ends, and none written
where the pass fails."""
from __future__ import annotations

import os

import numpy as np
import pytest

from gpu_dedup.engine.store import DiskStore


@pytest.mark.parametrize("kind", ["disk", "memory"])
def test_columns_written_in_one_pass_read_back_whole_or_not_at_all(tmp_path, kind):
    from gpu_dedup.engine.store import MemoryStore
    st = DiskStore(str(tmp_path / "w")).open() if kind == "disk" else MemoryStore()
    try:
        reads = [0]

        def pieces():
            for lo in range(0, 10, 4):
                reads[0] += 1
                a = np.arange(lo, min(lo + 4, 10))
                yield a, a * 0.5, a % 2 == 0
        names = ["c/a.npy", "c/b.npy", "c/c.npy"]
        st.save_npy_columns(names, (np.int64, np.float64, bool), pieces(), 10)
        assert reads[0] == 3                          # each piece made once
        a, b, c = (st.load_npy(n) for n in names)
        assert a.tolist() == list(range(10)) and b.dtype == np.float64
        assert b.tolist() == [x * 0.5 for x in range(10)]
        assert c.tolist() == [x % 2 == 0 for x in range(10)]
        # fewer elements than announced: an error naming the file, and none
        # of the files written (the earlier ones stay as they were)
        more = ["d/a.npy", "d/b.npy"]
        with pytest.raises(ValueError, match="d/a.npy: 10 elements written, 11 announced"):
            st.save_npy_columns(more, (np.int64, np.float64),
                                ((x, y) for x, y, _ in pieces()), 11)
        assert not any(st.exists(n) for n in more)
        if kind == "disk":
            assert not os.listdir(os.path.join(st.root, "d"))    # no temporary file left
    finally:
        st.close()


def test_saved_arrays_are_hashed_as_written_not_read_back(tmp_path, monkeypatch):
    """A saved array is the file :func:`numpy.save` writes, and its size and
    digest are taken while it is written: they are those of the file on disk,
    and the file is never read back to take them."""
    import io

    from gpu_dedup import digest
    from gpu_dedup.engine import store as store_module
    st = DiskStore(str(tmp_path / "w")).open()
    sums = []
    real = digest.file_sum
    monkeypatch.setattr(store_module, "file_sum", lambda *a, **k: sums.append(a) or real(*a, **k))
    arrays = {"a.npy": np.arange(7, dtype=np.int64), "b.npy": np.zeros(0, np.uint64),
              "c.npy": np.arange(12.0).reshape(3, 4)[:, ::2], "d.npy": np.array([True, False])}
    for name, arr in arrays.items():
        st.save_npy(name, arr)
    st.save_npy_columns(["e.npy", "f.npy"], (np.int64, np.float64),
                        ((np.arange(i, i + 3), np.ones(3)) for i in (0, 3)), 6)
    assert not sums                                   # nothing read back to hash it
    for name, arr in arrays.items():
        ref = io.BytesIO()
        np.save(ref, np.ascontiguousarray(arr), allow_pickle=False)
        with open(st.path(name), "rb") as f:
            assert f.read() == ref.getvalue()
    for name in list(arrays) + ["e.npy", "f.npy"]:
        assert st._expect[name] == real(st.path(name))     # what was recorded is the file's
        assert np.array_equal(st.load_npy(name), np.load(st.path(name)))
    with pytest.raises(ValueError, match="Python objects"):
        st.save_npy("g.npy", np.array([None, 1], dtype=object))
    st.close()


@pytest.mark.parametrize("kind", ["disk", "memory"])
def test_forgetting_a_unit_deletes_the_files_it_listed(tmp_path, kind):
    """Both stores: a forgotten unit is no longer done, and the files its
    marker listed are gone; files it did not list stay."""
    from gpu_dedup.engine.store import MemoryStore
    st = DiskStore(str(tmp_path / "w")).open() if kind == "disk" else MemoryStore()
    st.save_npy("u/a.npy", np.arange(3))
    st.save_npy("u/b.npy", np.arange(4))
    st.save_npy("v.npy", np.arange(5))
    st.mark_done("u", {"n": 2}, ["u/a.npy", "u/b.npy"])
    assert st.done("u") == {"n": 2}
    st.forget("u")
    assert st.done("u") is None
    assert not st.exists("u/a.npy") and not st.exists("u/b.npy")
    assert st.load_npy("v.npy").tolist() == list(range(5))
    st.close()
