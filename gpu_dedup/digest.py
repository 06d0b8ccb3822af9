"""The one content hash of a file: its size and the XXH3-128 hex digest of
all its bytes. Inputs, outputs, work files and index files are all named by
it (identity, ``_SUCCESS``, unit markers, ``index.json``)."""
from __future__ import annotations

import os

import xxhash

READ_BYTES = 8 << 20


def stream_sum(f, buf: bytearray | None = None) -> tuple[int, str]:
    """``(size, hex XXH3-128)`` of what a binary file object yields until its
    end; ``buf``: a read buffer to reuse."""
    h = xxhash.xxh3_128()
    size = 0
    if buf is None:
        buf = bytearray(READ_BYTES)
    view = memoryview(buf)
    readinto = getattr(f, "readinto", None)
    while True:
        if readinto is not None:
            n = readinto(buf)
            chunk = view[:n] if n else None
        else:
            chunk = f.read(READ_BYTES)
            n = len(chunk)
        if not n:
            break
        h.update(chunk)
        size += n
    return size, h.hexdigest()


class ReadBuffer:
    """One read buffer for many files, grown to the largest file read so
    far and no further than :data:`READ_BYTES`: hashing small inputs touches
    no more memory than they hold (a new buffer of 8 MiB is 2,048 pages
    faulted in, a few milliseconds of a small run)."""

    def __init__(self):
        self._buf = bytearray(1)

    def fit(self, size: int) -> bytearray:
        """A buffer for a file of ``size`` bytes."""
        need = max(1, min(READ_BYTES, int(size) + 1))
        if len(self._buf) < need:
            self._buf = bytearray(need)
        return self._buf


def file_sum(path: str, buf: bytearray | ReadBuffer | None = None) -> tuple[int, str]:
    """``(size, hex XXH3-128)`` of the file at ``path`` (an ``OSError`` when
    it cannot be read); ``buf``: a read buffer, or a :class:`ReadBuffer`, to
    reuse (None: one no larger than the file)."""
    with open(path, "rb", buffering=0) as f:
        if buf is None or isinstance(buf, ReadBuffer):
            size = os.fstat(f.fileno()).st_size
            buf = (buf or ReadBuffer()).fit(size)
        return stream_sum(f, buf)


class SummedWriter:
    """A binary file being written that hashes what is written to it, so
    that its ``(size, digest)`` (:func:`file_sum`'s) needs no second pass
    over the file."""

    def __init__(self, f):
        self._f = f
        self._h = xxhash.xxh3_128()
        self.size = 0

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        self._f.write(view)
        self._h.update(view)
        self.size += view.nbytes
        return view.nbytes

    def sum(self) -> tuple[int, str]:
        """``(size, hex XXH3-128)`` of what was written."""
        return self.size, self._h.hexdigest()
