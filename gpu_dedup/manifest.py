"""What an output holds besides the outputs, and the rules every output follows.

Shared by local folders and object storage (:mod:`gpu_dedup.output` has the
two implementations):

* the tool's own names in an output: the manifest ``_SUCCESS``, the list
  ``_PUBLISHING``, the lock file and the staging folders or prefixes
  (``.gpu-dedup-staging-<host>-<pid>-<random>``: the host and process that
  own one, so that a run can tell one left by a process that is gone);
* the manifest's schema. ``_SUCCESS``, written last when an output is
  published, is a JSON object::

    {"tool": "gpu-dedup", "format": 1, "written": "2025-01-31T12:00:00+0000",
     "files": [{"name": "data/a.jsonl", "bytes": 1234, "xxh3_128": "9f0c..."}, ...]}

  ``files`` lists every file of the output at any depth by its relative name
  (``/``-separated), never a folder. ``_PUBLISHING`` has the same schema; a
  publish writes it before it removes or moves anything and deletes it after
  ``_SUCCESS``: it lists every file that may be found in the output while the
  publish is under way (the earlier output's files it removes and the new
  ones, so a name may appear twice, with two hashes). A publish that is
  killed leaves ``_PUBLISHING`` and no ``_SUCCESS``, so the next run still
  knows which files are the tool's;
* :func:`removable`, the one rule that decides which files an
  ``--overwrite`` removes: every file found must be listed by name, size and
  hash, or nothing is removed at all;
* :func:`complete`, the test of a complete output;
* :class:`Output`, the base of both implementations: the check, the publish
  and the order of its steps.
"""
from __future__ import annotations

import errno
import json
import os
import re
import socket
import time
from typing import Callable, Iterable

from .errors import DedupError, InputError
from .paths import plain_relative

#: Written last: the output is complete and these are its files.
MANIFEST_NAME = "_SUCCESS"
#: Written first, deleted last: the files a publish under way may leave.
PENDING_NAME = "_PUBLISHING"
#: Prefix of the staging folders (local) and prefixes (object storage) inside the output.
STAGING_PREFIX = ".gpu-dedup-staging-"
#: The lock file taken while publishing a local output.
LOCK_NAME = ".gpu-dedup.lock"
#: The manifest of gpu-dedup versions that listed folders, without hashes.
LEGACY_MANIFEST = ".gpu-dedup-manifest.json"
MANIFEST_FORMAT = 1
TOOL = "gpu-dedup"

_STAGING_RE = re.compile(re.escape(STAGING_PREFIX) + r"(?P<host>.+)-(?P<pid>[0-9]+)-[0-9a-f]+")
OWN_FILES = (LOCK_NAME, MANIFEST_NAME, PENDING_NAME)


def record(name: str, size: int, digest: str) -> dict:
    """One file of a manifest."""
    return {"name": name, "bytes": int(size), "xxh3_128": digest}


