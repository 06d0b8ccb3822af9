"""The device memory of the GPU backend: its budget and the shares of it
each stage plans for, CuPy's pool and the peak it reached, the device copy
of the text, and the batches of documents and of matrix rows that fit.

:class:`DeviceArrays` is the base of ``backend_gpu.GpuBackend``; the
simulator runs it with NumPy arrays (``xp=numpy``), the budget then only
deciding how the work is cut.
"""
from __future__ import annotations

import contextlib

import numpy as np

from .arrays import to_host
from .backend_probe import device_summary
from .errors import DeviceError
from .memory import parse_memory

#: Share of the free device memory used when ``gpu_memory`` is not given.
DEFAULT_SHARE = 0.75
#: Budget used by the simulator when ``gpu_memory`` is not given.
SIMULATED_BUDGET = 256 << 20
#: Shares of the budget: the cached text, one streamed text batch, the
#: scratch of the general shingling path, signatures or band keys kept on the
#: device, and the text of one verification round.
TEXT_SHARE = 0.5
BATCH_SHARE = 0.2
SCRATCH_SHARE = 0.2
#: Device bytes of greedy selection per bucket entry (the membership by
#: bucket and by rank, the kept lists, and room for the scored pairs) and
#: per document (state, ``duplicate_of``, similarity, offsets).
SELECT_BYTES_PER_ENTRY = 160
SELECT_BYTES_PER_DOC = 48
MATRIX_SHARE = 0.2
VERIFY_SHARE = 0.2
#: Device bytes per byte of text when building shingle sets (hashes, their
#: sort and its temporaries).
SET_BYTES_PER_BYTE = 64
#: Device bytes per band key when grouping key segments (the keys, positions
#: and segment indices, two sort orders, the sorted copies and the edges).
SEGMENT_BYTES_PER_KEY = 160
#: The groups of a split run of key segments are merged on the device when
#: their results take at most this share of the budget (32 bytes an edge or
#: member: the results, their concatenation and the sort), else on the host.
MERGE_SHARE = 0.5


