"""Small array helpers on the host.

:func:`unique` is ``np.unique`` for 1-D arrays by one sort and a comparison
of neighbours, which recent NumPy releases make many times faster than
``np.unique`` on the million-element integer arrays the stages pass around.
:func:`to_host` is the one way an array on a device (CuPy) comes back as a
NumPy array. :func:`arrow` turns a NumPy column into an Arrow array without
the detour through ``pa.array``, which imports pandas (a quarter of a second
of a small run) whenever pandas is installed.
"""
from __future__ import annotations

import numpy as np


def to_host(x) -> np.ndarray:
    """``x`` as a NumPy array: returned as is when it is one, copied from the
    device with ``.get()`` when it has one (a CuPy array), else
    ``np.asarray(x)``."""
    if isinstance(x, np.ndarray):
        return x
    get = getattr(x, "get", None)
    return get() if callable(get) else np.asarray(x)


def _strings(values: list, type):
    """A string array of Python ``str`` ``values``, from its buffers; None
    when a value is not a ``str`` (or cannot be UTF-8), or the bytes overflow
    ``string``'s 32-bit offsets: :func:`arrow` leaves those to ``pa.array``."""
    import pyarrow as pa
    try:
        encoded = [v.encode("utf-8") for v in values]
    except (AttributeError, UnicodeEncodeError):
        return None
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    if pa.types.is_string(type):
        if offsets[-1] >= 1 << 31:
            return None
        offsets = offsets.astype(np.int32)
    return pa.Array.from_buffers(type, len(encoded), [None, pa.py_buffer(offsets),
                                                      pa.py_buffer(b"".join(encoded))])


def arrow(values, type=None, mask=None):
    """``pa.array(values, type, mask=mask)``, built on the buffer of a 1-D
    NumPy array of numbers or booleans (converted to ``type`` first when it
    differs), with the nulls where ``mask`` is true, or on the bytes of a
    list of ``str`` for a ``string`` or ``large_string`` ``type``. An empty
    list becomes an empty array of ``type``; anything else goes to
    ``pa.array``.

    ``pa.array`` first asks whether its argument is a pandas object, and
    imports pandas to ask; building from buffers does not.

    >>> arrow(np.array([3, 1]), mask=np.array([False, True])).to_pylist()
    [3, None]
    """
    import pyarrow as pa
    if isinstance(values, list) and not values and type is not None:
        return pa.nulls(0, type)
    if isinstance(values, list) and mask is None and type is not None \
            and (pa.types.is_string(type) or pa.types.is_large_string(type)):
        got = _strings(values, type)
        if got is not None:
            return got
    if not isinstance(values, np.ndarray) or values.ndim != 1 \
            or values.dtype.kind not in "biuf":
        return pa.array(values, type=type, mask=mask)
    if type is None:
        type = pa.from_numpy_dtype(values.dtype)
    if pa.types.is_boolean(type):
        data = np.packbits(values.astype(bool, copy=False), bitorder="little")
    elif pa.types.is_integer(type) or pa.types.is_floating(type):
        data = np.ascontiguousarray(values, dtype=np.dtype(type.to_pandas_dtype()))
    else:
        return pa.array(values, type=type, mask=mask)
    validity, nulls = None, 0
    if mask is not None:
        mask = np.asarray(mask, dtype=bool)
        nulls = int(np.count_nonzero(mask))
        if nulls:
            validity = pa.py_buffer(np.packbits(~mask, bitorder="little"))
    return pa.Array.from_buffers(type, values.shape[0], [validity, pa.py_buffer(data)],
                                 null_count=nulls)


def unique(x, return_inverse: bool = False, return_counts: bool = False):
    """The sorted distinct values of the 1-D array ``x``, as ``np.unique``
    gives them, and optionally the index of each element's value among them
    (``return_inverse``) and how often each value occurs (``return_counts``)."""
    x = np.asarray(x).reshape(-1)
    n = x.shape[0]
    if return_inverse:
        # any sorting order gives the same values and inverse: the default
        # (vectorised where the processor allows) is several times faster
        # than a stable sort on unordered numbers
        order = np.argsort(x)
        s = x[order]
    else:
        s = sorted_copy(x)
    first = np.empty(n, dtype=bool)
    if n:
        first[0] = True
        np.not_equal(s[1:], s[:-1], out=first[1:])
    values = s[first]
    if not (return_inverse or return_counts):
        return values
    out = [values]
    if return_inverse:
        inv = np.empty(n, dtype=np.int64)
        inv[order] = np.cumsum(first) - 1
        out.append(inv)
    if return_counts:
        starts = np.flatnonzero(first)
        out.append(np.diff(np.append(starts, n)).astype(np.int64))
    return tuple(out)


#: Elements from which :func:`sorted_copy` sorts on several threads.
PARALLEL_SORT = 1 << 20


