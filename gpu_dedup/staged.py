"""Out-of-core runs: the engine's result for corpora larger than memory.

:func:`run_staged` gives byte for byte the clusters and pairs of
:func:`gpu_dedup.pipeline.run` (which holds the whole corpus in memory), while
the resident memory of the process tree stays near a budget
(``memory_limit``) whatever the corpus size. It runs the same stage functions
in the same order, over partitions whose results go to a work directory:

1. **prepare**, per chunk of input (a whole small file, a newline-aligned byte
   range of a large JSONL file, a piece of a compressed stream, or a group of
   Parquet row groups): read, normalize, has-shingles, 128-bit fingerprints of
   the text and of the id. Normalized texts and ids are stored as Arrow IPC
   files (memory-mapped later), the rest as ``.npy``.
2. **exact**, per partition of the fingerprint space: each active document's
   representative is the smallest index with the same fingerprint
   (:func:`gpu_dedup.stages.exact.exact_representatives` per partition). The
   same pass checks that ids are unique.
3. **signatures**, per block of representatives: MinHash signatures and band
   keys; keys are stored band-major so that one band of one block is one
   contiguous row.
4. **lsh**, per unit (a group of bands x a partition of the key space): the
   unit loads only its bands' key rows, keeps the keys of its partition and
   emits the candidate edges of its buckets (:func:`anchor_edges_segments`).
   Every bucket lies in one partition and its members arrive in input order,
   so the union over units is exactly
   :func:`gpu_dedup.kernels.cpu.bucket_edges` over the whole corpus.
5. **verify**: :func:`gpu_dedup.stages.lsh.verified_edges` over that set, with
   the band keys read from the blocks on demand and candidate edges scored in
   batches by tasks that read the normalized texts of just their documents.
6. **components** over the exact and accepted edges, then the kept document
   of each cluster, as in :func:`gpu_dedup.engine.deduplicate`.
7. **write**: clusters.parquet and pairs.parquet in the row groups
   ``pyarrow.parquet.write_table`` makes, data/ file by file, report.json.

Every unit writes its outputs atomically followed by a completion marker, so a
run killed at any point resumes where it stopped (see
:mod:`gpu_dedup.workdir`). Units run through an executor
(:mod:`gpu_dedup.distributed`): in this process, on Dask threads, or on a Dask
cluster; the result never depends on which.

Memory: the partitions are sized from the budget, so the per-unit working set
is bounded; what stays resident across stages is per-document state of about
50 bytes (representative, cluster and kept flags, the union-find of the
components) plus the candidate edges. A corpus of ``budget / 100`` documents or
more therefore needs a larger budget; see :func:`make_plan`.
"""
from __future__ import annotations

import glob
import json
import logging
import math
import os
import shutil
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .arrays import distinct_count, unique
from .backend import get_backend
from .config import Config
from .distributed import make_executor, parse_scheduler
from .errors import ConfigError, DedupError, InputError
from .io.jsonl import _BOM, BLOCK_BYTES, ShardReadState, compression_of, iter_blocks, parse_block
from .io.parquet import read_parquet_shard
from .io.sources import Shard, _group_inputs, _output_names, expand_inputs, format_of, read_shard
from .memory import PeakMonitor, default_budget, format_size, parse_size, release_memory
from .stages.components import choose_kept, cluster_ids
from .stages.exact import exact_representatives
from .stages.lsh import pack_edges, unpack_edges, verified_edges
from .stages.normalize import normalize_text, text_buffers
from .stages.signatures import signatures
from .timing import StageTimer
from .workdir import DEFAULT_ROOT, FORMAT_VERSION, WorkDir, input_identity, work_dir_for

log = logging.getLogger("gpu_dedup")

#: Rows per Parquet row group, as ``pyarrow.parquet.write_table`` writes them;
#: writing the same row groups one by one gives the same bytes.
ROW_GROUP = 1 << 20
#: Part of the budget kept for the interpreter and its libraries.
RESERVE = 256 << 20
_U64 = np.uint64


# =========================================================================
# kernels
# =========================================================================

def anchor_edges_segments(keys, docs, seg):
    """Candidate edges of the buckets of several key segments, packed
    ``a << 32 | b``, sorted and unique: the engine's definition,
    :func:`gpu_dedup.kernels.cpu.segment_bucket_edges`.

    ``keys[seg[j]:seg[j+1]]`` are the keys of segment ``j`` (one band, or one
    key partition of one band) and ``docs`` the matching document positions,
    ascending within each segment (empty: position ``i - seg[j]``). Every
    bucket lies in one segment with its members in input order, so the union
    over segments equals :func:`gpu_dedup.kernels.cpu.bucket_edges` over the
    whole corpus.
    """
    from .kernels import cpu
    return cpu.segment_bucket_edges(keys, docs, seg)


def anchor_edges(keys: np.ndarray) -> np.ndarray:
    """Candidate edges of an ``N x B`` key matrix with one segment per band."""
    n, b = keys.shape
    flat = np.ascontiguousarray(keys.T).reshape(-1)
    seg = np.arange(b + 1, dtype=np.int64) * n
    return anchor_edges_segments(flat, np.zeros(0, np.int64), seg)


def key_partition(keys: np.ndarray, parts: int) -> np.ndarray:
    """The key-space partition of each band key (high bits, so that the hash
    tables keep using the well-mixed low bits)."""
    return ((keys >> _U64(40)) % _U64(parts)).astype(np.int64)


# =========================================================================
# plan
# =========================================================================

def _floor_pow2(x: int) -> int:
    return 1 << (max(int(x), 1).bit_length() - 1)


@dataclass(frozen=True)
class Plan:
    """How a budget is split: bytes per concurrent task and input bytes per
    chunk. Derived sizes (signature block rows, band units, verification
    batches) follow from ``task_bytes`` in the stages."""

    budget: int
    concurrency: int
    task_bytes: int
    chunk_bytes: int
    kernel_threads: int

    def key(self) -> dict:
        return asdict(self)


