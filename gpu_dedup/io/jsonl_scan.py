"""The checks of a JSONL block that need no state, before Arrow parses it
(:mod:`gpu_dedup.io.jsonl`): its UTF-8 (invalid bytes replaced, the lines
counted), its lines, which of them are records (``{...}``), and whether a
line needs Python's parser for a second opinion (a line that is not a
record, a number literal Arrow accepts and JSON does not). A pure function
of the block, so a worker thread can scan the next block while Arrow parses
this one (:func:`scanned`).
"""
from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

_OPEN = 123     # {
_CLOSE = 125    # }
_CR = 13
_NL = 10
# Number literals where Arrow's parser (RapidJSON with NaN/Inf enabled)
# accepts more than JSON does: Inf, -Inf, -NaN.
_NAN_INF_WORDS = (b"Inf", b"NaN")


def repair_utf8(block: bytes) -> tuple[bytes, list[int]]:
    """``block`` with invalid UTF-8 replaced by U+FFFD, and the (0-based)
    numbers of the lines that had any. Newlines never move."""
    try:
        block.decode("utf-8")
        return block, []
    except UnicodeDecodeError:
        pass
    bad = []
    out = []
    for i, line in enumerate(block.split(b"\n")):
        try:
            line.decode("utf-8")
            out.append(line)
        except UnicodeDecodeError:
            bad.append(i)
            out.append(line.decode("utf-8", errors="replace").encode("utf-8"))
    return b"\n".join(out), bad


def _is_utf8(block: bytes) -> bool:
    n = len(block)
    if n == 0:
        return True
    arr = pa.LargeStringArray.from_buffers(
        1, pa.py_buffer(np.array([0, n], dtype=np.int64)), pa.py_buffer(block))
    try:
        arr.validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


