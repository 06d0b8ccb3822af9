"""Unique ids: the one rule that names a repeated id, and its message.

Of the ids that occur more than once, the one whose first occurrence comes
first is named, at its second occurrence: for ``a b b a`` that is ``a``, at
position 3, first at 0. Every reader of records applies it (the in-memory
corpus, data frames, the engine's per-partition check, whose smallest
``(first, second)`` over the partitions is the same pair), so a repeated id
is reported the same way whichever path reads it.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from .compute import pc
from .arrays import unique
from .errors import InputError

#: What the command line says to do about repeated ids.
GENERATE_HINT = "ids must be unique, or pass --id-field none to generate them"


def _codes(keys) -> np.ndarray:
    """One integer per id, equal exactly where the ids are equal."""
    if isinstance(keys, (pa.Array, pa.ChunkedArray)):
        if isinstance(keys, pa.ChunkedArray):
            keys = keys.combine_chunks()
        enc = pc.dictionary_encode(keys, null_encoding="encode")
        return enc.indices.to_numpy(zero_copy_only=False)
    keys = np.asarray(keys)
    if keys.ndim == 2:                  # fingerprints: one row per id
        return np.unique(keys, axis=0, return_inverse=True)[1].reshape(-1)
    return unique(keys, return_inverse=True)[1]


def first_duplicate(keys) -> tuple[int, int] | None:
    """``(first, second)``: the positions of the first two occurrences of
    the repeated id that occurs first, or None when every id is distinct.

    ``keys`` is an Arrow array of ids (strings or integers), a 1-D NumPy
    array of them, or a 2-D NumPy array with one fingerprint row per id.
    """
    n = len(keys)
    if n < 2:
        return None
    if isinstance(keys, (pa.Array, pa.ChunkedArray)) and not keys.null_count \
            and pc.count_distinct(keys).as_py() == n:
        return None
    codes = _codes(keys)
    order = np.argsort(codes, kind="stable")
    s = codes[order]
    same = s[1:] == s[:-1]                    # sorted position k + 1 repeats k
    if not same.any():
        return None
    second = same.copy()                      # ... and k is its id's first occurrence
    second[1:] &= ~same[:-1]
    k = np.flatnonzero(second)
    firsts = order[k]
    j = int(np.argmin(firsts))
    return int(firsts[j]), int(order[k[j] + 1])


def duplicate_id_error(name, at: str, first_at: str,
                       hint: str | None = GENERATE_HINT) -> InputError:
    """The error for id ``name`` repeated at ``at`` (a place such as
    ``FILE:LINE``) and first seen at ``first_at``; ``hint`` ends the line
    (None: no hint)."""
    tail = f"; {hint}" if hint else ""
    return InputError(f"{at}: duplicate id {name!r} (first at {first_at}){tail}")


__all__ = ["GENERATE_HINT", "first_duplicate", "duplicate_id_error"]
