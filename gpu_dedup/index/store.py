"""The persistent index on disk: the kept documents of every build and add.

A folder ``DIR`` holds:

* ``index.json``: the format, the options that define similarity (and the
  defaults a query takes), and the list of *parts*, each with the ordinal of
  its first document. It is written last and replaced atomically.
* ``part-NNNNNN/docs.parquet``: ``ordinal``, ``id``, ``source``, ``text``
  (the original text, zstd), in ordinal order, in row groups of
  :data:`DOC_GROUP` rows, so a query reads only the row groups it needs.
* ``part-NNNNNN/keys/bBBB-rRRR.arrow``: the band keys of the part's
  documents, one file per band ``BBB`` and key range ``RRR`` (the top bits
  of the key), sorted by key, with the ordinal of each: a query reads only
  the files its own keys fall in.
* ``part-NNNNNN/wkeys/...``: the same for the windows of the long documents
  (see :mod:`gpu_dedup.index.windows`), each with its document's ordinal.
* ``part-NNNNNN/ids/b000-rRRR.arrow``: a 64-bit hash of each document's id
  (the first XXH64 of :meth:`text_hash128`), sorted, with its ordinal: how
  an input id is found among the indexed ones.
* ``index.lock``: the lock a writer holds (:mod:`gpu_dedup.index.lock`).

``index.json`` lists every file of a part with its size and XXH3-128 hash
(:mod:`gpu_dedup.index.files`): a query checks that every listed file is
there with its size before it reads any, and checks each file it reads
against its hash; the counts and ordinals of ``index.json`` are checked
against the files before they index anything. A damaged index stops the
command with exit status 2, naming the file.

A part is written under a staging name, renamed into place, and only then
listed in ``index.json``: a kill at any point leaves the index as it was or
complete. Staging folders and parts that ``index.json`` does not list are
leftovers of such a kill, and the next add removes them: only a writer
holding the index's lock does, so no live writer's folder is ever removed.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from ..atomic import fsync_dir
from ..config import Config
from ..errors import ConfigError
from ..io.parquet import ParquetWriter
from .files import BadIndex, BlockCheck, check_present, read_checked, records
from .lock import Held
from .meta import (DEFAULT_FIELDS, DOC_GROUP, INDEX_FORMAT, INDEX_JSON, KINDS,
                   SIMILARITY_FIELDS, check_meta)

_STAGING = ".staging-"
_PART = re.compile(r"^part-\d{6}$")

__all__ = ["BadIndex", "Index", "PartWriter", "INDEX_FORMAT", "SIMILARITY_FIELDS", "id_keys"]


def range_bits(docs: int) -> int:
    """Key-range bits of a part of ``docs`` documents: about 64k keys a file."""
    bits = 0
    while bits < 8 and (docs >> (16 + bits)) > 0:
        bits += 1
    return bits


def _write_json(path: str, data: dict) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path) or ".")


def _write_arrow(path: str, table: pa.Table) -> None:
    with pa.OSFile(path, "wb") as sink, ipc.new_file(sink, table.schema) as w:
        w.write_table(table)


class Index:
    """An index folder, opened for reading (and adding parts).

    Opening reads and checks ``index.json`` alone (so that its options can
    be read from a copy of it alone); the first query checks that every
    file it lists is there with its size (:meth:`check_files`).

    Raises:
        BadIndex: no index there, its index.json is corrupt or inconsistent,
            or it is of an older format (format 1: files without sizes and
            hashes to check them by; rebuilt, not read).
    """

    def __init__(self, path: str):
        self.path = str(path)
        self.meta_path = meta = os.path.join(self.path, INDEX_JSON)
        if not os.path.isdir(self.path):
            raise BadIndex(f"{self.path}: no such index folder (build one with "
                           f"`gpu-dedup index build INPUT... --index {self.path}`)")
        try:
            with open(meta) as f:
                self.meta = json.load(f)
        except FileNotFoundError:
            raise BadIndex(f"{meta}: no index here (build one with `gpu-dedup index "
                           f"build INPUT... --index {self.path}`)") from None
        except (OSError, ValueError) as exc:
            raise BadIndex(f"{meta}: corrupt index file ({exc})") from None
        check_meta(self.meta, meta)
        self._files_checked = False
        self._blocks: dict = {}

    # -- creating -----------------------------------------------------------
    @classmethod
    def create(cls, path: str, cfg: Config) -> "Index":
        """A new, empty index at ``path`` (a new or empty folder)."""
        path = str(path)
        if os.path.exists(path) and (not os.path.isdir(path) or os.listdir(path)):
            raise BadIndex(f"{path}: already exists and is not an empty folder; choose a "
                           f"new folder, or add to an index with `gpu-dedup index add`")
        os.makedirs(path, exist_ok=True)
        cfg = cfg.resolved()
        d = cfg.to_dict()
        meta = {"format": INDEX_FORMAT, "options": {k: d[k] for k in SIMILARITY_FIELDS},
                "defaults": {k: d[k] for k in DEFAULT_FIELDS}, "config_name": cfg.name,
                "docs": 0, "parts": []}
        _write_json(os.path.join(path, INDEX_JSON), meta)
        return cls(path)

    # -- what it holds ------------------------------------------------------
    @property
    def docs(self) -> int:
        return int(self.meta.get("docs", 0))

    @property
    def parts(self) -> list[dict]:
        return list(self.meta["parts"])

    @property
    def name(self) -> str:
        return os.path.basename(os.path.normpath(self.path)) or self.path

    def config(self, **given) -> Config:
        """The index's configuration, with the query-time options ``given``."""
        kw = dict(self.meta.get("defaults", {}))
        kw.update(self.meta["options"])
        kw["normalize"] = tuple(kw.get("normalize") or ())
        kw.update(given)
        try:
            return Config(**kw).resolved()
        except (TypeError, ValueError) as exc:
            raise BadIndex(f"{self.meta_path}: corrupt index file (its options: {exc})"
                           ) from None

    def check(self, cfg: Config) -> None:
        """Refuse ``cfg`` when an option that defines similarity differs."""
        d = cfg.resolved().to_dict()
        for k in SIMILARITY_FIELDS:
            want = self.meta["options"].get(k)
            got = d[k]
            if isinstance(want, list):
                want = list(want)
                got = list(got)
            if want != got:
                flag = "--" + k.replace("_", "-")
                raise ConfigError(f"{flag} {_show(got)} differs from the index {self.path}, "
                                  f"built with {flag} {_show(want)}; leave it out to use the "
                                  f"index's value")

    def info(self) -> dict:
        return {"index": self.path, "format": self.meta["format"], "docs": self.docs,
                "parts": [{k: p[k] for k in ("name", "first", "docs", "windows", "inputs")}
                          for p in self.parts],
                "options": self.meta["options"], "defaults": self.meta.get("defaults", {}),
                "config_name": self.meta.get("config_name")}

    def check_files(self) -> None:
        """Every file index.json lists is there with its size (once per
        opening; every query calls it before it reads anything)."""
        if self._files_checked:
            return
        for p in self.parts:
            check_present(self.path, p["name"], p["files"])
        self._files_checked = True

    # -- adding -------------------------------------------------------------
    def clean(self, held: Held) -> None:
        """Remove leftovers of an interrupted add: staging folders, and parts
        that index.json does not list (only names this index writes). Only a
        writer holding the lock (``held``) cleans: any staging folder it
        finds is then a dead writer's."""
        _holds(held, self.path)
        listed = {p["name"] for p in self.parts}
        for name in os.listdir(self.path):
            full = os.path.join(self.path, name)
            ours = name.startswith(_STAGING) or _PART.match(name) is not None
            if ours and name not in listed and os.path.isdir(full):
                shutil.rmtree(full, ignore_errors=True)
            elif name.startswith(INDEX_JSON + ".tmp-"):
                os.unlink(full)

    def part_writer(self, inputs: list[str], held: Held) -> "PartWriter":
        """A writer of the next part (see :class:`PartWriter`); ``held``: the
        index's writer lock (:func:`gpu_dedup.index.lock.writer_lock`)."""
        self.check_files()
        self.clean(held)
        return PartWriter(self, inputs, held)

    def _append(self, entry: dict) -> None:
        meta = dict(self.meta)
        meta["parts"] = self.parts + [entry]
        meta["docs"] = int(entry["first"]) + int(entry["docs"])
        _write_json(os.path.join(self.path, INDEX_JSON), meta)
        self.meta = meta

    # -- querying -----------------------------------------------------------
    def lookup_pairs(self, keys: np.ndarray, rows: np.ndarray | None = None,
                     windows: bool = False, kind: str | None = None
                     ) -> tuple[np.ndarray, np.ndarray, dict]:
        """``(row, ordinal)`` of every match of a band key of ``keys`` (``M x
        B``; ``rows[i]`` names row ``i``, default ``i``) with an indexed
        document (its windows, with ``windows``; its id hash, with ``kind``
        ``"ids"``), reading only the key files the keys fall in; and what was
        read. Every ordinal returned is one of an indexed document."""
        self.check_files()
        kind = kind or ("wkeys" if windows else "keys")
        keys = np.asarray(keys, dtype=np.uint64)
        rows = np.arange(keys.shape[0], dtype=np.int64) if rows is None else np.asarray(rows)
        got_r, got_o = [], []
        read = {"files": 0, "of_files": 0, "matched": 0}
        for p in self.parts:
            bits = p[KINDS[kind]]
            if (kind == "wkeys" and not p["windows"]) or not p["docs"] or not keys.shape[0]:
                continue
            for j in range(keys.shape[1]):
                q = keys[:, j]
                rng = (q >> np.uint64(64 - bits)) if bits else np.zeros(q.size, np.uint64)
                read["of_files"] += 1 << bits
                for r in np.unique(rng).tolist():
                    rel = f"{kind}/b{j:03d}-r{r:03d}.arrow"
                    if rel not in p["files"]:
                        continue            # no key of the part falls in this range
                    k, o = self._key_file(p, rel, bits, r)
                    read["files"] += 1
                    mine = np.flatnonzero(rng == r)
                    lo = np.searchsorted(k, q[mine], "left")
                    cnt = np.searchsorted(k, q[mine], "right") - lo
                    if not cnt.any():
                        continue
                    at = np.repeat(lo - (np.cumsum(cnt) - cnt), cnt) + np.arange(int(cnt.sum()))
                    read["matched"] += int(at.size)
                    got_r.append(np.repeat(rows[mine], cnt))
                    got_o.append(o[at])
        if not got_r:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), read
        return np.concatenate(got_r), np.concatenate(got_o), read

    def _key_file(self, p: dict, rel: str, bits: int, r: int) -> tuple[np.ndarray, np.ndarray]:
        """The keys and ordinals of one key file of part ``p``, checked: its
        bytes against its hash, its keys sorted and in range ``r``, its
        ordinals those of the part's documents."""
        path = os.path.join(self.path, p["name"], *rel.split("/"))
        data = read_checked(path, p["files"][rel])
        try:
            t = ipc.open_file(pa.py_buffer(data)).read_all()
            if (t.schema.names != ["key", "ordinal"] or t.schema.field("key").type != pa.uint64()
                    or t.schema.field("ordinal").type != pa.int64()
                    or t.column("key").null_count or t.column("ordinal").null_count):
                raise BadIndex(f"{path}: corrupt index file (not a key file)")
            k = t.column("key").to_numpy()
            o = t.column("ordinal").to_numpy()
        except (OSError, pa.ArrowException) as exc:
            raise BadIndex(f"{path}: corrupt index file ({exc})") from None
        lo, hi = int(p["first"]), int(p["first"]) + int(p["docs"])
        if not k.size or np.any(k[1:] < k[:-1]):
            raise BadIndex(f"{path}: corrupt index file (its keys are not sorted)")
        if bits and (int(k[0]) >> (64 - bits) != r or int(k[-1]) >> (64 - bits) != r):
            raise BadIndex(f"{path}: corrupt index file (a key outside its range)")
        if o.min() < lo or o.max() >= hi:
            bad = int(o.min() if o.min() < lo else o.max())
            raise BadIndex(f"{path}: holds ordinal {bad:,}, outside the documents {lo:,} to "
                           f"{hi - 1:,} that {self.meta_path} lists for {p['name']}; the index "
                           f"is damaged: restore it from a copy or rebuild it")
        return k, o

    def lookup(self, keys: np.ndarray, windows: bool = False) -> tuple[np.ndarray, dict]:
        """Ordinals of the indexed documents (of their windows, with
        ``windows``) that share a band key with any row of ``keys``
        (``M x B``), sorted and distinct, and what was read."""
        keys = np.asarray(keys, dtype=np.uint64)
        if keys.shape[0]:
            keys = np.unique(keys, axis=0)          # identical documents once
        _, ords, read = self.lookup_pairs(keys, windows=windows)
        return np.unique(ords).astype(np.int64), read

    def fetch(self, ordinals: np.ndarray) -> pa.Table:
        """``ordinal, id, source, text`` of the documents ``ordinals``
        (sorted, distinct, each an indexed document's), reading only the row
        groups that hold them, each checked against its hash first."""
        self.check_files()
        ordinals = np.asarray(ordinals, dtype=np.int64)
        if ordinals.size and (ordinals[0] < 0 or ordinals[-1] >= self.docs
                              or np.any(ordinals[1:] <= ordinals[:-1])):
            raise BadIndex(f"{self.path}: asked for documents that are not indexed")
        parts = []
        for p in self.parts:
            lo, hi = int(p["first"]), int(p["first"]) + int(p["docs"])
            mine = ordinals[(ordinals >= lo) & (ordinals < hi)] - lo
            if not mine.size:
                continue
            parts.append(self._fetch_part(p, mine, lo))
        if not parts:
            return pa.table({"ordinal": pa.array([], pa.int64()), "id": pa.array([], pa.string()),
                             "source": pa.array([], pa.string()),
                             "text": pa.array([], pa.large_string())})
        return pa.concat_tables(parts)

    def _fetch_part(self, p: dict, mine: np.ndarray, lo: int) -> pa.Table:
        path = os.path.join(self.path, p["name"], "docs.parquet")
        entry = p["files"]["docs.parquet"]
        check = self._blocks.get(path)
        if check is None:
            check = self._blocks[path] = BlockCheck(path, entry)
        size = entry[0]
        try:
            check.ranges([(0, 4), (size - 8, size)])
            with open(path, "rb") as fh:
                fh.seek(max(size - 8, 0))
                tail = fh.read(8)
            footer = int.from_bytes(tail[:4], "little") if len(tail) == 8 else size
            check.ranges([(size - 8 - footer, size)])
            f = pq.ParquetFile(path)
            md = f.metadata
            if md.num_rows != p["docs"]:
                raise BadIndex(f"{self.meta_path}: lists {p['docs']:,} documents in "
                               f"{p['name']} where its docs.parquet holds {md.num_rows:,}; the "
                               f"index is damaged: restore it from a copy or rebuild it")
            if f.schema_arrow.names != ["ordinal", "id", "source", "text"]:
                raise BadIndex(f"{path}: corrupt index file (not the documents of a part)")
            sizes = np.array([md.row_group(g).num_rows for g in range(md.num_row_groups)],
                             np.int64)
            starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
            gof = np.searchsorted(starts, mine, "right") - 1     # each one's row group
            groups = np.unique(gof)
            check.ranges(_group_spans(md, groups))
            t = f.read_row_groups(groups.tolist())
        except (OSError, pa.ArrowException) as exc:
            raise BadIndex(f"{path}: missing or corrupt index file ({exc})") from None
        # where each wanted document sits among the rows read
        base = np.concatenate([[0], np.cumsum(sizes[groups])[:-1]]).astype(np.int64)
        take = base[np.searchsorted(groups, gof)] + (mine - starts[gof])
        if t.num_rows != int(sizes[groups].sum()):
            raise BadIndex(f"{path}: corrupt index file (row groups of another size)")
        t = t.take(pa.array(take))
        ords = t.column("ordinal")
        if ords.null_count or not np.array_equal(ords.to_numpy(), mine + lo):
            raise BadIndex(f"{path}: corrupt index file (ordinals out of order)")
        return t


