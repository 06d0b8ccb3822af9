"""The compression of a JSON Lines shard (none, gzip or zstd): telling which
one a file has, reading its decompressed bytes and writing a file in it.

Compression comes from a ``.gz``/``.zst``/``.zstd`` suffix; a file without
one is recognised by its magic bytes (gzip ``1f 8b``, zstd ``28 b5 2f fd``).

Every function taking a path also takes ``-``, standard input (see
:mod:`gpu_dedup.io.stdin`); messages name it ``<stdin>``.
"""
from __future__ import annotations

import zlib

import pyarrow as pa

from ..errors import InputError
from .fs import getsize, is_url, open_binary, open_input_stream
from .names import native_path, require_regular
from .stdin import display_name, resolve

_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def compression_of(path: str) -> str | None:
    """``"gzip"``, ``"zstd"`` or None: from a ``.gz``/``.zst``/``.zstd``
    suffix, else from the file's first bytes (None when it cannot be read)."""
    p = str(path).lower()
    if p.endswith(".gz"):
        return "gzip"
    if p.endswith(".zst") or p.endswith(".zstd"):
        return "zstd"
    return sniff_compression(resolve(path))


def sniff_compression(path: str) -> str | None:
    """``"gzip"`` or ``"zstd"`` when the file starts with that format's magic
    bytes, else None (also for a file that cannot be read)."""
    try:
        with open_binary(path) as f:
            head = f.read(4)
    except (OSError, InputError):
        return None
    if head.startswith(_GZIP_MAGIC):
        return "gzip"
    if head.startswith(_ZSTD_MAGIC):
        return "zstd"
    return None


def open_decompressed(path: str, comp: str | None):
    """An Arrow input stream of the decompressed bytes of ``path``, whose
    compression is ``comp``. Raises :class:`InputError` for a file that
    cannot be opened or an empty compressed one."""
    name = display_name(path)
    try:
        if comp is not None and getsize(path) == 0:
            raise InputError(f"{name}: empty file, not valid {comp} data; remove it or "
                             f"replace it with an intact copy")
        if is_url(path):
            return open_input_stream(path, compression=comp)
        require_regular(path, name)
        native = native_path(path)
        if isinstance(native, bytes):
            return pa.input_stream(pa.OSFile(native), compression=comp)
        return pa.input_stream(path, compression=comp)
    except InputError:
        raise
    except (OSError, pa.ArrowException) as exc:
        raise InputError(f"{name}: cannot read: {getattr(exc, 'strerror', None) or exc}") from exc


class CompressedWriter:
    """A file written in the shard's compression, streaming: gzip as
    ``gzip.compress(..., compresslevel=6, mtime=0)`` writes it, zstd at level
    3 in one frame whose header records ``size``, the number of bytes that
    will be written (needed for zstd only)."""

    def __init__(self, path: str, comp: str | None, size: int | None = None):
        self.f = open(path, "wb")
        self.comp = comp
        self.enc = zlib.compressobj(6, zlib.DEFLATED, 31) if comp == "gzip" else None
        self.zw = None
        if comp == "zstd":
            import zstandard
            self.zw = zstandard.ZstdCompressor(level=3).stream_writer(
                self.f, size=-1 if size is None else int(size), closefd=False)

    def write(self, data) -> None:
        if self.comp == "gzip":
            self.f.write(self.enc.compress(data))
        elif self.zw is not None:
            self.zw.write(data)
        else:
            self.f.write(data)

    def close(self) -> None:
        try:
            if self.comp == "gzip":
                self.f.write(self.enc.flush())
            elif self.zw is not None:
                self.zw.close()
        finally:
            self.f.close()
