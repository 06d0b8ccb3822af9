"""Text normalization on Arrow string arrays: Arrow compute kernels, one
slice per thread, and a compiled kernel for whitespace folding.

Steps, applied in the order given:

* ``nfkc``: Unicode NFKC normalization.
* ``lower``: Unicode lowercasing.
* ``punct``: delete Unicode punctuation (general category P).
* ``digits``: replace each run of decimal digits with ``0``.
* ``ws``: fold every run of whitespace into one space and trim both ends.
"""
from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa

from ..compute import call, cast, nfkc, replace_regex, trim
from ..kernels.jit import interpreting

_WS = r"[\s\x{0b}\x{1c}-\x{1f}\x{85}\p{Z}]+"


def _arrow_step(out: pa.Array, step: str) -> pa.Array:
    if step == "nfkc":
        return nfkc(out)
    if step == "lower":
        return call("utf8_lower", out)
    if step == "punct":
        return replace_regex(out, r"\p{P}+", "")
    if step == "digits":
        return replace_regex(out, r"\p{Nd}+", "0")
    if step == "ws":
        return trim(replace_regex(out, _WS, " "), " ")
    raise ValueError(f"unknown normalization step {step!r}")  # validated by Config


def _arrow_steps(arr: pa.Array, steps) -> pa.Array:
    for step in steps:
        arr = _arrow_step(arr, step)
    return arr


def fold_whitespace(arr) -> pa.Array:
    """The ``ws`` step by the compiled kernel (``" ".join(text.split())``) of
    a string array, or of a list of them, whose documents it writes one
    after another into one array (so the parts the threads normalized are
    not joined first)."""
    from ..kernels.cpu import fold_spaces_parts
    parts = arr if isinstance(arr, list) else [arr]
    new_off, new_data = fold_spaces_parts([text_buffers(a) for a in parts])
    return pa.LargeStringArray.from_buffers(sum(len(a) for a in parts),
                                            pa.py_buffer(new_off), pa.py_buffer(new_data))


#: Text bytes below which the Arrow steps run in the calling thread.
PARALLEL_BYTES = 16 << 20


def _threads() -> int:
    from ..kernels.threads import threads
    return threads()


def _threaded(arr: pa.Array, steps, join: bool = True):
    """Arrow steps over one slice of ``arr`` per thread (Arrow's string
    kernels run single-threaded and release the GIL): one array, or with
    ``join`` false the threads' parts as a list."""
    threads = _threads()
    n = len(arr)
    if threads == 1 or n < 2 or arr.nbytes < PARALLEL_BYTES:
        return _arrow_steps(arr, steps)
    parts = min(threads, n)
    cuts = [n * j // parts for j in range(parts + 1)]
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(parts) as ex:
        done = list(ex.map(
            lambda j: _arrow_steps(arr.slice(cuts[j], cuts[j + 1] - cuts[j]), steps),
            range(parts)))
    return pa.concat_arrays(done) if join else done


def normalize_text(arr: pa.Array, steps) -> pa.Array:
    """Apply the normalization ``steps`` to a string array; returns ``large_string``."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    out = cast(arr, pa.large_string()) if arr.type != pa.large_string() else arr
    # Arrow's steps keep nulls as they are, so whether the kernel can fold
    # whitespace is known up front. Interpreted, the kernel is slower than
    # Arrow's regular expression, which gives the same text (every code
    # point is tested against both): 10-16 against 20-28 ms on 100 long
    # documents (790 KB).
    kernel_ws = not out.null_count and not interpreting()
    groups = [(is_ws, tuple(g)) for is_ws, g in
              itertools.groupby(steps, key=lambda step: kernel_ws and step == "ws")]
    for k, (is_ws, group) in enumerate(groups):
        if is_ws:
            for _ in group:
                out = fold_whitespace(out)
        else:
            # the fold that follows writes the threads' parts into one array itself
            out = _threaded(out, group, join=k + 1 == len(groups))
    return out


def text_buffers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Arrow's offsets (``int64``, N+1, starting wherever the slice starts)
    and UTF-8 bytes (``uint8``) of a string array, without copying."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if arr.type != pa.large_string():
        arr = cast(arr, pa.large_string())
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int64)[arr.offset:arr.offset + len(arr) + 1]
    data = (np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None and bufs[2].size
            else np.zeros(1, dtype=np.uint8))
    return offsets, data
