"""Benchmark corpora, written as JSONL files (``{"id": ..., "text": ...}``).

Every builder is deterministic for its arguments and caches its file in the
work directory (``bench/data/`` by default), so a rerun reuses it.

* ``planted``: the cookbook's planted corpus (``gpu_dedup.demo.planted_corpus``):
  random 50-word documents over a 3,000-word vocabulary, 30% followed by a
  copy with 10% of the words replaced. Word 3-grams, threshold 0.4.
* ``realistic``: ``bench/generate.py``: Zipfian vocabulary, lengths from tens
  to thousands of words, near-duplicate clusters made by several kinds of
  edits, exact copies. Char 5-grams, threshold 0.8.
* ``debian-files``, ``debian-paragraphs``: the licence texts under
  ``/usr/share/doc/*/copyright`` (present on every Debian machine), one
  document per file or per blank-line-separated paragraph. Real text with
  real near-duplicates (licence boilerplate with different names, dates and
  headers). Char 5-grams, threshold 0.8.
* ``debian-entries``: those paragraphs, then every whole entry of every
  ``changelog.Debian.gz`` (header to trailer): about 55,000 real documents
  of a few hundred bytes, many repeated across the packages of one source.
  Char 5-grams, threshold 0.8.
* ``long-documents``: long real documents from this machine, 2 to 32 KB
  each: the manual pages under ``/usr/share/man`` (every language), the
  text files under ``/usr/share/doc``, and source files: the Python
  standard library, Perl's modules, the C headers under ``/usr/include``
  (about 24,000 documents of 6 KB on average; translations,
  versions and vendored copies are the real near-duplicates). Char 5-grams,
  threshold 0.8.
* ``debian-short``: short real-world-like documents of about 50 characters:
  lines of those files, alone or two spliced at a word boundary, lightly
  edited at random (characters substituted, inserted or deleted, numbers
  changed, words swapped or re-cased). Char 5-grams, threshold 0.8.
"""
from __future__ import annotations

import glob
import json
import os
import sys
from dataclasses import asdict, dataclass

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DATA = os.environ.get("GPU_DEDUP_BENCH_DATA", os.path.join(HERE, "data"))
DEBIAN_GLOB = "/usr/share/doc/*/copyright"


@dataclass
class CorpusSpec:
    """A corpus file and the shingle settings it is benchmarked with."""

    name: str
    path: str
    docs: int
    bytes: int
    shingle: str
    ngram: int
    threshold: float
    description: str

    def to_dict(self) -> dict:
        return asdict(self)


def write_jsonl(path: str, texts, ids=None) -> int:
    """Write ``texts`` as JSONL atomically; returns the number of text bytes."""
    tmp = f"{path}.tmp-{os.getpid()}"
    total = 0
    with open(tmp, "w", encoding="utf-8") as f:
        for i, t in enumerate(texts):
            total += len(t.encode("utf-8"))
            f.write(json.dumps({"id": str(i) if ids is None else ids[i], "text": t},
                               ensure_ascii=False))
            f.write("\n")
    os.replace(tmp, path)
    return total


def read_texts(path: str) -> list[str]:
    """The ``text`` field of every record of a plain JSONL file."""
    import pyarrow as pa
    import pyarrow.json as pj
    t = pj.read_json(path, parse_options=pj.ParseOptions(
        explicit_schema=pa.schema([("text", pa.large_string())]),
        unexpected_field_behavior="ignore"),
        read_options=pj.ReadOptions(block_size=16 << 20))
    return t.column("text").combine_chunks()


def _meta_path(path: str) -> str:
    return path + ".meta.json"


def _cached(path: str):
    meta = _meta_path(path)
    if os.path.exists(path) and os.path.exists(meta):
        with open(meta) as f:
            return CorpusSpec(**json.load(f))
    return None


def _save_meta(spec: CorpusSpec) -> CorpusSpec:
    with open(_meta_path(spec.path), "w") as f:
        json.dump(spec.to_dict(), f, indent=1)
    return spec


