"""``gpu-dedup semantic`` and :func:`semantic_deduplicate`: near-duplicates by
meaning, through the engine (:mod:`gpu_dedup.engine.semantic`).

The outputs are those of ``run``: clusters.parquet (``similarity`` is the
cosine to ``duplicate_of``), pairs.parquet, data/, report.json and
report.html, written by the same code into an output directory that follows
the same rules.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np

from ..errors import ConfigError

#: The default cosine threshold. With the bundled static embeddings, pairs
#: at 0.90 to 0.92 are often different texts that share a register (two
#: permissive licences by different authors), while pairs at 0.95 are
#: mostly versions of one text (README, "Semantic deduplication").
DEFAULT_THRESHOLD = 0.95
SEARCHES = ("auto", "exact", "kmeans")
KEEPS = ("first", "longest")
def check_options(threshold, search: str, keep: str, probe, n_clusters) -> None:
    """One line for the first bad option."""
    if not isinstance(threshold, (int, float)) or not 0 < float(threshold) <= 1:
        raise ConfigError(f"--threshold is a cosine in (0, 1], got {threshold!r}")
    if search not in SEARCHES:
        raise ConfigError(f"--search must be one of {', '.join(SEARCHES)}, got {search!r}")
    if keep not in KEEPS:
        raise ConfigError(f"--keep must be first or longest, got {keep!r}")
    if not isinstance(probe, int) or probe < 0:
        raise ConfigError(f"--probe must be 0 or more clusters, got {probe!r}")
    if n_clusters is not None and (not isinstance(n_clusters, int) or n_clusters < 1):
        raise ConfigError(f"--clusters must be 1 or more, got {n_clusters!r}")


@dataclass
class SemanticResult:
    """The outcome of :func:`semantic_deduplicate`, by document.

    Attributes:
        kept: bool per document.
        duplicate_of: int64, the kept document a removed one duplicates; -1
            when kept.
        similarity: float64, the cosine to it; NaN when kept.
        cluster: int64, the position of the cluster's kept document.
        pair_a, pair_b, pair_similarity: each removed document with each
            kept candidate it reaches the threshold with (``a < b``).
        stats: counts, the search, the model and seconds per stage.
    """

    kept: np.ndarray
    duplicate_of: np.ndarray
    similarity: np.ndarray
    cluster: np.ndarray
    pair_a: np.ndarray
    pair_b: np.ndarray
    pair_similarity: np.ndarray
    stats: dict = field(default_factory=dict)


#: The arrays of a :class:`SemanticResult`, as the outputs store them.
_FIELDS = ("kept", "duplicate_of", "similarity", "cluster", "pair_a", "pair_b",
           "pair_similarity")


def _job(model, threshold, search, keep, probe, n_clusters, seed, embedding_field=None):
    from ..engine.semantic import SemanticJob
    check_options(threshold, search, keep, probe, n_clusters)
    if embedding_field is not None:
        if model is not None:
            raise ConfigError("give --model or --embedding-field, not both")
        if not isinstance(embedding_field, str) or not embedding_field:
            raise ConfigError(f"--embedding-field must name a field, got {embedding_field!r}")
    return SemanticJob(model=None if model is None else os.path.abspath(str(model)),
                       threshold=float(threshold), search=search, keep=keep, probe=int(probe),
                       n_clusters=n_clusters, seed=int(seed), embedding_field=embedding_field)


def semantic_deduplicate(texts=None, *, embeddings=None, threshold: float = DEFAULT_THRESHOLD,
                         search: str = "auto", keep: str = "first", model=None, probe: int = 2,
                         n_clusters: int | None = None, seed: int = 0, backend=None,
                         memory_limit=None) -> SemanticResult:
    """Deduplicate ``texts`` (a string array or list) by meaning, or the rows
    of ``embeddings`` (an ``n x d`` matrix, or a list of lists, normalised
    here).

    A document is removed when its cosine to an already kept document (in
    keep priority: input order, or longest first) reaches ``threshold``; it
    names the most similar such document. ``search="exact"`` compares every
    pair; ``"kmeans"`` compares a document with the documents of its k-means
    cluster and of its ``probe`` nearest other clusters; ``"auto"`` takes
    exact search while it fits a time bound.

    Example:
        >>> r = semantic_deduplicate(embeddings=[[1, 0], [0.99, 0.1], [0, 1]],
        ...                          threshold=0.9)
        >>> r.kept.tolist(), r.duplicate_of.tolist()
        ([True, False, True], [-1, 0, -1])
    """
    job = _job(model, threshold, search, keep, probe, n_clusters, seed)
    if embeddings is not None:
        if texts is not None:
            raise ConfigError("give texts or embeddings, not both")
        if keep == "longest":
            raise ConfigError("keep='longest' needs the texts (their lengths)")
        return _from_embeddings(embeddings, job, backend)
    if texts is None:
        raise ConfigError("give texts or embeddings")
    from ..engine.semantic import MEMORY_PER_BYTE, SemanticRunner
    from ..shell import run_array

    def make(be, store, ex, plan):
        return SemanticRunner(job, be, store, ex, plan, id_field=None)
    r = run_array(texts, make, backend, memory_limit=memory_limit,
                  memory_per_byte=MEMORY_PER_BYTE)
    return SemanticResult(**{name: r.final(name) for name in _FIELDS}, stats=_stats(r))


def _from_embeddings(embeddings, job, backend) -> SemanticResult:
    from ..engine.semantic import outcome, resolve_search
    from ..semantic.search import semantic_select
    emb = _matrix(embeddings)
    xp = np if backend is None else backend.xp
    search = resolve_search(job.search, emb.shape[0], emb.shape[1],
                            "cpu" if backend is None else backend.name)
    sel = semantic_select(emb, job.threshold, None, search=search, n_clusters=job.n_clusters,
                          probe=job.probe, seed=job.seed, xp=xp)
    r = outcome(sel)
    return SemanticResult(**{name: r[name] for name in _FIELDS},
                          stats={"documents": int(emb.shape[0]),
                                 "removed": int((~r["kept"]).sum()), "search": search,
                                 "compared": int(sel.compared), "dim": int(emb.shape[1])})


def _matrix(embeddings) -> np.ndarray:
    """``embeddings`` as float32 rows of length 1, checked: a NumPy matrix
    here, a block of rows at a time (never a float64 copy of the whole),
    anything else by :func:`gpu_dedup.semantic.embed.embeddings_from_column`."""
    if not isinstance(embeddings, np.ndarray):
        from .embed import embeddings_from_column
        return embeddings_from_column(embeddings, "embeddings")
    if embeddings.ndim != 2 or embeddings.shape[1] == 0:
        raise ConfigError(f"embeddings must be a matrix of one row a document, got shape "
                          f"{embeddings.shape}")
    out = np.empty(embeddings.shape, np.float32)
    step = max(1, (16 << 20) // (8 * embeddings.shape[1]))
    for lo in range(0, embeddings.shape[0], step):
        e = np.asarray(embeddings[lo:lo + step], dtype=np.float64)
        finite = np.isfinite(e).all(axis=1)
        norm = np.sqrt((np.where(finite[:, None], e, 0) ** 2).sum(axis=1))
        bad = ~finite | (norm == 0)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ConfigError(f"embeddings row {lo + i}: " + (
                "a NaN or infinite value" if not finite[i] else "all zeros (no direction)"))
        out[lo:lo + e.shape[0]] = e / norm[:, None]
    return out


def _stats(runner) -> dict:
    m, e = runner.select_meta, runner.embed_meta
    return {"documents": runner.N, "kept": m["kept"], "removed": m["removed"],
            "search": m["search"], "compared": m["compared"],
            "screened_out": m["screened_out"], "pairs": m["pairs"],
            "model": e.get("model"), "dim": e.get("dim"),
            "seconds": dict(runner.timer.seconds)}


# -- the command: inputs in, an output directory out ------------------------------

class Semantic:
    """Semantic deduplication as a :class:`gpu_dedup.shell.Command`."""

    interpretable = False           # its encoder and search kernels have no stand-ins

    def __init__(self, job, *, text_field, id_field, on_bad_record, on_progress):
        from ..engine.semantic import CHUNK_SHARE, MEMORY_PER_BYTE
        self.job = job
        self.name = f"semantic-{job.search}-{job.threshold:g}-{job.keep}"
        self.chunk_share, self.memory_per_byte = CHUNK_SHARE, MEMORY_PER_BYTE
        self.text_field, self.id_field = text_field, id_field
        self.on_bad_record = on_bad_record
        self.on_progress = on_progress

    def key(self, paths: list) -> dict:
        from ..io.identity import input_identity
        return {"semantic": self.job.key(), "text_field": self.text_field,
                "id_field": self.id_field, "on_bad_record": self.on_bad_record,
                "inputs": input_identity(paths)}

    def runner(self, opened, s):
        from ..engine.semantic import SemanticRunner

        def progress(stage, done, total):
            if self.on_progress is not None and total:
                self.on_progress(stage, done / total)
        return SemanticRunner(self.job, opened.backend, s.store, s.executor, s.plan,
                              text_field=self.text_field, id_field=self.id_field,
                              on_bad_record=self.on_bad_record, monitor=s.monitor,
                              on_progress=progress)

    def write(self, runner, folder: str) -> dict:
        return runner.write(folder)

    def report(self, runner, written: dict, opened, s) -> dict:
        from ..shell import memory_report, work_report
        from ..version import __version__
        m, e, job = runner.select_meta, runner.embed_meta, self.job
        n = runner.N
        return {"command": "semantic", "version": __version__,
                "documents": {"in": n, "kept": m["kept"], "removed": m["removed"]},
                "threshold": job.threshold, "keep": job.keep,
                "model": {"name": e.get("model"), "dim": e.get("dim"),
                          "path": job.model, "embedding_field": job.embedding_field,
                          "embedded_on": (None if job.embedding_field
                                          else e.get("embedded_on") or "cpu")},
                "search": {"mode": m["search"], "requested": job.search,
                           "probe": job.probe if m["search"] == "kmeans" else None,
                           "kmeans_clusters": m["clusters_kmeans"],
                           "compared": m["compared"], "screened_out": m["screened_out"]},
                "pairs": m["pairs"], "removed_similarity": m["removed_similarity"],
                "shards": runner.shards(), "outputs": dict(written),
                "device": opened.device, "memory": memory_report(s),
                "work": {**work_report(runner, s), "scheduler": s.executor.describe()}}

    def html(self, runner, folder: str, report: dict) -> None:
        _html(runner, os.path.join(folder, "report.html"), report)


def run(inputs, output: str, *, threshold: float = DEFAULT_THRESHOLD, search: str = "auto",
        keep: str = "first", model=None, probe: int = 2, n_clusters: int | None = None,
        seed: int = 0, embedding_field: str | None = None, text_field: str = "text", id_field: str | None = "id",
        on_bad_record: str = "error", overwrite: bool = False, html: bool = True,
        device: str = "cpu", memory_limit=None, scheduler: str = "none", workers=None,
        work_dir=None, keep_work_dir: bool = False, partition_bytes=None,
        on_progress=None) -> dict:
    """``gpu-dedup semantic``: deduplicate ``inputs`` by meaning into
    ``output``; returns the report (also report.json). ``embedding_field``
    names the field of the records that holds their embeddings (JSONL,
    Parquet, Arrow), read instead of embedding the texts."""
    from ..shell import check_on_bad_record, open_files, run_files
    job = _job(model, threshold, search, keep, probe, n_clusters, seed, embedding_field)
    check_on_bad_record(on_bad_record)
    if job.model is not None:          # a model that cannot load fails before any work
        from ..engine.semantic import embedder_of
        embedder_of(job.model)
    opened = open_files(inputs, output, overwrite=overwrite, work_dir=work_dir,
                        memory_limit=memory_limit, scheduler=scheduler, device=device)
    command = Semantic(job, text_field=text_field, id_field=id_field,
                       on_bad_record=on_bad_record, on_progress=on_progress)
    return run_files(opened, command, workers=workers, work_dir=work_dir,
                     keep_work_dir=keep_work_dir, partition_bytes=partition_bytes, html=html)


#: Removed documents report.html examines for what ``run`` would keep.
SURVEYED = 5000


def _removed_pairs(runner, limit: int):
    """The first ``limit`` removed documents (document order) and the kept
    document each names, as ``(docs, duplicate_of, cosine)`` arrays."""
    docs, dups, sims = [], [], []
    got = 0
    for ci, r in runner.chunk_results(("kept", "duplicate_of", "similarity")):
        gone = np.flatnonzero(~r["kept"])[:limit - got]
        if gone.size:
            docs.append(gone + int(runner.doc_starts[ci]))
            dups.append(r["duplicate_of"][gone].astype(np.int64))
            sims.append(r["similarity"][gone].astype(np.float64))
            got += gone.size
        if got >= limit:
            break
    if not docs:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    return np.concatenate(docs), np.concatenate(dups), np.concatenate(sims)


def _gathered(texts, docs, dups):
    """The texts of ``docs`` and ``dups`` read once (``texts.take`` of their
    sorted distinct positions), and where each of the two falls in them."""
    both = np.concatenate([docs, dups])
    order, place = np.unique(both, return_inverse=True)
    return texts.take(order), place[:docs.size], place[docs.size:]


def _jaccard(arr, a, b, cfg) -> np.ndarray:
    from ..kernels.cpu import jaccard_edges
    from ..truth import shingle_sets
    off, vals = shingle_sets(arr, cfg.shingle, cfg.ngram, cfg.normalize)
    return jaccard_edges(off, vals, a.astype(np.int64), b.astype(np.int64))


def beyond_run(texts, docs, dups, config=None) -> np.ndarray:
    """The exact Jaccard, by ``run``'s shingles (its default configuration:
    character 5-grams after NFKC, lowercasing and whitespace folding), of
    each removed document ``docs[i]`` and the kept one it names
    ``dups[i]``: below ``run``'s threshold, ``run`` would not remove it for
    that pair. ``texts``: anything with ``take`` (an Arrow array, the
    stored texts)."""
    from ..config import Config
    if docs.size == 0:
        return np.zeros(0)
    return _jaccard(*_gathered(texts, docs, dups), config or Config())


def _html(runner, path: str, report: dict, examples: int = 20) -> None:
    """report.html: the counts, removed documents beside the one each names,
    and those among them that ``run`` would keep (:func:`beyond_run`)."""
    from ..config import Config
    from ..edge import clean_tree
    from ..html_page import esc, page, table_css, write_page
    report = clean_tree(report)
    d, s = report["documents"], report["search"]
    docs, dups, sims = _removed_pairs(runner, SURVEYED)
    run_cfg = Config()
    beyond_html = ex = ""
    if docs.size:
        arr, a, b = _gathered(runner.texts(), docs, dups)
        ex = "".join(f"<tr><td>{sims[i]:.4f}</td><td><pre>{esc(arr[a[i]].as_py()[:600])}</pre>"
                     f"</td><td><pre>{esc(arr[b[i]].as_py()[:600])}</pre></td></tr>"
                     for i in range(min(examples, docs.size)))
        jac = _jaccard(arr, a, b, run_cfg)
        below = np.flatnonzero(jac < float(run_cfg.threshold))
        # the lowest Jaccard first: what only meaning tells apart; each two texts once
        shown, rows = set(), []
        for i in below[np.argsort(jac[below], kind="stable")]:
            pair = (arr[a[i]].as_py(), arr[b[i]].as_py())
            if pair in shown:
                continue
            shown.add(pair)
            rows.append(f"<tr><td>{sims[i]:.4f}</td><td>{jac[i]:.3f}</td>"
                        f"<td><pre>{esc(pair[0][:600])}</pre></td>"
                        f"<td><pre>{esc(pair[1][:600])}</pre></td></tr>")
            if len(rows) == examples:
                break
        surveyed = (f"the first {docs.size:,} removed documents" if docs.size < d["removed"]
                    else f"all {docs.size:,} removed documents")
        beyond_html = (
            f"<h2 id=\"beyond-run\">What semantic search removes that <code>run</code> keeps</h2>"
            f"<p>Of {surveyed}, {below.size:,} ({100 * below.size / docs.size:.1f}%) have "
            f"an exact Jaccard below {float(run_cfg.threshold):g} with the kept document they "
            f"name, by <code>run</code>'s default shingles ({esc(run_cfg.shingle)} "
            f"{run_cfg.ngram}-grams after {esc(', '.join(run_cfg.normalize))}): "
            f"<code>run</code> would not remove them for that pair. The lowest first:</p>"
            f"<table><tr><th>cosine</th><th>Jaccard</th><th>removed</th><th>kept</th></tr>"
            f"{''.join(rows)}</table>")
    cos = math.nan if not report["removed_similarity"] else report["removed_similarity"]["min"]
    body = f"""
<h1>Semantic duplicates</h1>
<p>{d['in']:,} documents: kept {d['kept']:,}, removed {d['removed']:,} at cosine
&ge; {report['threshold']:g} ({esc(report['model']['name'] or '')}, {report['model']['dim']}
dimensions; {s['mode']} search, {s['compared']:,} pairs compared exactly). The lowest cosine of a
removed document to the one it names: {cos:.4f}.</p>
<h2>Removed documents and the kept one each duplicates</h2>
<table><tr><th>cosine</th><th>removed</th><th>kept</th></tr>{ex}</table>
{beyond_html}"""
    write_page(path, page("gpu-dedup semantic", body, table_css(50)))
