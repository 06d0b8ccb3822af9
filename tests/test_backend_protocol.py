"""One backend interface: both backends implement :class:`Backend`, the GPU
backend's grouping of key segments equals the CPU kernel bit for bit, and
``backend_gpu`` does not import ``backend``.

The GPU backend itself runs here under Numba's CUDA simulator, in a
subprocess started with ``NUMBA_ENABLE_CUDASIM=1``; its array code runs
in-process with NumPy.
"""
from __future__ import annotations

import ast
import os
import textwrap

import numpy as np
import pytest

from gpu_dedup.backend import MAX_DOCUMENTS, Backend, CpuBackend, DeviceMemory, get_backend
from gpu_dedup.backend_gpu import (segment_buckets_sorted, segment_edges_frame,
                                   segment_edges_sorted)
from gpu_dedup.errors import ConfigError
from gpu_dedup.kernels import buckets as bucket_kernels
from gpu_dedup.stages.components import scipy_components
from gpu_dedup.stages.lsh import distinct_buckets

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: Every call the engine makes on a backend.
ENGINE_CALLS = {"describe", "has_shingles", "text_hash128", "codepoint_lengths", "minhash",
                "band_keys", "bucket_edges", "segment_bucket_edges", "segment_buckets",
                "shingle_sets", "jaccard_sets", "jaccard_rows", "jaccard",
                "signature_agreement", "components", "to_host"}


def _segments(seed, sizes, buckets=12, explicit=False):
    """Colliding keys in segments of ``sizes`` (band-key-like 64-bit values),
    their boundaries, and ascending document positions when ``explicit``."""
    rng = np.random.default_rng(seed)
    sizes = np.asarray(sizes, dtype=np.int64)
    seg = np.zeros(sizes.size + 1, dtype=np.int64)
    np.cumsum(sizes, out=seg[1:])
    keys = rng.integers(0, buckets, size=int(seg[-1])).astype(np.uint64)
    keys *= np.uint64(0x9E3779B97F4A7C15)
    if not explicit:
        return keys, np.zeros(0, dtype=np.int64), seg
    docs = [np.sort(rng.choice(5 * max(int(z), 1), size=int(z), replace=False)) for z in sizes]
    return keys, np.concatenate(docs or [np.zeros(0)]).astype(np.int64), seg


# -- the protocol ---------------------------------------------------------------

def test_protocol_lists_every_engine_call_with_a_docstring():
    members = {name for name, v in vars(Backend).items()
               if callable(v) and not name.startswith("_")}
    assert ENGINE_CALLS <= members, ENGINE_CALLS - members
    for name in members:
        assert (getattr(Backend, name).__doc__ or "").strip(), f"Backend.{name}: no docstring"
    assert {"name", "xp"} <= set(Backend.__annotations__)
    assert {"release", "peak_device_bytes"} <= set(vars(DeviceMemory))


def test_cpu_backend_implements_the_protocol():
    be = CpuBackend()
    assert isinstance(be, Backend)
    assert be.name == "cpu" and be.xp is np
    for name in ENGINE_CALLS:
        assert callable(getattr(be, name)), name


def test_protocol_rejects_an_incomplete_backend():
    class NoSegments(CpuBackend):
        segment_bucket_edges = None

    class Partial:
        name = "partial"
        xp = np

        def to_host(self, x):
            return x
    assert not isinstance(Partial(), Backend)
    # a method set to None does not count
    assert not isinstance(NoSegments(), Backend)


def test_max_documents_fits_a_packed_edge():
    assert MAX_DOCUMENTS == 2 ** 32 - 1
    top = np.uint64(MAX_DOCUMENTS - 1)
    packed = (top << np.uint64(32)) | top
    assert int(packed >> np.uint64(32)) == MAX_DOCUMENTS - 1


# -- segment bucket edges --------------------------------------------------------

SEGMENT_CASES = [
    ("several", [300, 250, 400, 120], 20),
    ("empty segments", [0, 200, 0, 0, 350, 0], 10),
    ("one segment", [500], 8),
    ("no keys", [0, 0], 4),
    ("no segments", [], 4),
    ("singletons", [1, 1, 1], 2),
    ("one bucket", [64, 64], 1),
]


