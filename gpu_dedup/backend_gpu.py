"""GPU backend: CuPy arrays on the device, Numba CUDA kernels, cuDF and cuGraph
where installed.

Owns :class:`GpuBackend` (an implementation of ``backend.Backend``). Its
parts live beside it: the probe of the GPU (``backend_probe``), the device
memory budget and the batching of text and matrices (``backend_device``),
the grouping of band keys by sorting (``backend_grouping``) and connected
components (``backend_components``). None of them imports ``backend``: the
host fallbacks it shares with the CPU backend live in ``stages`` and
``kernels``.

Every GPU package is imported inside functions only, so importing this module
costs nothing on a machine without one.

What runs where (``GpuBackend.describe()`` says it for a given machine):

* text fingerprints, code point counts, shingle presence, ASCII
  normalization, signatures, band keys, shingle sets, exact Jaccard and
  signature agreement: the Numba CUDA kernels of ``kernels/cuda_kernels.py``,
  which call the CPU's per-document functions (``kernels/text.py``,
  ``kernels/hashing.py``, ``kernels/primitives.py``);
* exact grouping: a stable device sort of the fingerprints;
* bucket collisions: a cuDF sort by (key, document) per band when cuDF
  imports, else a stable CuPy sort per band; key segments
  (``segment_bucket_edges``): a cuDF sort by (segment, key, document) when
  cuDF imports, else two stable CuPy sorts; buckets (``segment_buckets``):
  two stable CuPy sorts;
* greedy selection: in rounds on the device (the kernels of
  ``kernels/greedy.py``), on the host when the buckets do not fit the budget;
* connected components: cuGraph when it imports, else label propagation on
  the device (CuPy scatter-min and pointer jumping); the labels come back to
  the host.

Memory: the corpus streams through the device in batches sized from
``gpu_memory`` (``--gpu-memory``; default 75% of the free device memory).
The normalized text is copied to the device once and kept while it fits in
half of that budget; signatures stay on the device until their band keys are
taken. The peak of the memory held by CuPy's allocator is reported.

The same class runs under Numba's CUDA simulator with ``xp=numpy``: the
simulated kernels then work on host arrays, which is how the batching and
streaming logic is tested on machines without a GPU.
"""
from __future__ import annotations

import dataclasses
import logging

import numpy as np

from .arrays import concat_csr, rows_of_two, unique
from .backend_components import components_propagation, cugraph_components
from .backend_device import (BATCH_SHARE, MATRIX_SHARE, MERGE_SHARE, SCRATCH_SHARE,
                             SEGMENT_BYTES_PER_KEY, SELECT_BYTES_PER_DOC,
                             SELECT_BYTES_PER_ENTRY, SET_BYTES_PER_BYTE, VERIFY_SHARE,
                             DeviceArrays, gather_text)
from .backend_grouping import (bucket_edges_frame, bucket_edges_sorted,
                               exact_representatives_sorted, segment_buckets_sorted,
                               segment_edges_frame, segment_edges_sorted)
from .backend_probe import device_summary, probe, simulator_enabled  # noqa: F401  (as before)
from .backend_probe import cuda_errors, one_line, rapids_available
from .errors import DeviceError
from .kernels.primitives import BOUND_WORDS
from .memory import parse_memory  # noqa: F401  (importable from here as before)
from .stages.lsh import check_bands

log = logging.getLogger("gpu_dedup")


