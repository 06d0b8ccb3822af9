"""A first run's kernels, compiled by two processes at once.

A run on a machine whose Numba cache does not hold the kernels yet compiles
each one on its first call: 15 to 25 seconds on two cores for the default
options, one kernel after another, since Numba compiles under one lock in a
process. :func:`start` lets a second process compile meanwhile, into the
same cache: the helper takes the kernels of :data:`SIGNATURES` (what a
default run calls from Python, with the types it calls them with) from the
last to the first, while the run compiles its kernels as it meets them.
Each kernel goes to whoever claims it first, by creating a file in a
folder of the run's own (``os.O_EXCL``): the helper passes over the kernels
the run has claimed, and the run, calling a kernel the helper claimed,
waits until the helper has compiled it and then loads it from the cache.
What the helper compiled is what the run would have compiled (the same
code, options and types), so results do not change; a kernel the helper
never reaches, a type the list lacks, or a helper that fails is compiled
by the run, as without it.

Both processes read and write Numba's cache under a lock
(:func:`.jit.lock_cache`).

``python -m gpu_dedup.kernels.ahead FOLDER RUN_PID [KERNEL ...]`` is the helper.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import time

from . import jit

#: What the demo and a default run call from Python: ``(kernel, argument
#: types)`` in the order of their first call, the types as Numba writes them
#: (made by ``python bench/first_run.py --record``; a test checks that a
#: default run calls nothing else).
from .ahead_list import SIGNATURES

#: Start a helper only when the run's memory budget is at least this (bytes):
#: the helper's own peak (about 300 MiB) is then under a tenth of it.
MIN_BUDGET = 4 << 30

#: Longest wait for a kernel the helper claimed (seconds); then the run
#: compiles it itself.
MAX_WAIT = 300.0

_STOP = "stop"
_PEAK = "peak"


def kernel(name: str) -> jit.Kernel:
    """The kernel ``module.function`` of this package."""
    import importlib
    module, func = name.split(".", 1)
    return getattr(importlib.import_module(f"{__package__}.{module}"), func)


def parse_types(text: str) -> tuple:
    """Numba's argument types from their text in :data:`SIGNATURES`."""
    from numba.core import types
    value = eval(f"({text},)", {"__builtins__": {}}, dict(vars(types)))  # noqa: S307
    if not all(isinstance(t, types.Type) for t in value):
        raise ValueError(f"not Numba types: {text!r}")
    return value


def types_text(args) -> str:
    """The text of the Numba types of ``args`` (as :func:`parse_types` reads)."""
    from numba import typeof
    return ", ".join(repr(typeof(a)) for a in args)


def grouped(signatures=SIGNATURES) -> list[tuple[str, list[str]]]:
    """``(kernel, [types, ...])`` in the order of each kernel's first call."""
    out: dict[str, list[str]] = {}
    for name, text in signatures:
        out.setdefault(name, []).append(text)
    return list(out.items())


def _claim(folder: str, name: str) -> bool:
    """Claim the kernel ``name`` in ``folder``: True for the first caller."""
    try:
        os.close(os.open(os.path.join(folder, f"claim.{name}"),
                         os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        return True
    except FileExistsError:
        return False


def _touch(path: str) -> None:
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))


# -- the run's side ---------------------------------------------------------

class Helper:
    """The run's side of a helper process: installed as :data:`jit.on_call`
    until each listed kernel has been called once, it claims the kernels
    the run calls first and waits for those the helper claimed. The
    process is started by a thread (:meth:`launch`), since telling whether
    the cache is cold imports Numba. The folder of claims lives as long as
    the process: made when it starts (the kernels the run called already
    claimed in it first), removed by a thread as soon as it ends; a helper
    whose run was killed removes it itself. ``only``: the kernels the
    process compiles (None: every listed one)."""

    def __init__(self, names, only=None):
        self.folder: str | None = None
        self.proc = None                     # the process, once started
        self._names = list(names)
        self._only = None if only is None else list(only)
        self._pending = set(self._names)
        self._lock = threading.Lock()
        self._ended = threading.Event()      # the process ended and its folder is gone
        self.peak_rss_bytes: int | None = None
        #: seconds the run waited for the helper; the kernels the run waited
        #: for, and all those the helper compiled (known once it has ended)
        self.waited = 0.0
        self.from_helper: list[str] = []
        self.compiled: list[str] = []
        self._closed = False
        self.finished = False
        self.thread: threading.Thread | None = None   # the one that runs launch

    def launch(self) -> None:
        """Start the helper process if the cache is cold; else stand down."""
        try:
            if cold() and jit.lock_cache():
                import tempfile
                with self._lock:
                    if not self._closed:
                        self.folder = tempfile.mkdtemp(prefix="gpu-dedup-compile-")
                        for name in self._names:
                            if name not in self._pending:    # called already: the run's
                                _claim(self.folder, name)
                        self.proc = _spawn([sys.executable, "-P", "-m", f"{__package__}.ahead",
                                            self.folder, str(os.getpid()),
                                            *(self._only or ())])
        except OSError:
            self.proc = None
        if self.proc is None:
            self._remove_folder()
            self._stand_down()
            self._ended.set()
            return
        threading.Thread(target=self._reap, name="gpu-dedup-compile-reap", daemon=True).start()

    def _reap(self) -> None:
        """Once the process has ended: its peak, then the folder removed."""
        self.proc.wait()
        with self._lock:
            try:
                with open(os.path.join(self.folder, _PEAK)) as f:
                    self.peak_rss_bytes = int(f.read())
            except (OSError, ValueError):    # killed, or failed before it wrote it
                pass
            with contextlib.suppress(OSError):
                self.compiled = sorted(f[len("done."):] for f in os.listdir(self.folder)
                                       if f.startswith("done."))
            self._remove_folder()
        self._ended.set()

    def _remove_folder(self) -> None:
        if self.folder is not None:
            import shutil
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

    def _stand_down(self) -> None:
        if jit.on_call == self.before_call:
            jit.on_call = None

    def before_call(self, k: jit.Kernel, args) -> None:
        name = k.name
        if name not in self._pending:
            return
        with self._lock:                     # one first call at a time
            if name not in self._pending:
                return
            mine = True                      # no helper (yet, or any more): the run's
            if self.folder is not None:
                try:
                    mine = _claim(self.folder, name)
                except OSError:
                    mine = True
            if not mine:
                self.from_helper.append(name)
                self._wait_for(name)
            self._pending.discard(name)
            if not self._pending:
                self._stand_down()

    def _wait_for(self, name: str) -> None:
        t0 = time.monotonic()
        done = os.path.join(self.folder, f"done.{name}")
        while (not os.path.exists(done) and self.proc.poll() is None
               and time.monotonic() - t0 < MAX_WAIT):
            time.sleep(0.005)
        self.waited += time.monotonic() - t0

    def finish(self, timeout: float = 60.0) -> None:
        """Tell the helper to stop after the kernel it compiles and wait for
        it to end (killing it after ``timeout`` seconds)."""
        self.finished = True
        self._stand_down()
        with self._lock:
            self._closed = True
            proc, folder = self.proc, self.folder
        if proc is None:
            return
        if folder is not None:
            with contextlib.suppress(OSError):
                _touch(os.path.join(folder, _STOP))
        if not self._ended.wait(timeout):
            proc.kill()
            self._ended.wait(timeout)

    def report(self) -> dict | None:
        """This helper as a process of the report (None: none was started)."""
        if self.proc is None:
            return None
        return {"role": "compiler", "pid": self.proc.pid,
                "peak_rss_bytes": self.peak_rss_bytes, "limit_bytes": None,
                "kernels": len(self.compiled), "waited_for": len(self.from_helper),
                "waited_seconds": round(self.waited, 3)}


