"""Sentence-transformers encoder models run without torch
(:mod:`gpu_dedup.semantic.transformer`).

The oracle below is the BERT encoder written from its definition (Devlin et
al. 2019; the layer order of the reference implementation: post-LayerNorm
residual blocks, GELU of erf), one token and one attention head at a time in
float64 with Python's math, independently of the vectorised float32 code.
Models are tiny random ones written here in the layouts sentence-transformers
and transformers save.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from safetensors.numpy import save_file  # the test extras install it
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

from gpu_dedup.errors import ModelError
from gpu_dedup.semantic.embed import load_model
from gpu_dedup.semantic.transformer import TransformerEmbedder

WORDS = ("the cat sat on a mat dog ran in park ##s ##ed big small red blue house tree "
         "quick brown fox jumps over lazy").split()
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
TEXTS = ["The cat sat on the mat.", "A dog ran in the park", "the big red house",
         "quick brown fox jumps over the lazy dog", "", "zebra", "cats sat",
         "the cat sat on the mat"]
H, HEADS, LAYERS, INTER, POSITIONS = 16, 4, 2, 24, 20


def _tokenizer(path, bos="[CLS]", eos="[SEP]"):
    vocab = {t: i for i, t in enumerate(SPECIAL + WORDS)}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}", special_tokens=[(bos, vocab[bos]), (eos, vocab[eos])])
    tok.save(str(path))


def _weights(rng, prefix="", types=2, positions=POSITIONS):
    def r(*shape, s=0.3):
        return (rng.standard_normal(shape) * s).astype(np.float32)
    w = {f"{prefix}embeddings.word_embeddings.weight": r(len(SPECIAL) + len(WORDS), H),
         f"{prefix}embeddings.position_embeddings.weight": r(positions, H),
         f"{prefix}embeddings.token_type_embeddings.weight": r(types, H),
         f"{prefix}embeddings.LayerNorm.weight": 1 + r(H, s=0.1),
         f"{prefix}embeddings.LayerNorm.bias": r(H, s=0.1),
         f"{prefix}pooler.dense.weight": r(H, H)}
    for i in range(LAYERS):
        p = f"{prefix}encoder.layer.{i}."
        for n in ("query", "key", "value"):
            w[p + f"attention.self.{n}.weight"] = r(H, H)
            w[p + f"attention.self.{n}.bias"] = r(H, s=0.1)
        w[p + "attention.output.dense.weight"] = r(H, H)
        w[p + "attention.output.dense.bias"] = r(H, s=0.1)
        w[p + "attention.output.LayerNorm.weight"] = 1 + r(H, s=0.1)
        w[p + "attention.output.LayerNorm.bias"] = r(H, s=0.1)
        w[p + "intermediate.dense.weight"] = r(INTER, H)
        w[p + "intermediate.dense.bias"] = r(INTER, s=0.1)
        w[p + "output.dense.weight"] = r(H, INTER)
        w[p + "output.dense.bias"] = r(H, s=0.1)
        w[p + "output.LayerNorm.weight"] = 1 + r(H, s=0.1)
        w[p + "output.LayerNorm.bias"] = r(H, s=0.1)
    return w


def _model(folder, *, kind="bert", prefix="", act="gelu", pooling=("mean_tokens",),
           dense=None, max_seq=None, modules=True, seed=0):
    """A sentence-transformers folder of a tiny encoder; its weights."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    roberta = kind != "bert"
    w = _weights(rng, prefix, types=1 if roberta else 2,
                 positions=POSITIONS + (2 if roberta else 0))
    save_file(w, str(folder / "model.safetensors"))
    cfg = {"model_type": kind, "hidden_size": H, "num_attention_heads": HEADS,
           "num_hidden_layers": LAYERS, "intermediate_size": INTER, "hidden_act": act,
           "layer_norm_eps": 1e-12, "max_position_embeddings": POSITIONS, "pad_token_id":
           0 if not roberta else 1}
    (folder / "config.json").write_text(json.dumps(cfg))
    _tokenizer(folder / "tokenizer.json")
    if max_seq is not None:
        (folder / "sentence_bert_config.json").write_text(
            json.dumps({"max_seq_length": max_seq, "do_lower_case": False}))
    if not modules:
        return w, []
    mods = [("", "Transformer"), ("1_Pooling", "Pooling")]
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": H, **{f"pooling_mode_{m}": m in pooling for m in
                                            ("cls_token", "mean_tokens", "max_tokens",
                                             "mean_sqrt_len_tokens")}}))
    dense_w = []
    for j, (out, act_name) in enumerate(dense or []):
        d = folder / f"{2 + j}_Dense"
        d.mkdir()
        width = H * len(pooling) if j == 0 else dense[j - 1][0]
        dw = {"linear.weight": (rng.standard_normal((out, width)) * 0.3).astype(np.float32),
              "linear.bias": (rng.standard_normal(out) * 0.1).astype(np.float32)}
        save_file(dw, str(d / "model.safetensors"))
        (d / "config.json").write_text(json.dumps(
            {"in_features": width, "out_features": out, "bias": True,
             "activation_function": act_name}))
        mods.append((d.name, "Dense"))
        dense_w.append((dw, act_name))
    mods.append(("3_Normalize", "Normalize"))
    (folder / "modules.json").write_text(json.dumps(
        [{"idx": i, "name": str(i), "path": p, "type": f"sentence_transformers.models.{t}"}
         for i, (p, t) in enumerate(mods)]))
    return w, dense_w


