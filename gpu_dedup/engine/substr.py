"""Exact-substring deduplication as tasks over partitions, run by the engine.

The same store, executors and read units as near-duplicate detection
(:mod:`gpu_dedup.engine.tasks`); in memory and out of core the stages and
their results are the same, only where the arrays live differs. The stages:

1. ``read``, per read unit: the original texts, ids and locations.
2. ``hash``, per chunk: the units, the hash of each distinct normalized unit
   (XXH64, seeded), each unit's hash, the chunk's vocabulary sorted by hash,
   and its windows' rolling hashes sorted by hash (with their first units).
3. ``vocab``, per range of the hash space: two different units with one hash
   would make two different windows look alike; if any range finds such a
   pair, ``hash`` and ``vocab`` run again with the next seed. So the unit
   hashes are exact identities and no result depends on them.
4. ``windows``, per range of the hash space: every window of the range from
   every chunk, sorted by hash then position; equal hashes are compared unit
   by unit, so each window learns its first occurrence and how many there
   are. The removed windows (their first unit, and that of their first
   occurrence) are saved sorted by position.
5. ``cut``, per chunk: the removed units, the spans, and the texts with the
   spans cut out.

Memory: a chunk's tasks hold about 110 bytes a unit (so chunks are sized per
unit kind), a window range about 100 bytes a window, a vocabulary range the
strings and 40 bytes each. The units' hashes of the whole corpus (8 bytes a
unit) are one stored array, memory-mapped by the window tasks on disk; the
runner itself holds 8 bytes a document (their units' offsets).
"""
from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from ..compute import pc
from ..arrays import arrow, string_ranges
from ..errors import DedupError
from ..kernels import cpu as cpu_kernels
from ..kernels import substr as K
from ..stages.normalize import text_buffers
from . import layout
from .base import RunnerBase
from .records import Documents
from .substr_output import SubstrOutputs, report_dict  # noqa: F401  (callers import it here)
from .tasks import Ctx, backend_of, chunk_ids, chunk_meta, host, read_unit

log = logging.getLogger("gpu_dedup")

#: A chunk's input bytes are a task's share divided by this, per unit kind
#: (about 110 bytes of arrays per unit: a word is about 6 bytes, a
#: character 1 to 4).
CHUNK_SHARE = {"word": 24, "char": 128}
#: Peak memory of an in-memory run per input byte, per unit kind.
MEMORY_PER_BYTE = {"word": 24, "char": 128}
#: Bytes a window range holds per window, and a vocabulary range per entry
#: (besides its strings).
WINDOW_BYTES = 100
VOCAB_BYTES = 40
#: Seeds tried before giving up on finding collision-free unit hashes.
SEEDS = 4
_U64 = np.uint64


