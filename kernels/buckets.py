"""CPU kernels over keys (Numba ``@njit``): the buckets of band keys, the
groups of equal fingerprints, and union-find over edges.

Each groups keys with an open-addressing hash table, per key segment, on
several threads (:func:`kernels.threads.for_range`). The GPU backend groups the same keys by sorting them
(``gpu_dedup.backend_grouping``), with the same results.
"""
from __future__ import annotations

import numpy as np

from .jit import njit

from .hashing import GOLDEN, U64, fmix64
from .threads import for_range

@njit(cache=True)
def _bucket_table(n):
    """An empty open-addressing table for ``n`` keys: keys, and heads (-1)."""
    size = 1
    while size < 2 * n + 2:
        size <<= 1
    return np.empty(size, np.uint64), np.full(size, -1, np.int64)


@njit(cache=True)
def _bucket_slot(tab_key, tab_head, k):
    """The slot of key ``k`` in an open-addressing table of a power-of-two
    size: where it is, or the empty slot (``tab_head < 0``) it goes in."""
    size = tab_key.shape[0]
    slot = np.int64((k ^ (k >> U64(29))) & U64(size - 1))
    while tab_head[slot] >= 0 and tab_key[slot] != k:
        slot = (slot + 1) & np.int64(size - 1)
    return slot


def segment_bucket_edges(keys, docs, seg):
    """Candidate edges of the buckets of several key segments, packed
    ``a << 32 | b`` (``a < b``), sorted and unique.

    ``keys[seg[j]:seg[j+1]]`` are the keys of segment ``j`` (one band, or one
    key partition of one band) and ``docs`` the matching document positions,
    ascending within each segment; an empty ``docs`` means position
    ``i - seg[j]``. Within a segment a bucket's members, in order, are
    ``m0 < m1 < ... < mk``; it gives the *anchor edges* ``(m0, mi)`` and the
    *chain edges* ``(m(i-1), mi)``: at most ``2k`` edges, never all pairs.
    """
    g = seg.shape[0] - 1
    out = np.empty(2 * int(seg[g]), np.uint64)
    counts = np.zeros(max(g, 1), np.int64)
    for_range(_bucket_edge_segments, g, keys, docs, seg, out, counts)
    return _packed_edges(out, seg, counts)


@njit(cache=True, nogil=True)
def _bucket_edge_segments(keys, docs, seg, out, counts, j0, j1):
    implicit = docs.shape[0] == 0
    for j in range(j0, j1):
        lo = seg[j]
        hi = seg[j + 1]
        tab_key, tab_first = _bucket_table(hi - lo)
        tab_last = np.empty(tab_key.shape[0], np.int64)
        m = 0
        base = 2 * lo
        for i in range(lo, hi):
            k = keys[i]
            d = i - lo if implicit else docs[i]
            slot = _bucket_slot(tab_key, tab_first, k)
            a = tab_first[slot]
            if a < 0:
                tab_first[slot] = d
                tab_last[slot] = d
                tab_key[slot] = k
            else:
                out[base + m] = (U64(a) << U64(32)) | U64(d)
                m += 1
                last = tab_last[slot]
                if last != a:
                    out[base + m] = (U64(last) << U64(32)) | U64(d)
                    m += 1
                tab_last[slot] = d
        counts[j] = m


@njit(cache=True)
def _packed_edges(out, seg, counts):
    """The edges of every segment (``counts[j]`` from ``out[2 * seg[j]:]``),
    sorted and unique."""
    g = seg.shape[0] - 1
    n_out = 0
    for j in range(g):
        n_out += counts[j]
    packed = np.empty(n_out, np.uint64)
    p = 0
    for j in range(g):
        b0 = 2 * seg[j]
        for e in range(counts[j]):
            packed[p] = out[b0 + e]
            p += 1
    return np.unique(packed)


def segment_buckets(keys, docs, seg):
    """The buckets of two or more members of several key segments.

    Arguments as for :func:`segment_bucket_edges`. Returns ``(off, members)``:
    int64 bucket boundaries and the int64 member positions of each bucket,
    ascending; buckets in order of segment, then of first member.
    """
    g = seg.shape[0] - 1
    lo0 = int(seg[0]) if g >= 0 else 0
    total = int(seg[g]) - lo0 if g >= 0 else 0
    out_mem = np.empty(max(total, 1), np.int64)
    out_size = np.empty(max(total, 1), np.int64)
    n_mem = np.zeros(max(g, 1), np.int64)
    n_bkt = np.zeros(max(g, 1), np.int64)
    for_range(_bucket_segments, g, keys, docs, seg, lo0, out_mem, out_size, n_mem, n_bkt)
    return _bucket_lists(seg, lo0, out_mem, out_size, n_mem, n_bkt)


