"""The cookbook's planted corpus: random documents, some with a near-duplicate.

``planted_corpus(8000)`` draws 8,000 documents of 50 words from a 3,000-word
vocabulary; 30% of them are followed by a copy with 10% of its words replaced.
The planted pairs are the truth a run is scored against.
"""
from __future__ import annotations

import numpy as np

from .config import Config

#: The cookbook's own settings: word 3-grams, 128 hashes, 32 bands x 4 rows.
COOKBOOK_CONFIG = Config(shingle="word", ngram=3, normalize=(), num_perm=128, bands=32, rows=4,
                         threshold=0.4, seed=42)


def planted_corpus(base_docs: int = 8000, seed: int = 0, vocab: int = 3000, length: int = 50,
                   dup_rate: float = 0.3, edit_frac: float = 0.10):
    """``(texts, truth)``: texts as space-joined word ids, truth a set of index pairs."""
    rng = np.random.default_rng(seed)
    docs = []
    truth = set()
    n_edit = int(length * edit_frac)
    for _ in range(base_docs):
        d = rng.integers(vocab, size=length)
        docs.append(d)
        if rng.random() < dup_rate:
            e = d.copy()
            e[rng.choice(length, size=n_edit, replace=False)] = rng.integers(vocab, size=n_edit)
            docs.append(e)
            truth.add((len(docs) - 2, len(docs) - 1))
    texts = [" ".join(f"w{t}" for t in d.tolist()) for d in docs]
    return texts, truth


def score(cluster: np.ndarray, pair_a, pair_b, truth: set) -> dict:
    """Recall of planted pairs (same cluster) and precision of emitted pairs."""
    found = sum(1 for a, b in truth if cluster[a] == cluster[b])
    emitted = {(int(a), int(b)) for a, b in zip(pair_a, pair_b)}
    tp = len(emitted & truth)
    return {
        "planted_pairs": len(truth),
        "found": found,
        "recall": found / len(truth) if truth else 1.0,
        "emitted_pairs": len(emitted),
        "true_positive_pairs": tp,
        "precision": tp / len(emitted) if emitted else 1.0,
    }