def _data_dir(data_dir: str | None) -> str:
    d = data_dir or DEFAULT_DATA
    os.makedirs(d, exist_ok=True)
    return d


# -- the cookbook's planted corpus ------------------------------------------

def planted(base_docs: int = 8000, seed: int = 0, data_dir: str | None = None) -> CorpusSpec:
    from gpu_dedup.demo import planted_corpus
    path = os.path.join(_data_dir(data_dir), f"planted_{base_docs}_s{seed}.jsonl")
    spec = _cached(path)
    if spec:
        return spec
    texts, truth = planted_corpus(base_docs, seed)
    nbytes = write_jsonl(path, texts)
    return _save_meta(CorpusSpec(
        f"planted-{len(texts)}", path, len(texts), nbytes, "word", 3, 0.4,
        f"the cookbook's planted corpus: {base_docs:,} random 50-word documents "
        f"(3,000-word vocabulary), {len(truth):,} followed by a near-duplicate with "
        f"10% of the words replaced"))


# -- the realistic generator -------------------------------------------------

def realistic(docs: int = 20000, seed: int = 0, mean_bytes: int = 500,
              data_dir: str | None = None) -> CorpusSpec:
    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    import generate
    path = os.path.join(_data_dir(data_dir), f"realistic_{docs}_b{mean_bytes}_s{seed}.jsonl")
    spec = _cached(path)
    if spec:
        return spec
    stats = generate.generate(docs, path, mean_bytes=mean_bytes, seed=seed)
    return _save_meta(CorpusSpec(
        f"realistic-{docs}", path, docs, stats["text_bytes"], "char", 5, 0.8,
        f"bench/generate.py --docs {docs} --mean-bytes {mean_bytes} --seed {seed}: "
        f"{stats['clusters_with_copies']:,} near-duplicate clusters, "
        f"{stats['near_duplicates']:,} edited copies, {stats['exact_copies']:,} exact copies"))


# -- real text: Debian's copyright files ----------------------------------

def debian_files_available() -> bool:
    return bool(glob.glob(DEBIAN_GLOB))


def debian_texts() -> list[tuple[str, str]]:
    """``(path, text)`` of every readable copyright file, sorted, each real
    file once."""
    seen = set()
    out = []
    for p in sorted(glob.glob(DEBIAN_GLOB)):
        real = os.path.realpath(p)
        if real in seen or not os.path.isfile(real):
            continue
        seen.add(real)
        try:
            with open(real, "rb") as f:
                raw = f.read()
        except OSError:
            continue
        out.append((p, raw.decode("utf-8", errors="replace")))
    return out


def debian_paragraph_texts(min_chars: int = 1) -> list[str]:
    paras = []
    for _, text in debian_texts():
        for p in text.split("\n\n"):
            p = p.strip()
            if len(p) >= min_chars:
                paras.append(p)
    return paras


def debian_files(data_dir: str | None = None) -> CorpusSpec:
    path = os.path.join(_data_dir(data_dir), "debian_files.jsonl")
    spec = _cached(path)
    if spec:
        return spec
    items = debian_texts()
    texts = [t for _, t in items]
    nbytes = write_jsonl(path, texts, ids=[p for p, _ in items])
    return _save_meta(CorpusSpec(
        "debian-files", path, len(texts), nbytes, "char", 5, 0.8,
        f"{len(texts):,} files {DEBIAN_GLOB} on the benchmark machine, one document per file"))


def debian_paragraphs(n_docs: int | None = None, data_dir: str | None = None) -> CorpusSpec:
    """Every paragraph, or the first ``n_docs`` (files in sorted order)."""
    suffix = "" if n_docs is None else f"_{n_docs}"
    path = os.path.join(_data_dir(data_dir), f"debian_paragraphs{suffix}.jsonl")
    spec = _cached(path)
    if spec:
        return spec
    texts = debian_paragraph_texts()
    if n_docs is not None:
        texts = texts[:n_docs]
    nbytes = write_jsonl(path, texts)
    if n_docs is None:
        name, desc = "debian-paragraphs", f"all {len(texts):,} blank-line-separated paragraphs"
    else:
        name = f"debian-paragraphs-{len(texts)}"
        desc = f"the first {len(texts):,} blank-line-separated paragraphs (files in sorted order)"
    return _save_meta(CorpusSpec(name, path, len(texts), nbytes, "char", 5, 0.8,
                                 f"{desc} of {DEBIAN_GLOB}"))


