"""The work directory of a staged run: intermediate arrays, completion markers,
and what makes a run resumable.

A run's work directory is ``ROOT/NAME-HASH``: ``ROOT`` is ``--work-dir`` (by
default ``.gpu-dedup-work`` beside the output directory), ``NAME`` the
configuration's short name and ``HASH`` a digest of everything that
determines the intermediate results: the resolved configuration, the text and
id fields, each input file's path, size and modification time, and the plan
derived from the memory budget. Changed parameters or changed inputs therefore
never reuse stale work.

Every artifact is written to a temporary name and renamed into place; a unit of
work (one chunk of one stage, say) is complete when its marker file
``<unit>.done`` exists, and the marker is written only after the unit's
artifacts. A run killed at any point (even by SIGKILL) leaves only complete
units behind plus temporary files, which the next run removes.
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

from .errors import ConfigError

#: Bump when the layout of the work directory changes.
FORMAT_VERSION = 2
DEFAULT_ROOT = ".gpu-dedup-work"


def input_identity(paths) -> list[dict]:
    """Path, size and modification time (ns) of each input file."""
    out = []
    for p in paths:
        st = os.stat(p)
        out.append({"path": os.path.abspath(p), "size": int(st.st_size),
                    "mtime_ns": int(st.st_mtime_ns)})
    return out


def digest(obj) -> str:
    """A short stable digest of a JSON-serialisable object."""
    raw = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(raw).hexdigest()[:16]


def work_dir_for(output: str, root: str | None, name: str, key: dict) -> str:
    """The work directory for a run whose identity is ``key``."""
    base = root or os.path.join(os.path.dirname(os.path.abspath(output)), DEFAULT_ROOT)
    return os.path.join(os.path.abspath(base), f"{name}-{digest(key)}")


def _tmp_name(path: str) -> str:
    return f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"


class WorkDir:
    """Atomic artifacts and completion markers under one folder.

    The object is only a path, so it travels to Dask workers unchanged; the
    folder must then be on storage every worker can reach.
    """

    def __init__(self, root: str):
        self.root = os.path.abspath(root)
        self._lock_fd = None

    def __getstate__(self):
        return {"root": self.root, "_lock_fd": None}

    # -- lifetime ---------------------------------------------------------
    def open(self) -> "WorkDir":
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
        path = self.path(rel)
        tmp = _tmp_name(path)
        with open(tmp, "w") as f:
            json.dump(obj, f, sort_keys=True)
        os.replace(tmp, path)

    def load_json(self, rel: str):
        with open(os.path.join(self.root, rel)) as f:
            return json.load(f)

    def save_npy(self, rel: str, arr: np.ndarray) -> None:
        path = self.path(rel)
        tmp = _tmp_name(path)
        with open(tmp, "wb") as f:
            np.save(f, np.ascontiguousarray(arr), allow_pickle=False)
        os.replace(tmp, path)

    def load_npy(self, rel: str, mmap: bool = False) -> np.ndarray:
        path = os.path.join(self.root, rel)
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)

    def npy_writer(self, rel: str, shape: tuple, dtype) -> "NpyWriter":
        """Write a ``.npy`` of known shape row block by row block, without
        holding it in memory or mapping it."""
        return NpyWriter(self.path(rel), shape, dtype)

    def save_arrow(self, rel: str, columns: dict) -> None:
        """Arrow IPC file (one record batch) of the given columns."""
        path = self.path(rel)
        tmp = _tmp_name(path)
        table = pa.table(columns)
        with pa.OSFile(tmp, "wb") as sink:
            with ipc.new_file(sink, table.schema) as w:
                w.write_table(table, max_chunksize=max(1, table.num_rows))
        os.replace(tmp, path)

    def open_arrow(self, rel: str) -> pa.Table:
        """An IPC file written by :meth:`save_arrow`, memory-mapped (pages are
        read on use and released when the table is dropped)."""
        source = pa.memory_map(os.path.join(self.root, rel), "r")
        return ipc.open_file(source).read_all()

    def exists(self, rel: str) -> bool:
        return os.path.exists(os.path.join(self.root, rel))


class NpyWriter:
    """A ``.npy`` file filled in order by :meth:`write`, renamed into place by
    :meth:`close` once every row is written."""

    def __init__(self, path: str, shape: tuple, dtype):
        self.path = path
        self.tmp = _tmp_name(path)
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.rows = 0
        self._f = open(self.tmp, "wb")
        np.lib.format.write_array_header_1_0(
            self._f, {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False,
                      "shape": self.shape})

    def write(self, block: np.ndarray) -> None:
        block = np.ascontiguousarray(block, dtype=self.dtype)
        if block.shape[1:] != self.shape[1:]:
            raise ValueError(f"{self.path}: block of shape {block.shape} does not fit {self.shape}")
        self._f.write(block.tobytes())
        self.rows += block.shape[0]

    def close(self) -> None:
        self._f.close()
        if self.rows != self.shape[0]:
            os.remove(self.tmp)
            raise ValueError(f"{self.path}: wrote {self.rows} rows, expected {self.shape[0]}")
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        self._f.close()
        try:
            os.remove(self.tmp)
        except OSError:
            pass
