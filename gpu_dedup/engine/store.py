"""Where a run keeps what its stages produce: the store.

The runner's tasks save and load their results through a store, never
through paths, so the same tasks run in memory and out of core:

* :class:`MemoryStore` keeps arrays and Arrow columns as Python objects in
  this process. It is chosen when the plan says the corpus fits the budget
  and every task runs in this process (in order, or on Dask threads).
* :class:`DiskStore` is the work directory: ``.npy`` files (read in, mapped,
  or read a slice at a time), Arrow IPC files and completion markers. It is
  chosen when the corpus may not fit, when tasks run in other processes (a
  Dask cluster), or when a work directory is asked for; it makes a run
  resumable. It lives at ``ROOT/NAME-HASH``: ``ROOT`` is ``--work-dir`` (by
  default ``.gpu-dedup-work`` beside the output directory), ``NAME`` the
  configuration's short name and ``HASH`` a digest of everything that
  determines the intermediate results (the resolved configuration, the text
  and id fields, each input's content identity, the plan): changed
  parameters or inputs never reuse stale work.

Every artifact of a disk store is written to a temporary name
(:func:`gpu_dedup.atomic.tmp_path`, the one rule for every file written
there, which :meth:`DiskStore.open` cleans with ``is_tmp``) and renamed into
place; a unit of work is complete when its marker ``<unit>.done`` exists,
written after the unit's artifacts (:mod:`gpu_dedup.engine.layout`). A run
killed at any point (even by SIGKILL) leaves only complete units plus
temporary files, which the next run removes, as a failed write does its own.

Nothing in a work directory is trusted for being there. Each artifact's size and
XXH3-128 hash are taken as it is written; a unit's marker lists its files with theirs (a
stage's marker also lists the files of its units that later stages read) and carries a
hash of its own content. A unit is done only while its marker is intact and every file
it lists matches: a file truncated, changed, zeroed, replaced or deleted since makes the
unit be computed again, to the same bytes. Reading a file that no longer holds what this
run wrote or checked, where nothing is computed again, is an error naming it
(:class:`DamagedWorkFile`).
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import threading

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import xxhash

from ..atomic import is_tmp, tmp_path, write_atomic
from ..digest import SummedWriter, file_sum
from ..errors import ConfigError, DedupError
from ..stages.normalize import text_buffers
from ..arrays import arrow
from .columns import StoredColumn
from .layout import LOCK, MARKER

log = logging.getLogger("gpu_dedup")

#: Bump when the layout of the work directory changes.
FORMAT_VERSION = 12
DEFAULT_ROOT = ".gpu-dedup-work"
#: A marker's keys for its files' sizes and hashes, and for its own hash.
_FILES, _SEAL = "_files", "_seal"


def digest(obj) -> str:
    """A short stable digest of a JSON-serialisable object."""
    raw = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()
    import hashlib                      # loads OpenSSL: only when asked
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
        return arrow([], type=col.type)
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
        self._files: dict = {}          # unit -> the files its marker lists
        self._lock = threading.Lock()

    def open(self) -> "MemoryStore":
        return self

    def close(self) -> None:
        pass

    def remove(self) -> None:
        self._items.clear()
        self._done.clear()
        self._files.clear()

    def done(self, unit: str) -> dict | None:
        return self._done.get(unit)

    def mark_done(self, unit: str, meta: dict | None = None, files=(), units=()) -> None:
        with self._lock:
            self._done[unit] = dict(meta or {})
            self._files[unit] = list(files)

    def save_npy(self, rel: str, arr: np.ndarray) -> None:
        with self._lock:
            self._items[rel] = np.asarray(arr)

    def concat_npy(self, rel: str, parts: list[str], dtype) -> None:
        arrays = [self.load_npy(p) for p in parts]
        self.save_npy_pieces(rel, arrays, dtype, sum(a.shape[0] for a in arrays))

    def save_npy_pieces(self, rel: str, pieces, dtype, count: int) -> None:
        self.save_npy_columns([rel], [dtype], ((p,) for p in pieces), count)

    def save_npy_columns(self, rels: list, dtypes: list, pieces, count: int) -> None:
        cols = [[] for _ in rels]
        for piece in pieces:
            for out, dt, col in zip(cols, dtypes, piece):
                out.append(np.asarray(col, dtype=dt))
        for rel, dt, parts in zip(rels, dtypes, cols):
            arr = np.concatenate(parts) if parts else np.zeros(0, dt)
            if arr.size != count:
                raise ValueError(f"{rel}: {arr.size} elements written, {count} announced")
            self.save_npy(rel, arr)

    def load_npy(self, rel: str, mmap: bool | str = False) -> np.ndarray:
        return self._items[rel]

    def uncache(self, rels) -> None:
        """Nothing to do: memory is not a cache of files."""

    def spent(self, rels) -> None:
        """``rels``, which no later stage reads: freed (nothing resumes from memory)."""
        for rel in rels:
            self.discard(rel)

    def discard(self, rel: str) -> None:
        """Forget ``rel``, a file this run wrote and no longer needs."""
        with self._lock:
            self._items.pop(rel, None)

    def forget(self, unit: str) -> None:
        """Forget the completed ``unit`` and the files it listed."""
        with self._lock:
            self._done.pop(unit, None)
            for rel in self._files.pop(unit, ()):
                self._items.pop(rel, None)

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


def _write_atomically(path: str, write, tmp: str | None = None) -> tuple[int, str]:
    """``write(tmp)``, then its size and hash, then rename over ``path``
    (:func:`gpu_dedup.atomic.write_atomic`: a failed write leaves nothing
    half-written; ``tmp``: a temporary name written already). ``write`` may
    return the ``(size, digest)`` of what it wrote
    (:class:`~gpu_dedup.digest.SummedWriter`); otherwise the file is read
    back to hash it. Returns the file's ``(size, digest)``."""
    def write_and_sum(t):
        got = write(t)
        return got if isinstance(got, tuple) else file_sum(t)
    return write_atomic(path, write_and_sum, tmp=tmp)


