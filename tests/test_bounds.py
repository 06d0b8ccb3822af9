"""Bound rows: an upper bound on a pair's Jaccard from 68 bytes a document,
never below the exact value; and greedy selection that settles pairs with
them decides exactly what it decides when it scores every pair."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from gpu_dedup import Config, deduplicate
from gpu_dedup.backend import CpuBackend
from gpu_dedup.engine import bounds, layout, tasks
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


def _rows_and_sets(texts, word: bool, n: int):
    off, data = text_buffers(pa.array(texts, pa.large_string()))
    docs = np.arange(len(texts), dtype=np.int64)
    out = np.empty((docs.size, BOUND_WORDS), np.uint32)
    K.set_bounds(off, data, docs, word, n, out)
    sets = CpuBackend().shingle_sets(off, data, word, n, docs)
    return out, sets


@pytest.mark.parametrize("word,n", [(False, 5), (False, 3), (True, 2), (True, 5)])
def test_the_bound_is_never_below_the_exact_jaccard(word, n):
    texts = _texts()
    rows, sets = _rows_and_sets(texts, word, n)
    sizes = np.diff(sets[1])
    np.testing.assert_array_equal(rows[:, -1], sizes)     # the distinct shingles
    counts = rows[:, :-1].view(np.uint8).reshape(-1, BOUND_BINS).astype(np.int64)
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


@pytest.mark.parametrize("keep,partition", [("first", None), ("longest", 64 << 10)])
def test_settling_pairs_by_their_bounds_changes_no_result(monkeypatch, keep, partition):
    arr = _footer_corpus()
    cfg = Config(shingle="char", ngram=5, normalize="none", threshold=0.8, keep=keep,
                 num_perm=64, bands=16, rows=4)
    with_bounds = deduplicate(arr, cfg, partition_bytes=partition)
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
