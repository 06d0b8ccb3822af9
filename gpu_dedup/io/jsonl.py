"""JSON Lines shards (plain, gzip, zstd).

A record is one line holding a JSON object (RFC 8259; ``NaN``, ``Infinity``
and ``-Infinity`` are read as numbers, as Python's :mod:`json` reads them).
Blank lines are skipped; line numbers count every line from 1. A UTF-8
byte-order mark at the start of a file is ignored by the readers.

Compression (:func:`gpu_dedup.io.compression.compression_of`) comes from a ``.gz``/``.zst``/``.zstd``
suffix; a file without one is recognised by its magic bytes (gzip ``1f 8b``,
zstd ``28 b5 2f fd``), so gzip data in a file named ``.jsonl`` reads as gzip.
A suffix is trusted: a ``.gz`` file that is not gzip is a corrupt-data error.

Reading streams the decompressed file in newline-aligned blocks
(:func:`iter_blocks`). Each block is scanned (:mod:`gpu_dedup.io.jsonl_scan`;
from a file's second block on, the next one in a worker thread while this
one is parsed), then parsed by Arrow's JSON reader, asking only for the text and
id fields (:func:`parse_block`), which are copied at once into one buffer
for the shard (:class:`TextSink`). A block goes through the
line-by-line parser instead when it holds anything Arrow and Python's
:mod:`json` could disagree on: invalid UTF-8 (replaced, and the lines
counted), a line that is not ``{...}``, a record without a string text, a
number literal Arrow accepts but JSON does not (``Inf``), ids of another
type... That parser names the first bad line or, with ``on_bad_record="skip"``,
skips bad records and lists them. Clean input never runs Python per record.

Writing copies the kept records' lines exactly as they are in the input
(invalid UTF-8, carriage returns and a leading byte-order mark, which belongs
to line 1, included), each followed by a newline, in input order, into a file
of the compression the input actually has (:func:`write_kept_lines`). The
U+FFFD repair applies only to what is read.

Every function taking a path also takes ``-``, standard input (see
:mod:`gpu_dedup.io.stdin`); messages name it ``<stdin>``.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.json as pj

from ..compute import cast
from ..errors import InputError
from .compression import CompressedWriter, compression_of, open_decompressed
from .jsonl_scan import BlockScan, line_bounds, scan_block, scanned, sparse_line_bounds
from .records import BadRecord, one_line, parse_record
from .stdin import display_name, resolve

#: Decompressed bytes per block. Blocks below the C allocator's largest
#: threshold for mapping memory afresh (32 MiB in glibc) reuse the pages the
#: block before freed: in a fresh process, reading took 1.3-1.5x as long with
#: blocks of 32 MiB (first touches of new pages).
BLOCK_BYTES = 8 << 20
#: The UTF-8 byte-order mark.
BOM = b"\xef\xbb\xbf"
#: Mean bytes a line of the blocks written so far from which the writer
#: finds a block's newlines one after another (``bytes.find``) rather
#: than by comparing every byte in NumPy.
SPARSE_LINE_BYTES = 512
ON_BAD_RECORD = ("error", "skip")


# ---------------------------------------------------------------------------
# streaming the decompressed bytes
# ---------------------------------------------------------------------------

def _unreadable(path: str, comp: str | None, exc: Exception) -> InputError:
    """The one line for an input that cannot be read through."""
    what = f"{comp} data" if comp else "file"
    return InputError(f"{display_name(path)}: corrupt or unreadable {what} ({one_line(exc)}); "
                      f"remove it or replace it with an intact copy")


def iter_blocks(path: str, block_bytes: int = BLOCK_BYTES, *, keep_bom: bool = False):
    """Yield the decompressed content of ``path`` in blocks that end at a
    newline (the last one may not), at least ``block_bytes`` long except the
    last. A leading byte-order mark is dropped unless ``keep_bom``. Raises
    :class:`InputError` for an unreadable or corrupt file."""
    path = resolve(path)
    comp = compression_of(path)
    stream = open_decompressed(path, comp)
    carry = b""
    first = not keep_bom
    try:
        while True:
            try:
                chunk = stream.read(block_bytes)
            except (OSError, pa.ArrowException) as exc:
                raise _unreadable(path, comp, exc) from exc
            if not chunk:
                if first and carry.startswith(BOM):
                    carry = carry[len(BOM):]
                if carry:
                    yield carry
                return
            if first:
                buf = carry + chunk if carry else chunk
                if len(buf) < len(BOM) and BOM.startswith(buf):
                    carry = buf
                    continue
                first = False
                chunk = buf[len(BOM):] if buf.startswith(BOM) else buf
                carry = b""
            cut = chunk.rfind(b"\n")
            if cut < 0:
                carry = carry + chunk
                continue
            # one copy per block: the carried tail and the chunk up to its last newline
            if carry:
                block = b"".join((carry, memoryview(chunk)[:cut + 1]))
            elif cut == len(chunk) - 1:
                block = chunk
            else:
                block = chunk[:cut + 1]
            carry = chunk[cut + 1:]
            chunk = None                # not held beside the block while it is used
            yield block
    finally:
        stream.close()


# ---------------------------------------------------------------------------
# blocks
# ---------------------------------------------------------------------------

class TextSink:
    """The texts (or ids) of a shard's blocks, gathered as the blocks are
    parsed.

    With a ``capacity`` (the bytes of the input, which its strings never
    exceed unless invalid UTF-8 is replaced: then the buffer grows), each
    block's strings are copied into one buffer at once and the block's Arrow
    arrays let go, so that the next block's parse reuses their memory and
    the strings are not copied a second time at the end. Without one, or
    from the first array with nulls on (ids missing from some records), the
    arrays are kept and concatenated at the end.
    """

    def __init__(self, capacity: int | None = None):
        self._parts: list = []
        self._data = None if capacity is None else np.empty(max(int(capacity), 1), np.uint8)
        self._offsets: list = []
        self._used = 0
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def add(self, arrays) -> None:
        """Texts (large string arrays without nulls), in order."""
        for a in arrays:
            self._count += len(a)
            if self._data is not None and a.null_count:
                self._parts = [self._gathered(self._count - len(a))]
                self._data = None
            if self._data is None:
                self._parts.append(a)
                continue
            _, ob, db = a.buffers()
            off = np.frombuffer(ob, np.int64, len(a) + 1, a.offset * 8)
            lo, hi = int(off[0]), int(off[-1])
            end = self._used + hi - lo
            if end > self._data.size:           # replaced UTF-8 made it longer
                grown = np.empty(max(end, 2 * self._data.size), np.uint8)
                grown[:self._used] = self._data[:self._used]
                self._data = grown
            if hi > lo:
                self._data[self._used:end] = np.frombuffer(db, np.uint8, hi - lo, lo)
            self._offsets.append(off[1:] - (lo - self._used))
            self._used = end

    def _gathered(self, count: int) -> pa.Array:
        offsets = np.concatenate([np.zeros(1, np.int64)] + self._offsets)
        return pa.LargeStringArray.from_buffers(
            count, pa.py_buffer(offsets), pa.py_buffer(self._data[:self._used]))

    def array(self) -> pa.Array:
        """Every string added, as one large string array."""
        if self._data is None:
            return pa.concat_arrays(self._parts) if self._parts \
                else pa.array([], type=pa.large_string())
        return self._gathered(self._count)


@dataclass
class ShardReadState:
    """What a JSONL shard's blocks accumulate while it is read."""

    path: str
    text_field: str
    id_field: str | None
    on_bad_record: str = "error"
    id_type: pa.DataType = field(default_factory=pa.large_string)
    texts: TextSink = field(default_factory=TextSink)
    ids: TextSink = field(default_factory=TextSink)
    lines: list = field(default_factory=list)
    skipped: list = field(default_factory=list)     # (line, reason)
    replaced: list = field(default_factory=list)   # per record: invalid Unicode replaced
    line_base: int = 0
    fast_blocks: int = 0
    slow_blocks: int = 0

    def bad(self, line: int, reason: str) -> None:
        if self.on_bad_record == "skip":
            self.skipped.append((line, reason))
            return
        raise InputError(f"{display_name(self.path)}:{line}: {reason}")


