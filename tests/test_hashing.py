"""The hash definitions: kernels against independent implementations."""
import random

import numpy as np
import pyarrow as pa
import pytest
import xxhash

from gpu_dedup import reference as ref
from gpu_dedup.kernels import buckets, cpu, hashing, text, vector_text
from gpu_dedup.stages.normalize import text_buffers
from gpu_dedup.stages.signatures import hash_params

TEXTS = [
    "hello world this is a test",
    "",
    "ab",
    "héllo wörld\u3000日本語 text with 😀 emoji",
    "  a  b\tc \n d\x1ce\x85f\u2028g ",
    "x" * 40,
    "one two three four five six seven",
    "   ",
    "a",
    "tab\tseparated\twords and  double  spaces",
]


def _buffers(texts):
    return text_buffers(pa.array(texts, pa.large_string()))


@pytest.mark.parametrize("data", [b"", b"a", b"abcd", b"abcdefgh", b"x" * 31, b"y" * 32,
                                  b"z" * 33, bytes(range(256)), "ünï €".encode()])
@pytest.mark.parametrize("seed", [0, 1, 2 ** 63 + 5])
def test_xxh64_matches_xxhash_package(data, seed):
    buf = np.frombuffer(data, dtype=np.uint8) if data else np.zeros(0, np.uint8)
    expected = xxhash.xxh64_intdigest(data, seed=seed)
    assert int(hashing.xxh64(buf, 0, len(data), np.uint64(seed))) == expected
    assert ref.xxh64(data, seed) == expected


def test_xxh64_random_lengths_and_offsets():
    rng = random.Random(3)
    blob = bytes(rng.randrange(256) for _ in range(500))
    buf = np.frombuffer(blob, dtype=np.uint8)
    for _ in range(300):
        s = rng.randrange(0, 400)
        e = s + rng.randrange(0, 100)
        assert int(hashing.xxh64(buf, s, e, np.uint64(0))) == xxhash.xxh64_intdigest(blob[s:e])


def test_is_space_is_pythons_isspace():
    cps = np.array([c for c in range(0x110000)], dtype=np.int64)
    got = [bool(text.is_space(int(c))) for c in cps[:0x3100]]
    assert got == [chr(c).isspace() for c in range(0x3100)]
    # the rest of the code space has no whitespace in Python either
    assert not any(chr(c).isspace() for c in range(0x3100, 0x110000))
    # the whole-array stand-in's mask, over every code point at once
    mask = vector_text._space_mask(cps)
    assert mask.tolist() == [chr(c).isspace() for c in range(0x110000)]


@pytest.mark.parametrize("kind", ["char", "word"])
@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_shingle_sets_are_pythons(kind, n):
    """`--normalize none` shingles are exactly {text[i:i+n]} / over text.split()."""
    off, data = _buffers(TEXTS)
    so, vals = cpu.shingle_sets(off, data, np.arange(len(TEXTS), dtype=np.int64), kind == "word", n)
    for i, t in enumerate(TEXTS):
        if kind == "char":
            expected = {t[j:j + n] for j in range(len(t) - n + 1)} if len(t) >= n else ({t} if t else set())
        else:
            toks = t.split()
            expected = ({" ".join(toks[j:j + n]) for j in range(len(toks) - n + 1)}
                        if len(toks) >= n else ({" ".join(toks)} if toks else set()))
        assert expected == ref.shingles(t, kind, n)
        want = sorted(xxhash.xxh64_intdigest(s.encode()) for s in expected)
        assert vals[so[i]:so[i + 1]].tolist() == want, (i, t)


@pytest.mark.parametrize("kind", ["char", "word"])
@pytest.mark.parametrize("bits", [32, 64])
def test_signatures_match_reference_bit_for_bit(kind, bits):
    off, data = _buffers(TEXTS)
    a, b = hash_params(27, 11)          # not a multiple of the kernel's 4-wide blocks
    ra, rb = ref.permutations(27, 11)
    assert (a == ra).all() and (b == rb).all()
    docs = np.arange(len(TEXTS), dtype=np.int64)
    dtype = np.uint32 if bits == 32 else np.uint64
    sig = np.empty((len(TEXTS), 27), dtype)
    cnt = np.empty(len(TEXTS), np.int64)
    cpu.minhash(off, data, docs, kind == "word", 3, a, b, 32 if bits == 32 else 0, sig, cnt)
    for i, t in enumerate(TEXTS):
        hs = ref.base_hashes(t, kind, 3)
        assert sig[i].tolist() == ref.signature(hs, a, b, bits)
        assert cnt[i] >= len(hs)


