"""Document embeddings (``gpu_dedup.semantic.embed``): the bundled WordLlama
model for real and offline, agreement with WordLlama's own ``embed``, local
model2vec and sentence-transformers folders against sums done by hand, the
refusals of what is not a local static model, and the checks of precomputed
embeddings."""
from __future__ import annotations

import doctest
import json
import os
import shutil
import socket
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from gpu_dedup.errors import InputError, ModelError
from gpu_dedup.semantic import embed
from gpu_dedup.semantic.embed import (StaticEmbedder, bundled_model, embeddings_from_column,
                                      load_model)
from realtext import paragraphs

import safetensors.numpy as safetensors_numpy  # noqa: E402  (the test extras install it)

PARAPHRASE = ["The cat sat on the mat.", "A cat was sitting on the mat.",
              "Stock markets fell sharply today."]


def _no_network(monkeypatch):
    """Make any attempt to open a connection fail the test."""
    def refuse(*_a, **_k):
        raise AssertionError("a network connection was attempted")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.fixture(scope="module")
def model():
    return bundled_model()        # the test extras install wordllama


def _texts() -> list[str]:
    """Real text: short licence paragraphs, a long one (over 512 tokens), and
    some non-ASCII lines."""
    ps = paragraphs()
    return (list(ps[:40]) + [next(p for p in ps if 3000 < len(p) < 6000)]
            + ["Übersetzung: die Katze saß auf der Matte.", "日本語のテキスト 🙂 émoji", " ", ""])


# -- the bundled model ------------------------------------------------------------------

def test_bundled_model_loads_offline_and_embeds(monkeypatch, model):
    _no_network(monkeypatch)
    m = bundled_model()
    assert (m.name, m.dim, m.max_tokens) == ("wordllama l2_supercat 256", 256, None)
    texts = _texts()
    e = m.embed(texts)
    assert e.dtype == np.float32 and e.shape == (len(texts), 256)
    norms = np.linalg.norm(e.astype(np.float64), axis=1)
    assert np.allclose(norms[:-1], 1.0, atol=1e-6)           # " " is a token ("▁")
    assert norms[-1] == 0.0                                  # "" has none
    assert np.array_equal(e, m.embed(texts))                 # deterministic, to the bit
    assert np.array_equal(e, model.embed(texts))             # and from one load to another
    for bs in (1, 3, 7, 4096):
        assert np.array_equal(e, m.embed(texts, batch_size=bs)), bs
    assert np.array_equal(e, m.embed(pa.array(texts)))
    assert np.array_equal(e, m.embed(pa.chunked_array([texts[:5], texts[5:]])))


def test_a_null_is_an_empty_text_and_an_empty_text_is_nobodys_duplicate(model):
    e = model.embed(pa.array(["words here", None, ""]))
    assert not e[1].any() and not e[2].any()
    assert float(e[0] @ e[1]) == 0.0
    assert model.embed([]).shape == (0, 256)


def test_paraphrases_score_higher_than_unrelated_texts(model):
    a, b, c = model.embed(PARAPHRASE)
    assert a @ b > 0.8
    assert a @ b > a @ c + 0.5 and a @ b > b @ c + 0.5


def test_agrees_with_wordllamas_own_embed(tmp_path, monkeypatch, model):
    """WordLlama's loader finds the weights in its package but looks for the
    tokenizer in ``wordllama/tokenizer/`` (not ``tokenizers/``, where the
    wheel has it), then in ``cache_dir/tokenizers/``: it gets a copy there,
    and downloads are disabled."""
    from wordllama import WordLlama
    _no_network(monkeypatch)
    (tmp_path / "tokenizers").mkdir()
    shutil.copy(os.path.join(embed.wordllama_dir(), embed.WORDLLAMA_TOKENIZER),
                tmp_path / "tokenizers")
    wl = WordLlama.load("l2_supercat", dim=256, cache_dir=tmp_path, disable_download=True)
    texts = [t for t in _texts() if t.strip()] + ["a literal <unk> and <s> in a text"]
    theirs = wl.embed(texts, batch_size=8).astype(np.float64)
    theirs /= np.linalg.norm(theirs, axis=1, keepdims=True)
    cos = np.sum(theirs * model.embed(texts), axis=1)
    assert cos.min() >= 0.9999, cos.min()
    # every token counts, as in WordLlama: a text of over 512 tokens agrees too
    assert any(len(model.tokenizer.encode(t, add_special_tokens=False).ids) > 512
               for t in texts)


