"""The near-duplicate runner: its stages in order, over a store, through an
executor.

One :class:`Runner` serves every way of running: the library's
:func:`gpu_dedup.deduplicate` over an Arrow array and ``gpu-dedup run`` over
files, in memory or out of core, in this process or on Dask. Only the store
(:mod:`gpu_dedup.engine.store`) and the executor
(:mod:`gpu_dedup.engine.executors`) differ, and neither changes a result.

The stages, each a method that takes the records of the
stages before it (:mod:`gpu_dedup.engine.records`) and returns its own, its
tasks in :mod:`gpu_dedup.engine.tasks`:

1. ``read``: the inputs into chunks (:class:`~gpu_dedup.engine.records.Documents`),
   ids checked (:class:`~gpu_dedup.engine.base.RunnerBase`);
2. ``exact``: the representatives of the groups of identical texts;
3. ``signatures``: MinHash signatures and band keys, per block of
   representatives (:class:`~gpu_dedup.engine.records.Blocks`);
4. ``buckets``: the band collisions;
5. ``select``: greedy selection of the representatives range by range of
   ranks (:mod:`~gpu_dedup.engine.select_stage`), scoring candidate pairs as
   it goes (or, for components, the pairs at the threshold);
6. ``assign``: each document's kept document, similarity and cluster
   (:mod:`~gpu_dedup.engine.assign_stage`).

Between the stages the runner itself holds a few numbers per chunk and
block, and maps the representatives' positions (8 bytes each) from the store
(in memory when the store is); everything per document or per pair lives in
the store. What a finished run writes is
:mod:`~gpu_dedup.engine.outputs`.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..arrays import arrow, stable_order, unique
from ..backend import MAX_DOCUMENTS
from ..errors import InputError
from ..kernels.jit import compiled_here, interpreting
from ..stages.lsh import unpack_edges, verified_edges
from . import bucket_tasks, exact_tasks, layout, tasks
from .assign_stage import AssignStage
from .base import RunnerBase
from .bounds import bound_words, uses_bounds
from .outputs import RunOutputs
from .plan import compile_selection
from .records import Blocks, Documents, ScoreInputs, StoredSets, set_positions
from .select_stage import SET_BYTES_PER_TEXT_BYTE, SelectStage
from .store import DamagedWorkFile
from .tasks import BandKeys, edges_digest

log = logging.getLogger("gpu_dedup")

_U64 = np.uint64


#: The fewest pairs a scoring batch takes (below that, per-task overhead
#: dominates).
MIN_SCORE_BATCH = 1024
#: Bytes the shingle sets built for a batch of pairs take per byte of their
#: documents' texts (the raw hashes, then the sorted distinct ones).
SET_BATCH_BYTES_PER_TEXT_BYTE = 24
#: A batch's sets may always take this much, whatever the budget: below it,
#: the cost of a task outweighs what it scores.
MIN_BATCH_SET_BYTES = 16 << 20


def lacking(pairs: np.ndarray, shared: np.ndarray | None) -> np.ndarray:
    """The representative position each pair of ``pairs`` (``(2, n)``) has
    to have its shingle set built for: the first one not among the sorted
    ``shared`` positions (the first of the pair when there are none, or
    when it lacks neither)."""
    ia, ib = pairs[0], pairs[1]
    if shared is None:
        return ia
    has_a = tasks.row_in(shared, ia) >= 0
    return np.where(has_a & (tasks.row_in(shared, ib) < 0), ib, ia)


def _built(edges: np.ndarray, cost: tuple) -> float:
    """What the shingle sets a batch of ``edges`` builds take
    (``cost``: :meth:`Runner._set_costs` of its call)."""
    docs, each = cost
    return float(each[np.searchsorted(docs, unique(edges.reshape(-1)))].sum())


def _within(edges: np.ndarray, cost: tuple, s: int, e: int, limit: float) -> list:
    """The batch ``s .. e`` of ``edges``, halved until the sets each part
    builds fit ``limit`` (or it is one pair)."""
    if e - s > 1 and _built(edges[:, s:e], cost) > limit:
        m = (s + e) // 2
        return _within(edges, cost, s, m, limit) + _within(edges, cost, m, e, limit)
    return [(s, e)]


def batch_cuts(key: np.ndarray, size: int) -> list[tuple[int, int]]:
    """``(start, stop)`` of the batches of pairs sorted by ``key``: about
    ``size`` pairs each, cut where the key changes, so that the pairs of one
    key fall in one batch (a key with more pairs than ``3 * size`` is cut
    every ``3 * size`` pairs, which bounds a batch)."""
    cuts, s, n = [], 0, int(key.size)
    while s < n:
        e = min(n, s + size)
        if e < n:
            e = min(int(np.searchsorted(key, key[e - 1], side="right")), s + 3 * size)
        cuts.append((s, e))
        s = e
    return cuts


@dataclass
class Context:
    """Documents of indexes a run is deduplicated against: the run's first
    input, ``docs`` of them, in index order.

    Attributes:
        ids: their ids in their index (string).
        index: the number of the index each comes from.
        names: the indexes' names, by number.
    """

    docs: int
    ids: pa.Array
    index: np.ndarray
    names: list

    def index_names(self, docs: np.ndarray) -> pa.Array:
        """The index of each of ``docs`` (run positions); null for the run's own."""
        docs = np.asarray(docs, dtype=np.int64)
        inside = docs < self.docs
        out = np.full(docs.size, None, dtype=object)
        if inside.any():
            out[inside] = np.asarray(self.names, dtype=object)[self.index[docs[inside]]]
        return arrow(out, pa.string())


