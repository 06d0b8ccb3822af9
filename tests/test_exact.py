"""Exact duplicates by fingerprint: the first equal active row, checked
against a plain dictionary, including rows that share the table slot."""
from __future__ import annotations

import numpy as np
import pytest

from gpu_dedup.stages.exact import exact_representatives


def oracle(fp: np.ndarray, active: np.ndarray) -> np.ndarray:
    first: dict = {}
    rep = np.full(fp.shape[0], -1, dtype=np.int64)
    for i, (h0, h1) in enumerate(fp.tolist()):
        if active[i]:
            rep[i] = first.setdefault((h0, h1), i)
    return rep


@pytest.mark.parametrize("seed", range(4))
def test_first_equal_matches_a_dictionary(seed):
    rng = np.random.default_rng(seed)
    n = 3000
    # few distinct values, and first words that agree in their low bits while
    # the second words differ, so probing runs through occupied slots
    pool = rng.integers(0, 2 ** 63, size=(40, 2), dtype=np.int64).astype(np.uint64)
    pool[:20, 0] = (pool[:20, 0] >> np.uint64(20)) << np.uint64(20)
    pool[20:30, 0] = pool[0, 0]
    fp = pool[rng.integers(0, pool.shape[0], size=n)]
    active = rng.random(n) < 0.8
    got = exact_representatives(fp, active)
    np.testing.assert_array_equal(got, oracle(fp, active))


def test_first_equal_edge_cases():
    assert exact_representatives(np.zeros((0, 2), np.uint64), np.zeros(0, bool)).shape == (0,)
    fp = np.array([[5, 6], [5, 6], [5, 7]], dtype=np.uint64)
    np.testing.assert_array_equal(exact_representatives(fp, np.array([False, True, True])),
                                  [-1, 1, 2])
    np.testing.assert_array_equal(exact_representatives(fp, np.ones(3, bool)), [0, 0, 2])
