"""Grouping band keys and fingerprints by sorting, as array code over NumPy
or CuPy (the array module ``xp``): what the GPU backend runs on the device
in place of the CPU's hash tables (:mod:`kernels.buckets`), with the same
results bit for bit.

``*_frame`` variants sort with a DataFrame library instead: cuDF on a GPU
(pandas runs the same code on the host).
"""
from __future__ import annotations

import numpy as np

from .stages.lsh import take_buckets


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
