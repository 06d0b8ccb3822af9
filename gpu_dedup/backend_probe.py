"""Whether the GPU backend can run here: the probe of CuPy, the driver,
Numba's CUDA target and a test kernel, and what was found.

Every GPU package is imported inside functions only, so importing this
module costs nothing on a machine without one.
"""
from __future__ import annotations

import os

import numpy as np

from .arrays import to_host

_PROBE: tuple[bool, str] | None = None

#: What a missing, broken or mismatched CUDA install raises: a package or
#: shared library that does not load (ImportError, which Numba's
#: CudaSupportError, NvvmSupportError and NvrtcSupportError derive from;
#: OSError), a failing driver or runtime call or compilation (RuntimeError:
#: CuPy's CUDARuntimeError, CUDADriverError and NVRTCError, Numba's
#: LinkerError) and device memory running out (MemoryError: CuPy's
#: OutOfMemoryError).
CUDA_ERRORS: tuple[type[BaseException], ...] = (ImportError, OSError, RuntimeError, MemoryError)


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__

def simulator_enabled() -> bool:
    """Whether ``NUMBA_ENABLE_CUDASIM`` asks for Numba's CUDA simulator."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0").strip() not in ("", "0")

def probe() -> tuple[bool, str]:
    """``(usable, description)`` of the GPU, without raising; cached.

    Usable means: CuPy imports and sees a device through a working driver,
    Numba's CUDA target is available, and a small kernel that calls the
    shared hash function gives the expected value. The description names the
    device, or says what is missing.
    """
    global _PROBE
    if _PROBE is None:
        _PROBE = _probe()
    return _PROBE

def cuda_errors() -> tuple[type[BaseException], ...]:
    """:data:`CUDA_ERRORS` plus the CUDA errors that derive from ``Exception``
    only, of whichever of Numba and CuPy imports: Numba's CudaDriverError
    (and its CudaAPIError), CudaRuntimeError, NvvmError and NvrtcError, and
    CuPy's CompileException."""
    found = list(CUDA_ERRORS)
    try:
        from numba.cuda.cudadrv import error as numba_errors
    except CUDA_ERRORS:
        numba_errors = None
    for name in ("CudaDriverError", "CudaRuntimeError", "NvvmError", "NvrtcError"):
        cls = getattr(numba_errors, name, None)     # the simulator lacks some
        if isinstance(cls, type) and issubclass(cls, BaseException):
            found.append(cls)
    try:
        from cupy.cuda.compiler import CompileException
        found.append(CompileException)
    except CUDA_ERRORS:
        pass
    return tuple(found)

def _probe() -> tuple[bool, str]:
    if simulator_enabled():
        return False, ("NUMBA_ENABLE_CUDASIM is set: Numba's CUDA simulator cannot run the GPU "
                       "backend")
    try:
        import cupy
    except CUDA_ERRORS as exc:
        return False, (f"CuPy is not installed or does not import ({one_line(exc)}); install "
                       f"gpu-dedup[gpu-cu12] or gpu-dedup[gpu-cu13]")
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except CUDA_ERRORS as exc:
        return False, f"no usable CUDA driver or device ({one_line(exc)})"
    if count < 1:
        return False, "no CUDA device"
    try:
        from numba import cuda
        if not cuda.is_available():
            return False, "Numba's CUDA target cannot use the driver; install numba-cuda"
    except CUDA_ERRORS as exc:
        return False, f"numba-cuda does not import ({one_line(exc)}); install numba-cuda"
    try:
        _smoke_test()
    except cuda_errors() as exc:
        return False, f"a test kernel failed ({one_line(exc)})"
    return True, device_summary()

def _smoke_test() -> None:
    """Run the text fingerprint kernel on one string and check it."""
    import cupy

    from . import reference
    from .kernels import cuda as kc
    text = "gpu-dedup checks its kernels".encode()
    off = cupy.asarray(np.array([0, len(text)], dtype=np.int64))
    data = cupy.asarray(np.frombuffer(text, dtype=np.uint8))
    got = to_host(kc.text_hash128(cupy, off, data))
    want = [reference.xxh64(text, 0), reference.xxh64(text, 1)]
    if got[0].tolist() != want:
        raise RuntimeError("the CUDA XXH64 differs from the reference")

def device_summary() -> str:
    """``"NVIDIA H200, 139.8 GiB, CUDA runtime 13.0, driver 13.0"`` for device 0."""
    import cupy
    rt = cupy.cuda.runtime
    dev = cupy.cuda.Device()
    props = rt.getDeviceProperties(dev.id)
    name = props["name"]
    name = name.decode() if isinstance(name, bytes) else str(name)
    total = props["totalGlobalMem"] / 2 ** 30

    def ver(v):
        return f"{v // 1000}.{(v % 1000) // 10}"
    return (f"{name}, {total:.1f} GiB, CUDA runtime {ver(rt.runtimeGetVersion())}, "
            f"driver {ver(rt.driverGetVersion())}")

def rapids_available(module: str) -> bool:
    """Whether ``cudf`` or ``cugraph`` imports (not cached: the import is)."""
    try:
        __import__(module)
    except cuda_errors():
        return False
    return True
