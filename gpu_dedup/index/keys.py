"""What every part of the index computes alike: the band keys of documents
(:func:`keys_of`), on the backend the run uses, and the options an index
needs (:func:`check_mode`).

The keys are the run's own: the backend's normalization, shingle presence,
MinHash signatures (:func:`gpu_dedup.stages.signatures.signatures`) and band
keys, as the engine's prepare and signature tasks call them, so an index
built or queried with ``--device gpu`` computes them on the GPU, bit for bit
the CPU's.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..config import Config
from ..errors import ConfigError


def check_mode(cfg: Config, what: str) -> None:
    """An index holds documents kept in input order by the greedy rule."""
    if cfg.keep != "first":
        raise ConfigError(f"{what} keeps documents in input order: --keep {cfg.keep} cannot "
                          f"be used with an index")
    if cfg.cluster != "greedy":
        raise ConfigError(f"{what} uses the greedy selection: --cluster {cfg.cluster} cannot "
                          f"be used with an index")


def backend_or_cpu(backend):
    """``backend``, or the CPU backend when None."""
    if backend is not None:
        return backend
    from ..backend import CpuBackend
    return CpuBackend()


def keys_of(texts: pa.Array, cfg: Config, backend=None) -> tuple[np.ndarray, np.ndarray]:
    """Band keys of ``texts`` as a run computes them, on ``backend`` (the CPU
    backend when None): ``(keys, docs)``, the ``M x B`` keys of the
    documents ``docs`` that have shingles."""
    from ..stages.normalize import text_buffers
    from ..stages.signatures import signatures
    be = backend_or_cpu(backend)
    cfg = cfg.resolved()
    norm = be.normalize(texts, cfg.normalize)
    off, data = text_buffers(norm)
    has = np.asarray(be.to_host(be.has_shingles(off, data, cfg.shingle == "word")))
    docs = np.flatnonzero(has).astype(np.int64)
    if not docs.size:
        return np.zeros((0, cfg.bands), np.uint64), docs
    sig, _ = signatures(be, off, data, docs, cfg)
    return np.asarray(be.to_host(be.band_keys(sig, cfg.bands, cfg.rows)), np.uint64), docs
