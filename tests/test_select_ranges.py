"""Greedy selection range by range of ranks: the selection of the whole,
bit for bit, whatever the ranges, the units the buckets came in, the bound,
ranks kept already, and whether it runs in passes or in rounds."""
from __future__ import annotations

import numpy as np
import pytest

from gpu_dedup.kernels.primitives import BOUND_WORDS
from gpu_dedup.stages.select import greedy_rounds, greedy_select, unpack
from test_greedy import _flat, _random_case, _same_selection
from gpu_dedup.stages.select_ranges import (RangeState, by_group, group_entries, heads_of,
                                            rank_bounds, select_in_ranges)


def _case(rng, n_max=60, buckets_max=20, size_max=25):
    n, buckets, sim = _random_case(rng, n_max, buckets_max, size_max)
    # a bucket twice (two bands), to be made distinct across units
    if buckets and rng.random() < 0.5:
        buckets.append(list(buckets[0]))
    off, mem = _flat(buckets)
    return n, off, mem, sim


def _equal(a, b):
    _same_selection(a, b)
    assert a.comparisons == b.comparisons


def _whole(off, mem, n, score, t, limit, fixed, accept_all):
    # the whole run over the distinct buckets (what the bucket stage gives)
    from gpu_dedup.stages.lsh import distinct_buckets
    return greedy_select(*distinct_buckets(off, mem), n, score, t, limit=limit, fixed=fixed,
                         accept_all=accept_all)


@pytest.mark.parametrize("seed", range(6))
def test_ranges_give_the_whole_selection_bit_for_bit(seed):
    rng = np.random.default_rng(500 + seed)
    for it in range(50):
        n, off, mem, sim = _case(rng)
        limit = int(rng.integers(1, 5))
        t = float(rng.choice([0.3, 0.5, 0.8]))
        fixed = int(rng.integers(0, n + 1)) if it % 4 == 0 else 0
        accept_all = it % 7 == 0

        def score(p):
            u, v = unpack(p)
            assert (u < v).all() and not ((u < fixed) & (v < fixed)).any()
            return sim[u, v]
        whole = _whole(off, mem, n, score, t, limit, fixed, accept_all)
        for ranges in (1, 2, 3, int(rng.integers(4, 12))):
            got = select_in_ranges(off, mem, n, score, t, limit=limit, ranges=ranges,
                                   accept_all=accept_all, fixed=fixed,
                                   units=int(rng.integers(1, 4)))
            _equal(got, whole)


@pytest.mark.parametrize("seed", range(3))
def test_ranges_in_rounds_give_the_whole_selection(seed):
    # the device's rule (rounds, here on the CPU kernels) decides each range
    from gpu_dedup.kernels import greedy as K
    rng = np.random.default_rng(600 + seed)

    def rounds(*a, **kw):
        return greedy_rounds(np, K, *a, **kw)
    for it in range(40):
        n, off, mem, sim = _case(rng)
        limit = int(rng.integers(1, 5))
        fixed = int(rng.integers(0, n + 1)) if it % 3 == 0 else 0

        def score(p):
            u, v = unpack(p)
            return sim[u, v]
        whole = _whole(off, mem, n, score, 0.5, limit, fixed, False)
        got = select_in_ranges(off, mem, n, score, 0.5, limit=limit,
                               ranges=int(rng.integers(2, 8)), fixed=fixed, select=rounds)
        _equal(got, whole)


def test_a_crowded_bucket_across_ranges_keeps_its_bound_and_its_count():
    # one bucket of 200 dissimilar members: each compared with the first 3
    # kept ones only, the rest counted as skipped, range after range
    n = 200
    off = np.array([0, n], dtype=np.int64)
    mem = np.arange(n, dtype=np.int64)

    def score(p):
        return np.zeros(p.size)
    whole = greedy_select(off, mem, n, score, 0.5, limit=3)
    got = select_in_ranges(off, mem, n, score, 0.5, limit=3, ranges=9)
    _equal(got, whole)
    assert got.skipped == sum(max(0, i - 3) for i in range(n))


