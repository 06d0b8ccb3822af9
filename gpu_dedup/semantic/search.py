"""Which documents semantic deduplication keeps: greedy selection by cosine
similarity of embeddings.

The rule is the greedy one of the MinHash selection. Documents are walked in
keep priority (``order[0]`` first). A document ``v`` is removed if and only
if some document ``u`` that is already kept and is a *candidate* of ``v``
has exact cosine ``cos(u, v) >= threshold``; it then names the candidate
kept document of highest exact cosine (``duplicate_of``, ties to the one
earlier in priority). Otherwise it is kept. Every removal is thus justified
by a pair of documents, and no two kept candidates are similar.

The *exact cosine* is :func:`gpu_dedup.kernels.semantic.pair_cosines`: a
``float64`` sum in index order, the same on every machine. Decisions use it
alone. Matrix products (``float32``, on the array namespace ``xp``: NumPy on
the host, CuPy on a GPU) only *screen* the pairs: a pair whose product is
below ``threshold - MARGIN`` is not scored, every other one is. The
``float32`` product of two rows of norm at most 1 in ``d`` dimensions errs
by at most about ``d * 2**-24`` (in any summation order, which BLAS and
cuBLAS choose), 2.4e-4 for ``d = 4096``; ``MARGIN`` is four times that, so
the screen never drops a pair at or above the threshold and results do not
depend on the library or device doing the products (larger ``d`` widens the
margin in proportion, :func:`screen_margin`). CuPy's TF32 mode
(``CUPY_TF32``), which rounds the inputs to 10 bits, is refused.

Candidates: with ``search="exact"`` every document earlier in priority is a
candidate. With ``search="kmeans"`` each document has a spherical k-means
cluster (``labels``) and a probe set: its own cluster and the ``probe``
nearest other centroids; ``u`` is a candidate of ``v`` when ``u``'s cluster
is in ``v``'s probe set.

The work is blocked: documents are taken in priority order, ``block`` at a
time. The kept documents are held, per cluster, in one preallocated matrix
on ``xp`` (each cluster's region is as large as the cluster). A block's
documents are first written after the kept rows of their own cluster; for
each cluster, the block's documents whose probe set holds it are screened
against those rows in one product (split into column slices to stay under
``max_bytes``), pairs inside the block counting only from an earlier to a
later document. The screened pairs are scored exactly and the block decided
in order by :func:`gpu_dedup.kernels.semantic.decide_block`; its kept
documents then stay in their regions. Cost is ``O(n * kept * d)`` (a
fraction of it with k-means), never an ``n x n`` matrix.
"""
from __future__ import annotations

import math
import numbers
import os
from dataclasses import dataclass

import numpy as np

from ..arrays import stable_order, to_host
from ..errors import ConfigError
from ..kernels.semantic import cluster_sums, decide_block, pair_cosines

#: Screening margin on the ``float32`` product (see the module docstring):
#: at least four times the worst rounding error of a ``float32`` dot product
#: of unit vectors with ``d <= 4096`` (typical errors are near 1e-6).
MARGIN = 1e-3
SEARCHES = ("exact", "kmeans")
#: The most clusters the default number of clusters gives.
MAX_CLUSTERS = 4096
#: Rows per cluster the k-means++ seeds are drawn from (Lloyd's iterations
#: then run on the whole sample).
SEED_ROWS_PER_CLUSTER = 32
#: Rows per host product in k-means (bounded further by the cluster count).
_HOST_BYTES = 64 << 20


@dataclass
class SemanticSelection:
    """The outcome of a selection, by document index.

    Attributes:
        kept: ``bool`` per document.
        duplicate_of: the kept document each removed one names; -1 when kept.
        similarity: exact cosine to ``duplicate_of``; NaN when kept.
        pair_a: the removed document of each listed pair.
        pair_b: a kept candidate of it at exact cosine ``>= threshold``.
        pair_similarity: the pair's exact cosine.
        labels: k-means cluster per document (``search="kmeans"``), else None.
        compared: pairs whose exact cosine was computed.
        screened_out: candidate pairs the product screen discarded.
    """

    kept: np.ndarray
    duplicate_of: np.ndarray
    similarity: np.ndarray
    pair_a: np.ndarray
    pair_b: np.ndarray
    pair_similarity: np.ndarray
    labels: np.ndarray | None
    compared: int
    screened_out: int


