"""Greedy selection: the passes against the plain sequential rule,
on random graphs and on real text, whatever the partitioning; what it
removes, and idempotence."""
from __future__ import annotations


import numpy as np
import pyarrow as pa
import pytest

from gpu_dedup import Config, deduplicate
from gpu_dedup import reference as ref
from gpu_dedup.backend import CpuBackend
from gpu_dedup.stages.normalize import text_buffers
from gpu_dedup.stages.select import greedy_reference, greedy_rounds, greedy_select, unpack
from gpu_dedup.stages.summaries import similarity_summary
from gpu_dedup.stages.signatures import signatures
from realtext import paragraphs



def _random_case(rng, n_max=40, buckets_max=15, size_max=12):
    n = int(rng.integers(1, n_max))
    nb = int(rng.integers(0, buckets_max))
    buckets = [sorted(set(rng.choice(n, size=int(rng.integers(1, min(n, size_max) + 1)),
                                     replace=False).tolist())) for _ in range(nb)]
    sim = rng.random((n, n))
    sim = np.round((sim + sim.T) / 2, 2)          # ties happen
    return n, buckets, sim


def _flat(buckets):
    off = np.concatenate([[0], np.cumsum([len(b) for b in buckets])]).astype(np.int64)
    mem = np.array([m for b in buckets for m in b], dtype=np.int64)
    return off, mem


@pytest.mark.parametrize("seed", range(6))
def test_rounds_equal_the_sequential_rule_on_random_graphs(seed):
    rng = np.random.default_rng(seed)
    for _ in range(60):
        n, buckets, sim = _random_case(rng)
        limit = int(rng.integers(1, 6))
        t = float(rng.choice([0.3, 0.5, 0.6, 0.8]))
        calls = []

        def score(p):
            calls.append(p.size)
            u, v = unpack(p)
            assert (u < v).all()
            return sim[u, v]
        off, mem = _flat(buckets)
        got = greedy_select(off, mem, n, score, t, limit=limit)
        kept, dup, s, skipped = greedy_reference(buckets, n, lambda u, v: sim[u, v], t, limit)
        assert got.kept.tolist() == kept
        assert got.duplicate_of.tolist() == dup
        np.testing.assert_array_equal(got.similarity, np.array(s, dtype=np.float64))
        assert got.skipped == skipped
        # the kept documents are independent in the pairs found similar
        u, v = unpack(got.pairs)
        assert not (got.kept[u] & got.kept[v]).any()
        assert (got.pair_scores >= t).all()
        assert got.scored == sum(calls) and got.comparisons <= got.scored


def _same_selection(a, b):
    assert a.kept.tolist() == b.kept.tolist()
    assert a.duplicate_of.tolist() == b.duplicate_of.tolist()
    np.testing.assert_array_equal(a.similarity, b.similarity)
    np.testing.assert_array_equal(a.pairs, b.pairs)
    np.testing.assert_array_equal(a.pair_scores, b.pair_scores)
    assert a.skipped == b.skipped


@pytest.mark.parametrize("seed", range(4))
def test_parallel_rounds_equal_the_sequential_passes_bit_for_bit(seed):
    # the device's algorithm, on the CPU kernels: every output the same,
    # with ranks kept already, without verification, crowded buckets
    from gpu_dedup.kernels import greedy as K
    rng = np.random.default_rng(40 + seed)
    for it in range(80):
        n, buckets, sim = _random_case(rng, n_max=70, size_max=30)
        limit = int(rng.integers(1, 6))
        t = float(rng.choice([0.3, 0.5, 0.8]))
        fixed = int(rng.integers(0, n + 1)) if it % 3 == 0 else 0
        accept_all = it % 5 == 0
        asked = []

        def score(p):
            u, v = unpack(p)
            assert (u < v).all() and not ((u < fixed) & (v < fixed)).any()
            asked.append(p)
            return sim[u, v]
        off, mem = _flat(buckets)
        a = greedy_select(off, mem, n, score, t, limit=limit, fixed=fixed, accept_all=accept_all)
        asked.clear()
        b = greedy_rounds(np, K, off, mem, n, score, t, limit=limit, fixed=fixed,
                          accept_all=accept_all)
        _same_selection(a, b)
        pairs = np.concatenate(asked) if asked else np.zeros(0, np.uint64)
        assert b.scored == pairs.size == np.unique(pairs).size      # each pair once
        assert a.comparisons == b.comparisons == b.scored <= a.scored
        if not fixed and not accept_all:
            kept, dup, _, _ = greedy_reference(buckets, n, lambda u, v: sim[u, v], t, limit)
            assert b.kept.tolist() == kept and b.duplicate_of.tolist() == dup