def test_a_range_reads_only_its_own_entries():
    rng = np.random.default_rng(7)
    n, off, mem, _ = _case(rng, n_max=200, buckets_max=60)
    bounds = rank_bounds(n, 5)
    groups = by_group(off, mem, bounds)
    seen = 0
    for g, (o, m) in groups.items():
        # a group's buckets start in its range
        assert (np.searchsorted(bounds, m[o[:-1]], side="right") - 1 == g).all()
        for k, e in group_entries(o, m, bounds).items():
            assert k >= g
            assert ((e[1] >= bounds[k]) & (e[1] < bounds[k + 1])).all()
            np.testing.assert_array_equal(m[o[e[0]] + e[2]], e[1])
            # the next range: the first later range with a member of the bucket
            for b, nxt in zip(e[0], e[3]):
                later = np.searchsorted(bounds, m[o[b]:o[b + 1]], side="right") - 1
                later = later[later > k]
                assert nxt == (later.min() if later.size else -1)
            seen += e.shape[1]
    assert seen == mem.size


def test_heads_are_the_first_members():
    off = np.array([0, 5, 6, 9], dtype=np.int64)
    mem = np.array([1, 2, 3, 4, 5, 7, 8, 9, 10], dtype=np.int64)
    h_off, h = heads_of(off, mem, np.array([0, 2]), 2)
    assert h_off.tolist() == [0, 2, 4] and h.tolist() == [1, 2, 8, 9]


def test_bounds_cover_every_rank():
    for n, k in ((0, 3), (1, 4), (10, 3), (10, 20)):
        b = rank_bounds(n, k)
        assert b[0] == 0 and b[-1] == n and (np.diff(b) >= 0).all()


def test_the_state_is_passed_on_and_dropped():
    rng = np.random.default_rng(11)
    for _ in range(20):
        n, off, mem, sim = _case(rng, n_max=300, buckets_max=80)

        def score(p):
            u, v = unpack(p)
            return sim[u, v]
        whole = _whole(off, mem, n, score, 0.5, 3, 0, False)
        bounds = rank_bounds(n, 7)
        state = RangeState(bounds, 3)
        got = select_in_ranges(off, mem, n, score, 0.5, limit=3, ranges=7, state=state)
        _equal(got, whole)
        # every message was read and dropped; the removed ranks are what is left
        assert not state.inbox
        assert all(k.startswith("removed/") for k in state._items)


def test_messages_merge_by_bucket_and_are_checked():
    st = RangeState(rank_bounds(100, 4), 2)
    st.send(0, 2, np.array([5, 9]), np.array([3, 1]), np.array([0, 2, 3]),
            np.array([10, 11, 12]))
    st.send(1, 2, np.array([7]), np.array([2]), np.array([0, 2]), np.array([30, 31]))
    b, c, kl = st.receive(2)
    assert b.tolist() == [5, 7, 9] and c.tolist() == [3, 2, 1]
    assert kl.tolist() == [10, 11, 30, 31, 12]
    assert not st.inbox and not st._items
    st.send(0, 3, np.array([1]), np.array([2]), np.array([0, 1]), np.array([4]))
    with pytest.raises(RuntimeError, match="range 3: the state passed on by range 0"):
        st.receive(3)
    st.record(0, np.array([3, 8, 20]))
    assert st.kept(np.array([2, 3, 8, 9, 24, 30])).tolist() == [True, False, False, True,
                                                                 True, True]


# -- in the engine ---------------------------------------------------------------

def _whole_and_in_ranges(arr, cfg, monkeypatch, before=None):
    """The run of ``arr`` in one range, then with a range per rank; their
    kept flags, duplicates, similarities and clusters are the same."""
    from gpu_dedup import deduplicate
    from gpu_dedup.engine import select_stage
    one = deduplicate(arr, cfg)
    if before is not None:
        before()
    monkeypatch.setattr(select_stage, "BYTES_PER_LOAD", 1 << 40)   # a range per rank
    many = deduplicate(arr, cfg, partition_bytes=64 << 10)
    for name in ("kept", "duplicate_of", "similarity", "cluster"):
        np.testing.assert_array_equal(getattr(many, name), getattr(one, name), err_msg=name)
    return one, many