def _write_npy(f, arr: np.ndarray) -> None:
    """``arr`` in the ``.npy`` format to the binary file ``f``: the bytes
    :func:`numpy.save` writes (a version 1.0 header, then the data in C
    order), through ``f.write`` alone."""
    arr = np.ascontiguousarray(arr)
    if arr.dtype.hasobject:
        raise ValueError("arrays of Python objects are not stored")
    np.lib.format.write_array_header_1_0(f, np.lib.format.header_data_from_array_1_0(arr))
    f.write(arr.reshape(-1).view(np.uint8))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


def _identity(st: os.stat_result) -> tuple:
    return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev)


def _seal(meta: dict, files: dict) -> str:
    raw = json.dumps({"meta": meta, "files": files}, sort_keys=True, separators=(",", ":"))
    return xxhash.xxh3_128_hexdigest(raw.encode())


def _valid_table(files) -> bool:
    return isinstance(files, dict) and all(
        isinstance(v, list) and len(v) == 2 and isinstance(v[0], int)
        and isinstance(v[1], str) for v in files.values())


class DamagedWorkFile(DedupError):
    """A work file that does not hold what the run wrote, read where nothing
    can be computed again."""


class DiskStore:
    """Atomic artifacts and completion markers under one folder.

    The object is only a path, so it travels to Dask workers unchanged; the
    folder must then be on storage every worker can reach. Each process
    remembers the size and hash of the files it wrote or checked (and the
    file's identity when it matched), so that a file is hashed at most once
    a run unless it changes.
    """

    kind = "disk"

    def __init__(self, root: str):
        self.root = os.path.abspath(root)
        self._lock_fd = None
        self._init_sums()

    def _init_sums(self) -> None:
        self._sums_lock = threading.Lock()
        self._expect: dict = {}       # rel -> (size, digest) written or recorded
        self._seen: dict = {}         # rel -> identity of the file when it matched

    def __getstate__(self):
        return {"root": self.root}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock_fd = None
        self._init_sums()

    # -- lifetime ---------------------------------------------------------
    def open(self) -> "DiskStore":
        """Create the folder, take its lock (one run at a time) and remove
        temporary files left by a killed run."""
        os.makedirs(self.root, exist_ok=True)
        import fcntl
        fd = os.open(os.path.join(self.root, LOCK), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise ConfigError(f"{self.root}: work directory is in use by another run; wait "
                              f"for it or pass a different --work-dir") from None
        self._lock_fd = fd
        for dirpath, _dirs, names in os.walk(self.root):
            for n in names:
                if is_tmp(n):
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

    # -- paths, sums and markers -------------------------------------------
    def path(self, rel: str) -> str:
        """Where ``rel`` is written (its folder created)."""
        p = os.path.join(self.root, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        return p

    def _local(self, rel: str) -> str:
        """Where ``rel`` is read."""
        return os.path.join(self.root, rel)

    def _record(self, rel: str, got: tuple[int, str], path: str) -> None:
        ident = _identity(os.stat(path))
        with self._sums_lock:
            self._expect[rel] = tuple(got)
            self._seen[rel] = ident

    def _mismatch(self, rel: str, want: tuple[int, str]) -> str | None:
        """Why ``rel`` does not hold what was written (``want``), or None."""
        path = self._local(rel)
        try:
            st = os.stat(path)
        except OSError:
            return "missing"
        if st.st_size != want[0]:
            return f"{st.st_size:,} bytes where {want[0]:,} were written"
        ident = _identity(st)
        with self._sums_lock:
            if self._seen.get(rel) == ident and self._expect.get(rel) == want:
                return None
        try:
            got = file_sum(path)
        except OSError as exc:
            return f"unreadable ({exc.strerror or exc})"
        if got != want:
            return "its bytes changed since they were written"
        with self._sums_lock:
            self._expect[rel] = want
            self._seen[rel] = ident
        return None

    def _marker(self, unit: str):
        """``(meta, files)`` of an intact marker, else None."""
        try:
            with open(self._local(unit + MARKER), "rb") as f:
                obj = json.loads(f.read())
        except (OSError, ValueError):
            return None
        if not isinstance(obj, dict):
            return None
        files = obj.pop(_FILES, None)
        seal = obj.pop(_SEAL, None)
        if not _valid_table(files) or seal != _seal(obj, files):
            return None
        return obj, files

    def done(self, unit: str) -> dict | None:
        """The metadata recorded when ``unit`` completed, or None: also when
        its marker is damaged or a file it lists is missing or changed (the
        unit is then computed again)."""
        got = self._marker(unit)
        if got is None:
            return None
        meta, files = got
        with self._sums_lock:
            for rel, want in files.items():
                self._expect.setdefault(rel, tuple(want))
        for rel, want in files.items():
            why = self._mismatch(rel, tuple(want))
            if why is not None:
                log.warning("%s: %s; computing %s again", self._local(rel), why, unit)
                return None
        return meta

    def mark_done(self, unit: str, meta: dict | None = None, files=(), units=()) -> None:
        """Record ``unit`` complete: its ``files`` (written by this process)
        and the files listed by the completed ``units`` it depends on, with
        their sizes and hashes; written after them."""
        table: dict = {}
        for u in units:
            got = self._marker(u)
            if got is None:
                raise DamagedWorkFile(f"{self._local(u + MARKER)}: missing or damaged while "
                                      f"the run used it; run the same command again")
            table.update(got[1])
        with self._sums_lock:
            for rel, want in table.items():
                self._expect.setdefault(rel, tuple(want))
        for rel in files:
            with self._sums_lock:
                want = self._expect.get(rel)
            if want is None:
                want = file_sum(self._local(rel))
                self._record(rel, want, self._local(rel))
            table[rel] = [int(want[0]), str(want[1])]
        meta = json.loads(json.dumps(meta or {}))
        body = {**meta, _FILES: table, _SEAL: _seal(meta, table)}

        def write(tmp):
            with open(tmp, "w") as f:
                json.dump(body, f, sort_keys=True)
        _write_atomically(self.path(unit + MARKER), write)

    def _checked(self, rel: str) -> str:
        """The path of ``rel`` once it matches what was written (when this
        process knows that); a mismatch is an error naming the file."""
        with self._sums_lock:
            want = self._expect.get(rel)
        path = self._local(rel)
        if want is not None:
            why = self._mismatch(rel, want)
            if why is not None:
                raise self._damaged(path, why)
        return path

    def _damaged(self, path: str, why: str) -> DamagedWorkFile:
        return DamagedWorkFile(f"{path}: damaged work file ({why}); run the same command "
                               f"again to compute it anew")

    # -- artifacts --------------------------------------------------------
    def save_json(self, rel: str, obj) -> None:
        def write(tmp):
            with open(tmp, "w") as f:
                json.dump(obj, f, sort_keys=True)
        path = self.path(rel)
        self._record(rel, _write_atomically(path, write), path)

    def save_npy(self, rel: str, arr: np.ndarray) -> None:
        def write(tmp):
            with open(tmp, "wb") as f:
                out = SummedWriter(f)
                _write_npy(out, arr)
            return out.sum()
        path = self.path(rel)
        self._record(rel, _write_atomically(path, write), path)

    def uncache(self, rels) -> None:
        """Tell the system that the files ``rels`` will not be read again
        soon, so that their pages leave the page cache before those of the
        files later stages read (a corpus whose work directory exceeds the
        machine's memory would otherwise read those back from the disk).
        Advice only: the files stay, and a rerun reads them as before."""
        advise = getattr(os, "posix_fadvise", None)
        if advise is None:
            return
        for rel in rels:
            with contextlib.suppress(OSError):
                fd = os.open(os.path.join(self.root, rel), os.O_RDONLY)   # never fetched
                try:
                    advise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)

    def spent(self, rels) -> None:
        """Nothing to do: files no later stage reads stay, for a resume."""

    def discard(self, rel: str) -> None:
        """Delete ``rel``, a file this run wrote and no longer needs (never
        one it did not write)."""
        with self._sums_lock:
            written = self._expect.pop(rel, None) is not None
            self._seen.pop(rel, None)
        if written:
            try:
                os.remove(os.path.join(self.root, rel))
            except FileNotFoundError:
                pass

    def forget(self, unit: str) -> None:
        """Delete the completed ``unit``: its marker, then the files it
        lists that this run wrote or checked (never others)."""
        got = self._marker(unit)
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(self.root, unit + MARKER))
        for rel in (got[1] if got else ()):
            self.discard(rel)
        with contextlib.suppress(OSError):          # its folder, when now empty
            os.rmdir(os.path.join(self.root, unit))

    def concat_npy(self, rel: str, parts: list[str], dtype) -> None:
        """``rel``: the stored 1-d arrays ``parts`` end to end, written a part
        at a time (never all in memory)."""
        sizes = [self.load_npy(p, mmap="read").shape[0] for p in parts]
        self.save_npy_pieces(rel, (self.load_npy(p, mmap="read") for p in parts), dtype,
                             sum(sizes))

    def save_npy_pieces(self, rel: str, pieces, dtype, count: int) -> None:
        """``rel``: a 1-d array of ``count`` elements of ``dtype`` written
        from ``pieces`` (an iterable of arrays, in order) one at a time, by
        plain writes: neither the array nor a mapping of it is ever held."""
        self.save_npy_columns([rel], [dtype], ((p,) for p in pieces), count)

    def save_npy_columns(self, rels: list, dtypes: list, pieces, count: int) -> None:
        """Each of ``rels``: a 1-d array of ``count`` elements of its dtype,
        written in one pass over ``pieces`` (an iterable of tuples, a piece
        of each column), a piece at a time; each file is renamed into place
        once all are complete."""
        dtypes = [np.dtype(d) for d in dtypes]
        paths = [self.path(r) for r in rels]
        tmps = [tmp_path(p) for p in paths]
        files = []
        sums = []
        try:
            for t, dt in zip(tmps, dtypes):
                files.append(open(t, "wb"))
                sums.append(SummedWriter(files[-1]))
                np.lib.format.write_array_header_2_0(
                    sums[-1], {"descr": np.lib.format.dtype_to_descr(dt),
                               "fortran_order": False, "shape": (int(count),)})
            n = 0
            for piece in pieces:
                for f, dt, col in zip(sums, dtypes, piece):
                    col = np.ascontiguousarray(col, dtype=dt)
                    f.write(col.reshape(-1).view(np.uint8))
                n += int(np.shape(piece[0])[0])
                del piece
            if n != count:
                raise ValueError(f"{rels[0]}: {n} elements written, {count} announced")
            for f in files:
                f.close()
        except BaseException:
            for f in files:
                f.close()
            for t in tmps:
                with contextlib.suppress(OSError):
                    os.remove(t)
            raise
        for rel, path, tmp, got in zip(rels, paths, tmps, sums):
            self._record(rel, _write_atomically(path, lambda _, got=got: got.sum(), tmp), path)

    def load_npy(self, rel: str, mmap: bool | str = False) -> np.ndarray:
        """The array ``rel``: read in, mapped (``mmap=True``: read-only; ``"c"``:
        copy-on-write, typed as writable by the kernels), or ``"read"``: a
        :class:`~.columns.StoredColumn` (rows of them for two dimensions)."""
        path = self._checked(rel)
        if mmap == "read":
            return StoredColumn.open(path, lambda why: self._damaged(path, why))
        try:
            return np.load(path, mmap_mode=("c" if mmap == "c" else "r") if mmap else None,
                           allow_pickle=False)
        except FileNotFoundError:
            raise self._damaged(path, "missing") from None
        except (OSError, ValueError, EOFError) as exc:
            raise self._damaged(path, f"not a readable array: {_first_line(exc)}") from None

    def save_arrow(self, rel: str, columns: dict) -> None:
        """Arrow IPC file (one record batch) of the given columns."""
        table = pa.table(columns)

        def write(tmp):
            with pa.OSFile(tmp, "wb") as sink:
                with ipc.new_file(sink, table.schema) as w:
                    w.write_table(table, max_chunksize=max(1, table.num_rows))
        path = self.path(rel)
        self._record(rel, _write_atomically(path, write), path)

    def open_arrow(self, rel: str) -> pa.Table:
        """An IPC file written by :meth:`save_arrow`, memory-mapped (pages are
        read on use and released when the table is dropped)."""
        path = self._checked(rel)
        try:
            source = pa.memory_map(path, "r")
            return ipc.open_file(source).read_all()
        except FileNotFoundError:
            raise self._damaged(path, "missing") from None
        except (OSError, ValueError, pa.ArrowException) as exc:
            raise self._damaged(path, f"not a readable Arrow file: {_first_line(exc)}") \
                from None

    def column(self, rel: str) -> pa.Array:
        """The first column of a saved Arrow table."""
        t = self.open_arrow(rel)
        if t.num_columns != 1:
            raise self._damaged(self._local(rel), f"{t.num_columns} columns where 1 was "
                                                  f"written")
        return _column(t)

    def buffers(self, rel: str):
        """``(offsets, data)`` of a saved string column (memory-mapped)."""
        return text_buffers(self.column(rel))

    def exists(self, rel: str) -> bool:
        return os.path.exists(self._local(rel))
