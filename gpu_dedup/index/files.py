"""What an index knows about its own files, and how it checks them.

Every file of a part (``docs.parquet``, each key file under ``keys/``,
``wkeys/`` and ``ids/``) is listed in ``index.json`` with its size and the
XXH3-128 hash of its bytes, recorded when the part is written:
``"files": {"keys/b000-r000.arrow": [size, hash], ...}``. A file larger than
:data:`BLOCK` also lists the hash of each of its blocks of ``BLOCK`` bytes
(``[size, hash, [block hashes]]``), so that a query reading a few row groups
of a large ``docs.parquet`` checks only the blocks it reads.

* When a query opens an index, every listed file must be there with its
  size (:func:`check_present`): a deleted part folder, ``keys/`` folder or
  file stops it, even one the query would not read.
* Every file a query reads is checked against its hash before its bytes are
  used (:func:`read_checked` for a whole file, :class:`BlockCheck` for the
  blocks of a large one).
* A file that is not listed is never read.

Indexes written before files carried sizes and hashes (format 1) are
refused: their files cannot be told from damaged ones, so they are rebuilt.
"""
from __future__ import annotations

import os
import re

import xxhash

from ..errors import DedupError

#: Bytes a block hash covers in a large file.
BLOCK = 32 << 20
_READ = 8 << 20
#: The names a part's files may have, relative to the part folder.
FILE_NAME = re.compile(r"^(docs\.parquet|(keys|wkeys|ids)/b\d{3}-r\d{3}\.arrow)$")
_HEX = re.compile(r"^[0-9a-f]{32}$")


class BadIndex(DedupError):
    """A missing, corrupt or mismatched index (exit status 2)."""


def damaged(path: str, why: str) -> BadIndex:
    return BadIndex(f"{path}: damaged index file ({why}); restore it from a copy or rebuild "
                    f"the index with `gpu-dedup index build`")


def record(path: str) -> list:
    """``[size, hash]`` of the file at ``path`` (and its block hashes when it
    is larger than :data:`BLOCK`): its entry in ``index.json``."""
    whole = xxhash.xxh3_128()
    blocks = []
    block = xxhash.xxh3_128()
    in_block = 0
    size = 0
    buf = bytearray(_READ)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while True:
            n = f.readinto(buf)
            if not n:
                break
            whole.update(view[:n])
            size += n
            at = 0
            while at < n:
                take = min(n - at, BLOCK - in_block)
                block.update(view[at:at + take])
                in_block += take
                at += take
                if in_block == BLOCK:
                    blocks.append(block.hexdigest())
                    block = xxhash.xxh3_128()
                    in_block = 0
    if in_block:
        blocks.append(block.hexdigest())
    entry = [size, whole.hexdigest()]
    if size > BLOCK:
        entry.append(blocks)
    return entry


def records(folder: str) -> dict:
    """The entry of every file under ``folder``, by relative name."""
    out = {}
    for d, _dirs, names in os.walk(folder):
        for n in names:
            p = os.path.join(d, n)
            out[os.path.relpath(p, folder).replace(os.sep, "/")] = record(p)
    return dict(sorted(out.items()))


def check_entry(meta_path: str, part: str, rel, entry) -> None:
    """Refuse a file entry of ``index.json`` that is not ``[size, hash]`` (with
    the right number of block hashes when the file is large)."""
    ok = (isinstance(rel, str) and FILE_NAME.match(rel) is not None
          and isinstance(entry, list) and len(entry) in (2, 3)
          and _count(entry[0]) and isinstance(entry[1], str) and _HEX.match(entry[1]))
    if ok:
        size = entry[0]
        want_blocks = (size + BLOCK - 1) // BLOCK if size > BLOCK else None
        if want_blocks is None:
            ok = len(entry) == 2
        else:
            ok = (len(entry) == 3 and isinstance(entry[2], list)
                  and len(entry[2]) == want_blocks
                  and all(isinstance(h, str) and _HEX.match(h) for h in entry[2]))
    if not ok:
        raise BadIndex(f"{meta_path}: corrupt index file ({part}: the entry of file {rel!r} "
                       f"is not [size, hash])")


def _count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def check_present(root: str, part: str, files: dict) -> None:
    """Every file ``files`` lists in the part folder ``root/part`` is there,
    with its size; otherwise a :class:`BadIndex` naming the first missing
    folder or file."""
    folder = os.path.join(root, part)
    if not os.path.isdir(folder):
        raise BadIndex(f"{folder}: missing part folder (index.json lists it); restore it "
                       f"from a copy or rebuild the index with `gpu-dedup index build`")
    seen: set = set()
    for rel, entry in files.items():
        sub = rel.split("/")[0] if "/" in rel else None
        if sub is not None and sub not in seen:
            if not os.path.isdir(os.path.join(folder, sub)):
                raise BadIndex(f"{os.path.join(folder, sub)}: missing index folder "
                               f"(index.json lists files in it); restore it from a copy or "
                               f"rebuild the index with `gpu-dedup index build`")
            seen.add(sub)
        path = os.path.join(folder, *rel.split("/"))
        try:
            size = os.stat(path).st_size
        except OSError:
            raise BadIndex(f"{path}: missing index file (index.json lists it); restore it "
                           f"from a copy or rebuild the index with `gpu-dedup index build`"
                           ) from None
        if size != entry[0]:
            raise damaged(path, f"{size:,} bytes where index.json lists {entry[0]:,}")


def read_checked(path: str, entry: list) -> bytes:
    """The bytes of the file at ``path``, once they match its entry."""
    try:
        with open(path, "rb") as f:
            data = f.read(entry[0] + 1)
    except OSError as exc:
        raise BadIndex(f"{path}: cannot read index file ({exc.strerror or exc})") from None
    if len(data) != entry[0]:
        raise damaged(path, f"{len(data):,} bytes where index.json lists {entry[0]:,}")
    if xxhash.xxh3_128_hexdigest(data) != entry[1]:
        raise damaged(path, "its bytes differ from the hash index.json lists")
    return data


class BlockCheck:
    """Checks the blocks of one file as they are needed, each once (a file of
    at most :data:`BLOCK` bytes is one block, checked against its hash)."""

    def __init__(self, path: str, entry: list):
        self.path = path
        self.entry = entry
        self.hashes = entry[2] if len(entry) == 3 else [entry[1]]
        self.done: set = set()

    def ranges(self, spans) -> None:
        """Check every block that holds a byte of the ``(start, end)`` spans."""
        size = self.entry[0]
        need = set()
        for a, b in spans:
            a, b = max(0, int(a)), min(size, int(b))
            if b > a:
                need.update(range(a // BLOCK, (b - 1) // BLOCK + 1))
        todo = sorted(need - self.done)
        if not todo:
            return
        try:
            with open(self.path, "rb") as f:
                for k in todo:
                    f.seek(k * BLOCK)
                    want = min(BLOCK, size - k * BLOCK)
                    data = f.read(want)
                    if len(data) != want:
                        raise damaged(self.path, "shorter than index.json lists")
                    if xxhash.xxh3_128_hexdigest(data) != self.hashes[k]:
                        raise damaged(self.path, "its bytes differ from the hash index.json "
                                                 "lists" + (f" (block {k})" if len(self.hashes) > 1
                                                           else ""))
                    self.done.add(k)
        except OSError as exc:
            raise BadIndex(f"{self.path}: cannot read index file ({exc.strerror or exc})"
                           ) from None