def test_same_as_sees_one_changed_result_and_ignores_how_it_was_computed():
    import dataclasses
    sim = np.full((6, 6), 0.9)
    a = greedy_select(np.array([0, 6]), np.arange(6), 6, lambda p: sim[unpack(p)], 0.5)
    assert a.same_as(dataclasses.replace(a, rounds=9, scored=99, where="device"))
    dup = a.duplicate_of.copy()
    dup[3] = 4
    assert not a.same_as(dataclasses.replace(a, duplicate_of=dup))
    assert not a.same_as(dataclasses.replace(a, skipped=a.skipped + 1))
    assert not a.same_as(dataclasses.replace(a, pair_scores=a.pair_scores + 1e-12))


def test_rounds_out_of_room_say_so():
    from gpu_dedup.kernels import greedy as K
    off, mem = np.array([0, 50]), np.arange(50)
    got = greedy_rounds(np, K, off, mem, 50, lambda p: np.zeros(p.size), 0.5, limit=4,
                        room=100)
    assert got is None


@pytest.mark.parametrize("seed", range(3))
def test_the_pairs_written_are_the_windows_and_those_the_rule_compares(seed):
    # written: the similar pairs of each member with the first 2 * limit
    # members of its buckets, and with the first `limit` kept members before
    # it; not those a pass scored ahead against members then removed (they
    # depend on how passes fell), nor two kept documents
    rng = np.random.default_rng(70 + seed)
    for _ in range(60):
        n, buckets, sim = _random_case(rng, n_max=60, size_max=25)
        limit = int(rng.integers(1, 5))
        t = float(rng.choice([0.3, 0.5]))
        kept, _, _, _ = greedy_reference(buckets, n, lambda u, v: sim[u, v], t, limit)
        want = set()
        kept_in = [[] for _ in buckets]
        for v in range(n):
            for bi, b in enumerate(buckets):
                if v in b:
                    pos = b.index(v)
                    want.update((u, v) for u in b[:min(pos, 2 * limit)])
                    want.update((u, v) for u in kept_in[bi][:limit])
            for bi, b in enumerate(buckets):
                if v in b and kept[v]:
                    kept_in[bi].append(v)
        want = sorted((u, v) for u, v in want if sim[u, v] >= t and not (kept[u] and kept[v]))
        got = greedy_select(*_flat(buckets), n, lambda p: sim[unpack(p)], t, limit=limit)
        u, v = unpack(got.pairs)
        assert list(zip(u.tolist(), v.tolist())) == want


def test_rounds_do_not_depend_on_the_order_of_buckets():
    rng = np.random.default_rng(11)
    for _ in range(40):
        n, buckets, sim = _random_case(rng)

        def score(p):
            u, v = unpack(p)
            return sim[u, v]
        a = greedy_select(*_flat(buckets), n, score, 0.5, limit=3)
        perm = rng.permutation(len(buckets))
        b = greedy_select(*_flat([buckets[i] for i in perm]), n, score, 0.5, limit=3)
        assert a.kept.tolist() == b.kept.tolist()
        assert a.duplicate_of.tolist() == b.duplicate_of.tolist()
        assert a.comparisons == b.comparisons


def test_a_chain_keeps_every_other_document():
    # 0 ~ 1 ~ 2 ~ 3 ~ 4 along a chain, nothing else similar: greedy keeps
    # 0, 2, 4 and each removed one names its kept neighbour before it
    n = 5
    sim = np.zeros((n, n))
    for i in range(n - 1):
        sim[i, i + 1] = sim[i + 1, i] = 0.9

    def score(p):
        u, v = unpack(p)
        return sim[u, v]
    got = greedy_select(np.array([0, 5]), np.arange(5), n, score, 0.8)
    assert got.kept.tolist() == [True, False, True, False, True]
    assert got.duplicate_of.tolist() == [-1, 0, -1, 2, -1]
    # each scored once against every member before it, in one pass
    assert got.comparisons == 10 and got.rounds == 1


