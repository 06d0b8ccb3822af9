"""The tasks that cut the buckets into rank ranges for greedy selection
(:mod:`gpu_dedup.stages.select_ranges`), one unit of work each:

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
from ..stages.lsh import distinct_buckets
from ..stages.select_ranges import by_group, group_entries, rank_bins
from . import layout
from .tasks import Ctx


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
