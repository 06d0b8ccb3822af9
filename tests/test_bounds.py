"""Bound rows: an upper bound on a pair's Jaccard from 68 bytes a document
(more for long texts), never below the exact value; and greedy selection
that settles pairs with them decides exactly what it decides when it scores
every pair."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from gpu_dedup import Config, deduplicate
from gpu_dedup.backend import CpuBackend
from gpu_dedup.engine import bounds, layout, tasks
from gpu_dedup.engine import runner as runner_module
from gpu_dedup.engine.records import Blocks
from gpu_dedup.kernels import cpu as K
from gpu_dedup.kernels.primitives import BOUND_BINS, BOUND_WORDS
from gpu_dedup.stages.normalize import text_buffers
from realtext import paragraphs

FOOTERS = ["Comments are closed.", "All content is available under a free license.",
           "Read more. Click here to continue.", "Follow us on social media for the news."]


def _texts(seed: int = 0) -> list:
    """Short lines that share footers (chance collisions), near copies of
    them, real paragraphs and their near copies, long documents."""
    rng = np.random.default_rng(seed)
    words = [w for p in paragraphs()[:200] for w in p.split()][:3000]
    short = [" ".join(rng.choice(words, rng.integers(2, 9))) + " " + FOOTERS[i % 4]
             for i in range(400)]
    near = [t.replace(" ", "  ", 1) + "!" for t in short[:100]]
    paras = list(paragraphs()[200:500])
    edited = [p[: len(p) // 2] + " and " + p[len(p) // 2:] for p in paras[:80]]
    long_ = [" ".join(paras[i:i + 30]) for i in range(0, 120, 6)]
    return short + near + paras + edited + long_ + ["", "a", "abcd"]


def _rows_and_sets(texts, word: bool, n: int, words: int = BOUND_WORDS):
    off, data = text_buffers(pa.array(texts, pa.large_string()))
    docs = np.arange(len(texts), dtype=np.int64)
    out = np.empty((docs.size, words), np.uint32)
    K.set_bounds(off, data, docs, word, n, out)
    sets = CpuBackend().shingle_sets(off, data, word, n, docs)
    return out, sets


@pytest.mark.parametrize("words", [BOUND_WORDS, 257])
@pytest.mark.parametrize("word,n", [(False, 5), (False, 3), (True, 2), (True, 5)])
def test_the_bound_is_never_below_the_exact_jaccard(word, n, words):
    texts = _texts()
    rows, sets = _rows_and_sets(texts, word, n, words)
    sizes = np.diff(sets[1])
    np.testing.assert_array_equal(rows[:, -1], sizes)     # the distinct shingles
    counts = rows[:, :-1].view(np.uint8).reshape(-1, (words - 1) * 4).astype(np.int64)
    small = sizes < 255
    np.testing.assert_array_equal(counts.sum(1)[small], sizes[small])  # each counted once
    m = len(texts)
    ia, ib = np.triu_indices(m, 1)
    ia, ib = ia.astype(np.int64), ib.astype(np.int64)
    exact = CpuBackend().jaccard_rows(sets, ia, ib, 0.0)
    upper = K.jaccard_upper_bounds(rows, ia, ib)
    assert (upper >= exact).all(), np.flatnonzero(upper < exact)[:5]
    similar = exact >= 0.8
    assert similar.sum() > 150                            # the copies are there
    assert not (upper[similar] < 0.8).any()
    # the chance pairs of short lines with one footer: most settled by the bound
    footer = (ia < 400) & (ib < 400) & (ia % 4 == ib % 4)
    assert (upper[footer & (exact < 0.5)] < 0.8).mean() > 0.9


def _long_variants():
    """Long documents of 30 shared real paragraphs and 5 of their own:
    pairs from about 0.2 to 0.9 Jaccard, the kind a corpus of licences or
    manual pages brings to the same buckets."""
    paras = paragraphs()[:400]
    rng = np.random.default_rng(7)
    common = " ".join(paras[:30])
    return [common + " " + " ".join(paras[i] for i in rng.choice(np.arange(30, 400), 5))
            for _ in range(40)]


def test_wide_rows_settle_the_long_pairs_that_64_bins_cannot():
    """Two long texts fill 64 bins alike whatever they share, so the bound
    of a pair at 0.55-0.75 mostly stays above 0.8; 1,024 bins settle most
    of them, and neither bound is ever below the exact value."""
    texts = _long_variants()
    ia, ib = (x.astype(np.int64) for x in np.triu_indices(len(texts), 1))
    narrow, sets = _rows_and_sets(texts, False, 5)
    wide, _ = _rows_and_sets(texts, False, 5, 257)
    exact = CpuBackend().jaccard_rows(sets, ia, ib, 0.0)
    up64 = K.jaccard_upper_bounds(narrow, ia, ib)
    up1024 = K.jaccard_upper_bounds(wide, ia, ib)
    assert (up64 >= exact).all() and (up1024 >= exact).all()
    assert (up1024 <= up64).all()
    mid = (exact >= 0.55) & (exact < 0.75)
    assert mid.sum() > 200
    assert (up64[mid] < 0.8).mean() < 0.4
    assert (up1024[mid] < 0.8).mean() > 0.85
    assert not (up1024[exact >= 0.8] < 0.8).any()


def test_the_width_of_bound_rows_grows_with_the_texts():
    """64 bins for short texts, a power of two more as the mean text grows
    (word shingles counted from about 6 bytes a word), at most 1,024."""
    char, word = Config(shingle="char", ngram=5), Config(shingle="word", ngram=2)
    assert bounds.bound_words(char, 57) == BOUND_WORDS == 17
    assert bounds.bound_words(char, 512) == 17
    assert bounds.bound_words(char, 660) == 33                 # 128 bins
    assert bounds.bound_words(char, 6809) == 257               # 1,024 bins
    assert bounds.bound_words(char, 10 ** 7) == 257
    assert bounds.bound_words(word, 3000) == 17
    assert bounds.bound_words(word, 6809) == 65                # 256 bins
    with pytest.raises(ValueError, match="width"):
        K.jaccard_upper_bounds(np.zeros((2, 20), np.uint32), np.zeros(1, np.int64),
                               np.zeros(1, np.int64))


def test_a_pair_at_the_threshold_itself_is_not_settled():
    """The bound divides as the exact score does: a pair whose intersection
    and sizes give exactly 0.8 has a bound of exactly 0.8."""
    rows = np.zeros((2, BOUND_WORDS), np.uint32)
    # 28 shared shingles in bin 0, 4 and 3 others in bins 1 and 2
    rows[0, 0] = 28 | (4 << 8)
    rows[1, 0] = 28 | (3 << 16)
    rows[0, -1], rows[1, -1] = 32, 31
    ub = K.jaccard_upper_bounds(rows, np.array([0], np.int64), np.array([1], np.int64))
    assert ub[0] == 28 / (32 + 31 - 28) == 0.8


def test_full_bins_bound_nothing():
    """A bin counted 255 or more in both documents cannot bound their
    intersection: the bound is infinite; against a short document, finite."""
    texts = [" ".join(paragraphs()[:400]), " ".join(paragraphs()[1:401]), "a short line"]
    rows, sets = _rows_and_sets(texts, False, 5)
    counts = rows[:, :-1].view(np.uint8).reshape(-1, BOUND_BINS)
    assert (counts[:2] == 255).all()
    ia, ib = np.array([0, 0], np.int64), np.array([1, 2], np.int64)
    ub = K.jaccard_upper_bounds(rows, ia, ib)
    assert ub[0] == np.inf
    assert CpuBackend().jaccard_rows(sets, ia[1:], ib[1:], 0.0)[0] <= ub[1] < 0.01


def _footer_corpus():
    texts = _texts(1)
    rng = np.random.default_rng(3)
    order = rng.permutation(len(texts))
    return pa.array([texts[i] for i in order], pa.large_string())


@pytest.mark.parametrize("words", [None, 257])
@pytest.mark.parametrize("keep,partition", [("first", None), ("longest", 64 << 10)])
def test_settling_pairs_by_their_bounds_changes_no_result(monkeypatch, keep, partition, words):
    """With the rows the corpus takes, and with rows of 1,024 bins forced."""
    arr = _footer_corpus()
    cfg = Config(shingle="char", ngram=5, normalize="none", threshold=0.8, keep=keep,
                 num_perm=64, bands=16, rows=4)
    made = []
    real = tasks.bound_rows
    monkeypatch.setattr(tasks, "bound_rows", lambda *a: made.append(a[-1]) or real(*a))
    if words is not None:
        monkeypatch.setattr(runner_module, "bound_words", lambda cfg, mean: words)
    with_bounds = deduplicate(arr, cfg, partition_bytes=partition)
    assert made and set(made) == {words or BOUND_WORDS}
    assert with_bounds.stats["selection_bounded"] > 0.5 * with_bounds.stats["selection_scored"]
    monkeypatch.setattr(tasks, "uses_bounds", lambda cfg, be: False)
    every_pair = deduplicate(arr, cfg, partition_bytes=partition)
    assert every_pair.stats["selection_bounded"] == 0
    assert (~every_pair.kept).sum() > 100
    for name in ("kept", "duplicate_of", "similarity", "cluster"):
        np.testing.assert_array_equal(getattr(with_bounds, name), getattr(every_pair, name),
                                      err_msg=name)
    for name in ("candidate_edges", "verified_edges", "skipped_comparisons"):
        assert with_bounds.stats[name] == every_pair.stats[name], name
    for name in ("pair_a", "pair_b", "pair_similarity", "pair_exact"):
        np.testing.assert_array_equal(getattr(with_bounds, name), getattr(every_pair, name),
                                      err_msg=name)


class _Store:
    def __init__(self, arrays):
        self.arrays = arrays

    def load_npy(self, name, mmap=False):
        return self.arrays[name]


def test_bound_rows_read_back_are_checked():
    blocks = Blocks.of([{"key": layout.block_key(0), "chunk": 0, "r0": 0, "r1": 3}])
    name = layout.signature_file(layout.block_key(0), layout.BOUNDS)
    good = np.arange(3 * BOUND_WORDS, dtype=np.uint32).reshape(3, BOUND_WORDS)
    got = bounds.gather_rows(_Store({name: good}), blocks, np.array([0, 2]), layout.BOUNDS)
    np.testing.assert_array_equal(got, good[[0, 2]])
    with pytest.raises(RuntimeError, match="bounds"):
        bounds.gather_rows(_Store({name: good[:2]}), blocks, np.array([0]), layout.BOUNDS)
    # a block whose rows are wider than the others' (made by another width)
    two = Blocks.of([{"key": layout.block_key(0), "chunk": 0, "r0": 0, "r1": 3},
                     {"key": layout.block_key(3), "chunk": 0, "r0": 3, "r1": 5}])
    other = layout.signature_file(layout.block_key(3), layout.BOUNDS)
    wide = np.zeros((2, 33), np.uint32)
    with pytest.raises(RuntimeError, match="33 columns where other blocks have 17"):
        bounds.gather_rows(_Store({name: good, other: wide}), two, np.array([1, 4]),
                           layout.BOUNDS)
