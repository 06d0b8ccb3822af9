"""GPU backend. Every GPU package is imported inside functions only."""
from __future__ import annotations


def probe() -> tuple[bool, str]:
    """``(usable, description)`` of the GPU, without raising."""
    try:
        import cupy  # noqa: F401
    except Exception as exc:  # ImportError, or a broken CUDA install
        return False, f"CuPy is not installed or does not import ({type(exc).__name__})"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return False, f"no CUDA driver or device ({exc})"
    if n < 1:
        return False, "no CUDA device"
    return False, "the GPU backend is not available in this version"


class GpuBackend:  # pragma: no cover - replaced by the full backend
    name = "gpu"
