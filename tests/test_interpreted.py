"""Kernels interpreted for a small run give what the compiled kernels give.

A run of little text runs its kernels interpreted (``kernels.jit``): each
kernel's own Python code, or its whole-array NumPy stand-in. Whole runs are
compared byte for byte with the same runs compiled, over real and generated
text and several options; the stand-ins of ``kernels.sorting`` with the
compiled kernels (those of ``kernels.vector_text`` and ``kernels.vector_misc``
have their own tests).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from gpu_dedup import Config
from gpu_dedup.kernels import jit, sorting, threads
from gpu_dedup.pipeline import run
from realtext import paragraphs
from test_staged import make_texts, output_bytes, write_inputs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _noisy(texts, seed):
    """Near-copies of some texts: a word dropped, a word doubled."""
    rng = np.random.default_rng(seed)
    out = list(texts)
    for t in texts[: len(texts) // 2]:
        w = t.split()
        if len(w) > 4:
            i = int(rng.integers(len(w)))
            out.append(" ".join(w[:i] + w[i + 1:]) if rng.random() < 0.5
                       else " ".join(w[:i] + [w[i]] + w[i:]))
    return out


CORPORA = {
    "generated": lambda: make_texts(120),
    "real paragraphs": lambda: _noisy([p for p in paragraphs()[:600] if len(p) < 1500][:100], 1),
    "unicode": lambda: _noisy([f"Ünïcödé {i % 9} ß 日本語のテキスト — “quoted” {i % 4}\u00a0tail"
                               for i in range(60)], 2),
}

OPTIONS = {
    "defaults": Config(),
    "classic sketch, keep longest": Config(sketch="minhash", keep="longest"),
    "word shingles": Config(shingle="word", ngram=3, threshold=0.6),
    "no normalization, 64-bit": Config(normalize="none", signature_bits=64, threshold=0.7),
}


def _run(folder, paths, cfg, *, compiled: bool):
    out = os.path.join(folder, "out")
    if compiled:
        with jit.compiling():
            report = run(paths, out, cfg)
    else:
        report = run(paths, out, cfg)
    return output_bytes(out), report


@pytest.mark.parametrize("corpus", sorted(CORPORA))
@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_interpreted_run_gives_the_compiled_bytes(tmp_path, corpus, option):
    paths = write_inputs(str(tmp_path / "in"), CORPORA[corpus]())   # ids name the files
    cfg = OPTIONS[option]
    small, small_report = _run(str(tmp_path / "i"), paths, cfg, compiled=False)
    ref, ref_report = _run(str(tmp_path / "c"), paths, cfg, compiled=True)
    assert small_report["kernels"] == "interpreted"
    assert ref_report["kernels"] == "compiled"
    assert small == ref
    assert small_report["documents"] == ref_report["documents"]


def test_a_run_of_more_text_compiles(tmp_path, monkeypatch):
    """And loads Numba ahead while it reads (a small run does not)."""
    from gpu_dedup import shell
    from gpu_dedup.engine.plan import INTERPRET_BYTES
    ahead = []
    monkeypatch.setattr(shell, "load_numba_ahead", lambda: ahead.append(True))
    texts = []
    while sum(len(t) for t in texts) <= INTERPRET_BYTES:
        texts += make_texts(400, seed=len(texts))
    _, report = _run(str(tmp_path), write_inputs(str(tmp_path / "in"), texts), Config(),
                     compiled=False)
    assert report["kernels"] == "compiled" and ahead == [True]
    _, report = _run(str(tmp_path / "small"), write_inputs(str(tmp_path / "in2"), texts[:50]),
                     Config(), compiled=False)
    assert report["kernels"] == "interpreted" and ahead == [True]


def test_counted_documents_weigh_in_the_choice(tmp_path, monkeypatch):
    """Where an input's documents are counted before it is read (a plain
    JSONL file, a Parquet file, a text shard), a run of few long documents
    runs interpreted beyond 512 KiB, and one of many short documents
    compiles below it: each document costs the interpreted greedy rule its
    passes. Compressed inputs are not counted."""
    import gzip
    from gpu_dedup import shell
    from gpu_dedup.engine.plan import INTERPRET_BYTES, INTERPRET_MAX_BYTES
    from gpu_dedup.io.plan import input_records
    monkeypatch.setattr(shell, "load_numba_ahead", lambda: None)
    long_texts = [" ".join(paragraphs()[i:i + 12]) for i in range(0, 1200, 12)]
    src = tmp_path / "long.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in long_texts))
    assert INTERPRET_BYTES < src.stat().st_size < INTERPRET_MAX_BYTES
    assert input_records(str(src)) == 100
    _, report = _run(str(tmp_path / "a"), [str(src)], Config(), compiled=False)
    assert report["kernels"] == "interpreted" and report["documents"]["in"] == 100
    short = make_texts(6000, seed=4)[:6000]
    many = tmp_path / "many.jsonl"
    many.write_text("".join(json.dumps({"text": t}) + "\n" for t in short)[:-1])
    assert many.stat().st_size < INTERPRET_BYTES and input_records(str(many)) == 6000
    _, report = _run(str(tmp_path / "b"), [str(many)], Config(), compiled=False)
    assert report["kernels"] == "compiled"
    zipped = tmp_path / "many.jsonl.gz"
    zipped.write_bytes(gzip.compress(many.read_bytes()))
    assert input_records(str(zipped)) is None
    texts = tmp_path / "texts"
    texts.mkdir()
    assert input_records(str(texts), ["a.txt", "b.txt"]) == 2


def test_a_heavy_selection_of_an_interpreted_run_runs_compiled(tmp_path, monkeypatch):
    """Pages of one template with dates added: few bytes, but every page a
    near-copy of the others, whose windows of pairs all need their exact
    similarity. An interpreted run whose buckets' windows hold more pairs
    than it could score interpreted in a second runs its selection compiled,
    and gives the bytes of a run that stays interpreted."""
    from gpu_dedup.engine import plan
    from gpu_dedup.engine.select_stage import SelectStage
    assert plan.compile_selection(10 ** 6) and not plan.compile_selection(10 ** 5)
    page = "Welcome to the Example Store. Free shipping on orders over fifty dollars today."
    texts = [f"{page} Updated 2026-{1 + i % 12:02d}-{1 + i % 28:02d} #{i % 37}."
             for i in range(300)]
    paths = write_inputs(str(tmp_path / "in"), texts)
    modes = []
    real = SelectStage._select_in_ranges

    def select(self, *a):
        modes.append(jit.interpreting())
        return real(self, *a)
    monkeypatch.setattr(SelectStage, "_select_in_ranges", select)
    out = {}
    for per_pair in (0.0, 1.0):          # the selection interpreted, then compiled
        monkeypatch.setattr(plan, "INTERPRET_SECONDS_PER_WINDOW_PAIR", per_pair)
        out[per_pair], report = _run(str(tmp_path / str(per_pair)), paths, Config(),
                                     compiled=False)
        assert report["kernels"] == "interpreted"       # the run as a whole
        assert report["selection"]["comparisons"] > 1000
    assert modes == [True, False]
    assert out[0.0] == out[1.0]


@pytest.mark.parametrize("dtype", [np.int64, np.uint64])
@pytest.mark.parametrize("n", [0, 1, 5, 33, 500])
def test_sorting_stand_ins_match_the_compiled_kernels(dtype, n):
    rng = np.random.default_rng(n)
    x = rng.integers(0, max(n // 2, 1), size=n + 3).astype(dtype)
    for m in {0, n // 2, n}:
        a, b = x.copy(), x.copy()
        with jit.interpreted():
            ka = sorting.sorted_unique(a, m)
        kb = sorting.sorted_unique.compiled(b, m)
        assert ka == kb and np.array_equal(a[:ka], b[:kb]) and np.array_equal(a[m:], b[m:])
        a, b = x.copy(), x.copy()
        with jit.interpreted():
            sorting.sort_inplace(a, m)
        sorting.sort_inplace.compiled(b, m)
        assert np.array_equal(a, b)
    sizes = rng.integers(0, 4, size=9)
    off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    start = rng.integers(0, 3, size=9).astype(np.int64)
    src = rng.integers(0, 1000, size=20).astype(dtype)
    a = np.full(int(off[-1]), 7, dtype)
    b = a.copy()
    with jit.interpreted():
        sorting.gather_runs(src, start, off, a, 2, 7)
    sorting.gather_runs.compiled(src, start, off, b, 2, 7)
    assert np.array_equal(a, b)
    # the stable order by key, counted into place: NumPy's stable sort's
    keys = rng.integers(0, max(n // 3, 1), size=n).astype(np.int64)
    koff = np.zeros(max(n // 3, 1) + 1, np.int64)
    np.cumsum(np.bincount(keys, minlength=koff.size - 1), out=koff[1:])
    want = np.argsort(keys, kind="stable")
    with jit.interpreted():
        assert np.array_equal(sorting.counting_order(keys, koff), want)
    assert np.array_equal(sorting.counting_order(keys, koff), want)


def test_the_mode_is_the_threads_and_for_range_runs_on_it_alone():
    import threading
    seen = []

    def kernel(lo, hi):
        seen.append((threading.get_ident(), lo, hi))

    threads.set_threads(4)
    try:
        with jit.interpreted():
            assert jit.interpreting()
            threads.for_range(kernel, 10_000, grain=1)
            other = []
            t = threading.Thread(target=lambda: other.append(jit.interpreting()))
            t.start()
            t.join()
        assert not jit.interpreting() and other == [False]
        assert seen == [(threading.get_ident(), 0, 10_000)]
        with jit.compiling(), jit.interpreted():
            assert not jit.interpreting()
    finally:
        threads.set_threads(None)


def test_a_kernel_compiles_with_its_callees_as_dispatchers():
    from numba.core.dispatcher import Dispatcher

    from gpu_dedup.kernels import cpu, hashing
    d = cpu._text_hash_docs.compiled
    assert isinstance(d, Dispatcher) and d is cpu._text_hash_docs.compiled
    assert d.py_func.__code__ is cpu._text_hash_docs.py_func.__code__
    assert d.py_func.__globals__["xxh64"] is hashing.xxh64.compiled
    twin = cpu._text_hash_docs.twin                  # the CUDA simulator's: Python throughout
    assert twin.__code__ is cpu._text_hash_docs.py_func.__code__
    assert twin.__globals__["xxh64"] is hashing.xxh64.twin
    assert cpu._text_hash_docs.__doc__ == cpu._text_hash_docs.py_func.__doc__


def test_numba_is_loaded_ahead_in_a_daemon_thread_only_where_kernels_compile():
    """:func:`gpu_dedup.kernels.jit.load_numba_ahead`: nothing where kernels
    run interpreted; otherwise a daemon thread that imports Numba and loads
    its CPU target (its implementations' modules), after which a kernel runs
    as before."""
    code = textwrap.dedent("""
        import sys
        import numpy as np
        from gpu_dedup.kernels import jit
        with jit.interpreted():
            assert jit.load_numba_ahead() is None
        assert "numba" not in sys.modules
        t = jit.load_numba_ahead()
        assert t.daemon
        t.join(120)
        assert not t.is_alive()
        assert "numba.np.arraymath" in sys.modules      # loaded by the CPU target
        from gpu_dedup.kernels import cpu
        off, data = cpu.fold_spaces(np.array([0, 9], np.int64),
                                    np.frombuffer(b" a  b c  ", np.uint8))
        assert bytes(data) == b"a b c", bytes(data)
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       timeout=600)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]


