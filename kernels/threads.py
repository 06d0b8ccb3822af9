"""Running the independent iterations of a CPU kernel on several threads.

A CPU kernel's loop over documents, edges or segments is compiled as a
serial Numba function with ``nogil=True`` that runs iterations ``lo`` to
``hi - 1``, its last two arguments; :func:`for_range` splits ``0..n`` into
chunks and runs them on the calling thread and a pool of others at once,
since the compiled code does not hold the GIL. Each iteration writes its
own place in arrays allocated before, so the result does not depend on how
the range is split.

Numba's ``parallel=True`` would do the same, but it compiles each loop a
second time as a separate function: on a fresh install that doubled the
time spent compiling the kernels.

The number of threads is ``NUMBA_NUM_THREADS`` (by default, the CPU count),
or what :func:`set_threads` set.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor, wait

from .jit import interpreting

#: Chunks per thread: enough for uneven iterations to even out.
CHUNKS_PER_THREAD = 4

_pool: ThreadPoolExecutor | None = None
_pool_workers = 0
_pool_lock = threading.Lock()
_threads: int | None = None
_local = threading.local()


def threads() -> int:
    """How many threads a kernel runs on."""
    if _threads is not None:
        return _threads
    return _default_threads()


def _default_threads() -> int:
    """Numba's default (``NUMBA_NUM_THREADS``, else the CPUs this process may
    run on), found without importing Numba."""
    env = os.environ.get("NUMBA_NUM_THREADS", "").strip()
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            pass
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def set_threads(n: int | None) -> None:
    """Run kernels on ``n`` threads from now on (``None``: the default)."""
    global _threads
    if n is not None and int(n) < 1:
        raise ValueError(f"threads must be at least 1, not {n}")
    _threads = None if n is None else int(n)


def _workers(n: int) -> ThreadPoolExecutor:
    global _pool, _pool_workers
    with _pool_lock:
        if _pool is None or _pool_workers < n:
            old = _pool
            _pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="gpu-dedup-kernel",
                                       initializer=_mark_worker)
            _pool_workers = n
            if old is not None:
                old.shutdown(wait=False)
        return _pool


def stop_pool() -> None:
    """Let the kernels' threads end (a pool starts again when next needed):
    what a normal exit does to an idle pool, done before a quick one."""
    global _pool, _pool_workers
    with _pool_lock:
        pool, _pool, _pool_workers = _pool, None, 0
    if pool is not None:
        pool.shutdown(wait=True)


def _mark_worker() -> None:
    _local.worker = True


def _forget_pool() -> None:
    """In a forked child the pool's threads do not exist: start a new one."""
    global _pool, _pool_workers, _pool_lock
    _pool = None
    _pool_workers = 0
    _pool_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def for_range(kernel, n: int, *args, grain: int = 1) -> None:
    """``kernel(*args, lo, hi)`` over chunks ``[lo, hi)`` that cover ``0..n``,
    of at least ``grain`` iterations each (but the last), on :func:`threads`
    threads. A kernel that raises stops the chunks not yet started, and the
    first error is raised here once every running chunk has ended."""
    n = int(n)
    if n <= 0:
        return
    if interpreting():                   # one thread: the mode is the thread's
        kernel(*args, 0, n)
        return
    t = threads()
    grain = max(1, int(grain))
    chunks = min(-(-n // grain), CHUNKS_PER_THREAD * t)
    if t == 1 or chunks <= 1 or getattr(_local, "worker", False):
        kernel(*args, 0, n)
        return
    step = max(grain, -(-n // chunks))
    starts = iter(range(0, n, step))
    take = threading.Lock()
    stop: list[bool] = []

    def work() -> None:
        while True:
            with take:
                lo = None if stop else next(starts, None)
            if lo is None:
                return
            done = False
            try:
                kernel(*args, lo, min(n, lo + step))
                done = True
            finally:
                if not done:
                    stop.append(True)

    helpers = min(t, -(-n // step)) - 1
    pool = _workers(t - 1)
    futures = [pool.submit(work) for _ in range(helpers)]
    try:
        work()
    finally:
        wait(futures)
    for f in futures:
        f.result()
