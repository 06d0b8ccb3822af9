"""Local input paths as messages name them and as the readers open them.

* :func:`printable` renders a file name for a message, a report or an id: a
  byte that is not UTF-8 (kept by :func:`os.fsdecode` as a lone surrogate)
  becomes ``\\xNN`` and any other unprintable character its backslash
  escape (``a\\xff.jsonl``, ``tab\\there.txt``); printable names are
  returned unchanged.
* :func:`native_path` is the path to hand to pyarrow, which accepts only
  names that encode as UTF-8 as text: other names are passed as bytes.
* :func:`require_regular` refuses, before anything opens it, an input that is
  not a regular file (a FIFO, a device, a socket, or a link to one): reading
  one would wait forever or never end.
"""
from __future__ import annotations

import os
import stat

from ..errors import InputError


def printable(name) -> str:
    """``name`` with undecodable bytes as ``\\xNN`` and other unprintable
    characters escaped; a printable name is returned unchanged."""
    s = os.fspath(name) if not isinstance(name, str) else name
    if isinstance(s, bytes):
        s = os.fsdecode(s)
    if s.isprintable():
        return s
    try:
        raw = s.encode("utf-8", "surrogateescape")
        s = raw.decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:          # a lone surrogate not standing for a byte
        s = s.encode("utf-8", "backslashreplace").decode("utf-8")
    if s.isprintable():
        return s
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii")
                   for c in s)


def native_path(path: str):
    """``path`` as pyarrow opens it: the text itself when it encodes as
    UTF-8, else its bytes (a name holding bytes that are not UTF-8)."""
    try:
        path.encode("utf-8")
        return path
    except UnicodeEncodeError:
        return os.fsencode(path)


_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def special_kind(path: str) -> str | None:
    """What ``path`` is when it is neither a regular file nor a folder (a
    link judged by its target): ``"a FIFO (named pipe)"``, ``"a link to a
    character device"``...; None for a regular file, a folder or a path
    that does not exist."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    what = next((w for test, w in _KINDS if test(mode)), "not a regular file")
    return f"a link to {what}" if os.path.islink(path) else what


def require_regular(path: str, shown: str | None = None) -> None:
    """An :class:`InputError` naming ``path`` (or ``shown``) unless it is a
    regular file, a folder or missing; links are judged by their target."""
    what = special_kind(path)
    if what is not None:
        raise InputError(f"{shown or printable(path)}: not a regular file ({what}); inputs are "
                         f"files or folders, and - reads standard input")


__all__ = ["printable", "native_path", "special_kind", "require_regular"]
