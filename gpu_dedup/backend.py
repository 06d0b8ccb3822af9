"""Backends: where each stage runs.

Owns the :class:`Backend` protocol (every call the engine makes on a
backend), the CPU backend, the choice of a backend for ``--device``, and
:data:`MAX_DOCUMENTS`, the largest corpus whose document indices fit the
packed ``a << 32 | b`` edges of connected components (greedy selection
keeps its pairs as two 64-bit columns and takes any number).

A backend supplies the kernels, the grouping of band keys and the connected
components for one device. The CPU backend uses Numba-compiled kernels
(``kernels.cpu``, ``kernels.buckets``, ``kernels.greedy``) and SciPy; the GPU
backend (``backend_gpu``) is imported only when asked for, so nothing here
imports a GPU package.
"""
from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

from . import kernels as _kernels_pkg  # noqa: F401  (ensures the mapping exists)
from .arrays import unique
from .errors import DeviceError
from .kernels.primitives import BOUND_WORDS
from .stages.components import scipy_components
from .stages.lsh import check_bands

#: Most documents a run with connected components may hold: its candidate
#: edges pack two document indices into one 64-bit word, ``a << 32 | b``, so
#: an index must fit in 32 bits. Greedy selection has no such cap.
MAX_DOCUMENTS = 2 ** 32 - 1


