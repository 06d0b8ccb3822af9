"""The whole-array NumPy twins of :mod:`kernels.vector_misc` against the
compiled kernels they replace: the same outputs bit for bit (floats
compared as their bits), on random inputs of many sizes, on the edge cases
of each kernel, and on real text; sub-ranges leave the other entries as
they were."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pytest

from gpu_dedup.kernels import buckets as B
from gpu_dedup.kernels import cpu as C
from gpu_dedup.kernels import densify as D
from gpu_dedup.kernels import hashing as H
from gpu_dedup.kernels import primitives as P
from gpu_dedup.kernels import vector_misc as V
from gpu_dedup.stages.normalize import text_buffers
from realtext import paragraphs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = [0, 1, 7, 1000]


def _same(a, b):
    """Equal shapes, dtypes and bits."""
    a = np.asarray(a)
    b = np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
    if a.dtype.kind == "f":
        a = a.view(np.uint64 if a.itemsize == 8 else np.uint32)
        b = b.view(np.uint64 if b.itemsize == 8 else np.uint32)
    bad = np.flatnonzero(a.reshape(-1) != b.reshape(-1))
    assert bad.size == 0, (bad[:5], a.reshape(-1)[bad[:5]], b.reshape(-1)[bad[:5]])


def _texts(n=300, seed=0):
    """Real paragraphs, near copies, short lines, long documents, empty and
    one-character ones, non-ASCII."""
    rng = np.random.default_rng(seed)
    paras = list(paragraphs()[:n])
    words = [w for p in paras for w in p.split()][:2000]
    short = [" ".join(rng.choice(words, rng.integers(1, 8))) for _ in range(n // 3)]
    near = [p[: len(p) // 2] + " und " + p[len(p) // 2:] for p in paras[: n // 3]]
    long_ = [" ".join(paras[i:i + 25]) for i in range(0, n // 2, 10)]
    other = ["", "a", "ab", "é", "日本語のテキスト", "Größe café naïve " * 20, "x" * 5000]
    return paras + short + near + long_ + other


def _buffers(texts):
    return text_buffers(pa.array(texts, pa.large_string()))


# -- the module itself ------------------------------------------------------------

def test_fmix64_is_the_kernels():
    x = np.random.default_rng(1).integers(0, 2**64, 1000, dtype=np.uint64)
    _same(V.fmix64(x), np.array([H.fmix64(v) for v in x], np.uint64))


def test_the_module_imports_no_numba():
    """Imported and run, it loads no Numba (the kernels' modules it takes
    its constants from do not either)."""
    code = textwrap.dedent("""
        import sys
        import numpy as np
        from gpu_dedup.kernels import vector_misc
        vector_misc.probe_table(np.uint64(3), 8)
        bad = [m for m in sys.modules if m.split(".")[0] in ("numba", "llvmlite")]
        assert not bad, bad
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]


def test_the_reference_is_the_compiled_kernel():
    """The kernels compared with run compiled here (were they interpreted
    with these stand-ins, the tests would compare them with themselves)."""
    from gpu_dedup.kernels import jit
    assert not jit.interpreting()


# -- upper bounds -----------------------------------------------------------------

def _real_bound_rows(words=P.BOUND_WORDS):
    texts = _texts()
    off, data = _buffers(texts)
    docs = np.arange(len(texts), dtype=np.int64)
    rows = []
    for word, n in [(False, 5), (True, 2), (False, 1)]:
        out = np.empty((docs.size, words), np.uint32)
        C.set_bounds(off, data, docs, word, n, out)
        rows.append(out)
    return np.concatenate(rows)


def _random_bound_rows(rng, n, words=P.BOUND_WORDS):
    """Random counts (many of them 0 and 255) and distinct counts, some of
    them too small for the counts, so that the union is 0 or negative."""
    counts = rng.integers(0, 256, (n, (words - 1) * 4)).astype(np.uint8)
    counts[rng.random(counts.shape) < 0.3] = 0
    counts[rng.random(counts.shape) < 3.2 / counts.shape[1]] = 255    # 3 full bins a row
    rows = np.zeros((n, words), np.uint32)
    rows[:, :-1] = counts.view(np.uint32).reshape(n, -1)
    total = counts.astype(np.int64).sum(1)
    rows[:, -1] = np.where(rng.random(n) < 0.2, rng.integers(0, 50, n),
                           total + rng.integers(0, 500, n))
    return rows


