"""Arrow's compute functions, without importing ``pyarrow.compute`` at start.

Importing ``pyarrow.compute`` builds a Python function, with its docstring,
for every one of Arrow's several hundred compute functions: about 45 ms, a
sixth of a small run's wall time. The few functions that every run calls
(:func:`cast`, :func:`take`, the normalization steps, :func:`prefixed`,
and :func:`call` by name) go straight to the functions' registry
(``pyarrow._compute``, a few milliseconds to import); :data:`pc` is
``pyarrow.compute`` itself, imported at its first use, for the rest.
``Array.cast`` and ``Array.take`` import ``pyarrow.compute`` too, so code on
the path of every run calls :func:`cast` and :func:`take` instead.

>>> import numpy as np
>>> from gpu_dedup.arrays import arrow
>>> cast(arrow(np.array([7, 42])), pa.string()).to_pylist()
['7', '42']
"""
from __future__ import annotations

import importlib

import pyarrow as pa

try:                                      # the registry, as pyarrow.compute uses it
    from pyarrow._compute import (CastOptions, ReplaceSliceOptions, ReplaceSubstringOptions,
                                  TrimOptions, Utf8NormalizeOptions, call_function)
except ImportError:                       # pragma: no cover - an Arrow without it
    from pyarrow.compute import (CastOptions, ReplaceSliceOptions, ReplaceSubstringOptions,
                                 TrimOptions, Utf8NormalizeOptions, call_function)


class _Lazy:
    """``pyarrow.compute``, imported when an attribute is first asked for."""

    def __getattr__(self, name: str):
        return getattr(importlib.import_module("pyarrow.compute"), name)


#: ``pyarrow.compute``, imported at first use.
pc = _Lazy()


def call(name: str, *args, options=None) -> pa.Array:
    """Arrow compute function ``name`` over the arrays ``args`` with its
    ``options`` object (``pyarrow.compute.<name>(*args, options=options)``)."""
    return call_function(name, list(args), options)


def cast(arr: pa.Array, type: pa.DataType) -> pa.Array:
    """``arr.cast(type)``: a safe cast (it fails where a value would change)."""
    return call_function("cast", [arr], CastOptions.safe(type))


def take(arr: pa.Array, indices: pa.Array) -> pa.Array:
    """``arr.take(indices)``: the values at ``indices``, null where an index is."""
    return call_function("take", [arr, indices])


def nfkc(arr: pa.Array) -> pa.Array:
    """Unicode NFKC normalization of a string array."""
    return call_function("utf8_normalize", [arr], Utf8NormalizeOptions("NFKC"))


def prefixed(prefix: str, arr: pa.Array) -> pa.Array:
    """``prefix`` put before every string of ``arr``."""
    return call_function("utf8_replace_slice", [arr], ReplaceSliceOptions(0, 0, prefix))


def replace_regex(arr: pa.Array, pattern: str, replacement: str) -> pa.Array:
    """Every match of the regular expression ``pattern`` replaced."""
    return call_function("replace_substring_regex", [arr],
                         ReplaceSubstringOptions(pattern, replacement))


def trim(arr: pa.Array, characters: str) -> pa.Array:
    """``characters`` trimmed from both ends of every string."""
    return call_function("utf8_trim", [arr], TrimOptions(characters))
