"""Readers and writers. Every input becomes a :class:`Shard`; the kept rows of
each shard are written back in its own format.

Modules: :mod:`.sources` (input discovery, shards, the corpus), :mod:`.jsonl`,
:mod:`.parquet` and :mod:`.txt` (one format each), :mod:`.stdin` (``-``,
standard input), :mod:`.plan` (read units and measured input sizes) and
:mod:`.identity` (the content identity of inputs, for resuming)."""
from .sources import Shard, expand_inputs, read_corpus  # noqa: F401