@runtime_checkable
class Backend(Protocol):
    """What the engine calls on a backend.

    Array arguments are host (NumPy) arrays or arrays of the backend's own
    namespace :attr:`xp`; results are arrays of :attr:`xp` unless stated
    otherwise, and :meth:`to_host` brings any of them to NumPy. Text comes as
    ``offsets`` (int64, ``N + 1`` entries) into ``data`` (uint8 UTF-8 bytes):
    document ``i`` is ``data[offsets[i]:offsets[i + 1]]``. Every result is
    bit-identical across backends, except the label values of
    :meth:`components` (the engine relabels them by smallest member).

    A backend holding device memory may also offer ``release()`` (drop what
    it caches between calls) and ``peak_device_bytes()`` (the most device
    memory it held; see :class:`DeviceMemory`). The engine reports
    ``peak_device_bytes()`` when present (``device_peak_bytes``) and never
    calls ``release()``: the GPU backend calls it itself before it falls
    back to the host, and a caller may call it to hand the memory back.

    Attributes:
        name: what ran, as reported (``"cpu"``, ``"gpu"``, ``"cuda-sim"``).
        xp: the array namespace of the backend's results (NumPy or CuPy).
        bounds_pay: whether greedy selection should settle candidate pairs
            by their bound rows (:meth:`bound_rows`) before scoring the
            rest exactly: true where building every document's bound row
            costs less than the shingle sets of the pairs it settles.
    """

    name: str
    xp: Any
    bounds_pay: bool

    def describe(self) -> dict:
        """What runs each stage on this machine, as short strings (at least
        the keys ``device``, ``grouping`` and ``components``)."""
        ...

    def has_shingles(self, offsets, data, word_mode: bool):
        """Bool per document: whether it has at least one shingle (a
        character, or a word when ``word_mode``)."""
        ...

    def text_hash128(self, offsets, data):
        """``N x 2`` uint64: two XXH64 hashes (seeds 0 and 1) of each text."""
        ...

    def codepoint_lengths(self, offsets, data):
        """int64 per document: its length in code points."""
        ...

    def normalize(self, texts, steps):
        """The normalization ``steps`` (``gpu_dedup.stages.normalize``) of an
        Arrow string array, as a ``large_string`` Arrow array on the host."""
        ...

    def exact_representatives(self, fp, active):
        """int64 per row of ``fp`` (``N x 2`` uint64): the first active row
        with the same fingerprint, ``-1`` for inactive rows."""
        ...

    def string_hashes(self, offsets, data, seed: int):
        """uint64 per string: its XXH64 with ``seed``."""
        ...

    def substr_windows(self, uh, unit_off, L: int):
        """``(hashes, start)`` of every window of ``L`` units inside one
        document, from the units' hashes ``uh`` and the CSR ``unit_off`` of
        units over documents (``kernels.substr.window_hashes``)."""
        ...

    def stable_argsort(self, x):
        """A stable ascending argsort (int64)."""
        ...

    def minhash(self, offsets, data, docs, word_mode: bool, n: int, a, b, bits: int,
                sketch: str = "minhash"):
        """``(sig, counts)`` of documents ``docs``: the ``len(docs) x K``
        MinHash signatures (uint32 for ``bits == 32``, else uint64) under the
        affine hashes ``(a, b)`` over ``n``-shingles, and the number of
        shingles hashed per document. ``sketch="oph"``: the one-permutation
        sketch with keys ``a[0], b[0]`` instead (``kernels.hashing``)."""
        ...

    def band_keys(self, sig, bands: int, rows: int):
        """``N x bands`` uint64: the key of rows ``j*rows .. (j+1)*rows - 1``
        of each signature, for each band ``j``."""
        ...

    def bucket_edges(self, keys, active=None):
        """Candidate edges of every band of ``keys`` (``N x B``) over the
        active rows (all when None), packed ``a << 32 | b``, sorted and
        unique: a bucket's members ``m0 < m1 < ...`` give the anchor edges
        ``(m0, mi)`` and the chain edges ``(m(i-1), mi)``."""
        ...

    def segment_bucket_edges(self, keys, docs, seg):
        """Candidate edges of the buckets of several key segments, packed
        ``a << 32 | b``, sorted and unique.

        Args:
            keys: uint64 band keys, concatenated segment by segment.
            docs: int64 document position of each key, ascending inside each
                segment; an empty array means position ``i - seg[j]``.
            seg: int64 segment boundaries, ``segments + 1`` entries: segment
                ``j`` is ``keys[seg[j]:seg[j + 1]]``.

        Returns:
            uint64 edges; within each segment, a bucket (equal keys) with
            members ``m0 < m1 < ... < mk`` gives the anchor edges
            ``(m0, mi)`` and the chain edges ``(m(i-1), mi)``. Equal to
            ``kernels.buckets.segment_bucket_edges``.
        """
        ...

    def segment_buckets(self, keys, docs, seg):
        """The buckets of two or more members of several key segments.

        Arguments as for :meth:`segment_bucket_edges`. Returns ``(off,
        members)``: int64 bucket boundaries and member positions, ascending
        inside a bucket, buckets in order of segment then of first member.
        Equal to ``kernels.buckets.segment_buckets``.
        """
        ...

    def shingle_sets(self, offsets, data, word_mode: bool, n: int, docs):
        """Sorted unique shingle hashes of documents ``docs`` (sorted
        indices): an opaque handle for :meth:`jaccard_sets`, of the form
        ``(docs, set_offsets, values)``."""
        ...

    def jaccard_sets(self, sets, da, db):
        """float64 exact Jaccard of documents ``da[e]`` and ``db[e]``, all of
        them in the handle ``sets`` from :meth:`shingle_sets`."""
        ...

    def bound_rows(self, offsets, data, word_mode: bool, n: int, docs, words: int = BOUND_WORDS):
        """The bound rows of documents ``docs``: a host ``len(docs) x
        words`` uint32 array, row ``i`` that of ``docs[i]``
        (:func:`kernels.primitives.bound_row`: the distinct shingle hashes
        counted by their top bits into ``(words - 1) * 4`` bins, then their
        number)."""
        ...

    def jaccard_rows(self, sets, ia, ib, floor: float = 0.0, other=None):
        """float64 exact Jaccard of rows ``ia[e]`` and ``ib[e]`` of the handle
        ``sets`` (positions in its sorted documents): :meth:`jaccard_sets`
        without looking the documents up. With ``floor`` above 0 only the
        values at or above it need be exact; a pair below it may get any
        value below it (a backend may stop counting early). With a second
        handle ``other``, a row below 0 is row ``~row`` of ``other``."""
        ...

    def jaccard(self, offsets, data, word_mode: bool, n: int, da, db):
        """float64 exact Jaccard of the shingle sets of ``da[e]`` and
        ``db[e]`` (:meth:`shingle_sets` and :meth:`jaccard_sets` in one)."""
        ...

    def signature_agreement(self, sig, ia, ib):
        """float64 share of equal values in signatures ``ia[e]`` and
        ``ib[e]`` (the MinHash estimate of their Jaccard)."""
        ...

    def select(self, bucket_off, members, n: int, score_fn, threshold: float, limit: int,
               accept_all: bool = False, fixed: int = 0, fixed_kept=None, kept_before=None):
        """Greedy selection over buckets of ranks: a
        :class:`gpu_dedup.stages.select.Selection` of host arrays, equal to
        :func:`gpu_dedup.stages.select.greedy_select` (same arguments)
        whatever the backend; its ``where`` says where it ran."""
        ...

    def components(self, n: int, ea, eb):
        """int64 connected-component label of each of ``n`` nodes joined by
        the edges ``(ea[e], eb[e])``, as a host array."""
        ...

    def to_host(self, x):
        """``x`` as a NumPy array (returned as is when it already is one)."""
        ...