@njit(cache=True, nogil=True, stand_in="vector_misc.bucket_segments")
def _bucket_segments(keys, docs, seg, lo0, out_mem, out_size, n_mem, n_bkt, j0, j1):
    implicit = docs.shape[0] == 0
    for j in range(j0, j1):
        lo = seg[j]
        hi = seg[j + 1]
        n = hi - lo
        tab_key, tab_id = _bucket_table(n)
        local = np.empty(max(n, 1), np.int64)
        cnt = np.zeros(max(n, 1), np.int64)
        nb = 0
        for i in range(lo, hi):
            k = keys[i]
            slot = _bucket_slot(tab_key, tab_id, k)
            b = tab_id[slot]
            if b < 0:
                tab_id[slot] = nb
                tab_key[slot] = k
                b = nb
                nb += 1
            local[i - lo] = b
            cnt[b] += 1
        pos = np.empty(max(nb, 1), np.int64)
        p = 0
        nbig = 0
        base = lo - lo0
        for b in range(nb):
            if cnt[b] >= 2:
                pos[b] = p
                p += cnt[b]
                out_size[base + nbig] = cnt[b]
                nbig += 1
            else:
                pos[b] = -1
        for i in range(lo, hi):
            b = local[i - lo]
            if pos[b] >= 0:
                out_mem[base + pos[b]] = i - lo if implicit else docs[i]
                pos[b] += 1
        n_mem[j] = p
        n_bkt[j] = nbig


@njit(cache=True, stand_in="vector_misc.bucket_lists")
def _bucket_lists(seg, lo0, out_mem, out_size, n_mem, n_bkt):
    """The buckets each segment found, one after another: ``(off, members)``."""
    g = seg.shape[0] - 1
    m_total = 0
    b_total = 0
    for j in range(g):
        m_total += n_mem[j]
        b_total += n_bkt[j]
    members = np.empty(m_total, np.int64)
    off = np.zeros(b_total + 1, np.int64)
    m = 0
    q = 0
    for j in range(g):
        base = seg[j] - lo0
        for e in range(n_mem[j]):
            members[m + e] = out_mem[base + e]
        m += n_mem[j]
        for e in range(n_bkt[j]):
            off[q + 1] = off[q] + out_size[base + e]
            q += 1
    return off, members


#: Constants of :func:`bucket_hashes`' second hash.
BUCKET_SALT = U64(0x5851F42D4C957F2D)
BUCKET_MUL = U64(0xD6E8FEB86659FD93)


def bucket_hashes(off, members):
    """Two 64-bit hashes of each bucket's member list (its size included),
    to find buckets with the same members."""
    nb = off.shape[0] - 1
    h = np.empty((max(nb, 0), 2), np.uint64)
    for_range(_bucket_hash_range, nb, off, members, h, grain=1024)
    return h


@njit(cache=True, nogil=True, stand_in="vector_misc.bucket_hash_range")
def _bucket_hash_range(off, members, h, b0, b1):
    for b in range(b0, b1):
        h1 = fmix64(U64(off[b + 1] - off[b]) * GOLDEN)
        h2 = fmix64(h1 ^ BUCKET_SALT)
        for i in range(off[b], off[b + 1]):
            x = U64(members[i])
            h1 = fmix64(h1 ^ (x * GOLDEN))
            h2 = fmix64((h2 + x) * BUCKET_MUL)
        h[b, 0] = h1
        h[b, 1] = h2


def check_segments(keys, docs, seg) -> None:
    """Check the arguments of :func:`segment_bucket_edges` (host arrays),
    which the compiled kernel reads without bounds checks.

    Raises:
        ValueError: ``seg`` is empty, negative or decreasing, or ends past
            the keys; ``docs`` is neither empty nor one position per key; a
            document position does not fit in the 32 bits of a packed edge.
    """
    if seg.ndim != 1 or seg.shape[0] < 1:
        raise ValueError("seg needs the segment boundaries: segments + 1 entries")
    if seg.shape[0] > 1 and (int(seg[0]) < 0 or bool(np.any(seg[1:] < seg[:-1]))):
        raise ValueError("seg must be non-negative and non-decreasing")
    if int(seg[-1]) > keys.shape[0]:
        raise ValueError(f"seg ends at {int(seg[-1])}, past the {keys.shape[0]} keys")
    if docs.shape[0] not in (0, keys.shape[0]):
        raise ValueError(f"docs holds {docs.shape[0]} positions for {keys.shape[0]} keys; "
                         f"give one per key, or none")
    if docs.shape[0]:
        if int(docs.min()) < 0 or int(docs.max()) > 0xFFFFFFFF:
            raise ValueError("document positions must lie in [0, 2**32) to pack into edges")
    elif seg.shape[0] > 1 and int((seg[1:] - seg[:-1]).max()) > 1 << 32:
        raise ValueError("a segment holds more than 2**32 keys: positions do not pack into "
                         "edges")


