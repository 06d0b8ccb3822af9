"""The hash functions' draw without numpy.random: NumPy's own words, bit for bit."""
from __future__ import annotations

import random

import numpy as np
import pytest

from gpu_dedup import draws
from gpu_dedup.reference import permutations
from gpu_dedup.stages.signatures import hash_params

SEEDS = ([0, 1, 2, 42, 2**32 - 1, 2**32, 2**32 + 1, 2**63 - 1]
         + [random.Random(7).randrange(2**63) for _ in range(40)])


@pytest.mark.parametrize("seed", SEEDS)
def test_words_are_numpy_default_generator_s(seed):
    want = np.random.default_rng(seed).integers(0, 2**64, 257, dtype=np.uint64).tolist()
    assert draws.uint64s(seed, 257) == want
    ss = np.random.SeedSequence(seed)
    assert draws.seed_words(seed, 11) == ss.generate_state(11, np.uint32).tolist()


def test_large_entropy_and_no_negative_seed():
    big = 2**130 + 12345                 # more than four 32-bit words of entropy
    want = np.random.default_rng(big).integers(0, 2**64, 9, dtype=np.uint64).tolist()
    assert draws.uint64s(big, 9) == want
    with pytest.raises(ValueError, match="seed"):
        draws.seed_words(-1, 4)


@pytest.mark.parametrize("num_perm", [1, 2, 64, 128, 256])
def test_hash_params_are_the_reference_permutations(num_perm):
    for seed in (0, 42, 2**63 - 1):
        a, b = hash_params(num_perm, seed)
        ra, rb = permutations(num_perm, seed)
        assert a.dtype == b.dtype == np.uint64 and a.shape == b.shape == (num_perm,)
        np.testing.assert_array_equal(a, ra)
        np.testing.assert_array_equal(b, rb)
        assert (a & np.uint64(1)).all()
