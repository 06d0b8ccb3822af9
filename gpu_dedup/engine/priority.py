"""The keep priority of ``keep="longest"``, computed by tasks over the store:
no process holds an array over every representative.

The order: each representative by the length (in code points) of the
longest document of its group of identical texts (the one the group keeps,
``best``; the first of equal length), longest first, then by that
document's position. Keys ``(-length, best)`` are distinct (a document is
the best of one group at most), so the order is total.

1. :func:`task_best`, a chunk's representatives: each one's ``best`` and its
   length, from the chunk's (representative, member) pairs, the lengths of
   its own documents and those of the members (which the exact stage keeps
   beside the pairs, so that a task reads no other chunk's files); a
   regular sample of the chunk's keys, in order.
2. The driver picks splitters from the samples (:func:`splitters`): parts
   of the order of about ``R / parts`` keys each, at most about twice that.
3. :func:`task_route_keys`, a chunk: its keys, by part.
4. :func:`task_order`, a part: its keys sorted, the representatives of its
   ranks in order (from the part's first rank, known from the counts), and
   (representative, rank) routed back by chunk.
5. :func:`task_rank`, a chunk: the rank of each of its representatives.

The driver writes the parts' and chunks' slices end to end
(``pos_of_rank``, ``pos_rank``, ``best``) and holds only a few numbers per
chunk and per part. The result equals a sort of every key at once (the
tests compare them).
"""
from __future__ import annotations

import math
import os

import numpy as np

from . import layout
from .tasks import Ctx

#: Bytes one key takes while its part is sorted (its three numbers, their
#: copies in the sort and the routed pairs), to size the parts.
BYTES_PER_KEY = 96


def sorted_keys(neg_len: np.ndarray, best: np.ndarray) -> np.ndarray:
    """The order of the keys ``(neg_len, best)``."""
    return np.lexsort((best, neg_len))


def part_of(neg_len: np.ndarray, best: np.ndarray, split: np.ndarray) -> np.ndarray:
    """The part of each key: how many of the splitters ``split`` (``(2, P -
    1)``: ``-length`` then ``best``, in order) are at or below it."""
    part = np.zeros(neg_len.size, np.int64)
    for s_len, s_best in split.T:
        part += (neg_len > s_len) | ((neg_len == s_len) & (best >= s_best))
    return part


