"""A stored 1-d array read a slice at a time by plain reads.

A memory map read from one end to the other keeps every page it touched in
the process's resident set until the map is let go: pages of the page cache,
which the system could drop, but counted against the process's memory all
the same. The pairs of a run whose documents are near-copies of a few
templates are many times its documents (71 million pairs of 600,000
templated pages), and merging or writing them through maps held 1.4-1.7 GiB
resident under a budget of 1 GiB. :class:`StoredColumn` reads what is asked
for into memory of its own, freed with the slice.

>>> import numpy as np, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "x.npy")
>>> np.save(path, np.arange(10, dtype=np.int64))
>>> col = StoredColumn.open(path, ValueError)
>>> part = col[2:8]                   # nothing read yet
>>> int(part[0]), np.asarray(part[1:3]).tolist(), part.shape
(2, [3, 4], (6,))
>>> part.searchsorted([4, 100]).tolist()
[2, 6]
"""
from __future__ import annotations

import os

import numpy as np


class StoredColumn:
    """Elements ``start .. stop - 1`` of a stored ``.npy`` array of one
    dimension: slicing gives another such view (nothing is read), an integer
    index reads one element, ``np.asarray`` reads the view, and
    :meth:`searchsorted` reads a few elements (an array's methods of the
    same names do the same, so code takes either).

    Args:
        path: the file.
        offset: where its data start.
        dtype: its elements' type.
        start, stop: the view's bounds, in elements.
        damaged: ``damaged(why)`` gives the exception to raise when the file
            holds less than its header says.
    """

    def __init__(self, path: str, offset: int, dtype, start: int, stop: int, damaged):
        self.path = path
        self.offset = int(offset)
        self.dtype = np.dtype(dtype)
        self.start = int(start)
        self.stop = int(stop)
        self.damaged = damaged

    @classmethod
    def open(cls, path: str, damaged):
        """The whole array of the ``.npy`` file ``path`` (its header read);
        for an array of two dimensions, a tuple of its rows."""
        try:
            with open(path, "rb") as f:
                version = np.lib.format.read_magic(f)
                read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                        else np.lib.format.read_array_header_2_0)
                shape, fortran, dtype = read(f)
                offset = f.tell()
        except FileNotFoundError:
            raise damaged("missing") from None
        except (OSError, ValueError) as exc:
            raise damaged(f"not a readable array: {str(exc).splitlines()[0]}") from None
        if len(shape) not in (1, 2) or (len(shape) == 2 and fortran) or dtype.hasobject:
            raise damaged(f"not an array of one or two dimensions of numbers "
                          f"({shape}, {dtype})")
        if len(shape) == 2:
            rows, cols = shape
            return tuple(cls(path, offset + r * cols * dtype.itemsize, dtype, 0, cols, damaged)
                         for r in range(rows))
        return cls(path, offset, dtype, 0, shape[0], damaged)

    @property
    def shape(self) -> tuple:
        return (self.stop - self.start,)

    def __len__(self) -> int:
        return self.stop - self.start

    def __getitem__(self, at):
        n = self.stop - self.start
        if isinstance(at, slice):
            s, e, step = at.indices(n)
            if step != 1:
                raise IndexError("a stored column is read in slices of step 1")
            return StoredColumn(self.path, self.offset, self.dtype, self.start + s,
                                self.start + max(s, e), self.damaged)
        i = int(at)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"index {at} out of {n} elements")
        return self._read(self.start + i, self.start + i + 1)[0]

    def searchsorted(self, values, side: str = "left") -> np.ndarray:
        """``np.searchsorted`` of the (sorted) view for each of ``values``,
        by a binary search that reads one element a step."""
        values = np.asarray(values)
        out = np.empty(values.size, np.int64)
        size = self.dtype.itemsize
        with open(self.path, "rb", buffering=0) as f:
            fd = f.fileno()
            for i, v in enumerate(values.reshape(-1).tolist()):
                lo, hi = 0, self.stop - self.start
                while lo < hi:
                    mid = (lo + hi) // 2
                    raw = os.pread(fd, size, self.offset + (self.start + mid) * size)
                    if len(raw) != size:
                        raise self.damaged(f"{len(raw)} bytes where {size} were expected")
                    x = np.frombuffer(raw, self.dtype)[0]
                    if x < v or (side == "right" and x == v):
                        lo = mid + 1
                    else:
                        hi = mid
                out[i] = lo
        return out.reshape(values.shape)

    def __array__(self, dtype=None, copy=None):
        out = self._read(self.start, self.stop)
        return out if dtype is None else out.astype(dtype, copy=False)

    def _read(self, a: int, b: int) -> np.ndarray:
        out = np.empty(b - a, self.dtype)
        want = out.nbytes
        if want:
            view = memoryview(out).cast("B")
            got = 0
            with open(self.path, "rb", buffering=0) as f:
                f.seek(self.offset + a * self.dtype.itemsize)
                while got < want:
                    n = f.readinto(view[got:])
                    if not n:
                        break
                    got += n
            if got != want:
                raise self.damaged(f"{got} bytes where {want} were expected")
        return out