# -- the oracle ------------------------------------------------------------------------

def _ln(row, g, b, eps=1e-12):
    mu = sum(row) / len(row)
    var = sum((v - mu) ** 2 for v in row) / len(row)
    return [(v - mu) / math.sqrt(var + eps) * float(gi) + float(bi)
            for v, gi, bi in zip(row, g, b)]


def _lin(row, W, bias):
    return [sum(float(W[o, i]) * row[i] for i in range(len(row))) + float(bias[o])
            for o in range(W.shape[0])]


def _act(name, v):
    if name == "gelu":
        return 0.5 * v * (1 + math.erf(v / math.sqrt(2)))
    if name == "gelu_new":
        return 0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))
    if name == "relu":
        return max(v, 0.0)
    if name.endswith("Tanh"):
        return math.tanh(v)
    return v


def _bucket(d):
    """MPNet's bucket of the relative position ``d`` (attending minus
    attended token), from its definition, in float64."""
    n = abs(d)
    upper = 16 if d < 0 else 0
    if n < 8:
        return upper + n
    return upper + min(15, 8 + int(math.log(n / 8) / math.log(128 / 8) * 8))


def oracle(w, ids, *, prefix="", act="gelu", pos0=0, pooling=("mean_tokens",), dense=(),
           rel=None):
    """The encoder's pooled, normalised row of the token ids ``ids``; with
    ``rel`` (buckets x heads), MPNet's relative position bias."""
    g = {k[len(prefix):]: v for k, v in w.items()}
    x = [_ln([float(g["embeddings.word_embeddings.weight"][t, j])
              + float(g["embeddings.position_embeddings.weight"][pos0 + p, j])
              + float(g["embeddings.token_type_embeddings.weight"][0, j]) for j in range(H)],
             g["embeddings.LayerNorm.weight"], g["embeddings.LayerNorm.bias"])
         for p, t in enumerate(ids)]
    dh = H // HEADS
    for i in range(LAYERS):
        p = f"encoder.layer.{i}."
        q, k, v = ([_lin(r, g[p + f"attention.self.{n}.weight"], g[p + f"attention.self.{n}.bias"])
                    for r in x] for n in ("query", "key", "value"))
        ctx = [[0.0] * H for _ in x]
        for h in range(HEADS):
            sl = range(h * dh, (h + 1) * dh)
            for a in range(len(x)):
                sc = [sum(q[a][j] * k[b][j] for j in sl) / math.sqrt(dh)
                      + (0.0 if rel is None else float(rel[_bucket(a - b), h]))
                      for b in range(len(x))]
                top = max(sc)
                e = [math.exp(s - top) for s in sc]
                z = sum(e)
                for j in sl:
                    ctx[a][j] = sum(e[b] / z * v[b][j] for b in range(len(x)))
        att = [_ln([u + r for u, r in zip(_lin(c, g[p + "attention.output.dense.weight"],
                                                g[p + "attention.output.dense.bias"]), row)],
                   g[p + "attention.output.LayerNorm.weight"],
                   g[p + "attention.output.LayerNorm.bias"]) for c, row in zip(ctx, x)]
        x = []
        for row in att:
            mid = [_act(act, u) for u in _lin(row, g[p + "intermediate.dense.weight"],
                                               g[p + "intermediate.dense.bias"])]
            out = _lin(mid, g[p + "output.dense.weight"], g[p + "output.dense.bias"])
            x.append(_ln([u + r for u, r in zip(out, row)], g[p + "output.LayerNorm.weight"],
                         g[p + "output.LayerNorm.bias"]))
    parts = []
    for mode in ("cls_token", "max_tokens", "mean_tokens", "mean_sqrt_len_tokens"):
        if mode not in pooling:
            continue
        cols = list(zip(*x))
        parts += {"cls_token": list(x[0]), "max_tokens": [max(c) for c in cols],
                  "mean_tokens": [sum(c) / len(x) for c in cols],
                  "mean_sqrt_len_tokens": [sum(c) / math.sqrt(len(x)) for c in cols]}[mode]
    for dw, act_name in dense:
        parts = [_act(act_name, u) for u in _lin(parts, dw["linear.weight"], dw["linear.bias"])]
    norm = math.sqrt(sum(u * u for u in parts))
    return np.array([u / norm for u in parts])