def dump(files: Iterable[dict]) -> bytes:
    """The bytes of a manifest listing ``files`` (records, as :func:`record` makes)."""
    doc = {"tool": TOOL, "format": MANIFEST_FORMAT,
           "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "files": list(files)}
    return (json.dumps(doc, indent=2) + "\n").encode()


def parse(raw: bytes, where: str) -> list[dict]:
    """The file records of a manifest's bytes.

    Raises:
        InputError: naming ``where``, when the bytes are not a gpu-dedup
            manifest, or a record's name is not a plain relative file name.
    """
    try:
        doc = json.loads(raw)
        ok = isinstance(doc, dict) and doc.get("tool") == TOOL and isinstance(doc["files"], list)
        files = doc["files"] if ok else []
    except (ValueError, KeyError) as exc:
        raise InputError(f"{where}: not a gpu-dedup manifest ({one_line(exc)}); "
                         f"--overwrite never deletes it: move it away or choose another "
                         f"--output") from exc
    if not ok:
        raise InputError(f"{where}: not a gpu-dedup manifest; --overwrite never deletes it: "
                         f"move it away or choose another --output")
    for f in files:
        if not (isinstance(f, dict) and isinstance(f.get("name"), str)
                and isinstance(f.get("bytes"), int) and isinstance(f.get("xxh3_128"), str)):
            raise InputError(f"{where}: a file record lacks its name, bytes or xxh3_128")
        plain_relative(f["name"], where)
    return files


def removable(present: dict[str, int], listed: list[dict], digest: Callable[[str], str | None],
              where: str) -> list[str]:
    """The files ``--overwrite`` removes: all of ``present``, or none.

    Args:
        present: every file found in the output, relative name -> size, the
            tool's own files (manifest, pending list, lock, staging) left out.
        listed: the records of ``_SUCCESS`` and ``_PUBLISHING`` (either may be
            missing: an output without them lists nothing).
        digest: the XXH3-128 hex digest of a present file, or None when it is
            not a regular file (a link, say); asked only for files whose name
            and size match a record.
        where: the output, as the user named it, for messages.

    Returns:
        The names of ``present``, sorted.

    Raises:
        InputError: naming the first file (in name order) that no record
            lists, or whose size or hash matches no record of its name: it was
            not written by gpu-dedup, or was changed since. Nothing is removed.
    """
    sizes: dict[str, set[int]] = {}
    hashes: dict[str, set[str]] = {}
    for f in listed:
        sizes.setdefault(f["name"], set()).add(f["bytes"])
        hashes.setdefault(f["name"], set()).add(f["xxh3_128"])
    names = sorted(present)
    for n in names:                              # cheap checks first, then the hashes
        if n not in sizes:
            raise InputError(f"{where}/{n}: not written by gpu-dedup (no {MANIFEST_NAME} "
                             f"lists it); --overwrite never deletes it: move it away or "
                             f"choose another --output")
        if present[n] not in sizes[n]:
            raise _changed(where, n)
    for n in names:
        if digest(n) not in hashes[n]:
            raise _changed(where, n)
    return names


def _changed(where: str, name: str) -> InputError:
    return InputError(f"{where}/{name}: changed since gpu-dedup wrote it (its size or XXH3-128 "
                      f"hash differs from {MANIFEST_NAME}); --overwrite never deletes it: move "
                      f"it away or choose another --output")


def parents(names: Iterable[str]) -> list[str]:
    """Every folder the files ``names`` lie in (``a/b`` and ``a`` for ``a/b/c``),
    deepest first: the only folders a publish may remove, once they are empty."""
    out = set()
    for n in names:
        parts = n.split("/")[:-1]
        for i in range(len(parts), 0, -1):
            out.add("/".join(parts[:i]))
    return sorted(out, key=lambda d: (-d.count("/"), d))


def complete(read: Callable[[str], bytes | None], size: Callable[[str], int | None],
             where: str) -> tuple[bool, str]:
    """Whether the output at ``where`` is complete: ``_SUCCESS`` exists and
    every file it lists exists with the listed size.

    Args:
        read: the bytes of a file of the output by name, None when missing.
        size: the size of a regular file of the output by name, None when
            missing or not a regular file.

    Returns:
        ``(complete, why not)``.
    """
    raw = read(MANIFEST_NAME)
    if raw is None:
        why = " (a publish was interrupted)" if read(PENDING_NAME) is not None else ""
        return False, f"{MANIFEST_NAME} is missing{why}"
    try:
        files = parse(raw, f"{where}/{MANIFEST_NAME}")
    except InputError as exc:
        return False, str(exc)
    for f in files:
        got = size(f["name"])
        if got is None:
            return False, f"{f['name']}: listed in {MANIFEST_NAME} but missing"
        if got != f["bytes"]:
            return False, f"{f['name']}: {got} bytes, {MANIFEST_NAME} lists {f['bytes']}"
    return True, ""


# -- the tool's names -----------------------------------------------------------
def host() -> str:
    """This host's name, as it appears in staging names."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname()) or "localhost"


def alive(pid: int) -> bool:
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


def staging_owner(name: str) -> tuple[str, int] | None:
    """``(host, pid)`` of a staging name, or None for any other name."""
    m = _STAGING_RE.fullmatch(name)
    return (m.group("host"), int(m.group("pid"))) if m else None


def dead_here(name: str) -> bool:
    """Whether ``name`` is a staging name of a process of this host that is gone."""
    owner = staging_owner(name)
    return (owner is not None and owner[0] == host() and owner[1] != os.getpid()
            and not alive(owner[1]))


def appeared(path: str, what: str, name: str) -> InputError:
    return InputError(f"{path}: output {what} is no longer empty ({name} appeared while this "
                      f"run was working); nothing was written; pass --overwrite or choose "
                      f"another --output")


def one_line(text) -> str:
    return " ".join(str(text).split())


def staged_files(root: str) -> list[dict]:
    """The records (name, size, hash) of every file below the local folder ``root``."""
    from .io.identity import file_hash
    out = []
    for d, _dirs, names in os.walk(root):
        for n in names:
            rel = os.path.relpath(os.path.join(d, n), root).replace(os.sep, "/")
            if rel.split("/", 1)[0] in OWN_FILES + (LEGACY_MANIFEST,) or \
                    staging_owner(rel.split("/", 1)[0]) is not None:
                raise DedupError(f"{os.path.join(root, rel)}: this name is reserved for "
                                 f"gpu-dedup's own files; write the outputs under another name")
            out.append(record(rel, *file_hash(os.path.join(d, n))))
    return sorted(out, key=lambda r: r["name"])


class Output:
    """The output of one run: what local folders and object storage share.

    Use it as a context manager: leaving the block with an exception removes
    what this run staged or created (:meth:`abort`), and an :class:`OSError`
    (``ENOSPC``, ``EACCES`` ...) becomes a one-line :class:`DedupError`.
    Leaving it normally without :meth:`publish` also discards the staged files.

    Args:
        path: the output (``--output``); it need not exist.
        inputs: input files, directories and raw input specs (globs and the
            like); only the ones that exist are compared with the output.
        overwrite: replace the earlier gpu-dedup output found there instead
            of refusing a non-empty output.
        work_dir: the work directory (``--work-dir``), if one was given.
    """

    #: How messages call the output.
    kind = "directory"

    def __init__(self, path: str, *, inputs=(), overwrite: bool = False,
                 work_dir: str | None = None):
        self.inputs = [os.fspath(s) if isinstance(s, os.PathLike) else str(s) for s in inputs]
        self.overwrite = bool(overwrite)
        self._staging: str | None = None
        self._published = False
        self._digests: dict[str, tuple] = {}     # name -> (signature, digest) already hashed

    # -- what an implementation provides ------------------------------------
    def _check_places(self) -> None:
        """Refuse an output or work directory that is, holds or sits in an input."""
        raise NotImplementedError

    def _exists(self) -> bool:
        raise NotImplementedError

    def _clean_stale(self) -> None:
        """Remove staging left by runs that are gone."""
        raise NotImplementedError

    def _scan(self) -> tuple[dict[str, tuple[int, object]], list[str]]:
        """The files of the output, name -> (size, signature), the tool's own
        files left out, and any other entries (empty folders)."""
        raise NotImplementedError

    def _read(self, name: str) -> bytes | None:
        raise NotImplementedError

    def _hash(self, name: str) -> str | None:
        """The XXH3-128 digest of a file of the output; None if not a regular file."""
        raise NotImplementedError

    def staging(self) -> str:
        """A local folder to write the outputs in, then :meth:`publish`."""
        raise NotImplementedError

    def abort(self) -> None:
        """Remove what this run staged or created; harmless when repeated."""
        raise NotImplementedError

    # The publish's steps, in the order :meth:`_publish` calls them.
    def _upload(self, new: list[dict]) -> None:
        """Bring the staged files next to their place (nothing: they are there)."""

    def _begin(self) -> None:
        """Take the output's lock, where it has one."""

    def _open_trash(self) -> None:
        """Get ready to put back what the publish changes, where it can."""

    def _put(self, name: str, data: bytes) -> None:
        """Write the tool's file ``name`` (the manifest or the pending list)."""
        raise NotImplementedError

    def _drop_manifest(self) -> None:
        raise NotImplementedError

    def _remove_old(self, doomed: list[str], fresh: set[str]) -> None:
        """Remove the earlier output's files (``fresh``: the names about to be rewritten)."""
        raise NotImplementedError

    def _place(self, name: str) -> None:
        """Put one staged file in place."""
        raise NotImplementedError

    def _drop_pending(self) -> None:
        raise NotImplementedError

    def _rollback(self) -> None:
        """Undo the steps since :meth:`_open_trash`, where it can."""

    def _finish(self, doomed: list[str]) -> None:
        """Tidy up after a publish: staging, emptied folders of removed files."""
        raise NotImplementedError

    def _end(self) -> None:
        """Release the lock :meth:`_begin` took."""

    # -- the rule ---------------------------------------------------------------
    def _listed(self) -> list[dict]:
        """The records of ``_SUCCESS`` and ``_PUBLISHING``, whichever exist."""
        files = []
        for name in (MANIFEST_NAME, PENDING_NAME):
            raw = self._read(name)
            if raw is not None:
                files += parse(raw, f"{self.path}/{name}")
        return files

    def _verify(self, late: bool = False) -> tuple[list[str], list[dict]]:
        """What this run may remove: ``(names, their records)``.

        Without ``overwrite`` the output must hold nothing but the tool's own
        files; with it, every file must be one the manifests list
        (:func:`removable`). ``late``: the check just before publishing.
        """
        files, others = self._scan()
        listed = self._listed()
        if not self.overwrite:
            found = sorted(files) + others
            if found and late:
                raise appeared(self.path, self.kind, found[0])
            if found:
                raise InputError(f"{self.path}: output {self.kind} is not empty ({found[0]}); "
                                 f"pass --overwrite to replace an earlier gpu-dedup output in "
                                 f"it, or choose another --output")
            return [], []
        if LEGACY_MANIFEST in files:
            raise InputError(f"{self.path}/{LEGACY_MANIFEST}: an output of an earlier gpu-dedup "
                             f"version, whose files cannot be told from a user's; remove it "
                             f"yourself or choose another --output")

        def digest(name: str) -> str | None:
            sig = files[name][1]
            hit = self._digests.get(name)
            if hit is not None and hit[0] == sig:
                return hit[1]
            d = self._hash(name)
            self._digests[name] = (sig, d)
            return d
        names = removable({n: s for n, (s, _sig) in files.items()}, listed, digest, self.path)
        keep = set(names)
        return names, [r for r in listed if r["name"] in keep]

    def check(self) -> None:
        """Refuse an unusable output or work directory, before any work.

        Staging left by runs that are gone is removed first. Without
        ``overwrite`` the output must hold nothing but the tool's own files;
        with it, nothing but files of an earlier output, unchanged.

        Raises:
            InputError: the output is, holds or sits inside an existing input;
                it exists and is not a directory; it holds a file this run may
                not remove (named).
            ConfigError: the work directory is the output or inside it, or it
                is, holds or sits inside an existing input.
        """
        self._check_places()
        try:
            if self._exists():
                self._clean_stale()
                self._verify()
        except OSError as exc:                # an unreadable folder inside, say
            raise DedupError(f"{exc.filename or self.path}: cannot check the output: "
                             f"{one_line(exc.strerror or exc)}") from exc

    # -- the publish --------------------------------------------------------------
    def publish(self) -> list[str]:
        """Put the staged files in place, the manifest last.

        The output is checked again (for a local folder, under an exclusive
        lock): what :meth:`check` refuses is refused here, and nothing is
        changed. Then, in this order: ``_PUBLISHING`` lists the earlier
        output's files and the new ones; the earlier ``_SUCCESS`` is removed;
        the earlier files are removed; the new files are put in place;
        ``_SUCCESS`` is written; ``_PUBLISHING`` is removed; the folders the
        earlier files lived in are removed if they are now empty. On failure
        everything staged or created by this run is removed (and a local
        output is put back as it was).

        Returns:
            The top-level names of the files written (the manifest not included), sorted.

        Raises:
            InputError: the output holds what :meth:`check` refuses (it
                appeared while this run was working); it is left untouched.
            DedupError: :meth:`staging` was not called, the staging folder
                holds a reserved name, or writing failed.
        """
        if self._staging is None or self._published:
            raise DedupError(f"{self.path}: nothing staged to publish; call staging() first")
        try:
            return self._publish()
        except OSError as exc:
            self.abort()
            raise self._write_error(exc) from exc
        except BaseException:
            self.abort()
            raise

    def _publish(self) -> list[str]:
        new = staged_files(self._staging)
        self._upload(new)
        self._begin()
        try:
            self._clean_stale()
            doomed, old = self._verify(late=True)
            self._open_trash()
            try:
                self._put(PENDING_NAME, dump(old + new))
                self._drop_manifest()
                fresh = {r["name"] for r in new}
                self._remove_old(doomed, fresh)
                for r in new:
                    self._place(r["name"])
                self._put(MANIFEST_NAME, dump(new))
                self._drop_pending()
            except BaseException:
                self._rollback()
                raise
            self._published = True
            self._finish(doomed)
        finally:
            self._end()
        return sorted({r["name"].split("/", 1)[0] for r in new})

    def _write_error(self, exc: OSError) -> DedupError:
        reason = exc.strerror or str(exc) or errno.errorcode.get(exc.errno, "error")
        return DedupError(f"{self.path}: cannot write the outputs: {one_line(reason)}")

    def __enter__(self) -> Output:
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if not self._published or exc is not None:
            self.abort()
        if isinstance(exc, OSError):
            raise self._write_error(exc) from exc
        return False
