"""Backends: where each stage runs.

A backend supplies the kernels, the grouping of band keys and the connected
components for one device. The CPU backend uses Numba-compiled kernels and
SciPy; the GPU backend (``backend_gpu``) is imported only when asked for, so
nothing here imports a GPU package.
"""
from __future__ import annotations

import numpy as np

from . import kernels as _kernels_pkg  # noqa: F401  (ensures the mapping exists)
from .arrays import unique
from .errors import DeviceError


class CpuBackend:
    """NumPy arrays, Numba ``@njit`` kernels, SciPy connected components."""

    name = "cpu"
    xp = np

    def __init__(self):
        from .kernels import cpu
        self._k = cpu

    def describe(self) -> dict:
        import numba
        return {"device": "cpu", "threads": int(numba.get_num_threads()),
                "grouping": "hash table per band (Numba)", "components": "scipy.sparse.csgraph"}

    # -- text -------------------------------------------------------------
    def has_shingles(self, offsets, data, word_mode: bool):
        return self._k.has_shingles(offsets, data, word_mode)

    def text_hash128(self, offsets, data):
        return self._k.text_hash128(offsets, data)

    def codepoint_lengths(self, offsets, data):
        return self._k.codepoint_lengths(offsets, data)

    # -- signatures -------------------------------------------------------
    def minhash(self, offsets, data, docs, word_mode: bool, n: int, a, b, bits: int):
        docs = np.ascontiguousarray(docs, dtype=np.int64)
        dtype = np.uint32 if bits == 32 else np.uint64
        sig = np.empty((docs.size, a.size), dtype=dtype)
        counts = np.empty(docs.size, dtype=np.int64)
        self._k.minhash(offsets, data, docs, word_mode, n, a, b, 32 if bits == 32 else 0,
                        sig, counts)
        return sig, counts

    def band_keys(self, sig, bands: int, rows: int):
        out = np.empty((sig.shape[0], bands), dtype=np.uint64)
        self._k.band_keys(sig, bands, rows, out)
        return out

    def bucket_edges(self, keys, active=None):
        if active is None:
            active = np.ones(keys.shape[0], dtype=np.bool_)
        return self._k.bucket_edges(keys, active)

    # -- verification -----------------------------------------------------
    def shingle_sets(self, offsets, data, word_mode: bool, n: int, docs):
        """Sorted unique base hashes of the documents ``docs`` (sorted indices):
        ``(docs, set_offsets, values)``, an opaque handle for :meth:`jaccard_sets`."""
        docs = np.ascontiguousarray(docs, dtype=np.int64)
        set_off, values = self._k.shingle_sets(offsets, data, docs, word_mode, n)
        return docs, set_off, values

    def jaccard_sets(self, sets, da, db):
        """Exact Jaccard of documents ``da[e]`` and ``db[e]``, all in ``sets``."""
        docs, set_off, values = sets
        ia = np.searchsorted(docs, da).astype(np.int64)
        ib = np.searchsorted(docs, db).astype(np.int64)
        return self._k.jaccard_edges(set_off, values, ia, ib)

    def jaccard(self, offsets, data, word_mode: bool, n: int, da, db):
        """Exact Jaccard of the shingle sets of documents ``da[e]`` and ``db[e]``."""
        sets = self.shingle_sets(offsets, data, word_mode, n, unique(np.concatenate([da, db])))
        return self.jaccard_sets(sets, da, db)

    def signature_agreement(self, sig, ia, ib):
        return self._k.signature_agreement(sig, ia.astype(np.int64), ib.astype(np.int64))

    # -- clusters ---------------------------------------------------------
    def components(self, n: int, ea, eb):
        """Connected-component label of each of ``n`` nodes."""
        from scipy.sparse import coo_matrix
        from scipy.sparse.csgraph import connected_components
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        g = coo_matrix((np.ones(ea.size, dtype=np.int8), (ea, eb)), shape=(n, n)).tocsr()
        _, labels = connected_components(g, directed=True, connection="weak")
        return labels.astype(np.int64)

    def to_host(self, x):
        return x


def gpu_available() -> tuple[bool, str]:
    """Whether a usable GPU is present, and if not, what is missing."""
    try:
        from . import backend_gpu
    except ImportError as exc:  # pragma: no cover - depends on installation
        return False, f"GPU backend unavailable ({exc})"
    return backend_gpu.probe()


def get_backend(device: str = "cpu", gpu_memory=None):
    """The backend for ``device`` (``cpu``, ``gpu`` or ``auto``) and a one-line
    description of the choice. ``gpu`` raises :class:`DeviceError` when no GPU
    is usable."""
    if device == "cpu":
        return CpuBackend(), "device: cpu"
    if device not in ("gpu", "auto"):
        raise DeviceError(f"--device must be cpu, gpu or auto, got {device!r}")
    ok, why = gpu_available()
    if ok:
        from . import backend_gpu
        be = backend_gpu.GpuBackend(gpu_memory=gpu_memory)
        return be, f"device: gpu ({why})"
    if device == "gpu":
        raise DeviceError(f"--device gpu: no usable GPU: {why}; use --device cpu or auto")
    return CpuBackend(), f"device: auto chose cpu ({why})"
