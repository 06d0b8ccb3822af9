"""One writer at a time: the lock a build or an add holds on an index folder.

A command that writes an index (``index build``, ``index add``) holds an
exclusive ``flock`` on ``DIR/index.lock`` from before it reads the index
until the new part is listed in ``index.json``: a second writer waits for
it (saying so once), then reads the index the first one left, so two adds
started together leave what one after the other would. The lock belongs to
the open file, so a writer that is killed releases it at once; nothing is
ever left to remove by hand. The lock file is empty and never changes.

Queries (``run --against``, ``overlap``, ``index info``) take no lock: a
writer never changes a file ``index.json`` lists, and replaces
``index.json`` in one rename, so a query sees the index before or after an
add, whole.

The lock is advisory and local: it holds between processes of one machine,
and across machines on a filesystem whose ``flock`` does (NFSv4 and most
cluster filesystems; not every SMB or FUSE mount).
"""
from __future__ import annotations

import errno
import fcntl
import logging
import os
import time
from contextlib import contextmanager

from .files import BadIndex

LOCK_NAME = "index.lock"
#: How long a writer waits for another one, in seconds.
LOCK_WAIT = 6 * 3600.0
_POLL = 0.2

log = logging.getLogger("gpu_dedup.index")


class Held:
    """Proof that the writer lock of an index folder is held."""

    def __init__(self, path: str):
        self.path = path


@contextmanager
def writer_lock(path: str, wait: float | None = None):
    """Hold the writer lock of the index folder ``path`` for the block
    (yields a :class:`Held`); wait up to ``wait`` seconds (default
    :data:`LOCK_WAIT`) for another writer, then refuse with exit status 2."""
    wait = LOCK_WAIT if wait is None else wait
    lock = os.path.join(path, LOCK_NAME)
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except FileNotFoundError:
        raise BadIndex(f"{path}: no such index folder") from None
    except OSError as exc:
        raise BadIndex(f"{lock}: cannot open the index's lock file to write the index "
                       f"({exc.strerror or exc})") from None
    try:
        if not _try(fd, lock):
            log.warning("%s: another command is writing this index; waiting for it to end",
                        path)
            deadline = time.monotonic() + wait
            while not _try(fd, lock):
                if time.monotonic() >= deadline:
                    raise BadIndex(f"{path}: another command has been writing this index for "
                                   f"over {wait:,.0f} s; run this one again once it has ended")
                time.sleep(_POLL)
        yield Held(path)
    finally:
        os.close(fd)                        # releases the lock


def _try(fd: int, lock: str) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            return False
        raise BadIndex(f"{lock}: cannot lock the index to write it "
                       f"({exc.strerror or exc})") from None
