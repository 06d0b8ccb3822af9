"""Plain-text corpora: a directory of ``.txt`` files, one document each.

A document's id is its path relative to the directory given (``a/b.txt``);
its text is the whole file, with invalid UTF-8 replaced. The kept documents
are written back as a directory of the same relative paths, byte for byte.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..arrays import arrow
from ..errors import InputError
from ..paths import contained
from .names import printable, require_regular

TXT_SUFFIXES = (".txt",)


def list_txt(root: str) -> list[str]:
    """The ``.txt`` files under ``root``, relative, sorted, hidden ones skipped."""
    out = []
    for d, dirs, names in os.walk(root):
        dirs[:] = sorted(x for x in dirs if not x.startswith("."))
        for name in sorted(names):
            if name.startswith(".") or not name.lower().endswith(TXT_SUFFIXES):
                continue
            out.append(os.path.relpath(os.path.join(d, name), root))
    return out


@dataclass
class TxtData:
    texts: pa.Array
    ids: pa.Array
    invalid_utf8: int


def read_txt_files(root: str, files: list[str], progress=None) -> TxtData:
    """Read ``files`` (relative to ``root``), one document each."""
    texts = []
    invalid = 0
    n = max(len(files), 1)
    for k, rel in enumerate(files):
        path = os.path.join(root, rel)
        require_regular(path)
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except OSError as exc:
            raise InputError(f"{printable(path)}: cannot read: {exc.strerror or exc}") from exc
        try:
            texts.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            invalid += 1
            texts.append(raw.decode("utf-8", errors="replace"))
        if progress is not None and (k & 1023) == 0:
            progress(k / n)
    ids = arrow([printable(rel.replace(os.sep, "/")) for rel in files], pa.large_string())
    return TxtData(arrow(texts, pa.large_string()), ids, invalid)


def _output(dst_dir: str, rel: str) -> str:
    """``dst_dir/rel`` (its folders made), proven to stay inside ``dst_dir``."""
    out = contained(dst_dir, rel.replace(os.sep, "/"), printable(dst_dir))
    os.makedirs(os.path.dirname(out), exist_ok=True)
    return out


def write_kept_files(root: str, files: list[str], keep: np.ndarray, dst_dir: str,
                     text_of=None) -> int:
    """Write each kept file ``i`` (``keep[i]`` set) to ``dst_dir`` under its
    relative path: a copy of ``root``'s file, byte for byte, or with
    ``text_of``, ``text_of(i)`` as UTF-8. Returns the number written."""
    os.makedirs(dst_dir, exist_ok=True)
    kept = np.flatnonzero(keep).tolist()
    for i in kept:
        out = _output(dst_dir, files[i])
        if text_of is None:
            shutil.copyfile(os.path.join(root, files[i]), out)
        else:
            with open(out, "w", encoding="utf-8", newline="") as f:
                f.write(text_of(i))
    return len(kept)
