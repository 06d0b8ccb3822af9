"""Seconds per stage."""
from __future__ import annotations

import time
from contextlib import contextmanager


class StageTimer:
    """Accumulates wall-clock seconds per named stage, in first-use order."""

    def __init__(self, on_stage=None):
        self.seconds: dict[str, float] = {}
        self._on_stage = on_stage

    @contextmanager
    def __call__(self, name: str):
        if self._on_stage is not None:
            self._on_stage(name)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0
