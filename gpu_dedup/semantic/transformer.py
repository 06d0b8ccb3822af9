"""Sentence-transformers models with a transformer encoder, run without torch.

A local sentence-transformers folder whose ``modules.json`` lists a
``Transformer`` of a BERT-family encoder (``model_type`` ``bert``,
``roberta``, ``xlm-roberta``, ``distilbert`` or ``mpnet`` in its
``config.json``: all-MiniLM, all-mpnet, BGE, GTE, E5, the msmarco
DistilBERTs and their kind), then a
``Pooling`` (CLS, mean, max or mean over the square root of the length),
any ``Dense`` layers (tanh or identity) and a ``Normalize``. A folder of
such an encoder alone (``config.json`` and ``model.safetensors``, no
``modules.json``) is read as that encoder with mean pooling.

The encoder's forward pass (Devlin et al. 2019; MPNet, Song et al. 2020,
adds a learned bias per head and bucket of relative position to the
attention scores) is written out below in
float32 over an array namespace: NumPy on the host, CuPy on a GPU. Its
weights come from ``model.safetensors``, its tokens from ``tokenizer.json``
(with the special tokens the tokenizer adds, cut to the model's
``max_seq_length``). Inference only: dropout is the identity.

Texts are encoded in groups of equal token counts, so no text is padded and
none sees another (no attention mask is needed). On the host a group is one
text, so a text's embedding does not depend on the texts beside it, to the
bit; on a GPU a group is up to ``group`` texts of one length, whose rows
then agree with the one-text results to rounding only.
"""
from __future__ import annotations

import json
import math
import os

import numpy as np

from ..arrays import to_host
from ..errors import ConfigError, ModelError
from .model_files import normalize_rows, read_tensors, read_tokenizer, text_list

#: The encoders this module runs, by ``model_type`` of ``config.json``.
ENCODERS = ("bert", "roberta", "xlm-roberta", "distilbert", "mpnet")
#: The tensors of one layer, by architecture: q, k, v, the attention's
#: output and its LayerNorm, the feed-forward's two products and the
#: LayerNorm after them (each name a prefix of ``.weight`` and ``.bias``).
_LAYER_NAMES = {
    "bert": ("encoder.layer.{i}.", ("attention.self.query", "attention.self.key",
                                     "attention.self.value"), "attention.output.dense",
             "attention.output.LayerNorm", "intermediate.dense", "output.dense",
             "output.LayerNorm"),
    "distilbert": ("transformer.layer.{i}.", ("attention.q_lin", "attention.k_lin",
                                              "attention.v_lin"), "attention.out_lin",
                   "sa_layer_norm", "ffn.lin1", "ffn.lin2", "output_layer_norm"),
    "mpnet": ("encoder.layer.{i}.", ("attention.attn.q", "attention.attn.k",
                                      "attention.attn.v"), "attention.attn.o",
              "attention.LayerNorm", "intermediate.dense", "output.dense", "output.LayerNorm"),
}
#: MPNet's relative positions: buckets (half for each direction), the
#: distances below which each has its own bucket in a direction, and the
#: distance from which all share the last (the reference implementation's
#: fixed values, whatever ``relative_attention_num_buckets`` says).
REL_BUCKETS, REL_EXACT, REL_MAX = 32, 8, 128
#: ``config.json``'s names of the sizes, by architecture (BERT's otherwise).
_CONFIG_NAMES = {"distilbert": ("dim", "n_heads", "n_layers", "activation")}
#: sentence-transformers' order of the pooled parts when several are on.
POOLING_MODES = ("cls_token", "max_tokens", "mean_tokens", "mean_sqrt_len_tokens")
#: Texts of one token count encoded together on a GPU.
GPU_GROUP = 256


def _read_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            got = json.load(f)
    except (OSError, ValueError) as e:
        raise ModelError(f"{path}: not a readable JSON file ({e})") from None
    if not isinstance(got, dict):
        raise ModelError(f"{path}: not a JSON object")
    return got


