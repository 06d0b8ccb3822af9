"""``gpu-dedup doctor``: what the GPU backend finds, and whether its kernels
give the CPU kernels' bits.

It prints the device, driver and package versions and the implementation of
each stage, then runs the GPU backend and the CPU backend on a generated
corpus with planted near-duplicates (character and word shingles, 32- and
64-bit signatures) and compares every output bit for bit: shingle presence,
fingerprints, code point counts, normalization, exact grouping, signatures,
shingle counts, band keys, bucket edges (of key matrices and of key
segments), shingle sets, Jaccard values, signature agreement, greedy
selection, connected components, exact substrings, and the clusters, kept
flags and pairs of whole runs. The last line is the verdict.

Under ``NUMBA_ENABLE_CUDASIM=1`` the CUDA kernels run in Numba's simulator,
on host arrays, over a smaller corpus; the backend's array code then runs
with NumPy instead of CuPy.

First of all it checks the CPU path itself against the plain-Python reference
(:func:`check_cpu`): a machine without a GPU passes when that path is healthy,
and is told what the GPU backend is missing.
"""
from __future__ import annotations

import importlib.metadata as md
import platform
import sys
import time

import numpy as np

from .arrays import unique

#: Distributions whose versions are reported, by the name shown.
PACKAGES = {
    "CuPy": ("cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x", "cupy"),
    "numba-cuda": ("numba-cuda",),
    "cuDF": ("cudf-cu13", "cudf-cu12", "cudf"),
    "cuGraph": ("cugraph-cu13", "cugraph-cu12", "cugraph"),
    "Dask-CUDA": ("dask-cuda",),
}

_VOCAB = ("the a of and to in is was for on that with as by it from at this be are "
          "near duplicate text corpus model data train token shingle hash band bucket "
          "café naïve résumé über straße façade jalapeño smörgåsbord "
          "日本語 文書 重複 検出 데이터 중복 текст данные κείμενο δεδομένα "
          "😀 🚀 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ∑ ≈ ½").split()


def distribution_version(names) -> str | None:
    for name in names:
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            continue
    return None