def _check_against_oracle(m, w, texts=TEXTS, **kw):
    got = m.embed(texts)
    for text, row, ids in zip(texts, got, m.token_ids(texts)):
        want = oracle(w, ids, **kw)
        assert np.allclose(row, want, atol=2e-5), (text, np.abs(row - want).max())
        assert abs(float(np.linalg.norm(row)) - 1) < 1e-5


# -- tests -----------------------------------------------------------------------------

@pytest.mark.parametrize("prefix", ["", "bert."])
@pytest.mark.parametrize("act", ["gelu", "gelu_new", "relu"])
def test_bert_encoder_matches_the_definition(tmp_path, prefix, act):
    w, _ = _model(tmp_path / "mini", prefix=prefix, act=act)
    m = load_model(str(tmp_path / "mini"))
    assert isinstance(m, TransformerEmbedder)
    assert (m.name, m.dim, m.max_tokens) == ("mini", H, POSITIONS)
    ids = m.token_ids(["The cat sat", ""])
    assert ids[0][0] == 2 and ids[0][-1] == 3 and len(ids[0]) == 5 and ids[1] == [2, 3]
    _check_against_oracle(m, w, prefix=prefix, act=act)


@pytest.mark.parametrize("kind", ["roberta", "xlm-roberta"])
def test_roberta_positions_start_after_the_padding_id(tmp_path, kind):
    w, _ = _model(tmp_path / "rob", kind=kind, prefix="roberta.")
    m = load_model(str(tmp_path / "rob"))
    assert m.max_tokens == POSITIONS
    _check_against_oracle(m, w, prefix="roberta.", pos0=2)


@pytest.mark.parametrize("pooling", [("cls_token",), ("max_tokens",), ("mean_sqrt_len_tokens",),
                                     ("cls_token", "mean_tokens", "max_tokens")])
def test_pooling_modes_and_dense_layers(tmp_path, pooling):
    dense = [(12, "torch.nn.modules.activation.Tanh"), (6, "torch.nn.modules.linear.Identity")]
    w, dw = _model(tmp_path / "pool", pooling=pooling, dense=dense)
    m = load_model(str(tmp_path / "pool"))
    assert m.dim == 6
    _check_against_oracle(m, w, pooling=pooling, dense=dw)


def test_an_encoder_folder_alone_is_mean_pooled(tmp_path):
    w, _ = _model(tmp_path / "bare", modules=False)
    m = load_model(str(tmp_path / "bare"))
    assert isinstance(m, TransformerEmbedder)
    _check_against_oracle(m, w)


def test_texts_are_cut_at_max_seq_length(tmp_path):
    _model(tmp_path / "cut", max_seq=6)
    m = load_model(str(tmp_path / "cut"))
    long = "the cat sat on a mat and the dog ran in the park"
    ids = m.token_ids([long])[0]
    assert len(ids) == 6 and ids[0] == 2 and ids[-1] == 3
    cut = m.embed(["the cat sat on"])          # the same four words kept
    assert np.array_equal(m.embed([long]), cut)