def _group_spans(md, groups) -> list[tuple[int, int]]:
    """The byte ranges of the column chunks of row groups ``groups``."""
    spans = []
    for g in groups.tolist():
        rg = md.row_group(g)
        for c in range(rg.num_columns):
            col = rg.column(c)
            start = col.data_page_offset
            if col.has_dictionary_page and col.dictionary_page_offset is not None:
                start = min(start, col.dictionary_page_offset)
            spans.append((start, start + col.total_compressed_size))
    return spans


def id_keys(ids: pa.Array) -> np.ndarray:
    """The 64-bit hash of each id (``N x 1``): the key of ``ids/``."""
    from ..backend import CpuBackend
    from ..stages.normalize import text_buffers
    ids = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids
    if not len(ids):
        return np.zeros((0, 1), np.uint64)
    off, data = text_buffers(ids.cast(pa.large_string()))
    h = CpuBackend().text_hash128(np.ascontiguousarray(off - off[0]),
                                  np.ascontiguousarray(data[off[0]:off[-1]]))
    return np.ascontiguousarray(np.asarray(h)[:, :1], dtype=np.uint64)


class PartWriter:
    """Writes one part in batches, then adds it to the index in one step.

    ``add(ids, sources, texts, keys, key_docs, w_keys, w_docs)`` takes a
    batch of documents in order, the band keys (``M x B``) of those at
    positions ``key_docs`` of the batch (the ones with shingles), and the
    keys of their windows with each window's position in the batch.
    ``commit()`` sorts the keys into their files, records every file's size
    and hash, renames the part into place and lists it in index.json (None
    when nothing was added); ``abort()`` removes what was written. Only a
    writer holding the index's lock writes a part.
    """

    def __init__(self, index: Index, inputs: list[str], held: Held):
        _holds(held, index.path)
        self.index = index
        self.inputs = [str(x) for x in inputs]
        self.first = index.docs
        self.n = 0
        self.batches = 0
        self.stage = tempfile.mkdtemp(prefix=_STAGING, dir=index.path)
        self.tmp = os.path.join(self.stage, "batches")
        os.makedirs(self.tmp)
        self.writer = None
        self.counts = {"keys": 0, "wkeys": 0, "ids": 0}

    def add(self, ids, sources, texts, keys, key_docs, w_keys, w_docs) -> None:
        n = len(ids)
        if not n:
            return
        table = pa.table({"ordinal": pa.array(np.arange(self.first + self.n,
                                                        self.first + self.n + n,
                                                        dtype=np.int64)),
                          "id": ids.cast(pa.string()), "source": sources.cast(pa.string()),
                          "text": texts.cast(pa.large_string())})
        if self.writer is None:
            self.writer = ParquetWriter(os.path.join(self.stage, "docs.parquet"),
                                        table.schema, compression="zstd")
        self.writer.write_table(table, row_group_size=DOC_GROUP)
        base = self.first + self.n
        for kind, k, d in (("keys", keys, key_docs), ("wkeys", w_keys, w_docs),
                           ("ids", id_keys(ids), np.arange(n))):
            k = np.ascontiguousarray(k, dtype=np.uint64)
            np.save(os.path.join(self.tmp, f"{kind}-{self.batches:06d}.npy"), k)
            np.save(os.path.join(self.tmp, f"{kind}-{self.batches:06d}.ord.npy"),
                    base + np.asarray(d, dtype=np.int64))
            self.counts[kind] += int(k.shape[0])
        self.n += n
        self.batches += 1

    def _band(self, kind: str, j: int) -> tuple[np.ndarray, np.ndarray]:
        ks, os_ = [], []
        for b in range(self.batches):
            k = np.load(os.path.join(self.tmp, f"{kind}-{b:06d}.npy"), mmap_mode="r")
            if k.shape[0]:
                ks.append(np.array(k[:, j]))
                os_.append(np.load(os.path.join(self.tmp, f"{kind}-{b:06d}.ord.npy")))
        if not ks:
            return np.zeros(0, np.uint64), np.zeros(0, np.int64)
        return np.concatenate(ks), np.concatenate(os_)

    def commit(self) -> dict | None:
        try:
            if self.writer is not None:
                self.writer.close()
                self.writer = None
            if not self.n:
                self.abort()
                return None
            name = f"part-{len(self.index.parts):06d}"
            bits = {kind: range_bits(self.counts[kind]) for kind in KINDS}
            for kind in KINDS:
                folder = os.path.join(self.stage, kind)
                os.makedirs(folder)
                width = 0
                if self.batches:
                    k0 = np.load(os.path.join(self.tmp, f"{kind}-000000.npy"), mmap_mode="r")
                    width = k0.shape[1] if k0.ndim == 2 else 0
                for j in range(width):
                    k, o = self._band(kind, j)
                    _write_band(folder, j, k, o, bits[kind])
            shutil.rmtree(self.tmp)
            entry = {"name": name, "first": self.first, "docs": self.n,
                     "windows": self.counts["wkeys"], "bits": bits["keys"],
                     "wbits": bits["wkeys"], "ibits": bits["ids"], "inputs": self.inputs,
                     "files": records(self.stage)}
            fsync_dir(self.stage)
            os.rename(self.stage, os.path.join(self.index.path, name))
        except BaseException:
            self.abort()
            raise
        fsync_dir(self.index.path)
        self.index._append(entry)
        return entry

    def abort(self) -> None:
        if self.writer is not None:
            try:
                self.writer.close()
            except (OSError, pa.ArrowException):
                pass                        # removing it anyway
            self.writer = None
        shutil.rmtree(self.stage, ignore_errors=True)


def _holds(held, path: str) -> None:
    if not isinstance(held, Held) or os.path.realpath(held.path) != os.path.realpath(path):
        raise BadIndex(f"{path}: an index is written only under its writer lock")


def _show(v) -> str:
    if isinstance(v, (list, tuple)):
        return ",".join(str(x) for x in v) or "none"
    return str(v)


def _write_band(folder: str, j: int, k: np.ndarray, o: np.ndarray, bits: int) -> None:
    """The keys of band ``j``, one file per key range: sorted, with their ordinals."""
    order = np.argsort(k, kind="stable")
    k, o = k[order], o[order]
    r = (k >> np.uint64(64 - bits)) if bits else np.zeros(k.size, np.uint64)
    cuts = np.flatnonzero(np.diff(r)) + 1
    for lo, hi in zip(np.concatenate([[0], cuts]), np.concatenate([cuts, [k.size]])):
        if hi <= lo:
            continue
        _write_arrow(os.path.join(folder, f"b{j:03d}-r{int(r[lo]):03d}.arrow"),
                     pa.table({"key": pa.array(k[lo:hi]), "ordinal": pa.array(o[lo:hi])}))
