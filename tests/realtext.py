"""The committed real-text corpus of the tests (``tests/data/licences.jsonl.zst``).

Copyright statements and licence texts of Debian packages, one paragraph per
document, in the order ``tests/data/make_corpus.py`` wrote them; where they
come from and why they may be redistributed: ``tests/data/README.md``.
"""
from __future__ import annotations

import functools
import json
import os

import zstandard

PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "licences.jsonl.zst")


@functools.cache
def paragraphs() -> tuple[str, ...]:
    """Every paragraph of the corpus, in order (the same on every machine)."""
    with open(PATH, "rb") as f:
        data = zstandard.ZstdDecompressor().decompress(f.read())
    return tuple(json.loads(line)["text"] for line in data.decode("utf-8").splitlines())
