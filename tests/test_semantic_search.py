"""Semantic selection (``gpu_dedup.semantic.search``): the blocked, screened
search against the rule written out plainly (:func:`reference_select`), bit
for bit, whatever the block size, priority order, slicing or array
namespace; ties, justification of every removal, k-means search and its
recall, determinism and argument checks."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from gpu_dedup.errors import ConfigError
from gpu_dedup.kernels import threads
from gpu_dedup.kernels.semantic import decide_block, pair_cosines
from gpu_dedup.semantic.search import (MARGIN, kmeans, probe_sets, reference_select,
                                       semantic_select)


def clustered(n=1500, d=64, centres=60, seed=0, spread=0.8):
    """Unit rows: a random centre plus noise of random size up to ``spread``."""
    rng = np.random.default_rng(seed)
    c = rng.standard_normal((centres, d))
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    noise = rng.standard_normal((n, d))
    noise /= np.linalg.norm(noise, axis=1, keepdims=True)
    e = c[rng.integers(centres, size=n)] + rng.uniform(0, spread, (n, 1)) * noise
    return (e / np.linalg.norm(e, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def emb():
    return clustered()


_REF: dict = {}


def reference(emb, threshold, order):
    key = (threshold, order.tobytes())
    if key not in _REF:
        _REF[key] = reference_select(emb, threshold, order)
    return _REF[key]


def pairs(sel):
    return set(zip(sel.pair_a.tolist(), sel.pair_b.tolist(), sel.pair_similarity.tolist()))


def assert_same(got, want):
    assert np.array_equal(got.kept, want.kept)
    assert np.array_equal(got.duplicate_of, want.duplicate_of)
    assert np.array_equal(got.similarity, want.similarity, equal_nan=True)
    assert pairs(got) == pairs(want)
    assert got.pair_a.shape == want.pair_a.shape          # no pair listed twice


# -- exact search -----------------------------------------------------------------

@pytest.mark.parametrize("threshold", [0.8, 0.9, 0.95])
@pytest.mark.parametrize("block", [1, 7, 64, 5000])
def test_exact_search_is_the_rule_bit_for_bit(emb, threshold, block):
    order = np.random.default_rng(int(threshold * 100)).permutation(emb.shape[0])
    want = reference(emb, threshold, order)
    got = semantic_select(emb, threshold, order, block=block)
    assert_same(got, want)
    assert 0 < got.kept.sum() < emb.shape[0]
    assert got.screened_out > 0 and got.compared > 0
    if block == 1:     # every product is a kept document before: the reference's pairs
        assert got.compared + got.screened_out == want.compared


@pytest.mark.parametrize("block", [7, 300])
def test_column_slices_change_nothing(emb, block):
    order = np.random.default_rng(3).permutation(emb.shape[0])
    want = reference(emb, 0.9, order)
    got = semantic_select(emb, 0.9, order, block=block, max_bytes=4 * block * 5 + 3)
    assert_same(got, want)
    full = semantic_select(emb, 0.9, order, block=block)
    assert (got.compared, got.screened_out) == (full.compared, full.screened_out)


def test_input_order_is_the_default(emb):
    assert_same(semantic_select(emb[:400], 0.9), reference_select(emb[:400], 0.9))
    assert_same(semantic_select(emb[:400], 0.9),
                semantic_select(emb[:400], 0.9, np.arange(400)))


def test_ties_name_the_earliest_kept_in_priority():
    d = 16
    v = np.zeros(d, np.float32)
    v[3] = 1.0
    c, s = np.float32(0.95), np.float32(np.sqrt(1 - 0.95 ** 2))
    u1, u2 = v * c, v * c
    u1[7], u2[7] = s, -s           # cos(v, u1) == cos(v, u2) == c; cos(u1, u2) < 0.9
    e = np.stack([v, u1, u2])
    for order, named in (([1, 2, 0], 1), ([2, 1, 0], 2)):
        sel = semantic_select(e, 0.9, np.array(order), block=2)
        assert_same(sel, reference_select(e, 0.9, np.array(order)))
        assert sel.kept.tolist() == [False, True, True]
        assert sel.duplicate_of[0] == named and sel.similarity[0] == np.float64(c)
        assert sorted(sel.pair_b.tolist()) == [1, 2]


def test_identical_rows_name_the_first_copy_in_priority(emb):
    rng = np.random.default_rng(4)
    base = emb[:40]
    copies = rng.integers(1, 5, size=40)
    e = np.repeat(base, copies, axis=0)
    which = np.repeat(np.arange(40), copies)
    order = rng.permutation(e.shape[0])
    for block in (1, 5, 1000):
        sel = semantic_select(e, 0.99, order, block=block)
        assert_same(sel, reference_select(e, 0.99, order))
        rank = np.empty_like(order)
        rank[order] = np.arange(order.shape[0])
        first = {}
        for doc in order.tolist():
            first.setdefault(int(which[doc]), doc)
        for doc in np.flatnonzero(~sel.kept):
            assert sel.duplicate_of[doc] == first[int(which[doc])]
            assert sel.similarity[doc] == pair_cosines(e, np.array([doc]),
                                                       np.array([first[int(which[doc])]]))[0]
        assert sel.kept.sum() == np.unique(which).shape[0]


def test_every_removal_is_justified_and_no_kept_pair_is_similar(emb):
    t = 0.85
    order = np.random.default_rng(5).permutation(emb.shape[0])
    sel = semantic_select(emb, t, order, block=100)
    gone = np.flatnonzero(~sel.kept)
    assert gone.size and (sel.duplicate_of[sel.kept] == -1).all()
    assert np.isnan(sel.similarity[sel.kept]).all()
    assert sel.kept[sel.duplicate_of[gone]].all()
    exact = pair_cosines(emb, gone, sel.duplicate_of[gone])
    assert (exact >= t).all() and np.array_equal(exact, sel.similarity[gone])
    rank = np.empty_like(order)
    rank[order] = np.arange(order.shape[0])
    assert (rank[sel.duplicate_of[gone]] < rank[gone]).all()
    # the listed pairs: removed -> kept, similar, exact, and include duplicate_of
    assert (~sel.kept[sel.pair_a]).all() and sel.kept[sel.pair_b].all()
    assert np.array_equal(pair_cosines(emb, sel.pair_a, sel.pair_b), sel.pair_similarity)
    assert (sel.pair_similarity >= t).all()
    assert set(zip(gone.tolist(), sel.duplicate_of[gone].tolist())) <= set(
        zip(sel.pair_a.tolist(), sel.pair_b.tolist()))
    # residual: kept documents, pairwise, by brute force
    kept = np.flatnonzero(sel.kept)
    ia, ib = np.triu_indices(kept.shape[0], 1)
    residual = pair_cosines(emb, kept[ia], kept[ib])
    assert residual.max() < t
    assert int((residual >= t).sum()) == 0


def test_pair_cosines_is_the_sequential_float64_sum():
    rng = np.random.default_rng(6)
    e = rng.standard_normal((30, 300)).astype(np.float32)
    ia, ib = rng.integers(30, size=200), rng.integers(30, size=200)
    got = pair_cosines(e, ia, ib)
    for a, b, g in zip(ia, ib, got):
        s = 0.0
        for x, y in zip(e[a].tolist(), e[b].tolist()):
            s += x * y
        assert g == s
    threads.set_threads(1)
    try:
        assert np.array_equal(pair_cosines(e, ia, ib), got)        # not on how it is split
    finally:
        threads.set_threads(None)
    assert not np.array_equal(got, np.einsum("ij,ij->i", e[ia], e[ib]))   # float32 differs


def test_decide_block_counts_only_kept_partners_in_the_block():
    # doc 1 is removed by kept doc 9 of an earlier block; doc 2 is similar
    # to doc 1 only (removed: does not count) and to doc 0 below threshold
    jloc = np.array([1, 2, 2], np.int64)
    local = np.array([-1, 1, 0], np.int64)
    prank = np.array([0, 11, 10], np.int64)
    score = np.array([0.95, 0.99, 0.5])
    kept, best, listed = decide_block(3, jloc, local, prank, score, 0.9)
    assert kept.tolist() == [True, False, True]
    assert best.tolist() == [-1, 0, -1] and listed.tolist() == [True, False, False]
    kept, best, listed = decide_block(3, jloc, local, prank, np.array([0.5, 0.99, 0.5]), 0.9)
    assert kept.tolist() == [True, True, False] and best.tolist() == [-1, -1, 1]


# -- k-means search ---------------------------------------------------------------

@pytest.mark.parametrize("probe", [0, 2])
def test_kmeans_search_is_the_rule_with_its_candidates(emb, probe):
    order = np.random.default_rng(7).permutation(emb.shape[0])
    got = semantic_select(emb, 0.85, order, search="kmeans", probe=probe, block=97, seed=3)
    centroids, labels = kmeans(emb, 39, seed=3)
    assert np.array_equal(got.labels, labels)
    sets = probe_sets(emb, centroids, labels, probe)
    assert sets.shape == (emb.shape[0], 1 + probe) and np.array_equal(sets[:, 0], labels)
    want = reference_select(emb, 0.85, order, labels, sets)
    assert_same(got, want)
    one = semantic_select(emb, 0.85, order, search="kmeans", probe=probe, block=1, seed=3)
    assert_same(one, want)
    assert one.compared + one.screened_out == want.compared


def test_kmeans_probing_every_cluster_is_exact_search(emb):
    order = np.random.default_rng(8).permutation(emb.shape[0])
    got = semantic_select(emb, 0.9, order, search="kmeans", n_clusters=12, probe=11, block=200)
    assert np.unique(got.labels).shape[0] > 1
    assert_same(got, semantic_select(emb, 0.9, order, block=200))
    assert_same(got, reference(emb, 0.9, order))


def near_copies(n=2500, d=64, centres=40, spread=2.0, near=0.5, seed=1):
    """Loose topics (a centre plus noise up to ``spread``), each point with
    0 to 3 near copies (noise up to ``near``), shuffled: near-duplicates
    that k-means sometimes puts in different clusters."""
    rng = np.random.default_rng(seed)
    base = clustered(n, d, centres, seed, spread)
    rep = np.repeat(base, rng.integers(0, 4, size=n), axis=0)
    noise = rng.standard_normal(rep.shape)
    noise /= np.linalg.norm(noise, axis=1, keepdims=True)
    rep = rep + rng.uniform(0, near, (rep.shape[0], 1)) * noise
    e = np.concatenate([base, rep / np.linalg.norm(rep, axis=1, keepdims=True)])
    return e[rng.permutation(e.shape[0])].astype(np.float32)


def test_kmeans_recall_grows_with_probe():
    e = near_copies()
    exact = semantic_select(e, 0.9)
    removed = ~exact.kept
    recall = {}
    for probe in (0, 2):
        sel = semantic_select(e, 0.9, search="kmeans", probe=probe)
        recall[probe] = float((~sel.kept & removed).sum() / removed.sum())
        assert sel.compared + sel.screened_out < (exact.compared + exact.screened_out) / 5
    print(f"\nk-means recall of exact removals ({e.shape[0]} documents, "
          f"{int(removed.sum())} removed by exact search): probe 0 {recall[0]:.4f}, "
          f"probe 2 {recall[2]:.4f}")
    assert recall[0] < 1.0              # the data has duplicates across clusters
    assert recall[2] >= recall[0]
    assert recall[2] >= 0.95


def test_kmeans_is_deterministic_and_sound():
    e = clustered(n=3000, d=32, centres=20, seed=10)
    c1, l1 = kmeans(e, 20, seed=5, sample=1000)
    c2, l2 = kmeans(e, 20, seed=5, sample=1000)
    assert np.array_equal(c1, c2) and np.array_equal(l1, l2)
    c3, _ = kmeans(e, 20, seed=6, sample=1000)
    assert not np.array_equal(c1, c3)
    assert c1.dtype == np.float64 and np.allclose(np.linalg.norm(c1, axis=1), 1.0)
    assert l1.dtype == np.int64 and np.array_equal(l1, (e @ c1.astype(np.float32).T).argmax(1))
    assert kmeans(e[:5], 50)[0].shape[0] == 5
    sets = probe_sets(e, c1, l1, 3)
    sim = e @ c1.astype(np.float32).T
    for row in range(0, 3000, 97):
        others = [c for c in np.argsort(-sim[row], kind="stable").tolist() if c != l1[row]]
        assert sets[row, 1:].tolist() == others[:3]


# -- the array namespace -----------------------------------------------------------

class Recorder:
    """NumPy, recording which functions are called (stands in for CuPy);
    ``shift`` perturbs every product, as another BLAS rounds differently."""

    def __init__(self, shift=0.0):
        self.calls = Counter()
        self.shift = shift
        self.rng = np.random.default_rng(11)

    def __getattr__(self, name):
        f = getattr(np, name)
        if not callable(f) or isinstance(f, type):
            return f

        def call(*args, **kwargs):
            self.calls[name] += 1
            out = f(*args, **kwargs)
            if name == "matmul" and self.shift:
                out += (self.rng.uniform(-1, 1, out.shape) * self.shift).astype(out.dtype)
            return out
        return call


@pytest.mark.parametrize("search", ["exact", "kmeans"])
def test_the_array_namespace_does_the_products(emb, search):
    order = np.random.default_rng(12).permutation(emb.shape[0])
    xp = Recorder()
    got = semantic_select(emb, 0.9, order, search=search, block=128, xp=xp)
    assert_same(got, semantic_select(emb, 0.9, order, search=search, block=128))
    assert xp.calls["matmul"] >= 12 and xp.calls["asarray"] >= 12
    assert 1 <= xp.calls["nonzero"] <= xp.calls["matmul"]


def test_product_rounding_within_the_margin_changes_nothing(emb):
    order = np.random.default_rng(13).permutation(emb.shape[0])
    want = reference(emb, 0.9, order)
    assert_same(semantic_select(emb, 0.9, order, block=64, xp=Recorder(shift=MARGIN * 0.9)), want)
    # a screen that errs by more than the margin loses pairs: the check can fail
    worse = semantic_select(emb, 0.9, order, block=64, xp=Recorder(shift=MARGIN * 20))
    assert pairs(worse) != pairs(want)


# -- determinism and arguments -----------------------------------------------------

@pytest.mark.parametrize("search", ["exact", "kmeans"])
def test_two_calls_give_identical_arrays(emb, search):
    a = semantic_select(emb, 0.9, search=search, block=300, seed=2)
    b = semantic_select(emb, 0.9, search=search, block=300, seed=2)
    for name in ("kept", "duplicate_of", "similarity", "pair_a", "pair_b", "pair_similarity"):
        assert np.array_equal(getattr(a, name), getattr(b, name), equal_nan=True), name
    assert (a.labels is None) == (search == "exact")
    if search == "kmeans":
        assert np.array_equal(a.labels, b.labels)
    assert (a.compared, a.screened_out) == (b.compared, b.screened_out)


def test_small_inputs():
    e = np.zeros((0, 8), np.float32)
    sel = semantic_select(e, 0.9, search="kmeans")
    assert sel.kept.shape == (0,) and sel.pair_a.shape == (0,) and sel.compared == 0
    one = np.eye(1, 8, dtype=np.float32)
    sel = semantic_select(one, 0.9, search="kmeans")
    assert sel.kept.tolist() == [True] and sel.labels.tolist() == [0]
    two = np.concatenate([one, one])
    sel = semantic_select(two, 1.0, search="kmeans", probe=5)
    assert sel.kept.tolist() == [True, False] and sel.duplicate_of.tolist() == [-1, 0]
    assert sel.similarity[1] == 1.0


@pytest.mark.parametrize("call, message", [
    (lambda e: semantic_select(e, 0.0), "threshold must be a cosine in \\(0, 1\\]"),
    (lambda e: semantic_select(e, 1.5), "threshold"),
    (lambda e: semantic_select(e, True), "threshold"),
    (lambda e: semantic_select(e, "0.9"), "threshold"),
    (lambda e: semantic_select(e, 0.9, search="lsh"), "search must be 'exact' or 'kmeans'"),
    (lambda e: semantic_select(e.astype(np.float64), 0.9), "float32.*astype"),
    (lambda e: semantic_select(e[0], 0.9), "shape \\(n, d\\)"),
    (lambda e: semantic_select(e.tolist(), 0.9), "NumPy matrix"),
    (lambda e: semantic_select(np.where(e > 0.3, np.nan, e), 0.9), "NaN"),
    (lambda e: semantic_select(e * 2, 0.9), "L2-normalised"),
    (lambda e: semantic_select(e, 0.9, np.zeros(e.shape[0], int)), "permutation of 0..9"),
    (lambda e: semantic_select(e, 0.9, np.arange(5)), "permutation"),
    (lambda e: semantic_select(e, 0.9, np.arange(10.0)), "permutation"),
    (lambda e: semantic_select(e, 0.9, block=0), "block must be an integer >= 1"),
    (lambda e: semantic_select(e, 0.9, probe=-1), "probe must be an integer >= 0"),
    (lambda e: semantic_select(e, 0.9, max_bytes=0), "max_bytes"),
    (lambda e: semantic_select(e, 0.9, search="kmeans", n_clusters=0), "n_clusters"),
    (lambda e: kmeans(e, 2, iters=-1), "iters"),
    (lambda e: kmeans(e[:0], 2), "at least one row"),
    (lambda e: probe_sets(e, np.eye(2, 8), np.full(10, 2), 1), "labels must hold"),
    (lambda e: reference_select(e, 0.9, labels=np.zeros(10, int)), "together"),
])
def test_bad_arguments_are_named_in_one_line(call, message):
    e = clustered(n=10, d=8, centres=2)
    with pytest.raises(ConfigError, match=message) as err:
        call(e)
    assert "\n" not in str(err.value)