def test_a_kernel_called_with_constants_compiles_once_for_their_types(tmp_path, monkeypatch):
    """A kernel called from compiled code with constants (``f(a, 0)``,
    ``f(a, 1)``) is compiled for ``int64``, as a call from Python would
    make it, not once more for each ``Literal``."""
    import numba
    (tmp_path / "constant_calls.py").write_text(textwrap.dedent("""
        from gpu_dedup.kernels.jit import njit

        @njit
        def callee(a, k):
            return a[0] + k

        @njit
        def caller(a):
            return callee(a, 0) + callee(a, 1) + callee(a, True)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    import constant_calls as m
    assert m.caller(np.arange(3, dtype=np.int64)) == 0 + 1 + 1
    sigs = m.callee.compiled.signatures
    assert sigs == [(numba.types.Array(numba.int64, 1, "C"), numba.int64),
                    (numba.types.Array(numba.int64, 1, "C"), numba.boolean)], sigs



def _small_input(tmp_path, kind: str):
    """60 short documents, 7 distinct texts, as ``kind`` of input."""
    texts = [f"document {i % 7} says hello world" for i in range(60)]
    if kind == "txt":
        (tmp_path / "docs").mkdir()
        for i, t in enumerate(texts):
            (tmp_path / "docs" / f"{i:02d}.txt").write_text(t)
        return tmp_path / "docs"
    if kind == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq
        pq.write_table(pa.table({"id": list(range(60)), "text": texts}), tmp_path / "docs.parquet")
        return tmp_path / "docs.parquet"
    src = tmp_path / "docs.jsonl"
    src.write_text("".join(json.dumps({"text": t, **({"id": i} if kind == "jsonl" else {})})
                           + "\n" for i, t in enumerate(texts)))
    return src


@pytest.mark.parametrize("kind", ["jsonl", "jsonl-no-ids", "parquet", "txt"])
def test_a_small_cli_run_loads_neither_numba_nor_pandas(tmp_path, kind):
    """Nor NumPy's masked arrays (which ``np.unique`` imports), nor
    ``pyarrow.compute`` (:mod:`gpu_dedup.compute`), nor ``numpy.random``
    (:mod:`gpu_dedup.draws`), nor OpenSSL's hashes, ``subprocess`` (which
    ``ctypes.util`` runs to find the C library) or a TOML parser, nor, unless the
    input is Parquet, pyarrow's filesystems (OpenSSL, the cloud stores): each costs a
    warm start more than a small run's work. Whatever the input: integer ids are cast,
    missing ones generated (``FILE:LINE``, or a text file's path), without
    ``pa.array``, which imports pandas, or ``Array.cast``, which imports
    ``pyarrow.compute``."""
    src = _small_input(tmp_path, kind)
    out = tmp_path / "out"
    code = textwrap.dedent(f"""
        import json, sys
        from gpu_dedup.cli import main
        try:
            main(["run", {str(src)!r}, "--output", {str(out)!r}], standalone_mode=False)
        except SystemExit as e:
            assert not e.code, e.code
        mods = ("numba", "pandas", "numpy.ma", "pyarrow.compute", "numpy.random", "hashlib",
                "subprocess", "tomllib", "pyarrow.fs")[:{8 if kind == "parquet" else 9}]
        print(json.dumps([m in sys.modules for m in mods]))
        import numba, pandas               # installed: the check above could fail
        import numpy.ma, numpy.random, pyarrow.compute, hashlib, subprocess, tomllib
        import pyarrow.fs
        print(json.dumps([m in sys.modules for m in mods]))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    before, after = (json.loads(x) for x in r.stdout.strip().splitlines()[-2:])
    n = 8 if kind == "parquet" else 9
    assert (before, after) == ([False] * n, [True] * n)
    assert "compiling" not in r.stderr            # nothing is compiled: no notice
    report = json.loads((out / "report.json").read_text())
    assert report["kernels"] == "interpreted" and "numba" not in report["versions"]
    import pyarrow.parquet as pq
    clusters = pq.read_table(out / "clusters.parquet")
    assert clusters.num_rows == 60 and clusters.column("kept").to_pylist().count(True) == 7


@pytest.mark.parametrize("shift", [0, 32])
@pytest.mark.parametrize("word_mode,n", [(False, 5), (False, 1), (True, 3)])
def test_classic_minhash_stand_in_matches_the_compiled_kernel(shift, word_mode, n):
    from gpu_dedup.kernels import cpu, vector_sketch
    from gpu_dedup.stages.signatures import hash_params
    texts = list(paragraphs()[:40]) + ["", "é", "日本語 テキスト", "a b", "x" * 3000]
    raw = [t.encode() for t in texts] + [b"\xff\xfe bad \xc3"]
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in raw])]).astype(np.int64)
    data = np.frombuffer(b"".join(raw), np.uint8)
    docs = np.random.default_rng(n).permutation(len(raw))[:-3].astype(np.int64)
    a, b = hash_params(37, 7)
    dtype = np.uint64 if shift == 0 else np.uint32
    want = np.full((docs.size, 37), 5, dtype)
    got = want.copy()
    wc = np.full(docs.size, -1, np.int64)
    gc = wc.copy()
    cpu._minhash_blocks.compiled(offsets, data, docs, word_mode, n, a, b, shift, want, wc, 0, 1)
    old = vector_sketch.STEP_VALUES
    vector_sketch.STEP_VALUES = 37 * 50              # several steps, one document alone
    try:
        vector_sketch.minhash_blocks(offsets, data, docs, word_mode, n, a, b, shift, got, gc,
                                     0, 1)
    finally:
        vector_sketch.STEP_VALUES = old
    assert np.array_equal(got, want) and np.array_equal(gc, wc)


