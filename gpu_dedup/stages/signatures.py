"""Shingle hashing and MinHash signatures."""
from __future__ import annotations

import numpy as np


def hash_params(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``K`` affine hashes drawn from ``seed``: ``a`` (odd) and ``b``, uint64.

    Same draw as :func:`gpu_dedup.reference.permutations` (NumPy's default
    generator), made without importing :mod:`numpy.random`
    (:mod:`gpu_dedup.draws`).
    """
    from ..draws import uint64s
    words = np.array(uint64s(int(seed), 2 * int(num_perm)), dtype=np.uint64)
    return words[:num_perm] | np.uint64(1), words[num_perm:].copy()


def signatures(backend, offsets, data, docs, cfg):
    """``(sig, counts)``: the ``len(docs) x K`` signature matrix and shingle counts."""
    a, b = hash_params(cfg.num_perm, cfg.seed)
    return backend.minhash(offsets, data, docs, cfg.shingle == "word", cfg.ngram,
                           a, b, cfg.signature_bits, cfg.sketch)
