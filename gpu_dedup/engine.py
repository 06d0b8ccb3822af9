"""The deduplication engine over one Arrow string array.

``deduplicate`` runs the stages in order:
normalize -> exact fingerprints -> signatures -> band keys -> candidate
edges -> verification -> connected components -> kept documents.
It knows nothing of files; :mod:`gpu_dedup.pipeline` adds reading and writing.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from .arrays import distinct_count, unique
from .backend import get_backend
from .config import Config
from .params import approx_threshold, collision_probability
from .stages.components import choose_kept, cluster_ids
from .stages.exact import exact_representatives
from .stages.lsh import pack_edges, unpack_edges, verified_edges
from .stages.normalize import normalize_text, text_buffers
from .stages.signatures import signatures
from .timing import StageTimer


@dataclass
class DedupResult:
    """What a run found, per document (in input order) and per edge.

    Attributes:
        cluster: int64, the smallest input index of the document's cluster.
        kept: bool, exactly one ``True`` per cluster.
        pair_a, pair_b: int64 input indices of accepted edges (``a < b``).
        pair_similarity: float64, the value that accepted each edge.
        pair_exact: bool, whether the edge joined identical normalized texts.
        stats: counts (documents, candidates, verified edges, removals...).
        seconds: seconds per stage.
        config: the resolved configuration.
    """

    cluster: np.ndarray
    kept: np.ndarray
    pair_a: np.ndarray
    pair_b: np.ndarray
    pair_similarity: np.ndarray
    pair_exact: np.ndarray
    stats: dict
    seconds: dict
    config: Config
    backend: str = "cpu"
    extra: dict = field(default_factory=dict)


def _as_array(texts) -> pa.Array:
    if isinstance(texts, pa.ChunkedArray):
        return texts.combine_chunks()
    if isinstance(texts, pa.Array):
        return texts
    return pa.array(list(texts), type=pa.large_string())


def deduplicate(texts, config: Config | None = None, backend=None,
                timer: StageTimer | None = None, lengths=None) -> DedupResult:
    """Cluster near-duplicate texts.

    Args:
        texts: an Arrow string array (or a list of str) with no nulls.
        config: the run's :class:`Config` (defaults if None).
        backend: a backend from :func:`gpu_dedup.backend.get_backend` (CPU if None).
        timer: a :class:`StageTimer` to record seconds per stage.
        lengths: per-document lengths for ``keep="longest"`` (code points of
            the raw text if None).

    Returns:
        A :class:`DedupResult`.
    """
    cfg = (config or Config()).resolved()
    be = backend if backend is not None else get_backend("cpu")[0]
    timer = timer or StageTimer()
    texts = _as_array(texts)
    if texts.null_count:
        raise ValueError("texts must not contain nulls")
    n = len(texts)
    word = cfg.shingle == "word"

    with timer("normalize"):
        norm = normalize_text(texts, cfg.normalize)
        offsets, data = text_buffers(norm)
        active = be.to_host(be.has_shingles(offsets, data, word))

    with timer("exact"):
        if cfg.exact:
            rep = exact_representatives(be.to_host(be.text_hash128(offsets, data)), active)
        else:
            rep = np.where(active, np.arange(n, dtype=np.int64), -1)
        fuzzy_docs = np.flatnonzero(rep == np.arange(n)).astype(np.int64)
        exact_members = np.flatnonzero((rep >= 0) & (rep != np.arange(n)))

    with timer("signatures"):
        sig, counts = signatures(be, offsets, data, fuzzy_docs, cfg)

    with timer("lsh"):
        keys = be.band_keys(sig, cfg.bands, cfg.rows)
        first_round = be.to_host(be.bucket_edges(keys))
        keys_host = be.to_host(keys)

    sets = None
    if cfg.verify and cfg.similarity == "jaccard" and first_round.size:
        # Every later round joins documents that were already in the first
        # round, so their shingle sets are built once.
        ia, ib = unpack_edges(first_round)
        involved = fuzzy_docs[unique(np.concatenate([ia, ib]))]
        with timer("verify"):
            sets = be.shingle_sets(offsets, data, word, cfg.ngram, involved)

    def score(packed):
        ia, ib = unpack_edges(packed)
        if sets is not None:
            return be.to_host(be.jaccard_sets(sets, fuzzy_docs[ia], fuzzy_docs[ib]))
        return be.to_host(be.signature_agreement(sig, ia, ib))

    with timer("verify"):
        er = verified_edges(first_round, keys_host, score, float(cfg.threshold),
                            cfg.max_rounds, accept_all=not cfg.verify)
        fa, fb = unpack_edges(er.accepted)
        fa = fuzzy_docs[fa]
        fb = fuzzy_docs[fb]

    with timer("components"):
        ea = np.concatenate([rep[exact_members], fa])
        eb = np.concatenate([exact_members, fb])
        sim = np.concatenate([np.ones(exact_members.size), er.scores])
        is_exact = np.concatenate([np.ones(exact_members.size, dtype=bool),
                                   np.zeros(fa.size, dtype=bool)])
        lo = np.minimum(ea, eb)
        hi = np.maximum(ea, eb)
        order = np.argsort(pack_edges(lo, hi), kind="stable")
        ea, eb, sim, is_exact = lo[order], hi[order], sim[order], is_exact[order]
        labels = be.to_host(be.components(n, ea, eb))
        cluster = cluster_ids(labels)
        if cfg.keep == "longest":
            if lengths is None:
                raw_off, raw_data = text_buffers(texts)
                lengths = be.to_host(be.codepoint_lengths(raw_off, raw_data))
        kept = choose_kept(cluster, lengths if lengths is not None else np.zeros(n), cfg.keep)

    n_kept = int(kept.sum())
    removed = n - n_kept
    exact_removed = int(exact_members.size)
    stats = {
        "documents": n,
        "documents_without_shingles": int(n - active.sum()),
        "kept": n_kept,
        "removed": removed,
        "exact_removed": exact_removed,
        "fuzzy_removed": removed - exact_removed,
        "clusters": n_kept,                     # one kept document per cluster
        "duplicate_clusters": distinct_count(cluster[~kept]),
        "exact_edges": exact_removed,
        "candidate_edges": er.candidates,
        "first_round_candidates": int(first_round.size),
        "verified_edges": int(er.accepted.size),
        "rounds": er.rounds,
        "unresolved_edges": er.unresolved,
        "shingles": int(be.to_host(counts).sum()) if counts.size else 0,
    }
    peak = getattr(be, "peak_device_bytes", None)
    if callable(peak):
        stats["device_peak_bytes"] = peak()
    return DedupResult(cluster, kept, ea, eb, sim, is_exact, stats, dict(timer.seconds),
                       cfg, be.name)


def scurve_summary(cfg: Config) -> dict:
    """The parameters' S-curve: approximate threshold and a few probabilities."""
    c = cfg.resolved()
    sims = [0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95]
    return {
        "bands": c.bands, "rows": c.rows,
        "approx_threshold": approx_threshold(c.bands, c.rows),
        "collision_probability": {f"{s:g}": float(collision_probability(s, c.bands, c.rows))
                                  for s in sims},
        "at_threshold": float(collision_probability(float(c.threshold), c.bands, c.rows)),
    }
