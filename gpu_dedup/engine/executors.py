"""The executors: where the runner's tasks execute, in this process, on Dask
threads, or on a Dask cluster.

``--scheduler`` takes:

* ``none``: every unit in this process, one after the other (the default);
* ``threads``: Dask's threaded scheduler, ``--workers`` threads;
* ``processes``: a local ``distributed.LocalCluster`` of ``--workers`` single-
  threaded worker processes (with ``--device gpu``, a Dask-CUDA
  ``LocalCUDACluster`` with one worker per GPU instead);
* ``tcp://HOST:PORT`` (or ``tls://``): a running Dask scheduler and its
  workers. The address is checked (a host, a port from 1 to 65535), then
  reached and Dask's handshake completed within :data:`CONNECT_TIMEOUT`
  seconds, before any work: anything else listening there, or nothing, is
  one line naming the address.

A local cluster's own log lines (``distributed`` at INFO) are not shown: the
``distributed`` loggers log warnings at most (errors only under ``-q``)
while the executor lives.

The runner (:mod:`gpu_dedup.engine.runner`) builds each stage as a set of
independent tasks over partitions (chunks of documents, blocks of signatures,
key partitions of the band table, batches of candidate edges) and hands them
to :meth:`Executor.map`, which reports each task as it completes. Tasks read
and write their inputs and outputs in the run's store: in this process
(``none``, ``threads``) it may be memory; worker processes share the work
directory, which must be on storage every worker can reach (any local path
for ``processes``; a shared file system for a multi-machine cluster).
Results never depend on the executor: every task is a pure function of the
store's contents.

Dask and Dask-CUDA are optional: they are imported only when a scheduler other
than ``none`` is asked for.
"""
from __future__ import annotations

import logging
import os
import re
import socket
import threading

from ..errors import ConfigError, DeviceError

log = logging.getLogger("gpu_dedup")

SCHEDULERS = ("none", "threads", "processes")
#: Seconds to reach a scheduler and complete Dask's handshake.
CONNECT_TIMEOUT = 10.0
_HOST_PORT = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):([0-9]{1,5})")


def parse_scheduler(spec: str | None) -> str:
    """Validate ``--scheduler``; returns the normalised spec."""
    spec = (spec or "none").strip()
    if spec in SCHEDULERS:
        return spec
    if "://" not in spec:
        raise ConfigError(f"--scheduler must be none, threads, processes or tcp://HOST:PORT, "
                          f"got {spec!r}")
    scheme, rest = spec.split("://", 1)
    if scheme not in ("tcp", "tls"):
        raise ConfigError(f"--scheduler {spec}: a scheduler's address starts with tcp:// "
                          f"(or tls://)")
    m = _HOST_PORT.fullmatch(rest)
    if m is None:
        raise ConfigError(f"--scheduler {spec}: expected {scheme}://HOST:PORT (a host name or "
                          f"address, and a port number)")
    port = int(m.group(2))
    if not 1 <= port <= 65535:
        raise ConfigError(f"--scheduler {spec}: port {port} is not between 1 and 65535")
    return spec


def _host_port(spec: str) -> tuple[str, int]:
    m = _HOST_PORT.fullmatch(spec.split("://", 1)[1])
    return m.group(1).strip("[]"), int(m.group(2))


def _handshake(spec: str, timeout: float) -> None:
    """Resolve, connect to and complete Dask's handshake with the scheduler
    at ``spec``; ConfigError naming the address when anything fails."""
    import asyncio

    from distributed.comm import connect
    from distributed.comm.core import CommClosedError
    from distributed.security import Security
    host, port = _host_port(spec)
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise ConfigError(f"--scheduler {spec}: cannot resolve {host} "
                          f"({exc.strerror or exc})") from None
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as exc:
        why = "no answer" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise ConfigError(f"--scheduler {spec}: cannot connect ({why})") from None

    async def shake():
        args = Security().get_connection_args("client")
        comm = await asyncio.wait_for(connect(spec, timeout=timeout, **args), timeout)
        await comm.close()

    try:
        asyncio.run(shake())
    except (TimeoutError, asyncio.TimeoutError):
        raise ConfigError(f"--scheduler {spec}: no Dask scheduler answered within "
                          f"{timeout:g} s") from None
    # a server that is no Dask scheduler: its first bytes read as a frame
    # length (an allocation of exabytes), a closed stream, or garbage; or a
    # security setting the scheduler does not share (RuntimeError)
    except (CommClosedError, OSError, MemoryError, ValueError, TypeError, KeyError,
            EOFError, RuntimeError) as exc:
        why = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise ConfigError(f"--scheduler {spec}: not a Dask scheduler, or it refused the "
                          f"handshake ({why})") from None