class GpuBackend(DeviceArrays):
    """CuPy arrays on the device and the Numba CUDA kernels of
    ``kernels/cuda_kernels.py`` (launched by ``kernels/cuda.py``).

    Args:
        gpu_memory: device memory the backend may plan for (bytes or a string
            such as ``"8GiB"``); default 75% of the free memory.
        xp: leave None on a GPU. ``numpy`` runs the same code under Numba's
            CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``), for tests.

    Example:
        >>> be = GpuBackend(gpu_memory="8GiB")          # doctest: +SKIP
        >>> deduplicate(texts, cfg, backend=be).backend  # doctest: +SKIP
        'gpu'
    """

    name = "gpu"
    #: The device scores a candidate pair exactly for less than it costs to
    #: build every document's shingle set for its bound row.
    bounds_pay = False

    def __init__(self, gpu_memory=None, *, xp=None):
        super().__init__(gpu_memory, xp=xp)
        if self._simulated:
            self.name = "cuda-sim"
        from .kernels import buckets as kbuckets, cuda as kc
        if kc.SIMULATOR != self._simulated:
            raise DeviceError("the GPU backend needs a GPU, or NUMBA_ENABLE_CUDASIM=1 with "
                              "xp=numpy; got one without the other")
        self._k = kc
        self._k_host = kbuckets
        mod = "NumPy (simulated device)" if self._simulated else "CuPy"
        self._grouping = ("cuDF sort by key and document per band"
                          if not self._simulated and rapids_available("cudf")
                          else f"{mod} stable sort per band")
        self._components = ("cuGraph weakly connected components"
                            if not self._simulated and rapids_available("cugraph")
                            else f"label propagation on the device ({mod} scatter-min and "
                                 f"pointer jumping)")

    def describe(self) -> dict:
        mod = "NumPy (simulated device)" if self._simulated else "CuPy"
        return {
            "device": "gpu" if not self._simulated else "cuda-sim",
            "gpu": self._summary,
            "memory_budget_bytes": int(self.budget),
            "signatures": (f"Numba CUDA: block of {self._k.THREADS} threads per document, "
                           f"{self._k.CHUNK}-shingle chunks in shared memory (character "
                           f"shingles of well-formed UTF-8); thread per document otherwise"),
            "band_keys": "Numba CUDA, thread per (document, band)",
            "grouping": self._grouping,
            "verification": f"Numba CUDA shingle sets, sorted per document with {mod}; "
                            "Numba CUDA thread per edge",
            "components": self._components,
            # each stage of a run, and where it runs (doctor and report.json)
            "stages": {
                "normalization": "device for ASCII documents (lower, punct, digits, ws; NFKC "
                                 "is the identity there); host for documents with other code "
                                 "points (report.json counts them)",
                "exact grouping": f"device: fingerprints, and a stable sort of them with "
                                  f"{'NumPy (simulated device)' if self._simulated else 'CuPy'}",
                "signatures": "device",
                "band keys": "device",
                "bucketing": f"device ({self._grouping}); key segments beyond a batch are "
                             f"grouped in turn and merged on the device, on the host when the "
                             f"merge would take over {MERGE_SHARE:.0%} of the budget",
                "selection": f"device: the greedy rule in rounds (Numba CUDA, a thread per "
                             f"undecided document and per open bucket; {mod} sorts); on the "
                             f"host when the buckets do not fit the budget (report.json "
                             f"says where it ran)",
                "verification": "device",
                "components": self._components,
                "substr": "device: unit and window hashes and sorts; host: unit cutting, "
                          "collision checks, spans",
            },
        }

    # -- text -----------------------------------------------------------------
    def has_shingles(self, offsets, data, word_mode: bool):
        with self._tracked():
            return self._per_document(offsets, data,
                                      lambda xp, o, d: self._k.has_shingles(xp, o, d, word_mode))

    def text_hash128(self, offsets, data):
        with self._tracked():
            return self._per_document(offsets, data, self._k.text_hash128)

    def codepoint_lengths(self, offsets, data):
        with self._tracked():
            return self._per_document(offsets, data, self._k.codepoint_lengths)

    # -- exact duplicates -----------------------------------------------------
    def exact_representatives(self, fp, active):
        """The first active document with each fingerprint, by a device sort."""
        with self._tracked():
            return exact_representatives_sorted(self.xp, self._dev(np.asarray(fp, np.uint64)),
                                                self._dev(np.asarray(active, bool)))

    # -- normalization --------------------------------------------------------
    def normalize(self, texts, steps):
        """The normalization ``steps`` of an Arrow string array (see
        :meth:`normalize_counted`)."""
        return self.normalize_counted(texts, steps)[0]

    def normalize_counted(self, texts, steps):
        """``(normalized, on_host)``: ASCII documents normalized on the device
        (``kernels.text.ascii_normalize_doc``), the ``on_host`` others on the
        host (:func:`gpu_dedup.stages.normalize.normalize_text`).
        Bit-identical to the CPU backend's."""
        import pyarrow as pa

        from .kernels.text import STEP_CODES
        from .stages.normalize import normalize_text, text_buffers
        steps = tuple(steps)
        if not steps or len(texts) == 0:
            return normalize_text(texts, steps), 0
        xp = self.xp
        with self._tracked():
            off, data = text_buffers(texts)
            off = np.ascontiguousarray(off, np.int64)
            n = off.shape[0] - 1
            codes = self._dev(np.array([STEP_CODES[s] for s in steps], np.int64))
            d_off = self._dev(off)
            d_data = self._dev(np.asarray(data))
            out, lengths = self._k.ascii_normalize(xp, d_off, d_data, codes)
            lens = np.array(self.to_host(lengths), np.int64)
            other = np.flatnonzero(lens < 0)
            host = None
            if other.size:
                host = normalize_text(texts.take(pa.array(other)), steps)
                hoff, hdata = text_buffers(host)
                lens[other] = np.diff(np.asarray(hoff, np.int64))
            new_off = np.zeros(n + 1, np.int64)
            np.cumsum(lens, out=new_off[1:])
            dst = xp.empty(max(int(new_off[-1]), 1), dtype=xp.uint8)
            ascii_docs = np.flatnonzero(lens >= 0) if not other.size else \
                np.setdiff1d(np.arange(n), other)
            self._k.copy_ranges(xp, out, self._dev(off[ascii_docs]), self._dev(lens[ascii_docs]),
                                dst, self._dev(new_off[ascii_docs]))
            if other.size:
                hoff = np.asarray(hoff, np.int64)
                self._k.copy_ranges(xp, self._dev(np.asarray(hdata)), self._dev(hoff[:-1]),
                                    self._dev(lens[other]), dst, self._dev(new_off[other]))
            body = np.asarray(self.to_host(dst))[:int(new_off[-1])]
        return (pa.LargeStringArray.from_buffers(n, pa.py_buffer(new_off),
                                                 pa.py_buffer(body.tobytes())), int(other.size))

    # -- exact substrings -----------------------------------------------------
    def string_hashes(self, offsets, data, seed: int):
        with self._tracked():
            return self._k.string_hashes(self.xp, self._dev(np.asarray(offsets, np.int64)),
                                         self._dev(np.asarray(data)), seed)

    def substr_windows(self, uh, unit_off, L: int):
        """One device thread per window; the hashes equal the host's rolling
        ones (the same polynomial, mod 2**64)."""
        with self._tracked():
            return self._k.substr_windows(self.xp, self._dev(np.asarray(uh, np.uint64)),
                                          np.asarray(unit_off, np.int64), int(L))

    def stable_argsort(self, x):
        with self._tracked():
            return self.xp.argsort(self._dev(x), kind="stable").astype(self.xp.int64)

    # -- signatures -----------------------------------------------------------
    def minhash(self, offsets, data, docs, word_mode: bool, n: int, a, b, bits: int,
                sketch: str = "minhash"):
        """``(sig, counts)`` of ``docs``: on the device when the matrix fits in
        its share of the budget, else on the host (filled batch by batch)."""
        xp = self.xp
        with self._tracked():
            docs = np.ascontiguousarray(self.to_host(docs), dtype=np.int64)
            D, K = docs.shape[0], int(a.shape[0])
            itemsize = 4 if bits == 32 else 8
            da = self._dev(np.asarray(a, dtype=np.uint64))
            db = self._dev(np.asarray(b, dtype=np.uint64))
            scratch = max(int(SCRATCH_SHARE * self.budget), 1)
            on_device = D * K * itemsize <= MATRIX_SHARE * self.budget
            sig = counts = None
            for t0, t1, d_off, d_data, d_docs in self._batches(offsets, data, docs):
                s, c = self._k.minhash(xp, d_off, d_data, d_docs, word_mode, n, da, db, bits,
                                       scratch, sketch)
                if t0 == 0 and t1 == D:
                    sig, counts = (s, c) if on_device else (self.to_host(s), self.to_host(c))
                    break
                if sig is None:
                    mod = xp if on_device else np
                    sig = mod.empty((D, K), dtype=np.uint32 if bits == 32 else np.uint64)
                    counts = mod.empty(D, dtype=np.int64)
                sig[t0:t1] = s if on_device else self.to_host(s)
                counts[t0:t1] = c if on_device else self.to_host(c)
            if sig is None:
                sig, counts = self._k.minhash(xp, xp.zeros(1, dtype=xp.int64),
                                              xp.zeros(1, dtype=xp.uint8),
                                              xp.zeros(0, dtype=xp.int64), word_mode, n, da,
                                              db, bits, scratch, sketch)
            return sig, counts

    def band_keys(self, sig, bands: int, rows: int):
        check_bands(sig, bands, rows)
        xp = self.xp
        with self._tracked():
            N = sig.shape[0]
            on_device = N * bands * 8 <= MATRIX_SHARE * self.budget
            out = None
            for r0, r1, part in self._row_batches(sig, sig.shape[1] * sig.dtype.itemsize
                                                  + bands * 8):
                keys = self._k.band_keys(xp, part, bands, rows)
                if r0 == 0 and r1 == N:
                    return keys if on_device else self.to_host(keys)
                if out is None:
                    out = (xp if on_device else np).empty((N, bands), dtype=np.uint64)
                out[r0:r1] = keys if on_device else self.to_host(keys)
            if out is None:
                out = xp.empty((0, bands), dtype=xp.uint64)
            return out

    # -- bucket collisions ----------------------------------------------------
    def bucket_edges(self, keys, active=None):
        xp = self.xp
        with self._tracked():
            if active is None:
                active = np.ones(keys.shape[0], dtype=np.bool_)
            if self._grouping.startswith("cuDF"):
                import cudf
                return bucket_edges_frame(cudf, xp, keys, active)
            return bucket_edges_sorted(xp, keys, active)

    def segment_bucket_edges(self, keys, docs, seg):
        """Candidate edges of several key segments, packed ``a << 32 | b``,
        sorted and unique; bit-identical to ``kernels.buckets.segment_bucket_edges``.

        The keys go to the device in groups of whole segments of at most a
        ``BATCH_SHARE`` of the budget (at least one segment each); each group
        is sorted by (segment, key) with cuDF when it imports, else CuPy.

        Args:
            keys: uint64 band keys concatenated segment by segment (host or
                device).
            docs: int64 document position of each key, ascending inside each
                segment; empty means position ``i - seg[j]``.
            seg: int64 segment boundaries, segments + 1 entries.

        Returns:
            uint64 edges: on the device, unless the groups' edges were too
            many to merge there (see ``MERGE_SHARE``).

        Raises:
            ValueError: the arrays do not describe segments of keys.
        """
        xp = self.xp
        if self._grouping.startswith("cuDF"):
            import cudf

            def group(k, d, s):
                return segment_edges_frame(cudf, xp, k, d, s)
        else:
            def group(k, d, s):
                return segment_edges_sorted(xp, k, d, s)
        parts = self._segment_groups(keys, docs, seg, group)
        if len(parts) == 1 and parts[0][0]:
            return parts[0][1]
        if not parts:
            return xp.zeros(0, dtype=xp.uint64)
        if self._merge_fits(sum(int(p.shape[0]) for _, p in parts)):
            with self._tracked():
                return xp.unique(xp.concatenate([p for _, p in parts]))
        return unique(np.concatenate([self.to_host(p) for _, p in parts])).astype(
            np.uint64, copy=False)

    def _merge_fits(self, items: int) -> bool:
        return 32 * items <= MERGE_SHARE * self.budget

    def segment_buckets(self, keys, docs, seg):
        """The buckets of two or more members of several key segments,
        ``(off, members)``; equal to ``kernels.buckets.segment_buckets``. Batched
        as :meth:`segment_bucket_edges`, and merged where it merges."""
        xp = self.xp

        def group(k, d, s):
            return segment_buckets_sorted(xp, k, d, s)
        parts = self._segment_groups(keys, docs, seg, group)
        if len(parts) == 1 and parts[0][0]:
            return parts[0][1]
        if self._merge_fits(sum(int(o.shape[0]) + int(m.shape[0]) for _, (o, m) in parts)):
            with self._tracked():
                return concat_csr([p for _, p in parts], xp=self.xp)
        return concat_csr([(self.to_host(off), self.to_host(mem)) for _, (off, mem) in parts])

    def _segment_groups(self, keys, docs, seg, group) -> list:
        """``group(keys, docs, seg)`` over groups of whole segments of at most
        a ``BATCH_SHARE`` of the budget (at least one segment each):
        ``[(whole, result)]``, ``whole`` when one group held every segment."""
        seg = np.ascontiguousarray(self.to_host(seg), dtype=np.int64).reshape(-1)
        keys = keys.reshape(-1) if hasattr(keys, "reshape") else np.asarray(keys).reshape(-1)
        docs = docs.reshape(-1) if hasattr(docs, "reshape") else np.asarray(docs).reshape(-1)
        self._k_host.check_segments(keys, docs, seg)
        with self._tracked():
            g = seg.shape[0] - 1
            limit = max(int(BATCH_SHARE * self.budget) // SEGMENT_BYTES_PER_KEY, 1)
            parts = []
            j0 = 0
            while j0 < g:
                j1 = int(np.searchsorted(seg, seg[j0] + limit, side="right")) - 1
                j1 = min(max(j1, j0 + 1), g)
                lo, hi = int(seg[j0]), int(seg[j1])
                part_docs = docs[lo:hi] if docs.shape[0] else docs
                out = group(self._dev(keys[lo:hi]), self._dev(part_docs), seg[j0:j1 + 1] - lo)
                parts.append((j0 == 0 and j1 == g, out))
                j0 = j1
            return parts

    # -- verification ---------------------------------------------------------
    def _set_rounds(self, offsets, data, word_mode: bool, n: int, docs, limit: int):
        """``(t0, t1, set_offsets, values)`` on the device: the shingle sets
        of ``docs[t0:t1]``, in rounds of documents whose text and its sets
        fit ``limit`` bytes (at least one round, one document at least)."""
        xp = self.xp
        D = docs.shape[0]
        lens = offsets[docs + 1] - offsets[docs]
        scratch = max(int(SCRATCH_SHARE * self.budget), 1)
        per_round = max(limit // SET_BYTES_PER_BYTE, 1)
        cached = self._cached_text(offsets, data)
        cum = np.cumsum(lens + 1)
        t0 = 0
        first = True
        while t0 < D or first:
            first = False
            base = cum[t0 - 1] if t0 else 0
            t1 = max(int(np.searchsorted(cum, base + per_round, side="right")), t0 + 1) \
                if D else 0
            if cached is not None:
                d_off, d_data = cached
                d_docs = self._dev(docs[t0:t1])
            else:
                sub_off, sub_data = gather_text(offsets, data, docs[t0:t1])
                d_off, d_data = self._upload(sub_off, sub_data, 0, int(sub_off[-1]))
                d_docs = xp.arange(t1 - t0, dtype=xp.int64)
            set_off, values = self._k.shingle_sets(xp, d_off, d_data, d_docs, word_mode, n,
                                                   scratch)
            yield t0, t1, set_off, values
            t0 = t1

    def shingle_sets(self, offsets, data, word_mode: bool, n: int, docs):
        """Sorted unique base hashes of the documents ``docs`` (sorted indices):
        ``(docs, set_offsets, values)``, a handle for :meth:`jaccard_sets`.

        Built in rounds of documents whose text fits the verification share;
        kept on the device when the values fit in their share, else on the host.
        """
        xp = self.xp
        with self._tracked():
            docs = np.ascontiguousarray(self.to_host(docs), dtype=np.int64)
            D = docs.shape[0]
            lens = offsets[docs + 1] - offsets[docs]
            resident = 8 * int(lens.sum() + D) <= MATRIX_SHARE * self.budget
            parts = [(set_off, values) if resident
                     else (self.to_host(set_off), self.to_host(values))
                     for _, _, set_off, values in self._set_rounds(
                         offsets, data, word_mode, n, docs, int(VERIFY_SHARE * self.budget))]
            if len(parts) == 1:
                set_off, values = parts[0]
            else:
                mod = xp if resident else np
                sizes = mod.concatenate([p[0][1:] - p[0][:-1] for p in parts])
                set_off = mod.zeros(D + 1, dtype=np.int64)
                mod.cumsum(sizes, out=set_off[1:])
                values = mod.concatenate([p[1] for p in parts])
            return docs, set_off, values

    def bound_rows(self, offsets, data, word_mode: bool, n: int, docs, words: int = BOUND_WORDS):
        """The bound rows of the documents ``docs`` (host ``len(docs) x
        words`` uint32): their shingle sets built on the device a round
        at a time and counted into bins there (``kernels.cuda.set_bound_rows``)."""
        docs = np.ascontiguousarray(self.to_host(docs), dtype=np.int64)
        out = np.empty((docs.shape[0], int(words)), dtype=np.uint32)
        with self._tracked():
            for t0, t1, set_off, values in self._set_rounds(
                    offsets, data, word_mode, n, docs, int(VERIFY_SHARE * self.budget)):
                out[t0:t1] = self.to_host(self._k.set_bound_rows(self.xp, set_off, values,
                                                                  int(words)))
                del set_off, values
        return out

    def jaccard_sets(self, sets, da, db):
        """Exact Jaccard of documents ``da[e]`` and ``db[e]``, all in ``sets``."""
        docs = sets[0]
        ia = np.searchsorted(docs, np.asarray(self.to_host(da))).astype(np.int64)
        ib = np.searchsorted(docs, np.asarray(self.to_host(db))).astype(np.int64)
        return self.jaccard_rows(sets, ia, ib)

    def jaccard_rows(self, sets, ia, ib, floor: float = 0.0, other=None):
        """Exact Jaccard of rows ``ia[e]`` and ``ib[e]`` of ``sets`` (positions
        in its sorted documents; a row below 0 is row ``~row`` of ``other``);
        exact everywhere, whatever ``floor``."""
        if other is not None:
            if self._joins_on_device(sets, other):
                sets, ia, ib = self._joined(sets, other, self.to_host(ia), self.to_host(ib))
            else:
                sets, ia, ib = rows_of_two(sets, other, self.to_host(ia), self.to_host(ib),
                                           self.to_host)
        xp = self.xp
        _, set_off, values = sets
        ia = np.asarray(self.to_host(ia), dtype=np.int64)
        ib = np.asarray(self.to_host(ib), dtype=np.int64)
        with self._tracked():
            if self._resident(values):
                return self._k.jaccard_edges(xp, self._dev(set_off), values, self._dev(ia),
                                             self._dev(ib))
            # sets on the host: copy the sets each round of edges needs
            E = ia.shape[0]
            out = np.empty(E, dtype=np.float64)
            sizes = (set_off[ia + 1] - set_off[ia]) + (set_off[ib + 1] - set_off[ib]) + 2
            ends = np.cumsum(sizes)
            limit = max(int(VERIFY_SHARE * self.budget) // 16, 1)
            e0 = 0
            while e0 < E:
                base = ends[e0 - 1] if e0 else 0
                e1 = max(int(np.searchsorted(ends, base + limit, side="right")), e0 + 1)
                rows, inv = unique(np.concatenate([ia[e0:e1], ib[e0:e1]]),
                                   return_inverse=True)
                inv = inv.reshape(-1).astype(np.int64)
                sub_off, sub_values = gather_text(set_off, values, rows)
                m = e1 - e0
                j = self._k.jaccard_edges(xp, self._dev(sub_off), self._dev(sub_values),
                                          self._dev(inv[:m]), self._dev(inv[m:]))
                out[e0:e1] = self.to_host(j)
                e0 = e1
            return xp.asarray(out)

    def _joins_on_device(self, sets, other) -> bool:
        """Whether two handles both live on the device and fit it twice over
        (their copy end to end beside them)."""
        size = sum(int(h[1].nbytes) + int(h[2].nbytes) for h in (sets, other))
        return (self._resident(sets[2]) and self._resident(other[2])
                and 2 * size <= MATRIX_SHARE * self.budget)

    def _joined(self, sets, other, ia, ib):
        """One device CSR of two handles on the device, ``other``'s rows
        after those of ``sets``, and the pairs' rows in it (row ``~r`` of
        ``other`` becomes row ``len(sets) + ~r``): no copy through the host."""
        xp = self.xp
        with self._tracked():
            so, sv = self._dev(sets[1]), sets[2]
            oo, ov = self._dev(other[1]), other[2]
            n = int(so.shape[0]) - 1
            off = xp.concatenate([so, oo[1:] - oo[0] + so[-1]])
            values = xp.concatenate([sv, ov])
        ia = np.where(ia >= 0, ia, n + ~ia).astype(np.int64)
        ib = np.where(ib >= 0, ib, n + ~ib).astype(np.int64)
        return (None, off, values), ia, ib

    def jaccard(self, offsets, data, word_mode: bool, n: int, da, db):
        """Exact Jaccard of the shingle sets of documents ``da[e]`` and ``db[e]``."""
        da = np.asarray(self.to_host(da), dtype=np.int64)
        db = np.asarray(self.to_host(db), dtype=np.int64)
        sets = self.shingle_sets(offsets, data, word_mode, n, unique(np.concatenate([da, db])))
        return self.jaccard_sets(sets, da, db)

    def signature_agreement(self, sig, ia, ib):
        xp = self.xp
        with self._tracked():
            ia = np.asarray(self.to_host(ia), dtype=np.int64)
            ib = np.asarray(self.to_host(ib), dtype=np.int64)
            if self._resident(sig):
                return self._k.signature_agreement(xp, sig, self._dev(ia), self._dev(ib))
            rows, inv = unique(np.concatenate([ia, ib]), return_inverse=True)
            inv = inv.reshape(-1).astype(np.int64)
            m = ia.shape[0]
            return self._k.signature_agreement(xp, self._dev(sig[rows]), self._dev(inv[:m]),
                                               self._dev(inv[m:]))

    # -- clusters -------------------------------------------------------------
    def select(self, bucket_off, members, n: int, score_fn, threshold: float, limit: int,
               accept_all: bool = False, fixed: int = 0, fixed_kept=None, kept_before=None):
        """Greedy selection in rounds on the device
        (:func:`gpu_dedup.stages.select.greedy_rounds`), equal to the CPU's;
        on the host when the buckets and their first round of scores would
        not fit in the budget. Only the kept mask, ``duplicate_of``, the
        similarities and the similar pairs come back; ``score_fn`` gets the
        pairs to score on the host."""
        from .stages.select import greedy_rounds, greedy_select
        entries = int(np.asarray(bucket_off)[-1] - np.asarray(bucket_off)[0])
        need = entries * SELECT_BYTES_PER_ENTRY + int(n) * SELECT_BYTES_PER_DOC
        if need > self.budget:
            sel = greedy_select(bucket_off, members, n, score_fn, threshold, limit,
                                accept_all=accept_all, fixed=fixed,
                                fixed_kept=fixed_kept, kept_before=kept_before)
            sel.where = (f"host: {entries:,} bucket entries need about {need >> 20:,} MiB, "
                         f"over the device budget of {self.budget >> 20:,} MiB")
            return sel
        with self._tracked():
            sel = greedy_rounds(self.xp, self._k.greedy_kernels(self.xp), self._dev(bucket_off),
                                self._dev(members), n, score_fn, threshold, limit,
                                accept_all=accept_all, fixed=fixed, room=self.budget - need,
                                fixed_kept=None if fixed_kept is None else self._dev(fixed_kept),
                                kept_before=None if kept_before is None else
                                self._dev(kept_before))
            if sel is None:
                self.release()
                sel = greedy_select(bucket_off, members, n, score_fn, threshold, limit,
                                    accept_all=accept_all, fixed=fixed,
                                    fixed_kept=fixed_kept, kept_before=kept_before)
                sel.where = ("host: the first round of scores would not fit in the device "
                             f"budget of {self.budget >> 20:,} MiB")
                return sel
            h = self.to_host
            return dataclasses.replace(sel, kept=h(sel.kept), duplicate_of=h(sel.duplicate_of),
                                       similarity=h(sel.similarity), pairs=h(sel.pairs),
                                       pair_scores=h(sel.pair_scores), where="device")

    def components(self, n: int, ea, eb):
        """Connected-component label of each of ``n`` nodes (labels may differ
        from the CPU's; the engine relabels clusters by their smallest member):
        cuGraph when it imports, else label propagation on the device."""
        if self._components.startswith("cuGraph") and int(ea.shape[0]):
            try:
                with self._tracked():
                    return cugraph_components(n, np.asarray(self.to_host(ea), np.int64),
                                               np.asarray(self.to_host(eb), np.int64))
            except cuda_errors() + (ValueError, TypeError) as exc:  # cuGraph/cuDF refused
                log.warning("cuGraph components failed (%s); using label propagation",
                            one_line(exc))
        with self._tracked():
            return np.asarray(self.to_host(components_propagation(
                self.xp, int(n), self._dev(ea), self._dev(eb))), np.int64)