# -- arguments ------------------------------------------------------------------

def _check_int(name: str, value, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ConfigError(f"{name} must be an integer >= {low}; got {value!r}")
    return int(value)


def _check_threshold(threshold) -> float:
    if (isinstance(threshold, bool) or not isinstance(threshold, numbers.Real)
            or not 0.0 < float(threshold) <= 1.0):
        raise ConfigError(f"threshold must be a cosine in (0, 1], such as 0.9; got {threshold!r}")
    return float(threshold)


def _check_emb(emb) -> np.ndarray:
    if not isinstance(emb, np.ndarray) or emb.ndim != 2 or emb.shape[1] < 1:
        shape = getattr(emb, "shape", None)
        raise ConfigError(f"emb must be a NumPy matrix of shape (n, d) with d >= 1; got shape "
                          f"{shape}: pass one embedding per row")
    if emb.dtype != np.float32:
        raise ConfigError(f"emb must be float32; got {emb.dtype}: convert it with "
                          "emb.astype(np.float32)")
    emb = np.ascontiguousarray(emb)
    if not np.isfinite(emb).all():
        raise ConfigError("emb holds NaN or infinite values: drop or re-embed those rows")
    if emb.shape[0] and float(np.einsum("ij,ij->i", emb, emb).max()) > 1.002:
        raise ConfigError("emb rows must be L2-normalised (norm <= 1): divide each row by its "
                          "norm")
    return emb


def _check_order(order, n: int) -> np.ndarray:
    if order is None:
        return np.arange(n, dtype=np.int64)
    order = np.asarray(order)
    if (order.ndim != 1 or order.shape[0] != n or (n and order.dtype.kind not in "iu")
            or (n and (order.min() < 0 or order.max() >= n))
            or (n and not (np.bincount(order, minlength=n) == 1).all())):
        raise ConfigError(f"order must be a permutation of 0..{n - 1} (keep priority, first "
                          "kept first); pass None for input order")
    return order.astype(np.int64)


def screen_margin(d: int) -> float:
    """The screening margin for ``d`` dimensions: :data:`MARGIN`, widened in
    proportion to ``d`` beyond 4096 dimensions."""
    return max(MARGIN, d * 2.0 ** -22)


def default_clusters(n: int) -> int:
    """The default number of k-means clusters for ``n`` documents:
    ``round(sqrt(n))``, at least 1 and at most :data:`MAX_CLUSTERS`."""
    return min(MAX_CLUSTERS, max(1, round(math.sqrt(n))))


# -- k-means --------------------------------------------------------------------

def _similarities(x: np.ndarray, c32: np.ndarray, lo: int, hi: int) -> np.ndarray:
    return x[lo:hi] @ c32.T


def nearest_centroid(x: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """The centroid of highest ``float32`` similarity to each row of ``x``
    (ties to the lower index), on the host."""
    c32 = centroids.astype(np.float32)
    out = np.empty(x.shape[0], np.int64)
    step = max(1, _HOST_BYTES // (4 * c32.shape[0]))
    for lo in range(0, x.shape[0], step):
        hi = min(x.shape[0], lo + step)
        out[lo:hi] = _similarities(x, c32, lo, hi).argmax(axis=1)
    return out


def _unit(v: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(v, axis=-1, keepdims=True)
    return np.divide(v, norm, out=np.zeros_like(v), where=norm > 0)


def _plus_plus(x: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k-means++ seeds, drawn from at most ``SEED_ROWS_PER_CLUSTER * k``
    rows of ``x``: each next seed with probability proportional to
    ``1 - cos`` to its nearest seed (half the squared distance)."""
    m = x.shape[0]
    if m > SEED_ROWS_PER_CLUSTER * k:
        x = x[np.sort(rng.choice(m, SEED_ROWS_PER_CLUSTER * k, replace=False))]
        m = x.shape[0]
    centroids = np.empty((k, x.shape[1]), np.float64)
    best = np.full(m, -np.inf, np.float32)
    pick = int(rng.integers(m))
    for i in range(k):
        if i:
            cum = np.cumsum(np.maximum(1.0 - best.astype(np.float64), 0.0))
            if cum[-1] > 0:
                pick = min(m - 1, int(np.searchsorted(cum, rng.random() * cum[-1], side="right")))
            else:
                pick = int(rng.integers(m))
        centroids[i] = _unit(x[pick].astype(np.float64))
        np.maximum(best, x @ centroids[i].astype(np.float32), out=best)
    return centroids


def _means(x: np.ndarray, labels: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """Normalised ``float64`` means of the clusters; an empty cluster keeps
    its centroid."""
    sums = cluster_sums(x, labels, centroids.shape[0])
    norm = np.linalg.norm(sums, axis=1)
    ok = norm > 0
    out = centroids.copy()
    out[ok] = sums[ok] / norm[ok, None]
    return out


def kmeans(emb, n_clusters, *, seed=0, sample=100_000, iters=20):
    """Spherical k-means on the host, deterministic for a seed.

    Lloyd's algorithm on a sample of at most ``sample`` rows (drawn with
    ``numpy.random.default_rng(seed)``, which also draws the k-means++
    seeds), at most ``iters`` iterations (fewer when the assignment stops
    changing), centroids normalised after each step; then every row is
    labelled with its nearest centroid (:func:`nearest_centroid`).

    Args:
        emb: ``(n, d)`` ``float32`` matrix of unit rows, ``n >= 1``.
        n_clusters: clusters wanted; at most ``n`` are made.
        seed: seed of the sample and the initial centroids.
        sample: most rows the centroids are fitted on.
        iters: most Lloyd iterations.

    Returns:
        ``(centroids, labels)``: ``float64`` unit centroids, ``(k, d)``, and
        the ``int64`` label of every row.
    """
    emb = _check_emb(emb)
    n = emb.shape[0]
    if n == 0:
        raise ConfigError("kmeans needs at least one row in emb")
    k = min(_check_int("n_clusters", n_clusters, 1), n)
    sample = _check_int("sample", sample, 1)
    iters = _check_int("iters", iters, 0)
    rng = np.random.default_rng(_check_int("seed", seed, 0))
    x = emb if n <= sample else emb[np.sort(rng.choice(n, sample, replace=False))]
    centroids = _plus_plus(x, k, rng)
    labels = None
    for _ in range(iters):
        new = nearest_centroid(x, centroids)
        if labels is not None and np.array_equal(new, labels):
            break
        labels = new
        centroids = _means(x, labels, centroids)
    return centroids, nearest_centroid(emb, centroids)


def probe_sets(emb, centroids, labels, probe) -> np.ndarray:
    """Each row's own cluster and the ``probe`` nearest other centroids.

    Similarities are ``float32`` products on the host, nearest first, ties
    to the lower index; ``probe`` is capped at ``k - 1``.

    Returns:
        ``(n, 1 + min(probe, k - 1))`` ``int64``; column 0 is ``labels``.
    """
    emb = _check_emb(emb)
    centroids = np.asarray(centroids, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.int64)
    k = centroids.shape[0]
    if centroids.ndim != 2 or centroids.shape[1] != emb.shape[1] or k < 1:
        raise ConfigError("centroids must be a (k, d) matrix with the d of emb; pass kmeans' "
                          "centroids")
    if labels.shape != (emb.shape[0],) or (labels.size and (labels.min() < 0 or labels.max() >= k)):
        raise ConfigError(f"labels must hold one cluster in 0..{k - 1} per row of emb; pass "
                          "kmeans' labels")
    p = min(_check_int("probe", probe, 0), k - 1)
    out = np.empty((emb.shape[0], 1 + p), np.int64)
    out[:, 0] = labels
    c32 = centroids.astype(np.float32)
    step = max(1, _HOST_BYTES // (4 * k))
    for lo in range(0, emb.shape[0], step):
        hi = min(emb.shape[0], lo + step)
        s = _similarities(emb, c32, lo, hi)
        rows = np.arange(hi - lo)
        s[rows, labels[lo:hi]] = -np.inf
        for q in range(p):
            a = s.argmax(axis=1)
            out[lo:hi, 1 + q] = a
            s[rows, a] = -np.inf
    return out


# -- the selection --------------------------------------------------------------

def _groups(keys: np.ndarray, k: int):
    """``(perm, first)``: the positions of ``keys`` grouped by key (stable)
    and where each key's group starts in ``perm`` (``k + 1`` entries)."""
    first = np.zeros(k + 1, np.int64)
    np.cumsum(np.bincount(keys, minlength=k), out=first[1:])
    return stable_order(keys), first


class _Blocked:
    """The state of one blocked selection: the kept rows of each cluster in
    their region of ``rows`` (on ``xp``) and, on the host, which document
    each filled row holds."""

    def __init__(self, emb, labels, k, xp, max_bytes, threshold):
        n, d = emb.shape
        self.labels, self.k, self.xp = labels, k, xp
        self.max_bytes, self.threshold = max_bytes, threshold
        self.screen = np.float32(threshold - screen_margin(d))
        self.region = np.zeros(k + 1, np.int64)
        np.cumsum(np.bincount(labels, minlength=k), out=self.region[1:])
        self.kcount = np.zeros(k, np.int64)
        self.rows = xp.empty((n, d), dtype=xp.float32)
        self.pos = xp.empty(n, dtype=xp.int64)        # block position, -1 for kept rows
        self.row_doc = np.empty(n, np.int64)
        self.row_local = np.empty(n, np.int64)
        self.products = 0

    def place(self, ids, local, bx, pos):
        """Write documents ``ids[local]`` (grouped by cluster, in priority
        order within one) after the kept rows of their clusters."""
        lab = self.labels[ids[local]]
        count = np.bincount(lab, minlength=self.k)
        first = np.cumsum(count) - count
        dest = self.region[lab] + self.kcount[lab] + (np.arange(lab.shape[0]) - first[lab])
        xp = self.xp
        dest_x = xp.asarray(dest)
        self.rows[dest_x] = bx[xp.asarray(local)]
        self.pos[dest_x] = xp.asarray(pos)
        self.row_doc[dest] = ids[local]
        self.row_local[dest] = pos
        return count

    def screen_block(self, bx, sets, members, mfirst, mcount):
        """Screened pairs of the block: ``(position in block, row)``.

        ``sets`` are the probe sets of the block's documents, ``members``
        their positions grouped by cluster (``mfirst``: where each cluster
        starts), ``mcount`` how many each cluster has; those have been
        :meth:`place`-d."""
        xp = self.xp
        w = sets.shape[1]
        porder, pfirst = _groups(sets.ravel(), self.k)
        probers_all = porder // w
        px = xp.asarray(probers_all)
        hits = _Hits(xp, max(1, self.max_bytes // 4))
        for c in np.flatnonzero(np.diff(pfirst)):
            kc = int(self.kcount[c])
            ncol = kc + int(mcount[c])
            if ncol == 0:
                continue
            probers = probers_all[pfirst[c]:pfirst[c + 1]]
            own = members[mfirst[c]:mfirst[c + 1]]
            self.products += probers.shape[0] * kc + int(np.searchsorted(own, probers).sum())
            pj = px[pfirst[c]:pfirst[c + 1]]
            block_rows = bx[pj]
            later = pj[:, None]
            step = max(1, self.max_bytes // (4 * probers.shape[0]))
            base = int(self.region[c])
            for a in range(0, ncol, step):
                b = min(ncol, a + step)
                s = xp.matmul(block_rows, self.rows[base + a:base + b].T)
                mask = s >= self.screen
                if b > kc:
                    f = max(a, kc)
                    mask[:, f - a:] &= self.pos[base + f:base + b][None, :] < later
                hits.add(mask, pj, base + a)
        return hits.result()


class _Hits:
    """The true entries of screening masks, found with one ``nonzero`` per
    batch of masks (of at most about ``limit`` entries) instead of one per
    product: on a GPU each ``nonzero`` waits for the device."""

    def __init__(self, xp, limit):
        self.xp, self.limit = xp, limit
        self.masks, self.probers, self.meta = [], [], []
        self.pending = 0
        self.j, self.r = [], []

    def add(self, mask, probers, row0):
        """Mask ``(len(probers), width)``: entry ``(i, q)`` pairs document
        ``probers[i]`` of the block with row ``row0 + q``."""
        self.masks.append(mask.ravel())
        self.probers.append(probers)
        self.meta.append((mask.shape[0], mask.shape[1], row0))
        self.pending += mask.size
        if self.pending >= self.limit:
            self.flush()

    def flush(self):
        if not self.masks:
            return
        xp = self.xp
        flat = self.masks[0] if len(self.masks) == 1 else xp.concatenate(self.masks)
        (idx,) = xp.nonzero(flat)
        height, width, row0 = (np.array(x, np.int64) for x in zip(*self.meta))
        size = height * width
        start = xp.asarray(np.cumsum(size) - size)
        item = xp.searchsorted(start, idx, side="right") - 1
        at = idx - start[item]
        wid = xp.asarray(width)[item]
        r = at // wid
        probers = self.probers[0] if len(self.probers) == 1 else xp.concatenate(self.probers)
        self.j.append(probers[xp.asarray(np.cumsum(height) - height)[item] + r])
        self.r.append(xp.asarray(row0)[item] + (at - r * wid))
        self.masks, self.probers, self.meta = [], [], []
        self.pending = 0

    def result(self):
        """``(position in block, row)`` of every true entry, on the host."""
        self.flush()
        if not self.j:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        xp = self.xp
        return (to_host(xp.concatenate(self.j)).astype(np.int64),
                to_host(xp.concatenate(self.r)).astype(np.int64))


def _select_blocked(emb, threshold, order, labels, sets, k, block, xp, max_bytes):
    """The blocked selection over clusters ``labels`` and probe sets ``sets``
    (one cluster and ``sets`` all zero for exact search)."""
    n = emb.shape[0]
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n)
    state = _Blocked(emb, labels, k, xp, max_bytes, threshold)
    kept = np.zeros(n, bool)
    dup = np.full(n, -1, np.int64)
    sim = np.full(n, np.nan)
    pairs_a, pairs_b, pairs_s = [], [], []
    compared = 0
    for lo in range(0, n, block):
        ids = order[lo:lo + block]
        nb = ids.shape[0]
        bx = xp.asarray(emb[ids])
        members, mfirst = _groups(labels[ids], k)
        mcount = state.place(ids, members, bx, members)
        j, r = state.screen_block(bx, sets[ids], members, mfirst, mcount)
        v = ids[j]
        u = state.row_doc[r]
        score = pair_cosines(emb, v, u)
        compared += score.shape[0]
        kb, best, listed = decide_block(nb, j, state.row_local[r], rank[u], score, threshold)
        kept[ids] = kb
        gone = np.flatnonzero(~kb)
        dup[ids[gone]] = u[best[gone]]
        sim[ids[gone]] = score[best[gone]]
        pairs_a.append(v[listed])
        pairs_b.append(u[listed])
        pairs_s.append(score[listed])
        stay = members[kb[members]]
        state.kcount += state.place(ids, stay, bx, np.full(stay.shape[0], -1, np.int64))
    a = np.concatenate(pairs_a) if pairs_a else np.empty(0, np.int64)
    b = np.concatenate(pairs_b) if pairs_b else np.empty(0, np.int64)
    s = np.concatenate(pairs_s) if pairs_s else np.empty(0, np.float64)
    o = np.lexsort((rank[b], rank[a]))
    return kept, dup, sim, a[o], b[o], s[o], compared, state.products - compared


def semantic_select(emb, threshold: float, order=None, *, search: str = "exact",
                    n_clusters: int | None = None, probe: int = 2, block: int = 2048,
                    seed: int = 0, xp=None, max_bytes: int = 256 << 20, sample: int = 100_000,
                    iters: int = 20) -> SemanticSelection:
    """Greedy semantic selection (the rule of the module docstring).

    Args:
        emb: ``(n, d)`` ``float32`` host matrix of L2-normalised rows.
        threshold: cosine in ``(0, 1]``; a pair at or above it is similar.
        order: keep priority, a permutation of ``0..n-1``; None: input order.
        search: ``"exact"`` (every earlier document is a candidate) or
            ``"kmeans"`` (documents of the probed clusters).
        n_clusters: k-means clusters; None: :func:`default_clusters`.
        probe: other clusters probed per document (k-means).
        block: documents decided per block.
        seed: k-means seed.
        xp: array namespace of the products (NumPy or CuPy); None: NumPy.
        max_bytes: largest screening matrix of one product.
        sample: rows the k-means centroids are fitted on.
        iters: most k-means iterations.

    Returns:
        The :class:`SemanticSelection`.

    Raises:
        ConfigError: an argument is out of range.
    """
    threshold = _check_threshold(threshold)
    if search not in SEARCHES:
        raise ConfigError(f"search must be 'exact' or 'kmeans'; got {search!r}")
    emb = _check_emb(emb)
    n = emb.shape[0]
    order = _check_order(order, n)
    block = _check_int("block", block, 1)
    probe = _check_int("probe", probe, 0)
    max_bytes = _check_int("max_bytes", max_bytes, 1)
    if n_clusters is not None:
        _check_int("n_clusters", n_clusters, 1)
    xp = np if xp is None else xp
    if xp is not np and os.environ.get("CUPY_TF32", "0") not in ("", "0"):
        raise ConfigError("CUPY_TF32 is set: TF32 products are too coarse for the screen; "
                          "unset CUPY_TF32")
    if search == "exact" or n == 0:
        labels = np.zeros(n, np.int64)
        sets = np.zeros((n, 1), np.int64)
        k = 1
    else:
        k = default_clusters(n) if n_clusters is None else n_clusters
        centroids, labels = kmeans(emb, k, seed=seed, sample=sample, iters=iters)
        k = centroids.shape[0]
        sets = probe_sets(emb, centroids, labels, probe)
    with _blas_threads(1 if xp is np and k > 1 else None):
        kept, dup, sim, a, b, s, compared, screened_out = _select_blocked(
            emb, threshold, order, labels, sets, k, block, xp, max_bytes)
    return SemanticSelection(kept, dup, sim, a, b, s, labels if search == "kmeans" else None,
                             int(compared), int(screened_out))


def _blas_threads(limit):
    """A context in which the host BLAS uses at most ``limit`` threads (None:
    as it is). k-means search multiplies many small matrices, one a cluster:
    threads started for each cost more than they bring. Without
    ``threadpoolctl``, nothing changes (the results never depend on it)."""
    import contextlib
    if limit is None:
        return contextlib.nullcontext()
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(limits=limit, user_api="blas")


def reference_select(emb, threshold, order=None, labels=None, probe_sets=None):
    """The rule straight from its definition, for tests: ``O(n^2)`` time.

    Each document is scored against every kept candidate before it with a
    sequential ``float64`` sum over the dimensions, as
    :func:`gpu_dedup.kernels.semantic.pair_cosines` computes it.

    Args:
        emb: ``(n, d)`` ``float32`` matrix of unit rows.
        threshold: cosine in ``(0, 1]``.
        order: keep priority; None: input order.
        labels: cluster per document; None: every earlier document is a
            candidate.
        probe_sets: with ``labels``, the clusters probed by each document
            (:func:`probe_sets`).
    """
    threshold = _check_threshold(threshold)
    emb = _check_emb(emb)
    n, d = emb.shape
    order = _check_order(order, n)
    if (labels is None) != (probe_sets is None):
        raise ConfigError("pass labels and probe_sets together, or neither for exact search")
    e = emb.astype(np.float64)
    kept = np.zeros(n, bool)
    dup = np.full(n, -1, np.int64)
    sim = np.full(n, np.nan)
    klist = np.empty(n, np.int64)
    nk = 0
    pa, pb, ps = [], [], []
    compared = 0
    for v in order.tolist():
        cand = klist[:nk]
        if labels is not None:
            cand = cand[np.isin(labels[cand], probe_sets[v])]
        rows = e[cand]
        s = np.zeros(cand.shape[0])
        for t in range(d):
            s += rows[:, t] * e[v, t]
        compared += cand.shape[0]
        hit = s >= threshold
        if hit.any():
            i = int(np.argmax(np.where(hit, s, -np.inf)))
            dup[v] = cand[i]
            sim[v] = s[i]
            pa.extend([v] * int(hit.sum()))
            pb.extend(cand[hit].tolist())
            ps.extend(s[hit].tolist())
        else:
            kept[v] = True
            klist[nk] = v
            nk += 1
    return SemanticSelection(kept, dup, sim, np.array(pa, np.int64), np.array(pb, np.int64),
                             np.array(ps, np.float64),
                             None if labels is None else np.asarray(labels, np.int64),
                             compared, 0)
