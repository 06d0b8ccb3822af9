"""kernels.threads: every iteration once, whatever the split; errors reach
the caller; a kernel's result does not depend on the number of threads."""
import threading

import numpy as np
import pytest

from gpu_dedup.kernels import cpu, threads


@pytest.fixture
def some_threads():
    def use(n):
        threads.set_threads(n)
    yield use
    threads.set_threads(None)


@pytest.mark.parametrize("n", [0, 1, 2, 7, 64, 1000, 4099])
@pytest.mark.parametrize("t", [1, 2, 3, 8])
@pytest.mark.parametrize("grain", [1, 5, 256])
def test_every_iteration_runs_once(some_threads, n, t, grain):
    some_threads(t)
    seen = np.zeros(n, np.int64)
    spans = []
    lock = threading.Lock()

    def kernel(out, lo, hi):
        with lock:
            spans.append((lo, hi))
        out[lo:hi] += 1

    threads.for_range(kernel, n, seen, grain=grain)
    assert np.array_equal(seen, np.ones(n, np.int64))
    spans.sort()
    assert all(hi > lo for lo, hi in spans)
    # chunks of at least `grain` iterations (all but the last), at most 4 per thread
    assert all(hi - lo >= grain for lo, hi in spans[:-1])
    assert len(spans) <= max(1, threads.CHUNKS_PER_THREAD * t)


def test_chunks_run_on_several_threads_at_once(some_threads):
    some_threads(2)
    meet = threading.Barrier(2, timeout=30)
    names = set()

    def kernel(lo, hi):
        names.add(threading.current_thread().name)
        meet.wait()                         # returns only when the other chunk runs too

    threads.for_range(kernel, 2)
    assert len(names) == 2


def test_an_error_reaches_the_caller_and_stops_the_rest(some_threads):
    some_threads(2)
    ran = []

    def kernel(lo, hi):
        ran.append(lo)
        if lo == 0:
            raise ValueError("chunk 0 failed")

    with pytest.raises(ValueError, match="chunk 0 failed"):
        threads.for_range(kernel, 8 * 1000, grain=1000)
    assert len(ran) < 8


def test_a_nested_call_runs_in_its_worker(some_threads):
    some_threads(2)
    out = np.zeros(100, np.int64)

    def inner(lo, hi):
        out[lo:hi] += 1

    def outer(lo, hi):
        threads.for_range(inner, 100)      # from a pool thread: no deadlock

    threads.for_range(outer, 2)
    assert np.array_equal(out, np.full(100, 2))


def test_bad_thread_counts_are_refused():
    with pytest.raises(ValueError, match="at least 1"):
        threads.set_threads(0)


def test_kernels_give_the_same_bytes_on_any_number_of_threads(some_threads):
    rng = np.random.default_rng(3)
    texts = ["".join(rng.choice(list("abcdefgh é"), size=rng.integers(0, 300)))
             for _ in range(2000)]
    data = np.frombuffer("".join(texts).encode(), np.uint8)
    off = np.zeros(len(texts) + 1, np.int64)
    np.cumsum([len(t.encode()) for t in texts], out=off[1:])
    docs = np.arange(len(texts), dtype=np.int64)
    got = []
    for t in (1, 3, 8):
        some_threads(t)
        so, vals = cpu.shingle_sets(off, data, docs, False, 5)
        sig = np.empty((len(texts), 64), np.uint32)
        cnt = np.empty(len(texts), np.int64)
        cpu.oph_minhash(off, data, docs, False, 5, np.uint64(7), np.uint64(11), 32, sig, cnt)
        jac = cpu.jaccard_edges(so, vals, docs[:-1], docs[1:])
        got.append((so, vals, sig, cnt, jac, cpu.text_hash128(off, data)))
    for other in got[1:]:
        for a, b in zip(got[0], other):
            assert np.array_equal(a, b)
