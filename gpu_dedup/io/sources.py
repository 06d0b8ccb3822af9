"""Input discovery and the corpus: many shards, one text column.

Inputs are files, directories and glob patterns:

* ``.jsonl`` (also ``.json``, ``.ndjson``), optionally ``.gz`` or ``.zst``:
  one shard each;
* ``.parquet`` (``.pq``): one shard each; a directory of them (a Hugging Face
  parquet export, for example) gives its files in sorted order;
* ``.arrow``, ``.feather``, ``.ipc``: Arrow IPC files (file or stream
  format), one shard each;
* a folder written by Hugging Face ``datasets``' ``save_to_disk``
  (``state.json``, ``dataset_info.json``, ``data-*.arrow``): one shard, its
  data/ output a folder ``load_from_disk`` opens (:mod:`gpu_dedup.io.arrow`);
* ``.txt``: one document per file. A directory holding ``.txt`` files and no
  JSONL or Parquet file is one shard whose ids are the relative paths; ``.txt``
  files named directly are grouped by directory the same way.
* ``-``: JSON Lines (plain, gzip or zstd) read from standard input, spooled
  to a temporary file (:mod:`gpu_dedup.io.stdin`); messages and generated
  ids name it ``<stdin>``, its data/ output is ``stdin.jsonl`` (``.gz`` or
  ``.zst`` appended when the stream is compressed).

In a folder, a ``.json`` file is a shard only when its first line is a
whole JSON object (a JSON Lines file); metadata files (``dataset_info.json``,
pretty-printed JSON) are left alone.

A JSONL file's compression is the one it actually has
(:func:`gpu_dedup.io.compression.compression_of`: the suffix, else its magic
bytes), and its data/ output has the same.

Every input record ends up in one :class:`Shard`, which also writes its kept
records back in its own format (:mod:`gpu_dedup.io.writers`).
"""
from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from ..arrays import arrow
from ..compute import cast, pc, prefixed
from ..errors import InputError
from ..ids import duplicate_id_error, first_duplicate
from ..paths import plain_relative
from .arrow import (ARROW_SUFFIXES, DATASETS_METADATA, check_datasets_folder, datasets_files,
                    is_datasets_folder, read_arrow_shard)
from . import fs
from .compression import compression_of
from .fs import is_url, local_path
from .jsonl import BLOCK_BYTES, read_jsonl_shard
from .names import require_regular, special_kind
from .parquet import read_parquet_shard
from .stdin import STDIN, display_name, is_stdin, resolve
from .stdin import output_name as stdin_output_name
from .txt import TXT_SUFFIXES, list_txt, read_txt_files
from .writers import write_kept

JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
PARQUET_SUFFIXES = (".parquet", ".pq")
COMPRESSED = ("", ".gz", ".zst", ".zstd")
ON_BAD_RECORD = ("error", "skip")
_KNOWN = (".jsonl, .jsonl.gz, .jsonl.zst, .parquet, .arrow, .feather, .txt or datasets "
          "save_to_disk folders")


def format_of(path: str) -> str | None:
    """``"jsonl"``, ``"parquet"``, ``"arrow"`` or ``"txt"`` from the name (a
    ``datasets`` folder is ``"datasets"``, another directory ``"txt"``; ``-``,
    standard input, is ``"jsonl"``), None if unknown."""
    if str(path) == STDIN:
        return "jsonl"
    p = path.lower()
    for c in COMPRESSED:
        if c and p.endswith(c):
            p = p[: -len(c)]
            break
    if p.endswith(JSONL_SUFFIXES):
        return "jsonl"
    if p.endswith(PARQUET_SUFFIXES):
        return "parquet"
    if path.lower().endswith(ARROW_SUFFIXES):
        return "arrow"
    if path.lower().endswith(TXT_SUFFIXES):
        return "txt"
    if is_url(path):
        return None
    if os.path.isdir(path):
        return "datasets" if is_datasets_folder(path) else "txt"
    return None


def _looks_like_jsonl(path: str) -> bool:
    """Whether a ``.json`` file found in a folder is JSON Lines: its first
    non-blank line is a whole JSON object."""
    import json
    if os.path.basename(path) in DATASETS_METADATA:
        return False
    if not path.lower().endswith(".json"):
        return True
    if special_kind(path) is not None:
        return True                   # refused as an input, never opened here
    try:
        with open(path, "rb") as f:
            for line in f:
                if line.strip():
                    return isinstance(json.loads(line), dict)
    except (OSError, ValueError):
        return False
    except RecursionError:
        return True                   # an object nested deeply: the reader names it
    return True