class Runner(RunnerBase, SelectStage, AssignStage, RunOutputs):
    """Runs the near-duplicate stages over ``store`` with ``executor``.

    Args:
        cfg: the resolved :class:`gpu_dedup.config.Config`.
        context: the documents of an index the run is deduplicated against
            (:class:`Context`): they are the run's first input, kept
            already, and left out of every output but ``duplicate_of``.
        The rest as for :class:`gpu_dedup.engine.base.RunnerBase`.
    """

    def __init__(self, cfg, backend, store, executor, plan, *, context=None, **kw):
        super().__init__(backend, store, executor, plan, cfg=cfg, **kw)
        self.context = context
        self.C = 0                      # documents of the context (the first input)

    # -- the whole run ----------------------------------------------------
    def run(self, units: list) -> None:
        """Every stage up to each document's kept document."""
        with self.stage("read"):
            docs = self.read(units, tasks.task_prepare)
        log.info("read %d documents in %d chunk(s)", docs.count, len(docs.chunks))
        with self.stage("exact"):
            reps = self.exact(docs)
        with self.stage("signatures"):
            blocks = self.signatures(docs, reps)
        with self.stage("buckets"):
            self.buckets(blocks)
        if self.cfg.cluster == "greedy":        # its selection reads no band key again
            self.store.uncache(layout.signature_file(b["key"], layout.KEYS)
                               for b in blocks.blocks)
        with self.stage("select"):
            self.select(docs, blocks)
        with self.stage("assign"):
            self.assign()

    # -- stages -----------------------------------------------------------
    def read(self, units: list, task) -> Documents:
        docs = super().read(units, task)
        if docs.count > MAX_DOCUMENTS and self.cfg.cluster == "components":
            raise InputError(f"{docs.count:,} documents: --cluster components takes at most "
                             f"{MAX_DOCUMENTS:,} (it labels the whole graph in one process, "
                             f"its pairs packed in 64 bits); use --cluster greedy, which "
                             f"takes any number")
        self.avg_text = (sum(c.get("text_bytes", 0) for c in docs.chunks) / docs.count
                         if docs.count else 1.0)
        if self.context is not None and self.context.docs:
            self.C = sum(c["n"] for c in docs.chunks if c["file"] == 0)
            if self.C != self.context.docs:
                raise InputError(f"{docs.shard_paths[0]}: {self.C:,} documents, expected "
                                 f"{self.context.docs:,} from the index")
        return docs

    def exact(self, docs: Documents) -> np.ndarray:
        """The representatives: the first active document of each group of
        identical texts (sorted positions); the other members are stored."""
        meta = self._stage_done("exact")
        st = self.store
        if meta is None:
            parts, split = self._fingerprint_parts(
                docs, layout.FP, lambda task, items: self._map("exact", task, items, docs),
                active=True, lengths=self.cfg.keep == "longest")
            self._map("exact", exact_tasks.task_exact, [(p, parts, split) for p in range(parts)],
                      docs)
            # each chunk's positions merged from the partitions by a task, then
            # the slices written end to end: no array over every document here
            slices = self._map("exact", exact_tasks.task_exact_slice,
                               [(c, parts) for c in range(len(docs.chunks))], docs)
            units = [layout.exact_slice(parts, c) for c in range(len(docs.chunks))]
            names = layout.exact_slice_arrays(self.cfg.keep == "longest")
            for name in names:
                st.concat_npy(layout.exact(name), [layout.file(u, f"{name}.npy") for u in units],
                              np.int64)
            # what the assign stage reads chunk by chunk: each member's
            # representative's number, a slice at a time
            reps = st.load_npy(layout.exact("reps"), mmap=True)
            st.save_npy_pieces(
                layout.exact("member_group"),
                (np.searchsorted(reps, st.load_npy(layout.file(u, "member_rep.npy"), mmap=True))
                 for u in units), np.int64, sum(r["members"] for r in slices))
            meta = {"reps": int(reps.size), "units": parts}
            del reps
            st.mark_done(layout.stage("exact"), meta,
                         [layout.exact(n) for n in dict.fromkeys(
                             layout.EXACT_ARRAYS + layout.EXACT_FOR_ASSIGN + names)])
            for u in units:              # the stage's arrays hold them now
                for name in names:
                    st.discard(layout.file(u, f"{name}.npy"))
            if split:
                self._forget_split(docs, layout.FP, parts)
        # mapped from a disk store, not read in: what the driver reads of them
        # (searches, gathers) stays in pages the system can drop
        self.reps = np.asarray(st.load_npy(layout.exact("reps"), mmap=True))
        self.R = int(self.reps.size)
        return self.reps

    def signature_blocks(self, docs: Documents, reps: np.ndarray) -> Blocks:
        cfg = self.cfg
        per_rep = cfg.num_perm * (cfg.signature_bits // 8) + cfg.bands * 8 * 2 + 16
        words = bound_words(cfg, self.avg_text)     # every block's bound rows alike
        per_rep += 4 * words if uses_bounds(cfg, self.be) else 0
        rows = max(256, self.plan.task_bytes // (3 * per_rep))
        blocks = []
        for ci in range(len(docs.chunks)):
            lo = int(np.searchsorted(reps, docs.starts[ci]))
            hi = int(np.searchsorted(reps, docs.starts[ci + 1]))
            for r0 in range(lo, hi, rows):
                r1 = min(hi, r0 + rows)
                blocks.append({"key": layout.block_key(r0), "chunk": ci, "r0": r0, "r1": r1,
                               "bound_words": words})
        return Blocks.of(blocks)

    def signatures(self, docs: Documents, reps: np.ndarray) -> Blocks:
        """MinHash signatures and band keys of the representatives, per block."""
        blocks = self.signature_blocks(docs, reps)
        meta = self._stage_done("signatures")
        if meta is None:
            results = self._map("signatures", tasks.task_signatures, list(blocks.blocks), docs)
            meta = {"shingles": int(sum(r["shingles"] for r in results)),
                    "units": len(blocks.blocks),
                    "bounds": int(all(r.get("bounds") for r in results))}
            self.store.mark_done(layout.stage("signatures"), meta,
                                 units=[layout.signature_block(b["key"]) for b in blocks.blocks])
        self.shingles = meta["shingles"]
        self.bound_rows_stored = bool(meta.get("bounds"))   # by every block
        self.blocks = blocks
        return blocks

    def lsh_need(self, g: int, parts: int) -> float:
        """Bytes a bucket unit of ``g`` bands in one of ``parts`` key
        partitions holds at most."""
        n = self.R / parts
        per_row = 8 + 8 + 8 + 16 + 16      # with the split copy of keys and docs
        return g * n * per_row + min(max(1, self.plan.kernel_threads), g) * n * 72

    def lsh_layout(self) -> tuple[int, int]:
        """(key partitions, bands per unit) that fit a task's share."""
        R, B = self.R, self.cfg.bands
        task = self.plan.task_bytes
        parts = 1
        while self.lsh_need(1, parts) > task and parts < max(1, R):
            parts *= 2
        if self.ex.name != "none":
            parts = max(parts, self.ex.concurrency)
        g = 1
        while g < B and self.lsh_need(g + 1, parts) <= task:
            g += 1
        return parts, g

    def sweeping(self, parts: int, groups: int) -> bool:
        """Whether the bucket units run a group of bands at a time, each
        group's keys read once for all its ``parts`` key partitions: when
        there are several, and ``groups`` enough to keep every worker busy
        (else each unit reads its bands' keys, and keeps its partition's)."""
        return parts > 1 and groups >= self.ex.concurrency

    def buckets(self, blocks: Blocks) -> dict:
        """The band collisions: buckets of two or more representatives
        (greedy selection), or their candidate pairs (components)."""
        meta = self._stage_done("buckets")
        st = self.store
        if meta is None:
            parts, g = self.lsh_layout()
            B = self.cfg.bands
            grid = layout.bucket_layout(parts, g)
            units = []
            for p in range(parts):
                for j0 in range(0, B, g):
                    units.append({"layout": grid, "index": len(units), "parts": parts,
                                  "part": p, "bands": list(range(j0, min(B, j0 + g)))})
            groups = -(-B // g)
            if self.sweeping(parts, groups):
                # a group's keys routed (12 bytes a key) stay in memory
                # where they fit beside a unit's own
                held = 12 * self.R * g + self.lsh_need(g, parts) <= self.plan.task_bytes
                sweeps = [{"units": units[k::groups], "in_memory": held}
                          for k in range(groups)]
                swept = self._map("buckets", bucket_tasks.task_lsh_sweep, sweeps, blocks)
                results = [None] * len(units)
                for sw, got in zip(sweeps, swept):
                    for u, r in zip(sw["units"], got["units"]):
                        results[u["index"]] = r
            else:
                results = self._map("buckets", bucket_tasks.task_lsh, units, blocks)
            meta = {"units": len(units), "parts": parts, "bands_per_unit": g}
            names = [layout.bucket_unit(grid, u["index"]) for u in units]
            if self.cfg.cluster == "greedy":
                cut, files = self._cut_into_ranges(grid, names, results)
                meta.update(cut)
            else:
                edges = [st.load_npy(layout.file(n, layout.EDGES)) for n in names]
                if len(edges) == 1:
                    first = edges[0]                 # already sorted and unique
                else:
                    first = unique(np.concatenate(edges)) if edges else np.zeros(0, _U64)
                del edges
                st.save_npy(layout.FIRST_ROUND, first)
                meta["first_round"] = int(first.size)
                del first
                files = [layout.FIRST_ROUND]
            st.mark_done(layout.stage("buckets"), meta, files)
        self.buckets_meta = meta
        return meta

    def _score_batches(self, edges: np.ndarray, sets) -> tuple[list, np.ndarray | None]:
        """``edges`` (pairs, ``(2, n)``) cut into the batches of one scoring
        call, and the order
        they were taken in (None: as they are). Several batches are taken in
        the order of the document each pair lacks in the shared ``sets`` (its
        first one when there are none): each batch then builds the sets of
        documents of a few neighbouring chunks, and each such document is
        built by one batch, not by every batch that reads it."""
        cfg = self.cfg
        jaccard = cfg.similarity == "jaccard" and cfg.verify
        if jaccard:
            per_doc = self.avg_text * SET_BATCH_BYTES_PER_TEXT_BYTE + 96
        else:
            per_doc = cfg.num_perm * (cfg.signature_bits // 8) * 2 + 32
        # at least 1,024 edges a batch (below that, per-task overhead dominates),
        # and a batch for each worker when there are several; in components
        # mode, tasks that run in this process share its budget with the
        # candidate pairs and labels it holds, and take half their share
        # (a fixed cut: a rerun cuts the same batches, and reuses them)
        task_bytes = self.plan.task_bytes
        if cfg.cluster == "components" and self.ex.shared_memory:
            task_bytes //= 2
        size = max(MIN_SCORE_BATCH, int(task_bytes // (4 * per_doc)))
        n = edges.shape[1]
        if self.ex.concurrency > 1:
            size = max(MIN_SCORE_BATCH, min(size, -(-n // self.ex.concurrency)))
        shared = None if sets is None else tasks.host(self.be, set_positions(sets))
        # the sets a batch builds weigh what their own texts do, not what
        # the corpus's average would: the first documents by priority, or
        # those of a large cluster, can be many times longer
        limit = max(task_bytes / 4, MIN_BATCH_SET_BYTES)
        cost = self._set_costs(edges, shared) if jaccard else None
        if n <= size and not (cost is not None and _built(edges, cost) > limit):
            return [edges], None
        key = lacking(edges, shared)
        order = stable_order(key)
        edges, key = edges[:, order], key[order]
        cuts = batch_cuts(key, size)
        if cost is not None:
            cuts = [c for s, e in cuts for c in _within(edges, cost, s, e, limit)]
        return [np.ascontiguousarray(edges[:, s:e]) for s, e in cuts], order

    def _set_costs(self, edges: np.ndarray, shared) -> tuple:
        """The documents of ``edges`` (sorted) and the bytes the shingle set
        of each takes when a batch builds it (0 for those among the
        ``shared`` positions, which are read, not built): read once a call."""
        docs = unique(edges.reshape(-1))
        cost = self._text_bytes(docs) * SET_BATCH_BYTES_PER_TEXT_BYTE + 96
        if shared is not None:
            cost[tasks.row_in(shared, docs) >= 0] = 0
        return docs, cost

    def _scorer(self, prefix: str, stage: str, inputs: ScoreInputs, floor: float = 0.0,
                share=None):
        """``score(pairs) -> float64``: the similarity of pairs of
        representative positions (int64 ``(2, n)``: first positions, then
        second ones), in batches through the executor; on a disk
        store each batch is saved as it completes, and a rerun reuses it.
        Scores below ``floor`` need not be exact (only whether they reach it
        matters to the caller). ``share(positions)``, when given, is asked
        once, at the first pairs to score, for the shared sets of (some of)
        their representatives' ``positions`` (sorted). ``score.release()`` lets go
        of ``inputs`` (the shared sets may be large); ``score.calls[0]``:
        its calls."""
        st = self.store
        calls = [0]
        held = [inputs]
        asked: list = []

        def score(pairs):
            calls[0] += 1
            c = calls[0]
            pairs = np.asarray(pairs, dtype=np.int64).reshape(2, -1)
            if share is not None and held[0].sets is None and not asked:
                asked.append(True)
                held[0] = dataclasses.replace(held[0], sets=share(unique(pairs.reshape(-1))))
            batches, order = self._score_batches(pairs, held[0].sets)
            out = [None] * len(batches)
            todo = []
            for i, b in enumerate(batches):
                name = layout.score_batch(prefix, c, i)
                m = st.done(name)
                if m is not None and m.get("digest") == edges_digest(b):
                    out[i] = st.load_npy(layout.file(name, layout.BATCH))
                    self.reused[stage] = self.reused.get(stage, 0) + 1
                else:
                    todo.append(i)
            self.units[stage] = self.units.get(stage, 0) + len(batches)
            if todo:
                count = [0]

                def on_done(j, r):
                    i = todo[j]
                    if st.kind == "disk":       # saved as it completes: a rerun reuses it
                        name = layout.score_batch(prefix, c, i)
                        st.save_npy(layout.file(name, layout.BATCH), r)
                        st.mark_done(name, {"digest": edges_digest(batches[i])},
                                     [layout.file(name, layout.BATCH)])
                    out[i] = r
                    count[0] += 1
                    self._progress(stage, count[0], len(todo))

                self.ex.map(tasks.task_score,
                            [(batches[i], floor) if floor else batches[i] for i in todo],
                            self.ctx, held[0], on_done=on_done)
            if order is None:                # the pairs as they came, in one batch
                return out[0]
            scores = np.empty(pairs.shape[1], np.float64)     # taken in another order
            scores[order] = np.concatenate(out)
            return scores

        def release():
            if held[0] is not None and isinstance(held[0].sets, StoredSets):
                st.forget(held[0].sets.unit)
            held[0] = None

        score.calls = calls
        score.release = release
        return score

    def select(self, docs: Documents, blocks: Blocks) -> dict:
        """Greedy selection of the representatives over the buckets, scoring
        candidate pairs as it goes; or, for components, the candidate pairs
        that reach the threshold."""
        meta = self._stage_done("select")
        if meta is None:
            if self.cfg.cluster == "greedy":
                pairs = self.buckets_meta.get("window_pairs", 0)
                heavy = interpreting() and compile_selection(pairs)
                if heavy:
                    log.info("selection: %d pairs in the buckets' windows, compiled", pairs)
                with compiled_here(heavy):
                    meta = self._select_in_ranges(docs, blocks)
                names = layout.SELECTED_GREEDY
            else:
                meta = self._verify_components(docs, blocks)
                names = layout.SELECTED
            self.store.mark_done(layout.stage("select"), meta,
                                 [layout.selected(n) for n in names])
        self.select_meta = meta
        return meta

    def _verify_components(self, docs: Documents, blocks: Blocks) -> dict:
        cfg = self.cfg
        st = self.store
        first = st.load_npy(layout.FIRST_ROUND)
        ia, ib = unpack_edges(first)
        inputs = ScoreInputs(docs, blocks, self._shared_sets(
            unique(np.concatenate([ia, ib])), layout.shared_sets(layout.SELECT_BATCHES)))
        score = self._scorer(layout.SELECT_BATCHES, "select", inputs)
        del ia, ib
        keys = BandKeys(self.ctx, blocks, self.R, cfg.bands)
        er = verified_edges(first, keys, lambda packed: score(np.stack(unpack_edges(packed))),
                            float(cfg.threshold), cfg.max_rounds, accept_all=not cfg.verify)
        score.release()                 # the shared sets
        del inputs
        a, b = unpack_edges(er.accepted)
        st.save_npy(layout.selected("accepted_a"), a)
        st.save_npy(layout.selected("accepted_b"), b)
        st.save_npy(layout.selected("scores"), er.scores)
        return {"candidates": er.candidates, "rounds": er.rounds, "skipped": 0,
                "unresolved": er.unresolved, "verified": int(er.accepted.size),
                "units": max(1, score.calls[0])}

    def _per_chunk(self, docs: np.ndarray, read) -> np.ndarray:
        """An int64 value of each of the documents ``docs`` (sorted), read
        chunk by chunk: ``read(key, local)`` gives those of a chunk's
        documents at its own positions ``local``."""
        out = np.zeros(docs.size, np.int64)
        at = np.searchsorted(docs, self.doc_starts)
        for ci, c in enumerate(self.chunks):
            a, b = int(at[ci]), int(at[ci + 1])
            if b > a:
                out[a:b] = read(c["key"], docs[a:b] - int(self.doc_starts[ci]))
        return out

    def _lengths_at(self, positions: np.ndarray) -> np.ndarray:
        """The lengths in code points (``keep="longest"``) of the documents
        at ``positions`` (sorted)."""
        return self._per_chunk(positions, lambda key, local: self.store.load_npy(
            layout.chunk_file(key, layout.LENGTHS), mmap=True)[local])

    def _text_bytes(self, positions: np.ndarray) -> np.ndarray:
        """The bytes of text of the representatives at ``positions``
        (sorted), from their chunks' text offsets."""
        def read(key, local):
            off, _ = self.store.buffers(layout.chunk_file(key, layout.TEXT))
            return np.asarray(off[local + 1]) - np.asarray(off[local])
        return self._per_chunk(np.asarray(self.reps[positions], dtype=np.int64), read)

    def _shared_sets(self, positions: np.ndarray, unit: str):
        """The shingle sets of the representatives at ``positions`` (sorted),
        built once, chunk by chunk, for every round of a scorer's calls to
        read instead of building them again (a task builds those of the
        documents they lack). When this process's tasks can read them,
        they are built here: all of them, or on a disk store those of the
        first that fit a quarter of the budget (about 12 bytes a byte of
        their texts). When the tasks run in other processes, a task builds
        those of the first that fit half a task's share into the store, as
        the files of ``unit`` (:class:`~gpu_dedup.engine.records.StoredSets`),
        and every scoring task maps them. None when none are (tasks then
        build the sets of their own batch). The handle's positions are
        sorted (:func:`~gpu_dedup.engine.records.set_positions`)."""
        cfg = self.cfg
        st = self.store
        if (not positions.size or not (cfg.verify and cfg.similarity == "jaccard")
                or (not self.ex.shared_memory and st.kind == "memory")):
            return None
        if st.kind != "memory":
            room = self.plan.budget / 4 if self.ex.shared_memory else self.plan.task_bytes / 2
            need = np.cumsum(self._text_bytes(positions) * SET_BYTES_PER_TEXT_BYTE + 16)
            positions = positions[:int(np.searchsorted(need, room, side="right"))]
            if not positions.size:
                return None
        positions = np.ascontiguousarray(positions, dtype=np.int64)
        if not self.ex.shared_memory:
            digest = tasks.edges_digest(positions)
            meta = st.done(unit)
            if meta is None or meta.get("digest") != digest:
                self.ex.map(tasks.task_store_sets, [(unit, positions)], self.ctx, self.docs)
                meta = st.done(unit)        # checks the files it lists, and keeps their sums
                if meta is None or meta.get("digest") != digest:
                    raise DamagedWorkFile(f"{os.path.join(str(st.root), unit)}: the shingle "
                                          f"sets saved for the scoring tasks are missing or "
                                          f"damaged; run the same command again")
            return StoredSets(unit, positions)
        _, so, sv = tasks.sets_of(self.ctx, self.be, self.docs, self.reps[positions])
        return positions, so, sv
