"""What the stages hand each other: small typed records.

A stage of a runner takes the records of the stages before it and returns
its own; the tasks of a stage receive the records they read as arguments
(the executors send them to Dask workers once per stage). Nothing is set on
the run's context (:class:`gpu_dedup.engine.tasks.Ctx`) between stages: it
holds only what is fixed for the whole run.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..io.plan import location


@dataclass(frozen=True)
class Documents:
    """What the ``read`` stage returns: the chunks every later stage reads.

    Attributes:
        chunks: each chunk's metadata (``key``, ``file``, ``path``, ``n``,
            ...; :func:`gpu_dedup.engine.tasks.chunk_meta`), in input order.
        starts: int64 ``len(chunks) + 1``: the global position of each
            chunk's first document, then the number of documents.
    """

    chunks: tuple
    starts: np.ndarray

    @classmethod
    def of(cls, chunks) -> "Documents":
        n = np.array([c["n"] for c in chunks], dtype=np.int64)
        return cls(tuple(chunks), np.concatenate([[0], np.cumsum(n)]).astype(np.int64))

    @property
    def count(self) -> int:
        """The number of documents."""
        return int(self.starts[-1])

    def chunk_of(self, docs) -> np.ndarray:
        """The chunk of each global document position."""
        return np.searchsorted(self.starts, docs, side="right") - 1

    @cached_property
    def shard_paths(self) -> list:
        """Each input file's path, by file number (worked out once)."""
        paths: dict = {}
        for c in self.chunks:
            paths.setdefault(c["file"], c["path"])
        return [paths[i] for i in sorted(paths)]

    def where(self, ci: int, line: int) -> str:
        """``FILE:LINE`` (or the file's own form) of a location in chunk ``ci``."""
        return location(self.chunks[ci], line)


@dataclass(frozen=True)
class Blocks:
    """What the ``signatures`` stage lays out: blocks of consecutive
    representatives (each within one chunk), whose signatures and band keys
    are stored per block.

    Attributes:
        blocks: ``{"key", "chunk", "r0", "r1"}`` each, in position order.
        starts: int64, each block's first representative position.
    """

    blocks: tuple
    starts: np.ndarray

    @classmethod
    def of(cls, blocks) -> "Blocks":
        return cls(tuple(blocks), np.array([b["r0"] for b in blocks], dtype=np.int64))

    def block_of(self, positions) -> np.ndarray:
        """The block of each representative position."""
        return np.searchsorted(self.starts, positions, side="right") - 1


@dataclass(frozen=True)
class ScoreInputs:
    """What a scoring task reads besides its pairs.

    Attributes:
        docs: the run's :class:`Documents`.
        blocks: the signature :class:`Blocks` (signature scoring).
        sets: the shingle sets ``(positions, set_offsets, values)`` of
            representatives (their positions sorted) built once for this
            process's tasks; or :class:`StoredSets`, built once into the
            store for tasks in other processes; or None (each task builds
            its batch's).
    """

    docs: Documents
    blocks: Blocks
    sets: "tuple | StoredSets | None" = None


@dataclass(frozen=True)
class StoredSets:
    """Shingle sets of representatives saved in the store as the files of
    ``unit`` (:data:`gpu_dedup.engine.layout.SETS`), for scoring tasks that
    run in other processes: each maps them instead of building them again.

    Attributes:
        unit: the store unit that holds them.
        positions: the representatives' positions (sorted), also saved.
    """

    unit: str
    positions: np.ndarray


def set_positions(sets) -> np.ndarray | None:
    """The sorted representative positions whose sets ``sets`` holds (a
    handle, :class:`StoredSets` or None)."""
    if sets is None:
        return None
    return sets.positions if isinstance(sets, StoredSets) else sets[0]