def _data_files(root: str) -> list[str]:
    """The shards of a folder, sorted: data files, and ``datasets`` folders
    (each one shard, not walked into)."""
    if is_datasets_folder(root):
        check_datasets_folder(root)
        return [root]
    files = []
    for d, dirs, names in os.walk(root):
        inner = sorted(x for x in dirs if not x.startswith("."))
        sets = [x for x in inner if is_datasets_folder(os.path.join(d, x))]
        dirs[:] = [x for x in inner if x not in sets]
        found = [os.path.join(d, x) for x in sets]
        for x in found:
            check_datasets_folder(x)
        for name in names:
            if name.startswith("."):
                continue
            full = os.path.join(d, name)
            if format_of(full) == "jsonl" and not _looks_like_jsonl(full):
                continue
            if format_of(full) in ("jsonl", "parquet", "arrow"):
                require_regular(full, display_name(full))
                found.append(full)
        files += sorted(found)
    return files


def _expand_url(spec: str) -> list[str]:
    """The objects a URL names: itself, those below a prefix, or those a
    glob matches (``*``, ``?``, ``[...]``; ``**`` crosses ``/``), sorted."""
    import fnmatch
    if any(ch in spec for ch in "*?["):
        cut = min(spec.find(ch) for ch in "*?[" if ch in spec)
        prefix = spec[:cut].rsplit("/", 1)[0]
        pattern = re.compile(fnmatch.translate(spec).replace(".*", "[^/]*")
                             .replace("[^/]*[^/]*", ".*"))
        found = [u for u in fs.listdir(prefix) if pattern.fullmatch(u)]
        found = [u for u in found if format_of(u) is not None]
        if not found:
            raise InputError(f"{display_name(spec)}: no object matches this pattern")
        return found
    info = fs.info(spec)
    if info.type == fs.pafs.FileType.File:
        if format_of(spec) is None:
            raise InputError(f"{display_name(spec)}: unknown input format; expected {_KNOWN}")
        return [spec]
    found = [u for u in fs.listdir(spec) if format_of(u) in ("jsonl", "parquet", "arrow")
             and not u.rsplit("/", 1)[-1].startswith(".")
             and u.rsplit("/", 1)[-1] not in DATASETS_METADATA]
    if not found:
        raise InputError(f"{display_name(spec)}: no such file or directory "
                         f"(or no {_KNOWN} files below it)")
    return found


def expand_inputs(inputs) -> list[str]:
    """Files named, globs expanded and directories walked (sorted), each once.

    A directory with JSONL or Parquet files gives those files; one without
    them but with ``.txt`` files is returned as itself, a text corpus. ``-``
    spools standard input and gives the spool file's path.
    """
    out: list[str] = []
    seen = set()
    for spec in inputs:
        spec = str(local_path(spec))
        if is_url(spec):
            for f in _expand_url(spec):
                if f not in seen:
                    seen.add(f)
                    out.append(f)
            continue
        if spec == STDIN:
            matches = [resolve(spec)]
        elif any(ch in spec for ch in "*?[") and not os.path.exists(spec):
            matches = sorted(glob.glob(spec, recursive=True))
            if not matches:
                raise InputError(f"{display_name(spec)}: no file matches this pattern")
        else:
            matches = [spec]
        for m in matches:
            if os.path.isdir(m):
                group = _data_files(m)
                if not group:
                    if not _checked_txt(m):
                        raise InputError(f"{display_name(m)}: directory holds no {_KNOWN} "
                                         f"files")
                    group = [m]
            elif os.path.lexists(m):
                require_regular(m, display_name(m))
                if not os.path.exists(m):
                    raise InputError(f"{display_name(m)}: a link to nothing "
                                     f"(no such file or directory)")
                if format_of(m) is None:
                    raise InputError(f"{display_name(m)}: unknown input format; "
                                     f"expected {_KNOWN}")
                if format_of(m) == "txt":
                    plain_relative(os.path.basename(m), display_name(m))
                group = [m]
            else:
                raise InputError(f"{display_name(m)}: no such file or directory")
            for f in group:
                key = os.path.realpath(f)
                if key not in seen:
                    seen.add(key)
                    out.append(f)
    if not out:
        raise InputError("no input files given")
    return out


def _checked_txt(root: str) -> list[str]:
    """The ``.txt`` files of a text folder, each a regular file with a plain
    relative name (its data/ output is written under that name)."""
    files = list_txt(root)
    for rel in files:
        full = os.path.join(root, rel)
        require_regular(full, display_name(full))
        plain_relative(rel.replace(os.sep, "/"), display_name(full))
    return files


def record_location(fmt: str, path: str, loc: int, files: list | None = None) -> str:
    """Where record ``loc`` of an input is, for messages: ``FILE:LINE``
    (JSONL), ``FILE: row N`` (Parquet, Arrow, ``datasets``), or the path of
    text file number ``loc`` (1-based) of ``files``, relative to ``path``."""
    if fmt == "jsonl":
        return f"{display_name(path)}:{int(loc)}"
    if fmt in ("parquet", "arrow", "datasets"):
        return f"{display_name(path)}: row {int(loc)}"
    return display_name(os.path.join(path, files[int(loc) - 1]))


