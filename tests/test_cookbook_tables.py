"""The cookbook's three tables, reproduced with the project's own kernels (seeded)."""
import numpy as np
import pyarrow as pa
import pytest

from gpu_dedup import Config, deduplicate
from gpu_dedup.demo import COOKBOOK_CONFIG, planted_corpus
from gpu_dedup.kernels import cpu
from gpu_dedup.params import approx_threshold, collision_probability
from gpu_dedup.stages.normalize import text_buffers
from gpu_dedup.stages.signatures import hash_params


def _set_texts(rng, shared, uniq_a, uniq_b):
    """Two documents whose word-1-gram sets share `shared` tokens."""
    e = rng.choice(10 ** 9, size=shared + uniq_a + uniq_b, replace=False)
    a = e[:shared + uniq_a]
    b = np.concatenate([e[:shared], e[shared + uniq_a:]])
    return " ".join(f"t{x}" for x in a), " ".join(f"t{x}" for x in b)


def _signatures(texts, k, seed, sketch="minhash"):
    off, data = text_buffers(pa.array(texts, pa.large_string()))
    a, b = hash_params(k, seed)
    sig = np.empty((len(texts), k), np.uint32)
    cnt = np.empty(len(texts), np.int64)
    docs = np.arange(len(texts), dtype=np.int64)
    if sketch == "oph":
        cpu.oph_minhash(off, data, docs, True, 1, a[0], b[0], 32, sig, cnt)
    else:
        cpu.minhash(off, data, docs, True, 1, a, b, 32, sig, cnt)
    return sig


SKETCHES = pytest.mark.parametrize("sketch", ["minhash", "oph"])


@SKETCHES
def test_minhash_estimate_is_unbiased_and_standard_error_matches_theory(sketch):
    # the one-permutation sketch (1,000 shingles into up to 1,024 bins, most
    # of them densified at k=1024) meets the same tolerances
    rng = np.random.default_rng(0)
    ta, tb = _set_texts(rng, 300, 350, 350)          # J = 300 / 1000
    J = 0.3
    for k in (64, 256, 1024):
        est = []
        for seed in range(400):
            s = _signatures([ta, tb], k, seed, sketch)
            est.append(np.mean(s[0] == s[1]))
        est = np.array(est)
        theory = (J * (1 - J) / k) ** 0.5
        assert abs(est.std() - theory) <= 0.15 * theory, (k, est.std(), theory)
        assert abs(est.mean() - J) < 3 * theory / np.sqrt(len(est)) + 0.005


@SKETCHES
@pytest.mark.parametrize("target", [0.3, 0.5, 0.7, 0.85])
def test_banding_collision_rate_follows_s_curve(target, sketch):
    b, r = 20, 5
    rng = np.random.default_rng(int(target * 100))
    uq = int(round(700 * (1 - target) / (2 * target)))
    ta, tb = _set_texts(rng, 700, uq, uq)
    s = 700 / (700 + 2 * uq)
    hits = 0
    trials = 300
    for seed in range(trials):
        sig = _signatures([ta, tb], b * r, seed, sketch)
        keys = np.empty((2, b), np.uint64)
        cpu.band_keys(sig, b, r, keys)
        hits += bool((keys[0] == keys[1]).any())
    assert abs(hits / trials - float(collision_probability(s, b, r))) <= 0.06


def test_bands_rows_table():
    # the cookbook's table for 128 hashes
    rows = {(64, 2): (0.12, 1.000, 1.000), (32, 4): (0.42, 0.873, 1.000),
            (16, 8): (0.71, 0.061, 0.947), (8, 16): (0.88, 0.000, 0.204)}
    for (bands, r), (thr, p5, p8) in rows.items():
        assert round(approx_threshold(bands, r), 2) == thr
        assert round(float(collision_probability(0.5, bands, r)), 3) == p5
        assert round(float(collision_probability(0.8, bands, r)), 3) == p8


def test_planted_corpus_precision_and_recall():
    texts, truth = planted_corpus(8000, seed=0)
    assert COOKBOOK_CONFIG.bands == 32 and COOKBOOK_CONFIG.rows == 4
    assert COOKBOOK_CONFIG.shingle == "word" and COOKBOOK_CONFIG.ngram == 3
    res = deduplicate(pa.array(texts), COOKBOOK_CONFIG)
    emitted = {(int(a), int(b)) for a, b in zip(res.pair_a, res.pair_b)}
    tp = len(emitted & truth)
    precision = tp / len(emitted)
    recall = sum(res.cluster[a] == res.cluster[b] for a, b in truth) / len(truth)
    assert precision >= 0.99, precision
    assert recall >= 0.95, recall
    # near-linear work: candidates are a tiny fraction of all pairs
    n = len(texts)
    assert res.stats["candidate_edges"] < 0.001 * n * (n - 1) / 2


def test_planted_corpus_without_verification_still_precise():
    texts, truth = planted_corpus(2000, seed=1)
    cfg = Config(**{**COOKBOOK_CONFIG.to_dict(), "verify": False, "normalize": ()})
    res = deduplicate(pa.array(texts), cfg)
    emitted = {(int(a), int(b)) for a, b in zip(res.pair_a, res.pair_b)}
    assert len(emitted & truth) / max(1, len(emitted)) >= 0.95
