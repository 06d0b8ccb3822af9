"""The near-duplicate tasks: one function per stage, over one partition each.

Every task is a pure function of its item, the run's context (:class:`Ctx`),
the records of earlier stages it is given (:mod:`gpu_dedup.engine.records`)
and what earlier stages saved in the store; it saves its results in the
store and returns a small dict of metadata. A completed unit is marked in
the store, so a disk store lets a rerun skip it. Tasks are module-level
functions so that Dask workers import them.

The tasks of each stage of :class:`gpu_dedup.engine.runner.Runner`:

1. ``read``: :func:`task_prepare` per read unit (a whole small file, a byte
   range of a JSONL file, a piece of a compressed stream, some Parquet row
   groups, or the array given to the library): read, normalize,
   has-shingles, 128-bit fingerprints of the text and of the id; then
   :func:`~gpu_dedup.engine.exact_tasks.task_ids` per partition of the id
   fingerprints: the first repeated id.
2. ``exact``: :func:`~gpu_dedup.engine.exact_tasks.task_exact` per
   partition of the fingerprint space: each active document's
   representative is the first document with the same fingerprint; then
   :func:`~gpu_dedup.engine.exact_tasks.task_exact_slice` per chunk.
3. ``signatures``: :func:`task_signatures` per block of representatives:
   MinHash signatures and band keys (band-major: one band of one block is
   one contiguous row).
4. ``buckets``: :func:`~gpu_dedup.engine.bucket_tasks.task_lsh` per unit
   (a group of bands x a partition of the key space): its buckets of two
   or more members (greedy selection), or their candidate edges
   (components). Every bucket lies in one unit with its members in input
   order, so the union over units does not depend on the layout. With
   several partitions, :func:`~gpu_dedup.engine.bucket_tasks.task_lsh_sweep`
   runs the units of a group of bands, every partition, reading their keys
   once.
5. ``select`` (and ``assign``, for the similarity of a removed document to
   its kept one): :func:`task_score` per batch of document pairs: their
   similarity.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa

from ..arrays import arrow, concat_csr, take_rows, unique
from ..backend import get_backend
from ..compute import cast, pc, take
from ..config import Config
from ..errors import DedupError
from ..kernels import cpu as cpu_kernels
from ..io.plan import generated_ids, parse_jsonl_piece, read_piece, stream_chunks
from ..memory import release_memory
from ..stages.normalize import text_buffers
from ..stages.signatures import signatures
from . import layout
from .bounds import bound_rows, gather_rows, uses_bounds
from .plan import Plan
from .records import Blocks, Documents, ScoreInputs, StoredSets
from .store import DamagedWorkFile

_U64 = np.uint64


@dataclass(frozen=True)
class Ctx:
    """What every task of a run needs and what stays fixed for the whole run;
    travels to Dask workers. What a stage hands the next one is a record of
    :mod:`gpu_dedup.engine.records`, passed to the tasks as an argument.

    ``backend`` is the runner's backend object: tasks in the runner's own
    process use it; it is not sent to worker processes, which make their
    own from ``device`` and ``gpu_memory`` (:func:`backend_of`).
    """

    store: object
    cfg: Config | None
    device: str
    text_field: str
    id_field: str | None
    plan: Plan
    on_bad_record: str = "error"
    gpu_memory: object = None
    backend: object = field(default=None, compare=False, repr=False)

    def __getstate__(self):
        state = dict(self.__dict__)
        state["backend"] = None           # a worker process makes its own
        return state

    def __setstate__(self, state):
        for k, v in state.items():
            object.__setattr__(self, k, v)


#: Backends made in a worker process, one per (device, memory).
_WORKER_BACKENDS: dict = {}


def backend_of(ctx: Ctx):
    """The backend of a task's process: the runner's own in its process, one
    made from the device name in a worker process (reused by its tasks)."""
    if ctx.backend is not None:
        return ctx.backend
    key = (ctx.device, ctx.gpu_memory)
    be = _WORKER_BACKENDS.get(key)
    if be is None:
        be = get_backend(ctx.device, gpu_memory=ctx.gpu_memory)[0]
        _WORKER_BACKENDS[key] = be
    return be


def host(be, x) -> np.ndarray:
    return np.asarray(be.to_host(x))


def needs_signatures(cfg: Config) -> bool:
    """Whether verification reads the signatures (rather than the texts)."""
    return cfg.similarity == "signature" or not cfg.verify


# -- prepare -------------------------------------------------------------------

def _save_chunk(ctx: Ctx, unit: dict, key: str, d: dict) -> tuple[dict, list]:
    """Normalize one chunk and store what the later stages need; its
    metadata and the files it wrote."""
    cfg = ctx.cfg
    st = ctx.store
    be = backend_of(ctx)
    word = cfg.shingle == "word"
    texts = d["texts"]
    n = len(texts)
    roff, rdata = text_buffers(texts)
    p = layout.chunk(key)
    files = layout.files(p, (layout.TEXT, layout.FP, layout.ACTIVE, layout.LOC))
    if cfg.keep == "longest":        # first: a device keeps the normalized text afterwards
        st.save_npy(layout.file(p, layout.LENGTHS),
                    host(be, be.codepoint_lengths(roff, rdata)))
        files.append(layout.file(p, layout.LENGTHS))
    counted = getattr(be, "normalize_counted", None)
    if counted is not None:            # a device: how many documents went to the host
        norm, on_host = counted(texts, cfg.normalize)
    else:
        norm, on_host = be.normalize(texts, cfg.normalize), None
    st.save_arrow(layout.file(p, layout.TEXT), {"text": norm})
    off, data = st.buffers(layout.file(p, layout.TEXT))
    active = host(be, be.has_shingles(off, data, word)).astype(bool)
    fp = host(be, be.text_hash128(off, data))
    ids = chunk_ids(ctx, unit, d)
    if ids is not None:
        # ids are short and checked once: fingerprinted on the host, whatever the device
        ioff, idata = text_buffers(ids)
        st.save_npy(layout.file(p, layout.IDFP), cpu_kernels.text_hash128(ioff, idata))
        st.save_arrow(layout.file(p, layout.IDS), {"id": ids})
        files += layout.files(p, (layout.IDFP, layout.IDS))
    st.save_npy(layout.file(p, layout.FP), fp)
    st.save_npy(layout.file(p, layout.ACTIVE), active)
    st.save_npy(layout.file(p, layout.LOC), np.asarray(d["lines"], dtype=np.int64))
    meta = chunk_meta(unit, key, d, n)
    meta.update(active=int(active.sum()), text_bytes=int(data.size if n else 0),
                raw_bytes=int(rdata.size if n else 0), host_normalized=on_host)
    return meta, files


def task_prepare(unit: dict, ctx: Ctx) -> dict:
    """Read one unit and store its chunks. Input errors come back as values so
    that the run can report the first one in input order."""
    return read_unit(unit, ctx, _save_chunk)


def read_unit(unit: dict, ctx: Ctx, save) -> dict:
    """Read one read unit (:func:`gpu_dedup.io.plan.plan_reads`) and hand each
    of its chunks to ``save(ctx, unit, key, d)``, which stores what its stage
    needs and returns the chunk's metadata and the files it wrote (marked
    done as :func:`gpu_dedup.engine.layout.chunk`). A completed unit is
    reused; a compressed stream skips its completed chunks. Returns
    ``{"chunks": [meta, ...], "reused": k}``, or ``{"error": exc}`` for bad
    input, so that the run can report the first error in input order."""
    st = ctx.store
    tf, idf, bad = ctx.text_field, ctx.id_field, ctx.on_bad_record
    try:
        if unit["kind"] != "stream":
            key = layout.chunk_key(unit["file"], unit["chunk"])
            done = st.done(layout.chunk(key))
            if done is not None:
                return {"chunks": [done], "reused": 1}
            if unit["kind"] == "array":
                texts = st.column(layout.INPUT_TEXTS)
                d = {"texts": texts, "ids": None, "lines": np.arange(1, len(texts) + 1),
                     "invalid": 0, "skipped": [], "compression": None, "path": unit["path"]}
            else:
                d = read_piece(unit, tf, idf, bad)
            meta, files = save(ctx, unit, key, d)
            st.mark_done(layout.chunk(key), meta, files)
            return {"chunks": [meta], "reused": 0}
        # a compressed stream: chunks as they come, skipping completed ones
        metas = []
        reused = 0
        lines = 0
        path = unit["path"]
        for k, blocks in stream_chunks(path, ctx.plan.chunk_bytes):
            key = layout.chunk_key(unit["file"], k)
            meta = st.done(layout.chunk(key))
            if meta is not None and meta.get("lines_before") == lines:
                metas.append(meta)
                reused += 1
                lines += int(meta["lines_read"])
                continue
            d = parse_jsonl_piece(path, blocks, lines, tf, idf, bad,
                                  size=sum(len(b) for b in blocks))
            del blocks
            d.update(path=path, compression=unit["compression"])
            meta, files = save(ctx, {**unit, "chunk": k}, key, d)
            meta.update(lines_before=lines, lines_read=int(d["lines_read"]))
            st.mark_done(layout.chunk(key), meta, files)
            metas.append(meta)
            lines += int(d["lines_read"])
            del d
            release_memory(collect=False)
        return {"chunks": metas, "reused": reused}
    except DedupError as exc:
        return {"error": exc}


def chunk_ids(ctx: Ctx, unit: dict, d: dict) -> pa.Array | None:
    """A chunk's ids as ``large_string`` (generated ``FILE:LINE`` ids where
    the shard has none; None for an array given to the library)."""
    ids = d["ids"]
    if ids is None:
        ids = d.get("generated")
        if ids is None and unit["kind"] != "array":
            ids = generated_ids(d["path"], d["lines"])
    if ids is not None:
        if ids.type != pa.large_string():
            ids = cast(ids, pa.large_string())
        if ids.null_count:
            ids = pc.fill_null(ids, "")       # a file with some ids missing: an error later
    return ids


def chunk_meta(unit: dict, key: str, d: dict, n: int) -> dict:
    """The metadata every stage reads of a chunk (where its documents are)."""
    return {"key": key, "file": unit["file"], "kind": unit["kind"], "fmt": unit["fmt"],
            "path": d["path"], "files": d.get("files"), "n": int(n),
            "invalid_utf8": int(d["invalid"]), "has_ids": d["ids"] is not None,
            "first_missing_id": d.get("first_missing_id"),
            "first_line": int(d["lines"][0]) if n else None,
            "skipped": [[int(loc), str(why)] for loc, why in d.get("skipped", [])],
            "compression": d.get("compression")}


# -- signatures ----------------------------------------------------------------

def task_signatures(block: dict, ctx: Ctx, docs: Documents) -> dict:
    """Signatures and band keys of the representatives ``r0 .. r1`` (all in
    one chunk); keys saved band-major (``B x n``)."""
    st = ctx.store
    unit = layout.signature_block(block["key"])
    meta = st.done(unit)
    if meta is not None:
        return {**meta, "reused": 1}
    cfg = ctx.cfg
    be = backend_of(ctx)
    ci = block["chunk"]
    c = docs.chunks[ci]
    reps = st.load_npy(layout.exact("reps"), mmap=True)
    local = np.array(reps[block["r0"]:block["r1"]], dtype=np.int64) - int(docs.starts[ci])
    del reps
    off, data = st.buffers(layout.chunk_file(c["key"], layout.TEXT))
    sig, counts = signatures(be, off, data, local, cfg)
    keys = host(be, be.band_keys(sig, cfg.bands, cfg.rows))
    st.save_npy(layout.file(unit, layout.KEYS), np.ascontiguousarray(keys.T))
    del keys
    files = [layout.file(unit, layout.KEYS)]
    if needs_signatures(cfg):
        st.save_npy(layout.file(unit, layout.SIGS), host(be, sig))
        files.append(layout.file(unit, layout.SIGS))
    bounded = uses_bounds(cfg, be)
    if bounded:
        st.save_npy(layout.file(unit, layout.BOUNDS),
                    bound_rows(be, off, data, local, cfg, block["bound_words"]))
        files.append(layout.file(unit, layout.BOUNDS))
    del off, data
    meta = {"shingles": int(host(be, counts).sum()) if local.size else 0, "pid": os.getpid(),
            "bounds": int(bounded)}
    st.mark_done(unit, meta, files)
    return {**meta, "reused": 0}


# -- gathering by global document index ------------------------------------------

def gather(ctx: Ctx, documents: Documents, docs: np.ndarray, name: str) -> pa.Array:
    """Column ``name`` (``text.arrow`` or ``ids.arrow``) of the sorted global
    document indices ``docs``."""
    st = ctx.store
    if docs.size == 0:
        return arrow([], pa.large_string())
    ci = documents.chunk_of(docs)
    cut = np.flatnonzero(np.diff(ci)) + 1
    parts = []
    for s, e in zip(np.concatenate([[0], cut]), np.concatenate([cut, [docs.size]])):
        c = int(ci[s])
        col = st.column(layout.chunk_file(documents.chunks[c]["key"], name))
        parts.append(take(col, arrow(docs[s:e] - int(documents.starts[c]))))
        del col
    return pa.concat_arrays(parts) if len(parts) > 1 else parts[0]


def gather_ids(ctx: Ctx, documents: Documents, docs: np.ndarray) -> pa.Array:
    """Ids (as ``large_string``) of any global document indices, in order."""
    docs = np.asarray(docs, dtype=np.int64)
    if docs.size == 0:
        return arrow([], pa.large_string())
    if len(documents.chunks) == 1:
        ids = ctx.store.column(layout.chunk_file(documents.chunks[0]["key"], layout.IDS))
        return take(ids, arrow(docs))
    u, inv = unique(docs, return_inverse=True)
    return take(gather(ctx, documents, u, layout.IDS), arrow(inv.astype(np.int64)))


# -- verify --------------------------------------------------------------------

def task_score(item, ctx: Ctx, inputs: ScoreInputs) -> np.ndarray:
    """Scores of candidate pairs of representative positions (int64 ``(2,
    n)``: first positions, then second ones): the exact Jaccard of the two
    shingle sets, or the signature estimate.

    ``item`` is the pairs, or ``(pairs, floor)``: then only scores at or
    above ``floor`` need be exact (see ``Backend.jaccard_rows``)."""
    edges, floor = item if isinstance(item, tuple) else (item, 0.0)
    cfg = ctx.cfg
    be = backend_of(ctx)
    edges = np.asarray(edges)
    if edges.ndim != 2 or edges.shape[0] != 2:
        raise ValueError(f"pairs to score come as an array (2, n), not {edges.shape}")
    ia, ib = edges[0], edges[1]
    if cfg.similarity == "jaccard" and cfg.verify:
        if isinstance(inputs.sets, StoredSets):
            inputs = replace(inputs, sets=open_sets(ctx.store, inputs.sets))
        if inputs.sets is not None:
            return _score_with(ctx, be, inputs, ia, ib, floor)
        pos = unique(np.concatenate([ia, ib]))
        sets = sets_of(ctx, be, inputs.docs, _docs_at(ctx, pos))
        return np.asarray(host(be, be.jaccard_rows(sets, row_in(pos, ia), row_in(pos, ib),
                                                   floor)), dtype=np.float64)
    pos = unique(np.concatenate([ia, ib]))
    sig = gather_rows(ctx.store, inputs.blocks, pos, layout.SIGS)
    return np.asarray(host(be, be.signature_agreement(sig, np.searchsorted(pos, ia),
                                                      np.searchsorted(pos, ib))),
                      dtype=np.float64)


def task_store_sets(item, ctx: Ctx, documents: Documents) -> int:
    """Build the shingle sets of the representatives at ``positions``
    (sorted) and save them as the files of ``unit`` (``item``: ``(unit,
    positions)``), for the scoring tasks of other processes to map
    (:func:`open_sets`); its marker records their digest. Returns how
    many sets it saved."""
    unit, positions = item
    positions = np.ascontiguousarray(positions, dtype=np.int64)
    be = backend_of(ctx)
    _, so, sv = sets_of(ctx, be, documents, _docs_at(ctx, positions))
    names = layout.files(unit, layout.SETS)
    for name, arr in zip(names, (positions, host(be, so), host(be, sv))):
        ctx.store.save_npy(name, arr)
    del so, sv
    ctx.store.mark_done(unit, {"sets": int(positions.size),
                               "digest": edges_digest(positions)}, names)
    return int(positions.size)


def open_sets(store, stored: StoredSets) -> tuple:
    """The handle ``(positions, set_offsets, values)`` of sets saved by
    :func:`task_store_sets`, mapped (pages are read as the rows are), once
    their files are checked to be sets of ``stored.positions``."""
    pos, off, val = (store.load_npy(n, mmap="c") for n in layout.files(stored.unit, layout.SETS))
    n = stored.positions.size
    if (pos.shape != (n,) or off.shape != (n + 1,) or val.ndim != 1
            or (n and (int(off[0]) != 0 or int(off[-1]) != val.size
                       or int(pos[0]) != int(stored.positions[0])
                       or int(pos[-1]) != int(stored.positions[-1])))):
        raise DamagedWorkFile(f"{os.path.join(str(store.root), stored.unit)}: damaged work "
                              f"files (not the shingle sets of {n:,} documents); run the same "
                              f"command again")
    return pos, off, val


def _docs_at(ctx: Ctx, positions: np.ndarray) -> np.ndarray:
    """The documents of the sorted representative ``positions``."""
    reps = ctx.store.load_npy(layout.exact("reps"), mmap=True)
    return np.array(reps[positions], dtype=np.int64)


def _score_with(ctx: Ctx, be, inputs: ScoreInputs, ia, ib, floor: float) -> np.ndarray:
    """Exact Jaccard of representatives ``ia[e]``, ``ib[e]`` from the shared
    shingle sets; the sets of the representatives they lack are built here,
    for this batch, each from its own chunk (:func:`sets_of`), and read
    beside the shared ones (nothing copied)."""
    sets = inputs.sets
    ra = row_in(sets[0], ia)
    rb = row_in(sets[0], ib)
    if (ra >= 0).all() and (rb >= 0).all():
        return np.asarray(host(be, be.jaccard_rows(sets, ra, rb, floor)), dtype=np.float64)
    lack = unique(np.concatenate([ia[ra < 0], ib[rb < 0]]))
    built = sets_of(ctx, be, inputs.docs, _docs_at(ctx, lack))
    ra = np.where(ra < 0, ~row_in(lack, ia), ra)
    rb = np.where(rb < 0, ~row_in(lack, ib), rb)
    return np.asarray(host(be, be.jaccard_rows(sets, ra, rb, floor, other=built)),
                      dtype=np.float64)


def sets_of(ctx: Ctx, be, documents: Documents, docs: np.ndarray) -> tuple:
    """The shingle sets of the sorted global documents ``docs``, built from
    their chunks' text buffers (memory-mapped on a disk store: only the
    pages of those documents are read): ``(docs, set_offsets, values)``, the
    backend's own handle (a device may keep it). Documents of several chunks
    have their texts copied end to end first (a few bytes each), so that one
    call builds every set."""
    cfg = ctx.cfg
    word = cfg.shingle == "word"
    docs = np.asarray(docs, dtype=np.int64)
    ci = documents.chunk_of(docs)
    cut = np.flatnonzero(np.diff(ci)) + 1
    texts = []
    for s, e in zip(np.concatenate([[0], cut]), np.concatenate([cut, [docs.size]])):
        if s == e:
            continue
        c = int(ci[s])
        off, data = ctx.store.buffers(layout.chunk_file(documents.chunks[c]["key"], layout.TEXT))
        local = docs[s:e] - int(documents.starts[c])
        if cut.size == 0:
            _, so, sv = be.shingle_sets(off, data, word, cfg.ngram, local)
            return docs, so, sv
        texts.append(take_rows(off, data, local))
        del off, data
    off, data = concat_csr(texts, np.uint8)
    del texts
    _, so, sv = be.shingle_sets(off, data, word, cfg.ngram, np.arange(docs.size, dtype=np.int64))
    return docs, so, sv


def row_in(sorted_keys: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """The row of each of ``keys`` in ``sorted_keys`` (distinct); -1 where
    absent."""
    return cpu_kernels.rows_in(np.ascontiguousarray(sorted_keys, dtype=np.int64),
                               np.ascontiguousarray(keys, dtype=np.int64))


def edges_digest(edges: np.ndarray) -> str:
    import hashlib                      # loads OpenSSL: only when asked
    return hashlib.sha256(np.ascontiguousarray(edges).tobytes()).hexdigest()[:24]


class BandKeys:
    """The ``R x B`` band keys of the representatives, read from the signature
    blocks on demand (what :func:`gpu_dedup.stages.lsh.verified_edges` needs
    for re-anchoring).

    ``keys[rows, j]`` gathers band ``j`` of ``rows`` alone (a block's file
    holds each band's keys together, so that is one read of each block's
    band), and nothing is kept between calls: re-anchoring asks for every
    band of the same rows in turn, and all of them at once would be 8
    bytes a band a row (144 MB for a million failed pairs' ends at 18
    bands).
    """

    def __init__(self, ctx: Ctx, blocks: Blocks, total: int, bands: int):
        self.ctx = ctx
        self.blocks = blocks
        self.shape = (int(total), int(bands))

    def __getitem__(self, index):
        rows, j = index
        rows_i = np.asarray(rows, dtype=np.int64)
        out = np.empty(rows_i.size, dtype=_U64)
        if rows_i.size:
            st = self.ctx.store
            bi = self.blocks.block_of(rows_i)
            for b in unique(bi):
                blk = self.blocks.blocks[int(b)]
                keys = st.load_npy(layout.signature_file(blk["key"], layout.KEYS), mmap=True)
                sel = np.flatnonzero(bi == b)
                out[sel] = keys[j, rows_i[sel] - blk["r0"]]
                del keys
        return out