@pytest.mark.parametrize("k", [5, 512])
def test_only_the_first_max_tokens_count(model, k):
    """Also for a text far longer than what is tokenized of it (146,429
    characters, cut to ``k * CHARS_PER_TOKEN`` before tokenizing)."""
    texts = [paragraphs()[0] + " " + " ".join(["zebra"] * 600), max(paragraphs(), key=len)]
    assert len(texts[1]) > k * embed.CHARS_PER_TOKEN
    m = StaticEmbedder(model.matrix, model.tokenizer, "x", max_tokens=k)
    got = m.embed(texts)
    for text, row in zip(texts, got):
        ids = model.tokenizer.encode(text, add_special_tokens=False).ids
        assert len(ids) > 600
        want = model.matrix[ids[:k]].astype(np.float64).sum(axis=0)
        assert np.allclose(row, want / np.linalg.norm(want), atol=1e-6)


def test_the_module_does_not_import_the_model_libraries():
    code = ("import sys, gpu_dedup.semantic.embed\n"
            "print([m for m in ('tokenizers', 'safetensors', 'wordllama') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_examples_hold(model):
    assert doctest.testmod(embed).failed == 0


def test_without_wordllama_the_default_model_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setattr(embed.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    with pytest.raises(ModelError) as exc:
        load_model(None)
    msg = str(exc.value)
    assert "pip install wordllama" in msg and "\n" not in msg


# -- local model folders ----------------------------------------------------------------

VOCAB = {"[UNK]": 0, "cat": 1, "dog": 2, "fish": 3}
MATRIX = np.array([[9, 9, 9], [1, 0, 0], [1, 2, 0], [0, 0, 3]], dtype=np.float16)


def _tokenizer(pad_id: int = 3):
    from tokenizers import Tokenizer, models, pre_tokenizers
    t = Tokenizer(models.WordLevel(VOCAB, unk_token="[UNK]"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    # Saved with padding on: the embedder must turn it off, or short texts
    # would get "fish" vectors added.
    t.enable_padding(pad_id=pad_id, pad_token="fish", length=8)
    return t


def _model2vec_folder(folder, tensors=None, config=True):
    folder.mkdir(parents=True, exist_ok=True)
    safetensors_numpy.save_file(tensors or {"embeddings": MATRIX},
                                str(folder / "model.safetensors"))
    _tokenizer().save(str(folder / "tokenizer.json"))
    if config:
        (folder / "config.json").write_text(json.dumps({"model_type": "model2vec",
                                                        "normalize": True}))
    return folder


def _unit(*rows):
    v = np.sum([MATRIX[r].astype(np.float64) for r in rows], axis=0)
    return v / np.linalg.norm(v)


TEXTS = ["cat dog", "fish", "zebra", "", "cat cat dog zebra", "zebra fish cat"]


def _expected():
    z = np.zeros(3)
    return np.array([_unit(1, 2), _unit(3), z, z, _unit(1, 1, 2), _unit(3, 1)])


@pytest.mark.parametrize("config", [True, False])
def test_a_model2vec_folder_embeds_as_by_hand(tmp_path, monkeypatch, config):
    _no_network(monkeypatch)
    m = load_model(str(_model2vec_folder(tmp_path / "tiny-m2v", config=config)))
    assert (m.name, m.dim) == ("tiny-m2v", 3)
    assert m.matrix.dtype == np.float32
    got = m.embed(TEXTS)
    assert got.dtype == np.float32
    assert np.allclose(got, _expected(), atol=1e-7)        # "[UNK]" (9, 9, 9) never counts
    assert np.array_equal(got, m.embed(TEXTS, batch_size=1))
    two = StaticEmbedder(m.matrix, m.tokenizer, m.name, max_tokens=2)
    assert np.allclose(two.embed(["zebra cat cat dog"])[0], _unit(1, 1), atol=1e-7)


def test_a_vocabulary_quantized_model2vec_folder(tmp_path):
    rows = np.array([[9, 9, 9], [1, 0, 0], [0, 1, 0]], dtype=np.float32)
    mapping = np.array([0, 1, 1, 2], dtype=np.int64)
    weights = np.array([1, 1, 2, 3], dtype=np.float32)
    m = load_model(str(_model2vec_folder(tmp_path / "q", {"embeddings": rows, "mapping": mapping,
                                                          "weights": weights})))
    want = np.array([1, 0, 0]) * 1 + np.array([1, 0, 0]) * 2          # cat + dog
    assert np.allclose(m.embed(["cat dog"])[0], want / np.linalg.norm(want), atol=1e-7)
    assert np.allclose(m.embed(["fish"])[0], [0, 1, 0], atol=1e-7)


def _sentence_transformers_folder(folder, modules):
    sub = folder / "0_StaticEmbedding"
    sub.mkdir(parents=True)
    safetensors_numpy.save_file({"embedding.weight": MATRIX.astype(np.float32)},
                                str(sub / "model.safetensors"))
    _tokenizer().save(str(sub / "tokenizer.json"))
    (folder / "modules.json").write_text(json.dumps(
        [{"idx": i, "name": str(i), "path": p, "type": f"sentence_transformers.models.{t}"}
         for i, (p, t) in enumerate(modules)]))
    return folder


def test_a_sentence_transformers_static_folder_embeds_as_by_hand(tmp_path):
    folder = _sentence_transformers_folder(
        tmp_path / "st", [("0_StaticEmbedding", "StaticEmbedding"), ("1_Normalize", "Normalize")])
    m = load_model(str(folder))
    assert m.name == "st"
    assert np.allclose(m.embed(TEXTS), _expected(), atol=1e-7)


def _one_line_refusal(path) -> str:
    with pytest.raises(ModelError) as exc:
        load_model(path)
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_a_hub_name_is_refused_without_touching_the_network(monkeypatch):
    _no_network(monkeypatch)
    msg = _one_line_refusal("minishlab/potion-base-8M")
    assert "never downloaded" in msg and "save_pretrained" in msg and "--model DIR" in msg


def test_a_missing_path_or_a_file_is_refused(tmp_path):
    assert "not a local folder" in _one_line_refusal(str(tmp_path / "nowhere"))
    (tmp_path / "f.bin").write_bytes(b"x")
    assert "is a file" in _one_line_refusal(str(tmp_path / "f.bin"))


def test_transformer_weights_are_refused(tmp_path):
    torch_only = tmp_path / "bert"
    torch_only.mkdir()
    (torch_only / "pytorch_model.bin").write_bytes(b"\x80\x02")
    (torch_only / "config.json").write_text('{"model_type": "bert"}')
    msg = _one_line_refusal(str(torch_only))
    assert "pytorch_model.bin" in msg and "never downloaded" in msg

    transformer = _model2vec_folder(
        tmp_path / "tr", {"bert.embeddings.word_embeddings.weight": MATRIX,
                          "bert.encoder.layer.0.attention.self.query.weight": MATRIX})
    msg = _one_line_refusal(str(transformer))
    assert "no 'embeddings' tensor" in msg and "bert.embeddings" in msg

    dense = _sentence_transformers_folder(
        tmp_path / "dense", [("0_StaticEmbedding", "StaticEmbedding"), ("1_Dense", "Dense")])
    assert "Dense" in _one_line_refusal(str(dense))


def test_broken_model_files_are_refused(tmp_path):
    folder = _model2vec_folder(tmp_path / "broken")
    (folder / "tokenizer.json").write_text("{not json")
    assert "tokenizer" in _one_line_refusal(str(folder))
    folder = _model2vec_folder(tmp_path / "broken2")
    (folder / "model.safetensors").write_bytes(b"\x00" * 20)
    assert "safetensors" in _one_line_refusal(str(folder))
    folder = _model2vec_folder(tmp_path / "small", {"embeddings": MATRIX[:2]})
    assert "4 tokens" in _one_line_refusal(str(folder))


# -- precomputed embeddings -------------------------------------------------------------

GOOD = [[3.0, 4.0, 0.0], [0.0, 0.0, 2.0], [1.0, 1.0, 1.0]]
WANT = np.array([[0.6, 0.8, 0.0], [0.0, 0.0, 1.0], [1 / 3 ** 0.5] * 3])


@pytest.mark.parametrize("make", [
    lambda: GOOD,
    lambda: [np.array(r, dtype=np.float32) for r in GOOD],
    lambda: [[int(v) if v == int(v) else v for v in r] for r in GOOD[:2]] + [[1, 1, 1]],
    lambda: pa.array(GOOD, type=pa.list_(pa.float32())),
    lambda: pa.array(GOOD, type=pa.large_list(pa.float64())),
    lambda: pa.array(GOOD, type=pa.list_(pa.float16())),
    lambda: pa.array([[int(v) for v in r] for r in GOOD], type=pa.list_(pa.int8(), 3)),
    lambda: pa.chunked_array([pa.array(GOOD[:1]), pa.array(GOOD[1:])]),
    lambda: pa.array([[9.0]] + GOOD).slice(1),
], ids=["lists", "numpy-rows", "ints", "list-float32", "large-list", "float16", "fixed-size",
        "chunked", "sliced"])
def test_precomputed_embeddings_are_normalised(make):
    got = embeddings_from_column(make(), "corpus.jsonl")
    assert got.dtype == np.float32 and got.shape == (3, 3)
    assert np.allclose(got, WANT, atol=1e-6)
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)


BAD = {
    "short": ([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0], [1.0, 2.0]],
              "corpus.jsonl:3: embedding has 2 values, not 3 like the first row"),
    "nan": ([[1.0, 2.0], [float("nan"), 1.0]], "corpus.jsonl:2: embedding has a NaN"),
    "inf": ([[1.0, 2.0], [1.0, 2.0], [1.0, float("-inf")]],
            "corpus.jsonl:3: embedding has a NaN or infinite value"),
    "string": ([[1.0, 2.0], [1.0, "2"]], "corpus.jsonl:2: embedding has a value that is str"),
    "bool": ([[True, 2.0]], "corpus.jsonl:1: embedding has a value that is bool"),
    "empty": ([[1.0], []], "corpus.jsonl:2: embedding is an empty list"),
    "null": ([[1.0], [2.0], None], "corpus.jsonl:3: embedding is null"),
    "null-value": ([[1.0, 2.0], [1.0, None]], "corpus.jsonl:2: embedding has a value that is null"),
    "zero": ([[1.0, 2.0], [0.0, -0.0]], "corpus.jsonl:2: embedding is all zeros"),
    "not-a-list": ([[1.0], 2.0], "corpus.jsonl:2: embedding is float"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_precomputed_embeddings_are_refused_with_file_and_row(case):
    rows, want = BAD[case]
    with pytest.raises(InputError) as exc:
        embeddings_from_column(rows, "corpus.jsonl")
    assert str(exc.value).startswith(want) and "\n" not in str(exc.value)


ARROW_BAD = {
    "short": (pa.array([[1.0, 2.0], [1.0, 2.0, 3.0]]), "corpus.jsonl:2: embedding has 3 values"),
    "nan": (pa.array([[1.0, 2.0], [1.0, float("nan")]]), "corpus.jsonl:2: embedding has a NaN"),
    "inf": (pa.array([[float("inf"), 2.0]], type=pa.list_(pa.float32())),
            "corpus.jsonl:1: embedding has a NaN or infinite value"),
    "strings": (pa.array([["1", "2"]]), "corpus.jsonl:1: embedding values are string"),
    "empty": (pa.array([[1.0], [2.0], []]), "corpus.jsonl:3: embedding is an empty list"),
    "null": (pa.array([[1.0], None]), "corpus.jsonl:2: embedding is null"),
    "null-value": (pa.array([[1.0, 2.0], [3.0, 4.0], [5.0, None]]),
                   "corpus.jsonl:3: embedding value 2 is null"),
    "zero": (pa.chunked_array([pa.array([[1.0, 2.0]]), pa.array([[3.0, 1.0], [0.0, 0.0]])]),
             "corpus.jsonl:3: embedding is all zeros"),
    "not-a-list": (pa.array([1.0, 2.0]), "corpus.jsonl: the embedding column is double"),
}


@pytest.mark.parametrize("case", sorted(ARROW_BAD))
def test_bad_arrow_embeddings_are_refused_with_file_and_row(case):
    column, want = ARROW_BAD[case]
    with pytest.raises(InputError) as exc:
        embeddings_from_column(column, "corpus.jsonl")
    assert str(exc.value).startswith(want) and "\n" not in str(exc.value)
