"""The tasks over partitions of the 128-bit fingerprints: the ``exact``
stage's groups of identical texts (:func:`task_exact` per partition, then
:func:`task_exact_slice` per chunk of documents, which merges that chunk's
slice of every partition), and the first repeated id (:func:`task_ids`).

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


def task_exact(item: tuple, ctx: Ctx, docs: Documents) -> dict:
    """Representatives and exact duplicates among the documents whose
    fingerprint falls in partition ``p`` of ``parts``."""
    p, parts = item
    st = ctx.store
    unit = layout.exact_part(parts, p)
    meta = st.done(unit)
    if meta is not None and meta.get("pairs"):
        return {**meta, "reused": 1}
    longest = ctx.cfg.keep == "longest"
    fp, ix, length = _partition_of(st, docs, layout.FP, parts, p, active=True,
                                   lengths=longest)
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

        def load(name, part=part):
            return st.load_npy(layout.file(part, f"{name}.npy"), mmap=True)
        for key, names in (("reps", ("reps",)), ("members", ("members", "member_rep")),
                           ("pair_rep", pair_names)):
            k = load(key)
            a, b = np.searchsorted(k, [lo, hi])
            for n in names:
                got[n].append(np.array(load(n)[a:b], dtype=np.int64))
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


#: Bytes a document holds at the peak of a task over one partition of the
#: 128-bit fingerprints (:func:`task_exact`, :func:`task_ids`): its
#: fingerprint and position, their copies in the partition, and the sort.
FINGERPRINT_TASK_BYTES = 120


def _partition_of(st, docs: Documents, name: str, parts: int, p: int,
                  active: bool = False, lengths: bool = False) -> tuple:
    """The 128-bit fingerprints ``name`` (``fp.npy`` or ``idfp.npy``) of the
    documents in partition ``p`` of ``parts``, and their global positions;
    only active documents when ``active``; chunks without the file add none.
    Third, with ``lengths``, their lengths (each chunk's ``lengths.npy``),
    else None."""
    fps, idx, lens = [], [], []
    for ci, c in enumerate(docs.chunks):
        path = layout.chunk_file(c["key"], name)
        if not active and not st.exists(path):
            continue
        fp = st.load_npy(path)
        sel = _partition(fp, parts, p)
        if active:
            sel &= st.load_npy(layout.chunk_file(c["key"], layout.ACTIVE))
        fps.append(fp[sel])
        idx.append(np.flatnonzero(sel).astype(np.int64) + int(docs.starts[ci]))
        if lengths:
            lens.append(np.asarray(st.load_npy(layout.chunk_file(c["key"], layout.LENGTHS)),
                                   dtype=np.int64)[sel])
        del fp
    return (np.concatenate(fps) if fps else np.zeros((0, 2), _U64),
            np.concatenate(idx) if idx else np.zeros(0, np.int64),
            (np.concatenate(lens) if lens else np.zeros(0, np.int64)) if lengths else None)


def task_ids(item: tuple, ctx: Ctx, docs: Documents) -> list | None:
    """The first repeated id among the documents whose id fingerprint falls
    in partition ``p`` of ``parts``: ``[first, second]`` global positions
    (the rule of :mod:`gpu_dedup.ids`), or None. The smallest pair over the
    partitions is the corpus's."""
    p, parts = item
    fp, ix, _ = _partition_of(ctx.store, docs, layout.IDFP, parts, p)
    if not ix.size:
        return None
    rep = ix[exact_representatives(fp, np.ones(ix.size, dtype=bool))]
    dups = np.flatnonzero(rep != ix)
    if not dups.size:
        return None
    first = rep[dups]
    g = int(first.min())
    return [g, int(ix[dups][first == g].min())]