def _range(p: int, parts: int) -> tuple[int, int | None]:
    """Bounds ``[lo, hi)`` of range ``p`` of ``parts`` of the 64-bit hash
    space (``hi`` None: to the end)."""
    lo = (p << 64) // parts
    return lo, (None if p == parts - 1 else ((p + 1) << 64) // parts)


def _slice(sorted_h: np.ndarray, lo: int, hi: int | None) -> tuple[int, int]:
    a = int(np.searchsorted(sorted_h, _U64(lo), side="left"))
    b = sorted_h.shape[0] if hi is None else int(np.searchsorted(sorted_h, _U64(hi),
                                                                      side="left"))
    return a, b


# -- prepare --------------------------------------------------------------------

def _save_texts(ctx: Ctx, unit: dict, key: str, d: dict) -> tuple[dict, list]:
    """Store a chunk's original texts, ids (with their fingerprints) and
    locations; its metadata and the files written."""
    st = ctx.store
    texts = d["texts"]
    if texts.type != pa.large_string():
        texts = texts.cast(pa.large_string())
    n = len(texts)
    p = layout.chunk(key)
    st.save_arrow(layout.file(p, layout.TEXT), {"text": texts})
    ids = chunk_ids(ctx, unit, d)
    if ids is not None:
        ioff, idata = text_buffers(ids)
        st.save_npy(layout.file(p, layout.IDFP), cpu_kernels.text_hash128(ioff, idata))
        st.save_arrow(layout.file(p, layout.IDS), {"id": ids})
    st.save_npy(layout.file(p, layout.LOC), np.asarray(d["lines"], dtype=np.int64))
    meta = chunk_meta(unit, key, d, n)
    meta["text_bytes"] = int(pc.sum(pc.binary_length(texts)).as_py() or 0) if n else 0
    files = layout.files(p, (layout.TEXT, layout.LOC))
    if ids is not None:
        files += layout.files(p, (layout.IDFP, layout.IDS))
    return meta, files


def task_prepare(unit: dict, ctx: Ctx) -> dict:
    return read_unit(unit, ctx, _save_texts)


# -- hash -----------------------------------------------------------------------

def chunk_units(ctx: Ctx, c: dict, unit: str):
    """A chunk's text buffers and units (:func:`kernels.substr.units`)."""
    off, data = ctx.store.buffers(layout.chunk_file(c["key"], layout.TEXT))
    off = np.asarray(off, np.int64)
    data = np.asarray(data)
    return off, data, K.units(off, data, unit == "word")


def unit_hashes(be, units: pa.Array, normalize, seed: int):
    """Each unit's hash, and the distinct normalized units (the chunk's
    vocabulary) with their hashes: ``(uh, vocab, vocab_h)`` (host arrays)."""
    enc = pc.dictionary_encode(units)
    idx = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    vocab = enc.dictionary
    if normalize:
        again = pc.dictionary_encode(be.normalize(vocab, normalize))
        idx = again.indices.to_numpy(zero_copy_only=False).astype(np.int64)[idx]
        vocab = again.dictionary
    vocab = vocab.cast(pa.large_string())
    voff, vdata = text_buffers(vocab)
    vh = host(be, be.string_hashes(np.asarray(voff, np.int64), np.asarray(vdata), seed))
    return vh[idx], vocab, vh


def task_hash(ci: int, ctx: Ctx, step: Step) -> dict:
    st, job = ctx.store, step.job
    c = step.docs.chunks[ci]
    seed = step.seed
    name = layout.hash_chunk(seed, c["key"])
    meta = st.done(name)
    if meta is not None:
        return {**meta, "reused": 1}
    off, data, (u_off, b0, b1, _c0, _c1) = chunk_units(ctx, c, job["unit"])
    del _c0, _c1
    U = int(u_off[-1])
    be = backend_of(ctx)
    if U:
        uh, vocab, vh = unit_hashes(be, string_ranges(data, b0, b1), tuple(job["normalize"]),
                                    seed)
    else:
        uh, vocab, vh = np.zeros(0, _U64), arrow([], pa.large_string()), np.zeros(0, _U64)
    del b0, b1, off, data
    h, start = be.substr_windows(uh, u_off, job["L"])
    order = be.stable_argsort(h)
    st.save_npy(layout.file(name, "wh.npy"), host(be, h[order]))
    st.save_npy(layout.file(name, "ws.npy"), host(be, start[order]))
    W = int(h.size)
    del h, start, order
    vo = np.argsort(vh, kind="stable")
    st.save_npy(layout.file(name, "vh.npy"), vh[vo])
    st.save_arrow(layout.file(name, "vocab.arrow"), {"unit": vocab.take(arrow(vo))})
    st.save_npy(layout.file(name, "uh.npy"), uh)
    st.save_npy(layout.file(name, "units.npy"), np.diff(u_off).astype(np.int64))
    meta = {"units": U, "windows": W, "vocab": int(vh.size),
            "vocab_bytes": int(vocab.nbytes), "pid": os.getpid()}
    st.mark_done(name, meta, layout.files(name, layout.HASH_FILES))
    return {**meta, "reused": 0}


# -- vocab ----------------------------------------------------------------------

def task_vocab(item: tuple, ctx: Ctx, step: Step) -> dict:
    """Whether two different units of hash range ``p`` share a hash."""
    p, parts = item
    st, seed = ctx.store, step.seed
    name = layout.vocab_part(seed, parts, p)
    meta = st.done(name)
    if meta is not None:
        return {**meta, "reused": 1}
    lo, hi = _range(p, parts)
    hs, ss = [], []
    for c in step.docs.chunks:
        chunk = layout.hash_chunk(seed, c["key"])
        vh = st.load_npy(layout.file(chunk, "vh.npy"), mmap=True)
        a, b = _slice(vh, lo, hi)
        if b > a:
            hs.append(np.array(vh[a:b]))
            ss.append(st.column(layout.file(chunk, "vocab.arrow")).slice(a, b - a))
        del vh
    collision = None
    if hs:
        h = np.concatenate(hs)
        s = pa.concat_arrays(ss)
        del hs, ss
        order = np.argsort(h, kind="stable")
        h = h[order]
        s = s.take(arrow(order))
        same = np.flatnonzero(h[1:] == h[:-1])
        if same.size:
            eq = pc.equal(s.take(arrow(same)), s.take(arrow(same + 1)))
            bad = np.flatnonzero(~eq.to_numpy(zero_copy_only=False))
            if bad.size:
                i = int(same[bad[0]])
                collision = [s[i].as_py(), s[i + 1].as_py()]
    meta = {"collision": collision, "pid": os.getpid()}
    st.mark_done(name, meta)
    return {**meta, "reused": 0}


# -- windows --------------------------------------------------------------------

def task_windows(item: tuple, ctx: Ctx, step: Step) -> dict:
    """First occurrences and counts of the windows of hash range ``p``; saves
    the removed ones sorted by their first unit."""
    p, parts = item
    st, job = ctx.store, step.job
    seed, L, keep = step.seed, job["L"], job["keep"]
    name = layout.windows_part(seed, parts, p)
    meta = st.done(name)
    if meta is not None:
        return {**meta, "reused": 1}
    lo, hi = _range(p, parts)
    starts = step.unit_starts
    hs, ss = [], []
    for ci, c in enumerate(step.docs.chunks):
        chunk = layout.hash_chunk(seed, c["key"])
        wh = st.load_npy(layout.file(chunk, "wh.npy"), mmap=True)
        a, b = _slice(wh, lo, hi)
        if b > a:
            hs.append(np.array(wh[a:b]))
            ss.append(np.array(st.load_npy(layout.file(chunk, "ws.npy"), mmap=True)[a:b])
                      + int(starts[ci]))
        del wh
    h = np.concatenate(hs) if hs else np.zeros(0, _U64)
    s = np.concatenate(ss) if ss else np.zeros(0, np.int64)
    del hs, ss
    W = int(h.size)
    top = []
    distinct = 0
    rs = rf = np.zeros(0, np.int64)
    if W:
        be = backend_of(ctx)
        order = host(be, be.stable_argsort(h))    # chunks in order: (hash, position) order
        h = h[order]
        uh = st.load_npy(layout.hash_file(seed, layout.UNIT_HASHES), mmap=True)
        first, count = K.distinct_windows(h, order, s, uh, L)
        del h, order, uh
        widx = np.arange(W, dtype=np.int64)
        firsts = np.flatnonzero(first == widx)
        distinct = int(firsts.size)
        rep = firsts[count[firsts] > 1]
        best = rep[np.lexsort((s[rep], -count[rep]))][:job["top"]]
        top = [[int(s[w]), int(count[w])] for w in best.tolist()]
        removed = first != widx if keep == "first" else count[first] > 1
        del widx, count
        rs = s[removed]
        rf = s[first[removed]]
        o = np.argsort(rs)
        rs, rf = rs[o], rf[o]
        del first, removed, o
    st.save_npy(layout.file(name, "rm_start.npy"), rs)
    st.save_npy(layout.file(name, "rm_first.npy"), rf)
    meta = {"windows": W, "distinct": distinct, "removed": int(rs.size), "top": top,
            "pid": os.getpid()}
    st.mark_done(name, meta, layout.files(name, layout.WINDOWS_FILES))
    return {**meta, "reused": 0}


# -- cut ------------------------------------------------------------------------

def cut_texts(off, data, b0, b1, su, eu, n):
    """The texts of ``(off, data)`` without the byte ranges from the start of
    unit ``su[k]`` to the end of unit ``eu[k]`` (spans in order)."""
    seg_s = np.sort(np.concatenate([off[:-1], b1[eu]]))
    seg_e = np.sort(np.concatenate([b0[su], off[1:]]))
    seg_doc = np.searchsorted(off, seg_e, "left") - 1      # (right for non-empty segments)
    length = seg_e - seg_s
    keep = length > 0
    new_len = np.bincount(seg_doc[keep], weights=length[keep], minlength=n).astype(np.int64)
    cut = string_ranges(data, seg_s[keep], seg_e[keep])
    cut_off = np.concatenate([[0], np.cumsum(new_len)]).astype(np.int64)
    return pa.LargeStringArray.from_buffers(n, pa.py_buffer(cut_off),
                                            cut.buffers()[2] if len(cut) else pa.py_buffer(b""))


def task_cut(ci: int, ctx: Ctx, step: Step) -> dict:
    st, job = ctx.store, step.job
    c = step.docs.chunks[ci]
    seed, L, parts = step.seed, job["L"], step.parts
    name = layout.cut_chunk(seed, parts, c["key"])
    meta = st.done(name)
    if meta is not None:
        return {**meta, "reused": 1}
    off, data, (u_off, b0, b1, c0, c1) = chunk_units(ctx, c, job["unit"])
    n = int(c["n"])
    U = int(u_off[-1])
    U0 = int(step.unit_starts[ci])
    rss, rfs = [], []
    for p in range(parts):
        win = layout.windows_part(seed, parts, p)
        rs = st.load_npy(layout.file(win, "rm_start.npy"), mmap=True)
        a = int(np.searchsorted(rs, U0, side="left"))
        b = int(np.searchsorted(rs, U0 + U, side="left"))
        if b > a:
            rss.append(np.array(rs[a:b]) - U0)
            rfs.append(np.array(st.load_npy(layout.file(win, "rm_first.npy"), mmap=True)[a:b]))
        del rs
    s = np.concatenate(rss) if rss else np.zeros(0, np.int64)
    f = np.concatenate(rfs) if rfs else np.zeros(0, np.int64)
    o = np.argsort(s)
    s, f = s[o], f[o]
    per_doc = np.diff(u_off).astype(np.int64)
    flag = np.zeros(U, bool)
    if s.size:
        delta = np.bincount(s, minlength=U + 1) - np.bincount(s + L, minlength=U + 1)
        flag = np.cumsum(delta)[:U] > 0
    doc_of = np.repeat(np.arange(n, dtype=np.int64), per_doc)
    removed_units = np.bincount(doc_of[flag], minlength=n).astype(np.int64)
    same_doc = doc_of[1:] == doc_of[:-1]
    new = flag.copy()
    new[1:] &= ~(flag[:-1] & same_doc)
    end = flag.copy()
    end[:-1] &= ~(flag[1:] & same_doc)
    su, eu = np.flatnonzero(new), np.flatnonzero(end)
    del new, end, same_doc, flag
    span_doc = doc_of[su]
    # the removed window starting at a span's first unit, and where its first occurrence is
    first_unit = f[np.searchsorted(s, su)] if su.size else np.zeros(0, np.int64)
    doc_units = st.load_npy(layout.hash_file(seed, layout.DOC_UNITS), mmap=True)
    span_first = np.searchsorted(doc_units, first_unit, side="right") - 1
    del doc_units
    st.save_arrow(layout.file(name, "text.arrow"),
                  {"text": cut_texts(off, data, b0, b1, su, eu, n)})
    st.save_npy(layout.file(name, "units.npy"), per_doc)
    st.save_npy(layout.file(name, "removed.npy"), removed_units)
    st.save_npy(layout.file(name, "span_doc.npy"), span_doc)
    st.save_npy(layout.file(name, "span_start.npy"), c0[su])
    st.save_npy(layout.file(name, "span_end.npy"), c1[eu])
    st.save_npy(layout.file(name, "span_first.npy"), span_first.astype(np.int64))
    meta = {"spans": int(su.size), "removed": int(removed_units.sum()), "pid": os.getpid()}
    st.mark_done(name, meta, layout.files(name, layout.CUT_FILES))
    return {**meta, "reused": 0}


# -- the runner -----------------------------------------------------------------

@dataclass(frozen=True)
class Step:
    """What the substring tasks read besides their item: the chunks, the
    command's parameters (``unit``, ``L``, ``keep``, ``normalize``, ``top``;
    never changed by a stage), the seed of the unit hashes, and what the
    ``hash`` stage found (each chunk's first unit: ``unit_starts``) and the
    ``windows`` stage laid out (its hash ranges: ``parts``)."""

    docs: Documents
    job: dict
    seed: int = 0
    unit_starts: np.ndarray | None = None
    parts: int | None = None


class SubstrRunner(RunnerBase, SubstrOutputs):
    """The stages above, over a store through an executor.

    Args:
        job: ``unit``, ``L`` (the window), ``keep``, ``normalize`` (steps)
            and ``top`` (how many repeated passages to list).
        The rest as for :class:`gpu_dedup.engine.base.RunnerBase`.
    """

    def __init__(self, job: dict, backend, store, executor, plan, **kw):
        super().__init__(backend, store, executor, plan, **kw)
        self.job = dict(job)
        self.step: Step | None = None

    def run(self, units: list) -> None:
        with self.stage("read"):
            docs = self.read(units, task_prepare)
        for seed in range(SEEDS):
            with self.stage("hash"):
                step = self.hash(Step(docs, self.job, seed))
            with self.stage("vocab"):
                collision = self.vocab(step)
            if collision is None:
                break
            log.warning("two different units share a 64-bit hash (%r, %r): hashing again "
                        "with seed %d", collision[0][:40], collision[1][:40], seed + 1)
        else:
            raise DedupError(f"units {collision[0]!r} and {collision[1]!r} share a hash under "
                             f"{SEEDS} seeds")
        with self.stage("windows"):
            step = self.windows(step)
        with self.stage("cut"):
            self.cut(step)
        self.step = step

    def hash(self, step: Step) -> Step:
        """Each chunk's units hashed with ``step.seed``; the step with each
        chunk's first unit."""
        seed, chunks = step.seed, step.docs.chunks
        meta = self._stage_done(layout.seeded(layout.HASH, seed), "hash")
        if meta is None:
            res = self._map("hash", task_hash, list(range(len(chunks))), step)
            keys = [layout.hash_chunk(seed, c["key"]) for c in chunks]
            uh_key = layout.hash_file(seed, layout.UNIT_HASHES)
            doc_units_key = layout.hash_file(seed, layout.DOC_UNITS)
            self.store.concat_npy(uh_key, [layout.file(k, "uh.npy") for k in keys], _U64)
            per_doc = [self.store.load_npy(layout.file(k, "units.npy")) for k in keys]
            doc_units = np.concatenate([[0]] + per_doc).cumsum().astype(np.int64)
            self.store.save_npy(doc_units_key, doc_units)
            meta = {"chunk_units": [int(r["units"]) for r in res],
                    "windows": [int(r["windows"]) for r in res],
                    "vocab": int(sum(r["vocab"] for r in res)),
                    "vocab_bytes": int(sum(r["vocab_bytes"] for r in res)),
                    "units_total": int(doc_units[-1]), "units": len(res)}
            # the windows and cut stages read the chunks' files: checked with the stage
            self.store.mark_done(layout.stage(layout.seeded(layout.HASH, seed)), meta,
                                 [uh_key, doc_units_key], keys)
        self.hash_meta = meta
        starts = np.concatenate([[0], np.cumsum(meta["chunk_units"])]).astype(np.int64)
        return replace(step, unit_starts=starts)

    def vocab(self, step: Step):
        """Two different units that share a hash, or None."""
        m = self.hash_meta
        need = m["vocab"] * VOCAB_BYTES + m["vocab_bytes"] * 3
        parts = max(1, math.ceil(need / self.plan.task_bytes))
        res = self._map("vocab", task_vocab, [(p, parts) for p in range(parts)], step)
        found = [r["collision"] for r in res if r["collision"] is not None]
        return found[0] if found else None

    def windows(self, step: Step) -> Step:
        """Every window's first occurrence and count; the step with the
        number of hash ranges."""
        W = sum(self.hash_meta["windows"])
        parts = max(1, math.ceil(W * WINDOW_BYTES / self.plan.task_bytes))
        step = replace(step, parts=parts)
        res = self._map("windows", task_windows, [(p, parts) for p in range(parts)], step)
        top = sorted((t for r in res for t in r["top"]), key=lambda t: (-t[1], t[0]))
        self.windows_meta = {"windows": int(sum(r["windows"] for r in res)),
                             "distinct": int(sum(r["distinct"] for r in res)),
                             "removed_windows": int(sum(r["removed"] for r in res)),
                             "top": top[:self.job["top"]], "parts": parts}
        return step

    def cut(self, step: Step) -> None:
        """The removed units and spans, and the texts with the spans cut out."""
        res = self._map("cut", task_cut, list(range(len(step.docs.chunks))), step)
        self.cut_meta = {"spans": int(sum(r["spans"] for r in res)),
                         "removed": int(sum(r["removed"] for r in res))}


__all__ = ["SubstrRunner", "Step", "CHUNK_SHARE", "MEMORY_PER_BYTE", "report_dict"]
