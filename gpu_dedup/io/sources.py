"""Input discovery and the corpus: many shards, one text column."""
from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InputError
from .jsonl import compression_of, read_jsonl, write_jsonl_rows
from .parquet import read_parquet, write_parquet_rows

JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
COMPRESSED = ("", ".gz", ".zst", ".zstd")


def format_of(path: str) -> str | None:
    p = path.lower()
    for c in COMPRESSED:
        if c and p.endswith(c):
            p = p[: -len(c)]
            break
    if p.endswith(JSONL_SUFFIXES):
        return "jsonl"
    if p.endswith((".parquet", ".pq")):
        return "parquet"
    return None


def expand_inputs(inputs) -> list[str]:
    """Files named, globs expanded and directories walked (sorted), each once."""
    out: list[str] = []
    seen = set()
    for spec in inputs:
        spec = str(spec)
        if any(ch in spec for ch in "*?[") and not os.path.exists(spec):
            matches = sorted(glob.glob(spec, recursive=True))
            if not matches:
                raise InputError(f"{spec}: no file matches this pattern")
        else:
            matches = [spec]
        for m in matches:
            if os.path.isdir(m):
                files = []
                for root, dirs, names in os.walk(m):
                    dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                    for name in sorted(names):
                        full = os.path.join(root, name)
                        if format_of(full) is not None:
                            files.append(full)
                if not files:
                    raise InputError(f"{m}: directory holds no .jsonl, .jsonl.gz, .jsonl.zst "
                                     f"or .parquet files")
                group = files
            elif os.path.exists(m):
                if format_of(m) is None:
                    raise InputError(f"{m}: unknown input format; expected .jsonl, .jsonl.gz, "
                                     f".jsonl.zst or .parquet")
                group = [m]
            else:
                raise InputError(f"{m}: no such file or directory")
            for f in group:
                key = os.path.realpath(f)
                if key not in seen:
                    seen.add(key)
                    out.append(f)
    if not out:
        raise InputError("no input files given")
    return out


@dataclass
class Shard:
    """One input file: its texts, ids and what is needed to write its kept rows."""

    path: str
    fmt: str
    compression: str | None
    texts: pa.Array
    ids: pa.Array | None
    locations: np.ndarray            # 1-based line (JSONL) or row (Parquet) per record
    invalid_utf8: int = 0
    raw: bytes | None = None
    starts: np.ndarray | None = None
    ends: np.ndarray | None = None
    table: pa.Table | None = None
    out_name: str = ""

    @property
    def where(self) -> str:
        return "line" if self.fmt == "jsonl" else "row"

    def __len__(self) -> int:
        return len(self.texts)

    def write_kept(self, keep: np.ndarray, path: str) -> None:
        if self.fmt == "jsonl":
            write_jsonl_rows(self.raw, self.starts, self.ends, keep, path, self.compression)
        else:
            write_parquet_rows(self.table, keep, path, self.compression)


def read_shard(path: str, text_field: str, id_field: str | None) -> Shard:
    fmt = format_of(path)
    if fmt == "jsonl":
        raw, starts, ends, lines, texts, ids, invalid = read_jsonl(path, text_field, id_field)
        return Shard(path, fmt, compression_of(path), texts, ids, lines, invalid,
                     raw=raw, starts=starts, ends=ends)
    table, texts, ids, comp = read_parquet(path, text_field, id_field)
    return Shard(path, fmt, comp, texts, ids, np.arange(1, len(texts) + 1), table=table)


def _output_names(paths: list[str]) -> list[str]:
    """Relative names for the output shards, unique, mirroring the inputs."""
    absps = [os.path.abspath(p) for p in paths]
    base = [os.path.basename(p) for p in absps]
    if len(set(base)) == len(base):
        return base
    root = os.path.commonpath([os.path.dirname(p) for p in absps])
    return [os.path.relpath(p, root) for p in absps]


@dataclass
class Corpus:
    shards: list[Shard]
    texts: pa.Array
    ids: pa.Array
    shard_of: np.ndarray              # shard index of each document
    invalid_utf8: int = 0
    stats: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.texts)

    def locate(self, i: int) -> str:
        s = self.shards[int(self.shard_of[i])]
        start = int(np.flatnonzero(self.shard_of == self.shard_of[i])[0])
        return f"{s.path}:{int(s.locations[i - start])}"


def read_corpus(paths: list[str], text_field: str = "text", id_field: str | None = "id") -> Corpus:
    """Read every shard; ids are the id field as a string, or ``FILE:LINE``
    (``FILE:ROW`` for Parquet) where a shard has no id field."""
    shards = [read_shard(p, text_field, id_field) for p in paths]
    names = _output_names(paths)
    ids = []
    for s, name in zip(shards, names):
        s.out_name = name
        if s.ids is not None:
            ids.append(s.ids)
        else:
            ids.append(pa.array([f"{s.path}:{int(x)}" for x in s.locations], type=pa.large_string()))
    texts = pa.concat_arrays([s.texts for s in shards]) if shards else pa.array([], pa.large_string())
    id_arr = pa.concat_arrays(ids) if ids else pa.array([], pa.large_string())
    shard_of = np.repeat(np.arange(len(shards)), [len(s) for s in shards])
    corpus = Corpus(shards, texts, id_arr, shard_of, sum(s.invalid_utf8 for s in shards))
    _check_unique_ids(corpus)
    return corpus


def _check_unique_ids(c: Corpus) -> None:
    n = len(c.ids)
    if n == 0 or pc.count_distinct(c.ids).as_py() == n:
        return
    counts = pc.value_counts(c.ids)
    dup = counts.filter(pc.greater(counts.field("counts"), 1))[0]["values"].as_py()
    where = np.flatnonzero(pc.equal(c.ids, dup).to_numpy(zero_copy_only=False))
    raise InputError(f"{c.locate(int(where[1]))}: duplicate id {dup!r} "
                     f"(first at {c.locate(int(where[0]))}); ids must be unique, "
                     f"or pass --id-field none to generate them")
