"""The whole-array NumPy text kernels (``kernels/vector_text.py``) against the
Numba kernels of ``kernels/cpu.py``: the same output arrays, bit for bit, on
text mixing ASCII, multi-byte UTF-8, malformed UTF-8, every kind of
whitespace, empty, short and long documents."""
from __future__ import annotations

import random

import numpy as np
import pytest
import xxhash

from gpu_dedup.kernels import cpu, densify, hashing
from gpu_dedup.kernels.jit import interpreted
from gpu_dedup.kernels.primitives import BOUND_WORDS
from gpu_dedup.kernels import vector_hash as vh
from gpu_dedup.kernels import vector_text as vt
from gpu_dedup.stages.signatures import hash_params

SPACES = [chr(c) for c in range(0x3100) if chr(c).isspace()]
WORDS = ["the", "cat", "sat", "on", "a", "mat", "x1", "élan", "naïve", "日本語",
         "テキスト", "😀", "𝔘𝔫𝔦", "Ωmega", "ab", "z"]
BROKEN = [b"\xff", b"\x80", b"\xbf", b"\xc3", b"\xe6\x97", b"\xf0\x9f\x98", b"\xf8",
          b"\xc0\xaf", b"\xed\xa0\x80", b"\x85", b"\xa0", b"\xf0\xf0\xf0\xf0"]


def _document(rng: random.Random, size: int) -> bytes:
    out = []
    while sum(map(len, out)) < size:
        r = rng.random()
        if r < 0.55:
            out.append(rng.choice(WORDS).encode())
        elif r < 0.9:
            out.append(rng.choice(SPACES + [" "] * 20).encode())
        else:
            out.append(rng.choice(BROKEN))
    return b"".join(out)


def _corpus(seed: int, count: int) -> list[bytes]:
    """Documents of every shape: empty, a few bytes, a few hundred, several
    KB; some all whitespace, some all ASCII, some ending in a cut sequence."""
    rng = random.Random(seed)
    docs = []
    for i in range(count):
        kind = i % 10
        if kind == 0:
            docs.append(b"")
        elif kind == 1:
            docs.append(_document(rng, rng.randint(1, 6)))
        elif kind == 2:
            docs.append("".join(rng.choice(SPACES) for _ in range(rng.randint(1, 5))).encode())
        elif kind == 3:
            docs.append(" ".join(rng.choice(WORDS[:7]) for _ in range(rng.randint(1, 80))).encode())
        elif kind == 4:
            docs.append(_document(rng, rng.randint(2000, 6000)))
        elif kind == 5:
            docs.append(_document(rng, rng.randint(5, 60)) + rng.choice(BROKEN[3:6]))
        elif kind == 6:
            docs.append(bytes(rng.randrange(256) for _ in range(rng.randint(1, 120))))
        else:
            docs.append(_document(rng, rng.randint(10, 400)))
    return docs


def _buffers(docs: list[bytes]):
    offsets = np.zeros(len(docs) + 1, np.int64)
    np.cumsum([len(d) for d in docs], out=offsets[1:])
    data = np.frombuffer(b"".join(docs) + b"\0", np.uint8)[:offsets[-1]].copy()
    return offsets, data


@pytest.fixture(scope="module")
def corpus():
    offsets, data = _buffers(_corpus(7, 700))
    rng = np.random.default_rng(3)
    docs = rng.permutation(700)[:600].astype(np.int64)
    return offsets, data, docs


@pytest.fixture(scope="module")
def real():
    from realtext import paragraphs
    texts = [t.encode() for t in paragraphs()[:600]]
    offsets, data = _buffers(texts)
    return offsets, data, np.arange(len(texts), dtype=np.int64)[::-1].copy()


#: Block ranges: all blocks, a middle one, the last (partial) one.
RANGES = [(0, 3), (1, 2), (2, 3)]
NS = [1, 3, 5, 9, 24, 33]