@pytest.mark.parametrize("explicit", [False, True], ids=["positions", "documents"])
@pytest.mark.parametrize("label,sizes,buckets", SEGMENT_CASES, ids=[c[0] for c in SEGMENT_CASES])
def test_segment_edges_sorted_equals_cpu_kernel(label, sizes, buckets, explicit):
    for seed in range(3):
        keys, docs, seg = _segments(seed, sizes, buckets, explicit)
        want = bucket_kernels.segment_bucket_edges(keys, docs, seg)
        got = segment_edges_sorted(np, keys, docs, seg)
        assert got.dtype == np.uint64
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(CpuBackend().segment_bucket_edges(keys, docs, seg), want)
        if label == "several":
            assert want.size > 200


def test_segment_edges_follow_the_anchor_and_chain_rule():
    # one segment, one bucket 0 < 2 < 5 < 7 and one bucket 1 < 3: anchors
    # (0,2) (0,5) (0,7) (1,3), chains (2,5) (5,7); (0,2) is not repeated
    keys = np.array([9, 4, 9, 4, 6, 9, 8, 9], dtype=np.uint64)
    seg = np.array([0, 8], dtype=np.int64)
    got = segment_edges_sorted(np, keys, np.zeros(0, np.int64), seg)
    pairs = [(int(e >> np.uint64(32)), int(e & np.uint64(0xFFFFFFFF))) for e in got]
    assert pairs == [(0, 2), (0, 5), (0, 7), (1, 3), (2, 5), (5, 7)]
    # the same keys as two segments of implicit positions 0..3: buckets do
    # not cross the boundary, and the edge (1, 3) of both segments is one edge
    seg2 = np.array([0, 4, 8], dtype=np.int64)
    got2 = segment_edges_sorted(np, keys, np.zeros(0, np.int64), seg2)
    np.testing.assert_array_equal(
        got2, bucket_kernels.segment_bucket_edges(keys, np.zeros(0, np.int64), seg2))
    pairs2 = {(int(e >> np.uint64(32)), int(e & np.uint64(0xFFFFFFFF))) for e in got2}
    assert got2.size == 2 and pairs2 == {(0, 2), (1, 3)}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_band_major_segments_equal_bucket_edges_of_the_matrix(seed):
    rng = np.random.default_rng(seed)
    n, b = 500, 7
    keys = (rng.integers(0, 30, size=(n, b)).astype(np.uint64)
            * np.uint64(0xC2B2AE3D27D4EB4F))
    active = rng.random(n) > 0.15
    want = bucket_kernels.bucket_edges(keys, active)
    assert want.size > 100
    docs = np.flatnonzero(active).astype(np.int64)
    flat = np.ascontiguousarray(keys[docs].T).reshape(-1)
    seg = np.arange(b + 1, dtype=np.int64) * docs.size
    got = segment_edges_sorted(np, flat, np.tile(docs, b), seg)
    np.testing.assert_array_equal(got, want)
    # every row active: implicit positions
    full = np.ascontiguousarray(keys.T).reshape(-1)
    seg = np.arange(b + 1, dtype=np.int64) * n
    np.testing.assert_array_equal(segment_edges_sorted(np, full, np.zeros(0, np.int64), seg),
                                  bucket_kernels.bucket_edges(keys, np.ones(n, dtype=bool)))
    np.testing.assert_array_equal(CpuBackend().segment_bucket_edges(full, np.zeros(0, np.int64),
                                                                    seg),
                                  CpuBackend().bucket_edges(keys))


def test_segment_edges_frame_equals_cpu_with_pandas():
    pd = pytest.importorskip("pandas", reason="pandas runs the cuDF grouping code on the host")
    for explicit in (False, True):
        keys, docs, seg = _segments(5, [200, 0, 300, 150], 15, explicit)
        np.testing.assert_array_equal(segment_edges_frame(pd, np, keys, docs, seg),
                                      bucket_kernels.segment_bucket_edges(keys, docs, seg))


@pytest.mark.parametrize("keys,docs,seg,match", [
    (np.zeros(4, np.uint64), np.zeros(0, np.int64), np.zeros(0, np.int64), "boundar"),
    (np.zeros(4, np.uint64), np.zeros(0, np.int64), np.array([0, 3, 2]), "non-decreasing"),
    (np.zeros(4, np.uint64), np.zeros(0, np.int64), np.array([0, 5]), "past"),
    (np.zeros(4, np.uint64), np.zeros(3, np.int64), np.array([0, 4]), "positions for"),
    (np.zeros(2, np.uint64), np.array([0, 1 << 32]), np.array([0, 2]), "2\\*\\*32"),
])
def test_segment_bucket_edges_rejects_bad_segments(keys, docs, seg, match):
    with pytest.raises(ValueError, match=match):
        CpuBackend().segment_bucket_edges(keys, docs, seg)