def test_a_crowded_bucket_is_bounded_and_counted():
    # 30 mutually dissimilar documents in one bucket, limit 4: each is
    # decided on the first 4 kept ones, and scored ahead with at most 4
    # more while those are undecided; a pass or two, not one a document
    n = 30
    got = greedy_select(np.array([0, n]), np.arange(n), n,
                        lambda p: np.zeros(p.size), 0.5, limit=4)
    assert got.kept.all()
    assert sum(min(i, 4) for i in range(n)) <= got.comparisons <= sum(min(i, 8) for i in range(n))
    assert got.rounds <= 3
    assert got.skipped == sum(max(0, i - 4) for i in range(n))
    with pytest.raises(ValueError, match="limit"):
        greedy_select(np.array([0, 2]), np.arange(2), 2, lambda p: np.zeros(p.size), 0.5,
                      limit=0)


def test_similarity_summary_counts_what_is_below_the_threshold():
    s = similarity_summary(np.array([0.5, 0.79, 0.8, 0.95, 1.0]), 0.8)
    assert s["removed"] == 5 and s["below_threshold"] == 2
    assert s["min"] == 0.5 and s["median"] == 0.8
    assert sum(s["histogram"]["counts"]) == 5
    empty = similarity_summary(np.zeros(0), 0.8)
    assert empty["removed"] == 0 and empty["median"] is None


# -- on real text --------------------------------------------------------------

def _paragraphs(limit):
    return list(paragraphs()[:limit])


def _sequential(texts, cfg, limit):
    """Plain Python: identical texts first, then buckets of the band keys, then
    the sequential greedy rule over exact Jaccard of Python shingle sets."""
    sets = [ref.shingles(t, cfg.shingle, cfg.ngram) for t in texts]
    first: dict = {}
    reps = []
    for i, t in enumerate(texts):
        if sets[i] and t not in first:
            first[t] = i
            reps.append(i)
    be = CpuBackend()
    off, data = text_buffers(pa.array(texts, pa.large_string()))
    sig, _ = signatures(be, off, data, np.array(reps, dtype=np.int64), cfg)
    keys = be.band_keys(sig, cfg.bands, cfg.rows)
    buckets = []
    for j in range(cfg.bands):
        groups: dict = {}
        for r in range(len(reps)):
            groups.setdefault(int(keys[r, j]), []).append(r)
        buckets += [g for g in groups.values() if len(g) > 1]
    buckets = [list(b) for b in dict.fromkeys(tuple(b) for b in buckets)]   # the same members: once

    def score(u, v):
        return ref.jaccard(sets[reps[u]], sets[reps[v]])
    kept_r, dup_r, _, skipped = greedy_reference(buckets, len(reps), score,
                                                 float(cfg.threshold), limit)
    kept = [True] * len(texts)
    dup = [-1] * len(texts)
    for r, i in enumerate(reps):
        if not kept_r[r]:
            kept[i], dup[i] = False, reps[dup_r[r]]
    for i, t in enumerate(texts):
        g = first.get(t)
        if g is not None and g != i:
            kept[i] = False
            dup[i] = g if kept[g] else dup[g]
    return kept, dup, skipped


@pytest.mark.parametrize("limit", [32, 2])
def test_real_text_equals_the_sequential_rule_whatever_the_partitioning(limit):
    texts = _paragraphs(2500)
    cfg = Config(shingle="char", ngram=5, normalize="none", num_perm=128, threshold=0.8,
                 bucket_limit=limit).resolved()
    kept, dup, skipped = _sequential(texts, cfg, limit)
    assert kept.count(False) >= 200
    arr = pa.array(texts, pa.large_string())
    runs = [deduplicate(arr, cfg),
            deduplicate(arr, cfg, partition_bytes=64 << 10),
            deduplicate(arr, cfg, scheduler="threads", workers=2, partition_bytes=128 << 10)]
    for r in runs:
        assert r.kept.tolist() == kept
        assert r.duplicate_of.tolist() == dup
        assert r.stats["skipped_comparisons"] == skipped
    if limit == 2:
        assert skipped > 0


def test_deduplicating_the_kept_documents_again_removes_nothing():
    texts = _paragraphs(4000)
    for keep in ("first", "longest"):
        cfg = Config(shingle="char", ngram=5, normalize="none", threshold=0.8, keep=keep)
        r = deduplicate(pa.array(texts, pa.large_string()), cfg)
        assert (~r.kept).sum() >= 300
        again = [t for t, k in zip(texts, r.kept) if k]
        r2 = deduplicate(pa.array(again, pa.large_string()), cfg)
        assert r2.kept.all(), f"keep={keep}: {(~r2.kept).sum()} removed on the second run"