def sorted_copy(x: np.ndarray) -> np.ndarray:
    """``np.sort(x)`` of a 1-D array; a large integer one cut into a part a
    thread, the parts sorted at once (NumPy's sort lets go of the GIL),
    then merged by a stable sort (timsort: one pass over sorted runs)."""
    n = x.shape[0]
    if n < PARALLEL_SORT or x.dtype.kind not in "iu":
        return np.sort(x)
    from .kernels.threads import for_range, threads
    t = threads()
    if t < 2:
        return np.sort(x)
    cuts = np.linspace(0, n, t + 1).astype(np.int64)
    out = np.empty_like(x)
    for_range(_sort_parts, t, x, cuts, out)
    out.sort(kind="stable")
    return out


def _sort_parts(x, cuts, out, lo, hi):
    """Parts ``lo .. hi - 1`` of :func:`sorted_copy`, each sorted into place."""
    for i in range(lo, hi):
        out[cuts[i]:cuts[i + 1]] = np.sort(x[cuts[i]:cuts[i + 1]])


def stable_order(key) -> np.ndarray:
    """``np.argsort(key, kind="stable")`` of a 1-D integer array: when the
    keys are non-negative and below 2**32, by one plain sort of each key
    packed above its index (distinct values, so any sort is stable; NumPy's
    is vectorised and several times faster than its stable sort); else by
    the stable sort."""
    key = np.asarray(key).reshape(-1)
    n = key.shape[0]
    if not n or n >= 1 << 32 or key.dtype.kind not in "iu" or key.min() < 0 \
            or int(key.max()) >= 1 << 32:
        return np.argsort(key, kind="stable").astype(np.int64)
    packed = key.astype(np.uint64) << np.uint64(32)
    packed |= np.arange(n, dtype=np.uint64)
    packed.sort()
    packed &= np.uint64(0xFFFFFFFF)
    return packed.astype(np.int64)


def pair_order(a, b) -> np.ndarray:
    """The stable order of the pairs ``(a[i], b[i])`` of non-negative int64
    numbers, by ``a`` then ``b``: one sort of ``a << 32 | b`` when both fit
    in 32 bits (the same order), else ``np.lexsort``. Pairs of any numbers
    sort this way; none is packed where it does not fit."""
    a = np.asarray(a).reshape(-1)
    b = np.asarray(b).reshape(-1)
    if a.size and max(int(a.max()), int(b.max())) < 1 << 32 \
            and min(int(a.min()), int(b.min())) >= 0:
        key = a.astype(np.uint64) << np.uint64(32)
        key |= b.astype(np.uint64)
        return np.argsort(key, kind="stable").astype(np.int64)
    return np.lexsort((b, a)).astype(np.int64)