def task_best(item: dict, ctx: Ctx, chunks: dict) -> dict:
    """Chunk ``item['c']``'s representatives (numbers ``g0 .. g1 - 1``,
    documents ``d0 .. d1 - 1``): their ``best`` and its length, saved, and
    ``item['samples']`` of their keys, evenly spaced in order."""
    st = ctx.store
    c, d0, d1, g0, g1 = (int(item[k]) for k in ("c", "d0", "d1", "g0", "g1"))
    keys = chunks["keys"]
    reps = np.array(st.load_npy(layout.exact("reps"), mmap=True)[g0:g1])
    pair_rep = st.load_npy(layout.exact("pair_rep"), mmap="read")
    p0, p1 = (int(x) for x in pair_rep.searchsorted([d0, d1]))
    members = np.asarray(st.load_npy(layout.exact("pair_member"), mmap="read")[p0:p1])
    group = np.searchsorted(reps, np.asarray(pair_rep[p0:p1]))
    n = reps.size
    docs = np.concatenate([reps, members])
    group = np.concatenate([np.arange(n, dtype=np.int64), group])
    # the representatives are documents of this chunk; their members' lengths
    # came with the pairs (the exact stage read them where they lie)
    own = st.load_npy(layout.chunk_file(keys[c], layout.LENGTHS), mmap=True)
    length = np.concatenate([np.asarray(own[reps - d0], dtype=np.int64),
                             np.array(st.load_npy(layout.exact(layout.PAIR_LENGTHS),
                                                  mmap=True)[p0:p1], dtype=np.int64)])
    del own
    order = np.lexsort((docs, -length, group))
    head = np.ones(order.size, bool)
    head[1:] = group[order][1:] != group[order][:-1]
    best, best_len = docs[order[head]], length[order[head]]
    if best.size != n:
        raise RuntimeError(f"chunk {c}: {best.size} groups for {n} representatives")
    st.save_npy(layout.priority_chunk(c, "best"), best)
    st.save_npy(layout.priority_chunk(c, "best_len"), best_len)
    at = sorted_keys(-best_len, best)
    pick = at[(np.arange(int(item["samples"])) * n) // max(1, int(item["samples"]))] \
        if n else at
    return {"samples": [(-best_len[pick]).tolist(), best[pick].tolist()], "pid": os.getpid()}


def splitters(samples: list, parts: int) -> np.ndarray:
    """``parts - 1`` splitters (``(2, parts - 1)`` int64) at even places of
    the chunks' samples (each a ``[neg_lens, bests]`` pair), in order."""
    neg = np.concatenate([np.asarray(s[0], dtype=np.int64) for s in samples] or [[]])
    best = np.concatenate([np.asarray(s[1], dtype=np.int64) for s in samples] or [[]])
    if parts <= 1 or not neg.size:
        return np.zeros((2, 0), np.int64)
    order = sorted_keys(neg, best)
    at = order[(np.arange(1, parts) * neg.size) // parts]
    return np.stack([neg[at], best[at]]).astype(np.int64)


def task_route_keys(item: dict, ctx: Ctx, split: np.ndarray) -> dict:
    """Chunk ``item['c']``'s keys and representative numbers, by part of the
    order: ``(3, n)`` int64 files (``-length``, ``best``, representative)."""
    st = ctx.store
    c, g0 = int(item["c"]), int(item["g0"])
    best = st.load_npy(layout.priority_chunk(c, "best"))
    neg = -st.load_npy(layout.priority_chunk(c, "best_len"))
    rep = np.arange(g0, g0 + best.size, dtype=np.int64)
    part = part_of(neg, best, split)
    counts = np.bincount(part, minlength=split.shape[1] + 1)
    for j in np.flatnonzero(counts):
        at = part == j
        st.save_npy(layout.priority_route(c, int(j)), np.stack([neg[at], best[at], rep[at]]))
    return {"counts": counts.tolist(), "pid": os.getpid()}


def task_order(item: dict, ctx: Ctx, rep_starts: np.ndarray) -> dict:
    """Part ``item['part']`` of the order, ranks from ``item['rank0']``: its
    keys from the chunks ``item['chunks']``, sorted; the representative of
    each of its ranks saved, and each (representative, rank) routed to the
    chunk of the representative (``rep_starts``: each chunk's first
    representative number)."""
    st = ctx.store
    j, rank0 = int(item["part"]), int(item["rank0"])
    keys = np.concatenate([st.load_npy(layout.priority_route(c, j)) for c in item["chunks"]]
                          or [np.zeros((3, 0), np.int64)], axis=1)
    rep = keys[2][sorted_keys(keys[0], keys[1])]
    del keys
    st.save_npy(layout.priority_order(j), rep)
    rank = np.arange(rank0, rank0 + rep.size, dtype=np.int64)
    chunk = np.searchsorted(rep_starts, rep, side="right") - 1
    touched = np.flatnonzero(np.bincount(chunk, minlength=len(rep_starts)))
    for c in touched:
        at = chunk == c
        st.save_npy(layout.priority_inverse(j, int(c)), np.stack([rep[at], rank[at]]))
    return {"chunks": touched.tolist(), "n": int(rep.size), "pid": os.getpid()}


def task_rank(item: dict, ctx: Ctx) -> dict:
    """The rank of each of chunk ``item['c']``'s representatives (``g0 ..
    g1 - 1``), from the parts ``item['parts']`` that routed some."""
    st = ctx.store
    c, g0, g1 = int(item["c"]), int(item["g0"]), int(item["g1"])
    rank = np.full(g1 - g0, -1, np.int64)
    for j in item["parts"]:
        rep, r = st.load_npy(layout.priority_inverse(int(j), c))
        rank[rep - g0] = r
    if rank.size and int(rank.min()) < 0:
        raise RuntimeError(f"chunk {c}: {int(np.count_nonzero(rank < 0))} representatives "
                           f"have no rank")
    st.save_npy(layout.priority_chunk(c, "rank"), rank)
    return {"pid": os.getpid()}


def chunk_reps(runner) -> np.ndarray:
    """The number of the first representative of each of ``runner``'s
    chunks, and their count at the end: chunk ``c``'s representatives are
    ``g[c] .. g[c + 1] - 1`` (the representatives are sorted documents,
    mapped, not read in)."""
    reps = runner.store.load_npy(layout.exact("reps"), mmap=True)
    return np.searchsorted(reps, np.asarray(runner.doc_starts, dtype=np.int64)).astype(np.int64)


def keep_priority(runner) -> None:
    """Write ``layout.POS_OF_RANK``, ``layout.POS_RANK`` and ``layout.BEST``
    of ``runner``'s representatives (see the module docstring), through its
    executor; the driver holds a few numbers per chunk and per part."""
    st = runner.store
    starts = np.asarray(runner.doc_starts, dtype=np.int64)
    g = chunk_reps(runner)
    R = int(runner.R)
    C = len(runner.chunks)
    parts = max(1, math.ceil(R * BYTES_PER_KEY / max(1, runner.plan.task_bytes)))
    chunks = {"keys": [c["key"] for c in runner.chunks]}
    items = [{"c": c, "d0": int(starts[c]), "d1": int(starts[c + 1]), "g0": int(g[c]),
              "g1": int(g[c + 1]), "samples": 2 * parts} for c in range(C)]
    got = runner._map("buckets", task_best, items, chunks)
    split = splitters([r["samples"] for r in got], parts)
    routed = runner._map("buckets", task_route_keys, items, split)
    counts = np.array([r["counts"] for r in routed], dtype=np.int64).reshape(C, -1)
    total = counts.sum(axis=0)
    rank0 = np.concatenate([[0], np.cumsum(total)])
    orders = [{"part": j, "rank0": int(rank0[j]),
               "chunks": np.flatnonzero(counts[:, j]).tolist()}
              for j in range(total.size)]
    ordered = runner._map("buckets", task_order, orders, g[:-1])
    inverse = [[] for _ in range(C)]
    for j, r in enumerate(ordered):
        for c in r["chunks"]:
            inverse[c].append(j)
    runner._map("buckets", task_rank, [dict(it, parts=inverse[it["c"]]) for it in items])
    st.concat_npy(layout.POS_OF_RANK, [layout.priority_order(j) for j in range(total.size)],
                  np.int64)
    st.concat_npy(layout.POS_RANK, [layout.priority_chunk(c, "rank") for c in range(C)],
                  np.int64)
    st.concat_npy(layout.BEST, [layout.priority_chunk(c, "best") for c in range(C)], np.int64)
    for c in range(C):
        for name in ("best", "best_len", "rank"):
            st.discard(layout.priority_chunk(c, name))
        for j in np.flatnonzero(counts[c]):
            st.discard(layout.priority_route(c, int(j)))
    for j, r in enumerate(ordered):
        st.discard(layout.priority_order(j))
        for c in r["chunks"]:
            st.discard(layout.priority_inverse(j, c))
