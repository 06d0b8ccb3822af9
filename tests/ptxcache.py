"""CUDA kernels compiled to PTX for sm_90 without a GPU, each (kernel,
argument types) once per test process.

``test_ptx`` compiles every kernel for the types the backend launches it
with, and ``test_gpu_backend`` reads the floating-point instructions of the
hash kernels; most of their signatures are the same. :func:`compile_ptx`
compiles the ones not compiled yet in one process without the simulator
(Numba's CUDA target with NVVM, ``numba-cuda[cu13]``) and keeps every result,
so a signature both tests name is compiled once. The two tests share an
``xdist_group``, so they run in one worker and share this cache.

Signatures are strings in the notation of ``test_ptx``'s recorder:
``int64[::1]`` for a C-contiguous vector, ``uint32[:, ::1]`` for a matrix,
``int64`` or ``boolean`` for a scalar.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

COMPILE = textwrap.dedent(r'''
    import json, re, sys, types
    out = {"target": None, "nvvm": None, "results": []}
    try:
        import numba_cuda  # noqa: F401  (the NVIDIA target, not Numba's built-in one)
        from cuda.pathfinder import load_nvidia_dynamic_lib
        load_nvidia_dynamic_lib("nvvm")
    except Exception as exc:
        out["target"] = f"{type(exc).__name__} {exc}"
    from numba import cuda
    import numba.cuda.dispatcher as dispatcher
    # device functions are compiled for the current device's compute
    # capability; there is none here, so name the H200's
    dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=(9, 0))
    try:
        cuda.compile_ptx(lambda a: None, "(int64[::1],)", cc=(9, 0))
    except Exception as exc:
        out["nvvm"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
        print(json.dumps(out))
        sys.exit(0)
    from gpu_dedup.kernels import cuda_kernels as kk
    for name, sig in json.loads(sys.stdin.read()):
        try:
            ptx, _ = cuda.compile_ptx(getattr(kk, name).py_func, sig, cc=(9, 0))
        except Exception as exc:
            out["results"].append([name, sig, {"error": f"{type(exc).__name__}: {exc}"[:600]}])
            continue
        # the floating-point instructions of the kernel
        fl = sorted(set(re.findall(r"\b[a-z]+(?:\.[a-z0-9]+)*\.f(?:32|64)\b", ptx)))
        out["results"].append([name, sig, {"floats": fl}])
    print(json.dumps(out))
''')

#: (kernel, signature) -> {"floats": [...]} or {"error": "..."}
_DONE: dict[tuple[str, str], dict] = {}
#: What the first compiling process said of numba-cuda and NVVM.
_STATUS: dict[str, str | None] = {}


def compile_ptx(kernels: dict[str, list[str]]) -> dict:
    """Compile each kernel of ``kernels`` (name -> signatures) for sm_90.

    Returns ``{"target": why, "nvvm": why, "ptx": {(name, sig): result}}``:
    ``target`` says why numba-cuda or its NVVM library would not load and
    ``nvvm`` why NVVM could not compile at all (then ``ptx`` is empty); both
    are None when they could."""
    wanted = [(name, sig) for name, sigs in kernels.items() for sig in sigs]
    todo = [key for key in dict.fromkeys(wanted) if key not in _DONE]
    if not todo and _STATUS:
        return {**_STATUS, "ptx": {key: _DONE[key] for key in wanted}}
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-c", COMPILE], input=json.dumps(todo),
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    _STATUS.update(target=got["target"], nvvm=got["nvvm"])
    if got["nvvm"]:
        return {"target": got["target"], "nvvm": got["nvvm"], "ptx": {}}
    for name, sig, result in got["results"]:
        _DONE[name, sig] = result
    return {"target": got["target"], "nvvm": None, "ptx": {key: _DONE[key] for key in wanted}}