def _spawn(args: list[str]):
    """Start ``args``, its standard streams closed."""
    import subprocess
    return subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


_current: Helper | None = None


def cold() -> bool:
    """Whether Numba's cache lacks most of the listed kernels: a first run
    (or the first after an upgrade), even if the run compiled a few already.
    Imports Numba."""
    names = [name for name, _ in grouped()]
    try:
        missing = sum(not os.path.exists(kernel(n).compiled._cache._cache_file._index_path)
                      for n in names)
    except (AttributeError, ImportError, OSError, TypeError):   # Numba's cache is no API
        return False
    return missing * 2 > len(names)


def start(budget: int) -> Helper | None:
    """Compile ahead in a helper process, when this process may use more
    than one CPU, ``budget`` (bytes) leaves room for it (:data:`MIN_BUDGET`),
    kernels run compiled, and (decided in a thread) the cache is cold; the
    :class:`Helper`, or None (also while another is active: its starter
    finishes it). Pass it to :func:`finish` once the run's kernels have run."""
    global _current
    if (_current is not None or budget < MIN_BUDGET or _cpus() < 2 or jit.interpreting()
            or jit.on_call is not None or not SIGNATURES):
        return None
    helper = Helper([n for n, _ in grouped()])
    jit.on_call = helper.before_call
    _current = helper
    helper.thread = threading.Thread(target=helper.launch, name="gpu-dedup-compile-ahead",
                                     daemon=True)
    helper.thread.start()
    return helper


def finish(helper: Helper | None) -> None:
    """Finish ``helper`` (what :func:`start` returned; None: nothing)."""
    global _current
    if helper is None or helper.finished:
        return
    if _current is helper:
        _current = None
    helper.finish()


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# -- the helper's side ------------------------------------------------------

def compile_from_last(folder: str, signatures=SIGNATURES, parent: int | None = None) -> list[str]:
    """Compile the kernels of ``signatures`` from the last, each after
    claiming it in ``folder`` (those the run claimed first are skipped),
    until ``folder`` holds a stop file or the process ``parent`` (a pid) is
    no longer this one's parent; the names compiled. An error ends
    the helper: the run compiles what it still needs (and meets the error
    itself, if it needs that kernel)."""
    done = []
    for name, texts in reversed(grouped(signatures)):
        if (os.path.exists(os.path.join(folder, _STOP))
                or (parent is not None and os.getppid() != parent)):
            break                            # told to stop, or the run is gone
        if not _claim(folder, name):
            continue
        try:
            d = kernel(name).compiled
            for text in texts:
                d.compile(parse_types(text))
        finally:                             # the run waits for this file (or the exit)
            _touch(os.path.join(folder, f"done.{name}"))
        done.append(name)
    return done


def main(argv=None) -> int:
    """The helper: ``python -m gpu_dedup.kernels.ahead FOLDER RUN_PID
    [KERNEL ...]`` (only those kernels of the list, when named)."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2 or not os.path.isdir(argv[0]) or not argv[1].isdigit():
        print("usage: python -m gpu_dedup.kernels.ahead FOLDER RUN_PID [KERNEL ...]",
              file=sys.stderr)
        return 2
    folder, parent, names = argv[0], int(argv[1]), (argv[2:] or None)
    try:
        if jit.lock_cache():
            compile_from_last(folder, [s for s in SIGNATURES if names is None or s[0] in names],
                              parent)
    finally:
        if os.getppid() != parent:           # the run ended without removing its folder
            import shutil
            shutil.rmtree(folder, ignore_errors=True)
        else:
            import resource
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            with contextlib.suppress(OSError):
                with open(os.path.join(folder, _PEAK), "w") as f:
                    f.write(str(peak))
    return 0


if __name__ == "__main__":
    sys.exit(main())