def test_xxh64_windows_is_xxh64():
    rng = random.Random(1)
    blob = bytes(rng.randrange(256) for _ in range(3000))
    buf = np.zeros(3000 + 40, np.uint8)
    buf[:3000] = np.frombuffer(blob, np.uint8)
    start = np.array([rng.randrange(0, 2800) for _ in range(3000)], np.int64)
    length = np.array([rng.choice([0, 1, 3, 4, 7, 8, 31, 32, 33, 64, 100, 200])
                       for _ in range(3000)], np.int64)
    got = vh.xxh64_windows(buf, 3000, start, length)
    for s, n, h in zip(start, length, got):
        want = xxhash.xxh64_intdigest(blob[s:s + n])
        assert int(h) == want == int(hashing.xxh64(buf, s, s + n, np.uint64(0)))


@pytest.mark.parametrize("length", [1, 3, 4, 5, 8, 12, 13, 31])
def test_xxh64_windows_of_one_length_is_xxh64(length):
    """Windows all of one length under 32 bytes (ASCII character shingles)
    take a path of their own: the same hashes."""
    rng = random.Random(length)
    blob = bytes(rng.randrange(256) for _ in range(2000))
    buf = np.zeros(2000 + 40, np.uint8)
    buf[:2000] = np.frombuffer(blob, np.uint8)
    start = np.array(sorted(rng.randrange(0, 2000 - length) for _ in range(700)), np.int64)
    got = vh.xxh64_windows(buf, 2000, start, np.full(700, length, np.int64))
    assert [int(h) for h in got] == [xxhash.xxh64_intdigest(blob[s:s + length]) for s in start]
    assert vh.xxh64_windows(buf, 2000, start[:0], start[:0]).shape == (0,)


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("word", [False, True])
@pytest.mark.parametrize("K,shift", [(1, 0), (7, 32), (64, 0), (128, 32), (256, 0), (256, 32)])
def test_oph_blocks(corpus, n, word, K, shift):
    offsets, data, docs = corpus
    a, b = hash_params(K, 11 + n)
    p, q = a[0], b[0]
    probes = densify.probe_table(q, K)
    hits = densify.first_hits(q, K)
    dtype = np.uint32 if shift == 32 else np.uint64
    for b0, b1 in RANGES:
        want = np.full((docs.shape[0], K), 0xABCD, dtype)
        got = want.copy()
        wc = np.full(docs.shape[0], -5, np.int64)
        gc = wc.copy()
        cpu._oph_blocks(offsets, data, docs, word, n, p, q, shift, want, wc, probes, hits,
                        b0, b1)
        vt.oph_blocks(offsets, data, docs, word, n, p, q, shift, got, gc, probes, hits, b0, b1)
        np.testing.assert_array_equal(gc, wc)
        np.testing.assert_array_equal(got, want)


def _sets(kernel, offsets, data, docs, word, n, b0, b1):
    raw_off = np.zeros(docs.shape[0] + 1, np.int64)
    np.cumsum(offsets[docs + 1] - offsets[docs] + 1, out=raw_off[1:])
    raw = np.zeros(raw_off[-1], np.uint64)
    uniq = np.full(docs.shape[0], -1, np.int64)
    kernel(offsets, data, docs, word, n, raw_off, raw, uniq, b0, b1)
    return uniq, [raw[raw_off[t]:raw_off[t] + max(u, 0)] for t, u in enumerate(uniq)]


#: ``vector_text._SORT_EACH`` forcing each way of sorting a piece's sets:
#: every document's hashes on their own, or all of them by one key
SORT_WAYS = [0, 1 << 40]


@pytest.mark.parametrize("sort_each", SORT_WAYS)
@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("word", [False, True])
def test_shingle_set_blocks(corpus, n, word, sort_each, monkeypatch):
    monkeypatch.setattr(vt, "_SORT_EACH", sort_each)
    offsets, data, docs = corpus
    for b0, b1 in RANGES:
        wu, ws = _sets(cpu._shingle_set_blocks, offsets, data, docs, word, n, b0, b1)
        gu, gs = _sets(vt.shingle_set_blocks, offsets, data, docs, word, n, b0, b1)
        np.testing.assert_array_equal(gu, wu)
        for w, g in zip(ws, gs):
            np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("word", [False, True])
