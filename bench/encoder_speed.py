"""Embedding with a sentence-transformers encoder, without torch: tokens a second.

    python bench/encoder_speed.py [--docs 400] [--repeat 3] [--no-save]

No model can be downloaded here, so the model is one of the shape of
all-MiniLM-L6-v2 (BERT, 6 layers, 384 dimensions, 12 heads, 1,536 in the
feed-forward layer, 256 tokens at most, mean pooling) with random weights, and
a WordPiece vocabulary of the corpus's most common words; the work per token
is the real model's. The texts are the first ``--docs`` real documents of
``bench/corpora.py``'s debian-entries. One text at a time (the host's path)
and texts of one token count together (the device's path, run here on
NumPy); medians of ``--repeat``.
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

HIDDEN, LAYERS, HEADS, INTER, VOCAB, MAX_SEQ = 384, 6, 12, 1536, 30522, 256


def make_model(folder: str, texts: list) -> None:
    """A sentence-transformers folder of all-MiniLM-L6-v2's shape."""
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
         "embeddings.position_embeddings.weight": r(512, HIDDEN),
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
    save_file(w, os.path.join(folder, "model.safetensors"))
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"model_type": "bert", "hidden_size": HIDDEN, "num_attention_heads": HEADS,
                   "num_hidden_layers": LAYERS, "intermediate_size": INTER,
                   "hidden_act": "gelu", "layer_norm_eps": 1e-12}, f)
    with open(os.path.join(folder, "sentence_bert_config.json"), "w") as f:
        json.dump({"max_seq_length": MAX_SEQ, "do_lower_case": False}, f)


class _Grouped:
    """NumPy as the device namespace: texts of one token count together."""
    __name__ = "numpy-grouped"

    def __getattr__(self, name):
        return getattr(np, name)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=400)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-save", action="store_true")
    args = ap.parse_args(argv)
    from gpu_dedup.semantic.transformer import TransformerEmbedder
    spec = corpora.debian_entries()
    with open(spec.path) as f:
        texts = [json.loads(line)["text"] for line, _ in zip(f, range(args.docs))]
    m = results.machine()
    with tempfile.TemporaryDirectory() as d:
        make_model(d, texts)
        model = TransformerEmbedder(d)
        tokens = sum(map(len, model.token_ids(texts)))
        runs = {"one text at a time": [], "texts of one length together": []}
        for _ in range(args.repeat):
            for how, xp in (("one text at a time", None), ("texts of one length together",
                                                           _Grouped())):
                t = time.perf_counter()
                model.embed(texts, xp=xp)
                runs[how].append(time.perf_counter() - t)
    lines = results.Lines()
    lines.say(f"`python bench/encoder_speed.py --docs {args.docs} --repeat {args.repeat}`, "
              f"{results.machine_line(m)}; load {m['load_average']}.")
    lines.say()
    lines.say(f"A model of all-MiniLM-L6-v2's shape (random weights), {len(texts)} real "
              f"documents of debian-entries, {tokens:,} tokens ({tokens / len(texts):.0f} a "
              f"document, at most {MAX_SEQ}):")
    lines.say()
    lines.say("| path | seconds (median) | documents/s | tokens/s |")
    lines.say("|---|---:|---:|---:|")
    data = {"machine": m, "docs": len(texts), "tokens": tokens, "runs": runs}
    for how, secs in runs.items():
        s = statistics.median(secs)
        lines.say(f"| {how} | {s:.2f} | {len(texts) / s:,.0f} | {tokens / s:,.0f} |")
    if not args.no_save:
        results.save("encoder", "\n".join(lines), data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
