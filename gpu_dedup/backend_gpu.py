"""GPU backend: CuPy arrays on the device, Numba CUDA kernels, cuDF and cuGraph
where installed.

Owns :class:`GpuBackend` (an implementation of ``backend.Backend``), the probe
of the GPU, ``--gpu-memory`` parsing and the array code that groups band keys
into candidate edges over NumPy or CuPy. It does not import ``backend``: the
host fallbacks it shares with the CPU backend live in ``stages.components``
and ``kernels.cpu``.

Every GPU package is imported inside functions only, so importing this module
costs nothing on a machine without one.

What runs where (``GpuBackend.describe()`` says it for a given machine):

* text fingerprints, code point counts, shingle presence, signatures, band
  keys, shingle sets, exact Jaccard and signature agreement: the Numba CUDA
  kernels of ``kernels/cuda.py``, which call the CPU's hash functions;
* bucket collisions: cuDF ``groupby`` when cuDF imports, else a stable CuPy
  sort per band; key segments (``segment_bucket_edges``): a cuDF sort by
  (segment, key, document) when cuDF imports, else two stable CuPy sorts;
* connected components: cuGraph when it imports, else SciPy on the host. The
  engine hands over accepted edges on the host, and SciPy's linear-time
  labelling of a graph that size costs less than copying it to the device
  and back; cuGraph only pays off where cuDF is already holding the data.

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

import contextlib
import dataclasses
import logging
import os

import numpy as np

from .arrays import concat_csr, unique
from .errors import DeviceError
from .memory import parse_memory  # noqa: F401  (re-exported)
from .stages.lsh import take_buckets

log = logging.getLogger("gpu_dedup")

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

# -- probing -------------------------------------------------------------------

_PROBE: tuple[bool, str] | None = None


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def simulator_enabled() -> bool:
    """Whether ``NUMBA_ENABLE_CUDASIM`` asks for Numba's CUDA simulator."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0").strip() not in ("", "0")


def probe() -> tuple[bool, str]:
    """``(usable, description)`` of the GPU, without raising; cached.

    Usable means: CuPy imports and sees a device through a working driver,
    Numba's CUDA target is available, and a small kernel that calls the
    shared hash function gives the expected value. The description names the
    device, or says what is missing.
    """
    global _PROBE
    if _PROBE is None:
        _PROBE = _probe()
    return _PROBE


def _probe() -> tuple[bool, str]:
    if simulator_enabled():
        return False, ("NUMBA_ENABLE_CUDASIM is set: Numba's CUDA simulator cannot run the GPU "
                       "backend")
    try:
        import cupy
    except Exception as exc:  # ImportError, or a broken CUDA install
        return False, (f"CuPy is not installed or does not import ({_one_line(exc)}); install "
                       f"gpu-dedup[gpu-cu12] or gpu-dedup[gpu-cu13]")
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return False, f"no usable CUDA driver or device ({_one_line(exc)})"
    if count < 1:
        return False, "no CUDA device"
    try:
        from numba import cuda
        if not cuda.is_available():
            return False, "Numba's CUDA target cannot use the driver; install numba-cuda"
    except Exception as exc:
        return False, f"numba-cuda does not import ({_one_line(exc)}); install numba-cuda"
    try:
        _smoke_test()
    except Exception as exc:
        return False, f"a test kernel failed ({_one_line(exc)})"
    return True, device_summary()


def _smoke_test() -> None:
    """Run the text fingerprint kernel on one string and check it."""
    import cupy

    from . import reference
    from .kernels import cuda as kc
    text = "gpu-dedup checks its kernels".encode()
    off = cupy.asarray(np.array([0, len(text)], dtype=np.int64))
    data = cupy.asarray(np.frombuffer(text, dtype=np.uint8))
    got = kc.text_hash128(cupy, off, data).get()
    want = [reference.xxh64(text, 0), reference.xxh64(text, 1)]
    if got[0].tolist() != want:
        raise RuntimeError("the CUDA XXH64 differs from the reference")


def device_summary() -> str:
    """``"NVIDIA H200, 139.8 GiB, CUDA runtime 13.0, driver 13.0"`` for device 0."""
    import cupy
    rt = cupy.cuda.runtime
    dev = cupy.cuda.Device()
    props = rt.getDeviceProperties(dev.id)
    name = props["name"]
    name = name.decode() if isinstance(name, bytes) else str(name)
    total = props["totalGlobalMem"] / 2 ** 30

    def ver(v):
        return f"{v // 1000}.{(v % 1000) // 10}"
    return (f"{name}, {total:.1f} GiB, CUDA runtime {ver(rt.runtimeGetVersion())}, "
            f"driver {ver(rt.driverGetVersion())}")


