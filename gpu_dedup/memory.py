"""Memory budgets: sizes, the default budget, and the resident memory of the
process tree.

``--memory-limit`` takes sizes such as ``1GiB``, ``512MiB``, ``8GB``, ``1.5G``
or a plain number of bytes. Binary units (``KiB``, ``MiB``, ``GiB``, ``TiB``)
are powers of 1024; decimal units (``KB``, ``MB``, ``GB``, ``TB``) are powers of
1000; a bare letter (``K``, ``M``, ``G``, ``T``) is binary, like ``ulimit`` and
``docker`` read it.

Example:
    >>> parse_size("1.5G")
    1610612736
    >>> parse_size("8GB")
    8000000000
"""
from __future__ import annotations

import ctypes
import gc
import os
import re
import threading
from contextlib import contextmanager

from .errors import ConfigError

_UNITS = {
    "": 1, "b": 1,
    "k": 1 << 10, "kib": 1 << 10, "kb": 10 ** 3,
    "m": 1 << 20, "mib": 1 << 20, "mb": 10 ** 6,
    "g": 1 << 30, "gib": 1 << 30, "gb": 10 ** 9,
    "t": 1 << 40, "tib": 1 << 40, "tb": 10 ** 12,
}
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-zA-Z]*)\s*$")

#: Share of the machine's memory used when no ``--memory-limit`` is given.
DEFAULT_SHARE = 0.5


def parse_size(spec, option: str = "--memory-limit") -> int:
    """Bytes in ``spec`` (an int, or a string such as ``"512MiB"``).

    Raises :class:`ConfigError` naming ``option`` for anything else.
    """
    if isinstance(spec, bool):
        raise ConfigError(f"{option}: expected a size such as 1GiB, got {spec!r}")
    if isinstance(spec, int):
        value = spec
    elif isinstance(spec, float):
        value = int(spec)
    else:
        m = _SIZE.match(str(spec))
        if not m:
            raise ConfigError(f"{option}: cannot read {spec!r} as a size; use forms like "
                              f"1GiB, 512MiB, 8GB, 1.5G or a number of bytes")
        unit = m.group(2).lower()
        if unit not in _UNITS:
            raise ConfigError(f"{option}: unknown unit {m.group(2)!r} in {spec!r}; use B, KiB, "
                              f"MiB, GiB, TiB (powers of 1024) or KB, MB, GB, TB (powers of 1000)")
        value = int(float(m.group(1)) * _UNITS[unit])
    if value <= 0:
        raise ConfigError(f"{option}: the size must be positive, got {spec!r}")
    return value


def format_size(n: float) -> str:
    """``1610612736`` -> ``"1.50 GiB"``."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} TiB"  # pragma: no cover


def _meminfo() -> dict:
    out = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                k, v = line.split(":", 1)
                out[k] = int(v.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return out


def _cgroup_limit() -> int | None:
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                raw = f.read().strip()
        except OSError:
            continue
        if raw.isdigit() and int(raw) < (1 << 60):
            return int(raw)
    return None


def machine_memory() -> tuple[int, int]:
    """``(total, available)`` bytes of RAM, within the cgroup's limit if any."""
    info = _meminfo()                    # Linux: what psutil reads, without importing it
    total = info.get("MemTotal", 0)
    avail = info.get("MemAvailable", info.get("MemFree", 0))
    if not total:
        try:
            import psutil
            vm = psutil.virtual_memory()
            total, avail = int(vm.total), int(vm.available)
        except ImportError:
            pass
    limit = _cgroup_limit()
    if limit is not None:
        total = min(total, limit) if total else limit
        avail = min(avail, limit) if avail else limit
    return total, avail


def default_budget() -> int:
    """A safe share of the machine's memory: half of the RAM, or 80% of what
    is available now if that is less, rounded down to a power of two so that
    small changes in free memory do not change the run's plan."""
    total, avail = machine_memory()
    if total <= 0:
        return 1 << 30
    share = min(DEFAULT_SHARE * total, 0.8 * avail if avail else total)
    share = max(int(share), 256 << 20)
    return 1 << (share.bit_length() - 1)


# -- resident memory -------------------------------------------------------

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _proc_rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


def _proc_status(pid: int, field: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _proc_children(pid: int) -> list[int]:
    out = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(x) for x in f.read().split())
        except (OSError, ValueError):
            continue
    return out


def tree_pids(pid: int | None = None) -> list[int]:
    """``pid`` (this process by default) and all its descendants: from each
    process's own list of children under ``/proc`` where there is one (a few
    small reads per process of the tree), else by psutil (which reads every
    process of the system; the monitor samples often)."""
    pid = os.getpid() if pid is None else pid
    if not os.path.exists(f"/proc/{pid}/task/{pid}/children"):
        try:
            import psutil
            try:
                p = psutil.Process(pid)
                return [pid] + [c.pid for c in p.children(recursive=True)]
            except psutil.Error:
                return [pid]
        except ImportError:
            pass
    out = [pid]
    i = 0
    while i < len(out):
        out.extend(_proc_children(out[i]))
        i += 1
    return out


