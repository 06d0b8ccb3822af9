"""The output directory: checking it, staging the outputs inside it, publishing them.

This module owns everything gpu-dedup does to ``--output``:

* :func:`inside`, the path containment test used to keep outputs, inputs and
  the work directory apart;
* :class:`OutputDir`, which refuses an unusable output early
  (:meth:`OutputDir.check`), builds the outputs in a staging folder *inside*
  the output directory (:meth:`OutputDir.staging`), moves them into place
  under an exclusive lock (:meth:`OutputDir.publish`) and cleans up after a
  failed run (:meth:`OutputDir.abort`);
* the files it keeps there: the staging folders
  (``.gpu-dedup-staging-<host>-<pid>-<random>``), the lock file
  (``.gpu-dedup.lock``) and the manifest of the last published output
  (``.gpu-dedup-manifest.json``), plus the removal of staging folders (and
  legacy ``.NAME.tmp-PID`` folders beside the output) left by killed runs.

The output directory itself is never renamed or replaced: only entries are
added to it, moved into it or (with ``overwrite``, and only those the previous
output's manifest lists or that this run replaces) removed from it. So an
existing directory keeps its mode and inode, a symlink to a directory stays a
link, a mount point (a Docker volume, say) works, and nothing is ever created
beside the output.

Example:
    >>> with OutputDir("out", inputs=["corpus/"]) as out:   # doctest: +SKIP
    ...     out.check()
    ...     tmp = out.staging()
    ...     write_outputs(tmp)
    ...     names = out.publish()
"""
from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import re
import secrets
import shutil
import socket
import tempfile
import time

from .errors import ConfigError, DedupError, InputError

log = logging.getLogger("gpu_dedup")

#: Prefix of the staging folders built inside the output directory.
STAGING_PREFIX = ".gpu-dedup-staging-"
#: The lock file taken while publishing.
LOCK_NAME = ".gpu-dedup.lock"
#: The list of entries the last published output wrote.
MANIFEST_NAME = ".gpu-dedup-manifest.json"
MANIFEST_FORMAT = 1

_STAGING_RE = re.compile(re.escape(STAGING_PREFIX) + r"(?P<host>.+)-(?P<pid>[0-9]+)-[0-9a-f]+")
_LEGACY_RE = re.compile(r"\.(?P<name>.+)\.tmp-(?P<pid>[0-9]+)")


def inside(child: str, parent: str) -> bool:
    """Whether ``child`` is ``parent`` or lies below it, once symlinks are resolved.

    Args:
        child: a path; it need not exist.
        parent: a path; it need not exist.

    Returns:
        True when the real path of ``child`` equals that of ``parent`` or
        starts with it followed by a separator.
    """
    child = os.path.realpath(os.fspath(child))
    parent = os.path.realpath(os.fspath(parent))
    return child == parent or child.startswith(parent.rstrip(os.sep) + os.sep)


def _host() -> str:
    """This host's name, as it appears in staging folder names."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname()) or "localhost"


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host (owned by anyone)."""
    if pid <= 0:
        return True           # not a real owner: never treat the folder as stale
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:           # exists, owned by someone else
        return True
    return True


def _staging_owner(name: str) -> tuple[str, int] | None:
    """``(host, pid)`` of a staging folder name, or None for any other name."""
    m = _STAGING_RE.fullmatch(name)
    return (m.group("host"), int(m.group("pid"))) if m else None


def _is_own_live(name: str) -> bool:
    """Whether ``name`` is one of this module's files that a run may still be using."""
    if name == LOCK_NAME:
        return True
    owner = _staging_owner(name)
    if owner is None:
        return False
    host, pid = owner
    return host != _host() or pid == os.getpid() or _alive(pid)


