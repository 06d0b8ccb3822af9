"""The output directory: checking it, staging the outputs, publishing them.

This module owns everything gpu-dedup does to ``--output``:

* :func:`inside`, the path containment test used to keep outputs, inputs and
  the work directory apart;
* :func:`OutputDir`, which returns a :class:`LocalOutput` (a folder) or a
  :class:`RemoteOutput` (a prefix on object storage). Both are
  :class:`gpu_dedup.manifest.Output`, which holds what they share: the early
  check (``check``), the publish and the order of its steps (``publish``);
  each implements the staging (``staging``), the clean-up after a failed run
  (``abort``) and the few steps that touch its storage;
* :func:`output_complete`, which says whether an output is complete.

What ``--overwrite`` removes is decided by one rule for both
(:func:`gpu_dedup.manifest.removable`): the files an earlier run wrote, each
found with the name, size and XXH3-128 hash its manifest ``_SUCCESS`` lists
(or the ``_PUBLISHING`` list of a publish that was killed). A file that no
manifest lists, or that changed since, stops the run before any work, and is
never touched. A publish writes ``_PUBLISHING`` first, removes the previous
``_SUCCESS`` before it moves anything, puts the files in place, and writes
``_SUCCESS`` last: an output with no ``_SUCCESS``, or whose files do not have
the listed sizes, is incomplete.

A local output directory is never renamed or replaced: files are moved into
it, and removed from it (with ``overwrite``, as above) together with the
folders they lived in once those are empty. So an existing directory keeps
its mode and inode, a symlink to a directory stays a link and a mount point
(a Docker volume, say) works. This module creates nothing beside the output:
its staging folders (``.gpu-dedup-staging-<host>-<pid>-<random>``) and its
lock file (``.gpu-dedup.lock``) are inside it. (An out-of-core run's default
work directory, ``.gpu-dedup-work``, is made beside the output by
:mod:`gpu_dedup.engine.store`, not here.)

Example:
    >>> with OutputDir("out", inputs=["corpus/"]) as out:   # doctest: +SKIP
    ...     out.check()
    ...     tmp = out.staging()
    ...     write_outputs(tmp)
    ...     names = out.publish()
"""
from __future__ import annotations

import fcntl
import logging
import os
import shutil
import stat
import tempfile
import time

from .atomic import write_bytes
from .errors import ConfigError, DedupError, InputError
from .manifest import (LEGACY_MANIFEST, LOCK_NAME, MANIFEST_NAME, OWN_FILES, PENDING_NAME,
                       STAGING_PREFIX, Output, complete, dead_here, host, parents,
                       staging_owner)
from .paths import contained

log = logging.getLogger("gpu_dedup")

#: The manifest's name on object storage: the same file as locally.
SUCCESS_NAME = MANIFEST_NAME
#: A staging prefix on object storage written from another host is removed
#: once its newest object is this old (its process cannot be probed).
REMOTE_STALE_SECONDS = 7 * 24 * 3600

__all__ = ["inside", "OutputDir", "Output", "LocalOutput", "RemoteOutput", "output_complete",
           "MANIFEST_NAME", "SUCCESS_NAME", "PENDING_NAME", "STAGING_PREFIX", "LOCK_NAME",
           "LEGACY_MANIFEST"]


def inside(child: str, parent: str) -> bool:
    """Whether ``child`` is ``parent`` or lies below it, once symlinks are resolved."""
    child = os.path.realpath(os.fspath(child))
    parent = os.path.realpath(os.fspath(parent))
    return child == parent or child.startswith(parent.rstrip(os.sep) + os.sep)