def rapids_available(module: str) -> bool:
    """Whether ``cudf`` or ``cugraph`` imports (not cached: the import is)."""
    try:
        __import__(module)
    except Exception:
        return False
    return True


# -- bucket collisions, as array code over NumPy or CuPy ----------------------------

def _band_edges(xp, k, m, s=None):
    """Anchor and chain edges of keys ``k`` and documents ``m`` sorted by
    (segment, key), documents ascending inside each bucket.

    Args:
        xp: the array module (NumPy or CuPy).
        k: uint64 keys, sorted within each segment.
        m: int64 documents, in the same order.
        s: segment of each key (sorted), or None when all lie in one segment
            (one band).

    Returns:
        uint64 packed edges ``a << 32 | b``, neither sorted nor unique: for a
        bucket ``m0 < m1 < ...``, ``(m0, mi)`` and those ``(m(i-1), mi)``
        that are not also anchor edges.
    """
    start = xp.ones(m.shape[0], dtype=xp.bool_)
    start[1:] = k[1:] != k[:-1]
    if s is not None:
        start[1:] |= s[1:] != s[:-1]
    anchor = m[start][xp.cumsum(start) - 1]
    sel = ~start
    prev = xp.empty_like(m)
    prev[1:] = m[:-1]
    prev[:1] = -1
    chain = sel & (prev != anchor)
    u64 = xp.uint64
    return xp.concatenate([(anchor[sel].astype(u64) << u64(32)) | m[sel].astype(u64),
                           (prev[chain].astype(u64) << u64(32)) | m[chain].astype(u64)])


def bucket_edges_sorted(xp, keys, active):
    """Candidate edges of every band of ``keys`` (N x B), packed ``a << 32 | b``,
    sorted and unique, from a stable sort per band. Equal to
    ``kernels.buckets.bucket_edges``: a bucket's members in input order
    ``m0 < m1 < ...`` give the anchor edges ``(m0, mi)`` and the chain edges
    ``(m(i-1), mi)``."""
    idx = xp.flatnonzero(xp.asarray(active)).astype(xp.int64)
    out = []
    if idx.shape[0] > 1:
        for j in range(keys.shape[1]):
            col = xp.asarray(keys[:, j])[idx]
            order = xp.argsort(col, kind="stable")
            out.append(_band_edges(xp, col[order], idx[order]))
    if not out:
        return xp.zeros(0, dtype=xp.uint64)
    return xp.unique(xp.concatenate(out))


def bucket_edges_frame(frames, xp, keys, active):
    """As :func:`bucket_edges_sorted`, with a DataFrame sort by (key, document)
    per band: ``frames`` is cuDF on a GPU (pandas runs the same code on the host)."""
    idx = xp.flatnonzero(xp.asarray(active)).astype(xp.int64)
    out = []
    if idx.shape[0] > 1:
        for j in range(keys.shape[1]):
            col = xp.asarray(keys[:, j])[idx]
            df = frames.DataFrame({"key": col, "doc": idx}).sort_values(["key", "doc"])
            out.append(_band_edges(xp, xp.asarray(df["key"].values, dtype=xp.uint64),
                                   xp.asarray(df["doc"].values, dtype=xp.int64)))
    if not out:
        return xp.zeros(0, dtype=xp.uint64)
    return xp.unique(xp.concatenate(out))


def _segment_layout(xp, keys, docs, seg):
    """``(k, d, sid)`` on ``xp``: the keys ``keys[seg[0]:seg[-1]]``, the
    document position and the segment index of each.

    ``seg`` is a host int64 array; an empty ``docs`` means position
    ``i - seg[j]``.
    """
    lo, hi = int(seg[0]), int(seg[-1])
    k = xp.ascontiguousarray(xp.asarray(keys, dtype=xp.uint64)[lo:hi])
    pos = xp.arange(lo, hi, dtype=xp.int64)
    d_seg = xp.asarray(seg)
    sid = xp.searchsorted(d_seg[1:], pos, side="right").astype(xp.int64)
    if docs.shape[0] == 0:
        d = pos - d_seg[sid]
    else:
        d = xp.ascontiguousarray(xp.asarray(docs, dtype=xp.int64)[lo:hi])
    return k, d, sid


