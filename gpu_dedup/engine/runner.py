"""The runner: the stages of :mod:`gpu_dedup.engine.tasks` in order, over a
store, through an executor.

One :class:`Runner` serves every way of running: the library's
:func:`gpu_dedup.deduplicate` over an Arrow array and ``gpu-dedup run`` over
files, in memory or out of core, in this process or on Dask. Only the store
(:mod:`gpu_dedup.engine.store`) and the executor
(:mod:`gpu_dedup.engine.executors`) differ, and neither changes a result.

Between the stages the runner keeps what every later stage needs, per
document: about 50 bytes (representative, cluster and kept flags, the
union-find of the components) plus the candidate edges.

The last stage is :mod:`~gpu_dedup.engine.select_stage`; what a finished
run writes, :mod:`~gpu_dedup.engine.outputs`.
"""
from __future__ import annotations

import logging
import math
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..arrays import concat_csr, unique
from ..backend import MAX_DOCUMENTS
from ..errors import InputError
from ..io.plan import location
from ..stages.lsh import distinct_buckets, pack_edges, unpack_edges, verified_edges
from ..timing import StageTimer
from . import tasks
from .outputs import RunOutputs
from .select_stage import SelectStage
from .tasks import BandKeys, Ctx, edges_digest, gather_ids

log = logging.getLogger("gpu_dedup")

#: Stage names, in order, as report.json lists their seconds.
STAGES = ("prepare", "exact", "signatures", "lsh", "verify", "select")
_U64 = np.uint64


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
        return pa.array(out, pa.string())


