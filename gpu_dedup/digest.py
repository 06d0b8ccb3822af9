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


def file_sum(path: str, buf: bytearray | None = None) -> tuple[int, str]:
    """``(size, hex XXH3-128)`` of the file at ``path`` (an ``OSError`` when
    it cannot be read)."""
    with open(path, "rb", buffering=0) as f:
        if buf is None:                  # no larger than the file: a small file is quick
            buf = bytearray(max(1, min(READ_BYTES, os.fstat(f.fileno()).st_size + 1)))
        return stream_sum(f, buf)