def merged_pair_slices(sources, cap: int):
    """The rows of several sorted tables of pairs, merged in the order of
    their pairs and yielded a slice of at most ``cap`` rows at a time (or a
    row a source, where there are more sources than ``cap``).

    Each source is a tuple of equally long 1-D columns (arrays, memory maps
    or :class:`MappedColumn`), its first two the pairs' numbers ``(a, b)``,
    sorted by ``a`` then ``b`` and distinct. Each slice is a tuple of
    arrays shaped like the sources' rows, sorted by ``(a, b)``, and every
    row of a slice comes before every row of the next (rows with the same
    pair in two sources keep the order of their sources). Only a slice of
    each source is read at a time, so the merge of tables larger than
    memory holds about ``cap`` rows.

    >>> s1 = (np.array([0, 2]), np.array([5, 1]))
    >>> s2 = (np.array([1, 2]), np.array([0, 3]))
    >>> parts = list(merged_pair_slices([s1, s2], 2))
    >>> [p[0].tolist() for p in parts], [p[1].tolist() for p in parts]
    ([[0], [1], [2, 2]], [[5], [0], [1, 3]])
    """
    cap = max(1, int(cap))
    sources = list(sources)
    sizes = [int(s[0].shape[0]) for s in sources]
    pos = [0] * len(sources)
    while True:
        live = [i for i, n in enumerate(sizes) if pos[i] < n]
        if not live:
            return
        take = max(1, cap // len(live))
        # the smallest last pair among the sources cut short: every row up
        # to it (in every source) comes before every row not taken
        bound = None
        for i in live:
            e = pos[i] + take
            if e < sizes[i]:
                key = (int(sources[i][0][e - 1]), int(sources[i][1][e - 1]))
                bound = key if bound is None or key < bound else bound
        parts = []
        for i in live:
            s0 = pos[i]
            e = min(s0 + take, sizes[i])
            if bound is not None:
                a = np.asarray(sources[i][0][s0:e])
                lo = int(np.searchsorted(a, bound[0], side="left"))
                hi = int(np.searchsorted(a, bound[0], side="right"))
                b = np.asarray(sources[i][1][s0 + lo:s0 + hi])
                e = s0 + lo + int(np.searchsorted(b, bound[1], side="right"))
            if e > s0:
                parts.append(tuple(np.asarray(c[s0:e]) for c in sources[i]))
            pos[i] = e
        if len(parts) == 1:
            yield parts[0]
            continue
        cols = [np.concatenate([p[j] for p in parts]) for j in range(len(parts[0]))]
        del parts
        order = pair_order(cols[0], cols[1])
        yield tuple(c[order] for c in cols)


class MappedColumn:
    """A column read through a function: ``col[i]`` and ``col[lo:hi]`` give
    ``fn(values[...])`` (``values`` an array or a memory map, read a slice at
    a time), for :func:`merged_pair_slices` over numbers that are mapped
    (ascending ones, so the source stays sorted)."""

    def __init__(self, values, fn):
        self.values = values
        self.fn = fn
        self.shape = (int(values.shape[0]),)

    def __getitem__(self, at):
        return self.fn(np.asarray(self.values[at]))


def pairs_ascend(a, b) -> bool:
    """Whether the pairs ``(a[i], b[i])`` are sorted by ``a`` then ``b`` and
    distinct."""
    a = np.asarray(a).reshape(-1)
    b = np.asarray(b).reshape(-1)
    if a.size < 2:
        return True
    da = a[1:] - a[:-1]
    return bool(np.all((da > 0) | ((da == 0) & (b[1:] > b[:-1]))))


def distinct_count(x) -> int:
    """How many distinct values the 1-D array ``x`` of non-negative integers
    holds."""
    x = np.asarray(x).reshape(-1)
    return int(np.count_nonzero(np.bincount(x))) if x.size else 0


def concat_csr(parts, dtype=np.int64, xp=np):
    """One ``(offsets, values)`` of a list of them (offsets from 0, values of
    ``dtype``), as the pieces of buckets or of shingle sets concatenate; in
    the array module ``xp`` (NumPy, or CuPy for pieces on the device)."""
    offs, vals, base = [xp.zeros(1, dtype=np.int64)], [], 0
    for off, val in parts:
        off = xp.asarray(off, dtype=np.int64)
        offs.append(off[1:] - off[0] + base)
        base += int(off[-1] - off[0])
        vals.append(xp.asarray(val, dtype=dtype))
    return xp.concatenate(offs), (xp.concatenate(vals) if vals else xp.zeros(0, dtype=dtype))


def take_rows(off: np.ndarray, values: np.ndarray, rows: np.ndarray):
    """Rows ``rows`` of the CSR ``(off, values)`` (NumPy), in that order:
    ``(new_off, new_values)``, copied row by row with nothing beside the
    result the size of the values."""
    from .kernels.cpu import gather_ranges
    off = np.asarray(off, dtype=np.int64)
    rows = np.asarray(rows, dtype=np.int64)
    b0, b1 = off[rows], off[rows + 1]
    new_off = np.zeros(rows.size + 1, np.int64)
    np.cumsum(b1 - b0, out=new_off[1:])
    values = np.ascontiguousarray(values)
    w = values.dtype.itemsize
    raw = gather_ranges(values.reshape(-1).view(np.uint8), b0 * w, b1 * w, new_off * w)
    return new_off, raw.view(values.dtype)


def string_ranges(data: np.ndarray, b0: np.ndarray, b1: np.ndarray):
    """A ``large_string`` array of the UTF-8 byte ranges ``data[b0[i]:b1[i]]``
    (each a whole number of code points)."""
    import pyarrow as pa
    from .kernels.cpu import gather_ranges
    b0 = np.ascontiguousarray(b0, dtype=np.int64)
    b1 = np.ascontiguousarray(b1, dtype=np.int64)
    off = np.zeros(b0.size + 1, np.int64)
    np.cumsum(b1 - b0, out=off[1:])
    buf = gather_ranges(np.ascontiguousarray(data), b0, b1, off)
    return pa.LargeStringArray.from_buffers(int(b0.size), pa.py_buffer(off), pa.py_buffer(buf))


def rows_of_two(sets, other, ia, ib, to_host=np.asarray):
    """The rows that pairs ``(ia[e], ib[e])`` read of two CSR handles
    ``(keys, offsets, values)`` (row ``r`` of ``sets`` when ``r >= 0``, row
    ``~r`` of ``other`` otherwise), copied into one host CSR: ``(handle, ia,
    ib)`` with the pairs' rows in it."""
    ia = np.asarray(ia, dtype=np.int64)
    ib = np.asarray(ib, dtype=np.int64)
    rows = np.concatenate([ia, ib])
    first = unique(rows[rows >= 0])
    second = unique(~rows[rows < 0])
    del rows
    parts = [take_rows(to_host(h[1]), to_host(h[2]), r)
             for h, r in ((sets, first), (other, second))]
    off, values = concat_csr(parts, np.uint64)

    def at(r):
        return np.where(r >= 0, np.searchsorted(first, r),
                        first.size + np.searchsorted(second, ~r)).astype(np.int64)
    return (None, off, values), at(ia), at(ib)

