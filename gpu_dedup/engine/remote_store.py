"""A work directory on object storage (``--work-dir s3://...``): the disk
store over a local cache folder, uploading each completed unit
(:class:`RemoteStore`)."""
from __future__ import annotations

import os
import shutil
import threading

from ..atomic import write_atomic
from .layout import MARKER
from .store import DiskStore, digest


class RemoteStore(DiskStore):
    """A work directory on object storage (``--work-dir s3://...``).

    Artifacts are written to and read from a local cache folder; a completed
    unit's new files are uploaded, then its marker, so the remote copy only
    ever holds complete units. A rerun (anywhere) resumes from the remote
    markers, fetching each file on first read, and checks it as a local run
    does: a remote file that does not match its marker makes its unit be
    computed (and uploaded) again. The cache is removed when the store
    closes.
    """

    def __init__(self, url: str, cache: str | None = None):
        import tempfile
        self.url = str(url).rstrip("/")
        if cache is None:
            cache = os.path.join(tempfile.gettempdir(), "gpu-dedup-cache", digest(self.url))
        super().__init__(cache)
        self._pending: set = set()
        self._plock = threading.Lock()

    def __getstate__(self):
        return {"root": self.root, "url": self.url}

    def __setstate__(self, state):
        super().__setstate__(state)
        self._pending = set()
        self._plock = threading.Lock()

    def close(self) -> None:
        super().close()
        shutil.rmtree(self.root, ignore_errors=True)

    def remove(self) -> None:
        from ..io import fs
        for u in fs.listdir(self.url, quiet=True):
            fs.delete(u)
        self.close()

    def path(self, rel: str) -> str:
        with self._plock:
            self._pending.add(rel)
        return super().path(rel)

    def _local(self, rel: str) -> str:
        """The cached copy of ``rel``, fetched on first use (absent when the
        remote one is)."""
        from ..io import fs
        local = os.path.join(self.root, rel)
        if not os.path.exists(local):
            url = f"{self.url}/{rel}"
            if fs.exists(url):
                os.makedirs(os.path.dirname(local), exist_ok=True)
                write_atomic(local, lambda tmp: fs.download(url, tmp))
        return local

    def discard(self, rel: str) -> None:
        """Delete the cached ``rel`` before it is ever uploaded."""
        with self._plock:
            self._pending.discard(rel)
        super().discard(rel)

    def mark_done(self, unit: str, meta: dict | None = None, files=(), units=()) -> None:
        from ..io import fs
        with self._plock:
            ready = sorted(r for r in self._pending
                           if os.path.exists(os.path.join(self.root, r)))
            self._pending.difference_update(ready)
        for rel in ready:
            fs.upload(os.path.join(self.root, rel), f"{self.url}/{rel}")
        super().mark_done(unit, meta, files, units)
        with self._plock:
            self._pending.discard(unit + MARKER)
        fs.upload(os.path.join(self.root, unit + MARKER), f"{self.url}/{unit}{MARKER}")