def test_shingle_sets_in_groups_of_documents_are_the_sets_of_one_group(corpus, word,
                                                                      monkeypatch):
    """:func:`kernels.cpu.shingle_sets` hashes its documents a group at a
    time through one buffer: groups of one document, of a few and of all
    give the same sets, each a document's sorted distinct hashes (compiled
    and interpreted), and no value past the last set."""
    offsets, data, docs = corpus
    docs = docs[::-1].copy()                          # any order of documents
    monkeypatch.setattr(cpu, "RAW_BYTES", 1 << 40)
    want_off, want = cpu.shingle_sets(offsets, data, docs, word, 3)
    assert want.size == want_off[-1] > 0
    for t in (0, 7, docs.size - 1):
        seg = want[want_off[t]:want_off[t + 1]]
        assert np.all(seg[1:] > seg[:-1])
    for raw_bytes in (8, 1 << 12, 1 << 16):
        monkeypatch.setattr(cpu, "RAW_BYTES", raw_bytes)
        for mode in ("compiled", "interpreted"):
            if mode == "interpreted":
                with interpreted():
                    off, got = cpu.shingle_sets(offsets, data, docs, word, 3)
            else:
                off, got = cpu.shingle_sets(offsets, data, docs, word, 3)
            np.testing.assert_array_equal(off, want_off)
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("sort_each", SORT_WAYS)
@pytest.mark.parametrize("words", [BOUND_WORDS, 33, 1025])
@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("word", [False, True])
def test_set_bound_blocks(corpus, n, word, words, sort_each, monkeypatch):
    monkeypatch.setattr(vt, "_SORT_EACH", sort_each)
    offsets, data, docs = corpus
    for b0, b1 in RANGES:
        want = np.full((docs.shape[0], words), 77, np.uint32)
        got = want.copy()
        cpu._set_bound_blocks(offsets, data, docs, word, n, want, b0, b1)
        vt.set_bound_blocks(offsets, data, docs, word, n, got, b0, b1)
        np.testing.assert_array_equal(got, want)


def test_an_interpreted_run_hashes_the_same_pieces_once(corpus, monkeypatch):
    """Within one interpreted block, a second call on the same buffers and
    documents (a run's bound rows after its sketches) reuses the first's
    hashes, read-only; other documents, another block or no block at all
    hash again; and the bound rows made from kept hashes are those of the
    compiled kernel."""
    offsets, data, docs = corpus
    calls = []
    real = vt._shingle_hashes
    monkeypatch.setattr(vt, "_shingle_hashes", lambda *a: calls.append(1) or real(*a))
    with interpreted():
        first = vt.shingle_hashes(offsets, data, docs[:50], False, 5)
        again = vt.shingle_hashes(offsets, data, docs[:50].copy(), False, 5)
        assert again is first and len(calls) == 1
        assert not any(a.flags.writeable for a in first)
        vt.shingle_hashes(offsets, data, docs[:51], False, 5)
        vt.shingle_hashes(offsets, data, docs[:51], True, 5)
        vt.shingle_hashes(offsets, data, docs[:51], True, 3)
        assert len(calls) == 4
        assert len(vt._kept[1]) == 4
    assert vt._kept == (None, [])           # nothing outlives the run
    with interpreted():
        vt.shingle_hashes(offsets, data, docs[:51], True, 3)
    assert len(calls) == 5
    vt.shingle_hashes(offsets, data, docs[:51], True, 3)
    vt.shingle_hashes(offsets, data, docs[:51], True, 3)
    assert len(calls) == 7
    want = np.zeros((docs.shape[0], BOUND_WORDS), np.uint32)
    cpu._set_bound_blocks(offsets, data, docs, False, 5, want, 0, 3)
    with interpreted():
        sk = np.zeros((docs.shape[0], 64), np.uint64)
        a, b = hash_params(64, 3)
        vt.oph_blocks(offsets, data, docs, False, 5, a[0], b[0], 0, sk,
                      np.zeros(docs.shape[0], np.int64), densify.probe_table(b[0], 64), None,
                      0, 3)
        before = len(calls)
        got = np.zeros_like(want)
        vt.set_bound_blocks(offsets, data, docs, False, 5, got, 0, 3)
        assert len(calls) == before          # the sketches' hashes, piece by piece
    np.testing.assert_array_equal(got, want)


