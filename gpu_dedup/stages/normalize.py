"""Text normalization on Arrow string arrays (vectorised Arrow compute).

Steps, applied in the order given:

* ``nfkc``: Unicode NFKC normalization.
* ``lower``: Unicode lowercasing.
* ``punct``: delete Unicode punctuation (general category P).
* ``digits``: replace each run of decimal digits with ``0``.
* ``ws``: fold every run of whitespace into one space and trim both ends.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_WS = r"[\s\x{0b}\x{1c}-\x{1f}\x{85}\p{Z}]+"


def normalize_text(arr: pa.Array, steps) -> pa.Array:
    """Apply the normalization ``steps`` to a string array; returns ``large_string``."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    out = arr.cast(pa.large_string()) if arr.type != pa.large_string() else arr
    for step in steps:
        if step == "nfkc":
            out = pc.utf8_normalize(out, "NFKC")
        elif step == "lower":
            out = pc.utf8_lower(out)
        elif step == "punct":
            out = pc.replace_substring_regex(out, r"\p{P}+", "")
        elif step == "digits":
            out = pc.replace_substring_regex(out, r"\p{Nd}+", "0")
        elif step == "ws":
            out = pc.utf8_trim(pc.replace_substring_regex(out, _WS, " "), " ")
        else:  # validated by Config
            raise ValueError(f"unknown normalization step {step!r}")
    return out


def text_buffers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Arrow's offsets (``int64``, N+1, starting wherever the slice starts)
    and UTF-8 bytes (``uint8``) of a string array, without copying."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if arr.type != pa.large_string():
        arr = arr.cast(pa.large_string())
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int64)[arr.offset:arr.offset + len(arr) + 1]
    data = (np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None and bufs[2].size
            else np.zeros(1, dtype=np.uint8))
    return offsets, data
