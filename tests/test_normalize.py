"""Normalization steps against Python's own string functions."""
from __future__ import annotations

import random
import unicodedata

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from gpu_dedup.stages import normalize as nz

SPACES = [" ", "\t", "\n", "\r", "\x0b", "\x0c", "\x1c", "\x1f", "\x85", "\xa0", "\u1680",
          "\u2000", "\u200a", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000"]
WORDS = ["a", "bc", "Ünï", "日本", "😀", "\u200b", "x\u0301", "ﬁ", "Ⅻ", "-", "\x00"]


def random_texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = ["", " ", "  \t\n ", "a", " a ", "a  b"]
    for _ in range(n):
        parts = [rng.choice(SPACES if rng.random() < 0.4 else WORDS)
                 for _ in range(rng.randint(0, 12))]
        out.append("".join(parts))
    return out


@pytest.mark.parametrize("seed", range(3))
def test_ws_is_split_and_join(seed):
    texts = random_texts(500, seed)
    got = nz.normalize_text(pa.array(texts, pa.string()), ("ws",)).to_pylist()
    assert got == [" ".join(t.split()) for t in texts]
    # the same as the regular-expression definition Arrow applies
    regex = pc.utf8_trim(pc.replace_substring_regex(pa.array(texts, pa.large_string()),
                                                    nz._WS, " "), " ").to_pylist()
    assert got == regex


def test_ws_both_ways_over_every_code_point():
    """The kernel's fold (a compiled run's) and Arrow's regular expression
    (an interpreted run's, and any run's with nulls) give Python's split
    and join on every code point: between words, alone, and in runs."""
    from gpu_dedup.kernels.jit import interpreted
    chars = [chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    texts = [f"a{c}b" for c in chars[:0x3100]] + [f" {c}x{c}{c} " for c in chars[:0x3100]]
    texts += ["".join(chars[i:i + 997]) for i in range(0, len(chars), 997)]
    arr = pa.array(texts, pa.large_string())
    want = [" ".join(t.split()) for t in texts]
    kernel = nz.fold_whitespace(arr).to_pylist()
    with interpreted():
        arrow = nz.normalize_text(arr, ("ws",)).to_pylist()
    assert kernel == want
    assert arrow == want


def test_steps_in_slices_equal_one_pass(monkeypatch):
    texts = random_texts(3000, 7)
    arr = pa.array(texts, pa.large_string())
    all_steps = [("nfkc", "lower", "punct", "ws", "digits"), ("nfkc", "lower", "ws")]
    whole = [nz.normalize_text(arr, steps).to_pylist() for steps in all_steps]
    monkeypatch.setattr(nz, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(nz, "_threads", lambda: 3)
    for steps, want in zip(all_steps, whole):
        # the threads' parts are folded into one array, not joined first
        sliced = nz.normalize_text(arr.slice(5), steps)
        assert sliced.type == pa.large_string()
        assert sliced.to_pylist() == want[5:]
    assert whole[1] == [" ".join(unicodedata.normalize("NFKC", t).lower().split())
                        for t in texts]
    assert nz.normalize_text(arr, ("nfkc",)).to_pylist() == \
        [unicodedata.normalize("NFKC", t) for t in texts]


def test_nulls_stay_null_and_the_rest_is_folded():
    got = nz.normalize_text(pa.array([" a \t b ", None, "c"]), ("lower", "ws")).to_pylist()
    assert got == ["a b", None, "c"]


def test_the_ascii_kernel_equals_the_arrow_steps_in_every_order():
    """``kernels.text.ascii_normalize_doc`` (what a device runs on ASCII
    documents) against the host steps, on random ASCII with every control
    character, for every sequence of up to three steps; a non-ASCII document
    is left to the host (-1)."""
    import itertools
    import random

    from gpu_dedup.kernels.text import STEP_CODES, ascii_normalize_doc
    from gpu_dedup.stages.normalize import normalize_text, text_buffers
    rng = random.Random(0)
    alphabet = [chr(c) for c in range(128)]
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
             for _ in range(600)]
    texts += ["  A  b\t\n99 88x!!", "", " ", "$+<=>^`|~", "A1B22C333", "...a...", "é"]
    arr = pa.array(texts, pa.large_string())
    off, data = text_buffers(arr)
    out = np.empty(max(data.size, 1), np.uint8)
    for k in (1, 2, 3):
        for steps in itertools.permutations(["nfkc", "lower", "punct", "digits", "ws"], k):
            want = normalize_text(arr, steps).to_pylist()
            codes = np.array([STEP_CODES[s] for s in steps], np.int64)
            for i in range(len(texts)):
                n = ascii_normalize_doc(data, off[i], off[i + 1], codes, codes.size, out)
                if texts[i] == "é":
                    assert n == -1
                    continue
                assert bytes(out[off[i]:off[i] + n]).decode() == want[i], (steps, texts[i])
