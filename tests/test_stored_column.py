"""Stored arrays read a slice at a time (``load_npy(rel, mmap="read")``,
:class:`gpu_dedup.engine.columns.StoredColumn`): the same values as the
array, a damaged file refused, and a run that reads its pairs, which the
first copies of large clusters have many of, only that way."""
from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

from gpu_dedup.engine import store as store_module
from gpu_dedup.engine.columns import StoredColumn
from gpu_dedup.engine.store import DamagedWorkFile, DiskStore

from test_staged import CFG, run_staged


@pytest.fixture()
def st(tmp_path):
    s = DiskStore(str(tmp_path / "w")).open()
    yield s
    s.close()


@pytest.mark.parametrize("dtype", [np.int64, np.float64, np.bool_, np.uint32])
def test_slices_elements_and_searches_are_the_arrays(st, dtype):
    rng = np.random.default_rng(3)
    arr = np.sort(rng.integers(0, 50, 1000)).astype(dtype)
    st.save_npy("a.npy", arr)
    col = st.load_npy("a.npy", mmap="read")
    assert isinstance(col, StoredColumn)
    assert col.shape == arr.shape and len(col) == arr.size and col.dtype == arr.dtype
    for _ in range(50):
        a, b = sorted(rng.integers(-1100, 1100, 2).tolist())
        view, want = col[a:b], arr[a:b]
        assert view.shape == want.shape
        np.testing.assert_array_equal(np.asarray(view), want)
        if want.size:
            c, d = sorted(rng.integers(0, want.size + 1, 2).tolist())
            np.testing.assert_array_equal(np.asarray(view[c:d]), want[c:d])   # a view of a view
            i = int(rng.integers(-want.size, want.size))
            assert view[i] == want[i]
        for side in ("left", "right"):
            q = rng.integers(-2, 52, 7).astype(dtype)
            np.testing.assert_array_equal(view.searchsorted(q, side=side),
                                          want.searchsorted(q, side=side))
    np.testing.assert_array_equal(np.asarray(col, dtype=np.float64), arr.astype(np.float64))
    with pytest.raises(IndexError):
        col[arr.size]
    with pytest.raises(IndexError):
        col[::2]


def test_a_short_file_is_a_damaged_work_file(st, tmp_path):
    st.save_npy("a.npy", np.arange(1000, dtype=np.int64))
    path = st.path("a.npy")
    with open(path, "r+b") as f:                       # cut after the store wrote it
        f.truncate(os.path.getsize(path) - 800)
    with pytest.raises(DamagedWorkFile, match="a.npy: damaged work file"):
        np.asarray(st.load_npy("a.npy", mmap="read"))
    # read by a process that does not know what was written: its reads fail
    col = StoredColumn.open(path, lambda why: DamagedWorkFile(f"{path}: {why}"))
    np.testing.assert_array_equal(np.asarray(col[:800]), np.arange(800))
    with pytest.raises(DamagedWorkFile, match="bytes where 8 were expected"):
        col.searchsorted([999])
    with pytest.raises(DamagedWorkFile, match="bytes where 1600 were expected"):
        np.asarray(col[800:])
    bad = tmp_path / "b.npy"
    np.save(bad, np.zeros((2, 3, 4)))
    with pytest.raises(ValueError, match="one or two dimensions"):
        StoredColumn.open(str(bad), ValueError)
    np.save(bad, np.asfortranarray(np.zeros((2, 3))))
    with pytest.raises(ValueError, match="one or two dimensions"):
        StoredColumn.open(str(bad), ValueError)


def test_an_array_of_two_dimensions_is_its_rows(st):
    arr = np.arange(21, dtype=np.int64).reshape(3, 7)
    st.save_npy("r.npy", arr)
    rows = st.load_npy("r.npy", mmap="read")
    assert len(rows) == 3
    for got, want in zip(rows, arr):
        np.testing.assert_array_equal(np.asarray(got), want)
        np.testing.assert_array_equal(np.asarray(got[2:5]), want[2:5])


#: What a run writes with many rows a pair: each range's, the selection's,
#: the exact stage's and each chunk's pairs.
PAIR_FILES = ("pair_a", "pair_b", "pair_scores", "accepted_a", "accepted_b", "scores",
              "pair_rep", "pair_member", "pair_similarity", "pair_exact", "pairs")


@pytest.mark.parametrize("keep", ["first", "longest"])
def test_a_run_reads_its_pairs_a_slice_at_a_time(tmp_path, monkeypatch, keep):
    """Out of core, every read of a file of pairs after it is written is a
    :class:`StoredColumn`: never the whole array in memory, nor a map whose
    pages stay resident as it is read through (the selection's merge of
    ranges, each chunk's pairs, pairs.parquet and report.html)."""
    from test_staged import make_texts, write_inputs
    paths = write_inputs(str(tmp_path / "in"), make_texts(300))
    loads = []
    real = store_module.DiskStore.load_npy

    def load(self, rel, mmap=False):
        loads.append((rel, mmap))
        return real(self, rel, mmap)
    monkeypatch.setattr(store_module.DiskStore, "load_npy", load)
    cfg = dataclasses.replace(CFG, keep=keep)
    report = run_staged(paths, str(tmp_path / "out"), cfg, memory_limit="96KiB", html=True)
    assert report["edges"]["verified"] > 0
    # (keep="longest" routes each range's pairs to their chunks one range at
    # a time: a range holds what its load allows, as its selection did)
    pairs = [(rel, mmap) for rel, mmap in loads
             if os.path.basename(rel).split(".")[0] in PAIR_FILES
             and not (keep == "longest" and rel.startswith("select/ranges/"))]
    assert {os.path.basename(rel).split(".")[0] for rel, _ in pairs} >= {
        "accepted_a", "scores", "pair_similarity", "pair_exact",
        "pair_a" if keep == "first" else "pairs"}
    assert [p for p in pairs if p[1] != "read"] == []


@pytest.mark.parametrize("keep", ["first", "longest"])
def test_a_run_in_memory_lets_go_of_its_pairs_once_they_are_merged(tmp_path, monkeypatch,
                                                                   keep):
    """In the memory store, where no resume reads them, each range's pairs
    are let go once the selection has merged them, and the selection's
    accepted pairs once each chunk holds its own: a run of near-copies holds
    one copy of its pairs at a time, not three."""
    from test_staged import make_texts, run, write_inputs
    paths = write_inputs(str(tmp_path / "in"), make_texts(300))
    stores = []
    real = store_module.MemoryStore.__init__

    def init(self, *a, **kw):
        stores.append(self)
        real(self, *a, **kw)
    monkeypatch.setattr(store_module.MemoryStore, "__init__", init)
    report = run(paths, str(tmp_path / "out"), dataclasses.replace(CFG, keep=keep))
    assert report["edges"]["verified"] > 0 and report["work"]["store"] == "memory"
    assert stores
    held = [r for st in stores for r in st._items if isinstance(r, str)]
    assert any(r.startswith("assign/") for r in held)          # the results stay
    assert [r for r in held if r.startswith("select/ranges/")
            or r.split("/")[-1] in ("accepted_a.npy", "accepted_b.npy", "scores.npy")] == []
