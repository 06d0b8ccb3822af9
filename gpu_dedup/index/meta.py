"""``index.json``: its format, and the checks it passes before anything
uses a count, ordinal or name it gives.

Format 2 lists every file of a part with its size and hash
(:mod:`gpu_dedup.index.files`) and adds the ids' keys (``ids/``). An index
of format 1 is refused with a line saying to rebuild it: its files carry no
sizes or hashes, so a damaged one could not be told from a whole one.
"""
from __future__ import annotations

from .files import BadIndex, check_entry

#: Version of the on-disk layout (2: files listed with sizes and hashes; ids/).
INDEX_FORMAT = 2
INDEX_JSON = "index.json"
#: Rows per row group of docs.parquet.
DOC_GROUP = 1 << 14
#: Options that define similarity: a query with other values is refused.
SIMILARITY_FIELDS = ("shingle", "ngram", "normalize", "num_perm", "bands", "rows", "seed",
                     "sketch", "signature_bits")
#: Options a query takes from the index unless it is given them.
DEFAULT_FIELDS = ("threshold", "similarity", "verify", "exact", "bucket_limit")
#: Key files by kind: the folder and the index.json field of its range bits.
KINDS = {"keys": "bits", "wkeys": "wbits", "ids": "ibits"}


def _count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def check_meta(meta, path: str) -> None:
    """Refuse an index.json that is not a whole, consistent index of this
    format: every count, ordinal and name it gives is checked here, before
    anything uses it."""
    if isinstance(meta, dict) and meta.get("format") == 1:
        raise BadIndex(f"{path}: an index of format 1, written before its files carried "
                       f"sizes and hashes to check them by; rebuild it with `gpu-dedup index "
                       f"build` (format {INDEX_FORMAT})")

    def bad(why: str) -> BadIndex:
        return BadIndex(f"{path}: corrupt index file ({why})")
    if not isinstance(meta, dict) or meta.get("format") != INDEX_FORMAT \
            or not isinstance(meta.get("parts"), list) \
            or not isinstance(meta.get("options"), dict):
        raise bad(f"not an index of format {INDEX_FORMAT}")
    if set(meta["options"]) != set(SIMILARITY_FIELDS):
        raise bad("its options are not those that define similarity")
    defaults = meta.get("defaults", {})
    if not isinstance(defaults, dict) or not set(defaults) <= set(DEFAULT_FIELDS):
        raise bad("its defaults are not query options")
    total = 0
    for i, p in enumerate(meta["parts"]):
        want = f"part-{i:06d}"
        if not isinstance(p, dict) or p.get("name") != want:
            raise bad(f"part {i} is not named {want}")
        for k in ("first", "docs", "windows", *KINDS.values()):
            if not _count(p.get(k)):
                raise bad(f"{want}: {k} is not a count")
        for k in KINDS.values():
            if p[k] > 8:
                raise bad(f"{want}: {k} is {p[k]}, more than 8")
        if p["first"] != total:
            raise BadIndex(f"{path}: {want} starts at ordinal {p['first']:,} where the parts "
                           f"before it hold {total:,} documents; the index is damaged: "
                           f"restore index.json from a copy or rebuild the index")
        total += p["docs"]
        if not isinstance(p.get("inputs"), list) or not all(isinstance(x, str)
                                                            for x in p["inputs"]):
            raise bad(f"{want}: inputs is not a list of paths")
        files = p.get("files")
        if not isinstance(files, dict) or "docs.parquet" not in files:
            raise bad(f"{want}: no list of its files")
        for rel, entry in files.items():
            check_entry(path, want, rel, entry)
        for sub, has in (("wkeys", p["windows"] > 0), ("ids", p["docs"] > 0)):
            if has != any(rel.startswith(sub + "/") for rel in files):
                raise bad(f"{want}: its {sub} files do not match its counts")
    if meta.get("docs") != total:
        raise BadIndex(f"{path}: lists {meta.get('docs')} documents where its parts hold "
                       f"{total:,}; the index is damaged: restore index.json from a copy or "
                       f"rebuild the index")