def _arrow_block(block: bytes, st: ShardReadState, n_records: int, max_line: int):
    """Texts and ids (with nulls) of a block whose every non-blank line is
    ``{...}``, each as the list of Arrow's chunks (the reader concatenates
    them once, at the end), or None when Arrow refuses it or disagrees on the
    count."""
    size = max(1 << 20, max_line + 2)
    # Arrow parses a block of one chunk on one thread: asking for threads
    # there only starts its pool (a few ms of a small run's start)
    ro = pj.ReadOptions(block_size=size, use_threads=len(block) > size)
    types = [st.id_type]
    if st.id_field is not None:
        types += [t for t in (pa.large_string(), pa.int64()) if t != st.id_type]
    for typ in types:
        fields = [(st.text_field, pa.large_string())]
        if st.id_field is not None and st.id_field != st.text_field:
            fields.append((st.id_field, typ))
        try:
            t = pj.read_json(pa.py_buffer(block), read_options=ro,
                             parse_options=pj.ParseOptions(explicit_schema=pa.schema(fields),
                                                           unexpected_field_behavior="ignore"))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            if st.id_field is None:
                return None
            continue
        if t.num_rows != n_records:
            return None
        texts = t.column(st.text_field)
        if texts.null_count:
            return None
        ids = None
        if st.id_field is not None:
            if st.id_field == st.text_field:
                ids = texts
            else:
                ids = t.column(st.id_field)
                st.id_type = typ
                if ids.type != pa.large_string():
                    ids = cast(ids, pa.large_string())
        return texts.chunks, None if ids is None else ids.chunks
    return None


