"""Windows of long documents, so that a passage cut from inside one is found.

A passage of an evaluation set copied from inside a long training document
has a low Jaccard similarity with the whole document, so its band keys never
meet the document's. The index therefore also keeps the band keys of
*windows* of every indexed document longer than :data:`WIDTH` code points of
normalized text: windows of ``WIDTH`` code points every ``INDEX_STRIDE``.
A query cuts its own documents into windows of the same width every
``QUERY_STRIDE``. A passage of at least ``WIDTH + INDEX_STRIDE`` code points
(about 40 words) holds a whole indexed window, and one of the query's windows
starts within ``QUERY_STRIDE / 2`` of it: their Jaccard similarity is above
0.9 (char 5-grams), where the first :data:`BANDS` bands find it with
probability above 0.99. Candidates are then verified on the whole texts:
``containment = |E ∩ D| / |E|`` of the shingle sets.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pyarrow as pa

from ..arrays import string_ranges
from ..config import Config
from .keys import backend_or_cpu, keys_of

#: Window width, and the strides of the indexed and the query windows, in
#: code points of normalized text.
WIDTH = 160
INDEX_STRIDE = 80
QUERY_STRIDE = 10
#: Bands of a window's signature that are kept (the first ones).
BANDS = 6


def cut(texts: pa.Array, stride: int, width: int = WIDTH) -> tuple[pa.Array, np.ndarray]:
    """Windows of ``width`` code points every ``stride`` of each text longer
    than ``width`` (the last one ending at the text's end): ``(windows,
    doc)``, the window texts and the position of each one's text."""
    import pyarrow.compute as pc
    lengths = pc.utf8_length(texts).to_numpy(zero_copy_only=False).astype(np.int64)
    long_ = np.flatnonzero(lengths > width)
    if not long_.size:
        return pa.array([], pa.large_string()), np.zeros(0, np.int64)
    counts = (lengths[long_] - width + stride - 1) // stride + 1
    doc = np.repeat(long_, counts)
    k = np.arange(doc.size) - np.repeat(np.cumsum(counts) - counts, counts)
    start = np.minimum(k * stride, lengths[doc] - width)
    # byte ranges of the windows, from the positions of the code points
    from ..stages.normalize import text_buffers
    off, data = text_buffers(texts.take(pa.array(long_)))
    buf = np.asarray(data[off[0]:off[-1]])
    o = np.asarray(off, np.int64) - int(off[0])
    starts = np.flatnonzero((buf & 0xC0) != 0x80)          # where each code point starts
    cp_off = np.concatenate([[0], np.cumsum(lengths[long_])])
    pos = np.repeat(np.arange(long_.size), counts)
    b0 = starts[cp_off[pos] + start]
    last = start + width >= lengths[doc]
    e = np.minimum(cp_off[pos] + start + width, max(starts.size - 1, 0))
    b1 = np.where(last, o[pos + 1], starts[e])
    windows = string_ranges(buf, b0, b1)
    return windows, doc


def window_keys(texts: pa.Array, cfg: Config, backend=None,
                stride: int = INDEX_STRIDE) -> tuple[np.ndarray, np.ndarray]:
    """Band keys (first :data:`BANDS` bands) of the windows of ``texts`` and
    the position of each window's text: ``(keys, doc)``; computed on
    ``backend`` (the CPU backend when None), as :func:`keys_of`."""
    be = backend_or_cpu(backend)
    cfg = cfg.resolved()
    norm = be.normalize(texts, cfg.normalize)
    windows, doc = cut(norm, stride)
    if not len(windows):
        return np.zeros((0, min(BANDS, cfg.bands)), np.uint64), doc
    keys, have = keys_of(windows, replace(cfg, normalize=()), be)
    return np.ascontiguousarray(keys[:, :min(BANDS, cfg.bands)]), doc[have]