def _bound_cases(rng, rows, E):
    n = rows.shape[0]
    ia = rng.integers(0, n, E).astype(np.int64)
    ib = rng.integers(0, n, E).astype(np.int64)
    if E:
        ib[: E // 10] = ia[: E // 10]                     # a row with itself
    return ia, ib


def _check_bounds(rows, ia, ib, e0=None, e1=None):
    E = ia.shape[0]
    e0 = 0 if e0 is None else e0
    e1 = E if e1 is None else e1
    counts = rows.view(np.uint8)
    fill = np.frombuffer(np.full(E, 0x7FF4DEADBEEF0001, np.uint64).tobytes(), np.float64)
    want = fill.copy()
    got = fill.copy()
    C._upper_bound_edges(rows, counts, ia, ib, want, e0, e1)
    r = V.upper_bound_edges(rows, counts, ia, ib, got, e0, e1)
    assert r is got
    _same(got, want)
    return want


@pytest.mark.parametrize("words", [P.BOUND_WORDS, 65, 1025])
@pytest.mark.parametrize("E", SIZES + [40_000])
def test_upper_bounds_of_random_rows(E, words):
    rng = np.random.default_rng(E)
    rows = _random_bound_rows(rng, 200, words)
    ia, ib = _bound_cases(rng, rows, E)
    out = _check_bounds(rows, ia, ib)
    if E >= 1000:
        assert np.isinf(out).any() and np.isfinite(out).any()


@pytest.mark.parametrize("E", SIZES)
def test_upper_bounds_of_real_rows(E):
    rng = np.random.default_rng(E + 1)
    rows = _real_bound_rows()
    ia, ib = _bound_cases(rng, rows, E)
    _check_bounds(rows, ia, ib)


def test_upper_bounds_of_every_real_pair():
    rows = _real_bound_rows()
    m = 400
    ia, ib = np.triu_indices(m, 0)
    _check_bounds(rows, ia.astype(np.int64), (ib + rows.shape[0] - m).astype(np.int64))
    out = _check_bounds(rows, ia.astype(np.int64), ib.astype(np.int64))
    assert (out == 1.0).sum() >= m                          # each row with itself


def test_upper_bounds_edge_cases():
    rows = np.zeros((8, P.BOUND_WORDS), np.uint32)
    c = rows.view(np.uint8)
    # 0, 1: empty (no union: infinite); 2, 3: bin 5 full in both (infinite)
    c[2, 5] = c[3, 5] = 255
    rows[2, -1] = rows[3, -1] = 300
    # 4, 5: equal, bin 63 full (infinite together; finite with 2 or 3);
    # 6: counts larger than its distinct count (union negative); 7: one shingle
    c[4, 5] = 200
    c[4, 63] = 255
    rows[4, -1] = 455
    c[5] = c[4]
    rows[5, -1] = 455
    c[6, :] = 10
    rows[6, -1] = 3
    c[7, 0] = 1
    rows[7, -1] = 1
    ia, ib = np.meshgrid(np.arange(8), np.arange(8))
    out = _check_bounds(rows, ia.reshape(-1).astype(np.int64), ib.reshape(-1).astype(np.int64))
    out = out.reshape(8, 8)
    assert np.isinf(out[0, 0]) and np.isinf(out[2, 3]) and np.isinf(out[4, 5])
    assert np.isinf(out[6, 6]) and out[7, 7] == 1.0


def test_upper_bounds_in_a_sub_range_leave_the_rest():
    rng = np.random.default_rng(5)
    rows = np.concatenate([_random_bound_rows(rng, 50), _real_bound_rows()[:300]])
    ia, ib = _bound_cases(rng, rows, 5000)
    for e0, e1 in [(0, 0), (3, 4), (17, 4096), (1000, 5000), (4999, 5000), (30, 20)]:
        _check_bounds(rows, ia, ib, e0, e1)


def test_upper_bounds_through_the_public_wrapper():
    rows = _real_bound_rows()
    rng = np.random.default_rng(2)
    ia, ib = _bound_cases(rng, rows, 3000)
    out = np.empty(3000, np.float64)
    V.upper_bound_edges(rows, rows.view(np.uint8), ia, ib, out, 0, 3000)
    _same(out, C.jaccard_upper_bounds(rows, ia, ib))


@pytest.mark.parametrize("width", [1, 3, 64])
def test_window_lists_stand_ins(width):
    """``_window_sizes`` and ``_window_lists`` (each rank's distinct first
    members of its buckets, ascending) against their stand-ins, over every
    rank and over sub-ranges: the same rooms, counts and lists, and nothing
    written outside the ranks asked for."""
    from gpu_dedup.kernels import greedy as G
    from gpu_dedup.stages.select import _membership
    rng = np.random.default_rng(width)
    n = 300
    buckets = [np.sort(rng.choice(n, size=int(k), replace=False))
               for k in rng.integers(0, 20, 80)] + [np.arange(n), np.arange(0, n, 7)]
    off = np.zeros(len(buckets) + 1, np.int64)
    np.cumsum([b.size for b in buckets], out=off[1:])
    members = np.concatenate(buckets).astype(np.int64)
    m = _membership(np, off, members, n, 0)
    for v0, v1 in [(0, n), (0, 0), (5, 6), (17, 240), (n - 1, n)]:
        want = np.full(n + 1, -3, np.int64)
        got = want.copy()
        G._window_sizes(m.d_off, m.d_pos, width, want, v0, v1)
        V.window_sizes(m.d_off, m.d_pos, width, got, v0, v1)
        _same(got, want)
    cap = np.zeros(n + 1, np.int64)
    G._window_sizes(m.d_off, m.d_pos, width, cap, 0, n)
    np.cumsum(cap, out=cap)
    assert cap[n] > 0
    for v0, v1 in [(0, n), (0, 0), (5, 6), (17, 240), (n - 1, n)]:
        wt, gt = np.full(cap[n], -1, np.int64), np.full(cap[n], -1, np.int64)
        wc, gc = np.full(n + 1, -2, np.int64), np.full(n + 1, -2, np.int64)
        G._window_lists(m.d_off, m.d_bkt, m.d_pos, m.b_off, m.members, width, cap, wt, wc,
                        v0, v1)
        V.window_lists(m.d_off, m.d_bkt, m.d_pos, m.b_off, m.members, width, cap, gt, gc,
                       v0, v1)
        _same(gc, wc)
        for v in range(v0, v1):
            k = int(wc[v + 1])
            _same(gt[cap[v]:cap[v] + k], wt[cap[v]:cap[v] + k])
            assert np.all(np.diff(gt[cap[v]:cap[v] + k]) > 0)
        outside = np.ones(cap[n], bool)
        outside[cap[v0]:cap[v1]] = False
        assert np.all(gt[outside] == -1)


@pytest.mark.parametrize("words", [P.BOUND_WORDS, 257])
def test_window_upper_bounds_are_those_of_the_pairs_spelt_out(words):
    # buckets of every size (one of a single member, empty ones), the
    # windows greedy selection makes of them, some ranks fixed: bucket by
    # bucket (compiled, and the stand-in over every slice of entries) the
    # bounds of the pairs with their second ranks spelt out (rows of 64
    # bins and of 1,024)
    from gpu_dedup.kernels.greedy import window_pairs
    from gpu_dedup.stages.select import _membership
    rows = _real_bound_rows(words)
    n = rows.shape[0]
    rng = np.random.default_rng(5)
    buckets = [np.sort(rng.choice(n, size=int(k), replace=False))
               for k in rng.integers(0, 12, 40)] + [np.arange(n)]
    off = np.zeros(len(buckets) + 1, np.int64)
    np.cumsum([b.size for b in buckets], out=off[1:])
    members = np.concatenate(buckets).astype(np.int64)
    counts = rows.view(np.uint8)
    for width, fixed in [(4, 0), (64, 0), (3, n // 3)]:
        m = _membership(np, off, members, n, fixed)
        d_pos = m.d_pos.copy()
        d_pos[:m.d_off[fixed]] = 0
        p_off, p_u = window_pairs(m.d_off, m.d_bkt, d_pos, m.b_off, m.members, width)
        p_v = np.repeat(np.arange(n, dtype=np.int64), np.diff(p_off))
        assert p_u.size and np.all(p_u < p_v)
        want = C.jaccard_upper_bounds(rows, p_u, p_v)
        _same(C.window_upper_bounds(rows, p_off, p_u, m.b_off, m.members, width, fixed), want)
        E = members.size
        for e0, e1 in [(0, E), (0, 0), (3, 4), (5, E - 2), (E - 1, E)]:
            a = np.full(want.size, np.nan)
            C._bucket_window_bounds(rows, counts, p_off, p_u, m.b_off, m.members, width, fixed,
                                    0, a, e0, e1)
            b = np.full(want.size, np.nan)
            V.bucket_window_bounds(rows, counts, p_off, p_u, m.b_off, m.members, width, fixed,
                                   0, b, e0, e1)
            # the stand-in writes whole windows, the kernel the pairs of its
            # entries: where the kernel wrote, the same values
            done = ~np.isnan(a)
            _same(a[done], want[done])
            _same(b[done], want[done])
            assert np.isnan(b).sum() <= np.isnan(a).sum()
            if (e0, e1) == (0, E):            # every entry: every pair
                assert not np.isnan(a).any()


# -- probe table ------------------------------------------------------------------

@pytest.mark.parametrize("K", [1, 2, 7, 64, 100, 128, 256])
def test_probe_table(K):
    for q in [H.U64(0), H.U64(1), H.U64(0x9E3779B97F4A7C15), ~H.U64(0),
              np.random.default_rng(K).integers(0, 2**64, dtype=np.uint64)]:
        got = V.probe_table(q, K)
        _same(got, D.probe_table(q, K))
    assert got.shape == (K, D.TABLE_PROBES) and got.min() >= 0 and got.max() < K


# -- band keys --------------------------------------------------------------------

def _check_band_keys(sig, bands, rows, i0, i1):
    N = sig.shape[0]
    fill = np.full((N, bands + 2), 0xABCD, np.uint64)
    want = fill.copy()
    got = fill.copy()
    C._band_keys_rows(sig, bands, rows, want, i0, i1)
    V.band_keys_rows(sig, bands, rows, got, i0, i1)
    _same(got, want)


@pytest.mark.parametrize("dtype", [np.uint32, np.uint64])
@pytest.mark.parametrize("bands,rows,K", [(9, 13, 128), (20, 5, 100), (32, 4, 128),
                                          (1, 1, 1), (7, 1, 7), (4, 16, 64), (16, 16, 256),
                                          (1, 128, 128), (3, 2, 7)])
@pytest.mark.parametrize("N", SIZES)
def test_band_keys(dtype, bands, rows, K, N):
    rng = np.random.default_rng(N * 1000 + bands * 10 + rows)
    sig = rng.integers(0, np.iinfo(dtype).max, (N, K), dtype=dtype, endpoint=True)
    if N > 1:
        sig[1] = sig[0]
        sig[-1] = np.iinfo(dtype).max
    _check_band_keys(sig, bands, rows, 0, N)
    if N >= 7:
        _check_band_keys(sig, bands, rows, 2, N - 3)
        _check_band_keys(sig, bands, rows, 3, 3)


def _real_signatures(K, shift):
    """Classic MinHash signatures (``K`` columns, 32-bit when ``shift`` is
    32) of the real texts, by the compiled kernel."""
    texts = _texts()
    off, data = _buffers(texts)
    docs = np.arange(len(texts), dtype=np.int64)
    rng = np.random.default_rng(3)
    a = rng.integers(0, 2**64, K, dtype=np.uint64) | np.uint64(1)
    b = rng.integers(0, 2**64, K, dtype=np.uint64)
    sig = np.empty((docs.size, K), np.uint32 if shift == 32 else np.uint64)
    C.minhash(off, data, docs, False, 5, a, b, shift, sig, np.empty(docs.size, np.int64))
    return sig


def test_band_keys_of_real_signatures():
    for shift in (32, 0):
        sig = _real_signatures(128, shift)
        _check_band_keys(sig, 20, 5, 0, sig.shape[0])
        _check_band_keys(sig, 9, 13, 0, sig.shape[0])


# -- code points ------------------------------------------------------------------

def _check_codepoints(offsets, data, i0=None, i1=None):
    N = offsets.shape[0] - 1
    i0 = 0 if i0 is None else i0
    i1 = N if i1 is None else i1
    want = np.full(N, -7, np.int64)
    got = want.copy()
    C._codepoint_docs(offsets, data, want, i0, i1)
    V.codepoint_docs(offsets, data, got, i0, i1)
    _same(got, want)
    return want


def test_codepoints_of_real_text():
    texts = _texts()
    off, data = _buffers(texts)
    got = _check_codepoints(off, data)
    assert got.tolist() == [len(t) for t in texts]
    _check_codepoints(off, data, 10, 200)
    _check_codepoints(off, data, 5, 5)
    # a slice of the Arrow array: offsets that do not start at 0
    off2, data2 = _buffers(pa.array(texts, pa.large_string())[13:90])
    assert int(off2[0]) > 0
    _check_codepoints(off2, data2)


@pytest.mark.parametrize("N", SIZES)
def test_codepoints_of_random_bytes(N):
    """Malformed UTF-8 (stray continuation bytes, truncated sequences, bytes
    above 0xF4) counts as the kernel counts it."""
    rng = np.random.default_rng(N + 11)
    lengths = rng.integers(0, 40, N)
    lengths[rng.random(N) < 0.2] = 0
    offsets = np.zeros(N + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    data = rng.integers(0, 256, max(int(offsets[-1]), 1)).astype(np.uint8)
    data[rng.random(data.size) < 0.3] = 0x41
    _check_codepoints(offsets, data)
    if N >= 7:
        _check_codepoints(offsets, data, 1, N - 2)


def test_codepoints_of_odd_buffers():
    data = np.array([0x80, 0xBF, 0xC3, 0xA9, 0xE6, 0x97, 0xF0, 0x9F, 0x98, 0x80, 0xFF, 0x41],
                    np.uint8)
    _check_codepoints(np.array([0, 0, 1, 2, 4, 6, 10, 12, 12], np.int64), data)
    _check_codepoints(np.array([0], np.int64), data)
    # ends before starts (not Arrow, but the kernel counts nothing)
    _check_codepoints(np.array([4, 2, 12, 0, 3], np.int64), data)


# -- Jaccard of sets, stopping early ----------------------------------------------

def _check_jaccard(off1, val1, off2, val2, ia, ib, floor, e0=None, e1=None):
    E = ia.shape[0]
    e0 = 0 if e0 is None else e0
    e1 = E if e1 is None else e1
    floor = float(floor)
    below = float(np.nextafter(floor, 0.0))
    want = np.full(E, -3.5)
    got = want.copy()
    C._jaccard_edge_range(off1, val1, off2, val2, ia, ib, floor, below, want, e0, e1)
    r = V.jaccard_edge_range(off1, val1, off2, val2, ia, ib, floor, below, got, e0, e1)
    assert r is got
    _same(got, want)
    # pairs of small sets are counted all at once, the others one at a time:
    # each way alone, the same values
    for most in (0, 1 << 40):
        old, V.PAIR_VALUES = V.PAIR_VALUES, most
        try:
            again = np.full(E, -3.5)
            V.jaccard_edge_range(off1, val1, off2, val2, ia, ib, floor, below, again, e0, e1)
        finally:
            V.PAIR_VALUES = old
        _same(again, want)
    return want


def _random_sets(rng, n, universe, max_size):
    """CSR of ``n`` sorted, distinct sets drawn from ``universe`` values
    (small: many overlap; some empty, some equal)."""
    sizes = rng.integers(0, max_size + 1, n)
    sizes[rng.random(n) < 0.1] = 0
    vals = []
    pool = rng.integers(0, 2**64, universe, dtype=np.uint64)
    for s in sizes:
        vals.append(np.unique(rng.choice(pool, min(int(s), universe), replace=False)))
    if n >= 4:
        vals[1] = vals[0].copy()
        vals[3] = vals[2][: len(vals[2]) // 2].copy()
    off = np.zeros(n + 1, np.int64)
    np.cumsum([len(v) for v in vals], out=off[1:])
    values = np.concatenate(vals) if vals else np.zeros(0, np.uint64)
    return off, values.astype(np.uint64)


@pytest.mark.parametrize("floor", [0.0, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 1.0])
@pytest.mark.parametrize("E", SIZES)
def test_jaccard_of_random_sets(E, floor):
    rng = np.random.default_rng(E * 7 + int(floor * 100))
    off1, val1 = _random_sets(rng, 60, 40, 30)
    off2, val2 = _random_sets(rng, 30, 40, 30)
    ia = rng.integers(0, 60, E).astype(np.int64)
    ib = rng.integers(0, 60, E).astype(np.int64)
    second = rng.random(E) < 0.4
    ib[second] = ~rng.integers(0, 30, second.sum())
    first = rng.random(E) < 0.1
    ia[first] = ~rng.integers(0, 30, first.sum())
    if E:
        ib[: E // 8] = ia[: E // 8]
    _check_jaccard(off1, val1, off2, val2, ia, ib, floor)
    if E >= 7:
        _check_jaccard(off1, val1, off2, val2, ia, ib, floor, 2, E - 1)


def test_jaccard_of_real_shingle_sets():
    texts = _texts(200)
    off, data = _buffers(texts)
    docs = np.arange(len(texts), dtype=np.int64)
    set_off, values = C.shingle_sets(off, data, docs, False, 5)
    m = len(texts)
    rng = np.random.default_rng(9)
    ia = rng.integers(0, m, 3000).astype(np.int64)
    ib = rng.integers(0, m, 3000).astype(np.int64)
    ib[:1000] = np.minimum(ia[:1000] + 1, m - 1)            # neighbours: the near copies
    ib[1000:1200] = ia[1000:1200]
    for floor in [0.0, 0.5, 0.8, 0.9]:
        out = _check_jaccard(set_off, values, set_off, values, ia, ib, floor)
        assert (out >= floor).any()


def test_jaccard_of_runs_that_are_not_strictly_ascending():
    """Repeated or unsorted values take the step-by-step merge: the same
    values still."""
    rng = np.random.default_rng(4)
    sizes = rng.integers(0, 12, 40)
    off = np.zeros(41, np.int64)
    np.cumsum(sizes, out=off[1:])
    val = np.sort(rng.integers(0, 6, int(off[-1])).astype(np.uint64))
    val[::7] = rng.integers(0, 6, val[::7].size).astype(np.uint64)
    ia = rng.integers(0, 40, 500).astype(np.int64)
    ib = rng.integers(0, 40, 500).astype(np.int64)
    for floor in [0.0, 0.4, 0.8]:
        _check_jaccard(off, val, off, val, ia, ib, floor)


def test_jaccard_stops_where_the_kernel_stops():
    """Hand-made pairs where the merge stops early for either run, just
    before either run ends, or never."""
    A = np.array([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], np.uint64)
    cases = [
        A, A[:5], A[5:], A[::2], A[1::2], A + np.uint64(100), np.array([10], np.uint64),
        np.array([1, 10], np.uint64), np.array([0, 1, 2, 3, 4, 5, 6, 7, 8, 11], np.uint64),
        np.array([2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13], np.uint64),
        np.zeros(0, np.uint64), np.array([5], np.uint64),
    ]
    off = np.zeros(len(cases) + 1, np.int64)
    np.cumsum([c.size for c in cases], out=off[1:])
    val = np.concatenate(cases)
    n = len(cases)
    ia, ib = (x.reshape(-1).astype(np.int64) for x in np.meshgrid(np.arange(n), np.arange(n)))
    for floor in np.linspace(0.0, 1.0, 41):
        _check_jaccard(off, val, off, val, ia, ib, floor)


# -- buckets ----------------------------------------------------------------------

def _random_segments(rng, sizes, distinct, implicit):
    seg = np.zeros(len(sizes) + 1, np.int64)
    np.cumsum(sizes, out=seg[1:])
    pool = rng.integers(0, 2**64, max(distinct, 1), dtype=np.uint64)
    keys = pool[rng.integers(0, max(distinct, 1), int(seg[-1]))]
    if implicit:
        docs = np.zeros(0, np.int64)
    else:
        docs = np.concatenate([np.sort(rng.choice(10 * max(s, 1), s, replace=False))
                               for s in sizes] or [np.zeros(0, np.int64)]).astype(np.int64)
    return keys, docs, seg


def _check_bucket_segments(keys, docs, seg, j0, j1, lo0=None):
    g = seg.shape[0] - 1
    lo0 = int(seg[0]) if lo0 is None else lo0
    total = int(seg[g]) - lo0
    arrays = [np.full(max(total, 1), -9, np.int64), np.full(max(total, 1), -9, np.int64),
              np.full(max(g, 1), -9, np.int64), np.full(max(g, 1), -9, np.int64)]
    want = [a.copy() for a in arrays]
    got = [a.copy() for a in arrays]
    B._bucket_segments(keys, docs, seg, lo0, *want, j0, j1)
    V.bucket_segments(keys, docs, seg, lo0, *got, j0, j1)
    for w, o in zip(want, got):
        _same(o, w)
    return want


@pytest.mark.parametrize("implicit", [True, False])
@pytest.mark.parametrize("sizes,distinct", [([], 1), ([0], 1), ([1], 1), ([7], 3), ([7], 7),
                                            ([1000], 200), ([1000] * 5, 900),
                                            ([0, 5, 0, 7, 1, 1000, 0], 30),
                                            ([100] * 20, 40)])
def test_bucket_segments_and_lists(sizes, distinct, implicit):
    rng = np.random.default_rng(len(sizes) * 100 + distinct)
    keys, docs, seg = _random_segments(rng, sizes, distinct, implicit)
    g = len(sizes)
    want = _check_bucket_segments(keys, docs, seg, 0, g)
    lo0 = int(seg[0])
    off_w, mem_w = B._bucket_lists(seg, lo0, *want)
    off_g, mem_g = V.bucket_lists(seg, lo0, *want)
    _same(off_g, off_w)
    _same(mem_g, mem_w)
    if g >= 3:
        _check_bucket_segments(keys, docs, seg, 1, g - 1)
        _check_bucket_segments(keys, docs, seg, 2, 2)


def test_bucket_segments_that_start_past_zero():
    """Segments of a slice of the keys (``seg[0] > 0``): written from
    ``seg[j] - lo0``, as :func:`kernels.buckets.segment_buckets` does."""
    rng = np.random.default_rng(12)
    keys, docs, seg = _random_segments(rng, [30, 40, 0, 50, 60], 20, False)
    _check_bucket_segments(keys, docs, seg[1:], 0, 4)
    _check_bucket_segments(keys, np.zeros(0, np.int64), seg[2:], 0, 3)
    s = seg[1:]
    lo0 = int(s[0])
    n = int(s[-1]) - lo0
    args = [np.empty(n, np.int64), np.empty(n, np.int64), np.empty(4, np.int64),
            np.empty(4, np.int64)]
    B._bucket_segments(keys, docs, s, lo0, *args, 0, 4)
    for w, o in zip(B._bucket_lists(s, lo0, *args), V.bucket_lists(s, lo0, *args)):
        _same(o, w)


def test_bucket_lists_of_real_band_keys():
    """The whole of :func:`kernels.buckets.segment_buckets` on the band keys
    of real text (near copies share buckets)."""
    sig = _real_signatures(100, 32)
    docs = np.arange(sig.shape[0], dtype=np.int64)
    keys = np.empty((docs.size, 20), np.uint64)
    C.band_keys(sig, 20, 5, keys)
    flat = np.ascontiguousarray(keys.T).reshape(-1)
    seg = np.arange(21, dtype=np.int64) * docs.size
    for d in [np.zeros(0, np.int64), np.tile(docs * 3, 20)]:
        want = _check_bucket_segments(flat, d, seg, 0, 20)
        off_b, mem_b = V.bucket_lists(seg, 0, *want)
        off_w, mem_w = B.segment_buckets(flat, d, seg)
        _same(off_b, off_w)
        _same(mem_b, mem_w)
        assert off_w.size > 20
        h = np.full((off_w.size - 1 + 3, 2), 5, np.uint64)
        V.bucket_hash_range(off_w, mem_w, h, 0, off_w.size - 1)
        _same(h[:-3], B.bucket_hashes(off_w, mem_w))
        assert (h[-3:] == 5).all()


@pytest.mark.parametrize("nb", SIZES)
def test_bucket_hashes(nb):
    rng = np.random.default_rng(nb + 3)
    sizes = rng.integers(0, 12, nb)
    sizes[rng.random(nb) < 0.05] = 150
    off = np.zeros(nb + 1, np.int64)
    np.cumsum(sizes, out=off[1:])
    members = rng.integers(-2**63, 2**63 - 1, int(off[-1]), dtype=np.int64)
    members[::3] = rng.integers(0, 100, members[::3].size)
    for b0, b1 in [(0, nb), (min(2, nb), max(nb - 3, min(2, nb))), (nb // 2, nb // 2)]:
        want = np.full((nb, 2), 77, np.uint64)
        got = want.copy()
        B._bucket_hash_range(off, members, want, b0, b1)
        V.bucket_hash_range(off, members, got, b0, b1)
        _same(got, want)


@pytest.mark.parametrize("n", SIZES + [5000])
def test_first_equal(n):
    rng = np.random.default_rng(n + 21)
    pool = rng.integers(0, 2**64, (max(n // 3, 1), 2), dtype=np.uint64)
    fp = pool[rng.integers(0, pool.shape[0], n)]
    if n >= 7:
        fp[5, 0] = fp[4, 0]                                  # one word equal only
        fp[6, 1] = fp[4, 1]
    for active in [np.ones(n, np.bool_), rng.random(n) < 0.6, np.zeros(n, np.bool_)]:
        _same(V.first_equal(fp, active), B.first_equal(fp, active))
    # the fingerprints of real text, with the exact copies among them
    if n == 1000:
        texts = _texts()
        texts = texts + texts[::5]
        off, data = _buffers(texts)
        fp = C.text_hash128(off, data)
        act = np.ones(len(texts), np.bool_)
        _same(V.first_equal(fp, act), B.first_equal(fp, act))


# -- rows of keys -----------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.int64, np.uint64])
@pytest.mark.parametrize("n,spread", [(1, 1), (7, 3), (1000, 2), (1000, 1 << 40), (3000, 1 << 50)])
def test_key_directory_and_rows_of(dtype, n, spread):
    rng = np.random.default_rng(n)
    keys = np.unique(rng.integers(0, spread * n, size=n)).astype(dtype)
    want_first, want_shift = C._key_directory(keys)
    first, shift = V.key_directory(keys)
    assert shift == want_shift
    _same(first, want_first)
    queries = np.concatenate([keys, rng.integers(0, spread * n + 5, size=500).astype(dtype)])
    rng.shuffle(queries)
    want = np.full(queries.size, -1, np.int64)
    got = want.copy()
    t0, t1 = 3, queries.size - 2
    C._rows_of(keys, want_first, want_shift, queries, want, t0, t1)
    V.rows_of(keys, first, shift, queries, got, t0, t1)
    _same(got, want)
    assert (got[t0:t1] >= 0).sum() >= np.isin(queries[t0:t1], keys).sum() > 0