def test_keep_longest_keeps_the_longest_of_identical_and_near_texts():
    base = "the quick brown fox jumps over the lazy dog near the river bank " * 3
    texts = [base, base + "!", base.replace(" ", "   "), base + "!!",
             "unrelated words entirely here"]
    # after whitespace folding 0 and 2 are identical texts, 2 the longest of
    # all in code points; 1 and 3 are near copies of them
    r = deduplicate(texts, Config(threshold=0.8, keep="longest"))
    assert r.kept.tolist() == [False, False, True, False, True]
    assert r.duplicate_of.tolist() == [2, 2, -1, 2, -1]
    assert r.similarity[0] == 1.0 and r.similarity[1] < 1.0
    f = deduplicate(texts, Config(threshold=0.8, keep="first"))
    assert f.kept.tolist() == [True, False, False, False, True]
    assert f.duplicate_of.tolist() == [-1, 0, 0, 0, -1]
    assert f.similarity[2] == 1.0 and f.stats["exact_removed"] == 1
    assert np.isnan(f.similarity[0])


def test_components_name_their_kept_document_and_its_similarity():
    base = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu"
    words = base.split()
    chain = [" ".join(words[i:] + words[:i]) for i in range(0, 4)]
    r = deduplicate(chain, Config(shingle="word", ngram=1, threshold=0.8,
                                  cluster="components"))
    g = deduplicate(chain, Config(shingle="word", ngram=1, threshold=0.8))
    # rotations of one word list: identical sets of words, so all one cluster
    assert r.kept.sum() == 1 and g.kept.sum() == 1
    assert (r.duplicate_of[~r.kept] == np.flatnonzero(r.kept)[0]).all()
    assert np.allclose(r.similarity[~r.kept], 1.0)


def test_jaccard_at_least_is_exact_from_the_floor_up():
    from gpu_dedup.kernels import cpu
    rng = np.random.default_rng(4)
    sets = [np.unique(rng.integers(1, 60, size=int(rng.integers(0, 40)))).astype(np.uint64)
            for _ in range(80)]
    off = np.concatenate([[0], np.cumsum([s.size for s in sets])]).astype(np.int64)
    vals = np.concatenate(sets)
    ia = rng.integers(0, 80, size=3000).astype(np.int64)
    ib = rng.integers(0, 80, size=3000).astype(np.int64)
    exact = cpu.jaccard_edges(off, vals, ia, ib)
    for floor in (0.3, 0.5, 0.8, 1.0):
        got = cpu.jaccard_edges_at_least(off, vals, ia, ib, floor)
        hi = exact >= floor
        assert hi.any() and (~hi).any()
        np.testing.assert_array_equal(got[hi], exact[hi])
        assert (got[~hi] < floor).all()


@pytest.mark.parametrize("seed", range(4))
def test_fixed_kept_documents_give_the_whole_run(seed):
    # a run over A then B, restricted to B, equals a run over A's kept
    # documents (fixed: already kept) then B: what an index query relies on
    rng = np.random.default_rng(100 + seed)
    for _ in range(50):
        n, buckets, sim = _random_case(rng, n_max=50)
        m = int(rng.integers(0, n + 1))            # A = ranks 0 .. m-1
        limit = int(rng.integers(1, 5))
        t = float(rng.choice([0.3, 0.5, 0.8]))
        kept, dup, s, _ = greedy_reference(buckets, n, lambda u, v: sim[u, v], t, limit)
        a_kept = [i for i in range(m) if kept[i]]
        docs = a_kept + list(range(m, n))          # the new ranks, in order
        new = {d: r for r, d in enumerate(docs)}
        sub = [sorted(new[x] for x in b if x in new) for b in buckets]
        sub = [b for b in sub if b]
        ss = sim[np.ix_(docs, docs)]

        def score(p, ss=ss):
            u, v = unpack(p)
            assert not ((u < len(a_kept)) & (v < len(a_kept))).any(), "fixed pairs scored"
            return ss[u, v]
        got = greedy_select(*_flat(sub), len(docs), score, t, limit=limit, fixed=len(a_kept))
        for r, d in enumerate(docs):
            assert got.kept[r] == kept[d]
            want = -1 if dup[d] < 0 else new[dup[d]]
            assert got.duplicate_of[r] == want