def parse_block(block, st: ShardReadState) -> None:
    """Parse one newline-aligned block (or its :class:`BlockScan`) into
    ``st`` (texts, ids, line numbers, skipped records). Raises
    :class:`InputError` on the first bad record unless
    ``st.on_bad_record == "skip"``."""
    base = st.line_base
    sc = block if isinstance(block, BlockScan) else scan_block(block)
    block, bad_lines, starts, ends = sc.block, sc.bad_lines, sc.starts, sc.ends
    st.line_base = base + starts.size
    if starts.size == 0:
        return
    structurally_bad, suspicious = sc.structurally_bad, sc.suspicious
    rec_idx = np.flatnonzero(sc.record)
    got = None
    if not structurally_bad and not suspicious and rec_idx.size:
        got = _arrow_block(block, st, int(rec_idx.size), int((ends - starts).max()))
    if got is not None:
        texts, ids = got
        st.texts.add(texts)
        if ids is not None:
            st.ids.add(ids)
        st.lines.append(rec_idx.astype(np.int64) + (base + 1))
        st.replaced.append(np.isin(rec_idx, bad_lines) if bad_lines
                           else np.zeros(rec_idx.size, dtype=bool))
        st.fast_blocks += 1
        return
    if not structurally_bad and not suspicious and rec_idx.size == 0:
        return
    _slow_block(block, starts, ends, base, st, set(bad_lines))


def _slow_block(block: bytes, starts, ends, base: int, st: ShardReadState,
                bad_lines: set) -> None:
    st.slow_blocks += 1
    texts, ids, lines, replaced = [], [], [], []
    for i, (s, e) in enumerate(zip(starts.tolist(), ends.tolist())):
        line = block[s:e]
        if not line.strip(b" \t\r"):
            continue
        ln = base + i + 1
        try:
            t, v, rep = parse_record(line, st.text_field, st.id_field)
        except BadRecord as exc:
            st.bad(ln, str(exc))
            continue
        texts.append(t)
        ids.append(v)
        lines.append(ln)
        replaced.append(rep or i in bad_lines)
    if not lines:
        return
    st.texts.add([pa.array(texts, type=pa.large_string())])
    if st.id_field is not None:
        st.ids.add([pa.array(ids, type=pa.large_string())])
    st.lines.append(np.asarray(lines, dtype=np.int64))
    st.replaced.append(np.asarray(replaced, dtype=bool))


@dataclass
class JsonlData:
    texts: pa.Array
    ids: pa.Array | None
    lines: np.ndarray
    invalid_utf8: int
    skipped: list
    fast_blocks: int = 0
    slow_blocks: int = 0