def bucket_edges(keys, active):
    """Candidate edges of every band of ``keys`` (N x B) over the active rows
    (see :func:`segment_bucket_edges`), packed ``a << 32 | b``."""
    n, b = keys.shape
    if active.all():
        flat = np.ascontiguousarray(keys.T).reshape(-1)
        seg = np.arange(b + 1, dtype=np.int64) * n
        return segment_bucket_edges(flat, np.zeros(0, np.int64), seg)
    docs = np.flatnonzero(active).astype(np.int64)
    flat = np.ascontiguousarray(keys[docs].T).reshape(-1)
    seg = np.arange(b + 1, dtype=np.int64) * docs.size
    return segment_bucket_edges(flat, np.tile(docs, b), seg)


@njit(cache=True, stand_in="vector_misc.first_equal")
def first_equal(fp, active):
    """For each row of ``fp`` (``N x 2`` ``uint64`` fingerprints), the index
    of the first active row equal to it (itself if none comes earlier);
    ``-1`` for inactive rows. One pass with an open-addressing table of
    ``2^k >= 2N`` slots indexed by the low bits of the first word."""
    n = fp.shape[0]
    rep = np.full(n, -1, np.int64)
    size = 2
    while size < 2 * n:
        size *= 2
    mask = U64(size - 1)
    table = np.full(size, -1, np.int64)
    for i in range(n):
        if not active[i]:
            continue
        h0 = fp[i, 0]
        h1 = fp[i, 1]
        s = np.int64(h0 & mask)
        while True:
            j = table[s]
            if j < 0:
                table[s] = i
                rep[i] = i
                break
            if fp[j, 0] == h0 and fp[j, 1] == h1:
                rep[i] = j
                break
            s = (s + 1) & (size - 1)
    return rep


@njit(cache=True)
def _find(parent, x):
    root = x
    while parent[root] != root:
        root = parent[root]
    while parent[x] != root:
        nxt = parent[x]
        parent[x] = root
        x = nxt
    return root


@njit(cache=True)
def union_edges(parent, ea, eb):
    """Union-find: join the endpoints of every edge (the smaller root wins)."""
    for e in range(ea.shape[0]):
        ra = _find(parent, ea[e])
        rb = _find(parent, eb[e])
        if ra < rb:
            parent[rb] = ra
        elif rb < ra:
            parent[ra] = rb


@njit(cache=True)
def connected(parent, ea, eb):
    """Whether the endpoints of each edge already share a component."""
    out = np.empty(ea.shape[0], np.bool_)
    for e in range(ea.shape[0]):
        out[e] = _find(parent, ea[e]) == _find(parent, eb[e])
    return out


@njit(cache=True)
def _part_of(k, parts, mask):
    """The partition of key ``k``: ``(k >> 40) % parts`` (``mask``: ``parts -
    1`` when it is a power of two, else 0)."""
    h = k >> U64(40)
    return h & mask if mask else h % parts


@njit(cache=True)
def _in_part(k, parts, mask, want):
    """Whether key ``k`` is in partition ``want`` (:func:`_part_of`)."""
    return _part_of(k, parts, mask) == want


#: Keys a block of :func:`keys_of_partition` reads.
PART_BLOCK = 1 << 16


