"""The tasks over partitions of the 128-bit fingerprints: the ``exact``
stage's groups of identical texts (:func:`task_exact` per partition, then
:func:`task_exact_slice` per chunk of documents, which merges that chunk's
slice of every partition), and the first repeated id (:func:`task_ids`).
With many partitions (:data:`SPLIT_PARTS`), each chunk's fingerprints are
first ordered by partition (:func:`task_split`), so that a partition reads
its own slice of each chunk: the fingerprints are read once, not once per
partition.

Module-level functions, so that Dask workers import them.
"""
from __future__ import annotations

import os

import numpy as np

from ..stages.exact import exact_representatives
from . import layout
from .records import Documents
from .tasks import Ctx, backend_of, host

_U64 = np.uint64


def _partition(fp: np.ndarray, parts: int, p: int) -> np.ndarray:
    if parts == 1:
        return np.ones(fp.shape[0], dtype=bool)
    return fp[:, 0] % _U64(parts) == _U64(p)


def task_split(item: tuple, ctx: Ctx, docs: Documents) -> dict:
    """Chunk ``c``'s fingerprints ``name`` (of its active documents, when
    ``active``; with their lengths, when ``lengths``) ordered by their
    partition of ``parts``, positions ascending in each, and the bounds of
    the partitions (:func:`gpu_dedup.engine.layout.fingerprint_split`). A
    chunk without the file has no rows."""
    name, c, parts, active, lengths = item
    st = ctx.store
    unit = layout.fingerprint_split(name, parts, c)
    meta = st.done(unit)
    if meta is not None:
        return {**meta, "reused": 1}
    fp, ix, length = _chunk_fingerprints(st, docs, name, c, active, lengths)
    # the narrowest type of the partitions' numbers: NumPy's stable sort of
    # 8- and 16-bit numbers is a radix sort
    part = (fp[:, 0] % _U64(parts)).astype(np.min_scalar_type(max(parts - 1, 0)))
    order = np.argsort(part, kind="stable")
    bounds = np.searchsorted(part[order], np.arange(parts + 1, dtype=np.int64)).astype(np.int64)
    del part
    arrays = {"fp": fp[order], "ix": ix[order], "bounds": bounds}
    if lengths:
        arrays["lengths"] = length[order]
    del fp, ix, length, order
    for n, arr in arrays.items():
        st.save_npy(layout.file(unit, f"{n}.npy"), arr)
    meta = {"rows": int(arrays["ix"].size)}
    st.mark_done(unit, meta, layout.files(unit, [f"{n}.npy" for n in arrays]))
    return {**meta, "reused": 0}


def task_exact(item: tuple, ctx: Ctx, docs: Documents) -> dict:
    """Representatives and exact duplicates among the documents whose
    fingerprint falls in partition ``p`` of ``parts`` (read from the
    :func:`task_split` units when ``split``)."""
    p, parts, split = item
    st = ctx.store
    unit = layout.exact_part(parts, p)
    meta = st.done(unit)
    if meta is not None and meta.get("pairs"):
        return {**meta, "reused": 1}
    longest = ctx.cfg.keep == "longest"
    fp, ix, length = _partition_of(st, docs, layout.FP, parts, p, active=True,
                                   lengths=longest, split=split)
    if ctx.cfg.exact and ix.size:
        be = backend_of(ctx)
        rep = ix[host(be, be.exact_representatives(fp, np.ones(ix.size, dtype=bool)))]
    else:
        rep = ix
    del fp
    is_rep = rep == ix
    members, member_rep = ix[~is_rep], rep[~is_rep]
    order = np.lexsort((members, member_rep))
    names = layout.exact_slice_arrays(longest)
    arrays = (ix[is_rep], members, member_rep, member_rep[order], members[order])
    if longest:
        arrays += (length[~is_rep][order],)
    for name, arr in zip(names, arrays):
        st.save_npy(layout.file(unit, f"{name}.npy"), arr)
    del rep, ix, is_rep, members, member_rep, order, arrays, length
    meta = {"pid": os.getpid(), "pairs": 1}
    st.mark_done(unit, meta, layout.files(unit, [f"{n}.npy" for n in names]))
    return {**meta, "reused": 0}


def task_exact_slice(item: tuple, ctx: Ctx, docs: Documents) -> dict:
    """The exact stage's arrays restricted to the positions of chunk ``c``,
    merged from the ``parts`` partitions: its representatives, its members
    (and their representatives) in position order, and the (representative,
    member) pairs whose representative is in the chunk, sorted by
    representative then member. Their counts."""
    c, parts = item
    st = ctx.store
    unit = layout.exact_slice(parts, c)
    meta = st.done(unit)
    if meta is not None:
        return {**meta, "reused": 1}
    lo, hi = int(docs.starts[c]), int(docs.starts[c + 1])
    longest = ctx.cfg.keep == "longest"
    slice_names = layout.exact_slice_arrays(longest)
    pair_names = layout.exact_pair_arrays(longest)
    got: dict = {n: [] for n in slice_names}
    for p in range(parts):
        part = layout.exact_part(parts, p)

        def load(name, part=part):              # read a slice, nothing mapped
            return st.load_npy(layout.file(part, f"{name}.npy"), mmap="read")
        for key, names in (("reps", ("reps",)), ("members", ("members", "member_rep")),
                           ("pair_rep", pair_names)):
            a, b = (int(x) for x in load(key).searchsorted([lo, hi]))
            for n in names:
                got[n].append(np.asarray(load(n)[a:b], dtype=np.int64))
    arr = {n: np.concatenate(v) if v else np.zeros(0, np.int64) for n, v in got.items()}
    del got
    arr["reps"].sort()
    o = np.argsort(arr["members"], kind="stable")
    arr["members"], arr["member_rep"] = arr["members"][o], arr["member_rep"][o]
    o = np.lexsort((arr["pair_member"], arr["pair_rep"]))
    for n in pair_names:
        arr[n] = arr[n][o]
    del o
    for n in slice_names:
        st.save_npy(layout.file(unit, f"{n}.npy"), arr[n])
    meta = {"reps": int(arr["reps"].size), "members": int(arr["members"].size),
            "pairs": int(arr["pair_rep"].size)}
    st.mark_done(unit, meta, layout.files(unit, [f"{n}.npy" for n in slice_names]))
    return {**meta, "reused": 0}