def check_scheduler(spec: str, timeout: float = CONNECT_TIMEOUT) -> None:
    """:func:`_handshake` in a thread of its own (it runs its own event loop),
    given ``timeout`` seconds and a little more to resolve the name."""
    outcome: list = []

    def probe():
        try:
            _handshake(spec, timeout)
            outcome.append(None)
        except ConfigError as exc:
            outcome.append(exc)

    t = threading.Thread(target=probe, name="gpu-dedup-scheduler-check", daemon=True)
    t.start()
    t.join(2 * timeout + 5)
    if not outcome:
        raise ConfigError(f"--scheduler {spec}: no Dask scheduler answered within "
                          f"{2 * timeout + 5:g} s")
    if outcome[0] is not None:
        raise outcome[0]


def _quiet_distributed() -> tuple:
    """Keep ``distributed``'s INFO lines (a local cluster's start, its
    workers, its shutdown) off stderr: its loggers log warnings at most, or
    only what this package's logger would. Returns what to restore."""
    lg = logging.getLogger("distributed")
    old = lg.level
    lg.setLevel(max(logging.WARNING, log.getEffectiveLevel()))
    return lg, old


class Executor:
    """Runs ``fn(item, *args)`` for every item of a list; results in order.

    ``on_done(index, result)`` is called as each item completes (in the
    calling process).
    """

    name = "none"
    concurrency = 1
    #: Whether tasks run in this process (and may share a memory store).
    shared_memory = True

    def map(self, fn, items, *args, on_done=None) -> list:
        out = []
        for i, item in enumerate(items):
            r = fn(item, *args)
            out.append(r)
            if on_done is not None:
                on_done(i, r)
        return out

    def describe(self) -> dict:
        return {"scheduler": self.name, "workers": self.concurrency}

    def process_peaks(self) -> list:
        """The peak resident memory of each worker process of the executor
        (none: its tasks run in this process)."""
        return []

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class InProcess(Executor):
    """Every unit in this process, in order."""


class DaskThreads(Executor):
    """Dask's threaded scheduler in this process."""

    def __init__(self, workers: int | None = None):
        try:
            import dask  # noqa: F401
        except ImportError as exc:
            raise ConfigError("--scheduler threads needs Dask: pip install 'dask[distributed]'") \
                from exc
        self.name = "threads"
        self.concurrency = int(workers or os.cpu_count() or 1)

    def map(self, fn, items, *args, on_done=None) -> list:
        from dask.callbacks import Callback
        from dask.threaded import get
        if not items:
            return []

        def call(item):
            return fn(item, *args)

        keys = [("gpu-dedup-task", i) for i in range(len(items))]
        graph = {k: (call, item) for k, item in zip(keys, items)}
        report = threading.Lock()

        def posttask(key, result, dsk, state, worker_id):
            if on_done is not None and key in graph:
                with report:
                    on_done(key[1], result)

        with Callback(posttask=posttask):
            out = get(graph, keys, num_workers=self.concurrency)
        return list(out)


