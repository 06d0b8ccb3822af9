"""Shingle hashing and MinHash signatures."""
from __future__ import annotations

import numpy as np


def hash_params(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``K`` affine hashes drawn from ``seed``: ``a`` (odd) and ``b``, uint64.

    Same draw as :func:`gpu_dedup.reference.permutations`.
    """
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 1 << 64, size=num_perm, dtype=np.uint64) | np.uint64(1)
    b = rng.integers(0, 1 << 64, size=num_perm, dtype=np.uint64)
    return a, b


def signatures(backend, offsets, data, docs, cfg):
    """``(sig, counts)``: the ``len(docs) x K`` signature matrix and shingle counts."""
    a, b = hash_params(cfg.num_perm, cfg.seed)
    return backend.minhash(offsets, data, docs, cfg.shingle == "word", cfg.ngram,
                           a, b, cfg.signature_bits, cfg.sketch)
