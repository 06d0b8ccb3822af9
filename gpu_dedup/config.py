"""The frozen run configuration.

Its string form names what made a result, e.g. ``char5_nfkc-lower-ws_k128_b18r7_t0.8_s42``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from .errors import ConfigError
from .params import DEFAULT_FN_WEIGHT, DEFAULT_FP_WEIGHT, choose_bands_rows

NORMALIZATIONS = ("none", "nfkc", "lower", "punct", "ws", "digits")
DEFAULT_NORMALIZE = ("nfkc", "lower", "ws")


def parse_normalize(spec) -> tuple[str, ...]:
    """``"nfkc,lower"`` -> ``("nfkc", "lower")``; ``"none"`` -> ``()``."""
    if spec is None:
        return DEFAULT_NORMALIZE
    if isinstance(spec, str):
        parts = [p.strip() for p in spec.split(",") if p.strip()]
    else:
        parts = list(spec)
    for p in parts:
        if p not in NORMALIZATIONS:
            raise ConfigError(f"--normalize: unknown step {p!r}; choose from {', '.join(NORMALIZATIONS)}")
    if "none" in parts:
        if len(parts) > 1:
            raise ConfigError("--normalize: 'none' cannot be combined with other steps")
        return ()
    return tuple(parts)


@dataclass(frozen=True)
class Config:
    """Everything that determines a result.

    Args:
        shingle: ``"char"`` (n-grams of code points) or ``"word"`` (n-grams of
            whitespace-separated tokens).
        ngram: shingle length ``n``.
        normalize: normalization steps applied before shingling, in order
            (``nfkc``, ``lower``, ``punct``, ``ws``, ``digits``); empty for none.
        num_perm: number of hash functions ``K``.
        bands, rows: LSH split; chosen from ``threshold`` when both are None.
        threshold: similarity at which two documents are duplicates: a
            verified candidate edge is accepted when its score (see
            ``similarity``) is at least this; with ``verify`` off it has no
            effect on the result. It also chooses ``bands`` and ``rows`` when
            both are None, and only then.
        seed: seed of the hash functions.
        signature_bits: 32 or 64.
        sketch: ``"oph"`` (one permutation into ``K`` bins, optimal
            densification: one hash per shingle; see ``kernels.hashing``), the
            default: as accurate as the classic sketch on every benchmark
            corpus and several times faster; or ``"minhash"`` (``K`` hash
            functions, the minimum of each).
        similarity: ``"jaccard"`` (exact Jaccard of the shingle sets) or
            ``"signature"`` (the MinHash estimate) to verify candidates.
        verify: verify candidate edges (otherwise every candidate is an edge).
        exact: cluster identical normalized texts before the fuzzy stages.
        keep: keep priority: ``"first"`` (input order) or ``"longest"``
            (length in code points, then input order).
        cluster: ``"greedy"``: documents are taken in keep priority, and one
            is removed exactly when it is verified similar to a document
            already kept that shares a bucket with it (see
            ``stages.select``); every removed document names that kept one.
            ``"components"``: connected components of the verified edges,
            one document kept per component (transitive: members of a chain
            may be far from the kept one).
        bucket_limit: in greedy selection, the number of kept documents of
            a bucket each document is compared with (the first by
            priority); comparisons beyond it are skipped and counted.
        max_rounds: in components mode, re-anchoring rounds inside buckets
            (see ``stages.lsh``).
    """

    shingle: str = "char"
    ngram: int = 5
    normalize: tuple = DEFAULT_NORMALIZE
    num_perm: int = 128
    bands: int | None = None
    rows: int | None = None
    threshold: float = 0.8
    seed: int = 42
    signature_bits: int = 32
    sketch: str = "oph"
    similarity: str = "jaccard"
    verify: bool = True
    exact: bool = True
    keep: str = "first"
    cluster: str = "greedy"
    bucket_limit: int = 32
    max_rounds: int = 4
    fp_weight: float = field(default=DEFAULT_FP_WEIGHT, compare=True)
    fn_weight: float = field(default=DEFAULT_FN_WEIGHT, compare=True)

    def __post_init__(self):
        object.__setattr__(self, "normalize", parse_normalize(self.normalize))
        if self.shingle not in ("char", "word"):
            raise ConfigError(f"--shingle must be 'char' or 'word', got {self.shingle!r}")
        if not isinstance(self.ngram, int) or self.ngram < 1:
            raise ConfigError(f"--ngram must be a positive integer, got {self.ngram!r}")
        if not isinstance(self.num_perm, int) or self.num_perm < 1:
            raise ConfigError(f"--num-perm must be a positive integer, got {self.num_perm!r}")
        if not 0.0 < float(self.threshold) <= 1.0:
            raise ConfigError(f"--threshold must be in (0, 1], got {self.threshold}")
        if self.signature_bits not in (32, 64):
            raise ConfigError(f"--signature-bits must be 32 or 64, got {self.signature_bits}")
        if self.sketch not in ("minhash", "oph"):
            raise ConfigError(f"--sketch must be 'minhash' or 'oph', got {self.sketch!r}")
        if self.similarity not in ("jaccard", "signature"):
            raise ConfigError(f"--similarity must be 'jaccard' or 'signature', got {self.similarity!r}")
        if self.keep not in ("first", "longest"):
            raise ConfigError(f"--keep must be 'first' or 'longest', got {self.keep!r}")
        if self.cluster not in ("greedy", "components"):
            raise ConfigError(f"--cluster must be 'greedy' or 'components', got {self.cluster!r}")
        if not isinstance(self.bucket_limit, int) or self.bucket_limit < 1:
            raise ConfigError(f"--bucket-limit must be a positive integer, got "
                              f"{self.bucket_limit!r}")
        if (self.bands is None) != (self.rows is None):
            raise ConfigError("--bands and --rows go together: give both, or neither and --threshold")
        if self.bands is not None:
            if self.bands < 1 or self.rows < 1:
                raise ConfigError("--bands and --rows must be positive")
            if self.bands * self.rows > self.num_perm:
                raise ConfigError(f"--bands x --rows = {self.bands * self.rows} exceeds --num-perm "
                                  f"{self.num_perm}; lower them or raise --num-perm")
        if self.seed < 0 or self.seed >= 2 ** 63:
            raise ConfigError(f"--seed must be in [0, 2**63), got {self.seed}")

    def resolved(self) -> "Config":
        """The same configuration with bands and rows filled in from the threshold."""
        if self.bands is not None:
            return self
        choice = choose_bands_rows(float(self.threshold), self.num_perm,
                                   self.fp_weight, self.fn_weight)
        return replace(self, bands=choice.bands, rows=choice.rows)

    @property
    def name(self) -> str:
        c = self.resolved()
        norm = "-".join(c.normalize) or "raw"
        sketch = "" if c.sketch == "oph" else f"_{c.sketch}"
        return (f"{c.shingle}{c.ngram}_{norm}_k{c.num_perm}{sketch}_b{c.bands}r{c.rows}"
                f"_t{c.threshold:g}_s{c.seed}")

    def __str__(self) -> str:
        return self.name

    def to_dict(self) -> dict:
        d = asdict(self)
        d["normalize"] = list(self.normalize)
        return d