@pytest.mark.parametrize("kind", ["char", "word"])
@pytest.mark.parametrize("bits", [32, 64])
@pytest.mark.parametrize("K", [5, 64, 200])
def test_one_permutation_sketch_matches_reference_bit_for_bit(kind, bits, K):
    off, data = _buffers(TEXTS)
    a, b = hash_params(K, 3)
    docs = np.arange(len(TEXTS), dtype=np.int64)
    sig = np.empty((len(TEXTS), K), np.uint32 if bits == 32 else np.uint64)
    cnt = np.empty(len(TEXTS), np.int64)
    cpu.oph_minhash(off, data, docs, kind == "word", 3, a[0], b[0], 32 if bits == 32 else 0,
                    sig, cnt)
    densified = 0
    for i, t in enumerate(TEXTS):
        hs = ref.base_hashes(t, kind, 3)
        assert sig[i].tolist() == ref.oph_signature(hs, K, int(a[0]), int(b[0]), bits), (i, t)
        densified += len(hs) < K
    assert densified        # empty bins were filled
    # K bins, one hash per shingle: a signature is not K copies of one value
    assert len(set(sig[len(TEXTS) - 1].tolist())) > 1


def _random_texts(rng, count, alphabet):
    return ["".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 90)))
            for _ in range(count)]


@pytest.mark.parametrize("n", [1, 3, 4, 5, 7, 8, 9, 13, 31, 32, 40])
def test_ascii_fast_path_gives_the_same_hashes(n):
    """ASCII texts take the vectorised path (every XXH64 step across all
    positions at once); they hash as Python's shingles do, beside texts with
    multi-byte characters, of every length around ``n`` and the 8- and
    4-byte lanes."""
    rng = random.Random(n)
    _same_char_hashes(_random_texts(rng, 60, "ab c\tdé") + _random_texts(rng, 60, "abcd xyz.,"),
                      n)


def _same_char_hashes(texts, n):
    """The CPU's sorted distinct character ``n``-gram hashes of ``texts`` are
    XXH64 of Python's shingles."""
    off, data = _buffers(texts)
    so, vals = cpu.shingle_sets(off, data, np.arange(len(texts), dtype=np.int64), False, n)
    for i, t in enumerate(texts):
        want = sorted({xxhash.xxh64_intdigest(s.encode())
                       for s in ref.shingles(t, "char", n)})
        assert vals[so[i]:so[i + 1]].tolist() == want, (i, t)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7, 8, 13, 31])
def test_mostly_ascii_texts_give_the_same_hashes(n):
    """Texts with a few multi-byte characters (a curly quote, a name) hash
    their ASCII shingles a whole-text step at a time and the others one by
    one (``cpu.MIXED_SHARE``); texts with many take the one-by-one path:
    they all hash as Python's shingles do, at every length around ``n``."""
    rng = random.Random(200 + n)
    texts = [t[:i] + rng.choice("’é€中\U0001d11e") + t[i:]
             for t in _random_texts(rng, 80, "abcd efgh.,")
             for i in [rng.randrange(0, len(t) + 1)]]
    texts += _random_texts(rng, 40, "ab cé€ж中\U0001d11e") + ["é", "中" * n, "a" * n + "é"]
    _same_char_hashes(texts, n)


def test_utf8_starts_are_where_the_decoder_steps():
    """``primitives.utf8_starts`` finds the code points of UTF-8 without
    stepping, and says -1 for bytes that are not UTF-8 as it takes it
    (a lone continuation byte, a sequence cut short, in the middle or at
    the end); where it answers, the decoder's steps land on the same bytes,
    and ``mixed_char_hashes`` gives the one-by-one path's hashes."""
    from gpu_dedup.kernels import primitives as P
    rng = random.Random(7)
    pool = [0x41, 0x20, 0x80, 0xBF, 0xC3, 0xA9, 0xE2, 0x82, 0xAC, 0xF0, 0x9D, 0x84, 0x9E, 0xFF]
    answered = refused = 0
    for trial in range(600):
        if trial % 2:
            raw = "".join(rng.choice("ab é€\U0001d11e") for _ in range(rng.randrange(0, 30)))
            raw = np.frombuffer(raw.encode(), np.uint8).copy()
        else:
            raw = np.array([rng.choice(pool) for _ in range(rng.randrange(1, 30))], np.uint8)
        m = raw.size
        steps, p = [], 0
        while p < m:
            steps.append(p)
            p = text.utf8_decode(raw, p, m)[1]
        well = all(b == p + 1 + int(raw[p] >= 0xC0) + int(raw[p] >= 0xE0) + int(raw[p] >= 0xF0)
                   for p, b in zip(steps, steps[1:] + [m])) and bytes(raw).decode(
                       "utf-8", "replace").encode() == bytes(raw)
        pos = np.empty(m + 1, np.int64)
        k = P.utf8_starts(raw, pos)
        if k < 0:
            refused += 1
            assert not well, raw.tolist()
            continue
        answered += 1
        assert pos[:k + 1].tolist() == steps + [m], raw.tolist()
        for n in (1, 2, 5):
            if m < n:
                continue
            want = np.zeros(m + 1, np.uint64)
            got = np.zeros(m + 1, np.uint64)
            wc = P.doc_shingle_hashes(raw, 0, m, False, n, np.empty(m + 1, np.int64),
                                      np.empty(m + 1, np.int64), np.empty(m + 1, np.uint8), want)
            gc = P.mixed_char_hashes(raw, 0, m, n, np.empty(m + 1, np.int64),
                                     np.empty(m + 1, np.uint64), np.empty(m + 1, np.uint64), got)
            assert gc == wc and got[:gc].tolist() == want[:wc].tolist(), (raw.tolist(), n)
    assert answered > 250 and refused > 100