@runtime_checkable
class DeviceMemory(Protocol):
    """The optional memory calls of a backend that holds device memory."""

    def release(self) -> None:
        """Drop what the backend caches between calls and return its cached
        device memory."""
        ...

    def peak_device_bytes(self) -> int:
        """Most device memory held during the backend's calls, in bytes."""
        ...


class CpuBackend:
    """NumPy arrays, Numba ``@njit`` kernels, SciPy connected components.

    Implements :class:`Backend`.
    """

    name = "cpu"
    xp = np
    bounds_pay = True

    def __init__(self):
        from .kernels import buckets, cpu
        self._k = cpu
        self._b = buckets

    def describe(self) -> dict:
        from .kernels.threads import threads
        return {"device": "cpu", "threads": threads(),
                "grouping": "hash table per band (Numba)", "components": "scipy.sparse.csgraph"}

    # -- text -------------------------------------------------------------
    def has_shingles(self, offsets, data, word_mode: bool):
        return self._k.has_shingles(offsets, data, word_mode)

    def text_hash128(self, offsets, data):
        return self._k.text_hash128(offsets, data)

    def codepoint_lengths(self, offsets, data):
        return self._k.codepoint_lengths(offsets, data)

    def normalize(self, texts, steps):
        from .stages.normalize import normalize_text
        return normalize_text(texts, steps)

    def exact_representatives(self, fp, active):
        from .stages.exact import exact_representatives
        return exact_representatives(fp, active)

    # -- exact substrings -------------------------------------------------
    def string_hashes(self, offsets, data, seed: int):
        from .kernels import substr
        return substr.string_hashes(offsets, data, seed)

    def substr_windows(self, uh, unit_off, L: int):
        from .kernels import substr
        return substr.window_hashes(np.asarray(uh, np.uint64), np.asarray(unit_off, np.int64),
                                    int(L))

    def stable_argsort(self, x):
        return np.argsort(x, kind="stable")

    # -- signatures -------------------------------------------------------
    def minhash(self, offsets, data, docs, word_mode: bool, n: int, a, b, bits: int,
                sketch: str = "minhash"):
        docs = np.ascontiguousarray(docs, dtype=np.int64)
        dtype = np.uint32 if bits == 32 else np.uint64
        sig = np.empty((docs.size, a.size), dtype=dtype)
        counts = np.empty(docs.size, dtype=np.int64)
        shift = 32 if bits == 32 else 0
        if sketch == "oph":
            self._k.oph_minhash(offsets, data, docs, word_mode, n, a[0], b[0], shift, sig,
                                counts)
        else:
            self._k.minhash(offsets, data, docs, word_mode, n, a, b, shift, sig, counts)
        return sig, counts

    def band_keys(self, sig, bands: int, rows: int):
        check_bands(sig, bands, rows)
        out = np.empty((sig.shape[0], bands), dtype=np.uint64)
        self._k.band_keys(sig, bands, rows, out)
        return out

    def bucket_edges(self, keys, active=None):
        if active is None:
            active = np.ones(keys.shape[0], dtype=np.bool_)
        return self._b.bucket_edges(keys, active)

    def _segments(self, keys, docs, seg):
        """The arguments of the segment kernels, contiguous and checked."""
        keys = np.ascontiguousarray(keys, dtype=np.uint64).reshape(-1)
        docs = np.ascontiguousarray(docs, dtype=np.int64).reshape(-1)
        seg = np.ascontiguousarray(seg, dtype=np.int64).reshape(-1)
        self._b.check_segments(keys, docs, seg)
        return keys, docs, seg

    def segment_bucket_edges(self, keys, docs, seg):
        """Candidate edges of several key segments: ``kernels.buckets.segment_bucket_edges``
        (see :meth:`Backend.segment_bucket_edges`)."""
        return self._b.segment_bucket_edges(*self._segments(keys, docs, seg))

    def segment_buckets(self, keys, docs, seg):
        """Buckets of several key segments: ``kernels.buckets.segment_buckets``
        (see :meth:`Backend.segment_buckets`)."""
        return self._b.segment_buckets(*self._segments(keys, docs, seg))

    # -- verification -----------------------------------------------------
    def shingle_sets(self, offsets, data, word_mode: bool, n: int, docs):
        """Sorted unique base hashes of the documents ``docs`` (sorted indices):
        ``(docs, set_offsets, values)``, an opaque handle for :meth:`jaccard_sets`."""
        docs = np.ascontiguousarray(docs, dtype=np.int64)
        set_off, values = self._k.shingle_sets(offsets, data, docs, word_mode, n)
        return docs, set_off, values

    def bound_rows(self, offsets, data, word_mode: bool, n: int, docs, words: int = BOUND_WORDS):
        """Bound rows: ``kernels.cpu.set_bounds`` (see :meth:`Backend.bound_rows`)."""
        docs = np.ascontiguousarray(docs, dtype=np.int64)
        out = np.empty((docs.size, int(words)), dtype=np.uint32)
        self._k.set_bounds(np.asarray(offsets), np.asarray(data), docs, bool(word_mode),
                           int(n), out)
        return out

    def jaccard_sets(self, sets, da, db):
        """Exact Jaccard of documents ``da[e]`` and ``db[e]``, all in ``sets``."""
        docs = sets[0]
        return self.jaccard_rows(sets, np.searchsorted(docs, da).astype(np.int64),
                                 np.searchsorted(docs, db).astype(np.int64))

    def jaccard_rows(self, sets, ia, ib, floor: float = 0.0, other=None):
        """Exact Jaccard of rows ``ia[e]`` and ``ib[e]`` of ``sets`` (and of
        ``other``; at least where it reaches ``floor``; see
        :meth:`Backend.jaccard_rows`)."""
        _, set_off, values = sets
        _, off2, val2 = (None, set_off, values) if other is None else other
        return self._k.jaccard_edges_between(
            np.ascontiguousarray(set_off, dtype=np.int64), np.ascontiguousarray(values),
            np.ascontiguousarray(off2, dtype=np.int64), np.ascontiguousarray(val2),
            np.asarray(ia, dtype=np.int64), np.asarray(ib, dtype=np.int64), float(floor))

    def jaccard(self, offsets, data, word_mode: bool, n: int, da, db):
        """Exact Jaccard of the shingle sets of documents ``da[e]`` and ``db[e]``."""
        sets = self.shingle_sets(offsets, data, word_mode, n, unique(np.concatenate([da, db])))
        return self.jaccard_sets(sets, da, db)

    def signature_agreement(self, sig, ia, ib):
        return self._k.signature_agreement(sig, ia.astype(np.int64), ib.astype(np.int64))

    # -- clusters ---------------------------------------------------------
    def select(self, bucket_off, members, n: int, score_fn, threshold: float, limit: int,
               accept_all: bool = False, fixed: int = 0, fixed_kept=None, kept_before=None):
        from .stages.select import greedy_select
        return greedy_select(bucket_off, members, n, score_fn, threshold, limit,
                             accept_all=accept_all, fixed=fixed, fixed_kept=fixed_kept,
                             kept_before=kept_before)

    def components(self, n: int, ea, eb):
        """Connected-component label of each of ``n`` nodes (SciPy)."""
        return scipy_components(n, ea, eb)

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
    """The backend for ``device`` and a one-line description of the choice.

    Args:
        device: ``cpu``, ``gpu`` or ``auto`` (a GPU if usable, else the CPU).
        gpu_memory: ``--gpu-memory`` (bytes, a size string, or None); checked
            for every device, so that a mistyped value never passes silently.

    Returns:
        ``(backend, line)``.

    Raises:
        DeviceError: ``gpu`` without a usable GPU, or an unknown ``device``.
        ConfigError: ``gpu_memory`` is not a positive size.
    """
    from .memory import parse_memory
    parse_memory(gpu_memory)             # ConfigError naming --gpu-memory
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
