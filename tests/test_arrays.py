"""The host array helpers agree with NumPy's own functions."""
from __future__ import annotations

import numpy as np
import pytest

from gpu_dedup.arrays import distinct_count, unique


@pytest.mark.parametrize("dtype", [np.int64, np.uint64, np.int32])
@pytest.mark.parametrize("n", [0, 1, 7, 5000])
def test_unique_matches_numpy(dtype, n):
    x = np.random.default_rng(n).integers(0, max(n // 3, 1), size=n).astype(dtype)
    want, want_inv, want_cnt = np.unique(x, return_inverse=True, return_counts=True)
    np.testing.assert_array_equal(unique(x), want)
    got, inv, cnt = unique(x, return_inverse=True, return_counts=True)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(inv, want_inv.reshape(-1))
    np.testing.assert_array_equal(cnt, want_cnt)
    v, c = unique(x, return_counts=True)
    np.testing.assert_array_equal(c, want_cnt)
    assert distinct_count(x) == want.size


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("dtype", [np.int64, np.uint64, np.float64])
def test_sorted_copy_in_parts_on_threads_is_numpys_sort(monkeypatch, dtype, threads):
    """Large arrays sorted a part a thread and merged: ``np.sort``'s result,
    and the input left as it was."""
    from gpu_dedup import arrays
    from gpu_dedup.kernels import threads as threads_module
    monkeypatch.setattr(arrays, "PARALLEL_SORT", 1000)
    monkeypatch.setattr(threads_module, "_threads", threads)
    rng = np.random.default_rng(threads)
    for n in (999, 1000, 4321):
        x = rng.integers(0, n // 2, size=n).astype(dtype)
        before = x.copy()
        got = arrays.sorted_copy(x)
        assert got.dtype == x.dtype
        np.testing.assert_array_equal(got, np.sort(x))
        np.testing.assert_array_equal(x, before)
        np.testing.assert_array_equal(arrays.unique(x), np.unique(x))


def test_concat_csr_shifts_offsets_and_keeps_the_value_type():
    from gpu_dedup.arrays import concat_csr
    off, val = concat_csr([(np.array([0, 2, 3]), np.array([5, 6, 7], np.uint64)),
                           (np.array([4, 4, 6]), np.array([8, 9], np.uint64))], np.uint64)
    assert off.tolist() == [0, 2, 3, 3, 5] and val.dtype == np.uint64
    assert val.tolist() == [5, 6, 7, 8, 9]
    empty = concat_csr([])
    assert empty[0].tolist() == [0] and empty[1].size == 0


def test_to_host_gives_numpy_arrays_from_host_and_device_arrays():
    from gpu_dedup.arrays import to_host

    class DeviceArray:                  # what CuPy's arrays offer: .get() copies to the host
        def __init__(self, values):
            self.values = values

        def get(self):
            return np.array(self.values, np.int64)

    x = np.arange(4)
    assert to_host(x) is x                                   # already on the host: as is
    got = to_host(DeviceArray([3, 1, 2]))
    assert isinstance(got, np.ndarray) and got.tolist() == [3, 1, 2]
    got = to_host([5, 6])                                    # anything array-like
    assert isinstance(got, np.ndarray) and got.tolist() == [5, 6]
    assert to_host(np.uint64(7)) == 7


def test_take_rows_copies_the_rows_asked_for_in_order():
    from gpu_dedup.arrays import take_rows
    rng = np.random.default_rng(3)
    for dtype in (np.uint64, np.int64, np.uint32):
        sizes = rng.integers(0, 6, size=40)
        off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        val = rng.integers(0, 1 << 30, size=int(off[-1])).astype(dtype)
        rows = rng.integers(0, 40, size=25)                 # repeats, any order
        new_off, new_val = take_rows(off, val, rows)
        assert new_val.dtype == dtype
        want = [val[off[r]:off[r + 1]] for r in rows]
        assert np.array_equal(np.diff(new_off), [w.size for w in want])
        assert np.array_equal(new_val, np.concatenate(want))
        e_off, e_val = take_rows(off, val, rows[:0])
        assert e_off.tolist() == [0] and e_val.size == 0


def test_pairs_read_two_handles_as_one():
    """A pair's rows in two CSR handles (``~row`` for the second), read in
    place by the CPU kernel and copied into one by ``rows_of_two``: the same
    Jaccard, and the same at and above a floor."""
    from gpu_dedup.arrays import rows_of_two
    from gpu_dedup.kernels.cpu import jaccard_edges, jaccard_edges_between
    rng = np.random.default_rng(3)

    def csr(k):
        sizes = rng.integers(0, 20, k)
        off = np.zeros(k + 1, np.int64)
        off[1:] = np.cumsum(sizes)
        vals = [np.sort(rng.choice(40, s, replace=False)).astype(np.uint64) for s in sizes]
        return off, np.concatenate(vals)
    o1, v1 = csr(50)
    o2, v2 = csr(30)
    ia = rng.integers(-30, 50, 2000)
    ib = rng.integers(-30, 50, 2000)
    one, a, b = rows_of_two((None, o1, v1), (None, o2, v2), ia, ib)
    want = jaccard_edges(one[1], one[2], a, b)
    assert np.array_equal(jaccard_edges_between(o1, v1, o2, v2, ia, ib, 0.0), want)
    got = jaccard_edges_between(o1, v1, o2, v2, ia, ib, 0.5)
    assert np.array_equal(got >= 0.5, want >= 0.5)
    assert np.array_equal(got[want >= 0.5], want[want >= 0.5])
    assert (want > 0).any() and (want < 0.5).any() and (want >= 0.5).any()


@pytest.mark.parametrize("case", ["small", "repeats", "wide", "negative", "empty"])
def test_stable_order_is_numpys_stable_argsort(case):
    from gpu_dedup.arrays import stable_order
    rng = np.random.default_rng(7)
    key = {"small": rng.integers(0, 1000, 5000),
           "repeats": rng.integers(0, 3, 5000).astype(np.uint32),
           "wide": rng.integers(0, 1 << 40, 5000),          # above 2**32: the stable sort
           "negative": rng.integers(-50, 50, 5000),
           "empty": np.zeros(0, np.int64)}[case]
    got = stable_order(key)
    assert got.dtype == np.int64
    assert np.array_equal(got, np.argsort(key, kind="stable"))


@pytest.mark.parametrize("values,type_,mask", [
    (np.array([3, -1, 7], np.int64), None, None),
    (np.array([3, -1, 7], np.int64), None, np.array([False, True, False])),
    (np.array([1, 2], np.int32), "int64", None),
    (np.array([0.5, np.nan, 2.0]), "float64", np.array([True, False, False])),
    (np.array([True, False, True, True, False, False, True, False, True]), "bool", None),
    (np.array([5, 6], np.uint64), None, np.array([False, False])),
    (np.zeros(0, np.int64), None, None),
    ([], "large_string", None),
    (np.array(["a", None], dtype=object), "string", None),
    (["a", "", "h\u00e9llo \u2713", "\U0001f600" * 3], "large_string", None),
    (["a", "", "h\u00e9llo \u2713", "\U0001f600" * 3], "string", None),
    (["", ""], "string", None),
    (["a", None], "large_string", None),                     # not all str: pa.array
])
def test_arrow_column_equals_pa_array(values, type_, mask):
    import pyarrow as pa
    from gpu_dedup.arrays import arrow
    t = None if type_ is None else {"int64": pa.int64(), "float64": pa.float64(),
                                    "bool": pa.bool_(), "large_string": pa.large_string(),
                                    "string": pa.string()}[type_]
    got = arrow(values, t, mask=mask)
    want = pa.array(values, t, mask=mask)
    got.validate(full=True)
    assert got.type == want.type
    assert got.null_count == want.null_count
    assert got.to_pylist() == want.to_pylist() or (           # NaN != NaN
        str(got.to_pylist()) == str(want.to_pylist()))


@pytest.mark.parametrize("spread", [7, 1 << 20, 1 << 33, 1 << 62])
def test_pair_order_sorts_pairs_of_any_size_by_first_then_second(spread):
    from gpu_dedup.arrays import pair_order, pairs_ascend
    rng = np.random.default_rng(spread % 1000)
    a = rng.integers(0, spread, 3000, dtype=np.int64)
    b = rng.integers(0, spread, 3000, dtype=np.int64)
    a[:500] = a[500:1000]                      # repeated firsts and whole pairs
    b[:250] = b[500:750]
    order = pair_order(a, b)
    assert order.tolist() == np.lexsort((b, a)).tolist()   # stable, as lexsort is
    sa, sb = a[order], b[order]
    keep = np.ones(sa.size, bool)
    keep[1:] = (sa[1:] != sa[:-1]) | (sb[1:] != sb[:-1])
    assert pairs_ascend(sa[keep], sb[keep])
    assert not pairs_ascend(sa, sb)            # repeated pairs are not distinct
    if keep.sum() > 2:
        i = np.flatnonzero(keep)
        assert not pairs_ascend(sa[i][::-1], sb[i][::-1])


@pytest.mark.parametrize("cap", [1, 2, 5, 64, 10_000])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_merged_pair_slices_is_the_sorted_union_a_bounded_slice_at_a_time(cap, seed, tmp_path):
    """Sorted tables of pairs (some empty, some with many pairs of one first
    number, some memory maps or mapped columns) merged slice by slice: the
    whole is their rows sorted by pair, every slice sorted and at most
    ``cap`` rows (a row a source where ``cap`` is smaller), and each slice
    wholly before the next."""
    from gpu_dedup.arrays import MappedColumn, merged_pair_slices, pair_order
    rng = np.random.default_rng(seed)
    sources, flat = [], []
    for s in range(int(rng.integers(1, 5))):
        n = int(rng.integers(0, 300))
        a = rng.integers(0, 6 if s % 2 else 50, size=n)       # few first numbers: long runs
        b = rng.integers(0, 1 << 40, size=n)
        key = np.unique(np.stack([a, b], axis=1), axis=0)     # sorted, distinct
        a, b = key[:, 0].astype(np.int64), key[:, 1].astype(np.int64)
        w = rng.random(a.size)
        if s == 1:                                            # read from a file
            np.save(tmp_path / "b.npy", b)
            b = np.load(tmp_path / "b.npy", mmap_mode="r")
        if s == 2:                                            # read through a mapping
            b = MappedColumn(b - 7, lambda x: x + 7)
        sources.append((a, b, w))
        flat.append((a, np.asarray(b[0:a.size]), w))
    parts = list(merged_pair_slices(sources, cap))
    assert all(0 < p[0].size <= max(cap, len(sources)) for p in parts)
    got = [np.concatenate([p[j] for p in parts]) if parts else np.zeros(0) for j in range(3)]
    whole = [np.concatenate([f[j] for f in flat]) for j in range(3)]
    order = pair_order(whole[0], whole[1])
    for j in range(3):
        np.testing.assert_array_equal(got[j], whole[j][order])
    for p, q in zip(parts, parts[1:]):                        # each slice before the next
        assert (p[0][-1], p[1][-1]) < (q[0][0], q[1][0])