def make_plan(budget: int, concurrency: int = 1) -> Plan:
    """Split ``budget`` bytes between ``concurrency`` tasks.

    A reserve for the interpreter and its libraries comes off the top (256
    MiB, or a quarter of a smaller budget); each task gets an equal share of
    the rest, and a chunk of input is a twelfth of a task's share (reading,
    parsing and normalizing hold several copies of it), rounded down to a
    power of two.
    """
    import numba
    reserve = min(RESERVE, budget // 4)
    work = max(budget - reserve, 1)
    task = max(work // max(1, concurrency), 1)
    chunk = _floor_pow2(min(max(task // 12, 4096), 1 << 30))
    return Plan(int(budget), int(concurrency), int(task), int(chunk),
                int(numba.get_num_threads()))


# =========================================================================
# reading
# =========================================================================

def _plan_jsonl_ranges(path: str, chunk_bytes: int) -> list[tuple[int, int, int]]:
    """``(start, stop, lines_before)`` of newline-aligned byte ranges: a range
    ends after the first newline at or past ``start + chunk_bytes - 1``."""
    size = os.path.getsize(path)
    out = []
    start = 0
    lines = 0
    with open(path, "rb") as f:
        while start < size:
            target = start + chunk_bytes - 1
            stop = size
            if target < size:
                f.seek(target)
                pos = target
                while True:
                    block = f.read(1 << 20)
                    if not block:
                        break
                    nl = block.find(b"\n")
                    if nl >= 0:
                        stop = pos + nl + 1
                        break
                    pos += len(block)
            out.append((start, stop, lines))
            f.seek(start)
            left = stop - start
            while left:
                block = f.read(min(left, 16 << 20))
                if not block:
                    break
                lines += block.count(b"\n")
                left -= len(block)
            start = stop
    return out


def plan_reads(paths: list[str], chunk_bytes: int) -> list[dict]:
    """The read units of the inputs, in document order.

    Inputs are grouped into shards as :func:`gpu_dedup.io.sources.read_corpus`
    groups them. A unit is one chunk of a shard (``whole``: the shard through
    :func:`read_shard`; ``bytes``: a newline-aligned range of an uncompressed
    JSONL file; ``rowgroups``: some row groups of a Parquet file) or a
    compressed JSONL file cut into chunks while it is decompressed
    (``stream``).
    """
    units = []
    for fi, (path, files) in enumerate(_group_inputs(paths)):
        fmt = format_of(path) if files is None else "txt"
        base = {"file": fi, "path": path, "fmt": fmt, "files": files}
        if fmt == "jsonl":
            size = os.path.getsize(path)
            comp = compression_of(path)
            if comp is None and size > chunk_bytes:
                for k, (a, b, lines) in enumerate(_plan_jsonl_ranges(path, chunk_bytes)):
                    units.append({**base, "kind": "bytes", "start": a, "stop": b,
                                  "line_base": lines, "chunk": k})
                continue
            if comp is not None and size * 4 > chunk_bytes:
                units.append({**base, "kind": "stream", "compression": comp, "chunk": 0})
                continue
        elif fmt == "parquet":
            try:
                md = pq.ParquetFile(path).metadata
                sizes = [md.row_group(i).total_byte_size for i in range(md.num_row_groups)]
                rows = [md.row_group(i).num_rows for i in range(md.num_row_groups)]
            except Exception:  # noqa: BLE001 - read_shard reports it in order
                sizes = []
            if len(sizes) > 1 and sum(sizes) > chunk_bytes:
                groups, cur, acc = [], [], 0
                for i, sz in enumerate(sizes):
                    if cur and acc + sz > chunk_bytes:
                        groups.append(cur)
                        cur, acc = [], 0
                    cur.append(i)
                    acc += sz
                groups.append(cur)
                row_base = 0
                for k, g in enumerate(groups):
                    units.append({**base, "kind": "rowgroups", "row_groups": g,
                                  "row_base": row_base, "chunk": k})
                    row_base += sum(rows[i] for i in g)
                continue
        units.append({**base, "kind": "whole", "chunk": 0})
    for i, u in enumerate(units):
        u["key"] = f"f{u['file']:05d}c{u['chunk']:06d}"
        u["order"] = i
    return units


def _sub_blocks(raw: bytes, size: int = BLOCK_BYTES):
    """Newline-aligned pieces of at least ``size`` bytes (the last may be
    shorter), as :func:`gpu_dedup.io.jsonl.iter_blocks` cuts a stream."""
    n = len(raw)
    pos = 0
    while pos < n:
        end = pos + size
        if end >= n:
            yield raw[pos:]
            return
        nl = raw.rfind(b"\n", pos, end)
        if nl < 0:
            nl = raw.find(b"\n", end)
            if nl < 0:
                yield raw[pos:]
                return
        yield raw[pos:nl + 1]
        pos = nl + 1


def parse_jsonl_piece(path: str, blocks, lines_before: int, text_field: str,
                      id_field: str | None, on_bad_record: str = "error") -> dict:
    """A newline-aligned piece of a JSONL file, parsed block by block with
    :func:`gpu_dedup.io.jsonl.parse_block`; line numbers continue from
    ``lines_before``.

    Returns texts, ids (nulls where a record has none; None when no record
    has one), line numbers, the invalid-UTF-8 count, the skipped records,
    the first line without an id, and the number of lines read.
    """
    st = ShardReadState(path, text_field, id_field, on_bad_record)
    st.line_base = lines_before
    for block in blocks:
        parse_block(block, st)
    texts = pa.concat_arrays(st.texts) if st.texts else pa.array([], pa.large_string())
    lines = np.concatenate(st.lines) if st.lines else np.zeros(0, np.int64)
    ids = None
    first_missing = None
    if id_field is not None and st.ids:
        ids = pa.concat_arrays(st.ids)
        if ids.null_count == len(ids):
            ids = None
        elif ids.null_count:
            miss = np.flatnonzero(ids.is_null().to_numpy(zero_copy_only=False))
            first_missing = int(lines[miss[0]])
    if hasattr(st, "replaced"):          # one flag per record
        invalid = int(sum(int(np.count_nonzero(r)) for r in st.replaced))
    else:                                # a count per shard
        invalid = int(getattr(st, "invalid_utf8", 0))
    return {"texts": texts, "ids": ids, "lines": lines, "invalid": invalid,
            "skipped": list(st.skipped), "first_missing_id": first_missing,
            "lines_read": st.line_base - lines_before}


def stream_chunks(path: str, chunk_bytes: int):
    """Consecutive blocks of :func:`gpu_dedup.io.jsonl.iter_blocks` grouped
    into chunks of at least ``chunk_bytes``; yields ``(k, blocks)``."""
    k = 0
    cur, size = [], 0
    for block in iter_blocks(path, min(chunk_bytes, BLOCK_BYTES)):
        cur.append(block)
        size += len(block)
        if size >= chunk_bytes:
            yield k, cur
            k += 1
            cur, size = [], 0
    if cur or k == 0:
        yield k, cur


def read_parquet_groups(path: str, row_groups: list[int], row_base: int, text_field: str,
                        id_field: str | None, on_bad_record: str = "error") -> dict:
    """Some row groups of a Parquet file, read and checked as
    :func:`gpu_dedup.io.parquet.read_parquet_shard` reads a whole file; rows
    are numbered from ``row_base + 1``."""
    d = read_parquet_shard(path, text_field, id_field, on_bad_record, row_groups=row_groups,
                           row_base=row_base)
    return {"texts": d.texts, "ids": d.ids, "lines": d.rows, "invalid": 0,
            "skipped": d.skipped, "first_missing_id": None, "compression": d.compression}


def _location(unit_or_meta: dict, loc: int) -> str:
    """Where a record is, as :meth:`gpu_dedup.io.sources.Shard.location` says it."""
    fmt = unit_or_meta["fmt"]
    path = unit_or_meta["path"]
    if fmt == "jsonl":
        return f"{path}:{int(loc)}"
    if fmt == "parquet":
        return f"{path}: row {int(loc)}"
    return os.path.join(path, unit_or_meta["files"][int(loc) - 1])


# =========================================================================
# tasks (module-level so that Dask workers import them)
# =========================================================================

@dataclass
class Ctx:
    """What every task needs; travels to Dask workers."""

    root: str
    cfg: Config
    device: str
    text_field: str
    id_field: str | None
    plan: Plan
    on_bad_record: str = "error"
    gpu_memory: object = None
    chunks: list = field(default_factory=list)
    doc_starts: np.ndarray | None = None
    blocks: list = field(default_factory=list)
    block_starts: np.ndarray | None = None

    @property
    def wd(self) -> WorkDir:
        return WorkDir(self.root)


_BACKENDS: dict = {}


def _backend(device: str, gpu_memory=None):
    """The backend of a task's process (one per device, reused by its tasks)."""
    be = _BACKENDS.get((device, gpu_memory))
    if be is None:
        be = get_backend(device, gpu_memory=gpu_memory)[0]
        _BACKENDS[(device, gpu_memory)] = be
    return be


def _host(be, x):
    return np.asarray(be.to_host(x))


def _column(table: pa.Table) -> pa.Array:
    col = table.column(0)
    if col.num_chunks == 1:
        return col.chunk(0)
    if col.num_chunks == 0:
        return pa.array([], type=col.type)
    return col.combine_chunks()


def _generated_ids(path: str, locations: np.ndarray) -> pa.Array:
    """``FILE:LINE`` (``FILE:ROW``) ids, as :meth:`Shard.generated_ids` makes them."""
    sep = pa.scalar("", pa.large_string())
    return pc.binary_join_element_wise(pa.scalar(f"{path}:", pa.large_string()),
                                       pa.array(locations, pa.int64()).cast(pa.large_string()),
                                       sep)


def _save_chunk(ctx: Ctx, unit: dict, key: str, d: dict) -> dict:
    """Normalize one chunk and store what the later stages need."""
    cfg = ctx.cfg
    wd = ctx.wd
    be = _backend(ctx.device, ctx.gpu_memory)
    word = cfg.shingle == "word"
    texts = d["texts"]
    n = len(texts)
    norm = normalize_text(texts, cfg.normalize)
    off, data = text_buffers(norm)
    active = _host(be, be.has_shingles(off, data, word)).astype(bool)
    fp = _host(be, be.text_hash128(off, data))
    ids = d["ids"]
    has_ids = ids is not None
    if ids is None:
        ids = d.get("generated")
        if ids is None:
            ids = _generated_ids(d["path"], d["lines"])
    if ids.type != pa.large_string():
        ids = ids.cast(pa.large_string())
    if ids.null_count:
        ids = pc.fill_null(ids, "")           # a file with some ids missing: an error later
    ioff, idata = text_buffers(ids)
    idfp = _host(be, be.text_hash128(ioff, idata))
    if cfg.keep == "longest":
        roff, rdata = text_buffers(texts)
        wd.save_npy(f"prep/{key}/lengths.npy", _host(be, be.codepoint_lengths(roff, rdata)))
    wd.save_arrow(f"prep/{key}/text.arrow", {"text": norm})
    wd.save_arrow(f"prep/{key}/ids.arrow", {"id": ids})
    wd.save_npy(f"prep/{key}/fp.npy", fp)
    wd.save_npy(f"prep/{key}/idfp.npy", idfp)
    wd.save_npy(f"prep/{key}/active.npy", active)
    wd.save_npy(f"prep/{key}/loc.npy", np.asarray(d["lines"], dtype=np.int64))
    meta = {"key": key, "file": unit["file"], "kind": unit["kind"], "fmt": unit["fmt"],
            "path": d["path"], "files": d.get("files"), "n": int(n),
            "active": int(active.sum()), "invalid_utf8": int(d["invalid"]),
            "has_ids": has_ids, "first_missing_id": d.get("first_missing_id"),
            "first_line": int(d["lines"][0]) if n else None,
            "skipped": [[int(loc), str(why)] for loc, why in d.get("skipped", [])],
            "text_bytes": int(data.size if n else 0), "compression": d.get("compression")}
    wd.mark_done(f"prep/{key}", meta)
    return meta


def task_prepare(unit: dict, ctx: Ctx) -> dict:
    """Read one unit and store its chunks. Input errors come back as values so
    that the run can report the first one in input order."""
    wd = ctx.wd
    tf, idf, bad = ctx.text_field, ctx.id_field, ctx.on_bad_record
    done = wd.done(f"prep/{unit['key']}")
    if done is not None and unit["kind"] != "stream":
        return {"chunks": [done], "reused": 1}
    path = unit["path"]
    try:
        if unit["kind"] == "whole":
            sh = read_shard(path, tf, idf, bad, files=unit["files"])
            d = {"texts": sh.texts, "ids": sh.ids, "lines": sh.locations,
                 "invalid": sh.invalid_utf8, "skipped": sh.skipped,
                 "compression": sh.compression, "path": sh.path, "files": sh.files,
                 "generated": sh.generated_ids() if sh.ids is None else None}
            del sh
            return {"chunks": [_save_chunk(ctx, unit, unit["key"], d)], "reused": 0}
        if unit["kind"] == "bytes":
            with open(path, "rb") as f:
                f.seek(unit["start"])
                raw = f.read(unit["stop"] - unit["start"])
            if unit["start"] == 0 and raw.startswith(_BOM):
                raw = raw[len(_BOM):]
            d = parse_jsonl_piece(path, _sub_blocks(raw), unit["line_base"], tf, idf, bad)
            del raw
            d.update(path=path, compression=None)
            return {"chunks": [_save_chunk(ctx, unit, unit["key"], d)], "reused": 0}
        if unit["kind"] == "rowgroups":
            d = read_parquet_groups(path, unit["row_groups"], unit["row_base"], tf, idf, bad)
            d["path"] = path
            return {"chunks": [_save_chunk(ctx, unit, unit["key"], d)], "reused": 0}
        # a compressed stream: chunks as they come, skipping completed ones
        metas = []
        reused = 0
        lines = 0
        for k, blocks in stream_chunks(path, ctx.plan.chunk_bytes):
            key = f"f{unit['file']:05d}c{k:06d}"
            meta = wd.done(f"prep/{key}")
            if meta is not None and meta.get("lines_before") == lines:
                metas.append(meta)
                reused += 1
                lines += int(meta["lines_read"])
                continue
            d = parse_jsonl_piece(path, blocks, lines, tf, idf, bad)
            del blocks
            d.update(path=path, compression=unit["compression"])
            meta = _save_chunk(ctx, {**unit, "chunk": k}, key, d)
            meta.update(lines_before=lines, lines_read=int(d["lines_read"]))
            wd.mark_done(f"prep/{key}", meta)
            metas.append(meta)
            lines += int(d["lines_read"])
            del d
            release_memory()
        return {"chunks": metas, "reused": reused}
    except DedupError as exc:
        return {"error": exc}


def task_exact(item: tuple, ctx: Ctx) -> dict:
    """Representatives and exact duplicates among the documents whose
    fingerprint falls in partition ``p`` of ``parts``; also the first
    duplicated id of the partition."""
    p, parts = item
    wd = ctx.wd
    unit = f"exact/{parts}/p{p:05d}"
    meta = wd.done(unit)
    if meta is not None:
        return {**meta, "reused": 1}
    fps, idx, idfps, iidx = [], [], [], []
    for ci, c in enumerate(ctx.chunks):
        d0 = int(ctx.doc_starts[ci])
        fp = wd.load_npy(f"prep/{c['key']}/fp.npy")
        act = wd.load_npy(f"prep/{c['key']}/active.npy")
        sel = act & (fp[:, 0] % _U64(parts) == _U64(p)) if parts > 1 else act
        fps.append(fp[sel])
        idx.append(np.flatnonzero(sel).astype(np.int64) + d0)
        del fp, act
        ifp = wd.load_npy(f"prep/{c['key']}/idfp.npy")
        isel = (ifp[:, 0] % _U64(parts) == _U64(p)) if parts > 1 else np.ones(len(ifp), bool)
        idfps.append(ifp[isel])
        iidx.append(np.flatnonzero(isel).astype(np.int64) + d0)
        del ifp
    fp = np.concatenate(fps) if fps else np.zeros((0, 2), _U64)
    ix = np.concatenate(idx) if idx else np.zeros(0, np.int64)
    del fps, idx
    if ctx.cfg.exact and ix.size:
        rep = ix[exact_representatives(fp, np.ones(ix.size, dtype=bool))]
    else:
        rep = ix
    del fp
    is_rep = rep == ix
    wd.save_npy(f"{unit}/reps.npy", ix[is_rep])
    wd.save_npy(f"{unit}/members.npy", ix[~is_rep])
    wd.save_npy(f"{unit}/member_rep.npy", rep[~is_rep])
    del rep, ix, is_rep
    ifp = np.concatenate(idfps) if idfps else np.zeros((0, 2), _U64)
    iix = np.concatenate(iidx) if iidx else np.zeros(0, np.int64)
    dup = None
    if iix.size:
        irep = iix[exact_representatives(ifp, np.ones(iix.size, dtype=bool))]
        dups = np.flatnonzero(irep != iix)
        if dups.size:
            first = irep[dups]
            g = int(first.min())
            dup = [g, int(iix[dups][first == g].min())]
    meta = {"dup": dup, "pid": os.getpid()}
    wd.mark_done(unit, meta)
    return {**meta, "reused": 0}


def task_signatures(block: dict, ctx: Ctx) -> dict:
    """Signatures and band keys of the representatives ``r0 .. r1`` (all in
    one chunk); keys stored band-major (``B x n``)."""
    wd = ctx.wd
    unit = f"sig/{block['key']}"
    meta = wd.done(unit)
    if meta is not None:
        return {**meta, "reused": 1}
    cfg = ctx.cfg
    be = _backend(ctx.device, ctx.gpu_memory)
    ci = block["chunk"]
    c = ctx.chunks[ci]
    reps = wd.load_npy("exact/reps.npy", mmap=True)
    local = np.array(reps[block["r0"]:block["r1"]], dtype=np.int64) - int(ctx.doc_starts[ci])
    del reps
    table = wd.open_arrow(f"prep/{c['key']}/text.arrow")
    off, data = text_buffers(_column(table))
    sig, counts = signatures(be, off, data, local, cfg)
    keys = _host(be, be.band_keys(sig, cfg.bands, cfg.rows))
    del off, data, table
    wd.save_npy(f"{unit}.keys.npy", np.ascontiguousarray(keys.T))
    del keys
    if _needs_signatures(cfg):
        wd.save_npy(f"{unit}.sig.npy", _host(be, sig))
    meta = {"shingles": int(_host(be, counts).sum()) if local.size else 0, "pid": os.getpid()}
    wd.mark_done(unit, meta)
    return {**meta, "reused": 0}


def _needs_signatures(cfg: Config) -> bool:
    return cfg.similarity == "signature" or not cfg.verify


def task_lsh(unit: dict, ctx: Ctx) -> dict:
    """Anchor edges of the buckets of bands ``unit['bands']`` whose key falls
    in partition ``unit['part']`` of ``unit['parts']``."""
    wd = ctx.wd
    name = f"lsh/{unit['layout']}/u{unit['index']:05d}"
    meta = wd.done(name)
    if meta is not None:
        return {**meta, "reused": 1}
    parts, p = unit["parts"], unit["part"]
    keys, docs, seg = [], [], [0]
    rows = 0
    for j in unit["bands"]:
        for b in ctx.blocks:
            if b["r1"] == b["r0"]:
                continue
            row = wd.load_npy(f"sig/{b['key']}.keys.npy", mmap=True)[j]
            if parts > 1:
                sel = np.flatnonzero(key_partition(row, parts) == p)
                keys.append(np.array(row[sel]))
                docs.append(sel.astype(np.int64) + b["r0"])
            else:
                keys.append(np.array(row))
            rows += keys[-1].size
            del row
        seg.append(rows)
    flat = np.concatenate(keys) if keys else np.zeros(0, _U64)
    del keys
    d = np.concatenate(docs) if docs else np.zeros(0, np.int64)
    del docs
    edges = anchor_edges_segments(flat, d, np.asarray(seg, dtype=np.int64))
    del flat, d
    wd.save_npy(f"{name}.npy", edges)
    meta = {"edges": int(edges.size), "pid": os.getpid()}
    wd.mark_done(name, meta)
    return {**meta, "reused": 0}


def gather_texts(ctx: Ctx, docs: np.ndarray) -> pa.Array:
    """Normalized texts of the sorted, unique global document indices ``docs``."""
    return _gather(ctx, docs, "text.arrow")


def gather_ids(ctx: Ctx, docs: np.ndarray) -> pa.Array:
    """Ids (as ``large_string``) of any global document indices, in order."""
    docs = np.asarray(docs, dtype=np.int64)
    if docs.size == 0:
        return pa.array([], pa.large_string())
    u, inv = unique(docs, return_inverse=True)
    return _gather(ctx, u, "ids.arrow").take(pa.array(inv.astype(np.int64)))


def _gather(ctx: Ctx, docs: np.ndarray, name: str) -> pa.Array:
    wd = ctx.wd
    if docs.size == 0:
        return pa.array([], pa.large_string())
    ci = np.searchsorted(ctx.doc_starts, docs, side="right") - 1
    cut = np.flatnonzero(np.diff(ci)) + 1
    parts = []
    for s, e in zip(np.concatenate([[0], cut]), np.concatenate([cut, [docs.size]])):
        c = int(ci[s])
        table = wd.open_arrow(f"prep/{ctx.chunks[c]['key']}/{name}")
        col = _column(table)
        parts.append(col.take(pa.array(docs[s:e] - int(ctx.doc_starts[c]))))
        del col, table
    return pa.concat_arrays(parts) if len(parts) > 1 else parts[0]


def _gather_signatures(ctx: Ctx, positions: np.ndarray) -> np.ndarray:
    """Signature rows of sorted, unique representative positions."""
    wd = ctx.wd
    bi = np.searchsorted(ctx.block_starts, positions, side="right") - 1
    out = None
    for b in unique(bi):
        blk = ctx.blocks[int(b)]
        sig = wd.load_npy(f"sig/{blk['key']}.sig.npy", mmap=True)
        sel = bi == b
        rows = np.array(sig[positions[sel] - blk["r0"]])
        if out is None:
            out = np.empty((positions.size, sig.shape[1]), dtype=sig.dtype)
        out[sel] = rows
        del sig
    return out


def task_score(edges: np.ndarray, ctx: Ctx) -> np.ndarray:
    """Scores of packed candidate edges (representative positions), as the
    engine's ``score`` computes them."""
    cfg = ctx.cfg
    be = _backend(ctx.device, ctx.gpu_memory)
    ia, ib = unpack_edges(edges)
    if cfg.similarity == "jaccard" and cfg.verify:
        reps = ctx.wd.load_npy("exact/reps.npy", mmap=True)
        da = np.array(reps[ia])
        db = np.array(reps[ib])
        del reps
        docs = unique(np.concatenate([da, db]))
        texts = gather_texts(ctx, docs)
        off, data = text_buffers(texts)
        la = np.searchsorted(docs, da).astype(np.int64)
        lb = np.searchsorted(docs, db).astype(np.int64)
        return np.asarray(_host(be, be.jaccard(off, data, cfg.shingle == "word", cfg.ngram,
                                                la, lb)), dtype=np.float64)
    pos = unique(np.concatenate([ia, ib]))
    sig = _gather_signatures(ctx, pos)
    return np.asarray(_host(be, be.signature_agreement(sig, np.searchsorted(pos, ia),
                                                        np.searchsorted(pos, ib))),
                      dtype=np.float64)


def _edges_digest(edges: np.ndarray) -> str:
    import hashlib
    return hashlib.sha256(np.ascontiguousarray(edges).tobytes()).hexdigest()[:24]


class BandKeys:
    """The ``R x B`` band keys of the representatives, read from the signature
    blocks on demand (what :func:`verified_edges` needs for re-anchoring).

    ``keys[rows, j]`` gathers band ``j`` of ``rows``; the rows of the last two
    row arrays asked for are kept, since re-anchoring asks for every band of
    the same rows in turn.
    """

    def __init__(self, ctx: Ctx, total: int, bands: int):
        self.ctx = ctx
        self.shape = (int(total), int(bands))
        self._cache: list = []

    def _rows(self, rows: np.ndarray) -> np.ndarray:
        for obj, val in self._cache:
            if obj is rows:
                return val
        rows_i = np.asarray(rows, dtype=np.int64)
        out = np.empty((self.shape[1], rows_i.size), dtype=_U64)
        if rows_i.size:
            wd = self.ctx.wd
            bi = np.searchsorted(self.ctx.block_starts, rows_i, side="right") - 1
            for b in unique(bi):
                blk = self.ctx.blocks[int(b)]
                keys = wd.load_npy(f"sig/{blk['key']}.keys.npy", mmap=True)
                sel = np.flatnonzero(bi == b)
                out[:, sel] = keys[:, rows_i[sel] - blk["r0"]]
                del keys
        self._cache = (self._cache + [(rows, out)])[-2:]
        return out

    def __getitem__(self, index):
        rows, j = index
        return self._rows(rows)[j]


# =========================================================================
# the run
# =========================================================================

@dataclass
class _ShardInfo:
    path: str
    fmt: str
    compression: str | None
    n: int
    out_name: str
    invalid_utf8: int = 0
    skipped: list = field(default_factory=list)

    @property
    def where(self) -> str:
        return {"jsonl": "line", "parquet": "row"}.get(self.fmt, "file")

    def __len__(self) -> int:
        return self.n


@dataclass
class _CorpusInfo:
    """What :func:`build_report` reads from a corpus, without the texts."""

    shards: list
    invalid_utf8: int
    skipped: list = field(default_factory=list)
    texts: object = None
    ids: object = None


@dataclass
class _Result:
    stats: dict


@dataclass
class _ResultView:
    """The per-document and per-edge arrays :func:`write_html` reads."""

    cluster: np.ndarray
    kept: np.ndarray
    pair_similarity: np.ndarray
    pair_exact: np.ndarray


class _LazyStrings:
    """``column[i]`` of the stored texts or ids, read on demand."""

    def __init__(self, ctx: Ctx, name: str, n: int):
        self.ctx = ctx
        self.name = name
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        return _gather(self.ctx, np.array([int(i)], dtype=np.int64), self.name)[0]


def _report_kwargs(build_report, on_bad_record: str) -> dict:
    import inspect
    try:
        params = inspect.signature(build_report).parameters
    except (TypeError, ValueError):  # pragma: no cover
        return {}
    return {"on_bad_record": on_bad_record} if "on_bad_record" in params else {}


def _check_work_root(root: str | None, paths, raw_inputs) -> None:
    if root is None:
        return
    from .pipeline import _inside
    for spec in list(raw_inputs) + list(paths):
        spec = str(spec)
        if os.path.exists(spec) and (_inside(root, spec) or _inside(spec, root)):
            raise ConfigError(f"--work-dir {root}: must not be an input, hold one or sit "
                              f"inside one ({spec})")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:          # exists, owned by someone else
        return True
    return True


def _clean_stale_outputs(output: str) -> None:
    """Remove temporary output folders left by killed runs (dead pids only)."""
    parent = os.path.dirname(output)
    for p in glob.glob(os.path.join(glob.escape(parent),
                                    f".{glob.escape(os.path.basename(output))}.tmp-*")):
        pid = p.rsplit("-", 1)[-1]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            shutil.rmtree(p, ignore_errors=True)


class _RowGroups:
    """Writes tables to a ParquetWriter in row groups of exactly ``ROW_GROUP``
    rows (the last may be shorter), as one ``write_table`` call would."""

    def __init__(self, writer, schema):
        self.w = writer
        self.schema = schema
        self.pending = []
        self.count = 0
        self.written = 0

    def add(self, table: pa.Table) -> None:
        self.pending.append(table)
        self.count += table.num_rows
        while self.count >= ROW_GROUP:
            t = pa.concat_tables(self.pending).combine_chunks()
            self.w.write_table(t.slice(0, ROW_GROUP))
            self.written += 1
            rest = t.slice(ROW_GROUP)
            self.pending = [rest]
            self.count = rest.num_rows

    def close(self) -> None:
        if self.count or not self.written:
            t = (pa.concat_tables(self.pending).combine_chunks() if self.pending
                 else self.schema.empty_table())
            self.w.write_table(t)
        self.pending = []


class _Runner:
    def __init__(self, paths, output, cfg, be, device_desc, wd, executor, plan, text_field,
                 id_field, monitor, on_progress, raw_inputs):
        self.paths = paths
        self.output = output
        self.cfg = cfg
        self.be = be
        self.device_desc = device_desc
        self.wd = wd
        self.ex = executor
        self.plan = plan
        self.monitor = monitor
        self.on_progress = on_progress
        self.raw_inputs = raw_inputs
        self.ctx = Ctx(wd.root, cfg, be.name, text_field, id_field, plan)
        self.timer = StageTimer()
        self.html = True
        self.reused: dict[str, int] = {}
        self.units: dict[str, int] = {}

    # -- helpers ----------------------------------------------------------
    def _stage(self, name: str):
        timer = self.timer(name)
        mon = self.monitor.stage(name)

        class _Both:
            def __enter__(s):
                timer.__enter__()
                mon.__enter__()

            def __exit__(s, *exc):
                mon.__exit__(*exc)
                timer.__exit__(*exc)

        return _Both()

    def _map(self, stage: str, task, items: list, stop_on_error: bool = False) -> list:
        total = len(items)
        self.units[stage] = self.units.get(stage, 0) + total
        done = [0]
        sequential = self.ex.name == "none"

        def on_done(i, result):
            done[0] += 1
            if stop_on_error and sequential and isinstance(result, dict) and "error" in result:
                raise result["error"]     # in order: nothing earlier can fail any more
            if isinstance(result, dict) and result.get("reused"):
                self.reused[stage] = self.reused.get(stage, 0) + int(result["reused"])
            elif self.on_progress is not None:
                self.on_progress(stage, done[0], total)

        out = self.ex.map(task, items, self.ctx, on_done=on_done)
        if self.reused.get(stage):
            log.info("%s: reused %d completed unit(s) from %s", stage, self.reused[stage],
                     self.wd.root)
        return out

    def _stage_done(self, name: str):
        meta = self.wd.done(f"stage/{name}")
        if meta is not None:
            log.info("%s: reusing the completed stage from %s", name, self.wd.root)
            self.reused[name] = self.reused.get(name, 0) + max(1, int(meta.get("units", 1)))
            self.units[name] = self.units.get(name, 0) + max(1, int(meta.get("units", 1)))
        return meta

    # -- stages -----------------------------------------------------------
    def prepare(self):
        meta = self._stage_done("prepare")
        if meta is None:
            reads = self.wd.done("stage/reads")
            if reads is None:
                reads = {"units": plan_reads(self.paths, self.plan.chunk_bytes)}
                self.wd.mark_done("stage/reads", reads)
            units = reads["units"]
            results = self._map("prepare", task_prepare, units, stop_on_error=True)
            errors = [(u["order"], r["error"]) for u, r in zip(units, results) if "error" in r]
            if errors:
                raise min(errors, key=lambda e: e[0])[1]
            chunks = [c for r in results for c in r["chunks"]]
            self._check_id_presence(chunks)
            meta = {"chunks": chunks, "units": len(units), "read_units": units}
            self.wd.mark_done("stage/prepare", meta)
        self.chunks = meta["chunks"]
        self.read_units = meta["read_units"]
        paths = {}
        for c in self.chunks:
            paths.setdefault(c["file"], c["path"])
        self.shard_paths = [paths[i] for i in sorted(paths)]
        n = np.array([c["n"] for c in self.chunks], dtype=np.int64)
        self.doc_starts = np.concatenate([[0], np.cumsum(n)]).astype(np.int64)
        self.N = int(self.doc_starts[-1])
        self.ctx.chunks = self.chunks
        self.ctx.doc_starts = self.doc_starts
        self.avg_text = (sum(c["text_bytes"] for c in self.chunks) / self.N) if self.N else 1.0

    def _check_id_presence(self, chunks):
        """A file whose records have ids must have one on every record (as
        :func:`read_jsonl_shard` checks a whole file); across chunks, the first
        record without one is named."""
        by_file: dict[int, list] = {}
        for c in chunks:
            by_file.setdefault(c["file"], []).append(c)
        for cs in by_file.values():
            if len(cs) < 2 or not any(c["has_ids"] for c in cs):
                continue
            missing = [c["first_missing_id"] for c in cs if c.get("first_missing_id") is not None]
            missing += [c["first_line"] for c in cs if not c["has_ids"] and c["n"]]
            if missing:
                raise InputError(f"{_location(cs[0], min(missing))}: missing id field "
                                 f"{self.ctx.id_field!r} (other records of this file have one)")

    def locate(self, i: int) -> str:
        ci = int(np.searchsorted(self.doc_starts, i, side="right") - 1)
        c = self.chunks[ci]
        loc = self.wd.load_npy(f"prep/{c['key']}/loc.npy", mmap=True)[i - self.doc_starts[ci]]
        return _location(c, int(loc))

    def exact(self):
        meta = self._stage_done("exact")
        if meta is None:
            parts = max(1, math.ceil(self.N * 120 / self.plan.task_bytes))
            items = [(p, parts) for p in range(parts)]
            results = self._map("exact", task_exact, items)
            dups = [r["dup"] for r in results if r["dup"] is not None]
            if dups:
                g, m = min(dups)
                ids = gather_ids(self.ctx, np.array([g, m])).to_pylist()
                if ids[0] == ids[1]:
                    raise InputError(f"{self.locate(m)}: duplicate id {ids[0]!r} (first at "
                                     f"{self.locate(g)}); ids must be unique, or pass "
                                     f"--id-field none to generate them")
            load = lambda name: [self.wd.load_npy(f"exact/{parts}/p{p:05d}/{name}.npy")  # noqa: E731
                                 for p in range(parts)]
            reps = np.sort(np.concatenate(load("reps") or [np.zeros(0, np.int64)]))
            self.wd.save_npy("exact/reps.npy", reps)
            members = np.concatenate(load("members") or [np.zeros(0, np.int64)])
            member_rep = np.concatenate(load("member_rep") or [np.zeros(0, np.int64)])
            order = np.argsort(members, kind="stable")
            self.wd.save_npy("exact/members.npy", members[order])
            self.wd.save_npy("exact/member_rep.npy", member_rep[order])
            del members, member_rep, order
            meta = {"reps": int(reps.size), "units": parts}
            self.wd.mark_done("stage/exact", meta)
        self.reps = self.wd.load_npy("exact/reps.npy")
        self.R = int(self.reps.size)

    def signature_blocks(self) -> list:
        cfg = self.cfg
        per_rep = cfg.num_perm * (cfg.signature_bits // 8) + cfg.bands * 8 * 2 + 16
        rows = max(256, self.plan.task_bytes // (3 * per_rep))
        blocks = []
        for ci in range(len(self.chunks)):
            lo = int(np.searchsorted(self.reps, self.doc_starts[ci]))
            hi = int(np.searchsorted(self.reps, self.doc_starts[ci + 1]))
            for r0 in range(lo, hi, rows):
                r1 = min(hi, r0 + rows)
                blocks.append({"key": f"r{r0:012d}", "chunk": ci, "r0": r0, "r1": r1})
        return blocks

    def signatures(self):
        self.blocks = self.signature_blocks()
        self.ctx.blocks = self.blocks
        self.ctx.block_starts = np.array([b["r0"] for b in self.blocks], dtype=np.int64)
        meta = self._stage_done("signatures")
        if meta is None:
            results = self._map("signatures", task_signatures, self.blocks)
            meta = {"shingles": int(sum(r["shingles"] for r in results)),
                    "units": len(self.blocks)}
            self.wd.mark_done("stage/signatures", meta)
        self.shingles = meta["shingles"]

    def lsh_layout(self) -> tuple[int, int]:
        """(key partitions, bands per unit) that fit a task's share."""
        R, B = self.R, self.cfg.bands
        T = max(1, self.plan.kernel_threads)
        task = self.plan.task_bytes

        def need(g, parts):
            n = R / parts
            per_row = 8 + (8 if parts > 1 else 0) + 8 + 16
            return g * n * per_row + min(T, g) * n * 72

        parts = 1
        while need(1, parts) > task and parts < max(1, R):
            parts *= 2
        if self.ex.name != "none":
            parts = max(parts, self.ex.concurrency)
        g = 1
        while g < B and need(g + 1, parts) <= task:
            g += 1
        return parts, g

    def lsh(self):
        meta = self._stage_done("lsh")
        if meta is None:
            parts, g = self.lsh_layout()
            B = self.cfg.bands
            layout = f"p{parts}g{g}"
            units = []
            for p in range(parts):
                for j0 in range(0, B, g):
                    units.append({"layout": layout, "index": len(units), "parts": parts,
                                  "part": p, "bands": list(range(j0, min(B, j0 + g)))})
            self._map("lsh", task_lsh, units)
            edges = [self.wd.load_npy(f"lsh/{layout}/u{u['index']:05d}.npy") for u in units]
            first = unique(np.concatenate(edges)) if edges else np.zeros(0, _U64)
            del edges
            self.wd.save_npy("lsh/first_round.npy", first)
            meta = {"first_round": int(first.size), "units": len(units), "parts": parts,
                    "bands_per_unit": g}
            self.wd.mark_done("stage/lsh", meta)
            del first
        self.lsh_meta = meta

    def _score_batches(self, edges: np.ndarray) -> list[np.ndarray]:
        cfg = self.cfg
        if cfg.similarity == "jaccard" and cfg.verify:
            per_doc = self.avg_text * 24 + 96
        else:
            per_doc = cfg.num_perm * (cfg.signature_bits // 8) * 2 + 32
        # at least 1,024 edges a batch: below that, per-task overhead dominates
        size = max(1024, int(self.plan.task_bytes // (4 * per_doc)))
        return [edges[s:s + size] for s in range(0, edges.size, size)]

    def verify(self):
        meta = self._stage_done("verify")
        if meta is None:
            cfg = self.cfg
            first = self.wd.load_npy("lsh/first_round.npy")
            calls = [0]

            def score(packed):
                calls[0] += 1
                c = calls[0]
                batches = self._score_batches(packed)
                out = [None] * len(batches)
                todo = []
                for i, b in enumerate(batches):
                    name = f"verify/c{c:03d}/b{i:06d}"
                    m = self.wd.done(name)
                    if m is not None and m.get("digest") == _edges_digest(b):
                        out[i] = self.wd.load_npy(f"{name}.npy")
                        self.reused["verify"] = self.reused.get("verify", 0) + 1
                    else:
                        todo.append(i)
                self.units["verify"] = self.units.get("verify", 0) + len(batches)
                if todo:
                    results = self.ex.map(task_score, [batches[i] for i in todo], self.ctx)
                    for i, r in zip(todo, results):
                        b = batches[i]
                        name = f"verify/c{c:03d}/b{i:06d}"
                        self.wd.save_npy(f"{name}.npy", r)
                        self.wd.mark_done(name, {"digest": _edges_digest(b)})
                        out[i] = r
                        if self.on_progress is not None:
                            self.on_progress("verify", i + 1, len(batches))
                return np.concatenate(out) if out else np.zeros(0, np.float64)

            keys = BandKeys(self.ctx, self.R, cfg.bands)
            er = verified_edges(first, keys, score, float(cfg.threshold), cfg.max_rounds,
                                accept_all=not cfg.verify)
            self.wd.save_npy("verify/accepted.npy", er.accepted)
            self.wd.save_npy("verify/scores.npy", er.scores)
            meta = {"candidates": er.candidates, "rounds": er.rounds,
                    "unresolved": er.unresolved, "verified": int(er.accepted.size),
                    "units": max(1, calls[0])}
            self.wd.mark_done("stage/verify", meta)
        self.verify_meta = meta

    def components(self):
        meta = self._stage_done("components")
        if meta is None:
            cfg = self.cfg
            N = self.N
            members = self.wd.load_npy("exact/members.npy")
            member_rep = self.wd.load_npy("exact/member_rep.npy")
            acc = self.wd.load_npy("verify/accepted.npy")
            scores = self.wd.load_npy("verify/scores.npy")
            fa, fb = unpack_edges(acc)
            fa = self.reps[fa]
            fb = self.reps[fb]
            ea = np.concatenate([member_rep, fa])
            eb = np.concatenate([members, fb])
            sim = np.concatenate([np.ones(members.size), scores])
            is_exact = np.concatenate([np.ones(members.size, dtype=bool),
                                       np.zeros(fa.size, dtype=bool)])
            del fa, fb, acc, scores
            lo = np.minimum(ea, eb)
            hi = np.maximum(ea, eb)
            del ea, eb
            order = np.argsort(pack_edges(lo, hi), kind="stable")
            ea, eb, sim, is_exact = lo[order], hi[order], sim[order], is_exact[order]
            del lo, hi, order
            labels = _host(self.be, self.be.components(N, ea, eb))
            cluster = cluster_ids(labels)
            del labels
            if cfg.keep == "longest":
                lengths = np.concatenate(
                    [self.wd.load_npy(f"prep/{c['key']}/lengths.npy") for c in self.chunks]
                    or [np.zeros(0, np.int64)])
            else:
                lengths = np.zeros(N)
            kept = choose_kept(cluster, lengths, cfg.keep)
            del lengths
            self.wd.save_npy("final/cluster.npy", cluster)
            self.wd.save_npy("final/kept.npy", kept)
            self.wd.save_npy("final/pair_a.npy", ea)
            self.wd.save_npy("final/pair_b.npy", eb)
            self.wd.save_npy("final/pair_similarity.npy", sim)
            self.wd.save_npy("final/pair_exact.npy", is_exact)
            n_kept = int(kept.sum())
            idx = np.arange(N, dtype=np.int64)
            meta = {"kept": n_kept, "clusters": int(np.count_nonzero(cluster == idx)),
                    "duplicate_clusters": distinct_count(cluster[~kept]),
                    "exact_removed": int(members.size), "units": 1}
            del idx, cluster, kept, ea, eb, sim, is_exact, members, member_rep
            self.wd.mark_done("stage/components", meta)
        self.comp_meta = meta

    # -- outputs ----------------------------------------------------------
    def write(self, tmp: str) -> dict:
        cluster = self.wd.load_npy("final/cluster.npy", mmap=True)
        kept = self.wd.load_npy("final/kept.npy")
        schema = pa.schema([("id", pa.string()), ("cluster", pa.int64()), ("kept", pa.bool_())])
        with pq.ParquetWriter(os.path.join(tmp, "clusters.parquet"), schema) as w:
            rg = _RowGroups(w, schema)
            for ci, c in enumerate(self.chunks):
                d0, d1 = int(self.doc_starts[ci]), int(self.doc_starts[ci + 1])
                table = self.wd.open_arrow(f"prep/{c['key']}/ids.arrow")
                ids = _column(table).cast(pa.string())
                del table
                rg.add(pa.table({"id": ids, "cluster": pa.array(np.array(cluster[d0:d1]),
                                                                pa.int64()),
                                 "kept": pa.array(kept[d0:d1], pa.bool_())}, schema=schema))
            rg.close()
        del cluster
        release_memory()
        pa_ = self.wd.load_npy("final/pair_a.npy", mmap=True)
        pb_ = self.wd.load_npy("final/pair_b.npy", mmap=True)
        ps_ = self.wd.load_npy("final/pair_similarity.npy", mmap=True)
        schema = pa.schema([("id_a", pa.string()), ("id_b", pa.string()),
                            ("similarity", pa.float64())])
        with pq.ParquetWriter(os.path.join(tmp, "pairs.parquet"), schema) as w:
            rg = _RowGroups(w, schema)
            for s in range(0, pa_.shape[0], ROW_GROUP):
                a = np.array(pa_[s:s + ROW_GROUP])
                b = np.array(pb_[s:s + ROW_GROUP])
                rg.add(pa.table({"id_a": gather_ids(self.ctx, a).cast(pa.string()),
                                 "id_b": gather_ids(self.ctx, b).cast(pa.string()),
                                 "similarity": pa.array(np.array(ps_[s:s + ROW_GROUP]),
                                                        pa.float64())}, schema=schema))
            rg.close()
        del pa_, pb_, ps_
        release_memory()
        data_dir = os.path.join(tmp, "data")
        os.makedirs(data_dir)
        names = _output_names(self.shard_paths)
        for fi in range(len(self.shard_paths)):
            out = os.path.join(data_dir, names[fi])
            os.makedirs(os.path.dirname(out), exist_ok=True)
            self._write_data(fi, out, kept)
            release_memory()
        return {"clusters": "clusters.parquet", "pairs": "pairs.parquet", "data": "data/",
                "report": "report.json", "report_html": "report.html"}

    def _write_data(self, fi: int, out: str, kept: np.ndarray) -> None:
        """The kept records of shard ``fi``, written by the shard's own writer
        from their line (row, file) numbers."""
        idx = [ci for ci, c in enumerate(self.chunks) if c["file"] == fi]
        first = self.chunks[idx[0]]
        locs = np.concatenate([self.wd.load_npy(f"prep/{self.chunks[ci]['key']}/loc.npy")
                               for ci in idx])
        keep = kept[int(self.doc_starts[idx[0]]):int(self.doc_starts[idx[-1] + 1])]
        shard = Shard(path=first["path"], fmt=first["fmt"], compression=first["compression"],
                      texts=pa.array([], pa.large_string()), ids=None, locations=locs,
                      files=first.get("files"))
        shard.write_kept(keep, out, self.plan.chunk_bytes)

    # -- all --------------------------------------------------------------
    def run(self, t_start: float, overwrite_check) -> dict:
        from .engine import scurve_summary
        from .pipeline import _swap_in
        from .report import build_report
        with self._stage("prepare"):
            self.prepare()
        log.info("prepared %d documents in %d chunk(s)", self.N, len(self.chunks))
        with self._stage("exact"):
            self.exact()
        with self._stage("signatures"):
            self.signatures()
        with self._stage("lsh"):
            self.lsh()
        with self._stage("verify"):
            self.verify()
        with self._stage("components"):
            self.components()
        overwrite_check()
        _clean_stale_outputs(self.output)
        parent = os.path.dirname(self.output)
        os.makedirs(parent, exist_ok=True)
        tmp = os.path.join(parent, f".{os.path.basename(self.output)}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        try:
            with self._stage("write"):
                outputs = self.write(tmp)
            seconds = dict(self.timer.seconds)
            seconds["total"] = time.perf_counter() - t_start
            report = build_report(_Result(self.stats()), self._corpus_info(), self.cfg,
                                  scurve_summary(self.cfg), seconds, self.device_desc, outputs,
                                  **_report_kwargs(build_report, self.ctx.on_bad_record))
            report["memory"] = {
                "limit_bytes": self.plan.budget,
                "limit": format_size(self.plan.budget),
                "peak_rss_bytes": dict(self.monitor.peaks),
                "peak_rss_total_bytes": max(self.monitor.peaks.values(), default=0),
                "measured": "resident set of this process and its children",
            }
            report["scheduler"] = self.ex.describe()
            report["work"] = {"dir": self.wd.root, "chunks": len(self.chunks),
                              "units": dict(self.units), "reused": dict(self.reused),
                              "plan": self.plan.key()}
            if self.html:
                self._write_html(tmp, report, t_start)
            else:
                report["outputs"].pop("report_html", None)
            with open(os.path.join(tmp, "report.json"), "w") as f:
                json.dump(report, f, indent=2, sort_keys=False)
                f.write("\n")
            _swap_in(tmp, self.output)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return report

    def _write_html(self, tmp: str, report: dict, t_start: float) -> None:
        """report.html, from the arrays in the work directory; the clusters it
        shows are read back (their normalized text) one document at a time."""
        try:
            from .report_html import write_html
        except ImportError:
            report["outputs"].pop("report_html", None)
            return
        t0 = time.perf_counter()
        result = _ResultView(
            cluster=self.wd.load_npy("final/cluster.npy", mmap=True),
            kept=self.wd.load_npy("final/kept.npy", mmap=True),
            pair_similarity=self.wd.load_npy("final/pair_similarity.npy", mmap=True),
            pair_exact=self.wd.load_npy("final/pair_exact.npy", mmap=True))
        corpus = self._corpus_info()
        corpus.texts = _LazyStrings(self.ctx, "text.arrow", self.N)
        corpus.ids = _LazyStrings(self.ctx, "ids.arrow", self.N)
        write_html(os.path.join(tmp, "report.html"), report, result, corpus)
        report["seconds"]["report"] = time.perf_counter() - t0
        report["seconds"]["total"] = time.perf_counter() - t_start

    def stats(self) -> dict:
        N = self.N
        n_kept = self.comp_meta["kept"]
        removed = N - n_kept
        exact_removed = self.comp_meta["exact_removed"]
        active = sum(c["active"] for c in self.chunks)
        v = self.verify_meta
        return {
            "documents": N,
            "documents_without_shingles": int(N - active),
            "kept": n_kept,
            "removed": removed,
            "exact_removed": exact_removed,
            "fuzzy_removed": removed - exact_removed,
            "clusters": self.comp_meta["clusters"],
            "duplicate_clusters": self.comp_meta["duplicate_clusters"],
            "exact_edges": exact_removed,
            "candidate_edges": v["candidates"],
            "first_round_candidates": self.lsh_meta["first_round"],
            "verified_edges": v["verified"],
            "rounds": v["rounds"],
            "unresolved_edges": v["unresolved"],
            "shingles": self.shingles,
        }

    def _corpus_info(self) -> _CorpusInfo:
        names = _output_names(self.shard_paths)
        shards = []
        skipped = []
        for fi, path in enumerate(self.shard_paths):
            cs = [c for c in self.chunks if c["file"] == fi]
            shards.append(_ShardInfo(path, cs[0]["fmt"], cs[0]["compression"],
                                     sum(c["n"] for c in cs), names[fi],
                                     sum(c["invalid_utf8"] for c in cs),
                                     [tuple(x) for c in cs for x in c["skipped"]]))
            skipped += [f"{_location(cs[0], loc)}: {why}" for c in cs for loc, why in c["skipped"]]
        return _CorpusInfo(shards, sum(s.invalid_utf8 for s in shards), skipped)


def run_staged(inputs, output: str, config: Config | None = None, *, device: str = "cpu",
               text_field: str = "text", id_field: str | None = "id", overwrite: bool = False,
               memory_limit=None, scheduler: str = "none", workers: int | None = None,
               work_dir: str | None = None, keep_work_dir: bool = False, gpu_memory=None,
               on_bad_record: str = "error", on_progress=None, html: bool = True) -> dict:
    """Deduplicate ``inputs`` into ``output`` within a memory budget; the
    outputs equal :func:`gpu_dedup.pipeline.run`'s. Returns the report (also
    written as ``report.json``), which adds ``memory`` (the budget and the
    peak resident memory of the process tree per stage), ``scheduler`` and
    ``work`` (the work directory and what was reused from it).

    Args:
        memory_limit: bytes or a size string (``"1GiB"``); default
            :func:`gpu_dedup.memory.default_budget`.
        scheduler: ``none``, ``threads``, ``processes`` or ``tcp://HOST:PORT``
            (see :mod:`gpu_dedup.distributed`).
        workers: threads or worker processes for ``threads``/``processes``;
            the number of workers to wait for with an address.
        work_dir: root of the work directory (default: ``.gpu-dedup-work``
            beside ``output``).
        keep_work_dir: keep the work directory after success (it is removed
            otherwise).
        on_bad_record: ``"error"`` or ``"skip"``, as for
            :func:`gpu_dedup.io.sources.read_corpus`.
        html: also write ``report.html`` (its example clusters show the
            normalized texts kept in the work directory).
        on_progress: ``on_progress(stage, done, total)`` after each unit
            computed (not reused) in this run.
    """
    from .pipeline import check_output
    t_start = time.perf_counter()
    cfg = (config or Config()).resolved()
    paths = expand_inputs(inputs)
    output = os.path.abspath(output)
    check_output(output, paths, inputs, overwrite)
    if on_bad_record not in ("error", "skip"):
        raise ConfigError(f"--on-bad-record must be 'error' or 'skip', got {on_bad_record!r}")
    budget = parse_size(memory_limit) if memory_limit is not None else default_budget()
    spec = parse_scheduler(scheduler)
    _check_work_root(work_dir, paths, inputs)
    be, device_line = get_backend(device, gpu_memory=gpu_memory)
    log.info(device_line)
    if cfg.bands * cfg.rows > cfg.num_perm:  # pragma: no cover - Config checks it
        raise ConfigError("--bands x --rows exceeds --num-perm")
    monitor = PeakMonitor()
    monitor.start()
    executor = None
    wd = None
    try:
        executor = make_executor(spec, workers, be.name)
        plan = make_plan(budget, executor.concurrency)
        if plan.task_bytes < (64 << 20):
            log.warning("memory limit %s leaves %s per task; the interpreter's own footprint "
                        "may exceed it", format_size(budget), format_size(plan.task_bytes))
        key = {"format": FORMAT_VERSION, "config": cfg.to_dict(), "text_field": text_field,
               "id_field": id_field, "on_bad_record": on_bad_record,
               "inputs": input_identity(paths), "plan": plan.key()}
        wd = WorkDir(work_dir_for(output, work_dir, cfg.name, key)).open()
        log.info("work directory: %s", wd.root)
        runner = _Runner(paths, output, cfg, be, device_line.split(": ", 1)[1], wd, executor,
                         plan, text_field, id_field, monitor, on_progress, inputs)
        runner.ctx.on_bad_record = on_bad_record
        runner.ctx.gpu_memory = gpu_memory
        runner.html = html
        if be.name != "cpu":
            _BACKENDS[(be.name, gpu_memory)] = be      # tasks in this process share it
        report = runner.run(t_start, lambda: check_output(output, paths, inputs, overwrite))
    finally:
        if executor is not None:
            executor.close()
        monitor.stop()
        if wd is not None:
            wd.close()
    if not keep_work_dir:
        wd.remove()
        if work_dir is None:
            try:
                os.rmdir(os.path.dirname(wd.root))
            except OSError:
                pass
    return report


__all__ = ["run_staged", "make_plan", "plan_reads", "anchor_edges", "anchor_edges_segments",
           "DEFAULT_ROOT"]