@pytest.mark.parametrize("keep,limit", [("first", 2), ("longest", 32)])
def test_a_run_cut_into_many_ranges_gives_the_same_result(monkeypatch, keep, limit):
    import pyarrow as pa

    from gpu_dedup import Config
    from realtext import paragraphs
    texts = list(paragraphs()[:1000])
    texts += [t + " (copy)" for t in texts[:300:3]]         # near copies, later ranks
    arr = pa.array(texts, pa.large_string())
    cfg = Config(shingle="char", ngram=5, normalize="none", threshold=0.8, keep=keep,
                 bucket_limit=limit)
    one, many = _whole_and_in_ranges(arr, cfg, monkeypatch)
    assert one.stats["selection_ranges"] == 1
    assert many.stats["selection_ranges"] > 100
    assert (~one.kept).sum() >= 100
    for name in ("skipped_comparisons", "candidate_edges", "verified_edges", "buckets",
                 "bucket_entries"):
        assert many.stats[name] == one.stats[name], name


def test_scoring_builds_each_earlier_document_once_a_call_whatever_the_batches(monkeypatch):
    """A range's scoring builds the shingle sets of the earlier documents it
    reads in its batches; taken in the order of those documents, each is
    built by one batch of a call, so that cutting the calls into batches of
    a few pairs builds no set more than one batch a call does."""
    import pyarrow as pa

    from gpu_dedup import Config, deduplicate
    from gpu_dedup.engine import runner, select_stage, tasks
    from realtext import paragraphs
    texts = list(paragraphs()[:600])
    texts += [t + " (copy)" for t in texts[:600:2]]         # near copies, later ranks
    texts += [t + " (again)" for t in texts[:600:4]]
    arr = pa.array(texts, pa.large_string())
    cfg = Config(shingle="char", ngram=5, normalize="none", threshold=0.8)
    built, batches = [], []
    real_sets, real_cuts = tasks.sets_of, runner.batch_cuts

    def counting(ctx, be, documents, docs):
        built.append(np.asarray(docs).size)
        return real_sets(ctx, be, documents, docs)

    def cutting(key, size):
        got = real_cuts(key, size)
        batches.append(len(got))
        return got
    monkeypatch.setattr(tasks, "sets_of", counting)
    monkeypatch.setattr(runner, "batch_cuts", cutting)
    # rows of 64 bins, which leave these paragraphs many pairs to score
    monkeypatch.setattr(runner, "bound_words", lambda cfg, mean: BOUND_WORDS)
    whole = deduplicate(arr, cfg)
    monkeypatch.setattr(select_stage, "BYTES_PER_LOAD", 1 << 24)     # ranges of a few ranks
    built.clear()
    one = deduplicate(arr, cfg, partition_bytes=64 << 10)
    assert one.stats["selection_ranges"] > 100
    assert not batches and sum(built) > 3000    # one batch a call; earlier documents built
    once = sum(built)
    built.clear()
    monkeypatch.setattr(runner, "MIN_SCORE_BATCH", 3)
    many = deduplicate(arr, cfg, partition_bytes=64 << 10)
    assert sum(batches) > 3 * len(batches) > 100     # many calls, each in many batches
    assert sum(built) == once, (sum(built), once)
    for name in ("kept", "duplicate_of", "similarity", "cluster"):
        np.testing.assert_array_equal(getattr(many, name), getattr(whole, name), err_msg=name)
        np.testing.assert_array_equal(getattr(one, name), getattr(whole, name), err_msg=name)


def test_batch_cuts_keep_a_key_in_one_batch():
    from gpu_dedup.engine.runner import batch_cuts
    rng = np.random.default_rng(7)
    for _ in range(200):
        key = np.sort(rng.integers(0, rng.integers(1, 60), rng.integers(0, 300)))
        size = int(rng.integers(1, 20))
        cuts = batch_cuts(key, size)
        assert [s for s, _ in cuts] == [0] * bool(cuts) + [e for _, e in cuts[:-1]]
        assert (cuts[-1][1] if cuts else 0) == key.size
        assert all(0 < e - s <= 3 * size for s, e in cuts)
        assert all(e - s >= size for s, e in cuts[:-1])
        batch = np.zeros(key.size, np.int64)
        for i, (s, e) in enumerate(cuts):
            batch[s:e] = i
        for k in np.unique(key):
            at = key == k
            if at.sum() <= size:
                assert np.unique(batch[at]).size == 1, (k, size)