def read_jsonl_shard(path: str, text_field: str = "text", id_field: str | None = "id",
                     on_bad_record: str = "error", block_bytes: int = BLOCK_BYTES,
                     progress=None) -> JsonlData:
    """Read a JSONL shard by blocks.

    Args:
        path: a ``.jsonl`` file, optionally ``.gz`` or ``.zst``.
        text_field, id_field: the fields to read (``id_field=None``: no ids).
        on_bad_record: ``"error"`` raises :class:`InputError` naming the first
            bad line; ``"skip"`` skips bad records and lists them.
        block_bytes: decompressed bytes per block.
        progress: called with the compressed bytes read so far (approximately).

    Returns:
        :class:`JsonlData`: texts, ids (None when no record has one), the line
        number of each record, the number of records whose text had invalid
        UTF-8 replaced, and the skipped ``(line, reason)`` pairs.

    Example:
        >>> d = read_jsonl_shard("docs.jsonl")                 # doctest: +SKIP
        >>> len(d.texts), d.lines[:3]                          # doctest: +SKIP
    """
    if on_bad_record not in ON_BAD_RECORD:
        raise ValueError(f"on_bad_record must be 'error' or 'skip', got {on_bad_record!r}")
    st = ShardReadState(path, text_field, id_field, on_bad_record)
    real = resolve(path)
    if compression_of(real) is None and os.path.isfile(real):
        size = os.path.getsize(real)         # the file's bytes bound its texts and its ids
        st.texts, st.ids = TextSink(size), TextSink(size)
    for sc in scanned(iter_blocks(path, block_bytes)):
        parse_block(sc, st)
        if progress is not None:
            progress(len(sc.block))
    texts = st.texts.array()
    if st.lines:
        lines = np.concatenate(st.lines)
        replaced = np.concatenate(st.replaced)
    else:
        lines = np.zeros(0, dtype=np.int64)
        replaced = np.zeros(0, dtype=bool)
    ids = None
    if id_field is not None and len(st.ids):
        ids = st.ids.array()
        nulls = ids.null_count
        if nulls == len(ids):
            ids = None
        elif nulls:
            missing = np.flatnonzero(ids.is_null().to_numpy(zero_copy_only=False))
            if on_bad_record != "skip":
                where = f"{display_name(path)}:{int(lines[missing[0]])}"
                raise InputError(f"{where}: missing id field {id_field!r} "
                                 f"(other records of this file have one)")
            for m in missing.tolist():
                st.skipped.append((int(lines[m]), f"missing id field {id_field!r} "
                                                  f"(other records of this file have one)"))
            keep_np = ~ids.is_null().to_numpy(zero_copy_only=False)
            keep = pa.array(keep_np)
            texts = texts.filter(keep)
            ids = ids.filter(keep)
            lines = lines[keep_np]
            replaced = replaced[keep_np]
    st.skipped.sort()
    return JsonlData(texts, ids, lines, int(replaced.sum()), st.skipped,
                     st.fast_blocks, st.slow_blocks)


# ---------------------------------------------------------------------------
# writing
# ---------------------------------------------------------------------------

def _reused_blocks(path: str, block_bytes: int):
    """The content of ``path`` as :func:`iter_blocks` gives it with
    ``keep_bom`` (decompressed, blocks ending at a newline but the last),
    each block a view of one buffer that the next block reuses: valid until
    the next one is asked for. A block of several MiB in fresh memory costs
    a page fault for each of its pages, each time: writing 60% of the long
    documents' lines took 17,000-29,000 page faults with a new block each
    time and a new join of its kept runs, about 5,000 with both buffers
    reused. A file smaller than a block has a buffer of its size: zeroing
    8 MiB took 5 ms of a run of 100 documents."""
    path = resolve(path)
    comp = compression_of(path)
    stream = open_decompressed(path, comp)
    size = block_bytes + (64 << 10)
    if comp is None and os.path.isfile(path):   # a small file: a buffer of its size
        size = min(size, os.path.getsize(path) + 1)
    buf = bytearray(size)
    filled = 0
    try:
        while True:
            if filled == len(buf):      # a line longer than the buffer: a larger one
                grown = bytearray(2 * len(buf))
                grown[:filled] = buf
                buf = grown             # (views of the old one may still be held)
            try:
                with memoryview(buf) as mv:
                    n = stream.readinto(mv[filled:min(len(buf), filled + block_bytes)])
            except (OSError, pa.ArrowException) as exc:
                raise _unreadable(path, comp, exc) from exc
            if not n:
                if filled:
                    yield memoryview(buf)[:filled]
                return
            filled += n
            cut = buf.rfind(b"\n", 0, filled)
            if cut < 0:
                continue
            yield memoryview(buf)[:cut + 1]
            rest = filled - cut - 1
            buf[:rest] = buf[cut + 1:filled]        # the same size: no view is moved
            filled = rest
    finally:
        stream.close()


def _kept_runs(src: str, kept_lines: np.ndarray, block_bytes: int):
    """For each block of ``src`` holding kept lines: the block, as it is in
    the input (byte-order mark and invalid UTF-8 included), the byte bounds
    of its runs of consecutive kept lines (start of the first line, end of
    the last with its newline: the block's end where its last line has
    none), and whether the last run lacks that newline. Line numbers are
    those the readers give: neither the mark nor the UTF-8 repair adds or
    moves a newline."""
    base = 0
    j = 0
    read = 0
    for block in _reused_blocks(src, block_bytes):
        if j >= kept_lines.size:
            break
        if base and read >= SPARSE_LINE_BYTES * base:
            # long lines so far: a newline after another, not a pass of
            # NumPy comparisons over every byte
            starts, ends = sparse_line_bounds(block.obj, len(block))
        else:
            starts, ends = line_bounds(np.frombuffer(block, dtype=np.uint8))
        read += len(block)
        n = starts.size
        k = int(np.searchsorted(kept_lines, base + n, side="right"))
        sel = kept_lines[j:k] - base - 1
        j = k
        base += n
        if sel.size == 0:
            continue
        brk = np.flatnonzero(np.diff(sel) != 1) + 1
        first = starts[sel[np.concatenate([[0], brk])]]
        last = ends[sel[np.concatenate([brk - 1, [sel.size - 1]])]]
        del starts, ends
        open_end = int(last[-1]) == len(block)      # a last line with no newline
        if not open_end:
            last += 1
        yield block, first, last, open_end, int(sel.size)