def test_bound_counters_saturate():
    doc = " ".join(f"w{i}" for i in range(40000)).encode()
    offsets, data = _buffers([doc, b"", doc[:5000]])
    docs = np.arange(3, dtype=np.int64)
    want = np.zeros((3, BOUND_WORDS), np.uint32)
    got = want.copy()
    cpu._set_bound_blocks(offsets, data, docs, True, 1, want, 0, 1)
    vt.set_bound_blocks(offsets, data, docs, True, 1, got, 0, 1)
    assert (want[0, :-1].view(np.uint8) == 255).any()
    np.testing.assert_array_equal(got, want)


def test_text_hash_docs(corpus):
    offsets, data, _ = corpus
    N = offsets.shape[0] - 1
    for i0, i1 in [(0, N), (100, 350), (5, 5)]:
        want = np.zeros((N, 2), np.uint64)
        got = want.copy()
        cpu._text_hash_docs(offsets, data, want, i0, i1)
        vt.text_hash_docs(offsets, data, got, i0, i1)
        np.testing.assert_array_equal(got, want)


def test_fold_docs(corpus):
    offsets, data, _ = corpus
    N = offsets.shape[0] - 1
    for i0, i1, base in [(0, N, 0), (123, 456, 0), (9, 9, 0), (50, 300, 7)]:
        size = int(offsets[N] - offsets[0]) + 8 + base
        outs, wheres, lens = [], [], []
        for kernel in (cpu._fold_docs, vt.fold_docs):
            out = np.full(size, 0xEE, np.uint8)
            where = np.full(N, -1, np.int64)
            lengths = np.full(N, -1, np.int64)
            kernel(offsets, data, out, where, lengths, base, i0, i1)
            outs.append(out), wheres.append(where), lens.append(lengths)
        np.testing.assert_array_equal(outs[1], outs[0])
        np.testing.assert_array_equal(wheres[1], wheres[0])
        np.testing.assert_array_equal(lens[1], lens[0])
        if i1 > i0:                     # one after another from document i0's place
            assert wheres[0][i0] == base + offsets[i0] - offsets[0]
            np.testing.assert_array_equal(wheres[0][i0 + 1:i1],
                                          wheres[0][i0:i1 - 1] + lens[0][i0:i1 - 1])


def test_folded_text_is_python_split_joined(corpus):
    offsets, data, _ = corpus
    N = offsets.shape[0] - 1
    lengths = np.zeros(N, np.int64)
    where = np.zeros(N, np.int64)
    out = np.zeros(int(offsets[N] - offsets[0]), np.uint8)
    vt.fold_docs(offsets, data, out, where, lengths, 0, 0, N)
    for i in range(N):
        doc = bytes(data[offsets[i]:offsets[i + 1]])
        try:
            text = doc.decode()
        except UnicodeDecodeError:
            continue
        assert bytes(out[where[i]:where[i] + lengths[i]]).decode() == " ".join(text.split())