def process_rss(pid: int | None = None) -> int:
    """Resident bytes of one process."""
    pid = os.getpid() if pid is None else pid
    if os.path.exists(f"/proc/{pid}/statm"):
        return _proc_rss(pid)
    try:
        import psutil
    except ImportError:
        psutil = None
    if psutil is not None:
        try:
            return int(psutil.Process(pid).memory_info().rss)
        except (psutil.Error, OSError):   # gone, or not ours to read
            pass
    import resource
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def tree_rss(pid: int | None = None) -> int:
    """Resident bytes of a process and all its descendants, summed."""
    return sum(process_rss(p) for p in tree_pids(pid))


def peak_rss_self() -> int:
    """High-water mark of this process's resident memory (``VmHWM``)."""
    hwm = _proc_status(os.getpid(), "VmHWM")
    if hwm:
        return hwm
    import resource
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def reset_peak_self() -> bool:
    """Reset this process's ``VmHWM`` (Linux ``clear_refs``); False if not possible."""
    try:
        with open(f"/proc/{os.getpid()}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


_libc = None


def release_memory(collect: bool = True) -> None:
    """Give freed memory back to the system: collect garbage (unless
    ``collect`` is False: a loop that drops its own arrays need not walk
    every object of the process each time), release Arrow's pool and trim
    the C heap, so the resident size reflects live data."""
    global _libc
    import pyarrow as pa
    if collect:
        # the young generations: what a stage made and dropped in cycles;
        # the oldest holds the interpreter's and the compiled kernels'
        # objects, whose walk costs tens of milliseconds and frees nothing
        gc.collect(1)
    pa.default_memory_pool().release_unused()
    if _libc is None:
        # the process's own symbols: the C library that malloc'd (no search
        # of the system's libraries, which ctypes.util runs a program for)
        try:
            _libc = ctypes.CDLL(None)
        except (OSError, TypeError):
            _libc = False
    if _libc and hasattr(_libc, "malloc_trim"):
        _libc.malloc_trim(0)


class PeakMonitor:
    """Peak resident memory of the process tree, per stage.

    A background thread samples the tree every ``interval`` seconds; this
    process's own high-water mark (``VmHWM``, reset at each stage) catches
    spikes between samples. Use :meth:`stage` around each stage::

        mon = PeakMonitor()
        with mon.stage("signatures"):
            ...
        mon.peaks["signatures"]   # bytes
    """

    def __init__(self, interval: float = 0.02):
        self.interval = interval
        self.peaks: dict[str, int] = {}
        self.overall = 0
        #: this process's own peak over the stages (its children apart)
        self.own = 0
        self._current = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None
        self._hwm_ok = False

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="gpu-dedup-rss", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None

    def sample(self) -> int:
        rss = tree_rss()
        with self._lock:
            if rss > self._current:
                self._current = rss
            if rss > self.overall:
                self.overall = rss
        return rss

    def _run(self):
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    @contextmanager
    def stage(self, name: str, release: bool = True):
        """Measure the peak of stage ``name``; ``release`` first gives freed
        memory back to the system, so the figure is the stage's own (a run
        that holds its arrays in memory anyway skips it: re-faulting the
        pages costs time)."""
        if release:
            release_memory()
        self._hwm_ok = reset_peak_self()
        with self._lock:
            self._current = 0
        self.sample()
        try:
            yield
        finally:
            self.sample()
            with self._lock:
                peak = self._current
            own = peak_rss_self() if self._hwm_ok else process_rss()
            with self._lock:
                self.own = max(self.own, own)
            if self._hwm_ok:
                # this process's exact peak, plus what its children held
                kids = sum(process_rss(p) for p in tree_pids()[1:])
                peak = max(peak, own + kids)
            with self._lock:
                self.peaks[name] = max(self.peaks.get(name, 0), peak)
                self.overall = max(self.overall, peak)


def parse_memory(spec) -> int | None:
    """Bytes from ``--gpu-memory``: an integer, or a number with a unit
    (``8GiB``, ``512MiB``, ``8GB``, ``1.5G``; K/M/G/T alone are binary).

    Returns None for None or an empty string.

    Example:
        >>> parse_memory("512MiB"), parse_memory("8GB"), parse_memory(4096)
        (536870912, 8000000000, 4096)
    """
    if spec is None or (isinstance(spec, str) and not spec.strip()):
        return None
    return parse_size(spec, option="--gpu-memory")