def test_the_library_call_over_texts_interprets_a_small_array(monkeypatch):
    import gpu_dedup
    from gpu_dedup import shell
    seen = []

    class spy(jit.interpreted):
        def __enter__(self):
            out = super().__enter__()
            seen.append(self.active)
            return out

    monkeypatch.setattr(shell, "interpreted", spy)
    texts = _noisy(list(paragraphs()[:60]), 3)
    with jit.compiling():
        want = gpu_dedup.deduplicate(texts)
    got = gpu_dedup.deduplicate(texts)
    assert seen == [False, True]
    for name in ("kept", "duplicate_of", "cluster"):
        assert np.array_equal(np.asarray(getattr(got, name)), np.asarray(getattr(want, name)))
    assert int(np.asarray(got.kept).sum()) < len(texts)            # something was removed


def test_only_the_dedup_command_interprets():
    from gpu_dedup.pipeline import Dedup
    from gpu_dedup.semantic.api import Semantic
    from gpu_dedup.substr import Substr
    assert Dedup.interpretable is True
    assert not getattr(Substr, "interpretable", False)
    assert not getattr(Semantic, "interpretable", False)


def test_a_small_run_gives_no_memory_back_and_a_compiled_one_does(tmp_path, monkeypatch):
    """A run interpreted for its size holds little: it skips trimming the
    heap after its ranges and output files (each page given back would be
    faulted in again); a compiled run still trims, with the same bytes."""
    from gpu_dedup.engine import base
    calls = []
    monkeypatch.setattr(base, "release_memory", lambda collect=True: calls.append(collect))
    paths = write_inputs(str(tmp_path / "in"), CORPORA["real paragraphs"]())
    small, report = _run(str(tmp_path / "i"), paths, Config(), compiled=False)
    assert report["kernels"] == "interpreted" and calls == []
    ref, report = _run(str(tmp_path / "c"), paths, Config(), compiled=True)
    assert report["kernels"] == "compiled" and len(calls) >= 4
    assert small == ref
