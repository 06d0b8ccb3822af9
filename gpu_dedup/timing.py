"""Seconds per stage, and what the process spent in each: CPU seconds, page
faults and bytes read from and written to storage."""
from __future__ import annotations

import time
from contextlib import contextmanager

try:
    import resource
except ImportError:            # not on every system
    resource = None


def storage_bytes() -> tuple[int, int] | None:
    """Bytes this process (its threads included) has read from and written
    to storage so far (``/proc/self/io``: what reached the devices, not
    what the page cache served), or None where the system does not say."""
    try:
        with open("/proc/self/io", "rb") as f:
            fields = dict(line.split(b":", 1) for line in f.read().splitlines() if b":" in line)
        return int(fields[b"read_bytes"]), int(fields[b"write_bytes"])
    except (OSError, KeyError, ValueError):
        return None


def cpu_usage() -> dict:
    """This process's CPU seconds (its threads included) so far: ``user``,
    ``system``, and the page faults that needed no read (``minor``) and
    those that did (``major``); where the system does not say, ``user``
    alone (all CPU seconds)."""
    if resource is None:
        return {"user": time.process_time()}
    r = resource.getrusage(resource.RUSAGE_SELF)
    return {"user": r.ru_utime, "system": r.ru_stime, "minor": r.ru_minflt,
            "major": r.ru_majflt}


#: What :meth:`StageTimer.usage` reports of :func:`cpu_usage`, by name.
USAGE_KEYS = {"user": "cpu_user_seconds", "system": "cpu_system_seconds",
              "minor": "minor_page_faults", "major": "major_page_faults"}


class StageTimer:
    """Accumulates, per named stage in first-use order, wall-clock seconds
    (:attr:`seconds`) and what this process spent (:attr:`usage`:
    ``cpu_seconds``, of them ``cpu_user_seconds`` and
    ``cpu_system_seconds``, ``minor_page_faults``, ``major_page_faults``,
    ``storage_read_bytes``, ``storage_written_bytes``; those the system does
    not count absent). Many minor faults and system seconds mean memory
    handed back and taken again; major faults and storage reads, data that
    was not in the page cache. Work done by other processes (a pool or a
    Dask cluster) is not in :attr:`usage`."""

    def __init__(self, on_stage=None):
        self.seconds: dict[str, float] = {}
        self.usage: dict[str, dict] = {}
        self._on_stage = on_stage

    @contextmanager
    def __call__(self, name: str):
        if self._on_stage is not None:
            self._on_stage(name)
        t0, c0, io0 = time.perf_counter(), cpu_usage(), storage_bytes()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0
            c1 = cpu_usage()
            u = self.usage.setdefault(name, {"cpu_seconds": 0.0})
            for k, v in c1.items():
                u["cpu_seconds"] += v - c0[k] if k in ("user", "system") else 0
                u[USAGE_KEYS[k]] = u.get(USAGE_KEYS[k], 0) + v - c0[k]
            io1 = storage_bytes()
            if io0 is not None and io1 is not None:
                u["storage_read_bytes"] = u.get("storage_read_bytes", 0) + io1[0] - io0[0]
                u["storage_written_bytes"] = u.get("storage_written_bytes", 0) + io1[1] - io0[1]
