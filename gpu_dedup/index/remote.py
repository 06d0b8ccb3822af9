"""An index on object storage (``--index s3://...``, ``--against s3://...``).

The index is copied to a local folder for the command (only ``index.json``
when that is all it reads); a command that changes it uploads the files that
are new or changed, then ``index.json`` last, so that the remote index is at
any moment the previous one or the new one, as a local index is. The copy
is checked as a local index is: every file against the size and hash
``index.json`` lists.

Writers: object storage has no ``flock``, and pyarrow's filesystems offer no
conditional write (S3's ``If-None-Match``/``If-Match``) that could make a
lock object or a compare-and-swap of ``index.json``. So:

* writers of one remote index on one machine hold a machine-local lock named
  after its URL (:func:`gpu_dedup.index.lock.writer_lock` on a folder under
  the temporary directory) from before they download it until their
  ``index.json`` is uploaded: they run one after the other;
* writers on different machines are not serialized. Each one checks that
  the remote ``index.json`` is still the one it downloaded before it uploads
  anything, and again before it uploads ``index.json``; if it changed, it
  stops with exit status 2 and uploads nothing more. A window remains
  between that last check and the upload (two writers that pass it at the
  same moment: the last ``index.json`` wins, and the other's part is not
  listed). Run the writers of a remote index from one machine, or one after
  the other.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager, nullcontext

import xxhash

from ..io import fs
from ..paths import contained
from .lock import LOCK_NAME, writer_lock
from .store import INDEX_JSON, BadIndex


def _files(root: str) -> dict:
    out = {}
    for d, _dirs, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            st = os.stat(p)
            out[os.path.relpath(p, root).replace(os.sep, "/")] = (st.st_size, st.st_mtime_ns)
    out.pop(LOCK_NAME, None)                 # a local lock, never uploaded
    return out


def _machine_lock(url: str):
    """The machine-local writer lock of the remote index ``url``."""
    folder = os.path.join(tempfile.gettempdir(), "gpu-dedup-index-locks",
                          xxhash.xxh3_128_hexdigest(url.encode("utf-8")))
    os.makedirs(folder, exist_ok=True)
    return writer_lock(folder)


def _remote_meta(url: str) -> bytes | None:
    u = f"{url}/{INDEX_JSON}"
    return fs.read_bytes(u) if fs.exists(u) else None


@contextmanager
def local_index(path: str, *, write: bool = False, create: bool = False,
                meta_only: bool = False):
    """A local path for the index at ``path`` (itself when it is local).

    Args:
        write: upload what changed when the block ends without an error.
        create: the index must not exist yet (the block creates it).
        meta_only: fetch only ``index.json``.
    """
    if not fs.is_url(path):
        yield path
        return
    url = str(path).rstrip("/")
    with _machine_lock(url) if write else nullcontext():
        cache = tempfile.mkdtemp(prefix="gpu-dedup-index-")
        local = os.path.join(cache, url.rsplit("/", 1)[-1] or "index")   # its name, as a folder
        try:
            listed = fs.listdir(url, quiet=True)
            if create and listed:
                raise BadIndex(f"{fs.public_url(url)}: already holds objects; choose a new "
                               f"prefix, or add to an index with `gpu-dedup index add`")
            for u in listed:
                rel = u[len(url) + 1:]
                if meta_only and rel != INDEX_JSON:
                    continue
                fs.download(u, contained(local, rel, fs.public_url(u)))
            before = _files(local) if os.path.isdir(local) else {}
            meta = os.path.join(local, INDEX_JSON)
            seen = None
            if os.path.exists(meta):
                with open(meta, "rb") as f:
                    seen = f.read()
            yield local
            if write:
                _upload(url, local, before, seen, create)
        finally:
            shutil.rmtree(cache, ignore_errors=True)


def _upload(url: str, local: str, before: dict, seen: bytes | None, create: bool) -> None:
    after = _files(local)
    changed = [r for r, v in after.items() if r != INDEX_JSON and before.get(r) != v]
    if not changed and not (INDEX_JSON in after and before.get(INDEX_JSON) != after[INDEX_JSON]):
        return

    def unchanged() -> None:
        now = fs.listdir(url, quiet=True) if create else _remote_meta(url)
        if (create and now) or (not create and now != seen):
            raise BadIndex(f"{fs.public_url(url)}: the index changed while this command ran "
                           f"(another writer); nothing more was uploaded: run it again")
    unchanged()
    for rel in sorted(changed):
        fs.upload(os.path.join(local, rel), f"{url}/{rel}")
    if INDEX_JSON in after and before.get(INDEX_JSON) != after[INDEX_JSON]:
        if not create:
            unchanged()
        fs.upload(os.path.join(local, INDEX_JSON), f"{url}/{INDEX_JSON}")
