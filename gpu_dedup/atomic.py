"""Atomic file writes: a file is written under a temporary name beside it
and renamed into place, so a reader finds the old file or the whole new one,
never half of it.

The temporary name is ``<path>.tmp-<pid>-<thread>`` (:func:`tmp_path`): two
processes or threads never share one, and whatever holds :data:`TMP_MARK`
in its name (:func:`is_tmp`) is a leftover of a killed writer that a
cleanup may remove. A failed write (a full disk, an interrupt) removes its
temporary file and leaves the old file as it was.
"""
from __future__ import annotations

import os
import threading

#: In the name of every temporary file, and only there.
TMP_MARK = ".tmp-"


def tmp_path(path: str) -> str:
    """The temporary name ``path`` is written under before it is renamed
    into place (same folder, so the rename stays on one filesystem)."""
    return f"{path}{TMP_MARK}{os.getpid()}-{threading.get_ident()}"


def is_tmp(name: str) -> bool:
    """Whether a file name is a temporary name of :func:`tmp_path`."""
    return TMP_MARK in name


def fsync_dir(path: str) -> None:
    """Make a rename in folder ``path`` durable, where the system allows
    (best effort: a folder that cannot be opened or synced is left)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _fsync_file(path: str) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def _link_new(tmp: str, path: str) -> None:
    """Put ``tmp`` at ``path`` only if nothing is there (FileExistsError
    otherwise), then remove ``tmp``."""
    try:
        os.link(tmp, path)               # fails if path exists, whatever happened since
    except FileExistsError:
        raise
    except OSError:                      # no hard links here: check, then rename
        if os.path.lexists(path):
            raise FileExistsError(17, "File exists", path) from None
        os.replace(tmp, path)
        return
    os.remove(tmp)


def write_atomic(path: str, write, *, durable: bool = False, overwrite: bool = True,
                 tmp: str | None = None):
    """Call ``write(tmp)`` to write the file's content to the temporary name,
    then rename it to ``path``; returns what ``write`` returns.

    Args:
        durable: sync the data before the rename and the folder after it
            (what must survive a crash of the machine, such as an index).
        overwrite: False never replaces an existing ``path``: FileExistsError,
            and the existing file stays.
        tmp: the temporary name, when not :func:`tmp_path` (a folder that a
            cleanup empties; on the filesystem of ``path``).
    """
    tmp = tmp_path(path) if tmp is None else tmp
    try:
        result = write(tmp)
        if durable:
            _fsync_file(tmp)
        if overwrite:
            os.replace(tmp, path)
        else:
            _link_new(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise
    if durable:
        fsync_dir(os.path.dirname(path) or ".")
    return result


def write_bytes(path: str, data: bytes, **kw) -> None:
    """``data`` to ``path`` (:func:`write_atomic`'s options)."""
    def write(tmp):
        with open(tmp, "wb") as f:
            f.write(data)
    write_atomic(path, write, **kw)


def write_text(path: str, text: str, encoding: str = "utf-8", **kw) -> None:
    """``text`` to ``path`` in ``encoding`` (:func:`write_atomic`'s options)."""
    write_bytes(path, text.encode(encoding), **kw)


__all__ = ["TMP_MARK", "tmp_path", "is_tmp", "fsync_dir", "write_atomic", "write_bytes",
           "write_text"]
