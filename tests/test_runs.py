"""The intersection of two sorted runs: the full intersection wherever it
reaches the count asked for, a smaller count wherever it does not; and the
Jaccard kernel built on it exact at or above its floor, and below the floor
under it."""
from __future__ import annotations

import numpy as np
import pytest

from gpu_dedup.kernels import cpu
from gpu_dedup.kernels.runs import runs_intersect_at_least

#: Runs as long as shingle sets of a few hundred bytes of text.
LONG = 32


def run_pairs(rng, count: int):
    """Pairs of sorted distinct runs, end to end in one array each: sizes
    up to ``8 * LONG``, unbalanced ones, overlaps from none to whole, and
    values that repeat across the two runs."""
    a_vals, b_vals, bounds = [], [], []
    a_at = b_at = 0
    for _ in range(count):
        na = int(rng.integers(0, 4 * LONG))
        nb = int(rng.choice([na, int(rng.integers(0, 8 * LONG))]))
        common = np.unique(rng.integers(0, 1 << 40, max(na, nb), dtype=np.int64))
        share = rng.random()
        a = np.unique(np.concatenate([common[:int(share * na)],
                                      rng.integers(0, 1 << 40, na - int(share * na))]))
        b = np.unique(np.concatenate([common[:int(share * nb)],
                                      rng.integers(0, 1 << 40, nb - int(share * nb))]))
        a_vals.append(a.astype(np.uint64))
        b_vals.append(b.astype(np.uint64))
        bounds.append((a_at, a_at + a.size, b_at, b_at + b.size))
        a_at += a.size
        b_at += b.size
    return np.concatenate(a_vals), np.concatenate(b_vals), bounds


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_count_is_the_intersection_wherever_it_reaches_the_need(seed):
    rng = np.random.default_rng(seed)
    va, vb, bounds = run_pairs(rng, 300)
    stopped = 0
    for a0, a1, b0, b1 in bounds:
        full = np.intersect1d(va[a0:a1], vb[b0:b1]).size
        for need in {0, 1, full, full + 1, max(0, full - 3), (a1 - a0 + b1 - b0) // 3}:
            got = runs_intersect_at_least(va, a0, a1, vb, b0, b1, need)
            if full >= need:
                assert got == full, (a0, a1, b0, b1, need)
            else:
                assert got < need, (a0, a1, b0, b1, need)
                stopped += got < full
    assert stopped > 50                  # merges did stop early


def test_the_jaccard_kernel_is_exact_at_its_floor_and_below_it_under(seed=3):
    rng = np.random.default_rng(seed)
    va, vb, bounds = run_pairs(rng, 400)
    off1 = np.array([0] + [b[1] for b in bounds], np.int64)
    off2 = np.array([0] + [b[3] for b in bounds], np.int64)
    ia = np.arange(len(bounds), dtype=np.int64)
    ib = ~ia                                       # rows of the second table
    exact = cpu.jaccard_edges_between(off1, va, off2, vb, ia, ib, 0.0)
    for floor in (0.3, 0.8):
        got = cpu.jaccard_edges_between(off1, va, off2, vb, ia, ib, floor)
        for e, (a0, a1, b0, b1) in enumerate(bounds):
            inter = np.intersect1d(va[a0:a1], vb[b0:b1]).size
            union = (a1 - a0) + (b1 - b0) - inter
            j = inter / union if union else 0.0
            assert exact[e] == j
            # the intersection the floor needs (as the kernel counts it)
            need = np.ceil(floor * (a1 - a0 + b1 - b0) / (1.0 + floor) - 1e-9)
            assert (inter >= need) == (j >= floor or union == 0)
            if inter >= need:
                assert got[e] == j
            else:
                assert got[e] < floor and got[e] <= j
        assert (got >= floor).any() and (got < floor).any()