CHANGELOG_GLOB = "/usr/share/doc/*/changelog.Debian.gz"


def changelog_texts(limit: int | None = None) -> list[str]:
    """The blank-line-separated entries of every ``changelog.Debian.gz``
    (files in sorted order), at least ``limit`` of them when that many exist."""
    import gzip
    texts: list[str] = []
    for p in sorted(glob.glob(CHANGELOG_GLOB)):
        if limit is not None and len(texts) >= limit:
            break
        try:
            with gzip.open(p, "rb") as f:
                raw = f.read().decode("utf-8", errors="replace")
        except (OSError, EOFError):
            continue
        texts += [x.strip() for x in raw.split("\n\n") if x.strip()]
    return texts


def changelog_entries() -> list[str]:
    """Every whole entry of every ``changelog.Debian.gz`` (files in sorted
    order): from its ``package (version) ...`` header to its `` -- `` trailer
    line, a few hundred bytes each."""
    import gzip
    entries: list[str] = []
    for p in sorted(glob.glob(CHANGELOG_GLOB)):
        try:
            with gzip.open(p, "rb") as f:
                raw = f.read().decode("utf-8", errors="replace")
        except (OSError, EOFError):
            continue
        cur: list[str] = []
        for line in raw.splitlines():
            cur.append(line)
            if line.startswith(" -- "):
                entry = "\n".join(cur).strip()
                if entry:
                    entries.append(entry)
                cur = []
    return entries


def _real(name: str, n_docs, data_dir, build, description) -> CorpusSpec:
    """A cached corpus of real text: ``build(n_docs)`` gives its texts."""
    suffix = "" if n_docs is None else f"_{n_docs}"
    path = os.path.join(_data_dir(data_dir), f"{name}{suffix}.jsonl")
    spec = _cached(path)
    if spec:
        return spec
    texts = build(n_docs)
    if n_docs is not None:
        texts = texts[:n_docs]
    nbytes = write_jsonl(path, texts)
    return _save_meta(CorpusSpec(f"{name.replace('_', '-')}-{len(texts)}", path, len(texts),
                                 nbytes, "char", 5, 0.8, description(len(texts))))


def debian_text(n_docs: int | None = None, data_dir: str | None = None) -> CorpusSpec:
    """Real text in larger numbers: the copyright paragraphs, then the
    blank-line-separated entries of every ``changelog.Debian.gz`` (files in
    sorted order), the first ``n_docs`` of them or all."""
    def build(n):
        texts = debian_paragraph_texts()
        return texts + changelog_texts(None if n is None else max(0, n - len(texts)))
    return _real("debian_text", n_docs, data_dir, build,
                 lambda n: f"{n:,} real paragraphs: {DEBIAN_GLOB} paragraphs, then "
                           f"{CHANGELOG_GLOB} entries")


def debian_changelogs(n_docs: int | None = None, data_dir: str | None = None) -> CorpusSpec:
    """The entries of every ``changelog.Debian.gz`` alone (release notes:
    real, repetitive, and unlike licence text), the first ``n_docs`` or all."""
    return _real("debian_changelogs", n_docs, data_dir, changelog_texts,
                 lambda n: f"{n:,} real entries of {CHANGELOG_GLOB}")