def test_scoring_batches_are_cut_by_the_texts_they_build(monkeypatch):
    """A few documents far longer than the average, first by keep
    priority, and no sets shared: each scoring batch builds the sets of
    texts that fit its share
    (not the number of pairs an average text would allow), and the result
    is the run's that cut nothing."""
    import pyarrow as pa

    from gpu_dedup import Config, deduplicate
    from gpu_dedup.engine import runner, tasks
    from realtext import paragraphs
    base = list(paragraphs()[:300])
    long_ = [" ".join(base[i:i + 40]) for i in range(0, 120, 4)]   # about 40 times longer
    texts = long_ + [t + " (copy)" for t in long_] + base + [t + " !" for t in base[::2]]
    arr = pa.array(texts, pa.large_string())
    cfg = Config(shingle="char", ngram=5, normalize="none", threshold=0.8, keep="longest")
    whole = deduplicate(arr, cfg)
    built = []
    real_sets = tasks.sets_of

    def counting(ctx, be, documents, docs):
        got = real_sets(ctx, be, documents, docs)
        built.append((np.asarray(docs).size, int(got[1][-1])))
        return got
    monkeypatch.setattr(tasks, "sets_of", counting)
    monkeypatch.setattr(runner, "MIN_BATCH_SET_BYTES", 0)
    # no sets shared by the calls (as where they do not fit): every batch
    # builds the sets of its own pairs
    monkeypatch.setattr(runner.Runner, "_shared_sets", lambda self, positions, unit: None)
    part = 256 << 10
    cut = deduplicate(arr, cfg, partition_bytes=part)
    limit = part / 4
    # a set holds about one value (8 bytes) a byte of text, a third of what
    # a batch is charged for: a batch of several documents fits its limit
    assert built and max(n for n, _ in built) > 1
    assert all(8 * values <= limit for n, values in built if n > 2), built
    for name in ("kept", "duplicate_of", "similarity", "cluster"):
        np.testing.assert_array_equal(getattr(cut, name), getattr(whole, name), err_msg=name)


def test_pairs_taken_in_another_order_score_in_theirs(monkeypatch):
    """Pairs sorted by the document they lack before they are cut into
    batches get their scores back in their own order, also when the cut
    leaves them in one batch."""
    import pyarrow as pa

    from gpu_dedup import Config, deduplicate
    from gpu_dedup.engine import runner
    from realtext import paragraphs
    texts = list(paragraphs()[:400])
    texts += [t + " (copy)" for t in texts[:400:2]] + [t[::-1] for t in texts[:100]]
    arr = pa.array(texts, pa.large_string())
    cfg = Config(shingle="char", ngram=5, normalize="none", threshold=0.8)
    whole = deduplicate(arr, cfg)
    cuts = []

    def one_batch(key, size):
        cuts.append(key.size)
        return [(0, int(key.size))]
    monkeypatch.setattr(runner, "MIN_SCORE_BATCH", 1)
    monkeypatch.setattr(runner, "batch_cuts", one_batch)
    got = deduplicate(arr, cfg, partition_bytes=64 << 10)
    assert cuts and max(cuts) > 10
    for name in ("kept", "duplicate_of", "similarity", "cluster"):
        np.testing.assert_array_equal(getattr(got, name), getattr(whole, name), err_msg=name)


def test_the_lacking_document_of_a_pair():
    from gpu_dedup.engine.runner import lacking
    shared = np.array([1, 3], np.int64)                       # positions 1 and 3
    a = np.array([0, 1, 1, 0, 2])
    b = np.array([1, 2, 3, 4, 4])
    edges = np.stack([a, b])
    assert lacking(edges, shared).tolist() == [0, 2, 1, 0, 2]
    assert lacking(edges, None).tolist() == a.tolist()
    far = 1 << 40                                             # past 32 bits
    assert lacking(edges + far, shared + far).tolist() == [x + far for x in [0, 2, 1, 0, 2]]