def _remove(path: str) -> None:
    """Remove a file, link or directory tree; a missing one is fine."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def _size(path: str) -> tuple[str, int, int]:
    """``(type, bytes, files)`` of an entry: a file's size, or a tree's total."""
    if os.path.isdir(path) and not os.path.islink(path):
        total = files = 0
        for root, _dirs, names in os.walk(path):
            for n in names:
                total += os.lstat(os.path.join(root, n)).st_size
                files += 1
        return "dir", total, files
    return "file", os.lstat(path).st_size, 1


def _appeared(path: str, what: str, name: str) -> InputError:
    return InputError(f"{path}: output {what} is no longer empty ({name} appeared while this "
                      f"run was working); nothing was written; pass --overwrite or choose "
                      f"another --output")


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


class OutputDir:
    """The output directory of one run.

    Use it as a context manager: leaving the block with an exception removes
    what this run staged or created (:meth:`abort`), and an :class:`OSError`
    (``ENOSPC``, ``EACCES`` ...) becomes a one-line :class:`DedupError`.
    Leaving it normally without :meth:`publish` also discards the staged files.

    Args:
        path: the output directory (``--output``); it need not exist.
        inputs: input files, directories and raw input specs (globs and the
            like); only the ones that exist are compared with the output.
        overwrite: replace the previous gpu-dedup output found in the
            directory instead of refusing a non-empty one.
        work_dir: the work directory (``--work-dir``), if one was given.

    Attributes:
        path: the absolute output path as given (a symlink stays a symlink).
        target: where the files really go (the real path of ``path``).
    """

    def __new__(cls, path, *args, **kwargs):
        from .io.fs import is_url
        if cls is OutputDir and is_url(path):
            return super().__new__(RemoteOutputDir)
        return super().__new__(cls)

    def __init__(self, path: str, *, inputs: list[str] = (), overwrite: bool = False,
                 work_dir: str | None = None):
        self.path = os.path.abspath(os.fspath(path))
        self.inputs = [os.fspath(s) if isinstance(s, os.PathLike) else str(s) for s in inputs]
        self.overwrite = bool(overwrite)
        self.work_dir = None if work_dir is None else os.path.abspath(os.fspath(work_dir))
        self._target: str | None = None   # pinned once staging() has run
        self._staging: str | None = None
        self._created: list[str] = []     # directories this run created, outermost first
        self._published = False

    @property
    def target(self) -> str:
        """Where the files really go: the real path of :attr:`path`."""
        return self._target if self._target is not None else os.path.realpath(self.path)

    # -- checks -----------------------------------------------------------
    def check(self) -> None:
        """Refuse an unusable output directory or work directory, before any work.

        Dead runs' staging folders inside the directory are removed first; they
        and the files of live runs (lock, staging folders) do not make the
        directory non-empty.

        Raises:
            InputError: the output is, holds or sits inside an existing input;
                it exists and is not a directory; or it is non-empty and
                ``overwrite`` is False.
            ConfigError: the work directory is the output or inside it, or it
                is, holds or sits inside an existing input.
        """
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
        if os.path.isdir(self.path):
            self._clean_stale_inside(self.target)
            if not self.overwrite and self._foreign(self.target):
                raise InputError(f"{self.path}: output directory is not empty; pass "
                                 f"--overwrite to replace it, or choose another --output")

    def _foreign(self, target: str) -> list[str]:
        """Entries of ``target`` other than this module's files in use, sorted."""
        return sorted(n for n in os.listdir(target)
                      if not _is_own_live(n) and os.path.join(target, n) != self._staging)

    # -- stale leftovers --------------------------------------------------
    def _clean_stale_inside(self, target: str) -> None:
        """Remove staging folders in ``target`` left by dead runs on this host."""
        host, me = _host(), os.getpid()
        try:
            names = os.listdir(target)
        except OSError:
            return
        for n in names:
            owner = _staging_owner(n)
            if owner is not None and owner[0] == host and owner[1] != me and not _alive(owner[1]):
                log.info("removing %s, left by a run that was stopped",
                         os.path.join(target, n))
                shutil.rmtree(os.path.join(target, n), ignore_errors=True)

    def _clean_legacy(self) -> None:
        """Remove ``.NAME.tmp-PID`` folders beside the output left by dead runs."""
        me = os.getpid()
        for p in {self.path, self.target}:
            parent, base = os.path.split(p.rstrip(os.sep))
            try:
                names = os.listdir(parent)
            except OSError:
                continue
            for n in names:
                m = _LEGACY_RE.fullmatch(n)
                if (m and m.group("name") == base and int(m.group("pid")) != me
                        and not _alive(int(m.group("pid")))):
                    full = os.path.join(parent, n)
                    if os.path.isdir(full) and not os.path.islink(full):
                        log.info("removing %s, left by a run that was stopped", full)
                        shutil.rmtree(full, ignore_errors=True)

    # -- staging ----------------------------------------------------------
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
        that :meth:`abort` removes exactly those. Staging folders of dead runs
        on this host, and legacy ``.NAME.tmp-PID`` folders beside the output,
        are removed. Calling it again returns the same folder.

        Returns:
            The staging folder's path; write the outputs there, then call
            :meth:`publish`.

        Raises:
            DedupError: the directory or the folder cannot be created.
        """
        if self._staging is not None:
            return self._staging
        try:
            self._clean_legacy()
            for attempt in range(3):
                target = os.path.realpath(self.path)
                self._make_target(target)
                self._target = target
                self._clean_stale_inside(target)
                name = f"{STAGING_PREFIX}{_host()}-{os.getpid()}-{secrets.token_hex(4)}"
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

    # -- publishing -------------------------------------------------------
    def _lock(self, target: str) -> int:
        """Open and exclusively lock the lock file in ``target``; returns its descriptor."""
        lock = os.path.join(target, LOCK_NAME)
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
                return fd
            os.close(fd)          # its holder removed it before letting go: take the new one

    def _unlock(self, target: str, fd: int) -> None:
        try:
            os.unlink(os.path.join(target, LOCK_NAME))
        except OSError:
            pass
        os.close(fd)

    def _previous_entries(self, target: str) -> list[str]:
        """The entry names the previous output's manifest lists (only plain names)."""
        path = os.path.join(target, MANIFEST_NAME)
        try:
            with open(path) as f:
                data = json.load(f)
            entries = [e["name"] for e in data["entries"]]
        except FileNotFoundError:
            return []
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("%s: unreadable manifest (%s); only the entries this run writes "
                        "are replaced", path, _one_line(exc))
            return []
        return [n for n in entries
                if isinstance(n, str) and n not in ("", ".", "..", MANIFEST_NAME)
                and os.sep not in n and (os.altsep is None or os.altsep not in n)
                and n != LOCK_NAME and _staging_owner(n) is None]

    def publish(self) -> list[str]:
        """Move the staged entries into the output directory.

        Under an exclusive lock on ``.gpu-dedup.lock`` the directory is checked
        again: without ``overwrite`` it must hold nothing but this module's
        files in use; with ``overwrite`` the entries the previous output's
        manifest lists, and those about to be replaced, are removed, and
        nothing else. Entries are moved with :func:`os.rename` (same
        filesystem); the manifest ``.gpu-dedup-manifest.json`` is written last.
        On failure everything staged or created by this run is removed.

        Returns:
            The names of the entries written (the manifest not included), sorted.

        Raises:
            InputError: without ``overwrite``, something appeared in the
                directory while this run was working (another run's outputs,
                a user's file); those files are left untouched.
            DedupError: :meth:`staging` was not called, the staging folder
                holds a reserved name, or an :class:`OSError` occurred.
        """
        if self._staging is None or self._target is None or self._published:
            raise DedupError(f"{self.path}: nothing staged to publish; call staging() first")
        target, staging = self._target, self._staging
        try:
            return self._publish(target, staging)
        except OSError as exc:
            self.abort()
            raise self._write_error(exc) from exc
        except BaseException:
            self.abort()
            raise

    def _publish(self, target: str, staging: str) -> list[str]:
        names = sorted(os.listdir(staging))
        for n in names:
            if n in (LOCK_NAME, MANIFEST_NAME) or _staging_owner(n) is not None:
                raise DedupError(f"{os.path.join(staging, n)}: this name is reserved for "
                                 f"gpu-dedup's own files; write the outputs under another name")
        sizes = {n: _size(os.path.join(staging, n)) for n in names}
        fd = self._lock(target)
        try:
            self._clean_stale_inside(target)
            if not self.overwrite:
                foreign = self._foreign(target)
                if foreign:
                    raise _appeared(self.path, "directory", foreign[0])
                doomed = []
            else:
                doomed = sorted(set(self._previous_entries(target))
                                | {n for n in names if os.path.lexists(os.path.join(target, n))})
            trash = tempfile.mkdtemp(prefix=".trash-", dir=staging)
            trashed: list[str] = []
            moved: list[str] = []
            try:
                for n in doomed:
                    if os.path.lexists(os.path.join(target, n)):
                        os.rename(os.path.join(target, n), os.path.join(trash, n))
                        trashed.append(n)
                for n in names:
                    os.rename(os.path.join(staging, n), os.path.join(target, n))
                    moved.append(n)
                manifest = {
                    "tool": "gpu-dedup",
                    "format": MANIFEST_FORMAT,
                    "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    "entries": [{"name": n, "type": sizes[n][0], "bytes": sizes[n][1],
                                 "files": sizes[n][2]} for n in names],
                }
                tmp = os.path.join(staging, MANIFEST_NAME)
                with open(tmp, "w") as f:
                    json.dump(manifest, f, indent=2)
                    f.write("\n")
                os.replace(tmp, os.path.join(target, MANIFEST_NAME))
            except BaseException:
                # Put the directory back as it was: ours out, the previous output in.
                for n in reversed(moved):
                    try:
                        os.rename(os.path.join(target, n), os.path.join(staging, n))
                    except OSError:
                        pass
                for n in reversed(trashed):
                    try:
                        os.rename(os.path.join(trash, n), os.path.join(target, n))
                    except OSError:
                        pass
                raise
            self._published = True
            shutil.rmtree(staging, ignore_errors=True)
            self._staging = None
        finally:
            self._unlock(target, fd)
        return names

    # -- cleanup ----------------------------------------------------------
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

    def _write_error(self, exc: OSError) -> DedupError:
        reason = exc.strerror or str(exc) or errno.errorcode.get(exc.errno, "error")
        return DedupError(f"{self.path}: cannot write the outputs: {_one_line(reason)}")

    def __enter__(self) -> OutputDir:
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if not self._published or exc is not None:
            self.abort()
        if isinstance(exc, OSError):
            raise self._write_error(exc) from exc
        return False


