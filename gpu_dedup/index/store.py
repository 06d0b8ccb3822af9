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

A part is written under a staging name, renamed into place, and only then
listed in ``index.json``: a kill at any point leaves the index as it was or
complete. Staging folders and parts that ``index.json`` does not list are
leftovers of such a kill, and the next add removes them.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from ..config import Config
from ..errors import ConfigError, DedupError

#: Version of the on-disk layout.
INDEX_FORMAT = 1
INDEX_JSON = "index.json"
#: Rows per row group of docs.parquet.
DOC_GROUP = 1 << 14
#: Options that define similarity: a query with other values is refused.
SIMILARITY_FIELDS = ("shingle", "ngram", "normalize", "num_perm", "bands", "rows", "seed",
                     "sketch", "signature_bits")
#: Options a query takes from the index unless it is given them.
DEFAULT_FIELDS = ("threshold", "similarity", "verify", "exact", "bucket_limit")
_STAGING = ".staging-"


class BadIndex(DedupError):
    """A missing, corrupt or mismatched index (exit status 2)."""


def range_bits(docs: int) -> int:
    """Key-range bits of a part of ``docs`` documents: about 64k keys a file."""
    bits = 0
    while bits < 8 and (docs >> (16 + bits)) > 0:
        bits += 1
    return bits


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_json(path: str, data: dict) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(os.path.dirname(path) or ".")


def _write_arrow(path: str, table: pa.Table) -> None:
    with pa.OSFile(path, "wb") as sink, ipc.new_file(sink, table.schema) as w:
        w.write_table(table)