def segment_edges_sorted(xp, keys, docs, seg):
    """Candidate edges of several key segments, packed ``a << 32 | b``, sorted
    and unique, from a stable sort by (segment, key) in the array module
    ``xp``: equal to ``kernels.buckets.segment_bucket_edges``.

    Args:
        xp: NumPy or CuPy.
        keys: uint64 keys concatenated segment by segment.
        docs: int64 document position of each key, ascending inside each
            segment; empty means position ``i - seg[j]``.
        seg: host int64 segment boundaries (segments + 1 entries).

    Returns:
        uint64 array of ``xp``.
    """
    seg = np.asarray(seg, dtype=np.int64)
    if seg.shape[0] < 2 or int(seg[-1]) - int(seg[0]) < 2:
        return xp.zeros(0, dtype=xp.uint64)
    k, d, sid = _segment_layout(xp, keys, docs, seg)
    # least significant key first: stable by key, then stable by segment, so
    # that positions (ascending within a segment) stay in order inside a bucket
    order = xp.argsort(k, kind="stable")
    if seg.shape[0] > 2:
        order = order[xp.argsort(sid[order], kind="stable")]
    edges = _band_edges(xp, k[order], d[order], sid[order] if seg.shape[0] > 2 else None)
    return xp.unique(edges)


def segment_edges_frame(frames, xp, keys, docs, seg):
    """As :func:`segment_edges_sorted`, with one DataFrame sort by
    (segment, key, document): ``frames`` is cuDF on a GPU (pandas runs the
    same code on the host)."""
    seg = np.asarray(seg, dtype=np.int64)
    if seg.shape[0] < 2 or int(seg[-1]) - int(seg[0]) < 2:
        return xp.zeros(0, dtype=xp.uint64)
    k, d, sid = _segment_layout(xp, keys, docs, seg)
    df = frames.DataFrame({"seg": sid, "key": k, "doc": d}).sort_values(["seg", "key", "doc"])
    return xp.unique(_band_edges(xp, xp.asarray(df["key"].values, dtype=xp.uint64),
                                 xp.asarray(df["doc"].values, dtype=xp.int64),
                                 xp.asarray(df["seg"].values, dtype=xp.int64)))


def _scatter_min(xp, target, idx, values) -> None:
    if xp is np:
        np.minimum.at(target, idx, values)
    else:
        import cupyx
        cupyx.scatter_min(target, idx, values)


def components_propagation(xp, n: int, ea, eb):
    """Connected-component labels of ``n`` nodes and the edges ``ea``-``eb``
    in the array module ``xp``: every node ends with the smallest node of its
    component, by rounds of minimum-label hooking over the edges and pointer
    jumping (no edge list leaves the device)."""
    labels = xp.arange(n, dtype=xp.int64)
    if int(ea.shape[0]) == 0:
        return labels
    ea = xp.asarray(ea, dtype=xp.int64)
    eb = xp.asarray(eb, dtype=xp.int64)
    while True:
        la, lb = labels[ea], labels[eb]
        m = xp.minimum(la, lb)
        new = labels.copy()
        _scatter_min(xp, new, la, m)          # hook the roots, then every node
        _scatter_min(xp, new, lb, m)
        _scatter_min(xp, new, ea, m)
        _scatter_min(xp, new, eb, m)
        while True:                           # pointer jumping to the roots
            nxt = new[new]
            if bool((nxt == new).all()):
                break
            new = nxt
        if bool((new == labels).all()):
            return labels
        labels = new


def exact_representatives_sorted(xp, fp, active):
    """For each row of ``fp`` (``N x 2`` uint64 fingerprints), the index of the
    first active row equal to it, ``-1`` for inactive rows, from a stable sort
    in the array module ``xp``: equal to
    ``gpu_dedup.stages.exact.exact_representatives``."""
    n = int(fp.shape[0])
    rep = xp.full(n, -1, dtype=xp.int64)
    idx = xp.flatnonzero(xp.asarray(active, dtype=xp.bool_))
    if int(idx.shape[0]) == 0:
        return rep
    a, b = fp[idx, 0], fp[idx, 1]
    order = xp.lexsort(xp.stack([b, a]))          # stable: equal rows keep index order
    a, b, members = a[order], b[order], idx[order]
    start = xp.ones(int(order.shape[0]), dtype=xp.bool_)
    start[1:] = (a[1:] != a[:-1]) | (b[1:] != b[:-1])
    group = xp.cumsum(start) - 1
    first = members[xp.flatnonzero(start)]
    rep[members] = first[group]
    return rep