def line_bounds(buf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (exclusive, before the newline) of every line of a
    block; a final newline does not open an empty line."""
    return bounds_of_newlines(np.flatnonzero(buf == _NL), buf.size)


def sparse_line_bounds(data, n: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`line_bounds` of ``data[:n]`` (``bytes`` or ``bytearray``),
    found a newline after another by ``find``: for a block of few long lines,
    whose bytes are then read once by ``memchr`` and not compared into an
    array of their size."""
    nl = []
    p = data.find(b"\n", 0, n)
    while p >= 0:
        nl.append(p)
        p = data.find(b"\n", p + 1, n)
    return bounds_of_newlines(np.array(nl, dtype=np.int64), n)


def bounds_of_newlines(nl: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The lines' starts and ends from the positions ``nl`` of the newlines
    of a block of ``n`` bytes (:func:`line_bounds`)."""
    starts = np.empty(nl.size + 1, dtype=np.int64)
    starts[0] = 0
    starts[1:] = nl + 1
    ends = np.empty(nl.size + 1, dtype=np.int64)
    ends[:-1] = nl
    ends[-1] = n
    if starts[-1] >= n:           # the block ends with a newline (or is empty)
        starts = starts[:-1]
        ends = ends[:-1]
    return starts, ends


def _nan_inf_suspect(block: bytes, buf: np.ndarray, starts, ends) -> bool:
    """Whether a line may hold a number literal Arrow accepts and JSON does
    not. Each ``Inf``/``NaN`` in value position (after ``:``, ``,`` or ``[``,
    then blanks and ``-``) sends its line to Python's parser for a second
    opinion; the same words inside text mostly fail the position test."""
    n = buf.size
    for word in _NAN_INF_WORDS:
        if word not in block:          # one fast search of the bytes, nothing allocated
            continue
        p = np.flatnonzero(buf[:max(n - 2, 0)] == word[0])
        if p.size == 0:
            continue
        p = p[(buf[p + 1] == word[1]) & (buf[p + 2] == word[2])]
        if p.size == 0:
            continue
        q = p - 1
        while True:                             # step back over '-' and blanks
            back = (q >= 0) & np.isin(buf[np.maximum(q, 0)], (32, 9, 13, 45))
            if not back.any():
                break
            q = np.where(back, q - 1, q)
        hit = (q >= 0) & np.isin(buf[np.maximum(q, 0)], (58, 44, 91))    # : , [
        for pos in p[hit].tolist():
            i = int(np.searchsorted(ends, pos, side="left"))
            try:
                json.loads(block[starts[i]:ends[i]].decode("utf-8"))
            except (ValueError, RecursionError):
                return True
    return False


@dataclass
class BlockScan:
    """What :func:`scan_block` finds in a block before Arrow parses it."""

    block: bytes                 # with invalid UTF-8 replaced
    bad_lines: list              # 0-based lines that had invalid UTF-8
    starts: np.ndarray           # each line's bounds in the block
    ends: np.ndarray
    record: np.ndarray           # per line: a ``{...}`` record (not blank)
    structurally_bad: bool       # a line neither blank nor ``{...}``
    suspicious: bool             # a number literal JSON does not allow, maybe


def _scan_lines(block: bytes):
    """The lines of ``block``: their bounds, which are records, whether one is
    neither blank nor ``{...}``, and whether one may hold a literal JSON
    does not allow."""
    buf = np.frombuffer(block, dtype=np.uint8)
    starts, ends = line_bounds(buf)
    if starts.size == 0:
        return starts, ends, np.zeros(0, bool), False, False
    lens = ends - starts
    ok = lens >= 2
    first = buf[np.minimum(starts, buf.size - 1)]
    last = buf[np.maximum(ends - 1, 0)]
    last2 = buf[np.maximum(ends - 2, 0)]
    ok &= first == _OPEN
    ok &= (last == _CLOSE) | ((last == _CR) & (last2 == _CLOSE) & (lens >= 3))
    record = ok
    structurally_bad = False
    if not ok.all():
        record = ok.copy()
        for i in np.flatnonzero(~ok).tolist():
            s = block[starts[i]:ends[i]].strip(b" \t\r")
            if not s:
                continue                      # blank line: not a record
            if s[0] == _OPEN and s[-1] == _CLOSE:
                record[i] = True
            else:
                structurally_bad = True
                break
    suspicious = False if structurally_bad else _nan_inf_suspect(block, buf, starts, ends)
    return starts, ends, record, structurally_bad, suspicious


def scan_block(block: bytes) -> BlockScan:
    """The checks of a block that need no state: its UTF-8 (repaired), its
    lines, which of them are records, and whether a line needs Python's
    parser (one that is not ``{...}``, or a ``NaN`` or ``Inf`` literal)."""
    bad_lines: list[int] = []
    if not _is_utf8(block):
        block, bad_lines = repair_utf8(block)
    starts, ends, record, bad, suspicious = _scan_lines(block)
    return BlockScan(block, bad_lines, starts, ends, record, bad, suspicious)


#: From this many blocks on, a file or piece is read with the next block
#: scanned ahead (:func:`scanned`): a block is held ahead only once this many
#: have been read, so it is at most half of what the reader holds of the
#: piece anyway (its texts), and a piece of one block is read alone. From
#: the second block rather than the fourth: paragraphs 311 against 284 MB/s
#: and long documents 430 against 327 (fresh processes alternating, medians
#: of 7), short lines 258 against 253.
AHEAD_BLOCKS = 2


def scanned(blocks):
    """:func:`scan_block` of each of ``blocks``, in order. From the
    :data:`AHEAD_BLOCKS`-th block on, the next block is read, decompressed
    and scanned in a worker thread while the caller parses this one (NumPy
    and Arrow let go of the interpreter while they work): 1.3x on paragraphs
    and 1.6x on long documents on two cores, nothing on short lines, where
    Arrow's parse keeps both cores busy (``bench/results/reading.md``). An
    error (a corrupt file) reaches the caller with the block it concerns."""
    it = iter(blocks)

    def step():
        b = next(it, None)
        return None if b is None else scan_block(b)

    pending = None
    taken = 0
    try:
        while True:
            sc = step() if pending is None else pending.result()
            pending = None
            if sc is None:
                return
            taken += 1
            if taken >= AHEAD_BLOCKS - 1:      # the next one is the AHEAD_BLOCKS-th
                pending = _reader().submit(step)
            yield sc
    finally:
        if pending is not None and not pending.cancel():
            pending.exception()              # wait for it: the stream is closed after


_READER = None
_READER_LOCK = threading.Lock()


def _reader():
    """The one thread that reads and scans ahead, for every file of the
    process: a thread of its own per file would take a C allocator arena of
    its own each, and each arena keeps what it freed (131 MiB more at the
    peak of reading 3M short documents in pieces, against one thread)."""
    global _READER
    with _READER_LOCK:
        if _READER is None:
            from concurrent.futures import ThreadPoolExecutor
            _READER = ThreadPoolExecutor(1, thread_name_prefix="gpu-dedup-read")
        return _READER


def stop_reader() -> None:
    """Let the reading thread end (it starts again when next needed): what
    a normal exit does to an idle pool, done before a quick one."""
    global _READER
    with _READER_LOCK:
        reader, _READER = _READER, None
    if reader is not None:
        reader.shutdown(wait=True)


def _forget_reader() -> None:
    """In a forked child the reader's thread does not exist: start a new one."""
    global _READER, _READER_LOCK
    _READER = None
    _READER_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_reader)
