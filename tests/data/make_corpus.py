"""Build ``tests/data/licences.jsonl.zst``: the real-text corpus of the tests.

The tests never run this script; they read the committed file through
``tests/realtext.py``. It was made on a Debian 12 (bookworm) machine with::

    python tests/data/make_corpus.py

which writes ``tests/data/licences.jsonl.zst`` (one JSON record
``{"package": ..., "text": ...}`` a line, zstd level 19) and
``tests/data/licences.packages.txt`` (the name and version of each package
taken, from ``dpkg-query``).

What it takes, from ``/usr/share/doc/*/copyright`` in sorted order of the
package name (one blank-line-separated paragraph per record, stripped,
otherwise verbatim):

* machine-readable files (``Format: ...`` first): the ``Files:`` stanzas
  (who holds the copyright of which files, under which licence) and the
  stand-alone ``License:`` stanzas (licence texts). The header stanza and any
  stanza with a ``Comment:`` field (maintainers' prose) are left out;
* free-form files: the paragraphs that state copyright or licence terms
  (they name a copyright, a licence, a warranty, a permission, redistribution,
  free software or the public domain); other prose is left out.

Identical files (the packages built from one source ship one file) are taken
at most ``MAX_COPIES`` times, and at most ``MAX_PER_FILE`` paragraphs of each
file, until ``MAX_PARAGRAPHS``. What stays is real text of many lengths (a
one-line stanza to a whole licence) with real near-duplicates: the same
licence notice with other names, years and file lists across packages, and
exact copies across the packages of one source.
"""
from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import re
import subprocess

import zstandard

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "licences.jsonl.zst")
PACKAGES = os.path.join(HERE, "licences.packages.txt")
SOURCE_GLOB = "/usr/share/doc/*/copyright"

MAX_COPIES = 2
MAX_PER_FILE = 250
MAX_PARAGRAPHS = 13000

_LEGAL = re.compile(r"copyright|licen[cs]|warrant|permission|redistribut|free software|"
                    r"public domain", re.IGNORECASE)
_COMMENT = re.compile(r"^Comment:", re.MULTILINE)


def keep(paragraph: str, machine_readable: bool, first: bool) -> bool:
    """Whether a paragraph is a copyright statement or licence text."""
    if machine_readable:
        if first or _COMMENT.search(paragraph):
            return False
        return paragraph.startswith(("Files:", "License:"))
    return bool(_LEGAL.search(paragraph))


def records(pattern: str = SOURCE_GLOB):
    """``{"package": ..., "text": ...}`` in order, within the limits above."""
    copies: dict[str, int] = {}
    total = 0
    for path in sorted(glob.glob(pattern)):
        with open(path, "rb") as f:
            raw = f.read()
        digest = hashlib.sha256(raw).hexdigest()
        copies[digest] = copies.get(digest, 0) + 1
        if copies[digest] > MAX_COPIES:
            continue
        text = raw.decode("utf-8", errors="replace")
        machine_readable = text.startswith("Format:")
        package = os.path.basename(os.path.dirname(path))
        paragraphs = [p.strip() for p in text.split("\n\n") if p.strip()]
        taken = 0
        for i, p in enumerate(paragraphs):
            if taken == MAX_PER_FILE or total == MAX_PARAGRAPHS:
                break
            if keep(p, machine_readable, i == 0):
                yield {"package": package, "text": p}
                taken += 1
                total += 1
        if total == MAX_PARAGRAPHS:
            return


def versions(packages: list[str]) -> list[str]:
    """``name version`` of each package, as dpkg knows it."""
    got = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${Version}\\n", *packages],
                         capture_output=True, text=True, check=True).stdout
    return sorted(set(got.splitlines()))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--glob", default=SOURCE_GLOB, help="the copyright files to read")
    ap.add_argument("--out", default=OUT, help="the .jsonl.zst file to write")
    ap.add_argument("--packages", default=PACKAGES, help="the list of packages to write")
    a = ap.parse_args(argv)
    lines = [json.dumps(r, ensure_ascii=False) + "\n" for r in records(a.glob)]
    data = "".join(lines).encode("utf-8")
    packed = zstandard.ZstdCompressor(level=19).compress(data)
    tmp = a.out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(packed)
    os.replace(tmp, a.out)
    recs = [json.loads(line) for line in lines]
    packages = sorted({r["package"] for r in recs})
    with open(a.packages, "w", encoding="utf-8") as f:
        f.write("".join(v + "\n" for v in versions(packages)))
    print(f"{a.out}: {len(recs)} paragraphs of {len(packages)} packages, "
          f"{sum(len(r['text'].encode()) for r in recs):,} bytes of text, "
          f"{len(packed):,} bytes compressed, sha256 {hashlib.sha256(data).hexdigest()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