# -- object storage ---------------------------------------------------------------

#: The manifest that marks a complete output on object storage, written last.
SUCCESS_NAME = "_SUCCESS"


def _url_inside(child: str, parent: str) -> bool:
    c, p = str(child).rstrip("/"), str(parent).rstrip("/")
    return c == p or c.startswith(p + "/")


def _local_files(root: str) -> list[str]:
    out = []
    for d, _dirs, names in os.walk(root):
        for n in names:
            out.append(os.path.relpath(os.path.join(d, n), root).replace(os.sep, "/"))
    return sorted(out)


class RemoteOutputDir(OutputDir):
    """An output prefix on object storage (``s3://bucket/out`` ...), where
    nothing can be renamed.

    The outputs are built in a local staging folder, uploaded under a
    temporary prefix inside the output (``.gpu-dedup-staging-<host>-<pid>-
    <random>/``), then published: the previous output's ``_SUCCESS`` is
    deleted first (with ``overwrite``, the objects it lists that this run
    does not write are deleted too, and nothing else), every object is copied
    into place on the server, the temporary prefix is deleted, and
    ``_SUCCESS`` is written last: a JSON manifest of every file with its size
    and XXH3-128 hash. An output without ``_SUCCESS``, or whose files do not
    match it, is incomplete (:func:`output_complete`). Without
    ``overwrite`` a prefix holding anything but other runs' temporary
    prefixes is refused, before the run and again before publishing.
    """

    def __init__(self, path: str, *, inputs: list[str] = (), overwrite: bool = False,
                 work_dir: str | None = None):
        self.path = str(path).rstrip("/")
        self.inputs = [str(s) for s in inputs]
        self.overwrite = bool(overwrite)
        self.work_dir = None if work_dir is None else str(work_dir)
        self._target = self.path
        self._staging = None
        self._created = []
        self._published = False
        self._uploaded: list[str] = []

    @property
    def target(self) -> str:
        return self.path

    def _listing(self) -> list[str]:
        from .io import fs
        base = self.path + "/"
        return [u[len(base):] for u in fs.listdir(self.path)]

    def _foreign_names(self, listing: list[str]) -> list[str]:
        return sorted(n for n in listing
                      if n != SUCCESS_NAME and not n.startswith(STAGING_PREFIX))

    def check(self) -> None:
        from .io.fs import is_url
        for spec in self.inputs:
            if is_url(spec) and (_url_inside(self.path, spec) or _url_inside(spec, self.path)):
                raise InputError(f"{self.path}: the output must not be an input, hold one or "
                                 f"sit inside one ({spec}); choose another --output")
        if self.work_dir is not None and is_url(self.work_dir) and \
                _url_inside(self.work_dir, self.path):
            raise ConfigError(f"--work-dir {self.work_dir}: must not be --output or inside it; "
                              f"choose another --work-dir")
        if not self.overwrite:
            foreign = self._foreign_names(self._listing())
            if foreign:
                raise InputError(f"{self.path}: output prefix is not empty ({foreign[0]}); pass "
                                 f"--overwrite to replace it, or choose another --output")

    def staging(self) -> str:
        if self._staging is None:
            self._staging = tempfile.mkdtemp(prefix="gpu-dedup-staging-")
        return self._staging

    def _previous(self) -> list[str]:
        from .io import fs
        try:
            data = json.loads(fs.read_bytes(f"{self.path}/{SUCCESS_NAME}"))
            return [f["name"] for f in data["files"] if isinstance(f.get("name"), str)]
        except InputError:
            return []
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("%s/%s: unreadable manifest (%s); only the files this run writes are "
                        "replaced", self.path, SUCCESS_NAME, _one_line(str(exc)))
            return []

    def publish(self) -> list[str]:
        from .io import fs
        from .io.identity import file_hash
        if self._staging is None or self._published:
            raise DedupError(f"{self.path}: nothing staged to publish; call staging() first")
        staging = self._staging
        try:
            names = _local_files(staging)
            for n in names:
                if n == SUCCESS_NAME or n.startswith(STAGING_PREFIX):
                    raise DedupError(f"{n}: this name is reserved for gpu-dedup's own files")
            listing = self._listing()
            if not self.overwrite:
                foreign = self._foreign_names(listing)
                if foreign:
                    raise _appeared(self.path, "prefix", foreign[0])
            tmp = f"{self.path}/{STAGING_PREFIX}{_host()}-{os.getpid()}-{secrets.token_hex(4)}"
            files = []
            for n in names:
                local = os.path.join(staging, n)
                size, digest = file_hash(local)
                fs.upload(local, f"{tmp}/{n}")
                self._uploaded.append(f"{tmp}/{n}")
                files.append({"name": n, "bytes": size, "xxh3_128": digest})
            previous = self._previous() if self.overwrite else []
            fs.delete(f"{self.path}/{SUCCESS_NAME}")          # incomplete from here on
            for n in sorted(set(previous) - set(names)):
                if n != SUCCESS_NAME and not n.startswith(STAGING_PREFIX) and ".." not in n:
                    fs.delete(f"{self.path}/{n}")
            for n in names:
                fs.copy(f"{tmp}/{n}", f"{self.path}/{n}")
            for u in self._uploaded:
                fs.delete(u)
            self._uploaded = []
            manifest = {"tool": "gpu-dedup", "format": MANIFEST_FORMAT,
                        "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "files": files}
            fs.write_bytes(f"{self.path}/{SUCCESS_NAME}",
                           (json.dumps(manifest, indent=2) + "\n").encode())
            self._published = True
        except BaseException:
            self.abort()
            raise
        shutil.rmtree(staging, ignore_errors=True)
        self._staging = None
        return sorted({n.split("/", 1)[0] for n in names})

    def abort(self) -> None:
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

    def _write_error(self, exc: OSError) -> DedupError:
        return DedupError(f"{self.path}: cannot write the outputs: "
                          f"{_one_line(exc.strerror or str(exc))}")


def output_complete(path: str) -> tuple[bool, str]:
    """Whether the output at ``path`` (a URL or a local folder) is complete:
    its manifest (``_SUCCESS`` on object storage, ``.gpu-dedup-manifest.json``
    locally) exists and every file it lists has the listed size. Returns
    ``(complete, why not)``."""
    from .io import fs
    if not fs.is_url(path):
        ok = os.path.isfile(os.path.join(path, MANIFEST_NAME))
        return ok, "" if ok else f"{MANIFEST_NAME} is missing"
    try:
        data = json.loads(fs.read_bytes(f"{str(path).rstrip('/')}/{SUCCESS_NAME}"))
    except InputError:
        return False, f"{SUCCESS_NAME} is missing"
    for f in data.get("files", []):
        url = f"{str(path).rstrip('/')}/{f['name']}"
        try:
            if fs.size(url) != f["bytes"]:
                return False, f"{f['name']}: size differs from {SUCCESS_NAME}"
        except InputError:
            return False, f"{f['name']}: listed in {SUCCESS_NAME} but missing"
    return True, ""