class Index:
    """An index folder, opened for reading (and adding parts).

    Raises:
        BadIndex: no index there, or its index.json is corrupt.
    """

    def __init__(self, path: str):
        self.path = str(path)
        meta = os.path.join(self.path, INDEX_JSON)
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
        if not isinstance(self.meta, dict) or self.meta.get("format") != INDEX_FORMAT \
                or not isinstance(self.meta.get("parts"), list) \
                or not isinstance(self.meta.get("options"), dict):
            raise BadIndex(f"{meta}: corrupt index file (not an index of format "
                              f"{INDEX_FORMAT})")

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
        return Config(**kw).resolved()

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

    # -- adding -------------------------------------------------------------
    def clean(self) -> None:
        """Remove leftovers of an interrupted add: staging folders, and parts
        that index.json does not list (only names this index writes)."""
        listed = {p["name"] for p in self.parts}
        for name in os.listdir(self.path):
            full = os.path.join(self.path, name)
            ours = name.startswith(_STAGING) or (name.startswith("part-") and name[5:].isdigit())
            if ours and name not in listed and os.path.isdir(full):
                shutil.rmtree(full, ignore_errors=True)
            elif name.startswith(INDEX_JSON + ".tmp-"):
                os.unlink(full)

    def part_writer(self, inputs: list[str]) -> "PartWriter":
        """A writer of the next part (see :class:`PartWriter`)."""
        self.clean()
        return PartWriter(self, inputs)

    def _append(self, entry: dict) -> None:
        meta = dict(self.meta)
        meta["parts"] = self.parts + [entry]
        meta["docs"] = int(entry["first"]) + int(entry["docs"])
        _write_json(os.path.join(self.path, INDEX_JSON), meta)
        self.meta = meta

    # -- querying -----------------------------------------------------------
    def lookup_pairs(self, keys: np.ndarray, rows: np.ndarray | None = None,
                     windows: bool = False) -> tuple[np.ndarray, np.ndarray, dict]:
        """``(row, ordinal)`` of every match of a band key of ``keys`` (``M x
        B``; ``rows[i]`` names row ``i``, default ``i``) with an indexed
        document (its windows, with ``windows``), reading only the key files
        the keys fall in; and what was read."""
        keys = np.asarray(keys, dtype=np.uint64)
        rows = np.arange(keys.shape[0], dtype=np.int64) if rows is None else np.asarray(rows)
        got_r, got_o = [], []
        read = {"files": 0, "of_files": 0, "matched": 0}
        sub = "wkeys" if windows else "keys"
        for p in self.parts:
            bits = int(p["wbits" if windows else "bits"])
            if not (p["windows"] if windows else p["docs"]) or not keys.shape[0]:
                continue
            for j in range(keys.shape[1]):
                q = keys[:, j]
                rng = (q >> np.uint64(64 - bits)) if bits else np.zeros(q.size, np.uint64)
                read["of_files"] += 1 << bits
                for r in np.unique(rng).tolist():
                    path = os.path.join(self.path, p["name"], sub, f"b{j:03d}-r{r:03d}.arrow")
                    if not os.path.exists(path):
                        continue            # no key of the part falls in this range
                    t = _read_arrow(path)          # memory-mapped: searches touch pages
                    k = t.column("key").to_numpy()
                    read["files"] += 1
                    mine = np.flatnonzero(rng == r)
                    lo = np.searchsorted(k, q[mine], "left")
                    cnt = np.searchsorted(k, q[mine], "right") - lo
                    if not cnt.any():
                        continue
                    at = np.repeat(lo - (np.cumsum(cnt) - cnt), cnt) + np.arange(int(cnt.sum()))
                    read["matched"] += int(at.size)
                    got_r.append(np.repeat(rows[mine], cnt))
                    got_o.append(t.column("ordinal").to_numpy()[at])
        if not got_r:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), read
        return np.concatenate(got_r), np.concatenate(got_o), read

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
        (sorted), reading only the row groups that hold them."""
        ordinals = np.asarray(ordinals, dtype=np.int64)
        parts = []
        for p in self.parts:
            lo, hi = int(p["first"]), int(p["first"]) + int(p["docs"])
            mine = ordinals[(ordinals >= lo) & (ordinals < hi)] - lo
            if not mine.size:
                continue
            path = os.path.join(self.path, p["name"], "docs.parquet")
            try:
                f = pq.ParquetFile(path)
                sizes = np.array([f.metadata.row_group(g).num_rows
                                  for g in range(f.metadata.num_row_groups)], np.int64)
                starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
                gof = np.searchsorted(starts, mine, "right") - 1     # each one's row group
                groups = np.unique(gof)
                t = f.read_row_groups(groups.tolist())
            except (OSError, pa.ArrowException) as exc:
                raise BadIndex(f"{path}: missing or corrupt index file ({exc})") from None
            # where each wanted document sits among the rows read
            base = np.concatenate([[0], np.cumsum(sizes[groups])[:-1]]).astype(np.int64)
            take = base[np.searchsorted(groups, gof)] + (mine - starts[gof])
            t = t.take(pa.array(take))
            got = t.column("ordinal").to_numpy()
            if not np.array_equal(got, mine + lo):
                raise BadIndex(f"{path}: corrupt index file (ordinals out of order)")
            parts.append(t)
        if not parts:
            return pa.table({"ordinal": pa.array([], pa.int64()), "id": pa.array([], pa.string()),
                             "source": pa.array([], pa.string()),
                             "text": pa.array([], pa.large_string())})
        return pa.concat_tables(parts)


class PartWriter:
    """Writes one part in batches, then adds it to the index in one step.

    ``add(ids, sources, texts, keys, key_docs, w_keys, w_docs)`` takes a
    batch of documents in order, the band keys (``M x B``) of those at
    positions ``key_docs`` of the batch (the ones with shingles), and the
    keys of their windows with each window's position in the batch.
    ``commit()`` sorts the keys into their files, renames the part into
    place and lists it in index.json (None when nothing was added);
    ``abort()`` removes what was written.
    """

    def __init__(self, index: Index, inputs: list[str]):
        self.index = index
        self.inputs = [str(x) for x in inputs]
        self.first = index.docs
        self.n = 0
        self.batches = 0
        self.stage = tempfile.mkdtemp(prefix=_STAGING, dir=index.path)
        self.tmp = os.path.join(self.stage, "batches")
        os.makedirs(self.tmp)
        self.writer = None
        self.counts = {"keys": 0, "wkeys": 0}

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
            self.writer = pq.ParquetWriter(os.path.join(self.stage, "docs.parquet"),
                                           table.schema, compression="zstd")
        self.writer.write_table(table, row_group_size=DOC_GROUP)
        base = self.first + self.n
        for kind, k, d in (("keys", keys, key_docs), ("wkeys", w_keys, w_docs)):
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
            bits = {"keys": range_bits(self.counts["keys"]),
                    "wkeys": range_bits(self.counts["wkeys"])}
            for kind in ("keys", "wkeys"):
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
                     "wbits": bits["wkeys"], "inputs": self.inputs}
            _fsync_dir(self.stage)
            os.rename(self.stage, os.path.join(self.index.path, name))
        except BaseException:
            self.abort()
            raise
        _fsync_dir(self.index.path)
        self.index._append(entry)
        return entry

    def abort(self) -> None:
        if self.writer is not None:
            try:
                self.writer.close()
            except Exception:  # noqa: BLE001 - removing it anyway
                pass
            self.writer = None
        shutil.rmtree(self.stage, ignore_errors=True)


def _show(v) -> str:
    if isinstance(v, (list, tuple)):
        return ",".join(str(x) for x in v) or "none"
    return str(v)


def _read_arrow(path: str) -> pa.Table:
    try:
        with pa.memory_map(path) as src:
            return ipc.open_file(src).read_all()
    except (OSError, pa.ArrowException) as exc:
        raise BadIndex(f"{path}: corrupt index file ({exc})") from None


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