#: From this many partitions on, each chunk's fingerprints are ordered by
#: partition once (:func:`task_split`) and each partition reads its slices;
#: below, each partition reads every chunk's fingerprints and keeps its own,
#: which costs less than writing and reading the split while they are few
#: (10M documents, the stage's seconds read directly against split: 1.7-1.8
#: against 2.3 in 3 partitions, 2.7-3.0 against 2.4-2.6 in 8). The
#: partitions grow with the documents a budget: without the split, a
#: billion documents under 4 GiB would read every fingerprint 30 times.
SPLIT_PARTS = 8

#: Bytes a document holds at the peak of a task over one partition of the
#: 128-bit fingerprints (:func:`task_exact`, :func:`task_ids`): its
#: fingerprint and position, their copies in the partition, and the sort.
FINGERPRINT_TASK_BYTES = 120


def _chunk_fingerprints(st, docs: Documents, name: str, ci: int, active: bool,
                        lengths: bool, parts: int = 1, p: int = 0) -> tuple:
    """Chunk ``ci``'s fingerprints ``name`` in partition ``p`` of ``parts``
    (all of them when ``parts == 1``), their global positions and (with
    ``lengths``) their lengths; only active documents when ``active``; none
    when the chunk has no such file."""
    c = docs.chunks[ci]
    path = layout.chunk_file(c["key"], name)
    if not active and not st.exists(path):
        return np.zeros((0, 2), _U64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    fp = st.load_npy(path)
    sel = _partition(fp, parts, p)
    if active:
        sel &= st.load_npy(layout.chunk_file(c["key"], layout.ACTIVE))
    length = np.asarray(st.load_npy(layout.chunk_file(c["key"], layout.LENGTHS)),
                        dtype=np.int64)[sel] if lengths else None
    return fp[sel], np.flatnonzero(sel).astype(np.int64) + int(docs.starts[ci]), length


def _partition_of(st, docs: Documents, name: str, parts: int, p: int,
                  active: bool = False, lengths: bool = False, split: bool = False) -> tuple:
    """The 128-bit fingerprints ``name`` (``fp.npy`` or ``idfp.npy``) of the
    documents in partition ``p`` of ``parts``, and their global positions;
    only active documents when ``active``; chunks without the file add none.
    Third, with ``lengths``, their lengths (each chunk's ``lengths.npy``),
    else None. With ``split``, each chunk's slice of its :func:`task_split`
    unit (made with the same ``active`` and ``lengths``)."""
    fps, idx, lens = [], [], []
    for ci in range(len(docs.chunks)):
        if split:
            unit = layout.fingerprint_split(name, parts, ci)
            a, b = (int(x) for x in st.load_npy(layout.file(unit, "bounds.npy"))[p:p + 2])

            def part(n, unit=unit, a=a, b=b):
                return np.array(st.load_npy(layout.file(unit, f"{n}.npy"), mmap=True)[a:b])
            fp, ix = part("fp"), part("ix")
            length = part("lengths") if lengths else None
        else:
            fp, ix, length = _chunk_fingerprints(st, docs, name, ci, active, lengths, parts, p)
        fps.append(fp)
        idx.append(ix)
        if lengths:
            lens.append(length)
        del fp, ix, length
    return (np.concatenate(fps) if fps else np.zeros((0, 2), _U64),
            np.concatenate(idx) if idx else np.zeros(0, np.int64),
            (np.concatenate(lens) if lens else np.zeros(0, np.int64)) if lengths else None)


def task_ids(item: tuple, ctx: Ctx, docs: Documents) -> list | None:
    """The first repeated id among the documents whose id fingerprint falls
    in partition ``p`` of ``parts``: ``[first, second]`` global positions
    (the rule of :mod:`gpu_dedup.ids`), or None; read from the
    :func:`task_split` units when ``split``. The smallest pair over the
    partitions is the corpus's."""
    p, parts, split = item
    fp, ix, _ = _partition_of(ctx.store, docs, layout.IDFP, parts, p, split=split)
    if not ix.size:
        return None
    rep = ix[exact_representatives(fp, np.ones(ix.size, dtype=bool))]
    dups = np.flatnonzero(rep != ix)
    if not dups.size:
        return None
    first = rep[dups]
    g = int(first.min())
    return [g, int(ix[dups][first == g].min())]