def is_encoder_folder(path: str) -> bool:
    """Whether ``path`` holds an encoder this module runs: a
    sentence-transformers ``Transformer`` module, or a ``config.json`` of a
    BERT-family ``model_type`` beside ``model.safetensors``."""
    modules = os.path.join(path, "modules.json")
    if os.path.isfile(modules):
        try:
            with open(modules, encoding="utf-8") as f:
                entries = json.load(f)
            return any(str(m.get("type", "")).endswith(".Transformer") for m in entries)
        except (OSError, ValueError, TypeError, AttributeError):
            return False
    config = os.path.join(path, "config.json")
    if not (os.path.isfile(config) and os.path.isfile(os.path.join(path, "model.safetensors"))):
        return False
    try:
        with open(config, encoding="utf-8") as f:
            return json.load(f).get("model_type") in ENCODERS
    except (OSError, ValueError, AttributeError):
        return False


def _activation(name: str, where: str):
    """The activation function ``name`` of a ``config.json`` or a Dense module."""
    if name in ("gelu", "gelu_python"):
        def gelu(xp, x):
            return 0.5 * x * (1.0 + _erf(xp, x * np.float32(1 / math.sqrt(2.0))))
        return gelu
    if name in ("gelu_new", "gelu_pytorch_tanh", "gelu_fast"):
        def gelu_tanh(xp, x):
            c = np.float32(math.sqrt(2.0 / math.pi))
            return 0.5 * x * (1.0 + xp.tanh(c * (x + np.float32(0.044715) * x * x * x)))
        return gelu_tanh
    if name == "relu":
        return lambda xp, x: xp.maximum(x, np.float32(0))
    if name in ("silu", "swish"):
        return lambda xp, x: x / (1.0 + xp.exp(-x))
    if name.endswith(("Tanh", "tanh")):
        return lambda xp, x: xp.tanh(x)
    if name.endswith("Identity"):
        return lambda xp, x: x
    raise ModelError(f"{where}: activation {name!r} is not one this encoder runs "
                     f"(gelu, gelu_new, relu, silu, tanh, identity)")


def _erf(xp, x):
    if getattr(xp, "__name__", "") == "cupy":
        from cupyx.scipy.special import erf
    else:
        from scipy.special import erf
    return erf(x).astype(np.float32, copy=False)


def relative_buckets(L: int) -> np.ndarray:
    """MPNet's bucket of each relative position of ``L`` tokens: ``(L, L)``
    int64, row the attending token ``i``, column the attended ``j``. With
    ``d = i - j``, a token after the attending one (``d < 0``) takes the
    upper half; distances below :data:`REL_EXACT` have a bucket each, longer
    ones share buckets logarithmically up to :data:`REL_MAX` (computed in
    float32, as the reference implementation does)."""
    pos = np.arange(L, dtype=np.int64)
    d = pos[:, None] - pos[None, :]
    half = REL_BUCKETS // 2
    n = np.abs(d)
    far = np.log(np.maximum(n, 1).astype(np.float32) / np.float32(REL_EXACT)) \
        / np.float32(math.log(REL_MAX / REL_EXACT)) * np.float32(half - REL_EXACT)
    far = np.minimum(REL_EXACT + far.astype(np.int64), half - 1)
    return np.where(d < 0, half, 0) + np.where(n < REL_EXACT, n, far)


def _layer_norm(xp, x, w, b, eps: float):
    mu = x.mean(axis=-1, keepdims=True)
    d = x - mu
    var = (d * d).mean(axis=-1, keepdims=True)
    return d / xp.sqrt(var + np.float32(eps)) * w + b