def keys_of_partition(keys, parts, p, base):
    """The keys of partition ``p`` of ``parts`` (``(key >> 40) % parts``, the
    high bits: the tables hash the low ones) and their positions plus
    ``base``, in order, in one pass over ``keys`` (which may be a memory
    map): ``(keys, positions)``."""
    n = keys.shape[0]
    parts = int(parts)
    mask = parts - 1 if (parts & (parts - 1)) == 0 else 0
    nblocks = -(-n // PART_BLOCK)
    count = np.zeros(nblocks + 1, np.int64)
    out_k = np.empty(0, np.uint64)
    out_d = np.empty(0, np.int64)
    for_range(_partition_blocks, nblocks, keys, U64(parts), U64(mask), U64(p), int(base), count,
              out_k, out_d, False)
    np.cumsum(count, out=count)
    out_k = np.empty(count[nblocks], np.uint64)
    out_d = np.empty(count[nblocks], np.int64)
    for_range(_partition_blocks, nblocks, keys, U64(parts), U64(mask), U64(p), int(base), count,
              out_k, out_d, True)
    return out_k, out_d


@njit(cache=True, nogil=True)
def _partition_blocks(keys, P, mask, want, base, count, out_k, out_d, write, b0, b1):
    """Blocks ``b0..b1-1`` of :func:`keys_of_partition`: how many of their
    keys are in the partition (into ``count[b + 1]``), or (``write``) those
    keys and positions from ``count[b]`` on."""
    n = keys.shape[0]
    for b in range(b0, b1):
        lo = b * PART_BLOCK
        hi = min(n, lo + PART_BLOCK)
        if not write:
            c = 0
            for i in range(lo, hi):
                if _in_part(keys[i], P, mask, want):
                    c += 1
            count[b + 1] = c
            continue
        o = count[b]
        for i in range(lo, hi):
            k = keys[i]
            if _in_part(k, P, mask, want):
                out_k[o] = k
                out_d[o] = base + i
                o += 1


def partition_order(keys, parts):
    """Every partition of :func:`keys_of_partition` at once, in one pass over
    ``keys`` (which may be a memory map): ``(out_keys, positions, off)``, the
    keys of partition ``p`` at ``off[p]:off[p + 1]`` of ``out_keys``, in
    order, and their positions (``uint32``) at the same places of
    ``positions``."""
    n = keys.shape[0]
    if n >= 1 << 32:
        raise ValueError("a row of more than 2**32 - 1 keys: positions would wrap")
    parts = int(parts)
    mask = parts - 1 if (parts & (parts - 1)) == 0 else 0
    nblocks = -(-n // PART_BLOCK)
    count = np.zeros((nblocks, parts), np.int64)
    out_k = np.empty(n, np.uint64)
    out_p = np.empty(n, np.uint32)
    for_range(_route_blocks, nblocks, keys, U64(parts), U64(mask), count, out_k, out_p, False)
    # each block's place in each partition: partitions first, blocks within
    start = np.zeros(count.size, np.int64)
    np.cumsum(count.T.ravel()[:-1], out=start[1:])
    start = np.ascontiguousarray(start.reshape(parts, nblocks).T)
    off = np.empty(parts + 1, np.int64)
    off[:parts] = start[0] if nblocks else 0
    off[parts] = n
    for_range(_route_blocks, nblocks, keys, U64(parts), U64(mask), start, out_k, out_p, True)
    return out_k, out_p, off


@njit(cache=True, nogil=True)
def _route_blocks(keys, P, mask, at, out_k, out_p, write, b0, b1):
    """Blocks ``b0..b1-1`` of :func:`partition_order`: how many of their keys
    each partition has (into ``at[b]``), or (``write``) those keys and
    positions, from ``at[b, p]`` on for partition ``p``."""
    n = keys.shape[0]
    for b in range(b0, b1):
        lo = b * PART_BLOCK
        hi = min(n, lo + PART_BLOCK)
        for i in range(lo, hi):
            k = keys[i]
            p = np.int64(_part_of(k, P, mask))
            if write:
                o = at[b, p]
                out_k[o] = k
                out_p[o] = np.uint32(i)
                at[b, p] = o + 1
            else:
                at[b, p] += 1


@njit(cache=True)
def split_segments(keys, docs, seg, ways):
    """Each key segment cut into ``ways`` (a power of two) by bits 52 and up
    of its keys, so that equal keys stay together and the grouping of one
    large segment runs on several threads: ``(keys, docs, seg)``, the keys of
    each part in their order, with their positions (``docs``; when it is
    empty, a key's position is its offset in its segment)."""
    g = seg.shape[0] - 1
    n = seg[g] - seg[0] if g >= 0 else 0
    implicit = docs.shape[0] == 0
    out_k = np.empty(n, np.uint64)
    out_d = np.empty(n, np.int64)
    new_seg = np.empty(g * ways + 1, np.int64)
    new_seg[0] = 0
    mask = U64(ways - 1)
    at = np.empty(ways, np.int64)
    o = 0
    for j in range(g):
        lo = seg[j]
        hi = seg[j + 1]
        for w in range(ways):
            at[w] = 0
        for i in range(lo, hi):
            at[np.int64((keys[i] >> U64(52)) & mask)] += 1
        for w in range(ways):
            c = at[w]
            at[w] = o
            o += c
            new_seg[j * ways + w + 1] = o
        for i in range(lo, hi):
            w = np.int64((keys[i] >> U64(52)) & mask)
            out_k[at[w]] = keys[i]
            out_d[at[w]] = i - lo if implicit else docs[i]
            at[w] += 1
    return out_k, out_d, new_seg
