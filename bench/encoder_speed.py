"""Embedding with a sentence-transformers encoder, without torch: tokens a second.

    python bench/encoder_speed.py [--docs 400] [--mpnet-docs 100] [--repeat 3] [--no-save]

No model can be downloaded here, so each model is one of the shape of a
common sentence-transformers model with random weights, and a WordPiece
vocabulary of the corpus's most common words; the work per token is the real
model's. The shapes: all-MiniLM-L6-v2 (BERT, 6 layers, 384 dimensions, 12
heads, 1,536 in the feed-forward layer, 256 tokens at most, mean pooling)
and all-mpnet-base-v2 (MPNet, 12 layers, 768 dimensions, 12 heads, 3,072 in
the feed-forward layer, 384 tokens at most, its relative position bias, mean
pooling). The texts are the first ``--docs`` (``--mpnet-docs``) real
documents of ``bench/corpora.py``'s debian-entries. One text at a time (the
host's path) and texts of one token count together (the device's path, run
here on NumPy); medians of ``--repeat``.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import statistics
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import corpora  # noqa: E402
import results  # noqa: E402

VOCAB = 30522
#: name: (model_type, hidden, layers, heads, feed-forward, max tokens, position rows)
SHAPES = {"all-MiniLM-L6-v2": ("bert", 384, 6, 12, 1536, 256, 512),
          "all-mpnet-base-v2": ("mpnet", 768, 12, 12, 3072, 384, 514)}
#: MPNet's names of BERT's attention tensors.
_MPNET = {"attention.self.query": "attention.attn.q", "attention.self.key": "attention.attn.k",
          "attention.self.value": "attention.attn.v", "attention.output.dense": "attention.attn.o",
          "attention.output.LayerNorm": "attention.LayerNorm"}


def make_model(folder: str, texts: list, shape: str) -> int:
    """A sentence-transformers folder of the model ``shape`` of :data:`SHAPES`;
    its largest number of tokens."""
    kind, HIDDEN, LAYERS, HEADS, INTER, MAX_SEQ, POS = SHAPES[shape]
    from safetensors.numpy import save_file
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    words = collections.Counter(w for t in texts for w in re.findall(r"\w+|[^\w\s]", t.lower()))
    chars = "abcdefghijklmnopqrstuvwxyz0123456789"
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + list(chars) + ["##" + c for c in chars]
    vocab += [w for w, _ in words.most_common(VOCAB - len(vocab)) if w not in set(vocab)]
    tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(vocab)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tok.save(os.path.join(folder, "tokenizer.json"))
    rng = np.random.default_rng(0)

    def r(*shape):
        return (rng.standard_normal(shape) * 0.05).astype(np.float32)
    ones = np.ones(HIDDEN, np.float32)
    w = {"embeddings.word_embeddings.weight": r(VOCAB, HIDDEN),
         "embeddings.position_embeddings.weight": r(POS, HIDDEN),
         "embeddings.token_type_embeddings.weight": r(2, HIDDEN),
         "embeddings.LayerNorm.weight": ones, "embeddings.LayerNorm.bias": r(HIDDEN)}
    for i in range(LAYERS):
        p = f"encoder.layer.{i}."
        for n in ("query", "key", "value"):
            w[p + f"attention.self.{n}.weight"] = r(HIDDEN, HIDDEN)
            w[p + f"attention.self.{n}.bias"] = r(HIDDEN)
        w.update({p + "attention.output.dense.weight": r(HIDDEN, HIDDEN),
                  p + "attention.output.dense.bias": r(HIDDEN),
                  p + "attention.output.LayerNorm.weight": ones,
                  p + "attention.output.LayerNorm.bias": r(HIDDEN),
                  p + "intermediate.dense.weight": r(INTER, HIDDEN),
                  p + "intermediate.dense.bias": r(INTER),
                  p + "output.dense.weight": r(HIDDEN, INTER), p + "output.dense.bias": r(HIDDEN),
                  p + "output.LayerNorm.weight": ones, p + "output.LayerNorm.bias": r(HIDDEN)})
    if kind == "mpnet":
        w = {next((k.replace(a, b) for a, b in _MPNET.items() if a in k), k): v
             for k, v in w.items() if "token_type" not in k}
        w["encoder.relative_attention_bias.weight"] = r(32, HEADS)
    save_file(w, os.path.join(folder, "model.safetensors"))
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"model_type": kind, "hidden_size": HIDDEN, "num_attention_heads": HEADS,
                   "num_hidden_layers": LAYERS, "intermediate_size": INTER,
                   "hidden_act": "gelu", "layer_norm_eps": 1e-12}, f)
    with open(os.path.join(folder, "sentence_bert_config.json"), "w") as f:
        json.dump({"max_seq_length": MAX_SEQ, "do_lower_case": False}, f)
    return MAX_SEQ


class _Grouped:
    """NumPy as the device namespace: texts of one token count together."""
    __name__ = "numpy-grouped"

    def __getattr__(self, name):
        return getattr(np, name)


def measure(shape: str, texts: list, repeat: int) -> dict:
    """Seconds of each path embedding ``texts`` with a model of ``shape``."""
    from gpu_dedup.semantic.transformer import TransformerEmbedder
    with tempfile.TemporaryDirectory() as d:
        max_seq = make_model(d, texts, shape)
        model = TransformerEmbedder(d)
        tokens = sum(map(len, model.token_ids(texts)))
        runs = {"one text at a time": [], "texts of one length together": []}
        for _ in range(repeat):
            for how, xp in (("one text at a time", None), ("texts of one length together",
                                                           _Grouped())):
                t = time.perf_counter()
                model.embed(texts, xp=xp)
                runs[how].append(time.perf_counter() - t)
    return {"shape": shape, "docs": len(texts), "tokens": tokens, "max_seq": max_seq,
            "runs": runs}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=400)
    ap.add_argument("--mpnet-docs", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-save", action="store_true")
    args = ap.parse_args(argv)
    spec = corpora.debian_entries()
    with open(spec.path) as f:
        texts = [json.loads(line)["text"] for line, _ in zip(f, range(max(args.docs,
                                                                          args.mpnet_docs)))]
    m = results.machine()
    done = [measure(shape, texts[:n], args.repeat)
            for shape, n in (("all-MiniLM-L6-v2", args.docs),
                             ("all-mpnet-base-v2", args.mpnet_docs))]
    lines = results.Lines()
    lines.say(f"`python bench/encoder_speed.py --docs {args.docs} --mpnet-docs "
              f"{args.mpnet_docs} --repeat {args.repeat}`, {results.machine_line(m)}; "
              f"load {m['load_average']}.")
    lines.say()
    lines.say("Models of these shapes with random weights, on the first real documents of "
              "debian-entries:")
    lines.say()
    lines.say("| model's shape | documents | tokens | path | seconds (median) | documents/s "
              "| tokens/s |")
    lines.say("|---|---:|---:|---|---:|---:|---:|")
    for d in done:
        for how, secs in d["runs"].items():
            s = statistics.median(secs)
            lines.say(f"| {d['shape']} (at most {d['max_seq']} tokens) | {d['docs']} | "
                      f"{d['tokens']:,} | {how} | {s:.2f} | {d['docs'] / s:,.0f} | "
                      f"{d['tokens'] / s:,.0f} |")
    data = {"machine": m, "models": done}
    if not args.no_save:
        results.save("encoder", "\n".join(lines), data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
