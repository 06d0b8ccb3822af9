"""The tasks of the ``buckets`` stage, one unit of work each:

* :func:`task_lsh`: the buckets (or candidate edges) of a group of bands in
  a partition of the key space; :func:`task_lsh_sweep`: those of a group of
  bands in every partition, its keys read once;

and those that cut the buckets into rank ranges for greedy selection
(:mod:`gpu_dedup.stages.select_ranges`):

* :func:`task_rank_counts`, :func:`task_rank_text`: a bucket unit's load,
  or a chunk's text, in bins of ranks, to cut the ranges where they weigh
  the same;
* :func:`task_route`: one bucket unit's buckets, in rank space, by the range
  of their first member (its *group*);
* :func:`task_group`: one group's buckets from every unit, made distinct,
  and their entries by the range of each member.

Neither reads more than one unit's or one group's buckets.
"""
from __future__ import annotations

import os

import numpy as np

from ..arrays import concat_csr
from ..errors import DedupError
from ..kernels.buckets import keys_of_partition, partition_order, split_segments
from ..stages.lsh import distinct_buckets, split_ways
from ..stages.select_ranges import by_group, group_entries, rank_bins
from . import layout
from .records import Blocks
from .tasks import Ctx, backend_of, host

_U64 = np.uint64


def task_lsh(unit: dict, ctx: Ctx, blocks: Blocks, spill: list | None = None) -> dict:
    """The buckets of bands ``unit['bands']`` whose key falls in partition
    ``unit['part']`` of ``unit['parts']``: their members (greedy selection)
    or their candidate edges (components). ``spill`` (from
    :func:`task_lsh_sweep`): the block's keys of those bands ordered by
    partition, from which the unit takes its slice."""
    st = ctx.store
    name = layout.bucket_unit(unit["layout"], unit["index"])
    meta = st.done(name)
    if meta is not None:
        return {**meta, "reused": 1}
    if spill is not None:
        flat, d, seg = _routed_keys(unit, blocks, spill)
    else:
        flat, d, seg = _unit_keys(st, unit, blocks)
    be = backend_of(ctx)
    seg = np.asarray(seg, dtype=np.int64)
    # parts of a large segment fit the CPU's caches and threads; a device
    # sorts whole segments, and greedy's buckets come out in one order
    # (distinct_buckets) whichever way they were cut
    greedy = ctx.cfg.cluster == "greedy"
    ways = split_ways(seg) if be.name == "cpu" or not greedy else 1
    if ways > 1:
        flat, d, seg = split_segments(np.asarray(flat), d, seg, ways)
    if greedy:
        off, members = be.segment_buckets(flat, d, seg)
        del flat, d
        off, members = distinct_buckets(host(be, off), host(be, members))
        st.save_npy(layout.file(name, layout.OFF), off)
        st.save_npy(layout.file(name, layout.MEMBERS), members)
        meta = {"buckets": int(off.size - 1), "entries": int(members.size), "pid": os.getpid()}
        files = layout.files(name, (layout.OFF, layout.MEMBERS))
    else:
        edges = host(be, be.segment_bucket_edges(flat, d, seg))
        del flat, d
        st.save_npy(layout.file(name, layout.EDGES), edges)
        meta = {"edges": int(edges.size), "pid": os.getpid()}
        files = [layout.file(name, layout.EDGES)]
    st.mark_done(name, meta, files)
    return {**meta, "reused": 0}


def _unit_keys(st, unit: dict, blocks: Blocks) -> tuple:
    """The keys of ``unit``'s bands in its partition, read from the blocks'
    band keys: ``(keys, positions, seg)``, each band's keys at ``seg[j]:seg[j
    + 1]``, block after block, and their positions (none: in one partition,
    a key's position is its offset in its band)."""
    parts, p = unit["parts"], unit["part"]
    keys, docs, seg = [], [], [0]
    rows = 0
    for j in unit["bands"]:
        for b in blocks.blocks:
            if b["r1"] == b["r0"]:
                continue
            row = st.load_npy(layout.signature_file(b["key"], layout.KEYS), mmap=True)[j]
            if parts > 1:
                k, d = keys_of_partition(row, parts, p, b["r0"])
                keys.append(k)
                docs.append(d)
            else:       # blocks are consecutive: position = offset in band
                keys.append(row)
            rows += keys[-1].size
            del row
        seg.append(rows)
    flat = (np.asarray(keys[0]) if len(keys) == 1 else
            np.concatenate(keys) if keys else np.zeros(0, _U64))
    del keys
    return flat, np.concatenate(docs) if docs else np.zeros(0, np.int64), seg