class Runner(SelectStage, RunOutputs):
    """Runs the stages over ``store`` with ``executor``.

    Args:
        cfg: the resolved :class:`gpu_dedup.config.Config`.
        backend: the backend object (its tasks in this process use it).
        store: a :class:`MemoryStore` or an opened :class:`DiskStore`.
        executor: from :func:`gpu_dedup.engine.executors.make_executor`.
        plan: the :class:`gpu_dedup.engine.plan.Plan`.
        on_stage: ``on_stage(name)`` as each stage starts.
        on_progress: ``on_progress(stage, done, total)`` as its tasks complete.
        monitor: a started :class:`gpu_dedup.memory.PeakMonitor`, or None.
        context: the documents of an index the run is deduplicated against
            (:class:`Context`): they are the run's first input, kept
            already, and left out of every output but ``duplicate_of``.
    """

    def __init__(self, cfg, backend, store, executor, plan, *, text_field="text",
                 id_field="id", on_bad_record="error", gpu_memory=None, on_stage=None,
                 on_progress=None, monitor=None, context=None, on_bytes=None):
        self.cfg = cfg
        self.be = backend
        self.store = store
        self.ex = executor
        self.plan = plan
        self.on_stage = on_stage
        self.on_progress = on_progress
        self.on_bytes = on_bytes        # (input bytes read, to read) as units are read
        self.monitor = monitor
        key = (backend.name, id(backend))
        tasks.BACKENDS[key] = backend
        self.ctx = Ctx(store, cfg, backend.name, text_field, id_field, plan,
                       on_bad_record=on_bad_record, gpu_memory=gpu_memory, backend_key=key)
        self.timer = StageTimer()
        self.reused: dict[str, int] = {}
        self.units: dict[str, int] = {}
        self.context = context
        self.C = 0                      # documents of the context (the first input)

    # -- helpers ----------------------------------------------------------
    @contextmanager
    def stage(self, name: str):
        """Time a stage, record its peak memory and announce it."""
        if self.on_stage is not None:
            self.on_stage(name)
        with self.timer(name):
            if self.monitor is None:
                yield
            else:
                with self.monitor.stage(name, release=self.store.kind == "disk"):
                    yield

    def _progress(self, stage: str, done: int, total: int) -> None:
        if self.on_progress is not None and total:
            self.on_progress(stage, done, total)

    def _map(self, stage: str, task, items: list, stop_on_error: bool = False) -> list:
        total = len(items)
        self.units[stage] = self.units.get(stage, 0) + total
        done = [0]
        sequential = self.ex.name == "none"

        read = [0]
        to_read = sum(int(u.get("bytes", 0)) for u in items) if stage == "prepare" else 0

        def on_done(i, result):
            done[0] += 1
            if to_read and self.on_bytes is not None:
                read[0] += int(items[i].get("bytes", 0))
                self.on_bytes(read[0], to_read)
            if stop_on_error and sequential and isinstance(result, dict) and "error" in result:
                raise result["error"]     # in order: nothing earlier can fail any more
            if isinstance(result, dict) and result.get("reused"):
                self.reused[stage] = self.reused.get(stage, 0) + int(result["reused"])
            self._progress(stage, done[0], total)

        out = self.ex.map(task, items, self.ctx, on_done=on_done)
        if self.reused.get(stage):
            log.info("%s: reused %d completed unit(s) from %s", stage, self.reused[stage],
                     self.store.root)
        return out

    def _stage_done(self, name: str, label: str | None = None):
        """The metadata of stage ``name`` if a disk store holds it complete
        (counted as reused under ``label``, by default the name)."""
        meta = self.store.done(f"stage/{name}")
        if meta is not None:
            log.info("%s: reusing the completed stage from %s", name, self.store.root)
            label = label or name
            n = max(1, int(meta.get("units", 1)))
            self.reused[label] = self.reused.get(label, 0) + n
            self.units[label] = self.units.get(label, 0) + n
        return meta

    # -- the whole run ----------------------------------------------------
    def run(self, units: list) -> None:
        """Every stage up to the selection of kept documents."""
        with self.stage("prepare"):
            self.prepare(units)
        log.info("prepared %d documents in %d chunk(s)", self.N, len(self.chunks))
        with self.stage("exact"):
            self.exact()
        with self.stage("signatures"):
            self.signatures()
        with self.stage("lsh"):
            self.lsh()
        with self.stage("verify"):
            self.verify()
        with self.stage("select"):
            self.select()

    # -- stages -----------------------------------------------------------
    def prepare(self, units: list, task=tasks.task_prepare) -> None:
        """Read every unit (``task``: how each chunk is stored) and learn the
        chunks, the shards and the documents' global positions."""
        meta = self._stage_done("prepare")
        if meta is None:
            results = self._map("prepare", task, units, stop_on_error=True)
            errors = [(u["order"], r["error"]) for u, r in zip(units, results) if "error" in r]
            if errors:
                raise min(errors, key=lambda e: e[0])[1]
            chunks = [c for r in results for c in r["chunks"]]
            self._check_id_presence(chunks)
            meta = {"chunks": chunks, "units": len(units)}
            # every later stage reads the chunks' files: checked with the stage
            self.store.mark_done("stage/prepare", meta,
                                 units=[f"prep/{c['key']}" for c in chunks])
        self.chunks = meta["chunks"]
        paths: dict = {}
        for c in self.chunks:
            paths.setdefault(c["file"], c["path"])
        self.shard_paths = [paths[i] for i in sorted(paths)]
        n = np.array([c["n"] for c in self.chunks], dtype=np.int64)
        self.doc_starts = np.concatenate([[0], np.cumsum(n)]).astype(np.int64)
        self.N = int(self.doc_starts[-1])
        if self.N > MAX_DOCUMENTS:
            raise InputError(f"{self.N:,} documents: a run takes at most {MAX_DOCUMENTS:,} "
                             f"(document positions are packed in 32 bits); split the inputs "
                             f"and deduplicate the parts against each other")
        self.ctx.chunks = self.chunks
        self.ctx.doc_starts = self.doc_starts
        self.avg_text = (sum(c.get("text_bytes", 0) for c in self.chunks) / self.N
                         if self.N else 1.0)
        if self.context is not None and self.context.docs:
            self.C = sum(c["n"] for c in self.chunks if c["file"] == 0)
            if self.C != self.context.docs:
                raise InputError(f"{self.shard_paths[0]}: {self.C:,} documents, expected "
                                 f"{self.context.docs:,} from the index")

    def _check_id_presence(self, chunks) -> None:
        """A file whose records have ids must have one on every record; across
        chunks, the first record without one is named."""
        by_file: dict[int, list] = {}
        for c in chunks:
            by_file.setdefault(c["file"], []).append(c)
        for cs in by_file.values():
            if len(cs) < 2 or not any(c["has_ids"] for c in cs):
                continue
            missing = [c["first_missing_id"] for c in cs if c.get("first_missing_id") is not None]
            missing += [c["first_line"] for c in cs if not c["has_ids"] and c["n"]]
            if missing:
                raise InputError(f"{location(cs[0], min(missing))}: missing id field "
                                 f"{self.ctx.id_field!r} (other records of this file have one)")

    def locate(self, i: int) -> str:
        """Where document ``i`` is, for messages."""
        ci = int(np.searchsorted(self.doc_starts, i, side="right") - 1)
        c = self.chunks[ci]
        loc = self.store.load_npy(f"prep/{c['key']}/loc.npy", mmap=True)[i - self.doc_starts[ci]]
        return location(c, int(loc))

    def exact(self) -> None:
        meta = self._stage_done("exact")
        st = self.store
        if meta is None:
            parts = max(1, math.ceil(self.N * 120 / self.plan.task_bytes))
            items = [(p, parts) for p in range(parts)]
            results = self._map("exact", tasks.task_exact, items)
            dups = [r["dup"] for r in results if r["dup"] is not None]
            if dups:
                g, m = min(dups)
                ids = gather_ids(self.ctx, np.array([g, m])).to_pylist()
                if ids[0] == ids[1]:
                    raise InputError(f"{self.locate(m)}: duplicate id {ids[0]!r} (first at "
                                     f"{self.locate(g)}); ids must be unique, or pass "
                                     f"--id-field none to generate them")

            def load(name):
                arrs = [st.load_npy(f"exact/{parts}/p{p:05d}/{name}.npy") for p in range(parts)]
                return np.concatenate(arrs) if len(arrs) > 1 else arrs[0]
            reps = load("reps")
            if parts > 1:
                reps = np.sort(reps)
            st.save_npy("exact/reps.npy", reps)
            members = load("members")
            member_rep = load("member_rep")
            if parts > 1:
                order = np.argsort(members, kind="stable")
                members, member_rep = members[order], member_rep[order]
                del order
            st.save_npy("exact/members.npy", members)
            st.save_npy("exact/member_rep.npy", member_rep)
            del members, member_rep
            meta = {"reps": int(reps.size), "units": parts}
            st.mark_done("stage/exact", meta, [f"exact/{n}.npy" for n in
                                               ("reps", "members", "member_rep")])
        self.reps = st.load_npy("exact/reps.npy")
        self.R = int(self.reps.size)

    def signature_blocks(self) -> list:
        cfg = self.cfg
        per_rep = cfg.num_perm * (cfg.signature_bits // 8) + cfg.bands * 8 * 2 + 16
        rows = max(256, self.plan.task_bytes // (3 * per_rep))
        blocks = []
        for ci in range(len(self.chunks)):
            lo = int(np.searchsorted(self.reps, self.doc_starts[ci]))
            hi = int(np.searchsorted(self.reps, self.doc_starts[ci + 1]))
            for r0 in range(lo, hi, rows):
                r1 = min(hi, r0 + rows)
                blocks.append({"key": f"r{r0:012d}", "chunk": ci, "r0": r0, "r1": r1})
        return blocks

    def signatures(self) -> None:
        self.blocks = self.signature_blocks()
        self.ctx.blocks = self.blocks
        self.ctx.block_starts = np.array([b["r0"] for b in self.blocks], dtype=np.int64)
        meta = self._stage_done("signatures")
        if meta is None:
            results = self._map("signatures", tasks.task_signatures, self.blocks)
            meta = {"shingles": int(sum(r["shingles"] for r in results)),
                    "units": len(self.blocks)}
            self.store.mark_done("stage/signatures", meta,
                                 units=[f"sig/{b['key']}" for b in self.blocks])
        self.shingles = meta["shingles"]

    def lsh_layout(self) -> tuple[int, int]:
        """(key partitions, bands per unit) that fit a task's share."""
        R, B = self.R, self.cfg.bands
        T = max(1, self.plan.kernel_threads)
        task = self.plan.task_bytes

        def need(g, parts):
            n = R / parts
            per_row = 8 + (8 if parts > 1 else 0) + 8 + 16
            return g * n * per_row + min(T, g) * n * 72

        parts = 1
        while need(1, parts) > task and parts < max(1, R):
            parts *= 2
        if self.ex.name != "none":
            parts = max(parts, self.ex.concurrency)
        g = 1
        while g < B and need(g + 1, parts) <= task:
            g += 1
        return parts, g

    def lsh(self) -> None:
        meta = self._stage_done("lsh")
        st = self.store
        if meta is None:
            parts, g = self.lsh_layout()
            B = self.cfg.bands
            layout = f"p{parts}g{g}"
            units = []
            for p in range(parts):
                for j0 in range(0, B, g):
                    units.append({"layout": layout, "index": len(units), "parts": parts,
                                  "part": p, "bands": list(range(j0, min(B, j0 + g)))})
            self._map("lsh", tasks.task_lsh, units)
            meta = {"units": len(units), "parts": parts, "bands_per_unit": g}
            if self.cfg.cluster == "greedy":
                off, members = concat_csr(
                    [(st.load_npy(f"lsh/{layout}/u{u['index']:05d}.off.npy"),
                      st.load_npy(f"lsh/{layout}/u{u['index']:05d}.members.npy"))
                     for u in units])
                if len(units) > 1:                   # one unit's are distinct already
                    off, members = distinct_buckets(off, members)
                st.save_npy("lsh/bucket_off.npy", off)
                st.save_npy("lsh/bucket_members.npy", members)
                meta.update(buckets=int(off.size - 1), bucket_entries=int(members.size))
                del off, members
                files = ["lsh/bucket_off.npy", "lsh/bucket_members.npy"]
            else:
                edges = [st.load_npy(f"lsh/{layout}/u{u['index']:05d}.npy") for u in units]
                if len(edges) == 1:
                    first = edges[0]                 # already sorted and unique
                else:
                    first = unique(np.concatenate(edges)) if edges else np.zeros(0, _U64)
                del edges
                st.save_npy("lsh/first_round.npy", first)
                meta["first_round"] = int(first.size)
                del first
                files = ["lsh/first_round.npy"]
            st.mark_done("stage/lsh", meta, files)
        self.lsh_meta = meta

    def _score_batches(self, edges: np.ndarray) -> list[np.ndarray]:
        cfg = self.cfg
        if cfg.similarity == "jaccard" and cfg.verify:
            per_doc = self.avg_text * 24 + 96
        else:
            per_doc = cfg.num_perm * (cfg.signature_bits // 8) * 2 + 32
        # at least 1,024 edges a batch (below that, per-task overhead dominates),
        # and a batch for each worker when there are several
        size = max(1024, int(self.plan.task_bytes // (4 * per_doc)))
        if self.ex.concurrency > 1:
            size = max(1024, min(size, -(-edges.size // self.ex.concurrency)))
        return [edges[s:s + size] for s in range(0, edges.size, size)]

    def _scorer(self, prefix: str, floor: float = 0.0):
        """``score(packed) -> float64``: the similarity of packed pairs of
        representative positions, in batches through the executor; on a disk
        store each batch is saved as it completes, and a rerun reuses it.
        Scores below ``floor`` need not be exact (only whether they reach it
        matters to the caller)."""
        st = self.store
        calls = [0]

        def score(packed):
            calls[0] += 1
            c = calls[0]
            batches = self._score_batches(packed)
            out = [None] * len(batches)
            todo = []
            for i, b in enumerate(batches):
                name = f"{prefix}/c{c:03d}/b{i:06d}"
                m = st.done(name)
                if m is not None and m.get("digest") == edges_digest(b):
                    out[i] = st.load_npy(f"{name}.npy")
                    self.reused["verify"] = self.reused.get("verify", 0) + 1
                else:
                    todo.append(i)
            self.units["verify"] = self.units.get("verify", 0) + len(batches)
            if todo:
                count = [0]

                def on_done(j, r):
                    i = todo[j]
                    if st.kind == "disk":       # saved as it completes: a rerun reuses it
                        name = f"{prefix}/c{c:03d}/b{i:06d}"
                        st.save_npy(f"{name}.npy", r)
                        st.mark_done(name, {"digest": edges_digest(batches[i])},
                                     [f"{name}.npy"])
                    out[i] = r
                    count[0] += 1
                    self._progress("verify", count[0], len(todo))

                self.ex.map(tasks.task_score,
                            [(batches[i], floor) if floor else batches[i] for i in todo],
                            self.ctx, on_done=on_done)
            if len(out) == 1:
                return out[0]
            return np.concatenate(out) if out else np.zeros(0, np.float64)

        score.calls = calls
        return score

    def verify(self) -> None:
        """Greedy selection over the buckets (scoring as it goes), or the
        verified edges of the components."""
        meta = self._stage_done("verify")
        if meta is None:
            if self.cfg.cluster == "greedy":
                meta = self._verify_greedy()
                names = ("accepted", "scores", "best", "rep_kept", "rep_dup", "rep_sim")
            else:
                meta = self._verify_components()
                names = ("accepted", "scores")
            self.store.mark_done("stage/verify", meta, [f"verify/{n}.npy" for n in names])
        self.verify_meta = meta

    def _verify_components(self) -> dict:
        cfg = self.cfg
        st = self.store
        first = st.load_npy("lsh/first_round.npy")
        score = self._scorer("verify")
        ia, ib = unpack_edges(first)
        self.ctx.sets = self._shared_sets(unique(np.concatenate([ia, ib])))
        del ia, ib
        keys = BandKeys(self.ctx, self.R, cfg.bands)
        er = verified_edges(first, keys, score, float(cfg.threshold), cfg.max_rounds,
                            accept_all=not cfg.verify)
        self.ctx.sets = None
        st.save_npy("verify/accepted.npy", er.accepted)
        st.save_npy("verify/scores.npy", er.scores)
        return {"candidates": er.candidates, "rounds": er.rounds, "skipped": 0,
                "unresolved": er.unresolved, "verified": int(er.accepted.size),
                "units": max(1, score.calls[0])}

    def _verify_greedy(self) -> dict:
        cfg = self.cfg
        st = self.store
        off = st.load_npy("lsh/bucket_off.npy")
        members = st.load_npy("lsh/bucket_members.npy")
        pos_of_rank, best = self._priority()
        st.save_npy("verify/best.npy", best)
        del best
        if pos_of_rank is not None:
            rank = np.empty(self.R, np.int64)
            rank[pos_of_rank] = np.arange(self.R, dtype=np.int64)
            members = rank[members]
            del rank
            # members ascending in rank inside each bucket
            bucket = np.repeat(np.arange(off.size - 1, dtype=np.int64), np.diff(off))
            members = members[np.lexsort((members, bucket))]
            del bucket
        self.ctx.sets = self._shared_sets(unique(members) if pos_of_rank is None
                                          else unique(pos_of_rank[members]))
        score = self._scorer("verify", float(cfg.threshold) if cfg.verify else 0.0)

        def score_ranks(packed):
            u, v = unpack_edges(packed)
            if pos_of_rank is not None:
                u, v = pos_of_rank[u], pos_of_rank[v]
            return score(pack_edges(np.minimum(u, v), np.maximum(u, v)))

        # the context's documents come first, distinct and kept already
        fixed = int(np.searchsorted(self.reps, self.C)) if self.C else 0
        sel = self.be.select(off, members, self.R, score_ranks, float(cfg.threshold),
                             cfg.bucket_limit, accept_all=not cfg.verify, fixed=fixed)
        self.ctx.sets = None
        del off, members
        kept, dup, sim = sel.kept, sel.duplicate_of, sel.similarity
        u, v = unpack_edges(sel.pairs)
        if pos_of_rank is not None:
            kept_p = np.empty_like(kept)
            kept_p[pos_of_rank] = kept
            dup_p = np.full(self.R, -1, np.int64)
            dup_p[pos_of_rank] = np.where(dup >= 0, pos_of_rank[np.maximum(dup, 0)], -1)
            sim_p = np.empty_like(sim)
            sim_p[pos_of_rank] = sim
            kept, dup, sim = kept_p, dup_p, sim_p
            u, v = pos_of_rank[u], pos_of_rank[v]
        pairs = pack_edges(np.minimum(u, v), np.maximum(u, v))
        order = np.argsort(pairs, kind="stable")
        st.save_npy("verify/accepted.npy", pairs[order])
        st.save_npy("verify/scores.npy", sel.pair_scores[order])
        st.save_npy("verify/rep_kept.npy", kept)
        st.save_npy("verify/rep_dup.npy", dup)
        st.save_npy("verify/rep_sim.npy", sim)
        # the rounds and the pairs actually scored depend on how the rule was
        # computed (passes on a CPU, rounds on a device): work, not results
        return {"candidates": sel.comparisons, "rounds": None, "skipped": sel.skipped,
                "unresolved": 0, "verified": int(pairs.size),
                "units": max(1, score.calls[0]), "selection": sel.where,
                "selection_rounds": sel.rounds, "selection_scored": sel.scored}

    def _priority(self):
        """Keep priority of the representatives: ``(pos_of_rank, best)``.

        ``pos_of_rank`` is None for ``keep="first"`` (priority is position);
        for ``"longest"`` it lists representative positions by the length of
        the longest document of their group of identical texts, then by that
        document's input index. ``best`` is that document: the one kept of
        the group when the group survives (the first, for ``"first"``)."""
        if self.cfg.keep != "longest":
            return None, self.reps.copy()
        st = self.store
        lengths = self._lengths()
        members = st.load_npy("exact/members.npy")
        group = np.concatenate([np.arange(self.R, dtype=np.int64),
                                np.searchsorted(self.reps, st.load_npy("exact/member_rep.npy"))])
        docs = np.concatenate([self.reps, members])
        del members
        length = lengths[docs].astype(np.int64)
        del lengths
        order = np.lexsort((docs, -length, group))
        head = np.ones(order.size, bool)
        head[1:] = group[order][1:] != group[order][:-1]
        best = docs[order[head]]
        best_len = length[order[head]]
        return np.lexsort((best, -best_len)).astype(np.int64), best

    def _lengths(self) -> np.ndarray:
        """Every document's length in code points (``keep="longest"``)."""
        return np.concatenate([self.store.load_npy(f"prep/{c['key']}/lengths.npy")
                               for c in self.chunks] or [np.zeros(0, np.int64)])

    def _shared_sets(self, positions: np.ndarray):
        """The shingle sets of the representatives at ``positions`` (sorted),
        built once, chunk by chunk, when this process's tasks can read them
        and they fit a quarter of the budget (about 12 bytes a text byte):
        every round's scoring then reads them instead of building sets
        again. None otherwise (tasks then build the sets of their own
        batch)."""
        cfg = self.cfg
        if (not self.ex.shared_memory or not positions.size
                or not (cfg.verify and cfg.similarity == "jaccard")):
            return None
        docs = self.reps[positions]
        if self.store.kind != "memory" and docs.size * self.avg_text * 12 > self.plan.budget / 4:
            return None
        word = cfg.shingle == "word"
        if len(self.chunks) == 1:      # the backend's own handle (a device may keep it)
            off, data = self.store.buffers(f"prep/{self.chunks[0]['key']}/text.arrow")
            sets = self.be.shingle_sets(off, data, word, cfg.ngram, docs)
        else:
            cut = np.searchsorted(docs, self.doc_starts)
            parts = []
            for ci, c in enumerate(self.chunks):
                d = docs[cut[ci]:cut[ci + 1]]
                if not d.size:
                    continue
                off, data = self.store.buffers(f"prep/{c['key']}/text.arrow")
                _, so, sv = self.be.shingle_sets(off, data, word, cfg.ngram,
                                                 d - int(self.doc_starts[ci]))
                parts.append((tasks.host(self.be, so), tasks.host(self.be, sv)))
                del off, data
            sets = (docs, *concat_csr(parts, np.uint64))
        row = np.full(self.N, -1, dtype=np.int64)
        row[docs] = np.arange(docs.size, dtype=np.int64)
        return sets, row