def write_kept_lines(src: str, kept_lines: np.ndarray, dst: str,
                     block_bytes: int = BLOCK_BYTES) -> int:
    """Copy the lines numbered ``kept_lines`` (1-based, ascending) of ``src``
    to ``dst``, each exactly as in ``src`` and followed by a newline, in the
    compression ``src`` has, one block of at most about ``block_bytes`` at a
    time (zstd reads ``src`` twice: its frame header records the size
    first). A run of kept lines is one slice of its block, its newline
    included: one Python step per run, not per line, copied into one buffer
    that every block reuses. Returns the number of lines written."""
    kept_lines = np.asarray(kept_lines, dtype=np.int64)
    comp = compression_of(src)
    size = None
    if comp == "zstd":
        size = sum(int((last - first).sum()) + int(open_end)
                   for _, first, last, open_end, _ in _kept_runs(src, kept_lines, block_bytes))
    sink = CompressedWriter(dst, comp, size)
    written = 0
    out = bytearray()                   # one buffer for every block's kept runs
    try:
        for block, first, last, open_end, lines in _kept_runs(src, kept_lines, block_bytes):
            total = int((last - first).sum()) + int(open_end)
            if len(out) < total:
                out = bytearray(total)
            o = 0
            for a, b in zip(first.tolist(), last.tolist()):
                out[o:o + b - a] = block[a:b]
                o += b - a
            if open_end:
                out[o] = 10             # the last line's newline
                o += 1
            with memoryview(out) as mv:
                sink.write(mv[:o])
            written += lines
    finally:
        sink.close()
    return written


def write_edited_lines(src: str, locations: np.ndarray, keep: np.ndarray, changed: np.ndarray,
                       text_of, text_field: str, dst: str,
                       block_bytes: int = BLOCK_BYTES) -> int:
    """Write the records at lines ``locations`` (1-based, ascending) of
    ``src`` whose ``keep`` is set to ``dst``, in ``src``'s compression, one
    block at a time: a record not ``changed`` exactly as it is in ``src``,
    a changed one with its text field replaced by ``text_of(i)`` (``i``: its
    position in ``locations``; the other fields as they were). Returns the
    number of records written."""
    locations = np.asarray(locations, dtype=np.int64)
    keep = np.asarray(keep, dtype=bool)
    changed = np.asarray(changed, dtype=bool)
    sink = CompressedWriter(dst, compression_of(src))
    written = 0
    base = 0
    j = 0
    try:
        for block in iter_blocks(src, block_bytes, keep_bom=True):
            if j >= locations.size:
                break
            starts, ends = line_bounds(np.frombuffer(block, dtype=np.uint8))
            k = int(np.searchsorted(locations, base + starts.size, side="right"))
            mv = memoryview(block)
            parts = []
            sel = np.flatnonzero(keep[j:k]) + j
            line = locations[sel] - base - 1
            ch = changed[sel]
            # runs of consecutive unchanged lines are copied whole; changed ones one by one
            brk = np.ones(sel.size, dtype=bool)
            brk[1:] = (np.diff(line) != 1) | ch[1:] | ch[:-1]
            heads = np.flatnonzero(brk)
            tails = np.concatenate([heads[1:], [sel.size]]) - 1
            for h, t in zip(heads.tolist(), tails.tolist()):
                if ch[h]:
                    raw = bytes(mv[int(starts[line[h]]):int(ends[line[h]])])
                    if raw.startswith(BOM):
                        raw = raw[len(BOM):]
                    try:
                        rec = json.loads(raw.decode("utf-8", errors="replace"))
                        rec[text_field] = text_of(int(sel[h]))
                        parts.append(json.dumps(rec, ensure_ascii=False).encode("utf-8"))
                    except RecursionError:
                        raise InputError(f"{display_name(src)}:{int(locations[sel[h]])}: "
                                         f"nested too deeply for its text to be rewritten; "
                                         f"flatten the record or leave it out") from None
                else:
                    parts.append(mv[int(starts[line[h]]):int(ends[line[t]])])
                parts.append(b"\n")
            written += int(sel.size)
            sink.write(b"".join(parts))
            base += starts.size
            j = k
    finally:
        sink.close()
    return written
