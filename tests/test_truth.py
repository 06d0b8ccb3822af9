"""The exact set-similarity join against brute force and a plain-Python oracle."""
from __future__ import annotations

import numpy as np
import pytest

from gpu_dedup import truth
from gpu_dedup.errors import ConfigError
from gpu_dedup.reference import shingles


def _csr(sets):
    off = np.zeros(len(sets) + 1, np.int64)
    off[1:] = np.cumsum([len(s) for s in sets])
    vals = np.array([v for s in sets for v in sorted(s)], dtype=np.uint64)
    return off, vals


def _python_pairs(sets, t):
    out = []
    for i in range(len(sets)):
        for j in range(i + 1, len(sets)):
            a, b = set(sets[i]), set(sets[j])
            if a and b and len(a & b) / len(a | b) >= t:
                out.append((i, j, len(a & b) / len(a | b)))
    return out


def _pairs(result):
    a, b, s = result
    return list(zip(a.tolist(), b.tolist(), s.tolist()))


def _random_sets(rng, n, universe, max_len, families):
    """Sets drawn around a few base sets, so that many pairs are similar."""
    bases = [set(rng.integers(0, universe, size=rng.integers(0, max_len)).tolist())
             for _ in range(families)]
    sets = []
    for _ in range(n):
        s = set(bases[rng.integers(families)])
        for _ in range(int(rng.integers(0, 4))):
            if s and rng.random() < 0.5:
                s.discard(sorted(s)[rng.integers(len(s))])
            else:
                s.add(int(rng.integers(0, universe)))
        sets.append(s)
    return sets


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("threshold", [0.1, 0.3, 0.5, 0.7, 0.8, 0.9, 1.0])
def test_join_equals_brute_force_on_random_sets(seed, threshold):
    rng = np.random.default_rng(seed)
    sets = _random_sets(rng, int(rng.integers(2, 120)), universe=60 + 20 * seed,
                        max_len=4 + 4 * seed, families=max(1, seed * 3))
    off, vals = _csr(sets)
    join = _pairs(truth.similarity_join(off, vals, threshold))
    brute = _pairs(truth.brute_force_join(off, vals, threshold))
    assert join == brute == _python_pairs(sets, threshold)


def test_random_corpora_have_similar_pairs():
    # the parametrised test above is only meaningful if the draws contain pairs
    total = 0
    for seed in range(8):
        rng = np.random.default_rng(seed)
        sets = _random_sets(rng, int(rng.integers(2, 120)), 60 + 20 * seed, 4 + 4 * seed,
                            max(1, seed * 3))
        total += len(_python_pairs(sets, 0.7))
    assert total > 100


def test_edge_cases():
    sets = [set(), {5}, {5}, {5, 6}, set(), {1, 2, 3, 4}, {1, 2, 3, 4}, {1, 2, 3}, {9}]
    off, vals = _csr(sets)
    for t in (0.5, 0.75, 1.0):
        assert _pairs(truth.similarity_join(off, vals, t)) == _python_pairs(sets, t)
        assert _pairs(truth.brute_force_join(off, vals, t)) == _python_pairs(sets, t)
    # t = 1.0: only identical non-empty sets; empty sets are nobody's duplicate
    a, b, s = truth.similarity_join(off, vals, 1.0)
    assert list(zip(a.tolist(), b.tolist())) == [(1, 2), (5, 6)]
    assert s.tolist() == [1.0, 1.0]
    # a single set, all-empty sets, no sets
    for sets in ([{1, 2}], [set(), set()], []):
        off, vals = _csr(sets)
        assert truth.similarity_join(off, vals, 0.5)[0].size == 0
        assert truth.brute_force_join(off, vals, 0.5)[0].size == 0


def test_boundary_similarity_is_kept():
    # 4/5 = 0.8 exactly at t = 0.8, and 3/4 just below
    sets = [{1, 2, 3, 4, 5}, {1, 2, 3, 4}, {1, 2, 3, 4, 5, 6}, {1, 2, 3}]
    off, vals = _csr(sets)
    got = _pairs(truth.similarity_join(off, vals, 0.8))
    assert got == _python_pairs(sets, 0.8)
    assert (0, 1, 0.8) in got and all((p[0], p[1]) != (1, 3) for p in got)


def test_bad_threshold():
    off, vals = _csr([{1}, {1}])
    for t in (0.0, -0.1, 1.5):
        with pytest.raises(ConfigError):
            truth.similarity_join(off, vals, t)


def test_shingle_sets_match_reference_shingles():
    texts = ["the cat sat on the mat", "", "abc", "a  b\tc d e", "naïve café ☕ déjà vu"]
    from gpu_dedup.reference import base_hashes
    for kind, n in (("char", 3), ("char", 5), ("word", 2)):
        off, vals = truth.shingle_sets(texts, kind, n, "none")
        for i, t in enumerate(texts):
            got = set(vals[off[i]:off[i + 1]].tolist())
            assert got == base_hashes(t, kind, n)
            assert len(got) == len(shingles(t, kind, n))


def test_exact_truth_on_text_matches_python_jaccard():
    rng = np.random.default_rng(3)
    words = [f"w{i}" for i in range(40)]
    base = [" ".join(rng.choice(words, size=int(rng.integers(3, 30)))) for _ in range(30)]
    texts = []
    for _ in range(200):
        t = base[rng.integers(len(base))].split()
        for _ in range(int(rng.integers(0, 3))):
            t[rng.integers(len(t))] = words[rng.integers(len(words))]
        texts.append(" ".join(t))
    texts += ["", "", texts[0]]
    for t in (0.5, 0.8):
        got = truth.exact_truth(texts, "char", 4, "none", t)
        brute = truth.exact_truth(texts, "char", 4, "none", t, method="brute")
        assert np.array_equal(got.pair_a, brute.pair_a)
        assert np.array_equal(got.pair_b, brute.pair_b)
        # oracle over distinct texts, with Python's own shingle sets
        first = {}
        for i, x in enumerate(texts):
            first.setdefault(x, i)
        reps = sorted(set(first.values()))
        sets = [shingles(texts[i], "char", 4) for i in reps]
        expect = [(reps[i], reps[j]) for i, j, _ in _python_pairs(sets, t)]
        assert list(zip(got.pair_a.tolist(), got.pair_b.tolist())) == expect
        assert got.rep.tolist() == [first[x] for x in texts]
        assert got.empty[-2] and got.empty[-3] and not got.empty[0]
        labels = got.components()
        assert all(labels[a] == labels[b] for a, b in expect)
        assert got.removed == len(texts) - len(set(labels.tolist()))
        assert got.identical_removed == len(texts) - len(first)
        assert len(expect) > 10


def test_result_does_not_depend_on_work_split():
    rng = np.random.default_rng(11)
    sets = _random_sets(rng, 400, universe=120, max_len=30, families=25)
    off, vals = _csr(sets)
    ref = _pairs(truth.brute_force_join(off, vals, 0.6))
    assert len(ref) > 100
    for threads in (1, 3, 64):
        assert _pairs(truth.similarity_join(off, vals, 0.6, threads=threads)) == ref