@pytest.mark.parametrize("threads", [1, 2, 5])
def test_fold_spaces_joins_the_pieces_threads_folded(real, monkeypatch, threads):
    """Whatever pieces the threads take, the folded documents end up one
    after another, each ``" ".join(text.split())``."""
    from gpu_dedup.kernels import threads as kt
    offsets, data, _ = real
    monkeypatch.setattr(kt, "threads", lambda: threads)
    texts = [bytes(data[offsets[i]:offsets[i + 1]]).decode() for i in range(len(offsets) - 1)]
    texts = texts * 9                            # pieces of 1,024 documents or more
    texts[3] = "   "                            # folds to nothing
    texts.append("  tail  words\t\n")
    off, buf = _buffers([t.encode() for t in texts])
    sub = off[2:]                                # a slice: offsets not from 0
    new_off, new = cpu.fold_spaces(sub, buf)
    want = [" ".join(t.split()).encode() for t in texts[2:]]
    assert new_off[0] == 0 and new_off[-1] == sum(map(len, want))
    got = [bytes(new[new_off[i]:new_off[i + 1]]) for i in range(len(want))]
    assert got == want
    with interpreted():                          # the stand-in, on one thread
        assert cpu.fold_spaces(sub, buf)[0].tolist() == new_off.tolist()
    # several arrays folded one after another into one
    k = len(sub) // 3
    parts = [(sub[:k + 1], buf), (sub[k:2 * k + 1], buf), (sub[2 * k:], buf)]
    p_off, p_buf = cpu.fold_spaces_parts(parts)
    assert p_off.tolist() == new_off.tolist()
    assert bytes(p_buf[:p_off[-1]]) == bytes(new[:new_off[-1]])


@pytest.mark.parametrize("word", [False, True])
def test_has_shingle_docs(corpus, word):
    offsets, data, _ = corpus
    N = offsets.shape[0] - 1
    for i0, i1 in [(0, N), (50, 300), (7, 7)]:
        want = np.zeros(N, np.bool_)
        got = np.ones(N, np.bool_)
        want[:] = got
        cpu._has_shingle_docs(offsets, data, word, want, i0, i1)
        vt.has_shingle_docs(offsets, data, word, got, i0, i1)
        np.testing.assert_array_equal(got, want)


HOSTILE = [b"\xf0\xf0\xf0\xf0" * 9 + b"a", b"\xf0" * 37, b"\xe0\xe0\xe0" * 11 + b"\xe0",
           b"a\xc3", b"\xc3", b"\xf0\x9f", b"\xe6\x97\xa5\xf0", b"\xff" * 40,
           b"\x80\x80\x80abc", "日本語".encode() + b"\xf0\x9f\x98", b"\xc0" * 33]


@pytest.mark.parametrize("n", [1, 2, 3, 5, 33])
def test_malformed_utf8_walks_as_the_decoder_does(n):
    offsets, data = _buffers(HOSTILE + [b"ok text"] + HOSTILE[::-1])
    docs = np.arange(offsets.shape[0] - 1, dtype=np.int64)
    wu, ws = _sets(cpu._shingle_set_blocks, offsets, data, docs, False, n, 0, 1)
    gu, gs = _sets(vt.shingle_set_blocks, offsets, data, docs, False, n, 0, 1)
    np.testing.assert_array_equal(gu, wu)
    for w, g in zip(ws, gs):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("K", [7, 16, 128, 254, 255, 256, 600])
def test_densify_every_path(K):
    """Bins filled at random, densified as ``densify.densify_group`` does,
    with and without its table of first hits: among the first probes
    (their bins kept as bytes below 255 bins, their numbers from 255 on),
    later ones (from the table, then computed), from the first hits (few
    filled bins: the empty ones looked up one by one, or all of them in a
    vector pass a filled bin), and past them the next filled bin to the
    right (probe tables that never hit); a row without shingles is left
    alone."""
    rng = np.random.default_rng(K)
    q = np.uint64(0x1234_5678_9ABC_DEF1)
    G, W = 30, (K + 63) // 64
    for trial in range(40):
        filled = rng.random((G, K)) < rng.choice([0.005, 0.01, 0.05, 0.3, 0.9])
        filled[np.arange(G), rng.integers(0, K, G)] = True
        filled[:3] = False
        filled[:3, :2] = True                        # two filled bins
        filled[3:6] = False
        filled[3:6, rng.integers(0, K)] = True        # one filled bin
        probes = densify.probe_table(q, K)
        hits = densify.first_hits(q, K)
        assert hits.shape == ((K, K) if K <= densify.HITS_BINS else (0, 0))
        tables = [hits, np.zeros((0, 0), np.uint32)]
        if trial % 4 == 3:
            probes[:] = K - 1                        # the table never hits
            filled[:, K - 1] = False
            filled[:, 0] = True
            tables = tables[1:]                      # (first hits of other probes)
        src = vt._sources(filled, q, probes)
        flags = np.zeros((K, densify.LANES), np.uint8)
        flags[:, :G] = filled.T
        counts = np.ones(G, np.int64)
        counts[7] = 0                                # no shingles: left alone
        def densified(table):
            rows = np.tile(np.arange(K, dtype=np.uint64), (G, 1))
            densify.densify_group(q, probes, table, flags, counts, rows,
                                  np.empty((K, densify.LANES), np.uint8),
                                  np.empty(K, np.uint32), np.empty(W, np.uint64))
            return rows.astype(np.int64)

        want = src.copy()
        want[7] = np.arange(K)
        for table in tables:
            np.testing.assert_array_equal(densified(table), want)
        if trial % 4 == 3 and K <= densify.HITS_BINS:
            # no bin's probes name a filled one: the next filled to the right
            got = densified(np.full((K, K), 0xFFFFFFFF, np.uint32))
            for r in range(G):
                on = np.flatnonzero(filled[r])
                if r != 7 and on.size * on.size <= K:
                    right = on[np.searchsorted(on, np.arange(K)) % on.size]
                    np.testing.assert_array_equal(got[r], right)