# -- components and the import graph ----------------------------------------------

def test_scipy_components_joins_paths_and_keeps_isolated_nodes():
    labels = scipy_components(7, np.array([0, 2, 5]), np.array([1, 3, 2]))
    assert labels.dtype == np.int64 and labels.shape == (7,)
    groups = {}
    for i, lab in enumerate(labels.tolist()):
        groups.setdefault(lab, []).append(i)
    assert sorted(groups.values()) == [[0, 1], [2, 3, 5], [4], [6]]
    assert scipy_components(0, np.zeros(0), np.zeros(0)).shape == (0,)
    np.testing.assert_array_equal(CpuBackend().components(7, np.array([0, 2, 5]),
                                                          np.array([1, 3, 2])), labels)
    with pytest.raises(ValueError):
        scipy_components(3, np.array([0, 1]), np.array([1]))


def _local_imports(path: str, module: str) -> set[str]:
    """Modules of the package that ``path`` (module ``module``) imports, at
    any depth of its code (top level or inside functions)."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    package = module.rsplit(".", 1)[0] if not path.endswith("__init__.py") else module
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("gpu_dedup"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("gpu_dedup"):
                continue
            out.add(target)
            for a in node.names:           # ``from . import backend`` names a module
                out.add(f"{target}.{a.name}")
    return out


def _module_path(module: str) -> str | None:
    parts = module.split(".")
    if parts[:2] == ["gpu_dedup", "kernels"]:
        base = os.path.join(ROOT, "kernels", *parts[2:])
    else:
        base = os.path.join(ROOT, *parts)
    for p in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(p):
            return p
    return None


def test_backend_gpu_does_not_import_backend():
    # follow backend_gpu's own imports through the package (a package's
    # __init__ that Python runs on the way is not followed: it is not an
    # import of the module being checked)
    seen, todo = set(), ["gpu_dedup.backend_gpu"]
    while todo:
        mod = todo.pop()
        if mod in seen:
            continue
        seen.add(mod)
        path = _module_path(mod)
        if path is None or (path.endswith("__init__.py") and mod != "gpu_dedup.backend_gpu"
                            and mod.count(".") <= 1):
            continue
        todo.extend(_local_imports(path, mod))
    assert "gpu_dedup.backend" not in seen, sorted(seen)
    # and backend itself does import backend_gpu (lazily): one direction only
    assert "gpu_dedup.backend_gpu" in _local_imports(_module_path("gpu_dedup.backend"),
                                                       "gpu_dedup.backend")


def test_get_backend_checks_gpu_memory_for_every_device():
    for device in ("cpu", "auto", "gpu"):
        with pytest.raises(ConfigError, match="--gpu-memory"):
            get_backend(device, gpu_memory="lots")
    assert get_backend("cpu", gpu_memory="8GiB")[0].name == "cpu"


# -- the GPU backend under the simulator ---------------------------------------------

SIM_SCRIPT = textwrap.dedent(r'''
    import json
    import numpy as np
    from gpu_dedup.backend import Backend, CpuBackend, DeviceMemory
    from gpu_dedup.backend_gpu import GpuBackend, SEGMENT_BYTES_PER_KEY
    from gpu_dedup.kernels import buckets as bucket_kernels

    out = {}
    be = GpuBackend(xp=np)
    out["protocol"] = isinstance(be, Backend)
    out["device memory"] = isinstance(be, DeviceMemory)
    out["cpu not device memory"] = not isinstance(CpuBackend(), DeviceMemory)
    rng = np.random.default_rng(11)
    sizes = np.array([400, 0, 350, 0, 0, 500, 60, 1], dtype=np.int64)
    seg = np.zeros(sizes.size + 1, dtype=np.int64)
    np.cumsum(sizes, out=seg[1:])
    keys = rng.integers(0, 25, size=int(seg[-1])).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    docs = np.concatenate([np.sort(rng.choice(3000, size=int(z), replace=False))
                           for z in sizes]).astype(np.int64)
    # a budget whose batch share holds about 300 keys: several groups of segments
    small = GpuBackend(gpu_memory=int(300 * SEGMENT_BYTES_PER_KEY / 0.2), xp=np)
    for label, d in (("positions", np.zeros(0, np.int64)), ("documents", docs)):
        want = bucket_kernels.segment_bucket_edges(keys, d, seg)
        for name, b in (("whole", be), ("grouped", small)):
            got = b.to_host(b.segment_bucket_edges(keys, d, seg))
            out[f"segments {label} {name}"] = bool(got.dtype == np.uint64
                                                   and np.array_equal(got, want)
                                                   and want.size > 100)
    # the same partition (label values may differ: the engine relabels by smallest member)
    from gpu_dedup.stages.components import cluster_ids
    ea, eb = np.array([0, 3, 4]), np.array([1, 4, 5])
    out["components"] = bool(np.array_equal(cluster_ids(be.to_host(be.components(7, ea, eb))),
                                            cluster_ids(CpuBackend().components(7, ea, eb))))
    print(json.dumps(out))
''')


def test_gpu_backend_implements_the_protocol_under_the_simulator():
    from test_gpu_backend import run_simulated
    out = run_simulated(SIM_SCRIPT)
    assert len(out) == 8
    failed = [k for k, ok in out.items() if not ok]
    assert not failed, failed


@pytest.mark.parametrize("sizes", [[0], [1], [7], [50, 0, 3, 120], [5] * 9])
@pytest.mark.parametrize("explicit", [False, True])
def test_segment_buckets_sorted_equals_cpu_kernel(sizes, explicit):
    keys, docs, seg = _segments(3, sizes, buckets=6, explicit=explicit)
    off, members = bucket_kernels.segment_buckets(keys, docs, seg)
    got_off, got_members = segment_buckets_sorted(np, keys, docs, seg)
    np.testing.assert_array_equal(got_off, off)
    np.testing.assert_array_equal(got_members, members)
    # every bucket of two or more, its members ascending, and nothing else
    want = set()
    for j in range(len(seg) - 1):
        groups: dict = {}
        for i in range(seg[j], seg[j + 1]):
            groups.setdefault(int(keys[i]), []).append(int(docs[i]) if explicit
                                                       else i - int(seg[j]))
        want |= {(j, tuple(g)) for g in groups.values() if len(g) > 1}
    assert len(off) - 1 == len(want)
    assert {tuple(members[off[b]:off[b + 1]]) for b in range(len(off) - 1)} == \
        {g for _, g in want}


def test_distinct_buckets_keeps_each_member_list_once_in_canonical_order():
    off = np.array([0, 2, 4, 7, 9, 11])
    members = np.array([3, 5, 0, 2, 1, 4, 6, 3, 5, 0, 2])
    got_off, got = distinct_buckets(off, members)
    lists = [tuple(got[got_off[b]:got_off[b + 1]]) for b in range(len(got_off) - 1)]
    assert sorted(lists) == [(0, 2), (1, 4, 6), (3, 5)]
    assert [x[0] for x in lists] == sorted(x[0] for x in lists)
    # the order of the input buckets does not matter
    rev_off = np.concatenate([[0], np.cumsum(np.diff(off)[::-1])])
    rev = np.concatenate([members[off[b]:off[b + 1]] for b in range(len(off) - 2, -1, -1)])
    r_off, r = distinct_buckets(rev_off, rev)
    np.testing.assert_array_equal(r_off, got_off)
    np.testing.assert_array_equal(r, got)


def test_band_keys_refuse_bands_past_the_signature():
    """Band keys that would read past a signature's K values are refused by
    both backends (before any device work), never computed from the next
    row's values."""
    import numpy as np
    import pytest

    from gpu_dedup.backend import CpuBackend
    from gpu_dedup.backend_gpu import GpuBackend
    sig = np.arange(3 * 40, dtype=np.uint64).reshape(3, 40)
    assert CpuBackend().band_keys(sig, 10, 4).shape == (3, 10)
    for be in (CpuBackend(), object.__new__(GpuBackend)):
        with pytest.raises(ValueError, match="16 bands x 4 rows do not fit signatures of 40"):
            be.band_keys(sig, 16, 4)