class DeviceArrays:
    """Device arrays within a memory budget: the bookkeeping and the batching
    that every stage of the GPU backend shares.

    Args:
        gpu_memory: device memory the backend may plan for (bytes or a string
            such as ``"8GiB"``); default 75% of the free memory.
        xp: leave None on a GPU (CuPy). ``numpy`` under Numba's CUDA
            simulator.

    Raises:
        ConfigError: ``gpu_memory`` is not a positive size.
        DeviceError: ``gpu_memory`` exceeds the device's memory.
    """

    def __init__(self, gpu_memory=None, *, xp=None):
        limit = parse_memory(gpu_memory)
        if xp is None:
            import cupy
            self.xp = cupy
            self._simulated = False
            free, total = cupy.cuda.runtime.memGetInfo()
            if limit is not None and limit > total:
                raise DeviceError(f"--gpu-memory {gpu_memory} exceeds the device's "
                                  f"{total / 2 ** 30:.1f} GiB")
            self.budget = limit if limit is not None else int(free * DEFAULT_SHARE)
            self._pool = cupy.get_default_memory_pool()
            self._summary = device_summary()
        else:
            self.xp = xp
            self._simulated = True
            self.budget = limit if limit is not None else SIMULATED_BUDGET
            self._pool = None
            self._summary = "Numba CUDA simulator (host arrays)"
        self._text = None
        self._peak = 0
        self._base = self._pool.used_bytes() if self._pool is not None else 0

    # -- bookkeeping ---------------------------------------------------------
    def release(self) -> None:
        """Drop the device copy of the last text (and the host buffers it
        stands for) and return CuPy's cached blocks to the device."""
        self._text = None
        if self._pool is not None:
            self._pool.free_all_blocks()

    def peak_device_bytes(self) -> int:
        """Most device memory held by CuPy's allocator during this backend's
        calls, beyond what was held when it was created (0 when simulated)."""
        return int(self._peak)

    @contextlib.contextmanager
    def _tracked(self):
        if self._pool is None:
            yield
            return
        import cupy
        pool = self._pool

        def malloc(size):
            mem = pool.malloc(size)
            used = pool.used_bytes() - self._base
            if used > self._peak:
                self._peak = used
            return mem
        with cupy.cuda.using_allocator(malloc):
            yield

    #: ``x`` as a NumPy array.
    to_host = staticmethod(to_host)

    def _dev(self, x):
        return self.xp.ascontiguousarray(self.xp.asarray(x))

    def _resident(self, x) -> bool:
        """Whether a matrix lives on the device (in the simulator, whether it
        would: it fits in its share of the budget)."""
        if self._simulated:
            return x.nbytes <= MATRIX_SHARE * self.budget
        return not isinstance(x, np.ndarray)

    # -- text on the device --------------------------------------------------
    def _cached_text(self, offsets, data):
        """Device copy of the text for these host buffers (kept for the next
        call with the same buffers), or None when it exceeds its share."""
        c = self._text
        if c is not None and c[0] is offsets and c[1] is data:
            return c[2], c[3]
        self._text = None                  # the previous copy goes before a new one comes
        lo, hi = int(offsets[0]), int(offsets[-1])
        if (hi - lo) + 8 * offsets.shape[0] > TEXT_SHARE * self.budget:
            return None
        d_off, d_data = self._upload(offsets, data, lo, hi)
        self._text = (offsets, data, d_off, d_data)
        return d_off, d_data

    def _upload(self, offsets, data, lo, hi):
        """Device copies of ``offsets`` (rebased to 0) and ``data[lo:hi]``."""
        xp = self.xp
        d_off = xp.asarray(np.ascontiguousarray(offsets, dtype=np.int64) - lo)
        if hi <= lo:
            return d_off, xp.zeros(1, dtype=xp.uint8)
        # a device copy; the simulator's arrays are host arrays it may write
        # back to, so a read-only (memory-mapped) buffer is copied for it
        d_data = xp.array(data[lo:hi]) if self._simulated else xp.asarray(data[lo:hi])
        return d_off, d_data

    def _batches(self, offsets, data, docs):
        """``(t0, t1, d_offsets, d_data, d_docs)`` covering ``docs[t0:t1]``:
        all at once from the cached text, else in batches of at most a
        ``BATCH_SHARE`` of the budget (at least one document each)."""
        xp = self.xp
        D = docs.shape[0]
        cached = self._cached_text(offsets, data)
        if cached is not None:
            yield 0, D, cached[0], cached[1], self._dev(docs)
            return
        limit = max(int(BATCH_SHARE * self.budget), 1)
        starts = offsets[docs]
        ends = offsets[docs + 1]
        monotone = D < 2 or bool(np.all(docs[1:] > docs[:-1]))
        cum = None if monotone else np.cumsum(ends - starts)
        t0 = 0
        while t0 < D:
            if monotone:
                # the byte span from the first document's start to the last one's end
                t1 = max(int(np.searchsorted(ends, starts[t0] + limit, side="right")), t0 + 1)
                first, last = int(docs[t0]), int(docs[t1 - 1])
                lo, hi = int(offsets[first]), int(offsets[last + 1])
                d_off, d_data = self._upload(offsets[first:last + 2], data, lo, hi)
                yield t0, t1, d_off, d_data, self._dev(docs[t0:t1] - first)
            else:
                base = cum[t0 - 1] if t0 else 0
                t1 = max(int(np.searchsorted(cum, base + limit, side="right")), t0 + 1)
                sub_off, sub_data = gather_text(offsets, data, docs[t0:t1])
                d_off, d_data = self._upload(sub_off, sub_data, 0, int(sub_off[-1]))
                yield t0, t1, d_off, d_data, xp.arange(t1 - t0, dtype=xp.int64)
            t0 = t1

    def _per_document(self, offsets, data, launch, shape_tail=(), dtype=None):
        """Run a per-document launcher over all documents, batch by batch."""
        n = offsets.shape[0] - 1
        docs = np.arange(n, dtype=np.int64)
        parts = []
        for _t0, _t1, d_off, d_data, _d_docs in self._batches(offsets, data, docs):
            # the batches of consecutive documents carry exactly their offsets
            parts.append(launch(self.xp, d_off, d_data))
        if not parts:
            return launch(self.xp, self.xp.zeros(1, dtype=self.xp.int64),
                          self.xp.zeros(1, dtype=self.xp.uint8))
        return parts[0] if len(parts) == 1 else self.xp.concatenate(parts)

    # -- matrix rows on the device ------------------------------------------
    def _row_batches(self, matrix, row_bytes):
        """Row ranges of ``matrix`` and their device copies, one range when it
        is already on the device."""
        N = matrix.shape[0]
        if self._resident(matrix):
            yield 0, N, matrix
            return
        step = max(int(BATCH_SHARE * self.budget) // max(row_bytes, 1), 1)
        for r0 in range(0, N, step):
            yield r0, min(N, r0 + step), self._dev(matrix[r0:r0 + step])


def gather_text(offsets, data, docs):
    """CSR gather on the host: offsets (from 0) and the concatenated runs
    ``data[offsets[d]:offsets[d + 1]]`` of the rows ``docs`` (text bytes, or
    the values of shingle sets). An empty result holds one zero element."""
    docs = np.asarray(docs, dtype=np.int64)
    starts = offsets[docs]
    lens = offsets[docs + 1] - starts
    sub_off = np.zeros(docs.shape[0] + 1, dtype=np.int64)
    np.cumsum(lens, out=sub_off[1:])
    total = int(sub_off[-1])
    if total == 0:
        return sub_off, np.zeros(1, dtype=data.dtype)
    idx = np.arange(total, dtype=np.int64) + np.repeat(starts - sub_off[:-1], lens)
    return sub_off, data[idx]
