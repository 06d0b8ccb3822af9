"""The one way a path derived from input data becomes a path on disk.

Names that come from inside the data (a ``datasets`` folder's
``state.json``, a text folder's file list, an input's relative name mirrored
under ``data/``) are never joined to a folder directly: :func:`contained`
joins them and proves the result stays inside that folder, or refuses.
"""
from __future__ import annotations

import os

from .errors import InputError


def plain_relative(name: str, what: str) -> str:
    """``name`` if it is a plain relative name (``a/b.arrow``): not empty, not
    absolute, no ``..`` or ``.`` part, no backslash or NUL. Otherwise an
    :class:`InputError` naming ``what``."""
    parts = name.split("/") if isinstance(name, str) else []
    if (not isinstance(name, str) or not name or "\\" in name or "\x00" in name
            or os.path.isabs(name) or name.startswith("/")
            or any(p in ("", ".", "..") for p in parts)):
        raise InputError(f"{what}: {name!r} is not a plain relative file name inside the folder")
    return name


def contained(root: str, name: str, what: str) -> str:
    """``root/name``, proven to stay inside ``root`` (symbolic links in the
    existing part of the path resolved); otherwise an :class:`InputError`
    naming ``what``."""
    plain_relative(name, what)
    path = os.path.join(root, name)
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    if real != real_root and not real.startswith(real_root.rstrip(os.sep) + os.sep):
        raise InputError(f"{what}: {name!r} leads outside {root}")
    return path