@pytest.mark.parametrize("K", [128, 1000])
def test_one_permutation_sketch_of_short_texts_matches_reference(K):
    """Texts of a few shingles leave most bins empty, so their probes run
    past the first ones tested together and past the CPU's table; every value
    is the reference's."""
    rng = random.Random(K)
    texts = _random_texts(rng, 80, "abcdefgh ")
    texts = [t[:rng.randrange(0, 12)] for t in texts]
    off, data = _buffers(texts)
    a, b = hash_params(K, 9)
    docs = np.arange(len(texts), dtype=np.int64)
    sig = np.empty((len(texts), K), np.uint64)
    cnt = np.empty(len(texts), np.int64)
    cpu.oph_minhash(off, data, docs, False, 5, a[0], b[0], 0, sig, cnt)
    for i, t in enumerate(texts):
        hs = ref.base_hashes(t, "char", 5)
        assert sig[i].tolist() == ref.oph_signature(hs, K, int(a[0]), int(b[0]), 64), (i, t)


def test_signature_of_subset_of_docs_matches_full():
    off, data = _buffers(TEXTS)
    a, b = hash_params(16, 5)
    full = np.empty((len(TEXTS), 16), np.uint32)
    part = np.empty((3, 16), np.uint32)
    cnt = np.empty(len(TEXTS), np.int64)
    cpu.minhash(off, data, np.arange(len(TEXTS), dtype=np.int64), False, 4, a, b, 32, full, cnt)
    docs = np.array([6, 0, 3], dtype=np.int64)
    cpu.minhash(off, data, docs, False, 4, a, b, 32, part, cnt[:3])
    assert (part == full[docs]).all()


def test_band_keys_match_reference():
    rng = np.random.default_rng(0)
    sig = rng.integers(0, 2 ** 32, size=(7, 12), dtype=np.uint64).astype(np.uint32)
    out = np.empty((7, 3), np.uint64)
    cpu.band_keys(sig, 3, 4, out)
    for i in range(7):
        for j in range(3):
            assert int(out[i, j]) == ref.band_key(sig[i, j * 4:(j + 1) * 4].tolist(), j)


def test_anchor_edges_match_reference():
    rng = np.random.default_rng(1)
    keys = rng.integers(0, 4, size=(200, 5)).astype(np.uint64)   # many collisions
    active = rng.random(200) > 0.1
    packed = buckets.bucket_edges(keys, active)
    got = {(int(p >> np.uint64(32)), int(p & np.uint64(0xFFFFFFFF))) for p in packed}
    assert got == ref.anchor_edges([keys[:, j].tolist() for j in range(5)], active.tolist())
    assert list(packed) == sorted(packed)
    # a bucket of m members gives at most 2(m - 1) edges per band, never all pairs
    assert len(got) <= 5 * 2 * (active.sum() - 1)
    assert len(got) < active.sum() * (active.sum() - 1) / 2 / 4


def test_text_hash128_is_two_xxh64_digests():
    off, data = _buffers(TEXTS)
    h = cpu.text_hash128(off, data)
    for i, t in enumerate(TEXTS):
        raw = t.encode()
        assert int(h[i, 0]) == xxhash.xxh64_intdigest(raw, seed=0)
        assert int(h[i, 1]) == xxhash.xxh64_intdigest(raw, seed=1)


@pytest.mark.parametrize("n", [0, 1, 2, 31, 33, 62, 64, 500, 4097, 70000, 300000])
@pytest.mark.parametrize("kind", ["uniform", "skewed", "repeats", "packed", "int64"])
def test_sorted_unique_is_numpys(n, kind):
    from gpu_dedup.kernels.sorting import sorted_unique
    rng = np.random.default_rng(n)
    if kind == "uniform":                 # hashes
        x = rng.integers(0, 2**63, size=n, dtype=np.int64).astype(np.uint64) * np.uint64(2)
    elif kind == "skewed":                # one slot crowded, a few far away
        x = rng.integers(0, 1000, size=n).astype(np.uint64)
        x[: n // 20] = np.uint64(2**64 - 1) - x[: n // 20]
    elif kind == "repeats":
        x = rng.integers(0, 5, size=n).astype(np.uint64) * np.uint64(2**61)
    elif kind == "packed":                # pairs packed u << 32 | v
        x = (rng.integers(0, 3, size=n).astype(np.uint64) << np.uint64(32)) \
            | rng.integers(0, 2**32, size=n).astype(np.uint64)
    else:                                 # positions, negatives among them
        x = rng.integers(-50, 10**6, size=n)
    want = np.unique(x)
    got = x.copy()
    k = sorted_unique(got, n)
    assert k == want.size
    assert np.array_equal(got[:k], want)