class LocalOutput(Output):
    """An output folder. Its staging folder is inside it, so the files are
    moved in with :func:`os.rename`; the publish holds an exclusive
    :func:`fcntl.flock` on ``.gpu-dedup.lock``, so of two runs into one empty
    folder exactly one publishes. A staging folder whose name carries this
    host and a process that is gone is removed by the next run.

    Attributes:
        path: the absolute output path as given (a symlink stays a symlink).
        target: where the files really go (the real path of ``path``).
    """

    def __init__(self, path: str, **kw):
        super().__init__(path, **kw)
        self.path = os.path.abspath(os.fspath(path))
        wd = kw.get("work_dir")
        self.work_dir = None if wd is None else os.path.abspath(os.fspath(wd))
        self._target: str | None = None   # pinned once staging() has run
        self._created: list[str] = []     # directories this run created, outermost first
        self._lock_fd: int | None = None
        self._trash: str | None = None
        self._undo: list[tuple] = []      # what the publish did, to put back on failure

    @property
    def target(self) -> str:
        """Where the files really go: the real path of :attr:`path`."""
        return self._target if self._target is not None else os.path.realpath(self.path)

    def _check_places(self) -> None:
        for spec in self.inputs:
            if os.path.exists(spec) and (inside(self.path, spec) or inside(spec, self.path)):
                raise InputError(f"{self.path}: the output directory must not be an input, "
                                 f"hold one or sit inside one ({spec}); choose another --output")
        if os.path.lexists(self.path) and not os.path.isdir(self.path):
            raise InputError(f"{self.path}: exists and is not a directory; "
                             f"choose another --output")
        if self.work_dir is not None:
            if inside(self.work_dir, self.path):
                raise ConfigError(f"--work-dir {self.work_dir}: must not be --output or inside "
                                  f"it; choose another --work-dir")
            for spec in self.inputs:
                if os.path.exists(spec) and (inside(self.work_dir, spec)
                                             or inside(spec, self.work_dir)):
                    raise ConfigError(f"--work-dir {self.work_dir}: must not be an input, hold "
                                      f"one or sit inside one ({spec}); choose another "
                                      f"--work-dir")

    def _exists(self) -> bool:
        return os.path.isdir(self.path)

    def _clean_stale(self) -> None:
        """Remove the staging folders of processes of this host that are gone."""
        try:
            names = os.listdir(self.target)
        except OSError:
            return
        for n in names:
            if dead_here(n):
                log.info("removing %s, left by a run that was stopped",
                         os.path.join(self.target, n))
                shutil.rmtree(os.path.join(self.target, n), ignore_errors=True)

    def _scan(self):
        files: dict[str, tuple[int, object]] = {}
        others: list[str] = []

        def walk(folder: str, rel: str) -> bool:
            found = False
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
            for e in entries:
                if not rel and (e.name in OWN_FILES or staging_owner(e.name) is not None):
                    continue
                name = f"{rel}{e.name}"
                found = True
                if e.is_dir(follow_symlinks=False):
                    if not walk(e.path, name + "/"):
                        others.append(name + "/")
                else:
                    st = e.stat(follow_symlinks=False)
                    files[name] = (st.st_size, (st.st_ino, st.st_size, st.st_mtime_ns,
                                                st.st_ctime_ns, stat.S_IFMT(st.st_mode)))
            return found
        walk(self.target, "")
        return files, others

    def _read(self, name: str) -> bytes | None:
        path = os.path.join(self.target, name)
        try:
            if not stat.S_ISREG(os.lstat(path).st_mode):
                return b""                    # not a file: not a manifest either
            with open(path, "rb") as f:
                return f.read()
        except (FileNotFoundError, NotADirectoryError):
            return None

    def _hash(self, name: str) -> str | None:
        from .io.identity import file_hash
        path = os.path.join(self.target, name)
        try:
            if not stat.S_ISREG(os.lstat(path).st_mode):
                return None
        except FileNotFoundError:
            return None                        # gone meanwhile: not the file listed
        return file_hash(path)[1]

    # -- staging ------------------------------------------------------------------
    def _make_target(self, target: str) -> None:
        """Create ``target`` and its missing parents, recording those made here."""
        missing = []
        d = target
        while not os.path.isdir(d):
            missing.append(d)
            up = os.path.dirname(d)
            if up == d:
                break
            d = up
        for d in reversed(missing):
            try:
                os.mkdir(d)
            except FileExistsError:
                if not os.path.isdir(d):
                    raise
                continue                   # made meanwhile by another run: not ours
            self._created.append(d)

    def staging(self) -> str:
        """Create the output directory if needed, and a staging folder inside it.

        Missing directories are created (parents included) and remembered, so
        that :meth:`abort` removes exactly those. Calling it again returns the
        same folder.

        Returns:
            The staging folder's path; write the outputs there, then call
            :meth:`publish`.
        """
        if self._staging is not None:
            return self._staging
        try:
            for attempt in range(3):
                target = os.path.realpath(self.path)
                self._make_target(target)
                self._target = target
                self._clean_stale()
                name = f"{STAGING_PREFIX}{host()}-{os.getpid()}-{os.urandom(4).hex()}"
                try:
                    os.mkdir(os.path.join(target, name))
                except FileNotFoundError:
                    # Another run removed the directory it had just created.
                    if attempt == 2:
                        raise
                    continue
                self._staging = os.path.join(target, name)
                return self._staging
        except OSError as exc:
            self.abort()
            raise self._write_error(exc) from exc
        raise DedupError(f"{self.path}: cannot create the output directory; "  # pragma: no cover
                         f"choose another --output")

    # -- the publish's steps ------------------------------------------------------
    def _begin(self) -> None:
        """Open and exclusively lock the lock file (another holder may remove it
        before letting go: then take the new one)."""
        lock = os.path.join(self.target, LOCK_NAME)
        while True:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    same = os.stat(lock).st_ino == os.fstat(fd).st_ino
                except FileNotFoundError:
                    same = False
            except BaseException:
                os.close(fd)
                raise
            if same:
                self._lock_fd = fd
                return
            os.close(fd)

    def _end(self) -> None:
        if self._lock_fd is not None:
            try:
                os.unlink(os.path.join(self.target, LOCK_NAME))
            except OSError:
                pass
            os.close(self._lock_fd)
            self._lock_fd = None

    def _open_trash(self) -> None:
        self._trash = tempfile.mkdtemp(prefix=".trash-", dir=self._staging)
        self._undo = []

    def _move(self, src: str, dst: str) -> None:
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        os.rename(src, dst)

    def _put(self, name: str, data: bytes) -> None:
        old = self._read(name)
        write_bytes(os.path.join(self.target, name), data,
                    tmp=os.path.join(self._trash, name + ".new"))
        self._undo.append(("put", name, old))

    def _drop_manifest(self) -> None:
        src = os.path.join(self.target, MANIFEST_NAME)
        if os.path.lexists(src):
            os.rename(src, os.path.join(self._trash, MANIFEST_NAME))
            self._undo.append(("move", src, os.path.join(self._trash, MANIFEST_NAME)))

    def _remove_old(self, doomed: list[str], fresh: set[str]) -> None:
        for n in doomed:                       # moved aside: put back if the publish fails
            src = contained(self.target, n, self.path)
            dst = os.path.join(self._trash, "files", n)
            self._move(src, dst)
            self._undo.append(("move", src, dst))

    def _place(self, name: str) -> None:
        dst = contained(self.target, name, self.path)
        parts = name.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            d = os.path.join(self.target, *parts[:i])
            if not os.path.isdir(d):
                os.mkdir(d)
                self._undo.append(("mkdir", d))
        os.rename(os.path.join(self._staging, name), dst)
        self._undo.append(("move", os.path.join(self._staging, name), dst))

    def _drop_pending(self) -> None:
        os.unlink(os.path.join(self.target, PENDING_NAME))

    def _rollback(self) -> None:
        """Put the output back as it was before the publish began."""
        for step in reversed(self._undo):
            try:
                if step[0] == "move":
                    self._move(step[2], step[1])
                elif step[0] == "mkdir":
                    os.rmdir(step[1])
                elif step[2] is None:
                    os.unlink(os.path.join(self.target, step[1]))
                else:
                    with open(os.path.join(self.target, step[1]), "wb") as f:
                        f.write(step[2])
            except OSError:
                pass
        self._undo = []

    def _finish(self, doomed: list[str]) -> None:
        for d in parents(doomed):              # the earlier files' folders, once empty
            try:
                os.rmdir(os.path.join(self.target, d))
            except OSError:
                pass                           # holds something: kept
        shutil.rmtree(self._staging, ignore_errors=True)
        self._staging = self._trash = None
        self._undo = []

    def abort(self) -> None:
        """Remove the staging folder and the directories this run created.

        A created directory is removed only when it is then empty; nothing
        else is ever removed. Calling it more than once is harmless.
        """
        if self._staging is not None:
            shutil.rmtree(self._staging, ignore_errors=True)
            self._staging = None
        if not self._published:
            for d in reversed(self._created):
                try:
                    os.rmdir(d)
                except OSError:
                    break          # holds something else (or is gone): keep it and its parents
            self._created = []