def test_a_text_does_not_depend_on_its_neighbours(tmp_path):
    _model(tmp_path / "m")
    m = load_model(str(tmp_path / "m"))
    together = m.embed(TEXTS, batch_size=3)
    for i, t in enumerate(TEXTS):
        assert np.array_equal(m.embed([t])[0], together[i])
    assert np.array_equal(m.embed(TEXTS[::-1])[::-1], together)


class _StandIn:
    """NumPy standing in for CuPy: any namespace other than NumPy itself
    takes the device path (texts of one length encoded together)."""
    __name__ = "numpy-stand-in"

    def __getattr__(self, name):
        return getattr(np, name)


def test_the_device_path_groups_texts_of_one_length(tmp_path):
    _model(tmp_path / "m")
    m = load_model(str(tmp_path / "m"))
    texts = ["the cat sat", "the dog ran", "a big house", "red blue tree", "the cat"] * 3
    lengths = {len(i) for i in m.token_ids(texts)}
    assert len(lengths) == 2                 # groups of several texts, of two lengths
    calls = []
    real = m.encode

    def spy(ids, xp=np):
        calls.append(len(ids))
        return real(ids, xp)
    m.encode = spy
    dev = m.embed(texts, xp=_StandIn())
    assert sorted(calls) == [3, 12]
    host = TransformerEmbedder(str(tmp_path / "m")).embed(texts)
    assert np.allclose(dev, host, atol=1e-6)