def segment_buckets_sorted(xp, keys, docs, seg):
    """The buckets of two or more members of several key segments, from a
    stable sort by (segment, key) in the array module ``xp``: equal to
    ``kernels.buckets.segment_buckets`` (same arguments, ``(off, members)`` of
    ``xp``)."""
    seg = np.asarray(seg, dtype=np.int64)
    if seg.shape[0] < 2 or int(seg[-1]) - int(seg[0]) < 2:
        return xp.zeros(1, dtype=xp.int64), xp.zeros(0, dtype=xp.int64)
    k, d, sid = _segment_layout(xp, keys, docs, seg)
    order = xp.argsort(k, kind="stable")
    if seg.shape[0] > 2:
        order = order[xp.argsort(sid[order], kind="stable")]
    k, d, sid = k[order], d[order], sid[order]
    n = k.shape[0]
    start = xp.ones(n, dtype=xp.bool_)
    start[1:] = (k[1:] != k[:-1]) | (sid[1:] != sid[:-1])
    heads = xp.flatnonzero(start)
    off = xp.concatenate([heads, xp.asarray([n], dtype=heads.dtype)]).astype(xp.int64)
    big = xp.flatnonzero((off[1:] - off[:-1]) >= 2)
    # in order of segment, then of first member
    big = big[xp.lexsort(xp.stack([d[heads[big]], sid[heads[big]]]))]
    return take_buckets(off, d, big, xp)


# -- the backend -------------------------------------------------------------------