class DaskCluster(Executor):
    """A ``distributed`` client: a local cluster of worker processes, a local
    Dask-CUDA cluster, or a running scheduler at ``tcp://HOST:PORT``."""

    def __init__(self, spec: str, workers: int | None = None, device: str = "cpu",
                 memory_limit: int | None = None):
        self.memory_limit = memory_limit
        try:
            from distributed import Client
        except ImportError as exc:
            raise ConfigError(f"--scheduler {spec} needs Dask's distributed scheduler: "
                              f"pip install 'dask[distributed]'") from exc
        self.name = spec
        self.shared_memory = False
        self._cluster = None
        self.client = None
        self._logs = _quiet_distributed()
        try:
            self._start(spec, workers, device, Client)
        except BaseException:
            self.close()
            raise

    def _start(self, spec, workers, device, Client) -> None:
        if spec == "processes":
            if device == "gpu":
                self._cluster = _cuda_cluster(workers)
                self.kind = "dask-cuda LocalCUDACluster"
            else:
                from distributed import LocalCluster
                n = int(workers or os.cpu_count() or 1)
                import dask
                # each worker is given the run's budget as its limit, which
                # the report holds it to; Dask's own reactions to a limit
                # (spilling, pausing, restarting) would only stall our tasks
                with dask.config.set({"distributed.worker.memory.target": False,
                                      "distributed.worker.memory.spill": False,
                                      "distributed.worker.memory.pause": False,
                                      "distributed.worker.memory.terminate": False}):
                    self._cluster = LocalCluster(n_workers=n, threads_per_worker=1,
                                                 processes=True, host="127.0.0.1",
                                                 dashboard_address="127.0.0.1:0",
                                                 scheduler_kwargs={"dashboard": False},
                                                 memory_limit=int(self.memory_limit or 0),
                                                 silence_logs=logging.ERROR)
                self.kind = "distributed LocalCluster"
            self.client = Client(self._cluster)
            self.client.run(_reset_peak)        # fresh processes: from here on
        else:
            self.kind = "remote scheduler"
            check_scheduler(spec)
            try:
                self.client = Client(spec, timeout=f"{CONNECT_TIMEOUT:g}s")
            except (OSError, TimeoutError) as exc:
                raise ConfigError(f"--scheduler {spec}: cannot reach the Dask scheduler "
                                  f"({exc})") from None
            if workers:
                try:
                    self.client.wait_for_workers(int(workers), timeout=60)
                except TimeoutError:
                    raise ConfigError(f"--scheduler {spec}: fewer than {workers} workers joined "
                                      f"within 60 s") from None
        info = self.client.scheduler_info(n_workers=-1) if _takes_n_workers(self.client) \
            else self.client.scheduler_info()
        ws = info.get("workers", {})
        if not ws:
            try:
                self.client.wait_for_workers(1, timeout=60)
            except TimeoutError:
                raise ConfigError(f"--scheduler {spec}: the scheduler has no workers") from None
            ws = self.client.scheduler_info().get("workers", {})
        self.workers = len(ws)
        self.concurrency = max(1, sum(int(w.get("nthreads", 1)) for w in ws.values()))

    def map(self, fn, items, *args, on_done=None) -> list:
        from distributed import as_completed
        if not items:
            return []
        # the arguments (the run's context) go to every worker once per call;
        # the items (a batch of pairs may weigh megabytes) are sent as data,
        # each to one worker, not inside the task graph
        shared = [self.client.scatter(a, broadcast=True, hash=False) for a in args]
        items = self.client.scatter(list(items), hash=False)
        futures = self.client.map(fn, items, *[[s] * len(items) for s in shared], pure=False)
        index = {f.key: i for i, f in enumerate(futures)}
        out = [None] * len(items)
        try:
            for fut, result in as_completed(futures, with_results=True, raise_errors=True):
                i = index[fut.key]
                out[i] = result
                if on_done is not None:
                    on_done(i, result)
        except BaseException:
            self.client.cancel(futures)
            raise
        return out

    def describe(self) -> dict:
        return {"scheduler": self.name, "kind": self.kind, "workers": self.workers,
                "threads": self.concurrency, "address": self.client.scheduler.address}

    def process_peaks(self) -> list:
        """Each worker's peak resident memory since the executor started
        (``VmHWM``), beside its memory limit (None: the worker has none)."""
        got = self.client.run(_own_peak)
        info = self.client.scheduler_info(n_workers=-1) if _takes_n_workers(self.client) \
            else self.client.scheduler_info()
        ws = info.get("workers", {})
        return [{"role": "worker", "address": addr, "pid": r["pid"],
                 "peak_rss_bytes": r["peak"],
                 "limit_bytes": int(ws.get(addr, {}).get("memory_limit") or 0) or None}
                for addr, r in sorted(got.items())]

    def close(self) -> None:
        client = getattr(self, "client", None)
        if client is not None:
            client.close()
            self.client = None
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None
        logs = getattr(self, "_logs", None)
        if logs is not None:
            logs[0].setLevel(logs[1])
            self._logs = None


def _own_peak() -> dict:
    """On a worker: its process id and peak resident memory."""
    from ..memory import peak_rss_self
    return {"pid": os.getpid(), "peak": peak_rss_self()}


def _reset_peak() -> bool:
    """On a worker: start its peak resident memory afresh."""
    from ..memory import reset_peak_self
    return reset_peak_self()


def _takes_n_workers(client) -> bool:
    import inspect
    try:
        return "n_workers" in inspect.signature(client.scheduler_info).parameters
    except (TypeError, ValueError):
        return False


def _cuda_cluster(workers):
    """A Dask-CUDA cluster with one worker per visible GPU (or ``workers``)."""
    try:
        from dask_cuda import LocalCUDACluster
    except ImportError as exc:
        raise DeviceError("--scheduler processes with --device gpu needs Dask-CUDA: "
                          "pip install dask-cuda (or the rapids extra)") from exc
    kw = {"threads_per_worker": 1, "dashboard_address": None, "memory_limit": 0,
          "silence_logs": logging.ERROR}
    if workers:
        kw["n_workers"] = int(workers)
    return LocalCUDACluster(**kw)


def make_executor(scheduler: str = "none", workers: int | None = None,
                  device: str = "cpu", memory_limit: int | None = None) -> Executor:
    """The executor for ``--scheduler`` (see the module docstring);
    ``memory_limit``: each local worker process's limit (``processes``)."""
    spec = parse_scheduler(scheduler)
    if workers is not None and int(workers) < 1:
        raise ConfigError(f"--workers must be at least 1, got {workers}")
    if spec == "none":
        return InProcess()
    if spec == "threads":
        return DaskThreads(workers)
    return DaskCluster(spec, workers, device, memory_limit)