class TransformerEmbedder:
    """A sentence-transformers encoder model, L2-normalised rows (float32).

    Attributes:
        name: the model folder's name.
        dim: the number of dimensions of an embedding.
        max_tokens: the tokens of a text that count, special tokens included.
        tokenizer: the ``tokenizers.Tokenizer`` (truncating at
            ``max_tokens``, no padding).
    """

    def __init__(self, path: str):
        path = os.fspath(path)
        self.name = os.path.basename(os.path.normpath(os.path.abspath(path)))
        enc_dir, pooling, dense = self._modules(path)
        st_cfg = self._st_config(enc_dir)
        cfg = _read_json(os.path.join(enc_dir, "config.json"))
        kind = cfg.get("model_type")
        if kind not in ENCODERS:
            raise ModelError(f"{enc_dir}: an encoder of model_type {kind!r}; the encoders run "
                             f"here are {', '.join(ENCODERS)}")
        self.kind = kind
        hid, heads, layers, act_key = _CONFIG_NAMES.get(
            kind, ("hidden_size", "num_attention_heads", "num_hidden_layers", "hidden_act"))
        try:
            self.hidden = int(cfg[hid])
            self.heads = int(cfg[heads])
            self.layers = int(cfg[layers])
            self.eps = float(cfg.get("layer_norm_eps", 1e-12))
            act = str(cfg.get(act_key, "gelu"))
        except (KeyError, TypeError, ValueError) as e:
            raise ModelError(f"{enc_dir}/config.json: no valid {e} for the encoder") from None
        if self.hidden % self.heads:
            raise ModelError(f"{enc_dir}/config.json: hidden_size {self.hidden} is not a "
                             f"multiple of num_attention_heads {self.heads}")
        self.act = _activation(act, f"{enc_dir}/config.json")
        # RoBERTa numbers positions from the padding id + 1; MPNet from 2
        # (its padding id is fixed at 1)
        self.pos0 = (int(cfg.get("pad_token_id", 1)) + 1 if "roberta" in kind
                     else 2 if kind == "mpnet" else 0)
        weights = os.path.join(enc_dir, "model.safetensors")
        if not os.path.isfile(weights):
            raise ModelError(f"{enc_dir} has no model.safetensors: save the model in "
                             f"safetensors format (model.save(DIR, safe_serialization=True))")
        raw = read_tensors(weights, lambda keys: keys)
        self.w = self._encoder_weights(raw, weights)
        del raw
        rows = self.w["pos"].shape[0] - self.pos0
        limit = self._max_seq_length(st_cfg, enc_dir, rows)
        tok_path = os.path.join(enc_dir, "tokenizer.json")
        if not os.path.isfile(tok_path):
            raise ModelError(f"{enc_dir} has no tokenizer.json: save the model with "
                             f"sentence-transformers or transformers, which write it")
        tok = read_tokenizer(tok_path)
        vocab = tok.get_vocab_size(with_added_tokens=True)
        if vocab > self.w["word"].shape[0]:
            raise ModelError(f"{tok_path}: {vocab} tokens, but the encoder has "
                             f"{self.w['word'].shape[0]} token vectors; not this model's tokenizer")
        tok.no_padding()
        tok.enable_truncation(max_length=limit)
        self.tokenizer, self.max_tokens = tok, limit
        self.lower = bool(st_cfg.get("do_lower_case", False))
        self.pooling = pooling
        self.dense = dense
        dim = self.hidden * len(pooling)
        for wd, _, _, where in dense:
            if wd.shape[1] != dim:
                raise ModelError(f"{where}: takes {wd.shape[1]} values, the layer before gives "
                                 f"{dim}")
            dim = wd.shape[0]
        self.dim = dim
        self._on: dict = {}              # the weights on a device, by namespace

    #: Embeds on the array namespace it is given (a GPU's, in a GPU run).
    on_device = True

    def __repr__(self) -> str:
        return (f"TransformerEmbedder({self.name!r}, dim={self.dim}, layers={self.layers}, "
                f"max_tokens={self.max_tokens})")

    # -- reading the folder ---------------------------------------------------------

    def _modules(self, path: str):
        """``(encoder folder, pooling modes, dense layers)``."""
        modules = os.path.join(path, "modules.json")
        if not os.path.isfile(modules):
            return path, ("mean_tokens",), []
        try:
            with open(modules, encoding="utf-8") as f:
                entries = sorted(json.load(f), key=lambda m: int(m.get("idx", 0)))
            kinds = [(str(m["type"]).rpartition(".")[2], str(m.get("path", ""))) for m in entries]
        except (OSError, ValueError, TypeError, AttributeError, KeyError) as e:
            raise ModelError(f"{modules}: not a readable sentence-transformers module list "
                             f"({e})") from None
        names = [k for k, _ in kinds]
        if not names or names[0] != "Transformer" or "Pooling" not in names[1:2] or any(
                k not in ("Dense", "Normalize") for k in names[2:]):
            raise ModelError(f"{path}: a sentence-transformers model of modules "
                             f"{', '.join(names) or 'none'}; the encoder models run here are "
                             f"Transformer, Pooling, then Dense or Normalize modules")
        enc_dir = os.path.normpath(os.path.join(path, kinds[0][1]))
        pooling = self._pooling(os.path.join(path, kinds[1][1], "config.json"))
        dense = [self._dense(os.path.join(path, p)) for k, p in kinds[2:] if k == "Dense"]
        return enc_dir, pooling, dense

    @staticmethod
    def _st_config(enc_dir: str) -> dict:
        p = os.path.join(enc_dir, "sentence_bert_config.json")
        return _read_json(p) if os.path.isfile(p) else {}

    @staticmethod
    def _max_seq_length(st_cfg: dict, enc_dir: str, rows: int) -> int:
        got = st_cfg.get("max_seq_length")
        if got is None:
            return rows
        if isinstance(got, bool) or not isinstance(got, int) or got < 2:
            raise ModelError(f"{enc_dir}/sentence_bert_config.json: max_seq_length {got!r} "
                             f"is not a number of tokens")
        return min(int(got), rows)

    @staticmethod
    def _pooling(path: str) -> tuple:
        cfg = _read_json(path)
        on = tuple(m for m in POOLING_MODES if cfg.get(f"pooling_mode_{m}"))
        other = [k for k, v in cfg.items() if k.startswith("pooling_mode_") and v
                 and k[len("pooling_mode_"):] not in POOLING_MODES]
        if other or not on:
            raise ModelError(f"{path}: pooling {', '.join(other) or 'none'}; the pooling run "
                             f"here is cls_token, mean_tokens, max_tokens or "
                             f"mean_sqrt_len_tokens")
        return on

    @staticmethod
    def _dense(folder: str):
        cfg = _read_json(os.path.join(folder, "config.json"))
        weights = os.path.join(folder, "model.safetensors")
        if not os.path.isfile(weights):
            raise ModelError(f"{folder} has no model.safetensors: save the model in "
                             f"safetensors format")
        t = read_tensors(weights, lambda keys: [k for k in ("linear.weight", "linear.bias")
                                                 if k in keys])
        if "linear.weight" not in t or t["linear.weight"].ndim != 2:
            raise ModelError(f"{weights}: no linear.weight matrix for a Dense module")
        w = np.ascontiguousarray(t["linear.weight"], dtype=np.float32)
        b = t.get("linear.bias")
        b = (np.zeros(w.shape[0], np.float32) if b is None
             else np.ascontiguousarray(b, dtype=np.float32))
        act = _activation(str(cfg.get("activation_function", "torch.nn.modules.activation.Tanh")),
                          os.path.join(folder, "config.json"))
        return w, b, act, folder

    def _encoder_weights(self, raw: dict, where: str) -> dict:
        """The encoder's tensors as float32, under short names; a key prefix
        (``bert.``, ``roberta.``...) is taken off."""
        suffix = "embeddings.word_embeddings.weight"
        prefix = next((k[:-len(suffix)] for k in sorted(raw) if k.endswith(suffix)), None)
        if prefix is None:
            raise ModelError(f"{where}: no {suffix} tensor: not a BERT-family encoder")

        def get(name, shape):
            for n in (name, name.replace("LayerNorm.weight", "LayerNorm.gamma")
                      .replace("LayerNorm.bias", "LayerNorm.beta")):
                t = raw.get(prefix + n)
                if t is not None:
                    break
            else:
                raise ModelError(f"{where}: no {prefix}{name} tensor")
            if t.dtype.kind not in "fiu" or t.ndim != len(shape) or any(
                    want is not None and got != want for got, want in zip(t.shape, shape)):
                shown = "(" + ", ".join("n" if d is None else str(d) for d in shape) + ")"
                raise ModelError(f"{where}: {prefix}{name} is {t.dtype} of shape "
                                 f"{tuple(t.shape)}, not numbers of shape {shown}")
            t = np.ascontiguousarray(t, dtype=np.float32)
            if not np.isfinite(t).all():
                raise ModelError(f"{where}: {prefix}{name} holds NaN or infinite values")
            return t

        H = self.hidden
        w = {"word": get("embeddings.word_embeddings.weight", (None, H)),
             "pos": get("embeddings.position_embeddings.weight", (None, H)),
             "ln_w": get("embeddings.LayerNorm.weight", (H,)),
             "ln_b": get("embeddings.LayerNorm.bias", (H,))}
        # DistilBERT and MPNet have no token types: BERT's type 0 adds nothing
        w["type0"] = (np.zeros(H, np.float32) if self.kind in ("distilbert", "mpnet")
                      else get("embeddings.token_type_embeddings.weight", (None, H))[0])
        if self.kind == "mpnet":
            w["rel"] = get("encoder.relative_attention_bias.weight", (None, self.heads))
            if w["rel"].shape[0] < REL_BUCKETS:
                raise ModelError(f"{where}: {prefix}encoder.relative_attention_bias.weight has "
                                 f"{w['rel'].shape[0]} rows, not the {REL_BUCKETS} buckets of "
                                 f"relative positions MPNet uses")
        layer_at, qkv, ao, aln, inter_n, out_n, oln = _LAYER_NAMES[
            self.kind if self.kind in _LAYER_NAMES else "bert"]
        layers = []
        for i in range(self.layers):
            p = layer_at.format(i=i)
            inter = get(p + inter_n + ".weight", (None, H))
            I_ = inter.shape[0]
            layers.append({
                # q, k and v side by side: one product a layer
                "qkv_w": np.ascontiguousarray(np.concatenate(
                    [get(p + n + ".weight", (H, H)) for n in qkv]).T),
                "qkv_b": np.concatenate([get(p + n + ".bias", (H,)) for n in qkv]),
                "ao_w": np.ascontiguousarray(get(p + ao + ".weight", (H, H)).T),
                "ao_b": get(p + ao + ".bias", (H,)),
                "aln_w": get(p + aln + ".weight", (H,)),
                "aln_b": get(p + aln + ".bias", (H,)),
                "i_w": np.ascontiguousarray(inter.T),
                "i_b": get(p + inter_n + ".bias", (I_,)),
                "o_w": np.ascontiguousarray(get(p + out_n + ".weight", (H, I_)).T),
                "o_b": get(p + out_n + ".bias", (H,)),
                "oln_w": get(p + oln + ".weight", (H,)),
                "oln_b": get(p + oln + ".bias", (H,)),
            })
        w["layers"] = layers
        return w

    # -- running it -----------------------------------------------------------------

    def _weights(self, xp):
        if xp is np:
            return self.w, self.dense
        got = self._on.get(id(xp))
        if got is None:
            def move(d):
                return {k: xp.asarray(v) for k, v in d.items()}
            w = move({k: v for k, v in self.w.items() if k != "layers"})
            w["layers"] = [move(layer) for layer in self.w["layers"]]
            dense = [(xp.asarray(a), xp.asarray(b), act, where)
                     for a, b, act, where in self.dense]
            got = self._on[id(xp)] = (w, dense)
        return got

    def token_ids(self, texts: list) -> list:
        """The token ids of each text: special tokens added, cut at
        ``max_tokens``."""
        if self.lower:
            texts = [t.lower() for t in texts]
        return [e.ids for e in self.tokenizer.encode_batch(texts, add_special_tokens=True)]

    def encode(self, ids, xp=np):
        """The pooled, dense-mapped rows (not yet normalised) of a group of
        texts of one token count: ``ids`` is ``(texts, tokens)``."""
        w, dense = self._weights(xp)
        ids = xp.asarray(np.asarray(ids, dtype=np.int64))
        B, L = ids.shape
        H, nh = self.hidden, self.heads
        dh = H // nh
        x = w["word"][ids] + w["pos"][self.pos0:self.pos0 + L][None] + w["type0"]
        x = _layer_norm(xp, x, w["ln_w"], w["ln_b"], self.eps)
        scale = np.float32(1.0 / math.sqrt(dh))
        bias = w["rel"][xp.asarray(relative_buckets(L))].transpose(2, 0, 1) if "rel" in w \
            else None                                                   # (nh, L, L)
        for lw in w["layers"]:
            qkv = xp.matmul(x, lw["qkv_w"]) + lw["qkv_b"]                # (B, L, 3H)
            qkv = qkv.reshape(B, L, 3, nh, dh).transpose(2, 0, 3, 1, 4)  # (3, B, nh, L, dh)
            s = xp.matmul(qkv[0], qkv[1].transpose(0, 1, 3, 2)) * scale  # (B, nh, L, L)
            if bias is not None:
                s = s + bias
            s = xp.exp(s - s.max(axis=-1, keepdims=True))
            s /= s.sum(axis=-1, keepdims=True)
            ctx = xp.matmul(s, qkv[2]).transpose(0, 2, 1, 3).reshape(B, L, H)
            x = _layer_norm(xp, xp.matmul(ctx, lw["ao_w"]) + lw["ao_b"] + x,
                            lw["aln_w"], lw["aln_b"], self.eps)
            h = self.act(xp, xp.matmul(x, lw["i_w"]) + lw["i_b"])
            x = _layer_norm(xp, xp.matmul(h, lw["o_w"]) + lw["o_b"] + x,
                            lw["oln_w"], lw["oln_b"], self.eps)
        parts = []
        for mode in self.pooling:
            if mode == "cls_token":
                parts.append(x[:, 0])
            elif mode == "max_tokens":
                parts.append(x.max(axis=1))
            elif mode == "mean_tokens":
                parts.append(x.sum(axis=1) / np.float32(L))
            else:                                   # mean_sqrt_len_tokens
                parts.append(x.sum(axis=1) / np.float32(math.sqrt(L)))
        out = parts[0] if len(parts) == 1 else xp.concatenate(parts, axis=1)
        for wd, bd, act, _ in dense:
            out = act(xp, xp.matmul(out, wd.T) + bd)
        return out

    def embed(self, texts, batch_size: int = 4096, xp=None) -> np.ndarray:
        """The embedding of each text, as :meth:`StaticEmbedder.embed
        <gpu_dedup.semantic.embed.StaticEmbedder.embed>` gives it.

        Args:
            texts: a list of str, or a pyarrow string array.
            batch_size: texts tokenized at a time (the result never depends
                on it).
            xp: the array namespace to run on (NumPy, or CuPy on a GPU);
                None: NumPy.

        Returns:
            float32 ``(len(texts), dim)``: rows of norm 1 (0 for a text
            whose encoding is all zero).
        """
        if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ConfigError(f"batch_size must be a positive number of texts, got {batch_size!r}")
        xp = np if xp is None else xp
        texts = text_list(texts)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        group = 1 if xp is np else GPU_GROUP
        for start in range(0, len(texts), batch_size):
            ids = self.token_ids(texts[start:start + batch_size])
            lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
            order = np.argsort(lengths, kind="stable")
            i = int(np.searchsorted(lengths[order], 1))      # no token: the zero vector
            out[start + order[:i]] = 0.0
            while i < order.size:
                j = i + 1
                while j < order.size and j - i < group and lengths[order[j]] == lengths[order[i]]:
                    j += 1
                rows = order[i:j]
                got = self.encode([ids[r] for r in rows.tolist()], xp)
                out[start + rows] = to_host(got)
                i = j
        return normalize_rows(out)
