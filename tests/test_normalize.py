"""Normalization steps against Python's own string functions."""
from __future__ import annotations

import random
import unicodedata

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


def test_steps_in_slices_equal_one_pass(monkeypatch):
    texts = random_texts(3000, 7)
    arr = pa.array(texts, pa.large_string())
    steps = ("nfkc", "lower", "punct", "ws", "digits")
    whole = nz.normalize_text(arr, steps).to_pylist()
    monkeypatch.setattr(nz, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(nz, "_threads", lambda: 3)
    sliced = nz.normalize_text(arr.slice(5), steps)
    assert sliced.type == pa.large_string()
    assert sliced.to_pylist() == whole[5:]
    assert nz.normalize_text(arr, ("nfkc",)).to_pylist() == \
        [unicodedata.normalize("NFKC", t) for t in texts]


def test_nulls_stay_null_and_the_rest_is_folded():
    got = nz.normalize_text(pa.array([" a \t b ", None, "c"]), ("lower", "ws")).to_pylist()
    assert got == ["a b", None, "c"]