def generated_ids(path: str, locations: np.ndarray, files: list | None = None) -> pa.Array:
    """The ids of records that have none: ``FILE:LINE`` (``FILE:ROW``) from
    their ``locations``, or, for a text shard (``files``: its files relative
    to ``path``), the path of text file number ``location``."""
    if files is not None:
        return arrow([display_name(os.path.join(path, files[int(loc) - 1]))
                      for loc in np.asarray(locations).tolist()], pa.large_string())
    # built without pa.array or pa.scalar, which import pandas when it is installed
    nums = cast(arrow(np.asarray(locations, dtype=np.int64)), pa.large_string())
    return prefixed(f"{display_name(path)}:", nums)


@dataclass
class Shard:
    """One input shard: its texts, ids and what is needed to write its kept rows.

    ``locations`` are 1-based line numbers (JSONL), row numbers (Parquet) or
    file numbers (text). ``skipped`` lists the bad records left out
    (``on_bad_record="skip"``) as ``(location, reason)``.
    """

    path: str
    fmt: str
    compression: str | None
    texts: pa.Array
    ids: pa.Array | None
    locations: np.ndarray
    invalid_utf8: int = 0
    skipped: list = field(default_factory=list)
    files: list | None = None        # text shards: the files, relative to ``path``
    out_name: str = ""

    def __len__(self) -> int:
        return len(self.texts)

    def location(self, loc: int) -> str:
        """``FILE:LINE``, ``FILE: row N`` or the text file, for messages."""
        return record_location(self.fmt, self.path, loc, self.files)

    def generated_ids(self) -> pa.Array:
        """``FILE:LINE`` (``FILE:ROW``) ids, or the text files' paths."""
        return generated_ids(self.path, self.locations,
                             self.files if self.fmt == "txt" else None)

    def write_kept(self, keep: np.ndarray | None, path: str,
                   block_bytes: int = BLOCK_BYTES) -> int:
        """Write the kept records (``keep``: one flag per record; None: every
        record of ``locations``) to ``path``,
        in this shard's format (:func:`gpu_dedup.io.writers.write_kept`);
        returns how many were written. A JSONL shard is copied
        ``block_bytes`` of input at a time."""
        return write_kept(self.fmt, self.path, self.locations, keep, path, files=self.files,
                          block_bytes=block_bytes)


def _txt_group(path: str) -> tuple[str, list[str]]:
    if os.path.isdir(path):
        return path, list_txt(path)
    return os.path.dirname(path) or ".", [os.path.basename(path)]


def read_shard(path: str, text_field: str = "text", id_field: str | None = "id",
               on_bad_record: str = "error", progress=None, *, files=None,
               block_bytes: int = BLOCK_BYTES) -> Shard:
    """Read one input (a JSONL or Parquet file, a text directory or file, or
    ``-``, standard input)."""
    path = resolve(path)
    fmt = format_of(path)
    if fmt == "jsonl":
        d = read_jsonl_shard(path, text_field, id_field, on_bad_record, block_bytes,
                             progress=progress)
        return Shard(path, fmt, compression_of(path), d.texts, d.ids, d.lines, d.invalid_utf8,
                     d.skipped)
    if fmt == "parquet":
        d = read_parquet_shard(path, text_field, id_field, on_bad_record)
        return Shard(path, fmt, d.compression, d.texts, d.ids, d.rows, 0, d.skipped)
    if fmt in ("arrow", "datasets"):
        d = read_arrow_shard(path, text_field, id_field, on_bad_record,
                             files=datasets_files(path) if fmt == "datasets" else None)
        return Shard(path, fmt, None, d.texts, d.ids, d.rows, 0, d.skipped)
    if fmt == "txt":
        root, found = _txt_group(path)
        files = list(files) if files is not None else found
        d = read_txt_files(root, files)
        ids = d.ids if id_field is not None else None
        return Shard(root, fmt, None, d.texts, ids, np.arange(1, len(files) + 1, dtype=np.int64),
                     d.invalid_utf8, [], files=files)
    raise InputError(f"{display_name(path)}: unknown input format; expected {_KNOWN}")


def group_inputs(paths: list[str]) -> list[tuple[str, list | None]]:
    """The shards of the inputs, as ``(path, files)``: consecutive ``.txt``
    files of one directory become one text shard ``(directory, names)``;
    every other input is ``(path, None)`` (``-``: the spool file of standard
    input)."""
    out: list[tuple[str, list | None]] = []
    for p in map(resolve, paths):
        if format_of(p) == "txt" and not os.path.isdir(p):
            root = os.path.dirname(p) or "."
            if out and out[-1][1] is not None and out[-1][0] == root:
                out[-1][1].append(os.path.basename(p))
                continue
            out.append((root, [os.path.basename(p)]))
        else:
            out.append((p, None))
    return out


