"""Where a run keeps what its stages produce: the store.

The runner's tasks save and load their results through a store, never
through paths, so the same tasks run in memory and out of core:

* :class:`MemoryStore` keeps arrays and Arrow columns as Python objects in
  this process. It is chosen when the plan says the corpus fits the budget
  and every task runs in this process (in order, or on Dask threads).
* :class:`DiskStore` is the work directory: ``.npy`` files (memory-mapped on
  load), Arrow IPC files and completion markers. It is chosen when the corpus
  may not fit, when tasks run in other processes (a Dask cluster), or when a
  work directory is asked for; it makes a run resumable.

A disk store lives at ``ROOT/NAME-HASH``: ``ROOT`` is ``--work-dir`` (by
default ``.gpu-dedup-work`` beside the output directory), ``NAME`` the
configuration's short name and ``HASH`` a digest of everything that
determines the intermediate results: the resolved configuration, the text and
id fields, each input's content identity (:func:`gpu_dedup.io.identity.
input_identity`) and the plan. Changed parameters or changed inputs never
reuse stale work.

Every artifact of a disk store is written to a temporary name and renamed
into place; a unit of work is complete when its marker ``<unit>.done``
exists, written after the unit's artifacts. A run killed at any point (even
by SIGKILL) leaves only complete units plus temporary files, which the next
run removes; a write that fails (a full disk) removes its temporary file.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from ..errors import ConfigError
from ..stages.normalize import text_buffers

#: Bump when the layout of the work directory changes.
FORMAT_VERSION = 4
DEFAULT_ROOT = ".gpu-dedup-work"


def digest(obj) -> str:
    """A short stable digest of a JSON-serialisable object."""
    raw = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(raw).hexdigest()[:16]


def work_dir_for(output: str | None, root: str | None, name: str, key: dict) -> str:
    """The work directory of a run whose identity is ``key``."""
    if root is None:
        if output is None:
            raise ConfigError("a disk store needs --work-dir or --output")
        from ..io.fs import is_url
        if is_url(output):                  # beside an output on object storage: here
            root = os.path.join(os.getcwd(), DEFAULT_ROOT)
        else:
            root = os.path.join(os.path.dirname(os.path.abspath(output)), DEFAULT_ROOT)
    from ..io.fs import is_url
    if is_url(root):
        return f"{str(root).rstrip('/')}/{name}-{digest(key)}"
    return os.path.join(os.path.abspath(root), f"{name}-{digest(key)}")


def _column(table: pa.Table) -> pa.Array:
    col = table.column(0)
    if col.num_chunks == 1:
        return col.chunk(0)
    if col.num_chunks == 0:
        return pa.array([], type=col.type)
    return col.combine_chunks()


class MemoryStore:
    """Arrays and Arrow columns held in this process.

    Saved objects are kept by reference: a task must not modify an array it
    saved or loaded.
    """

    kind = "memory"
    root = None

    def __init__(self):
        self._items: dict = {}
        self._done: dict = {}
        self._lock = threading.Lock()

    def open(self) -> "MemoryStore":
        return self

    def close(self) -> None:
        pass

    def remove(self) -> None:
        self._items.clear()
        self._done.clear()

    def done(self, unit: str) -> dict | None:
        return self._done.get(unit)

    def mark_done(self, unit: str, meta: dict | None = None) -> None:
        with self._lock:
            self._done[unit] = dict(meta or {})

    def save_npy(self, rel: str, arr: np.ndarray) -> None:
        with self._lock:
            self._items[rel] = np.asarray(arr)

    def load_npy(self, rel: str, mmap: bool = False) -> np.ndarray:
        return self._items[rel]

    def save_arrow(self, rel: str, columns: dict) -> None:
        with self._lock:
            self._items[rel] = pa.table(columns)

    def open_arrow(self, rel: str) -> pa.Table:
        return self._items[rel]

    def column(self, rel: str) -> pa.Array:
        """The first column of a saved Arrow table."""
        return _column(self.open_arrow(rel))

    def buffers(self, rel: str):
        """``(offsets, data)`` of a saved string column, the same objects on
        every call (a device backend keeps its copy of them between stages)."""
        key = ("buffers", rel)
        got = self._items.get(key)
        if got is None:
            got = text_buffers(self.column(rel))
            with self._lock:
                self._items[key] = got
        return got

    def exists(self, rel: str) -> bool:
        return rel in self._items


def _tmp_name(path: str) -> str:
    return f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"


def _replace_atomically(path: str, write) -> None:
    """``write(tmp)`` then rename over ``path``; the temporary file is removed
    when writing fails (a full disk leaves nothing half-written)."""
    tmp = _tmp_name(path)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise


class DiskStore:
    """Atomic artifacts and completion markers under one folder.

    The object is only a path, so it travels to Dask workers unchanged; the
    folder must then be on storage every worker can reach.
    """

    kind = "disk"

    def __init__(self, root: str):
        self.root = os.path.abspath(root)
        self._lock_fd = None

    def __getstate__(self):
        return {"root": self.root, "_lock_fd": None}

    # -- lifetime ---------------------------------------------------------
    def open(self) -> "DiskStore":
        """Create the folder, take its lock (one run at a time) and remove
        temporary files left by a killed run."""
        os.makedirs(self.root, exist_ok=True)
        import fcntl
        fd = os.open(os.path.join(self.root, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise ConfigError(f"{self.root}: work directory is in use by another run; wait "
                              f"for it or pass a different --work-dir") from None
        self._lock_fd = fd
        for dirpath, _dirs, names in os.walk(self.root):
            for n in names:
                if ".tmp-" in n:
                    try:
                        os.remove(os.path.join(dirpath, n))
                    except OSError:
                        pass
        return self

    def close(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def remove(self) -> None:
        """Delete the whole folder (after a successful run)."""
        self.close()
        shutil.rmtree(self.root, ignore_errors=True)

    # -- paths and markers ------------------------------------------------
    def path(self, rel: str) -> str:
        p = os.path.join(self.root, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        return p

    def done(self, unit: str) -> dict | None:
        """The metadata recorded when ``unit`` completed, or None."""
        try:
            with open(os.path.join(self.root, unit + ".done")) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def mark_done(self, unit: str, meta: dict | None = None) -> None:
        self.save_json(unit + ".done", meta or {})

    # -- artifacts --------------------------------------------------------
    def save_json(self, rel: str, obj) -> None:
        def write(tmp):
            with open(tmp, "w") as f:
                json.dump(obj, f, sort_keys=True)
        _replace_atomically(self.path(rel), write)

    def save_npy(self, rel: str, arr: np.ndarray) -> None:
        def write(tmp):
            with open(tmp, "wb") as f:
                np.save(f, np.ascontiguousarray(arr), allow_pickle=False)
        _replace_atomically(self.path(rel), write)

    def load_npy(self, rel: str, mmap: bool = False) -> np.ndarray:
        path = os.path.join(self.root, rel)
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)

    def save_arrow(self, rel: str, columns: dict) -> None:
        """Arrow IPC file (one record batch) of the given columns."""
        table = pa.table(columns)

        def write(tmp):
            with pa.OSFile(tmp, "wb") as sink:
                with ipc.new_file(sink, table.schema) as w:
                    w.write_table(table, max_chunksize=max(1, table.num_rows))
        _replace_atomically(self.path(rel), write)

    def open_arrow(self, rel: str) -> pa.Table:
        """An IPC file written by :meth:`save_arrow`, memory-mapped (pages are
        read on use and released when the table is dropped)."""
        source = pa.memory_map(os.path.join(self.root, rel), "r")
        return ipc.open_file(source).read_all()

    def column(self, rel: str) -> pa.Array:
        """The first column of a saved Arrow table."""
        return _column(self.open_arrow(rel))

    def buffers(self, rel: str):
        """``(offsets, data)`` of a saved string column (memory-mapped)."""
        return text_buffers(self.column(rel))

    def exists(self, rel: str) -> bool:
        return os.path.exists(os.path.join(self.root, rel))


class RemoteStore(DiskStore):
    """A work directory on object storage (``--work-dir s3://...``).

    Artifacts are written to and read from a local cache folder; a completed
    unit's new files are uploaded, then its marker, so the remote copy only
    ever holds complete units. A rerun (anywhere) resumes from the remote
    markers, fetching each file on first read. The cache is removed when
    the store closes.
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
        return {"root": self.root, "url": self.url, "_lock_fd": None}

    def __setstate__(self, state):
        self.__dict__.update(state)
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

    def _fetch(self, rel: str) -> str:
        from ..io import fs
        local = os.path.join(self.root, rel)
        if not os.path.exists(local):
            url = f"{self.url}/{rel}"
            if fs.exists(url):
                tmp = _tmp_name(local)
                fs.download(url, tmp)
                os.replace(tmp, local)
        return local

    def done(self, unit: str) -> dict | None:
        self._fetch(unit + ".done")
        return super().done(unit)

    def mark_done(self, unit: str, meta: dict | None = None) -> None:
        from ..io import fs
        with self._plock:
            ready = sorted(r for r in self._pending
                           if os.path.exists(os.path.join(self.root, r)))
            self._pending.difference_update(ready)
        for rel in ready:
            fs.upload(os.path.join(self.root, rel), f"{self.url}/{rel}")
        DiskStore.save_json(self, unit + ".done", meta or {})
        fs.upload(os.path.join(self.root, unit + ".done"), f"{self.url}/{unit}.done")

    def load_npy(self, rel: str, mmap: bool = False) -> np.ndarray:
        self._fetch(rel)
        return super().load_npy(rel, mmap)

    def open_arrow(self, rel: str) -> pa.Table:
        self._fetch(rel)
        return super().open_arrow(rel)

    def exists(self, rel: str) -> bool:
        return os.path.exists(self._fetch(rel))