@pytest.mark.parametrize("n,spread", [(0, 1), (1, 1), (2, 7), (1000, 1), (1000, 3),
                                      (5000, 1 << 40)])
def test_rows_in_finds_what_searchsorted_finds(n, spread):
    from gpu_dedup.engine.tasks import row_in
    rng = np.random.default_rng(n + spread)
    keys = np.unique(rng.integers(0, max(1, n) * spread, size=n)).astype(np.int64)
    queries = rng.integers(-3, max(1, n) * spread + 3, size=4000).astype(np.int64)
    queries[:keys.size // 2] = keys[:keys.size // 2]
    at = np.searchsorted(keys, queries)
    ok = at < keys.size
    ok[ok] = keys[at[ok]] == queries[ok]
    assert np.array_equal(row_in(keys, queries), np.where(ok, at, -1))


@pytest.mark.parametrize("n", [0, 1, 5, 1000, 123_457])
def test_weighted_bounds_cut_where_the_weight_is(n):
    from gpu_dedup.stages.select_ranges import rank_bins, weighted_bounds
    bins = 64
    rng = np.random.default_rng(n)
    w = rng.random(bins)
    w[:4] *= 200                          # the first ranks weigh most
    for ranges in (1, 2, 7, 40):
        b = weighted_bounds(n, ranges, w)
        assert b[0] == 0 and b[-1] == n and (np.diff(b) > 0).all() or n == 0
        assert b.size - 1 <= max(1, ranges)
        edges = rank_bins(n, bins)
        assert set(b.tolist()) <= set(edges.tolist())          # cut where bins end
        if n >= bins and ranges > 1:
            # each range weighs at most its share and one bin more
            cum = np.concatenate([[0], np.cumsum(w)])
            at = np.searchsorted(edges, b)
            assert (np.diff(cum[at]) <= w.sum() / ranges + w.max() + 1e-9).all()
            assert b[1] < rank_bounds(n, ranges)[1]             # the heavy ranks cut finer
    assert weighted_bounds(n, 3, np.zeros(bins)).tolist() == rank_bounds(n, min(3, max(1, n))).tolist()


@pytest.mark.parametrize("keep", ["first", "longest"])
def test_ranges_weigh_the_texts_of_their_own_ranks(monkeypatch, keep):
    """The ranges are cut by the bytes of text of the representatives in
    each bin of ranks, counted chunk by chunk: under keep longest the first
    ranks are the longest texts, and their shingle sets weigh most."""
    import pyarrow as pa

    from gpu_dedup import Config, deduplicate
    from gpu_dedup.engine import select_stage
    from gpu_dedup.stages.select_ranges import RANK_BINS, rank_bins
    from realtext import paragraphs
    texts = list(dict.fromkeys(paragraphs()[:800]))             # distinct: each its own rank
    texts += [t[: len(t) // 2] + " (cut)" for t in texts[:200]]  # shorter, later documents
    arr = pa.array(texts, pa.large_string())
    cfg = Config(shingle="char", ngram=5, normalize="none", threshold=0.8, keep=keep)
    seen = []
    real = select_stage.SelectStage._rank_text

    def recording(self, ranked):
        got = real(self, ranked)
        seen.append(got)
        return got
    monkeypatch.setattr(select_stage.SelectStage, "_rank_text", recording)
    deduplicate(arr, cfg, partition_bytes=64 << 10)
    assert len(seen) == 1
    size = np.array([len(t.encode()) for t in texts], dtype=np.float64)
    if keep == "longest":     # longest first (in code points), then by position
        order = np.lexsort((np.arange(len(texts)), -np.array([len(t) for t in texts])))
    else:
        order = np.arange(len(texts))
    where = np.searchsorted(rank_bins(len(texts)), np.arange(len(texts)), side="right") - 1
    want = np.bincount(where, weights=size[order], minlength=RANK_BINS)
    np.testing.assert_allclose(seen[0], want)
    if keep == "longest":         # the order matters to the check above: the first
                                  # half of the ranks holds most of the text
        half = len(texts) // 2
        assert size[order][:half].sum() > 1.5 * size[order][half:].sum()