def _routed_keys(unit: dict, blocks: Blocks, spill) -> tuple:
    """:func:`_unit_keys` from the keys routed by a sweep (``spill``): each
    block's slice copied once, into arrays of their total size."""
    p = unit["part"]
    got = [(b, spill[i]) for i, b in enumerate(blocks.blocks) if b["r1"] > b["r0"]]
    seg = [0]
    for jj in range(len(unit["bands"])):
        seg.append(seg[-1] + sum(int(off[jj, p + 1] - off[jj, p]) for _, (_, _, off) in got))
    flat = np.empty(seg[-1], _U64)
    d = np.empty(seg[-1], np.int64)
    o = 0
    for jj in range(len(unit["bands"])):
        for b, (k, pos, off) in got:
            s, e = int(off[jj, p]), int(off[jj, p + 1])
            flat[o:o + e - s] = k[jj, s:e]
            d[o:o + e - s] = pos[jj, s:e]
            d[o:o + e - s] += int(b["r0"])
            o += e - s
    return flat, d, seg


def task_lsh_sweep(sweep: dict, ctx: Ctx, blocks: Blocks) -> dict:
    """The bucket units ``sweep['units']`` (the same bands, every partition
    of the key space, as :func:`task_lsh`): each block's keys in those bands
    read once and ordered by partition, held in memory
    (``sweep['in_memory']``) or saved (a spill, deleted at the end), and
    each unit given its slice of them, where a unit alone reads every key
    of its bands. ``{'units': [each unit's meta], 'reused': n}``."""
    st = ctx.store
    units = sweep["units"]
    metas = [st.done(layout.bucket_unit(u["layout"], u["index"])) for u in units]
    if all(m is not None for m in metas):
        return {"units": [{**m, "reused": 1} for m in metas], "reused": len(units)}
    first = units[0]
    parts, bands = int(first["parts"]), first["bands"]
    written, spill = [], []
    try:
        for b in blocks.blocks:
            n = int(b["r1"] - b["r0"])
            names = [layout.bucket_spill(first["layout"], first["index"], b["key"], x)
                     for x in (layout.KEYS, layout.POSITIONS, layout.OFF)]
            spill.append(names)
            if not n:
                continue
            keys = st.load_npy(layout.signature_file(b["key"], layout.KEYS), mmap=True)
            out = (np.empty((len(bands), n), _U64), np.empty((len(bands), n), np.uint32),
                   np.empty((len(bands), parts + 1), np.int64))
            for jj, j in enumerate(bands):
                for arr, got in zip(out, partition_order(keys[j], parts)):
                    arr[jj] = got
            del keys
            if sweep.get("in_memory"):
                spill[-1] = out
                continue
            for name, arr in zip(names, out):
                st.save_npy(name, arr)
                written.append(name)
            del out
        got = [{**m, "reused": 1} if m is not None else
               task_lsh(u, ctx, blocks, spill=_Spill(st, blocks, spill, len(bands), parts))
               for u, m in zip(units, metas)]
    finally:
        for name in written:
            st.discard(name)
    return {"units": got, "reused": sum(m is not None for m in metas)}


class _Spill:
    """The routed keys of :func:`task_lsh_sweep`, block ``i`` at ``[i]``: its
    keys, positions and partition offsets (``(bands, n)``, ``(bands, n)``,
    ``(bands, parts + 1)``); those of a spill mapped and checked when asked
    for."""

    def __init__(self, st, blocks: Blocks, names: list, bands: int, parts: int):
        self.st, self.blocks, self.names = st, blocks, names
        self.bands, self.parts = bands, parts

    def __getitem__(self, i: int):
        n = int(self.blocks.blocks[i]["r1"] - self.blocks.blocks[i]["r0"])
        if isinstance(self.names[i], tuple):          # held in memory
            return self.names[i]
        k, pos, off = (self.st.load_npy(name, mmap=True) for name in self.names[i])
        ok = (k.shape == pos.shape == (self.bands, n) and k.dtype == _U64
              and pos.dtype == np.uint32 and off.shape == (self.bands, self.parts + 1)
              and bool(np.all(off[:, 0] == 0)) and bool(np.all(off[:, -1] == n))
              and bool(np.all(off[:, 1:] >= off[:, :-1])))
        if not ok:
            raise DedupError(f"{self.names[i][0]}: a spill of band keys of the wrong shape; "
                             f"run the same command again")
        return k, pos, off


def ranked(off: np.ndarray, members: np.ndarray, rank: np.ndarray | None):
    """Buckets of representative positions as buckets of ranks, ascending in
    each bucket (``rank`` None: the rank is the position)."""
    if rank is None:
        return off, members
    members = rank[members]
    bucket = np.repeat(np.arange(off.size - 1, dtype=np.int64), np.diff(off))
    return off, members[np.lexsort((members, bucket))]