def planted_texts(n_docs: int, seed: int = 0, max_words: int = 80,
                  long_docs: bool = True) -> list[str]:
    """``n_docs`` texts (three more with ``long_docs``): random documents over
    a mixed-script vocabulary, each followed by 0-3 near-duplicates (words
    replaced, dropped, case or spacing changed), plus exact copies, empty,
    blank and very short texts, and optionally a few long ones."""
    rng = np.random.default_rng(seed)
    vocab = np.array(_VOCAB, dtype=object)
    texts: list[str] = ["", " ", "\t\n", "a", "ab", "日本", "😀", "a b", "ab cd ef gh ij"]
    while len(texts) < n_docs:
        words = list(rng.choice(vocab, size=int(rng.integers(1, max_words))))
        texts.append(" ".join(words))
        for _ in range(int(rng.integers(0, 4))):
            w = list(words)
            for _ in range(int(rng.integers(0, 1 + len(w) // 8))):
                op = rng.random()
                i = int(rng.integers(len(w)))
                if op < 0.5:
                    w[i] = str(rng.choice(vocab))
                elif op < 0.7 and len(w) > 1:
                    del w[i]
                elif op < 0.85:
                    w[i] = w[i].upper()
                else:
                    w[i] = w[i] + "  "
            texts.append(" ".join(w))
        if rng.random() < 0.1:
            texts.append(texts[int(rng.integers(len(texts)))])
    texts = texts[:n_docs]
    if not long_docs:
        return texts
    long_doc = " ".join(rng.choice(vocab, size=400))
    texts += [long_doc, long_doc.replace("the", "THE", 3), "x" * 1500 + " y"]
    return texts


def malformed_buffers(offsets: np.ndarray, data: np.ndarray):
    """``offsets, data`` with documents appended whose bytes are not
    well-formed UTF-8 (truncated and stray sequences): the kernels must agree
    on those too."""
    extra = [b"ab\xf0cd\x80ef\xc3", b"\x80\x80x y", b"caf\xc3", b"\xe6\x97 \xa5 z",
             b"ok \xf0\x9f\x98 w\xf0"]
    body = data[int(offsets[0]):int(offsets[-1])]
    new_off = [np.asarray(offsets, dtype=np.int64) - int(offsets[0])]
    pos = int(new_off[0][-1])
    tail = []
    for e in extra:
        pos += len(e)
        tail.append(pos)
    raw = np.concatenate([body, np.frombuffer(b"".join(extra), dtype=np.uint8)])
    return np.concatenate([new_off[0], np.array(tail, dtype=np.int64)]), raw


def _same(x, y) -> bool:
    x = np.asarray(x)
    y = np.asarray(y)
    if x.shape != y.shape or x.dtype != y.dtype:
        return False
    if x.dtype.kind == "f":
        return bool(np.array_equal(x.view(f"u{x.dtype.itemsize}"),
                                   y.view(f"u{y.dtype.itemsize}")))
    return bool(np.array_equal(x, y))


class Comparison:
    """Named bit-for-bit comparisons, collected."""

    def __init__(self, echo=None):
        self.rows: list[tuple[str, bool, str]] = []
        self.echo = echo

    def check(self, name: str, gpu, cpu, detail: str = "") -> bool:
        ok = _same(gpu, cpu)
        if not ok:
            g, c = np.asarray(gpu), np.asarray(cpu)
            if g.shape == c.shape and g.dtype == c.dtype:
                diff = int(np.count_nonzero(g != c))
                detail = f"{detail}; {diff:,} of {g.size:,} values differ"
            else:
                detail = (f"{detail}; shape/dtype {g.shape} {g.dtype} vs CPU {c.shape} {c.dtype}")
        self.add(name, ok, detail)
        return ok

    def add(self, name: str, ok: bool, detail: str = "") -> None:
        self.rows.append((name, ok, detail))
        if self.echo is not None:
            self.echo(f"  {'ok  ' if ok else 'DIFF'} {name}{': ' + detail if detail else ''}")

    @property
    def identical(self) -> bool:
        return bool(self.rows) and all(ok for _, ok, _ in self.rows)


def compare_kernels(gpu, cpu, offsets, data, shingle: str, n: int, num_perm: int, bits: int,
                    bands: int, rows: int, seed: int, cmp: Comparison) -> None:
    """Run every backend stage on the same buffers with both backends."""
    from .stages.signatures import hash_params
    word = shingle == "word"
    tag = f"{shingle}{n} {bits}-bit K={num_perm}"
    h = gpu.to_host
    N = offsets.shape[0] - 1
    docs = np.arange(N, dtype=np.int64)
    a, b = hash_params(num_perm, seed)
    gs, gc = gpu.minhash(offsets, data, docs, word, n, a, b, bits)
    cs, cc = cpu.minhash(offsets, data, docs, word, n, a, b, bits)
    cmp.check(f"{tag}: signatures", h(gs), cs, f"{N} x {num_perm}")
    cmp.check(f"{tag}: shingle counts", h(gc), cc)
    gk = gpu.band_keys(gs, bands, rows)
    ck = cpu.band_keys(cs, bands, rows)
    cmp.check(f"{tag}: band keys", h(gk), ck, f"{bands} bands x {rows} rows")
    active = cpu.has_shingles(offsets, data, word)
    ge = h(gpu.bucket_edges(gk, active))
    ce = cpu.bucket_edges(ck, active)
    cmp.check(f"{tag}: bucket edges", ge, ce, f"{ce.size:,} anchor edges")
    rng = np.random.default_rng(seed)
    extra = rng.integers(0, N, size=(2, 64)) if N else np.zeros((2, 0), dtype=np.int64)
    ia = np.concatenate([(ce >> np.uint64(32)).astype(np.int64), extra[0]])
    ib = np.concatenate([(ce & np.uint64(0xFFFFFFFF)).astype(np.int64), extra[1]])
    involved = unique(np.concatenate([ia, ib]))
    gsets = gpu.shingle_sets(offsets, data, word, n, involved)
    csets = cpu.shingle_sets(offsets, data, word, n, involved)
    cmp.check(f"{tag}: shingle sets", np.concatenate([h(gsets[1]), h(gsets[2]).view(np.int64)]),
              np.concatenate([csets[1], csets[2].view(np.int64)]),
              f"{involved.size:,} documents, {csets[2].size:,} distinct shingles")
    cmp.check(f"{tag}: bound rows", gpu.bound_rows(offsets, data, word, n, involved),
              cpu.bound_rows(offsets, data, word, n, involved), f"{involved.size:,} documents")
    cmp.check(f"{tag}: Jaccard", h(gpu.jaccard_sets(gsets, ia, ib)),
              cpu.jaccard_sets(csets, ia, ib), f"{ia.size:,} edges")
    cmp.check(f"{tag}: Jaccard (one call)", h(gpu.jaccard(offsets, data, word, n, ia, ib)),
              cpu.jaccard(offsets, data, word, n, ia, ib))
    cmp.check(f"{tag}: signature agreement", h(gpu.signature_agreement(gs, ia, ib)),
              cpu.signature_agreement(cs, ia, ib))


def compare_segment_edges(gpu, cpu, cmp: Comparison, seed: int = 0, keys_per_segment: int = 2000,
                          segments: int = 6) -> None:
    """Bucket edges of key segments (bands, or key partitions of bands), with
    implicit and with explicit document positions, on both backends."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(0, keys_per_segment, size=segments)
    sizes[segments // 2] = 0                           # an empty segment
    seg = np.zeros(segments + 1, dtype=np.int64)
    np.cumsum(sizes, out=seg[1:])
    total = int(seg[-1])
    buckets = max(total // 16, 1)
    keys = rng.integers(0, buckets, size=total).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    docs = np.concatenate([np.sort(rng.choice(4 * keys_per_segment, size=int(z), replace=False))
                           for z in sizes]).astype(np.int64)
    for label, d in (("positions", np.zeros(0, dtype=np.int64)), ("documents", docs)):
        want = cpu.segment_bucket_edges(keys, d, seg)
        cmp.check(f"segment bucket edges ({label})",
                  gpu.to_host(gpu.segment_bucket_edges(keys, d, seg)), want,
                  f"{segments} segments, {total:,} keys, {want.size:,} edges")


def compare_grouping_selection(gpu, cpu, cmp: Comparison, seed: int = 0, n: int = 3000) -> None:
    """Exact grouping, greedy selection (crowded buckets, ranks kept
    already, verification off) and connected components on both backends;
    the selection must have run on the device."""
    rng = np.random.default_rng(seed)
    pool = rng.integers(0, 2 ** 63, size=(n // 4, 2), dtype=np.uint64)
    fp = pool[rng.integers(0, pool.shape[0], size=n)]
    active = rng.random(n) > 0.05
    cmp.check("exact grouping", gpu.to_host(gpu.exact_representatives(fp, active)),
              cpu.exact_representatives(fp, active), f"{n:,} fingerprints")
    # buckets of ranks: many small, a few crowded; scores from a hash of the pair
    sizes = np.where(rng.random(n // 3) < 0.02, rng.integers(40, 120, n // 3),
                     rng.integers(1, 6, n // 3))
    members = [np.sort(rng.choice(n, size=int(z), replace=False)) for z in sizes]
    off = np.zeros(len(members) + 1, dtype=np.int64)
    np.cumsum([m.size for m in members], out=off[1:])
    members = np.concatenate(members).astype(np.int64)

    def score(packed):
        x = packed * np.uint64(0x9E3779B97F4A7C15)
        return ((x ^ (x >> np.uint64(29))) >> np.uint64(11)).astype(np.float64) / float(1 << 53)
    for label, kw in (("threshold 0.5, limit 4", {"threshold": 0.5, "limit": 4}),
                      ("threshold 0.8, limit 32, 200 kept already",
                       {"threshold": 0.8, "limit": 32, "fixed": 200}),
                      ("no verification, limit 2", {"threshold": 0.5, "limit": 2,
                                                    "accept_all": True})):
        g = gpu.select(off, members, n, score, **kw)
        c = cpu.select(off, members, n, score, **kw)
        same = g.same_as(c)
        detail = (f"{int((~c.kept).sum()):,} of {n:,} removed, {c.pairs.size:,} pairs, "
                  f"{g.rounds} rounds; ran on: {g.where}")
        cmp.add(f"greedy selection ({label})", same and g.where == "device", detail)
    ea = rng.integers(0, n, size=n)
    eb = rng.integers(0, n, size=n)
    from .stages.components import cluster_ids
    cmp.check("components", cluster_ids(gpu.to_host(gpu.components(n, ea, eb))),
              cluster_ids(cpu.components(n, ea, eb)), f"{n:,} nodes, {n:,} edges")


def compare_runs(gpu, cpu, texts, cfg, cmp: Comparison, label: str,
                 expect: str | None = None) -> None:
    """Whole runs of the engine with both backends: every result array, and
    (with ``expect``) the name of the backend that actually ran."""
    from .pipeline import deduplicate
    rg = deduplicate(texts, cfg, gpu)
    rc = deduplicate(texts, cfg, cpu)
    detail = (f"{len(texts):,} documents, {int(rc.stats['removed']):,} removed, "
              f"{rc.pair_a.size:,} pairs")
    ok = all(_same(getattr(rg, f), getattr(rc, f))
             for f in ("cluster", "kept", "pair_a", "pair_b", "pair_similarity", "pair_exact"))
    if expect is not None and rg.backend != expect:
        ok = False
        detail += f"; ran on {rg.backend!r}, not {expect!r}"
    cmp.add(f"run {label}: clusters, kept, pairs, similarities ({rg.backend} vs {rc.backend})",
            ok, detail)


def compare_substr(gpu, cpu, texts, cmp: Comparison) -> None:
    """Exact-substring kernels (unit hashes, window hashes, the device sort)
    and whole runs, both units."""
    import pyarrow as pa

    from .kernels import substr as K
    from .stages.normalize import text_buffers
    from .substr import exact_substrings
    arr = pa.array(texts, pa.large_string())
    off, data = text_buffers(arr)
    off, data = np.asarray(off, np.int64), np.asarray(data)
    h = gpu.to_host
    cmp.check("substr: string hashes", h(gpu.string_hashes(off, data, 1)),
              cpu.string_hashes(off, data, 1))
    u_off = K.units(off, data, True)[0]
    uh = cpu.string_hashes(off, data, 0)[np.arange(int(u_off[-1])) % max(1, off.size - 1)]
    gh, gs = gpu.substr_windows(uh, u_off, 4)
    ch, cs = cpu.substr_windows(uh, u_off, 4)
    cmp.check("substr: window hashes", np.stack([h(gh), h(gs).view(np.uint64)]),
              np.stack([ch, cs.view(np.uint64)]), f"{ch.size:,} windows")
    cmp.check("substr: stable sort", h(gpu.stable_argsort(ch)), cpu.stable_argsort(ch))
    for unit, L in (("word", 8), ("char", 40)):
        g = exact_substrings(arr, unit, L, backend=gpu, partition_bytes="64KiB")
        c = exact_substrings(arr, unit, L, backend=cpu, partition_bytes="64KiB")
        cmp.check(f"substr run ({unit}, L={L})",
                  np.concatenate([g.removed_units, g.span_start, g.span_end, g.span_first_doc]),
                  np.concatenate([c.removed_units, c.span_start, c.span_end, c.span_first_doc]),
                  f"{int(c.removed_units.sum()):,} {unit}s removed")


def check_cpu(cpu, cmp: Comparison, n_docs: int = 40, seed: int = 5) -> None:
    """The CPU backend against the plain-Python reference
    (:mod:`gpu_dedup.reference`) on a small planted corpus, raw text:
    signatures, band keys, bucket edges and Jaccard values bit for bit; then a
    whole run, in which identical texts (not blank) share a cluster and every
    removed document names a kept one."""
    import pyarrow as pa

    from . import reference as ref
    from .config import Config
    from .pipeline import deduplicate
    from .stages.normalize import text_buffers
    from .stages.signatures import hash_params
    texts = planted_texts(n_docs, seed=seed, max_words=20, long_docs=False)
    off, data = text_buffers(pa.array(texts, pa.large_string()))
    off, data = np.asarray(off, np.int64), np.asarray(data)
    N, K, bands, rows = len(texts), 16, 8, 2
    docs = np.arange(N, dtype=np.int64)
    a, b = hash_params(K, seed)
    for shingle, n in (("char", 5), ("word", 3)):
        word = shingle == "word"
        hashes = [ref.base_hashes(t, shingle, n) for t in texts]
        for bits in (32, 64):
            tag = f"CPU {shingle}{n} {bits}-bit K={K}"
            sig, _ = cpu.minhash(off, data, docs, word, n, a, b, bits)
            want = np.array([ref.signature(h, a, b, bits) for h in hashes], dtype=sig.dtype)
            cmp.check(f"{tag}: signatures as the reference", sig, want, f"{N} documents")
        keys = cpu.band_keys(sig, bands, rows)
        want = np.array([[ref.band_key(sig[i, j * rows:(j + 1) * rows].tolist(), j)
                          for j in range(bands)] for i in range(N)], dtype=np.uint64)
        cmp.check(f"{tag}: band keys as the reference", keys, want)
        active = np.array([bool(h) for h in hashes])
        edges = cpu.bucket_edges(keys, active)
        got = {(int(e >> np.uint64(32)), int(e & np.uint64(0xFFFFFFFF))) for e in edges}
        ok = got == ref.anchor_edges([keys[:, j].tolist() for j in range(bands)],
                                     active.tolist())
        cmp.add(f"{tag}: bucket edges as the reference", ok, f"{len(got):,} edges")
        ia = np.repeat(docs, 3)
        ib = (ia + np.tile(np.arange(1, 4), N)) % N
        want = np.array([ref.jaccard(hashes[i], hashes[j]) for i, j in zip(ia, ib)])
        cmp.check(f"{tag}: Jaccard as the reference",
                  np.asarray(cpu.jaccard(off, data, word, n, ia, ib), np.float64), want,
                  f"{ia.size:,} pairs")
    r = deduplicate(texts, Config(num_perm=K, threshold=0.6), cpu)
    first: dict = {}
    same = all(r.cluster[first.setdefault(t, i)] == r.cluster[i]
               for i, t in enumerate(texts) if t.strip())    # a blank text is nobody's copy
    gone = np.flatnonzero(~np.asarray(r.kept))
    named = bool(np.all(np.asarray(r.kept)[np.asarray(r.duplicate_of)[gone]]))
    cmp.add("CPU run: identical texts share a cluster, each removed one names a kept one",
            same and named, f"{N} documents, {gone.size} removed")


def environment_lines(simulated: bool) -> tuple[list[str], bool, str]:
    """Lines about the machine, and ``(usable, why)`` from the GPU probe."""
    import numba

    from .backend_gpu import probe
    lines = [f"python {platform.python_version()}, numpy {np.__version__}, "
             f"numba {numba.__version__}"]
    ok, why = probe()
    if ok:
        lines.append(f"GPU: {why}")
    else:
        lines.append(f"GPU: none usable ({why})")
    for label, names in PACKAGES.items():
        v = distribution_version(names)
        if v is None and label == "numba-cuda":
            lines.append("numba-cuda: not installed (Numba's built-in CUDA target)")
        else:
            lines.append(f"{label}: {v or 'not installed'}")
    return lines, ok, why


def _start_errors() -> tuple[type[BaseException], ...]:
    """What a GPU backend that cannot start raises: a package that does not
    import, a driver or runtime error (CuPy's are RuntimeErrors, Numba's
    its own), a library that does not load, a device that is too small."""
    from .errors import DedupError
    errors: list[type[BaseException]] = [ImportError, OSError, RuntimeError, DedupError]
    try:
        from numba.cuda.cudadrv.error import CudaDriverError, CudaRuntimeError
    except ImportError:
        return tuple(errors)
    return (*errors, CudaDriverError, CudaRuntimeError)


def main(echo, n_docs: int | None = None) -> int:
    """Print the report; return 0 when the CPU path matches the reference and
    the GPU (or the simulator), if any, matches the CPU in every comparison;
    0 too without a GPU, saying what is missing; 2 when the CPU path is
    broken, or a GPU does not start or differs."""
    from .backend import CpuBackend
    from .backend_gpu import GpuBackend, simulator_enabled
    from .config import Config
    from .stages.normalize import normalize_text, text_buffers
    import pyarrow as pa

    simulated = simulator_enabled()
    echo("gpu-dedup doctor")
    lines, usable, why = environment_lines(simulated)
    for line in lines:
        echo(f"  {line}")
    cpu = CpuBackend()
    echo("the CPU path against the plain-Python reference:")
    ref_cmp = Comparison(echo)
    check_cpu(cpu, ref_cmp)
    if not ref_cmp.identical:
        bad = sum(1 for _, ok, _ in ref_cmp.rows if not ok)
        echo(f"verdict: CPU path BROKEN: {bad} of {len(ref_cmp.rows)} comparisons with the "
             f"reference differ")
        return 2
    if not usable and not simulated:
        echo(f"verdict: CPU path healthy ({len(ref_cmp.rows)} comparisons with the reference); "
             f"no GPU compared: none usable ({why}); the CPU path needs none. "
             "NUMBA_ENABLE_CUDASIM=1 gpu-dedup doctor checks the CUDA kernels in Numba's "
             "simulator")
        return 0
    t_start = time.perf_counter()
    try:
        if simulated:
            sys.setswitchinterval(2e-4)     # the simulator's threads hand over the GIL often
            gpu = GpuBackend(xp=np)
        else:
            gpu = GpuBackend()
    except _start_errors() as exc:
        echo(f"verdict: nothing compared: the GPU backend does not start ({exc})")
        return 2
    info = gpu.describe()
    echo("stages on this machine:")
    for key, where in info["stages"].items():
        echo(f"  {key}: {where}")
    for key in ("signatures", "grouping"):
        echo(f"  ({key}: {info[key]})")
    if simulated:
        echo("mode: Numba CUDA simulator (NUMBA_ENABLE_CUDASIM=1): the CUDA kernels run as "
             "Python on the host, with NumPy in place of CuPy")
        echo("  not compared here: CuPy on a device, cuDF grouping, cuGraph components, "
             "device memory and speed")
    # the simulator runs a few hundred bytes a second: a small corpus, whose
    # documents still span several of its 16-shingle chunks
    n_docs = n_docs or (32 if simulated else 400)
    texts = pa.array(planted_texts(n_docs, seed=7, max_words=10 if simulated else 80,
                                   long_docs=not simulated), pa.large_string())
    norm = normalize_text(texts, ("nfkc", "lower", "ws"))
    offsets, data = malformed_buffers(*text_buffers(norm))
    N = offsets.shape[0] - 1
    echo(f"corpus: {len(texts):,} generated documents with planted near-duplicates, "
         f"{N - len(texts)} more with malformed UTF-8 ({int(offsets[-1]):,} bytes)")
    cmp = Comparison(echo)
    h = gpu.to_host
    for steps in (("nfkc", "lower", "ws"), ("lower", "punct", "digits", "ws")):
        raw = pa.array(planted_texts(n_docs, seed=3, max_words=10 if simulated else 80)
                       + ["naïve café «x»", "日本語", "TABS\tand  spaces 123"], pa.large_string())
        got, on_host = gpu.normalize_counted(raw, steps)
        cmp.check(f"normalization ({','.join(steps)})", np.frombuffer(got.buffers()[2], np.uint8),
                  np.frombuffer(cpu.normalize(raw, steps).buffers()[2], np.uint8),
                  f"{len(raw) - on_host} documents on the device, {on_host} on the host")
    for word in (False, True):
        mode = "word" if word else "char"
        cmp.check(f"has_shingles ({mode})", h(gpu.has_shingles(offsets, data, word)),
                  cpu.has_shingles(offsets, data, word), f"{N} documents")
    cmp.check("text_hash128", h(gpu.text_hash128(offsets, data)), cpu.text_hash128(offsets, data))
    cmp.check("codepoint_lengths", h(gpu.codepoint_lengths(offsets, data)),
              cpu.codepoint_lengths(offsets, data))
    compare_substr(gpu, cpu, texts, cmp)
    K = 20 if simulated else 128
    for shingle, n in (("char", 5), ("word", 3)):
        for bits in (32, 64):
            compare_kernels(gpu, cpu, offsets, data, shingle, n, K, bits, bands=K // 4 if
                            simulated else 16, rows=4 if simulated else 8, seed=42, cmp=cmp)
    compare_segment_edges(gpu, cpu, cmp, keys_per_segment=300 if simulated else 200_000)
    compare_grouping_selection(gpu, cpu, cmp, n=600 if simulated else 200_000)
    for shingle, n, bits, sim in (("char", 5, 32, "jaccard"), ("word", 3, 64, "jaccard"),
                                  ("char", 4, 64, "signature")):
        cfg = Config(shingle=shingle, ngram=n, num_perm=K, signature_bits=bits, similarity=sim,
                     threshold=0.6, keep="longest")
        compare_runs(gpu, cpu, texts, cfg, cmp, f"{shingle}{n} {bits}-bit {sim}",
                     expect="cuda-sim" if simulated else "gpu")
    seconds = time.perf_counter() - t_start
    where = "the CUDA kernels in Numba's simulator" if simulated else f"the GPU ({why})"
    if cmp.identical:
        echo(f"verdict: identical: {where} matched the CPU bit for bit in {len(cmp.rows)} "
             f"comparisons ({seconds:.0f}s)")
        return 0
    bad = sum(1 for _, ok, _ in cmp.rows if not ok)
    echo(f"verdict: DIFFERENT: {bad} of {len(cmp.rows)} comparisons between {where} and the CPU "
         f"differ")
    return 2
