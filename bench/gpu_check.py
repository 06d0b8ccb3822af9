#!/usr/bin/env python
"""GPU check: bit-identity and throughput of the GPU backend on one device.

Runs on a single GPU with CuPy, numba-cuda, NumPy, pyarrow and pandas (cuDF
and cuGraph are used when present, never required) and the project on
PYTHONPATH, in well under 8 minutes, and prints one Markdown table:

* warm-up: compiles every CUDA kernel and compares the GPU and CPU backends
  on a small corpus (the doctor's checks);
* bit-identity with the CPU backend on 100,000 documents: signatures, band
  keys, bucket edges, shingle sets, Jaccard values and whole runs (clusters,
  kept flags, pairs, similarities);
* signature-stage throughput on device-resident text: about a million
  documents of ~2 KB, K = 128, character 5-grams, 32-bit (and 64-bit)
  signatures, in GB/s of text and documents/s (median of 3, after warm-up);
* band keys and bucket collisions on those signatures, and the host-to-device
  copy bandwidth, as ceilings to read the figures against;
* the device's memory bandwidth (a device-to-device copy), a ceiling beside
  the host-to-device copy;
* end to end (``deduplicate``) from an Arrow table in host memory: 1 KB
  documents with planted near-duplicates, with and without the default
  normalization, with each stage's GB/s of text;
* out of core from disk: ``gpu-dedup run``'s engine over a JSONL file of 10
  million ~200-byte documents under a host budget that puts the run on the
  work directory, documents/s with the disk included;
* the peak device memory held by CuPy's allocator.

Every figure comes with what it measured. A section that fails prints its
error in the table and the others still run; sections are skipped when the
time budget (``--budget``) runs out. With ``$OUT`` set, the table is also
written to ``$OUT/gpu_check.md`` (and the figures to ``$OUT/gpu_check.json``).

``--simulate`` runs every section at toy sizes with the CUDA kernels in
Numba's simulator and NumPy in place of CuPy (no GPU needed): the figures
are then meaningless, but every code path of the script runs.

Examples:
    PYTHONPATH=. python bench/gpu_check.py
    PYTHONPATH=. python bench/gpu_check.py --quick
    python bench/gpu_check.py --simulate
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import statistics
import sys
import time
import traceback
from functools import partial

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="gpu_check.py",
        description=__doc__.split("\n\n")[0] + " Prints one table; see the module docstring.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Sizes default to the full check; --quick divides them by about 5.")
    p.add_argument("--quick", action="store_true", help="smaller sizes (about 1 minute)")
    p.add_argument("--simulate", action="store_true",
                   help="toy sizes in Numba's CUDA simulator with NumPy (no GPU needed)")
    p.add_argument("--identity-docs", type=int, default=None,
                   help="documents for the bit-identity check (default 100,000)")
    p.add_argument("--throughput-docs", type=int, default=None,
                   help="~2 KB documents for the signature throughput (default 1,000,000)")
    p.add_argument("--e2e-docs", type=int, default=None,
                   help="1 KB documents for the end-to-end run (default 1,000,000)")
    p.add_argument("--repeats", type=int, default=3, help="timed repeats (median reported)")
    p.add_argument("--budget", type=float, default=420.0,
                   help="seconds after which remaining sections are skipped (default 420)")
    p.add_argument("--out", default=None,
                   help="folder for gpu_check.md and gpu_check.json (default: $OUT if set)")
    return p.parse_args(argv)


class Table:
    def __init__(self):
        self.rows: list[tuple[str, str, str, str]] = []
        self.figures: dict = {}

    def add(self, check, result, figure="", detail=""):
        self.rows.append((str(check), str(result), str(figure), str(detail)))
        print(f"  {check}: {result} {figure} {detail}".rstrip(), file=sys.stderr, flush=True)

    def markdown(self, title):
        out = [title, "", "| check | result | figure | detail |", "|---|---|---|---|"]
        for r in self.rows:
            out.append("| " + " | ".join(c.replace("|", "/") for c in r) + " |")
        return "\n".join(out)


def _gb(x):
    return f"{x / 1e9:.2f} GB"


def _rate(n, s):
    if s <= 0:
        return "n/a"
    r = n / s
    return f"{r / 1e6:.2f} M" if r >= 1e6 else f"{r / 1e3:.1f} k"


def _sync(xp):
    if xp.__name__ == "cupy":
        xp.cuda.Device().synchronize()


def _timed(fn, xp, repeats):
    times = []
    result = None
    for _ in range(max(1, repeats)):
        _sync(xp)
        t = time.perf_counter()
        result = fn()
        _sync(xp)
        times.append(time.perf_counter() - t)
    return statistics.median(times), result


def device_text(xp, n_docs, mean_len, seed=0):
    """Random lowercase words (about one space in six bytes), documents of
    ``mean_len`` +- 25% bytes, generated where ``xp`` allocates."""
    import numpy as np
    rng = np.random.default_rng(seed)
    lens = rng.integers(int(mean_len * 0.75), int(mean_len * 1.25) + 1, size=n_docs)
    offsets = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    total = int(offsets[-1])
    alphabet = xp.asarray(np.frombuffer(b"abcdefghijklmnopqrstuvwxyz     ", dtype=np.uint8))
    data = xp.empty(total, dtype=xp.uint8)
    step = 1 << 28
    for lo in range(0, total, step):
        hi = min(total, lo + step)
        if xp.__name__ == "cupy":
            idx = xp.random.randint(0, alphabet.shape[0], size=hi - lo, dtype=xp.int32)
        else:
            idx = rng.integers(0, alphabet.shape[0], size=hi - lo)
        data[lo:hi] = alphabet[idx]
    return xp.asarray(offsets), data


def host_corpus(n_docs, doc_len=1024, dup_rate=0.1, seed=1):
    """An Arrow ``large_string`` array of ``n_docs`` documents of ``doc_len``
    ASCII bytes; ``dup_rate`` of them copy an earlier one with 1% of the bytes
    changed (near-duplicates), a few are exact copies."""
    import numpy as np
    import pyarrow as pa
    rng = np.random.default_rng(seed)
    alphabet = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz     ", dtype=np.uint8)
    m = alphabet[rng.integers(0, alphabet.size, size=(n_docs, doc_len), dtype=np.uint8)]
    dst = np.flatnonzero(rng.random(n_docs) < dup_rate)
    dst = dst[dst > 0]
    src = (rng.random(dst.size) * dst).astype(np.int64)
    m[dst] = m[src]
    k = max(doc_len // 100, 1)
    cols = rng.integers(0, doc_len, size=(dst.size, k))
    m[dst[:, None], cols] = alphabet[rng.integers(0, 26, size=(dst.size, k))]
    exact = dst[: dst.size // 10]
    m[exact] = m[(rng.random(exact.size) * exact).astype(np.int64)]
    offsets = np.arange(n_docs + 1, dtype=np.int64) * doc_len
    return pa.LargeStringArray.from_buffers(n_docs, pa.py_buffer(offsets),
                                            pa.py_buffer(m.reshape(-1)))


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.simulate:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
        sys.setswitchinterval(2e-4)
    sys.path.insert(0, os.path.dirname(HERE))
    t_start = time.perf_counter()

    import numpy as np
    import pyarrow as pa

    from gpu_dedup import Config, deduplicate
    from gpu_dedup.backend import CpuBackend
    from gpu_dedup.backend_gpu import GpuBackend
    from gpu_dedup.doctor import (Comparison, compare_kernels, compare_runs, environment_lines,
                                  malformed_buffers, planted_texts)
    from gpu_dedup.stages.normalize import normalize_text, text_buffers
    from gpu_dedup.stages.signatures import hash_params

    if args.simulate:
        sizes = dict(identity=20, throughput=6, e2e=16, mean_len=120, warm=16, ooc=24)
        K = 16
        args.repeats = 1
    elif args.quick:
        sizes = dict(identity=20_000, throughput=200_000, e2e=200_000, mean_len=2048, warm=300,
                     ooc=2_000_000)
        K = 128
    else:
        sizes = dict(identity=100_000, throughput=1_000_000, e2e=1_000_000, mean_len=2048,
                     warm=300, ooc=10_000_000)
        K = 128
    sizes["identity"] = args.identity_docs or sizes["identity"]
    sizes["throughput"] = args.throughput_docs or sizes["throughput"]
    sizes["e2e"] = args.e2e_docs or sizes["e2e"]

    table = Table()
    env, usable, why = environment_lines(args.simulate)
    if not usable and not args.simulate:
        table.add("GPU", "NOT USABLE", "", why)
        return _finish(table, args, "no usable GPU", 2)
    if args.simulate:
        gpu = GpuBackend(xp=np)
        xp = np
        device = "Numba CUDA simulator (toy sizes; figures are not GPU figures)"
    else:
        gpu = GpuBackend()
        import cupy as xp
        device = why
    cpu = CpuBackend()
    table.add("environment", "", "", "; ".join(env[:1] + env[2:]))
    status = {"identical": True}

    def left():
        return args.budget - (time.perf_counter() - t_start)

    def section(name, needed_s, fn):
        if left() < needed_s:
            table.add(name, "skipped", "", f"time budget: {left():.0f}s left, ~{needed_s}s needed")
            return
        try:
            fn()
        except Exception as exc:
            status["identical"] = status["identical"] and not name.startswith("bit-identity")
            table.add(name, "FAILED", "", f"{type(exc).__name__}: {' '.join(str(exc).split())}"
                      [:300])
            traceback.print_exc(file=sys.stderr)

    # 1. warm-up: compile every kernel, doctor-style checks on a small corpus
    def warm():
        t = time.perf_counter()
        texts = pa.array(planted_texts(sizes["warm"], seed=3,
                                       max_words=10 if args.simulate else 80,
                                       long_docs=not args.simulate), pa.large_string())
        off, data = malformed_buffers(*text_buffers(normalize_text(texts, ("nfkc", "lower",
                                                                           "ws"))))
        cmp = Comparison()
        for shingle, n, bits in (("char", 5, 32), ("char", 5, 64), ("word", 3, 32),
                                 ("word", 3, 64)):
            compare_kernels(gpu, cpu, off, data, shingle, n, K, bits, K // 8, 8 if K >= 64
                            else 2, 42, cmp)
        compare_runs(gpu, cpu, texts, Config(num_perm=K, threshold=0.6), cmp, "char5",
                     expect=gpu.name)
        status["identical"] &= cmp.identical
        bad = [r[0] for r in cmp.rows if not r[1]]
        table.add("warm-up: compile + small-corpus checks",
                  "identical" if cmp.identical else "DIFFERENT", f"{time.perf_counter() - t:.1f} s",
                  f"{len(cmp.rows)} comparisons on {len(texts)} docs"
                  + (f"; differing: {', '.join(bad)}" if bad else ""))
    section("warm-up", 30, warm)

    # 2. bit-identity on 100k documents
    def identity():
        t = time.perf_counter()
        texts = pa.array(planted_texts(sizes["identity"], seed=5,
                                       max_words=12 if args.simulate else 120,
                                       long_docs=not args.simulate), pa.large_string())
        off, data = text_buffers(normalize_text(texts, ("nfkc", "lower", "ws")))
        cmp = Comparison()
        compare_kernels(gpu, cpu, off, data, "char", 5, K, 32, K // 8, 8 if K >= 64 else 2, 42,
                        cmp)
        compare_kernels(gpu, cpu, off, data, "word", 3, K, 64, K // 8, 8 if K >= 64 else 2, 7,
                        cmp)
        compare_runs(gpu, cpu, texts, Config(num_perm=K, threshold=0.8), cmp,
                     "char5 32-bit defaults", expect=gpu.name)
        compare_runs(gpu, cpu, texts, Config(shingle="word", ngram=3, num_perm=K,
                                             signature_bits=64, threshold=0.6), cmp,
                     "word3 64-bit", expect=gpu.name)
        status["identical"] &= cmp.identical
        bad = [r[0] for r in cmp.rows if not r[1]]
        table.add(f"bit-identity with the CPU backend, {len(texts):,} docs",
                  "identical" if cmp.identical else "DIFFERENT", f"{len(cmp.rows)} comparisons",
                  f"{int(off[-1]):,} bytes; signatures, band keys, bucket edges, shingle sets, "
                  f"Jaccard, agreement, 2 whole runs; {time.perf_counter() - t:.0f} s"
                  + (f"; differing: {', '.join(bad)}" if bad else ""))
    section("bit-identity", 60 if not args.quick else 20, identity)

    # 3. signature stage on device-resident text
    def throughput():
        from gpu_dedup.kernels import cuda as kc
        n = sizes["throughput"]
        off, data = device_text(xp, n, sizes["mean_len"])
        nbytes = int(data.shape[0])
        docs = xp.arange(n, dtype=xp.int64)
        a, b = hash_params(K, 42)
        da, db = xp.asarray(a), xp.asarray(b)
        small = xp.arange(min(n, 64), dtype=xp.int64)
        for bits in (32, 64):
            kc.minhash(xp, off, data, small, False, 5, da, db, bits)       # compiled already
            secs, (sig, cnt) = _timed(partial(kc.minhash, xp, off, data, docs, False, 5, da, db,
                                              bits), xp, args.repeats)
            table.figures[f"signatures_{bits}_gbps"] = nbytes / secs / 1e9
            table.add(f"signatures, device-resident text, {bits}-bit",
                      f"{nbytes / secs / 1e9:.1f} GB/s", f"{_rate(n, secs)} docs/s",
                      f"{n:,} docs, {_gb(nbytes)}, char 5-grams, K={K}, median of "
                      f"{args.repeats}: {secs * 1e3:.1f} ms")
            if bits == 32:
                sig32 = sig
            del sig, cnt
        # the one-permutation sketch (the default): one hash per shingle,
        # a thread per document
        kc.minhash(xp, off, data, small, False, 5, da, db, 32, sketch="oph")
        secs, _ = _timed(partial(kc.minhash, xp, off, data, docs, False, 5, da, db, 32,
                                 sketch="oph"), xp, args.repeats)
        table.figures["signatures_oph_32_gbps"] = nbytes / secs / 1e9
        table.add("signatures, device-resident text, one-permutation sketch, 32-bit",
                  f"{nbytes / secs / 1e9:.1f} GB/s", f"{_rate(n, secs)} docs/s",
                  f"{n:,} docs, {_gb(nbytes)}, char 5-grams, K={K}, median of "
                  f"{args.repeats}: {secs * 1e3:.1f} ms")
        bands, rows = (16, 8) if K >= 128 else (K // 2, 2)
        secs, keys = _timed(partial(kc.band_keys, xp, sig32, bands, rows), xp, args.repeats)
        table.add("band keys", f"{_rate(n, secs)} docs/s", f"{secs * 1e3:.1f} ms",
                  f"{bands} bands x {rows} rows over {n:,} signatures")
        from gpu_dedup.backend_gpu import bucket_edges_sorted
        active = xp.ones(n, dtype=xp.bool_)
        secs, edges = _timed(partial(bucket_edges_sorted, xp, keys, active), xp, 1)
        table.add("bucket collisions (stable sort per band)", f"{_rate(n, secs)} docs/s",
                  f"{secs * 1e3:.1f} ms", f"{int(edges.shape[0]):,} anchor edges")
        del keys, sig32, data, off
        host = np.empty(min(nbytes, 1 << 30), dtype=np.uint8)
        host[:] = 7
        secs, dev = _timed(partial(xp.asarray, host), xp, args.repeats)
        table.add("host-to-device copy (pageable)", f"{host.nbytes / secs / 1e9:.1f} GB/s", "",
                  f"{_gb(host.nbytes)}; ceiling for text that starts on the host")
        del dev
    section("throughput", 40 if not args.quick else 15, throughput)

    # 4. the device's own memory bandwidth, a ceiling for every stage
    def bandwidth():
        nbytes = (1 << 20) if args.simulate else (4 << 30)
        a = xp.ones(nbytes // 8, dtype=xp.uint64)
        b = xp.empty_like(a)
        secs, _ = _timed(partial(xp.copyto, b, a), xp, args.repeats)
        bw = 2 * nbytes / secs / 1e9
        table.figures["device_copy_gbps"] = bw
        table.add("device memory bandwidth (copy: read + write)", f"{bw:,.0f} GB/s", "",
                  f"{_gb(nbytes)} copied on the device; an H200's nominal peak is 4,800 GB/s")
        del a, b
    section("bandwidth", 10, bandwidth)

    # 5. end to end from an Arrow table in host memory
    def end_to_end():
        n = sizes["e2e"]
        arr = host_corpus(n, doc_len=1024 if not args.simulate else 120)
        # one untimed run first: CuPy compiles the kernels this size needs
        # (once per machine; later processes read them from its cache)
        deduplicate(arr, Config(num_perm=K, threshold=0.8, normalize=()),
                    GpuBackend(xp=np) if args.simulate else GpuBackend())
        for norm, sketch in (((), "oph"), ((), "minhash"), (("nfkc", "lower", "ws"), "oph")):
            if left() < 30 and (norm or sketch != "oph"):
                table.add(f"end to end, normalize {','.join(norm) or 'none'}, {sketch}",
                          "skipped", "", "time budget")
                continue
            cfg = Config(num_perm=K, threshold=0.8, normalize=norm, sketch=sketch)
            be = GpuBackend(xp=np) if args.simulate else GpuBackend()
            t = time.perf_counter()
            res = deduplicate(arr, cfg, be)
            secs = time.perf_counter() - t
            stages = ", ".join(f"{k} {v:.2f}s" for k, v in res.seconds.items())
            label = ("none" if not norm else ",".join(norm)) + \
                ("" if sketch == "oph" else f", --sketch {sketch}")
            table.figures[f"e2e_{label}_docs_per_s"] = n / secs
            per_stage = {k: arr.nbytes / v / 1e9 for k, v in res.seconds.items() if v > 0}
            table.figures[f"e2e_{label}_stage_gbps"] = per_stage
            table.add(f"end to end, normalize {label}: GB/s of text per stage", "",
                      f"{arr.nbytes / secs / 1e9:.2f} GB/s overall",
                      ", ".join(f"{k} {v:.2f}" for k, v in per_stage.items())
                      + "; beside the device copy and the host-to-device copy above")
            table.add(f"end to end from host Arrow, normalize {label}",
                      f"{_rate(n, secs)} docs/s", f"{secs:.2f} s",
                      f"{n:,} x {len(arr[0].as_py())} B docs (after an untimed run), K={K}, "
                      f"b{cfg.resolved().bands}r{cfg.resolved().rows}, "
                      f"removed {res.stats['removed']:,}; ran on {res.backend}; "
                      f"selection on {res.stats.get('selection_ran_on')}; normalized on the "
                      f"host: {res.stats.get('normalized_on_host')}; {stages}; "
                      f"peak {res.stats.get('device_peak_bytes', 0) / 2 ** 30:.2f} GiB")
            status.setdefault("peak", 0)
            status["peak"] = max(status["peak"], res.stats.get("device_peak_bytes", 0))
    section("end to end", 60 if not args.quick else 20, end_to_end)

    # 6. out of core from disk
    def out_of_core():
        import shutil
        import tempfile

        from gpu_dedup.pipeline import run
        n = sizes["ooc"]
        doc_len = 80 if args.simulate else 200
        tmp = tempfile.mkdtemp(prefix="gpu-check-ooc-")
        try:
            path = os.path.join(tmp, "docs.jsonl")
            t = time.perf_counter()
            with open(path, "wb") as f:
                for s0 in range(0, n, 1_000_000):
                    k = min(1_000_000, n - s0)
                    arr = host_corpus(k, doc_len=doc_len, seed=11 + s0)
                    body = np.frombuffer(arr.buffers()[2], np.uint8).reshape(k, doc_len)
                    pre, post = b'{"text": "', b'"}\n'
                    rows = np.empty((k, len(pre) + doc_len + len(post)), np.uint8)
                    rows[:, :len(pre)] = np.frombuffer(pre, np.uint8)
                    rows[:, len(pre):len(pre) + doc_len] = body
                    rows[:, len(pre) + doc_len:] = np.frombuffer(post, np.uint8)
                    f.write(rows.tobytes())
            written = time.perf_counter() - t
            size = os.path.getsize(path)
            be = GpuBackend(xp=np) if args.simulate else GpuBackend()
            t = time.perf_counter()
            rep = run([path], os.path.join(tmp, "out"), Config(num_perm=K, threshold=0.8),
                      backend=be, html=False, id_field=None,
                      memory_limit="300MiB" if args.simulate else "16GiB",
                      work_dir=os.path.join(tmp, "work"),
                      partition_bytes="16KiB" if args.simulate else None)
            secs = time.perf_counter() - t
            table.figures["ooc_docs_per_s"] = n / secs
            stages = ", ".join(f"{k} {v:.1f}s" for k, v in rep["seconds"].items())
            table.add(f"out of core from disk, {n:,} docs", f"{_rate(n, secs)} docs/s",
                      f"{secs:.1f} s",
                      f"{_gb(size)} JSONL (written in {written:.0f} s), {rep['work']['store']} "
                      f"store, {rep['work']['chunks']} chunks, removed "
                      f"{rep['documents']['removed']:,}; selection on "
                      f"{rep['work'].get('selection_ran_on')}; {stages}")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    section("out of core", 20 if args.simulate else 120, out_of_core)

    peak = max(status.get("peak", 0), gpu.peak_device_bytes())
    table.figures["peak_device_bytes"] = peak
    table.add("peak device memory", f"{peak / 2 ** 30:.2f} GiB", "",
              "most memory held by CuPy's allocator during one backend's calls"
              + (" (not tracked in the simulator)" if args.simulate else ""))
    total = time.perf_counter() - t_start
    verdict = "bit-identical" if status["identical"] else "NOT bit-identical"
    table.add("total", verdict, f"{total:.0f} s", device)
    return _finish(table, args, verdict, 0 if status["identical"] else 1)


def _finish(table, args, verdict, code):
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    text = table.markdown(f"### gpu_check.py {stamp}: {verdict}")
    print(text, flush=True)
    out = args.out or os.environ.get("OUT")
    if out:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "gpu_check.md"), "w") as f:
            f.write(text + "\n")
        with open(os.path.join(out, "gpu_check.json"), "w") as f:
            json.dump({"verdict": verdict, "rows": table.rows, "figures": table.figures}, f,
                      indent=1)
    return code


if __name__ == "__main__":
    sys.exit(main())