def debian_entries(n_docs: int | None = None, data_dir: str | None = None) -> CorpusSpec:
    """Real documents of a few hundred bytes: the copyright paragraphs, then
    every whole changelog entry (:func:`changelog_entries`), the first
    ``n_docs`` of them or all (about 55,000 on a Debian machine)."""
    return _real("debian_entries", n_docs, data_dir,
                 lambda n: debian_paragraph_texts() + changelog_entries(),
                 lambda n: f"{n:,} real documents: {DEBIAN_GLOB} paragraphs, then the whole "
                           f"entries of {CHANGELOG_GLOB}")


def stdlib_docstrings(limit: int | None = None) -> list[str]:
    """Real English text unrelated to licences and changelogs: the paragraphs
    of 20 words or more of the docstrings of Python's standard library
    (modules in sorted order), each once."""
    import importlib
    import warnings
    out: list[str] = []
    skip = {"antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo", "typing"}
    for name in sorted(sys.stdlib_module_names):
        if name.startswith("_") or name in skip:
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                m = importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a module this Python cannot import
            continue
        for obj in [m] + [getattr(m, a, None) for a in dir(m)]:
            d = getattr(obj, "__doc__", None)
            if isinstance(d, str):
                out += [p.strip() for p in d.split("\n\n") if len(p.split()) >= 20]
        if limit is not None and len(set(out)) >= limit:
            break
    return list(dict.fromkeys(out))[:limit]