@pytest.mark.parametrize("K", [1, 7, 128])
def test_first_hits(K):
    """Each bin's first probe of each other bin (column ``k``: bin ``k``'s), from
    the probes one by one."""
    q = np.uint64(99)
    hits = densify.first_hits(q, K)
    for k in range(K):
        seen = {}
        for t in range(8 * K):
            seen.setdefault(int(hashing.oph_probe(q, k, t, K)), t)
        want = [seen.get(f, 0xFFFFFFFF) for f in range(K)]
        assert hits[:, k].tolist() == want


@pytest.mark.parametrize("word", [False, True])
def test_real_text(real, word):
    offsets, data, docs = real
    for n in (1, 5, 9):
        for K, shift in ((128, 32), (64, 0)):
            a, b = hash_params(K, 42)
            probes = densify.probe_table(b[0], K)
            hits = densify.first_hits(b[0], K)
            dtype = np.uint32 if shift == 32 else np.uint64
            want = np.zeros((docs.shape[0], K), dtype)
            got = want.copy()
            wc = np.zeros(docs.shape[0], np.int64)
            gc = wc.copy()
            cpu._oph_blocks(offsets, data, docs, word, n, a[0], b[0], shift, want, wc, probes,
                            hits, 0, 3)
            vt.oph_blocks(offsets, data, docs, word, n, a[0], b[0], shift, got, gc, probes,
                          hits, 0, 3)
            np.testing.assert_array_equal(gc, wc)
            np.testing.assert_array_equal(got, want)
        wu, ws = _sets(cpu._shingle_set_blocks, offsets, data, docs, word, n, 0, 3)
        gu, gs = _sets(vt.shingle_set_blocks, offsets, data, docs, word, n, 0, 3)
        np.testing.assert_array_equal(gu, wu)
        for w, g in zip(ws, gs):
            np.testing.assert_array_equal(g, w)
        want = np.zeros((docs.shape[0], BOUND_WORDS), np.uint32)
        got = want.copy()
        cpu._set_bound_blocks(offsets, data, docs, word, n, want, 0, 3)
        vt.set_bound_blocks(offsets, data, docs, word, n, got, 0, 3)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("sort_each", SORT_WAYS)
def test_sorted_sets_with_hashes_equal_in_their_top_bits(sort_each, monkeypatch):
    monkeypatch.setattr(vt, "_SORT_EACH", sort_each)
    rng = np.random.default_rng(5)
    for docs in (1, 2, 3, 600):
        doc = np.sort(rng.integers(0, docs, 3000))
        hashes = rng.integers(0, 2 ** 64, 3000, dtype=np.uint64)
        hashes[::3] &= np.uint64(0xF000_0000_0000_0007)      # top bits alike, some equal
        values, vdoc = vt._sorted_sets(hashes, doc, docs)
        want = sorted(set(zip(doc.tolist(), hashes.tolist())))
        assert list(zip(vdoc.tolist(), values.tolist())) == want