class GpuBackend:
    """CuPy arrays on the device and the Numba CUDA kernels of ``kernels/cuda.py``.

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
            self.name = "cuda-sim"
            self.budget = limit if limit is not None else SIMULATED_BUDGET
            self._pool = None
            self._summary = "Numba CUDA simulator (host arrays)"
        from .kernels import buckets as kbuckets, cuda as kc
        if kc.SIMULATOR != self._simulated:
            raise DeviceError("the GPU backend needs a GPU, or NUMBA_ENABLE_CUDASIM=1 with "
                              "xp=numpy; got one without the other")
        self._k = kc
        self._k_host = kbuckets
        self._text = None
        self._peak = 0
        self._base = self._pool.used_bytes() if self._pool is not None else 0
        mod = "NumPy (simulated device)" if self._simulated else "CuPy"
        self._grouping = ("cuDF groupby" if not self._simulated and rapids_available("cudf")
                          else f"{mod} stable sort per band")
        self._components = ("cuGraph weakly connected components"
                            if not self._simulated and rapids_available("cugraph")
                            else f"label propagation on the device ({mod} scatter-min and "
                                 f"pointer jumping)")

    # -- bookkeeping ---------------------------------------------------------
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

    def to_host(self, x):
        if isinstance(x, np.ndarray):
            return x
        get = getattr(x, "get", None)
        return get() if callable(get) else np.asarray(x)

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
                sub_off, sub_data = _gather_text(offsets, data, docs[t0:t1])
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

    # -- text ------------------------------------------------------------------
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

    # -- exact duplicates -------------------------------------------------------
    def exact_representatives(self, fp, active):
        """The first active document with each fingerprint, by a device sort."""
        with self._tracked():
            return exact_representatives_sorted(self.xp, self._dev(np.asarray(fp, np.uint64)),
                                                self._dev(np.asarray(active, bool)))

    # -- normalization ----------------------------------------------------------
    def normalize(self, texts, steps):
        """The normalization ``steps`` of an Arrow string array (see
        :meth:`normalize_counted`)."""
        return self.normalize_counted(texts, steps)[0]

    def normalize_counted(self, texts, steps):
        """``(normalized, on_host)``: ASCII documents normalized on the device
        (``kernels.hashing.ascii_normalize_doc``), the ``on_host`` others on the
        host (:func:`gpu_dedup.stages.normalize.normalize_text`).
        Bit-identical to the CPU backend's."""
        import pyarrow as pa

        from .kernels.hashing import STEP_CODES
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

    def band_keys(self, sig, bands: int, rows: int):
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
            limit = max(int(VERIFY_SHARE * self.budget) // SET_BYTES_PER_BYTE, 1)
            scratch = max(int(SCRATCH_SHARE * self.budget), 1)
            cached = self._cached_text(offsets, data)
            cum = np.cumsum(lens + 1)
            parts = []
            t0 = 0
            while t0 < D or not parts:
                base = cum[t0 - 1] if t0 else 0
                t1 = max(int(np.searchsorted(cum, base + limit, side="right")), t0 + 1) \
                    if D else 0
                if cached is not None:
                    d_off, d_data = cached
                    d_docs = self._dev(docs[t0:t1])
                else:
                    sub_off, sub_data = _gather_text(offsets, data, docs[t0:t1])
                    d_off, d_data = self._upload(sub_off, sub_data, 0, int(sub_off[-1]))
                    d_docs = xp.arange(t1 - t0, dtype=xp.int64)
                set_off, values = self._k.shingle_sets(xp, d_off, d_data, d_docs, word_mode, n,
                                                       scratch)
                parts.append((set_off, values) if resident
                             else (self.to_host(set_off), self.to_host(values)))
                t0 = t1
            if len(parts) == 1:
                set_off, values = parts[0]
            else:
                mod = xp if resident else np
                sizes = mod.concatenate([p[0][1:] - p[0][:-1] for p in parts])
                set_off = mod.zeros(D + 1, dtype=np.int64)
                mod.cumsum(sizes, out=set_off[1:])
                values = mod.concatenate([p[1] for p in parts])
            return docs, set_off, values

    def jaccard_sets(self, sets, da, db):
        """Exact Jaccard of documents ``da[e]`` and ``db[e]``, all in ``sets``."""
        docs = sets[0]
        ia = np.searchsorted(docs, np.asarray(self.to_host(da))).astype(np.int64)
        ib = np.searchsorted(docs, np.asarray(self.to_host(db))).astype(np.int64)
        return self.jaccard_rows(sets, ia, ib)

    def jaccard_rows(self, sets, ia, ib, floor: float = 0.0):
        """Exact Jaccard of rows ``ia[e]`` and ``ib[e]`` of ``sets`` (positions
        in its sorted documents); exact everywhere, whatever ``floor``."""
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
                sub_off, sub_values = _gather_text(set_off, values, rows)
                m = e1 - e0
                j = self._k.jaccard_edges(xp, self._dev(sub_off), self._dev(sub_values),
                                          self._dev(inv[:m]), self._dev(inv[m:]))
                out[e0:e1] = self.to_host(j)
                e0 = e1
            return xp.asarray(out)

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

    # -- clusters ------------------------------------------------------------
    def select(self, bucket_off, members, n: int, score_fn, threshold: float, limit: int,
               accept_all: bool = False, fixed: int = 0):
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
                                accept_all=accept_all, fixed=fixed)
            sel.where = (f"host: {entries:,} bucket entries need about {need >> 20:,} MiB, "
                         f"over the device budget of {self.budget >> 20:,} MiB")
            return sel
        with self._tracked():
            sel = greedy_rounds(self.xp, self._k.greedy_kernels(self.xp), self._dev(bucket_off),
                                self._dev(members), n, score_fn, threshold, limit,
                                accept_all=accept_all, fixed=fixed, room=self.budget - need)
            if sel is None:
                self.release()
                sel = greedy_select(bucket_off, members, n, score_fn, threshold, limit,
                                    accept_all=accept_all, fixed=fixed)
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
                    return _cugraph_components(n, np.asarray(self.to_host(ea), np.int64),
                                               np.asarray(self.to_host(eb), np.int64))
            except Exception as exc:  # keep the run going on the device path
                log.warning("cuGraph components failed (%s); using label propagation",
                            _one_line(exc))
        with self._tracked():
            return np.asarray(self.to_host(components_propagation(
                self.xp, int(n), self._dev(ea), self._dev(eb))), np.int64)


def _gather_text(offsets, data, docs):
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


def _cugraph_components(n: int, ea, eb):
    import cudf
    import cugraph
    import cupy
    df = cudf.DataFrame({"src": cupy.asarray(ea), "dst": cupy.asarray(eb)})
    g = cugraph.Graph(directed=False)
    g.from_cudf_edgelist(df, source="src", destination="dst")
    cc = cugraph.weakly_connected_components(g)
    vertex = cc["vertex"].to_numpy().astype(np.int64)
    label = cc["labels"].to_numpy().astype(np.int64)
    labels = np.arange(n, dtype=np.int64)
    labels[vertex] = n + label
    return unique(labels, return_inverse=True)[1].reshape(-1).astype(np.int64)