def contamination_items(train: list[str], rng, near: int, passages: int, unrelated: list[str],
                        long_words: int = 200) -> list[tuple[str, str]]:
    """An evaluation set planted against ``train``: ``(kind, text)`` pairs.

    ``near`` near-copies of training documents of 30 words or more (a word
    in 40 replaced); ``passages`` runs of 60-90 words cut from inside
    training documents of ``long_words`` words or more; then ``unrelated``.
    """
    words = [t.split() for t in train]
    items = []
    for i in rng.sample([i for i, w in enumerate(words) if len(w) >= 30], near):
        w = list(words[i])
        for _ in range(max(1, len(w) // 40)):
            w[rng.randrange(len(w))] = rng.choice(["foo", "bar", "baz", "qux"])
        items.append(("near", " ".join(w)))
    longs = [i for i, w in enumerate(words) if len(w) >= long_words]
    for i in rng.sample(longs, min(passages, len(longs))):
        w = words[i]
        n = rng.randint(60, 90)
        s = rng.randint(1, len(w) - n - 1)
        items.append(("passage", " ".join(w[s:s + n])))
    return items + [("unrelated", t) for t in unrelated]


def debian_lines() -> list[str]:
    """Distinct non-blank lines (stripped, whitespace folded) of the copyright
    files, at least 12 characters long, in first-seen order."""
    seen = {}
    for _, text in debian_texts():
        for line in text.splitlines():
            line = " ".join(line.split())
            if len(line) >= 12 and line not in seen:
                seen[line] = None
    return list(seen)


_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _edit_short(s: str, rng, kinds) -> str:
    """One light edit of a short text."""
    kind = kinds[rng.integers(len(kinds))]
    if not s:
        return s
    if kind == "sub":
        i = int(rng.integers(len(s)))
        return s[:i] + _LETTERS[rng.integers(26)] + s[i + 1:]
    if kind == "ins":
        i = int(rng.integers(len(s) + 1))
        return s[:i] + _LETTERS[rng.integers(26)] + s[i:]
    if kind == "del":
        i = int(rng.integers(len(s)))
        return s[:i] + s[i + 1:]
    words = s.split(" ")
    if kind == "num":
        digits = [i for i, w in enumerate(words) if any(c.isdigit() for c in w)]
        if digits:
            i = digits[rng.integers(len(digits))]
            words[i] = str(int(rng.integers(1990, 2026)))
            return " ".join(words)
        words.append(str(int(rng.integers(1, 100))))
        return " ".join(words)
    if kind == "swap" and len(words) > 2:
        i = int(rng.integers(len(words) - 1))
        words[i], words[i + 1] = words[i + 1], words[i]
        return " ".join(words)
    if kind == "case":
        i = int(rng.integers(len(words)))
        w = words[i]
        words[i] = w.upper() if w != w.upper() else w.lower()
        return " ".join(words)
    return s


def short_texts(n_docs: int, seed: int = 0, target_chars: int = 50,
                lines: list[str] | None = None) -> list[str]:
    """``n_docs`` short texts drawn from ``lines`` (Debian copyright lines by
    default), see the module docstring."""
    rng = np.random.default_rng(seed)
    lines = lines if lines is not None else debian_lines()
    if not lines:
        raise RuntimeError(f"no text under {DEBIAN_GLOB}")
    nl = len(lines)
    kinds = ("sub", "sub", "ins", "del", "num", "swap", "case")
    pick_a = rng.integers(nl, size=n_docs)
    pick_b = rng.integers(nl, size=n_docs)
    splice = rng.random(n_docs) < 0.6
    n_edits = rng.choice(4, size=n_docs, p=[0.2, 0.45, 0.25, 0.10])
    out = []
    for i in range(n_docs):
        a = lines[pick_a[i]]
        if splice[i]:
            b = lines[pick_b[i]]
            wa = a.split(" ")
            wb = b.split(" ")
            ka = max(1, len(wa) // 2)
            kb = len(wb) // 2
            s = " ".join(wa[:ka] + wb[kb:])
        else:
            s = a
        if len(s) > 2 * target_chars:
            cut = s.rfind(" ", 0, int(target_chars * 1.2))
            s = s[:cut if cut > target_chars // 2 else target_chars]
        for _ in range(int(n_edits[i])):
            s = _edit_short(s, rng, kinds)
        out.append(s)
    return out


def debian_short(n_docs: int = 1_000_000, seed: int = 0,
                 data_dir: str | None = None) -> CorpusSpec:
    path = os.path.join(_data_dir(data_dir), f"debian_short_{n_docs}_s{seed}.jsonl")
    spec = _cached(path)
    if spec:
        return spec
    texts = short_texts(n_docs, seed)
    nbytes = write_jsonl(path, texts)
    mean = nbytes / max(1, len(texts))
    return _save_meta(CorpusSpec(
        f"debian-short-{n_docs}", path, n_docs, nbytes, "char", 5, 0.8,
        f"{n_docs:,} short documents (mean {mean:.0f} bytes): lines of {DEBIAN_GLOB}, "
        f"60% spliced from two lines, 0-3 light random edits each"))


LONG_GLOBS = ("/usr/share/man/**/*", "/usr/share/doc/**/*", "/usr/lib/python3*/**/*.py",
              "/usr/share/perl*/**/*.p[ml]", "/usr/include/**/*.h")
LONG_MIN, LONG_MAX = 2048, 32768


def long_texts() -> list[str]:
    """Every text file of :data:`LONG_GLOBS` (gzip files decompressed, links
    and binary files skipped) of ``LONG_MIN`` to ``LONG_MAX`` bytes, in
    sorted path order, each real file once."""
    paths = [p for pattern in LONG_GLOBS for p in sorted(glob.glob(pattern, recursive=True))]
    return [raw.decode("utf-8", errors="replace") for raw in _file_texts(paths)
            if LONG_MIN <= len(raw) <= LONG_MAX]


def _file_texts(paths):
    """The bytes of each real file of ``paths`` once (links skipped, gzip
    files decompressed, at most ``4 * LONG_MAX`` bytes read), less the
    binary ones (a NUL byte) and those that cannot be read, in order."""
    import gzip
    seen = set()
    for p in paths:
        real = os.path.realpath(p)
        if real in seen or os.path.islink(p) or not os.path.isfile(real):
            continue
        seen.add(real)
        try:
            with open(real, "rb") as f:
                raw = f.read(4 * LONG_MAX)
            if raw[:2] == b"\x1f\x8b":
                raw = gzip.decompress(raw)
        except (OSError, EOFError, gzip.BadGzipFile):
            continue
        if b"\0" not in raw:
            yield raw


def long_documents(n_docs: int | None = None, data_dir: str | None = None) -> CorpusSpec:
    """Long real documents (:func:`long_texts`), the first ``n_docs`` or all."""
    return _real("long_documents", n_docs, data_dir, lambda n: long_texts(),
                 lambda n: f"{n:,} long real documents of {LONG_MIN // 1024}-"
                           f"{LONG_MAX // 1024} KB: manual pages, /usr/share/doc text files, Python "
                           f"and Perl library sources, C headers")


MO_GLOB = "/usr/share/locale/*/LC_MESSAGES/*.mo"


def _mo_strings(path: str) -> list[str]:
    """The translated strings of one GNU gettext catalogue (``.mo``): each
    message's forms, as UTF-8 (catalogues in other encodings, or damaged,
    give what decodes)."""
    import struct
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 20:
        return []
    order = {0x950412DE: "<", 0xDE120495: ">"}.get(struct.unpack("<I", raw[:4])[0])
    if order is None:
        return []
    count, _, table = struct.unpack(order + "3I", raw[8:20])
    out = []
    for i in range(count):
        at = table + 8 * i
        if at + 8 > len(raw):
            break
        length, offset = struct.unpack(order + "2I", raw[at:at + 8])
        for form in raw[offset:offset + length].split(b"\0"):
            try:
                text = form.decode("utf-8")
            except UnicodeDecodeError:
                continue
            if text.strip():
                out.append(text)
    return out


def locale_texts(seed: int = 0) -> list[str]:
    """Every translated message of :data:`MO_GLOB` (files in sorted order),
    shuffled with ``seed``: short real text in some 100 languages and
    scripts, most of it beyond ASCII, with the repeats that translations of
    one program's messages across packages have."""
    import random
    texts = []
    for path in sorted(glob.glob(MO_GLOB)):
        texts += _mo_strings(path)
    random.Random(seed).shuffle(texts)
    return texts


def locale_strings(n_docs: int | None = 1_000_000,
                   data_dir: str | None = None) -> CorpusSpec:
    """Short multilingual real documents: translated program messages
    (:func:`locale_texts`), the first ``n_docs`` (about 2 million on a
    machine with many locales) or all."""
    return _real("locale_strings", n_docs, data_dir, lambda n: locale_texts(),
                 lambda n: f"{n:,} short real documents in many languages: the translated "
                           f"messages of {MO_GLOB}, shuffled")


MAN_ROOT = "/usr/share/man"


def translated_man_texts() -> list[str]:
    """Every translated manual page under :data:`MAN_ROOT` (its folders of
    languages, not the ``man1`` to ``man8`` of English; gzip files decompressed,
    links and binary files skipped; sorted path order, each real file once):
    long real documents in some 25 languages, many of them mostly ASCII (the
    page's markup and its English terms) with the language's own letters."""
    langs = sorted(d for d in (os.listdir(MAN_ROOT) if os.path.isdir(MAN_ROOT) else [])
                   if not d.startswith("man"))
    paths = [p for lang in langs
             for p in sorted(glob.glob(os.path.join(MAN_ROOT, lang, "**", "*"), recursive=True))]
    return [raw.decode("utf-8", errors="replace") for raw in _file_texts(paths) if raw]


def translated_man_pages(n_docs: int | None = None,
                         data_dir: str | None = None) -> CorpusSpec:
    """Long multilingual real documents (:func:`translated_man_texts`), the
    first ``n_docs`` or all (about 1,300 on a machine with many locales)."""
    return _real("translated_man_pages", n_docs, data_dir, lambda n: translated_man_texts(),
                 lambda n: f"{n:,} translated manual pages ({MAN_ROOT}/LANGUAGE), whole")


BUILDERS = {
    "planted": planted,
    "realistic": realistic,
    "debian-files": debian_files,
    "debian-paragraphs": debian_paragraphs,
    "debian-short": debian_short,
    "debian-text": debian_text,
    "debian-entries": debian_entries,
    "long-documents": long_documents,
    "locale-strings": locale_strings,
    "translated-man-pages": translated_man_pages,
}