def test_documents_in_pieces(corpus, monkeypatch):
    """Calls cut into many pieces (a few documents or bytes each) give the
    same arrays; an empty range of blocks writes nothing."""
    offsets, data, docs = corpus
    monkeypatch.setattr(vt, "_CHUNK_BYTES", 3000)
    monkeypatch.setattr(vt, "_CHUNK_DOCS", 7)
    N = offsets.shape[0] - 1
    K = 64
    a, b = hash_params(K, 1)
    probes = densify.probe_table(b[0], K)
    hits = densify.first_hits(b[0], K)
    for word in (False, True):
        for b0, b1 in ((0, 3), (1, 3), (2, 2), (3, 5)):
            want = np.full((docs.shape[0], K), 9, np.uint64)
            got = want.copy()
            wc = np.full(docs.shape[0], -1, np.int64)
            gc = wc.copy()
            cpu._oph_blocks(offsets, data, docs, word, 4, a[0], b[0], 0, want, wc, probes, hits,
                            b0, b1)
            vt.oph_blocks(offsets, data, docs, word, 4, a[0], b[0], 0, got, gc, probes, hits,
                          b0, b1)
            np.testing.assert_array_equal(gc, wc)
            np.testing.assert_array_equal(got, want)
            wu, ws = _sets(cpu._shingle_set_blocks, offsets, data, docs, word, 4, b0, b1)
            gu, gs = _sets(vt.shingle_set_blocks, offsets, data, docs, word, 4, b0, b1)
            np.testing.assert_array_equal(gu, wu)
            for w, g in zip(ws, gs):
                np.testing.assert_array_equal(g, w)
            want = np.zeros((docs.shape[0], BOUND_WORDS), np.uint32)
            got = want.copy()
            cpu._set_bound_blocks(offsets, data, docs, word, 4, want, b0, b1)
            vt.set_bound_blocks(offsets, data, docs, word, 4, got, b0, b1)
            np.testing.assert_array_equal(got, want)
        want = np.zeros(N, np.bool_)
        got = want.copy()
        cpu._has_shingle_docs(offsets, data, word, want, 10, N)
        vt.has_shingle_docs(offsets, data, word, got, 10, N)
        np.testing.assert_array_equal(got, want)
    folded = []
    for kernel in (cpu._fold_docs, vt.fold_docs):
        out = np.zeros(int(offsets[N] - offsets[0]), np.uint8)
        where = np.full(N, -1, np.int64)
        lengths = np.full(N, -1, np.int64)
        kernel(offsets, data, out, where, lengths, 0, 3, N)
        folded.append((out, where, lengths))
    for w, g in zip(*folded):
        np.testing.assert_array_equal(g, w)


def test_no_numba_import():
    import subprocess
    import sys
    code = ("import sys, numpy as np\nfrom gpu_dedup.kernels import vector_text as vt\n"
            "off = np.array([0, 5, 11], np.int64)\ndata = np.frombuffer(b'hello world', np.uint8)\n"
            "out = np.zeros((2, 4), np.uint64)\ncnt = np.zeros(2, np.int64)\n"
            "probes = np.zeros((4, 64), np.int32)\n"
            "vt.oph_blocks(off, data, np.arange(2), False, 3, np.uint64(1), np.uint64(2), 0,"
            " out, cnt, probes, np.zeros((0, 0), np.uint32), 0, 1)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numba', 'llvmlite')))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "[]", proc.stdout


def test_the_whitespace_is_the_kernels():
    """The whole-array whitespace test is :func:`kernels.text.is_space` at
    every code point of the Basic Multilingual Plane and at a sample above."""
    from gpu_dedup.kernels import text, vector_text
    c = np.concatenate([np.arange(0x10000),
                        np.random.default_rng(0).integers(0x10000, 0x110000, 5000)])
    want = np.array([bool(text.is_space.py_func(int(x))) for x in c])
    assert np.array_equal(vector_text._space_mask(c), want)
    assert want.sum() == sum(chr(x).isspace() for x in range(0x10000))
