"""Standard input as an input: ``-`` names JSON Lines read from stdin.

The stream is read once per process and spooled to a file under
:func:`tempfile.gettempdir` (``gpu-dedup-stdin-XXXX/stdin.jsonl``, with
``.gz`` or ``.zst`` appended when the stream starts with gzip or zstd magic
bytes). From then on it is an ordinary JSONL shard: every reader, the read
planner and the data/ writer open the spool file, while messages and
generated ids name it ``<stdin>`` (``<stdin>:3``) and its data/ output is
``stdin.jsonl`` (same suffix as the spool). The spool is recognised from its
path alone, so worker processes on the same machine name it the same way.

The spool is removed at interpreter exit, or earlier by :func:`cleanup`.
"""
from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import threading

from ..errors import InputError
from .fs import public_url
from .names import printable

#: The input name that stands for standard input.
STDIN = "-"
#: How messages and generated ids name standard input.
DISPLAY_NAME = "<stdin>"
#: The data/ output name of standard input (plus ``.gz``/``.zst`` when compressed).
OUTPUT_NAME = "stdin.jsonl"

_PREFIX = "gpu-dedup-stdin-"
_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_COPY_BYTES = 16 << 20

_lock = threading.Lock()
_spooled: dict = {"path": None, "pid": None}


def is_stdin(path) -> bool:
    """Whether ``path`` is ``-`` or the spool file of standard input."""
    path = str(path)
    if path == STDIN:
        return True
    name = os.path.basename(path)
    if not name.startswith(OUTPUT_NAME):
        return False
    folder = os.path.dirname(os.path.abspath(path))
    return (os.path.basename(folder).startswith(_PREFIX)
            and os.path.dirname(folder) == os.path.abspath(tempfile.gettempdir()))


def display_name(path) -> str:
    """How messages, reports and generated ids name an input: ``<stdin>`` for
    standard input; a URL without its credentials
    (:func:`gpu_dedup.io.fs.public_url`); any name printable, undecodable
    bytes as ``\\xNN`` (:func:`gpu_dedup.io.names.printable`)."""
    if is_stdin(path):
        return DISPLAY_NAME
    return printable(public_url(path))


def output_name(path) -> str:
    """The data/ name of standard input's output: the spool file's name."""
    return os.path.basename(resolve(path))


def resolve(path) -> str:
    """The file to open for ``path``: the spool file for ``-`` (spooling
    standard input on first use), else ``path`` unchanged."""
    path = str(path)
    return spool() if path == STDIN else path


def spool(stream=None) -> str:
    """Copy ``stream`` (default: ``sys.stdin``'s bytes) to the spool file
    once per process and return its path; later calls return the same path."""
    with _lock:
        if _spooled["path"] is not None and os.path.exists(_spooled["path"]):
            return _spooled["path"]
        src = stream if stream is not None else _stdin_bytes()
        first = src.read(_COPY_BYTES) or b""
        suffix = ""
        if first.startswith(_GZIP_MAGIC):
            suffix = ".gz"
        elif first.startswith(_ZSTD_MAGIC):
            suffix = ".zst"
        folder = tempfile.mkdtemp(prefix=_PREFIX)
        path = os.path.join(folder, OUTPUT_NAME + suffix)
        try:
            with open(path, "wb") as f:
                chunk = first
                while chunk:
                    f.write(chunk)
                    chunk = src.read(_COPY_BYTES)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        if _spooled["pid"] is None:
            atexit.register(cleanup)
        _spooled.update(path=path, pid=os.getpid())
        return path


def _stdin_bytes():
    s = sys.stdin
    if s is None:
        raise InputError(f"{STDIN}: no standard input to read")
    try:
        interactive = s.isatty()
    except (AttributeError, ValueError):
        interactive = False
    if interactive:
        raise InputError(f"{STDIN}: standard input is a terminal; pipe JSON Lines into it "
                         f"(for example: cat docs.jsonl | gpu-dedup run - -o out)")
    return getattr(s, "buffer", s)


def cleanup() -> None:
    """Remove the spool file of standard input (in the process that made it);
    a later ``-`` spools standard input again."""
    with _lock:
        path = _spooled["path"]
        if path is not None and _spooled["pid"] == os.getpid():
            shutil.rmtree(os.path.dirname(path), ignore_errors=True)
        _spooled["path"] = None
