"""Rows stored per representative beside its band keys, gathered by
position; and the bound rows that settle most candidate pairs of greedy
selection without their shingle sets.

Most pairs that share a bucket by chance (documents with the same footer,
the same template) are far below the threshold, yet scoring one exactly
means reading both texts and building both shingle sets. Each
representative's *bound row* (:func:`kernels.primitives.bound_row`: its
distinct shingles counted into bins, and their number), made beside its
signature, gives an upper bound on the pair's Jaccard (short texts take 64
bins, 68 bytes a row; long ones more, :func:`bound_words`, since the bins of
two long texts fill alike whatever they share); a pair whose bound is below
the threshold is settled there, with that bound as its score (greedy
selection reads only whether a score reaches the threshold, and every score
at or above it is exact). Which pairs are similar, the kept documents,
``duplicate_of`` and every score written are the same as with every pair
scored exactly.
"""
from __future__ import annotations

import numpy as np

from ..config import Config
from ..kernels.primitives import BOUND_BINS, BOUND_WORDS, bound_row_words
from . import layout
from .records import Blocks


def uses_bounds(cfg: Config, be) -> bool:
    """Whether the signatures made by backend ``be`` come with bound rows:
    greedy selection verified by the exact Jaccard of shingle sets, on a
    backend where they pay (``Backend.bounds_pay``). Selection uses them
    when every signature block has them (a resumed run may have made
    some blocks on another backend); either way its results are the same."""
    return (cfg.verify and cfg.similarity == "jaccard" and cfg.cluster == "greedy"
            and bool(be.bounds_pay))


#: Shingles a bin of a bound row, on average over the corpus, from which a
#: row takes more than :data:`~kernels.primitives.BOUND_BINS` bins. On the
#: long documents of the bench (6.8 KB on average), of the pairs 64 bins
#: left to score exactly, 128 bins settle 8%, 512 bins 71%, 1,024 bins
#: 87% and 2,048 bins 91%.
SHINGLES_PER_BIN = 8
#: The most bins a run's bound rows take (1,028 bytes a row).
MOST_BINS = 1024
#: Bytes of text a word shingle takes, about, to guess shingles from bytes.
WORD_BYTES = 6


def bound_words(cfg: Config, mean_text_bytes: float) -> int:
    """The words of a run's bound rows, from the mean bytes of text of its
    documents: a power of two of bins, one for every
    :data:`SHINGLES_PER_BIN` shingles a document has on average, from
    ``BOUND_BINS`` (64) to :data:`MOST_BINS`. Two unrelated sets of ``N``
    shingles differ by about ``sqrt(N / B)`` in each of ``B`` bins, so the
    bound drops below a high threshold only while the bins are a fair share
    of the shingles. Exact whatever the width: it decides how many pairs
    are settled, never which."""
    shingles = float(mean_text_bytes) / (WORD_BYTES if cfg.shingle == "word" else 1)
    bins = BOUND_BINS
    while bins < MOST_BINS and bins * SHINGLES_PER_BIN < shingles:
        bins *= 2
    return bound_row_words(bins)


def bound_rows(be, offsets, data, docs: np.ndarray, cfg: Config,
               words: int = BOUND_WORDS) -> np.ndarray:
    """The bound rows (``len(docs) x words`` uint32, on the host) of
    documents ``docs`` of the text buffers ``(offsets, data)``, made by the
    backend ``be`` (on the device for the GPU's)."""
    return be.bound_rows(offsets, data, cfg.shingle == "word", int(cfg.ngram),
                         np.ascontiguousarray(docs, dtype=np.int64), int(words))


def gather_rows(store, blocks: Blocks, positions: np.ndarray, name: str) -> np.ndarray:
    """Rows of the per-block file ``name`` (``layout.SIGS``, ``layout.BOUNDS``)
    of sorted, unique representative positions; each block's file is mapped
    only while its rows are copied, and checked to have a row a
    representative."""
    if not positions.size:
        return None
    bi = blocks.block_of(positions)
    cut = np.flatnonzero(bi[1:] != bi[:-1]) + 1      # sorted: each block's a slice
    out = None
    for s, e in zip(np.concatenate([[0], cut]), np.concatenate([cut, [positions.size]])):
        blk = blocks.blocks[int(bi[s])]
        arr = store.load_npy(layout.signature_file(blk["key"], name), mmap=True)
        if arr.ndim != 2 or arr.shape[0] != blk["r1"] - blk["r0"]:
            raise RuntimeError(f"{layout.signature_file(blk['key'], name)} holds "
                               f"{arr.shape} rows, not one a representative of its block")
        if out is None:
            out = np.empty((positions.size, arr.shape[1]), dtype=arr.dtype)
        elif arr.shape[1] != out.shape[1]:
            raise RuntimeError(f"{layout.signature_file(blk['key'], name)} has rows of "
                               f"{arr.shape[1]} columns where other blocks have "
                               f"{out.shape[1]}")
        np.take(arr, positions[s:e] - blk["r0"], axis=0, out=out[s:e])
        del arr
    return out


def bound_rows_of(store, blocks: Blocks, positions: np.ndarray) -> np.ndarray:
    """The bound rows of the representatives at ``positions`` (unique, in
    any order), row ``i`` that of ``positions[i]``: a range gathers those
    of every document it reads once."""
    positions = np.asarray(positions, dtype=np.int64)
    if positions.size < 2 or bool(np.all(positions[1:] > positions[:-1])):
        return gather_rows(store, blocks, positions, layout.BOUNDS)   # in order already
    order = np.argsort(positions, kind="stable")
    rows = gather_rows(store, blocks, positions[order], layout.BOUNDS)
    out = np.empty_like(rows)
    out[order] = rows
    return out
