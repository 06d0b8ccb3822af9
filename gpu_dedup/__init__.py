"""gpu_dedup: near-duplicate detection for text corpora (MinHash + LSH).

The library works on Arrow string arrays; the CLI (``gpu-dedup``) wraps it.

Example:
    >>> import pyarrow as pa
    >>> from gpu_dedup import Config, deduplicate
    >>> texts = pa.array(["the cat sat on the mat", "the cat sat on the mat!", "dogs"])
    >>> result = deduplicate(texts, Config(threshold=0.7))
    >>> result.cluster.tolist()
    [0, 0, 2]
"""
from __future__ import annotations

import importlib.util as _ilu
import os as _os
import sys as _sys

from .version import __version__  # noqa: E402,F401


def _ensure_kernels() -> None:
    # Installed (or editable) packages map ``gpu_dedup.kernels`` to the
    # top-level ``kernels/`` folder. A source checkout used through PYTHONPATH
    # has no such mapping; load the folder under that name ourselves.
    if "gpu_dedup.kernels" in _sys.modules:
        return
    here = _os.path.dirname(_os.path.abspath(__file__))
    try:
        if _ilu.find_spec("gpu_dedup.kernels") is not None:
            return
    except (ImportError, ValueError):
        pass
    init = _os.path.join(here, _os.pardir, "kernels", "__init__.py")
    spec = _ilu.spec_from_file_location("gpu_dedup.kernels", init,
                                        submodule_search_locations=[_os.path.dirname(init)])
    if spec is None or spec.loader is None:
        raise ImportError("gpu_dedup.kernels not found: reinstall the package")
    module = _ilu.module_from_spec(spec)
    _sys.modules["gpu_dedup.kernels"] = module
    spec.loader.exec_module(module)


_ensure_kernels()

from .config import Config  # noqa: E402
from .engine import DedupResult  # noqa: E402
from .pipeline import deduplicate  # noqa: E402


def __getattr__(name: str):
    # the data-frame and semantic entry points, imported on first use: a
    # run of the command line needs neither
    if name == "deduplicate_frame":
        from .frames import deduplicate_frame
        return deduplicate_frame
    if name == "semantic_deduplicate":
        from .semantic.api import semantic_deduplicate
        return semantic_deduplicate
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Config", "DedupResult", "deduplicate", "deduplicate_frame", "semantic_deduplicate",
           "__version__"]
