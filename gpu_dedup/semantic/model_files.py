"""What every semantic model reads and gives: its files (safetensors
tensors and a ``tokenizers`` JSON file, each refused in one line when it
cannot be read), the texts it takes, and the rows it gives, L2-normalised.
"""
from __future__ import annotations

import numpy as np

from ..errors import ModelError


def normalize_rows(a: np.ndarray) -> np.ndarray:
    """``a``'s rows divided by their L2 norms, in float64, as float32; zero rows stay 0.

    Each norm is summed one column at a time, so the result is the same to
    the bit whatever the row's place in memory.
    """
    v = np.asarray(a, dtype=np.float64)
    sq = np.zeros(len(v))
    for j in range(v.shape[1]):
        sq += v[:, j] * v[:, j]
    norm = np.sqrt(sq)
    norm[norm == 0] = 1.0
    return (v / norm[:, None]).astype(np.float32)


def text_list(texts) -> list:
    if isinstance(texts, str):
        raise TypeError("texts must be a list of strings, not one string: give [text]")
    if hasattr(texts, "to_pylist"):             # a pyarrow Array or ChunkedArray
        texts = texts.to_pylist()
    texts = ["" if t is None else t for t in texts]
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise TypeError(f"texts[{i}] is {type(t).__name__}, not a string")
    return texts


def libraries():
    """``(safetensors, tokenizers)``, or ModelError saying what to install."""
    try:
        import safetensors
        import safetensors.numpy  # noqa: F401
        import tokenizers
    except ImportError as e:
        raise ModelError(f"semantic deduplication needs the packages safetensors and tokenizers "
                         f"({e.name} is missing): pip install gpu-dedup[semantic] "
                         f"(or pip install safetensors tokenizers)") from None
    return safetensors, tokenizers


def read_tokenizer(path: str):
    _, tokenizers = libraries()
    try:
        return tokenizers.Tokenizer.from_file(path)
    except Exception as e:   # the only exception type tokenizers raises for a bad file
        reason = (str(e).splitlines() or [type(e).__name__])[0]
        raise ModelError(f"{path}: not a readable tokenizers JSON file ({reason})") from None


def read_tensors(path: str, want) -> dict:
    """The tensors of ``path`` that ``want(keys)`` names, as NumPy arrays."""
    safetensors, _ = libraries()
    try:
        with safetensors.safe_open(path, framework="numpy") as f:
            keys = list(f.keys())
            return {k: f.get_tensor(k) for k in want(keys)}
    except (safetensors.SafetensorError, OSError, TypeError, ValueError) as e:
        reason = (str(e).splitlines() or [type(e).__name__])[0]
        raise ModelError(f"{path}: not a readable safetensors file ({reason})") from None