@pytest.mark.parametrize("change, words", [
    (lambda f: _edit(f / "config.json", model_type="qwen3"), "model_type 'qwen3'"),
    (lambda f: _edit(f / "config.json", hidden_act="swiglu"), "activation 'swiglu'"),
    (lambda f: _edit(f / "1_Pooling" / "config.json", pooling_mode_mean_tokens=False,
                     pooling_mode_weightedmean_tokens=True), "weightedmean"),
    (lambda f: _edit(f / "sentence_bert_config.json", max_seq_length="long"), "max_seq_length"),
    (lambda f: _drop_tensor(f, "encoder.layer.1.output.dense.bias"),
     "no encoder.layer.1.output.dense.bias tensor"),
    (lambda f: (f / "tokenizer.json").unlink(), "no tokenizer.json"),
    (lambda f: (f / "modules.json").write_text(json.dumps(
        [{"idx": 0, "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
         {"idx": 1, "path": "", "type": "sentence_transformers.models.Transformer"}])),
     "modules Pooling, Transformer"),
])
def test_what_is_not_run_is_refused_in_one_line(tmp_path, change, words):
    folder = tmp_path / "m"
    _model(folder, max_seq=8)
    change(folder)
    with pytest.raises(ModelError) as exc:
        load_model(str(folder))
    msg = str(exc.value)
    assert words in msg and "\n" not in msg, msg


def _edit(path, **changes):
    cfg = json.loads(path.read_text()) if path.exists() else {}
    cfg.update(changes)
    path.write_text(json.dumps(cfg))


def _drop_tensor(folder, name):
    from safetensors.numpy import load_file
    w = load_file(str(folder / "model.safetensors"))
    del w[name]
    save_file(w, str(folder / "model.safetensors"))


def test_semantic_command_runs_a_transformer_model(tmp_path):
    _model(tmp_path / "enc")
    src = tmp_path / "in.jsonl"
    texts = TEXTS + ["The cat sat on the mat!", "the quick brown fox jumps over the lazy dog"]
    src.write_text("".join(json.dumps({"id": f"d{i}", "text": t}) + "\n"
                           for i, t in enumerate(texts)))
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "gpu_dedup.cli", "semantic", str(src), "--output",
                        str(out), "--model", str(tmp_path / "enc"), "--threshold", "0.99",
                        "--search", "exact"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["model"]["name"] == "enc" and report["model"]["dim"] == H
    assert report["model"]["embedded_on"] == "cpu"
    import pyarrow.parquet as pq
    clusters = pq.read_table(out / "clusters.parquet").to_pydict()
    m = load_model(str(tmp_path / "enc"))
    emb = m.embed(texts)
    for i, dup, sim in zip(clusters["id"], clusters["duplicate_of"], clusters["similarity"]):
        if dup is not None:           # every removal is at the threshold, by these embeddings
            a, b = int(i[1:]), int(dup[1:])
            assert float(emb[a] @ emb[b]) >= 0.99 - 1e-6 and sim >= 0.99 - 1e-6
    assert report["documents"]["removed"] >= 1     # "the cat sat on the mat" twice, in effect


_DISTIL = {"attention.self.query": "attention.q_lin", "attention.self.key": "attention.k_lin",
           "attention.self.value": "attention.v_lin", "attention.output.dense": "attention.out_lin",
           "attention.output.LayerNorm": "sa_layer_norm", "intermediate.dense": "ffn.lin1",
           "output.dense": "ffn.lin2", "output.LayerNorm": "output_layer_norm"}


def _renamed(w: dict, names: dict) -> dict:
    """BERT's tensors ``w`` under another architecture's ``names`` (a part
    of a tensor's name to its replacement), without token types."""
    out = {}
    for k, v in w.items():
        for a, b in names.items():
            if k.endswith((a + ".weight", a + ".bias")):
                k = k.replace(a, b)
                break
        if "token_type" not in k:
            out[k] = v
    return out


def test_distilbert_names_and_no_token_types(tmp_path):
    """DistilBERT: the same blocks under other names, sizes named dim,
    n_heads, n_layers, and no token type embeddings."""
    folder = tmp_path / "distil"
    w, _ = _model(folder, prefix="distilbert.")
    renamed = _renamed({k.replace("distilbert.encoder.layer.", "distilbert.transformer.layer."): v
                        for k, v in w.items()}, _DISTIL)
    save_file(renamed, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(
        {"model_type": "distilbert", "dim": H, "n_heads": HEADS, "n_layers": LAYERS,
         "hidden_dim": INTER, "activation": "gelu", "max_position_embeddings": POSITIONS}))
    m = load_model(str(folder))
    assert isinstance(m, TransformerEmbedder) and m.dim == H
    zero_types = dict(w, **{"distilbert.embeddings.token_type_embeddings.weight":
                            np.zeros((2, H), np.float32)})
    _check_against_oracle(m, zero_types, prefix="distilbert.")


def test_relative_buckets_match_the_definition():
    from gpu_dedup.semantic.transformer import relative_buckets
    got = relative_buckets(400)
    want = np.array([[_bucket(i - j) for j in range(400)] for i in range(400)])
    assert np.array_equal(got, want)
    assert got.max() == 31 and got.min() == 0          # both halves, clipped at the last


_MPNET = {"attention.self.query": "attention.attn.q", "attention.self.key": "attention.attn.k",
          "attention.self.value": "attention.attn.v", "attention.output.dense": "attention.attn.o",
          "attention.output.LayerNorm": "attention.LayerNorm"}


def test_mpnet_relative_position_bias(tmp_path):
    """MPNet (all-mpnet-base-v2's kind): BERT's blocks under other names, no
    token types, positions from 2, and a learned bias per head and bucket of
    relative position added to every layer's attention scores."""
    folder = tmp_path / "mpnet"
    w, _ = _model(folder, kind="mpnet", prefix="mpnet.")
    rel = (np.random.default_rng(7).standard_normal((32, HEADS)) * 0.5).astype(np.float32)
    renamed = {"mpnet.encoder.relative_attention_bias.weight": rel, **_renamed(w, _MPNET)}
    save_file(renamed, str(folder / "model.safetensors"))
    m = load_model(str(folder))
    assert isinstance(m, TransformerEmbedder) and m.kind == "mpnet"
    zero_types = dict(w, **{"mpnet.embeddings.token_type_embeddings.weight":
                            np.zeros((1, H), np.float32)})
    texts = TEXTS + ["the quick brown fox jumps over the lazy dog in the park and the big "
                     "red house"]                   # 18 tokens: distances in the shared buckets
    assert max(map(len, m.token_ids(texts))) > 16
    _check_against_oracle(m, zero_types, texts=texts, prefix="mpnet.", pos0=2, rel=rel)
    # without the bias the rows differ: the test would see it missing
    assert not np.allclose(m.embed(texts[-1:])[0],
                           oracle(zero_types, m.token_ids(texts[-1:])[0], prefix="mpnet.",
                                  pos0=2), atol=1e-3)
    # a table of too few buckets is refused
    renamed["mpnet.encoder.relative_attention_bias.weight"] = rel[:16]
    save_file(renamed, str(folder / "model.safetensors"))
    with pytest.raises(ModelError, match="relative_attention_bias"):
        load_model(str(folder))