def output_names(paths: list[str]) -> list[str]:
    """Relative names for the output shards, unique, mirroring the inputs:
    the file names, else the paths relative to the inputs' common folder,
    else numbered file names. Standard input is ``stdin.jsonl`` (plus ``.gz``
    or ``.zst`` when compressed). Every name is a plain relative name
    (:func:`gpu_dedup.paths.plain_relative`), else an :class:`InputError`:
    a data/ path is ``contained(data_dir, name, ...)``."""
    names = _output_names(paths)
    for p, n in zip(paths, names):
        plain_relative(n, f"{display_name(p)}: output name")
    return names


def _output_names(paths: list[str]) -> list[str]:
    stdin = [is_stdin(p) for p in paths]
    absps = [os.path.abspath(p).rstrip(os.sep) for p in paths]
    base = [stdin_output_name(p) if s else os.path.basename(a)
            for p, a, s in zip(paths, absps, stdin)]
    if len(set(base)) == len(base):
        return base
    files = [a for a, s in zip(absps, stdin) if not s]
    root = os.path.commonpath([os.path.dirname(a) for a in files]) if files else ""
    names = [b if s else os.path.relpath(a, root) for a, b, s in zip(absps, base, stdin)]
    if len(set(names)) == len(names):
        return names
    return [f"{i:05d}-{b}" for i, b in enumerate(base)]


@dataclass
class Corpus:
    """Every shard of the inputs, read, with their texts and ids one after
    the other in input order."""

    shards: list[Shard]
    texts: pa.Array
    ids: pa.Array
    shard_of: np.ndarray              # shard index of each document
    invalid_utf8: int = 0

    def __len__(self) -> int:
        return len(self.texts)

    def locate(self, i: int) -> str:
        k = int(self.shard_of[i])
        s = self.shards[k]
        start = int(np.searchsorted(self.shard_of, k, side="left"))
        return s.location(int(s.locations[i - start]))


def read_corpus(paths: list[str], text_field: str = "text", id_field: str | None = "id",
                on_bad_record: str = "error", progress=None) -> Corpus:
    """Read every shard; ids are the id field as a string, or ``FILE:LINE``
    (``FILE:ROW`` for Parquet, the file's path for text) where a shard has no
    id field.

    Args:
        paths: from :func:`expand_inputs`.
        on_bad_record: ``"error"`` stops at the first bad record with an
            :class:`InputError` naming its file and line; ``"skip"`` leaves bad
            records out and lists them in the shards' ``skipped``.
        progress: called as ``progress(fraction)`` while reading.
    """
    if on_bad_record not in ON_BAD_RECORD:
        raise InputError(f"--on-bad-record must be 'error' or 'skip', got {on_bad_record!r}")
    groups = group_inputs(paths)
    sizes = []
    for p, files in groups:
        try:
            if files is not None:
                sizes.append(sum(os.path.getsize(os.path.join(p, f)) for f in files))
            elif os.path.isdir(p):
                sizes.append(sum(os.path.getsize(os.path.join(p, f)) for f in list_txt(p)))
            else:
                sizes.append(fs.getsize(p))
        except OSError:
            sizes.append(0)
    total = max(sum(sizes), 1)
    done = 0
    shards = []
    for (p, files), size in zip(groups, sizes):
        cb = None
        if progress is not None and compression_of(p) is None and format_of(p) == "jsonl":
            state = {"n": 0}

            def cb(nbytes, _s=state, _d=done):
                _s["n"] += nbytes
                progress(min(_d + _s["n"], total) / total)
        shards.append(read_shard(p, text_field, id_field, on_bad_record, cb, files=files))
        done += size
        if progress is not None:
            progress(done / total)
    names = output_names([s.path for s in shards])
    ids = []
    for s, name in zip(shards, names):
        s.out_name = name
        ids.append(s.ids if s.ids is not None else s.generated_ids())
    texts = (pa.concat_arrays([s.texts for s in shards]) if shards
             else pa.array([], pa.large_string()))
    id_arr = pa.concat_arrays(ids) if ids else pa.array([], pa.large_string())
    shard_of = np.repeat(np.arange(len(shards)), [len(s) for s in shards])
    corpus = Corpus(shards, texts, id_arr, shard_of, sum(s.invalid_utf8 for s in shards))
    _check_unique_ids(corpus)
    return corpus


def _check_unique_ids(c: Corpus) -> None:
    pair = first_duplicate(c.ids)
    if pair is not None:
        first, second = pair
        raise duplicate_id_error(c.ids[first].as_py(), c.locate(second), c.locate(first))
