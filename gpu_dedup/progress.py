"""Progress bars per stage, on a terminal.

:class:`StageProgress` is the ``on_stage`` / ``on_progress`` pair that
:func:`gpu_dedup.pipeline.run` accepts: each stage gets its own line (a bar for
every stage whose tasks report as they complete, on every executor; elapsed
seconds for the report). Bars appear only after a stage has run for ``delay`` seconds, so
short runs print nothing, and only when stderr is a terminal.
"""
from __future__ import annotations

import shutil
import sys
import threading
import time


def wanted(quiet: bool = False, stream=None) -> bool:
    """Whether to show progress: not quiet, stderr a terminal, tqdm installed."""
    stream = stream or sys.stderr
    if quiet or not getattr(stream, "isatty", lambda: False)():
        return False
    try:
        import tqdm  # noqa: F401
    except ImportError:
        return False
    return True


#: What compiling the CPU kernels takes on a first run: on two cores, 12-15 s
#: of the demo's 13-17 s with a second process compiling ahead
#: (``kernels/ahead.py``), 20-25 s without one (one core, or a budget under 4 GiB).
COMPILE_SECONDS = "15 to 25 seconds"


def compile_notice() -> str | None:
    """The line that tells the user the CPU kernels are being compiled: on the
    first run on a machine (or after an upgrade), when Numba's cache does not
    hold them yet; None when it does, or when it cannot tell."""
    import os

    from .kernels.jit import interpreting
    if interpreting():                   # nothing is compiled
        return None
    try:
        from .kernels import cpu
        # a kernel every run and the demo compile (the read stage's fingerprints)
        cached = os.path.exists(cpu._text_hash_docs.compiled._cache._cache_file._index_path)
    except (AttributeError, ImportError, OSError, TypeError):   # Numba's cache is no API
        return None
    if cached:
        return None
    return (f"compiling the kernels for this machine, once ({COMPILE_SECONDS}); later runs "
            f"load them from Numba's cache")


def noticing(notice, echo, on_stage=None):
    """``on_stage`` that first says ``notice`` with ``echo``, once, as the
    first stage after ``read`` starts: where most kernels compile, and after
    the inputs were read, so that a run refused for its options, its output
    directory or a bad record says only why. ``notice`` is the line, or a
    function that gives it then, or None (:func:`compile_notice`, asked
    once the run knows whether it compiles anything)."""
    if notice is None:
        return on_stage
    said = []

    def stage(name: str) -> None:
        if name != "read" and not said:
            said.append(True)
            line = notice() if callable(notice) else notice
            if line is not None:
                echo(line)
        if on_stage is not None:
            on_stage(name)
    return stage


#: Stages that report the fraction done; the others show elapsed seconds.
FRACTION_STAGES = ("read", "exact", "signatures", "buckets", "select", "write")


class StageProgress:
    """One tqdm bar per stage, refreshed by a background thread.

    Example:
        >>> with StageProgress() as prog:                       # doctest: +SKIP
        ...     run(inputs, out, on_stage=prog.stage, on_progress=prog.fraction)
    """

    def __init__(self, stream=None, delay: float = 0.5, refresh: float = 0.25):
        self.stream = stream or sys.stderr
        self.delay = delay
        self.refresh = refresh
        self._bar = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None
        self._t0 = time.monotonic()
        self._name = None

    def __enter__(self):
        self._thread = threading.Thread(target=self._tick, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _tick(self):
        while not self._stop.wait(self.refresh):
            with self._lock:
                if self._bar is not None and time.monotonic() - self._t0 >= self.delay:
                    self._bar.refresh()

    def stage(self, name: str) -> None:
        """A new stage starts: finish the previous bar and open one for ``name``."""
        from tqdm import tqdm
        with self._lock:
            if self._bar is not None and self._name == name:
                return                      # the same stage entered again: one line
            self._finish()
            self._name = name
            fmt = ("{desc} {percentage:3.0f}%|{bar:30}| {elapsed}{postfix}"
                   if name in FRACTION_STAGES else "{desc} {elapsed}")
            self._t0 = time.monotonic()
            size = shutil.get_terminal_size((100, 24))   # a pty of unknown size: 100 x 24
            self._bar = tqdm(total=100, desc=f"{name:<11}", file=self.stream, leave=True,
                             delay=self.delay, bar_format=fmt, ncols=max(size.columns, 40),
                             nrows=max(size.lines, 10))

    def fraction(self, f: float) -> None:
        """The current stage is ``f`` (0..1) done."""
        with self._lock:
            if self._bar is None:
                return
            n = max(0.0, min(1.0, float(f))) * 100
            self._bar.update(n - self._bar.n)

    def read_bytes(self, done: int, total: int) -> None:
        """Input bytes read so far of ``total``, shown beside the bar."""
        with self._lock:
            if self._bar is not None:
                self._bar.set_postfix_str(f"{done / 1e6:,.1f} of {total / 1e6:,.1f} MB read",
                                          refresh=False)

    def _finish(self):
        if self._bar is not None:
            self._bar.update(100 - self._bar.n)
            self._bar.close()
            self._bar = None

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            self._finish()
        if self._thread is not None:
            self._thread.join(timeout=1)
            self._thread = None
