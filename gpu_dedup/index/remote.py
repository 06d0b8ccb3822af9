"""An index on object storage (``--index s3://...``, ``--against s3://...``).

The index is copied to a local folder for the command (only ``index.json``
when that is all it reads); a command that changes it uploads the files that
are new or changed, then ``index.json`` last, so that the remote index is at
any moment the previous one or the new one, as a local index is.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager

from ..io import fs
from .store import INDEX_JSON, BadIndex


def _files(root: str) -> dict:
    out = {}
    for d, _dirs, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            st = os.stat(p)
            out[os.path.relpath(p, root).replace(os.sep, "/")] = (st.st_size, st.st_mtime_ns)
    return out


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
    cache = tempfile.mkdtemp(prefix="gpu-dedup-index-")
    local = os.path.join(cache, url.rsplit("/", 1)[-1] or "index")   # its name, as a folder
    try:
        listed = fs.listdir(url, quiet=True)
        if create and listed:
            raise BadIndex(f"{url}: already holds objects; choose a new prefix, or add to an "
                           f"index with `gpu-dedup index add`")
        for u in listed:
            rel = u[len(url) + 1:]
            if meta_only and rel != INDEX_JSON:
                continue
            fs.download(u, os.path.join(local, rel))
        before = _files(local) if os.path.isdir(local) else {}
        yield local
        if write:
            after = _files(local)
            changed = [r for r, v in after.items() if r != INDEX_JSON and before.get(r) != v]
            for rel in sorted(changed):
                fs.upload(os.path.join(local, rel), f"{url}/{rel}")
            if INDEX_JSON in after and before.get(INDEX_JSON) != after[INDEX_JSON]:
                fs.upload(os.path.join(local, INDEX_JSON), f"{url}/{INDEX_JSON}")
    finally:
        shutil.rmtree(cache, ignore_errors=True)