def _url_inside(child: str, parent: str) -> bool:
    c, p = str(child).rstrip("/"), str(parent).rstrip("/")
    return c == p or c.startswith(p + "/")


class RemoteOutput(Output):
    """An output prefix on object storage (``s3://bucket/out`` ...), where
    nothing can be renamed.

    The outputs are built in a local staging folder and uploaded under a
    staging prefix inside the output (``.gpu-dedup-staging-<host>-<pid>-
    <random>/``); the publish then deletes the earlier files (instead of
    moving them aside) and copies each new object into place on the server.
    There is no lock: the check just before publishing is the last word, and
    a publish that fails half-way leaves ``_PUBLISHING`` and no ``_SUCCESS``
    (incomplete, and replaced by the next run with ``overwrite``).

    A staging prefix of another run is removed by the next run into the
    output (before its check and before its publish) when it is certainly
    abandoned: its name carries this host and a process that is gone, or
    another host and its newest object is older than
    :data:`REMOTE_STALE_SECONDS` (a run writes its staging objects just before
    publishing). A live run's staging prefix is never removed.
    """

    kind = "prefix"

    def __init__(self, path: str, **kw):
        super().__init__(path, **kw)
        self.path = str(path).rstrip("/")
        wd = kw.get("work_dir")
        self.work_dir = None if wd is None else str(wd)
        self._tmp: str | None = None
        self._uploaded: list[str] = []

    @property
    def target(self) -> str:
        return self.path

    def _check_places(self) -> None:
        from .io.fs import is_url
        for spec in self.inputs:
            if is_url(spec) and (_url_inside(self.path, spec) or _url_inside(spec, self.path)):
                raise InputError(f"{self.path}: the output must not be an input, hold one or "
                                 f"sit inside one ({spec}); choose another --output")
        if self.work_dir is not None and is_url(self.work_dir) and \
                _url_inside(self.work_dir, self.path):
            raise ConfigError(f"--work-dir {self.work_dir}: must not be --output or inside it; "
                              f"choose another --work-dir")

    def _exists(self) -> bool:
        return True                            # a missing prefix lists as empty

    def _objects(self) -> dict[str, tuple[int, int]]:
        """Every object below the prefix: name -> (size, mtime in ns)."""
        import pyarrow.fs as pafs
        from pyarrow.lib import ArrowException
        from .io import fs
        fsys, p = fs.resolve(self.path)
        try:
            found = fsys.get_file_info(pafs.FileSelector(p, recursive=True,
                                                          allow_not_found=True))
        except (OSError, ArrowException) as exc:
            raise fs.error(self.path, exc, "cannot list") from exc
        return {f.path[len(p):].lstrip("/"): (int(f.size), int(f.mtime_ns or 0))
                for f in found if f.type == pafs.FileType.File}

    def _clean_stale(self) -> None:
        from .io import fs
        groups: dict[str, list[tuple[str, int]]] = {}
        for n, (_size, mtime) in self._objects().items():
            top = n.split("/", 1)[0]
            if "/" in n and staging_owner(top) is not None:
                groups.setdefault(top, []).append((n, mtime))
        now = time.time_ns()
        for top, objs in sorted(groups.items()):
            owner = staging_owner(top)[0]
            if not (dead_here(top) or (owner != host() and now - max(m for _, m in objs)
                                        > REMOTE_STALE_SECONDS * 1_000_000_000)):
                continue
            log.info("removing %s/%s/, left by a run that was stopped", self.path, top)
            for n, _ in objs:
                fs.delete(f"{self.path}/{n}")

    def _scan(self):
        files = {}
        for n, (size, mtime) in self._objects().items():
            top = n.split("/", 1)[0]
            if n in (MANIFEST_NAME, PENDING_NAME) or ("/" in n and staging_owner(top)):
                continue
            files[n] = (size, (size, mtime))
        return files, []

    def _read(self, name: str) -> bytes | None:
        from .io import fs
        url = f"{self.path}/{name}"
        return fs.read_bytes(url) if fs.exists(url) else None

    def _hash(self, name: str) -> str | None:
        from .digest import stream_sum
        from .io import fs
        with fs.open_input_stream(f"{self.path}/{name}") as f:
            return stream_sum(f)[1]

    def staging(self) -> str:
        """A local folder to write the outputs in (uploaded by :meth:`publish`)."""
        if self._staging is None:
            self._staging = tempfile.mkdtemp(prefix="gpu-dedup-staging-")
        return self._staging

    # -- the publish's steps ------------------------------------------------------
    def _upload(self, new: list[dict]) -> None:
        from .io import fs
        self._tmp = f"{self.path}/{STAGING_PREFIX}{host()}-{os.getpid()}-{os.urandom(4).hex()}"
        for r in new:
            fs.upload(os.path.join(self._staging, r["name"]), f"{self._tmp}/{r['name']}")
            self._uploaded.append(f"{self._tmp}/{r['name']}")

    def _put(self, name: str, data: bytes) -> None:
        from .io import fs
        fs.write_bytes(f"{self.path}/{name}", data)

    def _drop_manifest(self) -> None:
        from .io import fs
        fs.delete(f"{self.path}/{MANIFEST_NAME}")

    def _remove_old(self, doomed: list[str], fresh: set[str]) -> None:
        from .io import fs
        for n in doomed:
            if n not in fresh:                 # the others are replaced by the copy
                fs.delete(f"{self.path}/{n}")

    def _place(self, name: str) -> None:
        from .io import fs
        fs.copy(f"{self._tmp}/{name}", f"{self.path}/{name}")

    def _drop_pending(self) -> None:
        from .io import fs
        fs.delete(f"{self.path}/{PENDING_NAME}")

    def _finish(self, doomed: list[str]) -> None:
        self.abort()                           # the staging objects and folder

    def abort(self) -> None:
        """Delete the staging objects and the local staging folder."""
        from .io import fs
        if self._staging is not None:
            shutil.rmtree(self._staging, ignore_errors=True)
            self._staging = None
        for u in self._uploaded:
            try:
                fs.delete(u)
            except InputError:
                pass
        self._uploaded = []


def OutputDir(path: str, *, inputs=(), overwrite: bool = False,
              work_dir: str | None = None) -> Output:
    """The output of one run: a :class:`RemoteOutput` for a URL, else a
    :class:`LocalOutput` (arguments as for :class:`Output`)."""
    from .io.fs import is_url
    cls = RemoteOutput if is_url(path) else LocalOutput
    return cls(path, inputs=inputs, overwrite=overwrite, work_dir=work_dir)


def output_complete(path: str) -> tuple[bool, str]:
    """Whether the output at ``path`` (a URL or a local folder) is complete:
    its ``_SUCCESS`` exists and every file it lists exists with the listed
    size. Returns ``(complete, why not)``."""
    from .io import fs
    out = OutputDir(path)
    if fs.is_url(path):
        def size(name: str) -> int | None:
            i = fs.info(f"{out.path}/{name}")
            return int(i.size) if i.type == fs.pafs.FileType.File else None
    else:
        def size(name: str) -> int | None:
            try:
                st = os.lstat(os.path.join(out.target, name))
            except OSError:
                return None
            return st.st_size if stat.S_ISREG(st.st_mode) else None
    return complete(out._read, size, out.path)