def task_rank_counts(unit: dict, ctx: Ctx) -> list:
    """The load of bucket unit ``unit['source']``'s entries in each bin of
    ranks (:func:`~gpu_dedup.stages.select_ranges.rank_bins` of
    ``unit['n']`` ranks), to cut the ranges by it: an entry weighs one, and
    one more for each earlier member of its bucket it is compared with
    (up to ``unit['window']``), since a range holds its entries' windows of
    pairs."""
    st = ctx.store
    off = st.load_npy(layout.file(unit["source"], layout.OFF))
    members = st.load_npy(layout.file(unit["source"], layout.MEMBERS))
    sizes = np.diff(off)
    place = np.arange(members.size, dtype=np.int64) - np.repeat(off[:-1], sizes)
    del off, sizes
    if unit["ranked"]:
        rank = st.load_npy(layout.POS_RANK, mmap=True)
        members = np.asarray(rank[members])
        del rank
    edges = rank_bins(int(unit["n"]), int(unit["bins"]))
    where = np.searchsorted(edges, members, side="right") - 1
    load = 1.0 + np.minimum(place, int(unit["window"]))
    return np.bincount(where, weights=load, minlength=int(unit["bins"]))[:int(unit["bins"])].tolist()


def task_rank_text(item: dict, ctx: Ctx) -> list:
    """The bytes of text of chunk ``item['key']``'s representatives (numbers
    ``item['g0'] .. item['g1'] - 1``, its documents from ``item['d0']``) in
    each bin of ranks (:func:`~gpu_dedup.stages.select_ranges.rank_bins` of
    ``item['n']`` ranks), to cut the ranges by the shingle sets their own
    documents share: under keep longest the first ranks are the longest
    texts, several times the mean."""
    st = ctx.store
    g0, g1, d0, bins = (int(item[k]) for k in ("g0", "g1", "d0", "bins"))
    local = np.asarray(st.load_npy(layout.exact("reps"), mmap=True)[g0:g1],
                       dtype=np.int64) - d0
    off, _ = st.buffers(layout.chunk_file(item["key"], layout.TEXT))
    size = (np.asarray(off[local + 1], dtype=np.int64)
            - np.asarray(off[local], dtype=np.int64)).astype(np.float64)
    del off
    rank = np.asarray(st.load_npy(layout.POS_RANK, mmap=True)[g0:g1], dtype=np.int64) \
        if item["ranked"] else np.arange(g0, g1, dtype=np.int64)
    where = np.searchsorted(rank_bins(int(item["n"]), bins), rank, side="right") - 1
    return np.bincount(where, weights=size, minlength=bins)[:bins].tolist()


def task_route(unit: dict, ctx: Ctx) -> dict:
    """Bucket unit ``unit['index']``'s buckets by group: ``unit`` has the
    bucket unit's name (``source``), the routed unit's (``name``), the
    range bounds (``bounds``) and the number of the first rank (``base``)."""
    st = ctx.store
    name = unit["name"]
    meta = st.done(name)
    if meta is not None:
        return {**meta, "reused": 1}
    off = st.load_npy(layout.file(unit["source"], layout.OFF))
    members = st.load_npy(layout.file(unit["source"], layout.MEMBERS))
    rank = st.load_npy(layout.POS_RANK) if unit["ranked"] else None
    off, members = ranked(off, members, rank)
    del rank
    if unit.get("base", 0):
        members = members + int(unit["base"])
    files, groups = [], []
    for g, (o, m) in by_group(off, members, np.asarray(unit["bounds"])).items():
        for part, arr in ((layout.OFF, o), (layout.MEMBERS, m)):
            st.save_npy(layout.route_file(name, g, part), arr)
            files.append(layout.route_file(name, g, part))
        groups.append(g)
    meta = {"groups": groups, "pid": os.getpid()}
    st.mark_done(name, meta, files)
    return {**meta, "reused": 0}


def task_group(item: dict, ctx: Ctx) -> dict:
    """Group ``item['group']``'s buckets from the routed units
    ``item['routes']`` (those that have some), made distinct, and their
    entries by range."""
    st = ctx.store
    name = item["name"]
    meta = st.done(name)
    if meta is not None:
        return {**meta, "reused": 1}
    g = item["group"]
    pieces = [(st.load_npy(layout.route_file(r, g, layout.OFF)),
               st.load_npy(layout.route_file(r, g, layout.MEMBERS))) for r in item["routes"]]
    off, members = concat_csr(pieces)
    del pieces
    if len(item["routes"]) > 1:             # one unit's are distinct already
        off, members = distinct_buckets(off, members)
    files = layout.files(name, (layout.OFF, layout.MEMBERS))
    st.save_npy(files[0], off)
    st.save_npy(files[1], members)
    ranges = []
    for k, e in group_entries(off, members, np.asarray(item["bounds"])).items():
        st.save_npy(layout.group_entries(name, k), e)
        files.append(layout.group_entries(name, k))
        ranges.append(k)
    meta = {"buckets": int(off.size - 1), "entries": int(members.size), "ranges": ranges,
            "pid": os.getpid()}
    st.mark_done(name, meta, files)
    return {**meta, "reused": 0}
