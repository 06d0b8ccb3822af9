"""What the CUDA kernels need from Numba's CUDA simulator, apart from the kernels.

Under the simulator (``NUMBA_ENABLE_CUDASIM=1``, set before Numba is
imported) a ``@cuda.jit`` kernel runs as Python, one Python thread per CUDA
thread, and so must the shared ``@njit`` functions it calls: compiled CPU
code cannot take the simulator's arrays. :func:`shared` gives a kernel module
what it calls for a shared function: its Numba dispatcher on a GPU (Numba
compiles it for the device), its plain Python twin in the simulator.

Importing this module imports ``numba.cuda``: only the GPU path imports it.
"""
from __future__ import annotations

import functools
import sys
import threading
import traceback

import numpy as np
from numba import cuda

#: True when Numba's CUDA simulator stands in for the GPU.
SIMULATOR = cuda.jit.__module__.startswith("numba.cuda.simulator")


def shared_alloc(shape, dtype):
    """A simulated block's shared array (looked up at call time)."""
    return np.empty(shape, dtype)


def lock_shared_arrays() -> None:
    """Make the simulator's ``cuda.shared.array`` give every thread of a block
    the same array.

    The simulator allocates a block's shared array when the first of its
    threads reaches the line, without a lock: two threads that reach it
    together may each get their own array, and the block then computes on
    memory its other threads never wrote (a rare, load-dependent wrong
    signature). This is the simulator's own lookup by calling line, under a
    lock; it must be the method itself, since the line is found from the
    caller's frame. Installed once; later calls do nothing."""
    from numba.cuda.simulator import kernelapi

    fake_shared = kernelapi.FakeCUDAShared
    if getattr(fake_shared, "_gpu_dedup_locked", False):
        return
    unlocked = fake_shared.array
    lock = threading.Lock()

    def array(self, shape, dtype, alignment=None):
        if shape == 0:                    # dynamic shared memory: no lookup
            return unlocked(self, shape, dtype)
        if isinstance(dtype, kernelapi.types.Type):
            dtype = kernelapi.numpy_support.as_dtype(dtype)
        caller = traceback.extract_stack(sys._getframe(), limit=2)[0][0:2]
        with lock:
            res = self._allocations.get(caller)
            if res is None:
                res = self._allocations[caller] = shared_alloc(shape, dtype)
        return res

    fake_shared.array = array
    fake_shared._gpu_dedup_locked = True


# -- the shared functions, as the simulated kernels see them --------------------

def shared(kernel):
    """What a kernel calls for the shared ``@njit`` function ``kernel`` (a
    :class:`kernels.jit.Kernel`).

    On a GPU it is its Numba dispatcher, which Numba compiles for the
    device. In the simulator it is its Python twin (:attr:`Kernel.twin`),
    run with wrap-around integer overflow (NumPy scalars wrap, and would
    otherwise warn).
    """
    if not SIMULATOR:
        return kernel.compiled
    f = kernel.twin

    @functools.wraps(f)
    def call(*args):
        with np.errstate(over="ignore"):
            return f(*args)
    return call


if SIMULATOR:
    lock_shared_arrays()
