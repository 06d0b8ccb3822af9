"""UTF-8 text, one document at a time: code points, whitespace, words,
whitespace folding and ASCII normalization.

Every function here is a Numba ``@njit`` function over a ``uint8`` buffer
and byte positions, with no allocation, so the same source is compiled for
the CPU (the loops of :mod:`kernels.cpu` and :mod:`kernels.substr`)
and for the GPU (the kernels of :mod:`kernels.cuda_kernels`). A document is
``data[start:end]``; its code points are the steps of :func:`utf8_decode`
from ``start``, and its words the maximal runs of code points that are not
whitespace (:func:`is_space`, Python's ``str.split()``).
"""
from __future__ import annotations

import numpy as np

from .jit import njit


@njit(cache=True)
def utf8_decode(buf, p, end):
    """Decode one code point at ``buf[p]``; return ``(code_point, next_p)``.

    Malformed sequences (never produced by Arrow, which validates UTF-8)
    decode byte by byte.
    """
    c = np.int64(buf[p])
    if c < 0x80:
        return c, p + 1
    if c >= 0xF0 and p + 3 < end:
        return (((c & 0x07) << 18) | ((np.int64(buf[p + 1]) & 0x3F) << 12)
                | ((np.int64(buf[p + 2]) & 0x3F) << 6) | (np.int64(buf[p + 3]) & 0x3F)), p + 4
    if c >= 0xE0 and p + 2 < end:
        return (((c & 0x0F) << 12) | ((np.int64(buf[p + 1]) & 0x3F) << 6)
                | (np.int64(buf[p + 2]) & 0x3F)), p + 3
    if c >= 0xC0 and p + 1 < end:
        return ((c & 0x1F) << 6) | (np.int64(buf[p + 1]) & 0x3F), p + 2
    return c, p + 1


@njit(cache=True)
def is_space(c):
    """Python's ``str.isspace`` for one code point (what ``str.split()`` splits on)."""
    if c <= 0x20:
        return c == 0x20 or (0x09 <= c <= 0x0D) or (0x1C <= c <= 0x1F)
    if c < 0x85:
        return False
    return (c == 0x85 or c == 0xA0 or c == 0x1680 or (0x2000 <= c <= 0x200A)
            or c == 0x2028 or c == 0x2029 or c == 0x202F or c == 0x205F or c == 0x3000)


@njit(cache=True)
def next_word(data, p, end, cp):
    """The first word of ``data[p:end]``: ``(start, stop, cp_start, cp_stop)``,
    its byte bounds and the indices of its first code point and of the one
    after it, counted on from ``cp``, the index of the code point at ``p``.
    When no word is left, ``start == stop == end``. The next word is found
    from ``stop`` (with ``cp_stop``): words are never empty."""
    start = -1
    c0 = cp
    while p < end:
        c, q = utf8_decode(data, p, end)
        if is_space(c):
            if start >= 0:
                return start, p, c0, cp
        elif start < 0:
            start = p
            c0 = cp
        p = q
        cp += 1
    if start < 0:
        return end, end, cp, cp
    return start, end, c0, cp


@njit(cache=True)
def codepoint_count(data, start, end):
    """The number of code points of ``data[start:end]``: its bytes that are
    not UTF-8 continuation bytes."""
    c = 0
    for p in range(start, end):
        if (data[p] & 0xC0) != 0x80:
            c += 1
    return c


@njit(cache=True)
def has_shingle(data, start, end, word_mode):
    """Whether ``data[start:end]`` has a shingle: a code point, or in word
    mode a word."""
    if not word_mode:
        return end > start
    s, e, c0, c1 = next_word(data, start, end, 0)
    return s < e


@njit(cache=True)
def fold_spaces_doc(data, start, end, out, o):
    """Write the words of ``data[start:end]`` separated by one space (every
    run of whitespace folded, none at either end) to ``out[o:]`` when ``out``
    is not empty; returns the length written. One pass, byte by byte where
    the text is ASCII; a word is a run of code points that are not
    :func:`is_space`, its bytes copied as they are.

    ``out`` may be ``data`` itself with ``o <= start``: every byte is read
    before a byte at or after its position is written."""
    write = out.shape[0] > 0
    L = 0
    gap = False
    p = start
    while p < end:
        b = data[p]
        if b < 0x80:
            if b == 0x20 or (0x09 <= b <= 0x0D) or (0x1C <= b <= 0x1F):
                gap = L > 0
                p += 1
                continue
            q = p + 1
        else:
            c, q = utf8_decode(data, p, end)
            if is_space(c):
                gap = L > 0
                p = q
                continue
        if gap:
            if write:
                out[o + L] = 32
            L += 1
            gap = False
        for r in range(p, q):
            if write:
                out[o + L] = data[r]
            L += 1
        p = q
    return L


#: Codes of the normalization steps :func:`ascii_normalize_doc` applies
#: (``nfkc`` is the identity on ASCII).
STEP_CODES = {"nfkc": 0, "lower": 1, "punct": 2, "digits": 3, "ws": 4}


@njit(cache=True)
def is_ascii_punct(b):
    """Whether the ASCII byte ``b`` is Unicode punctuation (general category P):
    ``!"#%&'()*,-./:;?@[\\]_{}``."""
    return ((0x21 <= b <= 0x23) or (0x25 <= b <= 0x2A) or (0x2C <= b <= 0x2F)
            or b == 0x3A or b == 0x3B or b == 0x3F or b == 0x40 or (0x5B <= b <= 0x5D)
            or b == 0x5F or b == 0x7B or b == 0x7D)


@njit(cache=True)
def ascii_normalize_doc(data, start, end, steps, nsteps, out):
    """The normalization ``steps`` (codes of :data:`STEP_CODES`, in order) of
    the document ``data[start:end]``, written to ``out[start:]`` (at most as
    long as the input); returns its length, or -1 when the document is not
    ASCII (its steps need Unicode tables: the host does them). On ASCII they
    equal the Arrow steps of ``gpu_dedup.stages.normalize``: ``lower`` maps
    A-Z, ``punct`` deletes category P, ``digits`` turns each run of 0-9 into
    one ``0``, ``ws`` folds each run of whitespace into one space and trims
    (:func:`fold_spaces_doc`, in place)."""
    for p in range(start, end):
        if data[p] >= 0x80:
            return -1
    n = end - start
    for r in range(n):
        out[start + r] = data[start + r]
    for s in range(nsteps):
        code = steps[s]
        w = 0
        if code == 1:
            for r in range(n):
                b = out[start + r]
                if 0x41 <= b <= 0x5A:
                    out[start + r] = b + 32
            w = n
        elif code == 2:
            for r in range(n):
                b = out[start + r]
                if not is_ascii_punct(b):
                    out[start + w] = b
                    w += 1
        elif code == 3:
            prev = False
            for r in range(n):
                b = out[start + r]
                d = 0x30 <= b <= 0x39
                if not d:
                    out[start + w] = b
                    w += 1
                elif not prev:
                    out[start + w] = 0x30
                    w += 1
                prev = d
        elif code == 4:
            w = fold_spaces_doc(out, start, start + n, out, start)
        else:
            w = n
        n = w
    return n
