"""Readers and writers. Every input becomes a :class:`Shard`; the kept rows of
each shard are written back in its own format."""
from .sources import Shard, expand_inputs, read_corpus  # noqa: F401
