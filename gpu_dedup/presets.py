"""Presets: named configurations in TOML, and ``--config NAME|PATH``.

A preset is a TOML file whose keys are :class:`gpu_dedup.config.Config`
fields (and, optionally, a ``[storage]`` table: the options of the
``s3://``/``gs://``/``az://`` filesystems, as ``--storage-options`` takes
them, which the command line overrides) (``bands`` and ``rows`` left out means "choose them from the
threshold"). The shipped presets (``default``, ``cookbook``, ``fineweb``,
``nemo``, ``slimpajama``) live in the repository's ``configs/`` folder, which
an installed package carries as ``gpu_dedup/configs``; each names its source
in a comment.

Example:
    >>> cfg = resolve("nemo").config
    >>> (cfg.shingle, cfg.ngram, cfg.bands, cfg.rows)
    ('char', 24, 20, 13)
    >>> resolve("nemo", {"threshold": 0.7}).config.threshold
    0.7
"""
from __future__ import annotations

import os
from dataclasses import dataclass, fields

from .config import Config
from .errors import ConfigError
from .params import approx_threshold, collision_probability

#: Config fields a preset may set.
FIELDS = tuple(f.name for f in fields(Config))
_TYPES = {"shingle": str, "ngram": int, "normalize": (str, list), "num_perm": int,
          "bands": int, "rows": int, "threshold": (float, int), "seed": int,
          "signature_bits": int, "sketch": str, "similarity": str, "verify": bool, "exact": bool,
          "keep": str, "cluster": str, "bucket_limit": int, "max_rounds": int, "fp_weight": (float, int),
          "fn_weight": (float, int)}


def preset_dirs() -> list[Path]:
    """Where presets are looked for: the repository's ``configs/`` (a source
    checkout or an editable install), then the installed package's copy."""
    from pathlib import Path           # a run without --config looks for none
    here = Path(__file__).resolve().parent
    dirs = [here.parent / "configs", here / "configs"]
    try:
        from importlib.resources import files
        d = files("gpu_dedup.configs")
        dirs.append(Path(str(d)))
    except (ImportError, ModuleNotFoundError, TypeError):
        pass
    out = []
    for d in dirs:
        if d.is_dir() and d not in out:
            out.append(d)
    return out


def preset_names() -> list[str]:
    """The names of the shipped presets, sorted."""
    names = set()
    for d in preset_dirs():
        names.update(p.stem for p in d.glob("*.toml"))
    return sorted(names)


def preset_path(name: str) -> Path | None:
    for d in preset_dirs():
        p = d / f"{name}.toml"
        if p.is_file():
            return p
    return None


def _looks_like_path(spec: str) -> bool:
    return spec.endswith(".toml") or os.sep in spec or "/" in spec or os.path.isfile(spec)


def load_preset(spec: str) -> tuple[dict, str]:
    """``(values, source)`` of a preset name or a TOML file path."""
    if _looks_like_path(spec):
        from pathlib import Path
        path = Path(spec)
        if not path.is_file():
            raise ConfigError(f"--config {spec}: no such file")
    else:
        path = preset_path(spec)
        if path is None:
            raise ConfigError(f"--config {spec}: unknown preset; choose one of "
                              f"{', '.join(preset_names()) or '(none found)'} or give a "
                              f".toml file")
    import tomllib                      # a run without --config reads no TOML
    try:
        with open(path, "rb") as f:
            values = tomllib.load(f)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    storage = values.pop("storage", None)
    if storage is not None:
        if not isinstance(storage, dict):
            raise ConfigError(f"{path}: [storage] must be a table of filesystem options")
        from .io.fs import default_storage_options
        default_storage_options(storage)         # --storage-options, if given, wins
    for key, v in values.items():
        if key not in _TYPES:
            raise ConfigError(f"{path}: unknown key {key!r}; expected some of "
                              f"{', '.join(_TYPES)}")
        want = _TYPES[key]
        if isinstance(v, bool) and want is not bool:
            ok = False
        else:
            ok = isinstance(v, want)
        if not ok:
            raise ConfigError(f"{path}: key {key!r} has the wrong type "
                              f"({type(v).__name__}: {v!r})")
    if "normalize" in values and isinstance(values["normalize"], list):
        values["normalize"] = tuple(values["normalize"])
    return values, str(path)


@dataclass(frozen=True)
class Resolved:
    """A configuration with where it came from."""

    config: Config
    preset: str | None
    source: str | None
    overrides: dict


def resolve(spec: str | None = None, overrides: dict | None = None,
            base: dict | None = None) -> Resolved:
    """The configuration of preset ``spec`` (None: ``base``, or
    :class:`Config`'s defaults) with ``overrides`` (options the user gave)
    applied.

    Giving ``threshold`` or ``num_perm`` without ``bands`` and ``rows``
    keeps the preset's split; if that split no longer fits, the error says
    what to add.
    """
    overrides = dict(overrides or {})
    values: dict = dict(base or {})
    source = None
    if spec:
        values, source = load_preset(spec)
    merged = {**values, **overrides}
    if ("bands" in overrides) != ("rows" in overrides):
        # one of the pair given: the other must come from the same place
        missing = "rows" if "bands" in overrides else "bands"
        if missing not in values:
            raise ConfigError("--bands and --rows go together: give both, or neither and "
                              "--threshold")
    b, r, k = merged.get("bands"), merged.get("rows"), merged.get("num_perm", Config.num_perm)
    if (spec and b is not None and r is not None and b * r > k
            and "bands" not in overrides and "rows" not in overrides):
        raise ConfigError(f"--config {spec} uses {b} bands x {r} rows = {b * r} hashes, more "
                          f"than --num-perm {k}; also pass --bands B --rows R with B x R <= {k} "
                          f"(gpu-dedup tune --threshold {merged.get('threshold', 0.8)} "
                          f"--num-perm {k} recommends one)")
    try:
        cfg = Config(**merged)
    except TypeError as exc:
        raise ConfigError(f"invalid configuration: {exc}") from exc
    return Resolved(cfg, spec, source, overrides)


def to_toml(res: Resolved) -> str:
    """The resolved configuration as TOML that ``--config`` reads back."""
    c = res.config.resolved()
    lines = []
    if res.preset:
        lines.append(f"# preset: {res.preset} ({res.source})")
    else:
        lines.append("# preset: none (built-in defaults)")
    if res.overrides:
        lines.append("# overridden on the command line: " + ", ".join(sorted(res.overrides)))
    if res.config.bands is None:
        lines.append("# bands and rows chosen from the threshold")
    lines.append(f"# name: {c.name}")
    d = c.to_dict()
    for key in FIELDS:
        v = d[key]
        if key == "normalize":
            lines.append(f"normalize = [{', '.join(repr(x).replace(chr(39), chr(34)) for x in v)}]"
                         if v else 'normalize = "none"')
        elif isinstance(v, bool):
            lines.append(f"{key} = {'true' if v else 'false'}")
        elif isinstance(v, str):
            lines.append(f'{key} = "{v}"')
        else:
            lines.append(f"{key} = {v!r}")
    sims = (0.5, 0.7, float(c.threshold), 0.9)
    probs = ", ".join(f"{s:g}: {float(collision_probability(s, c.bands, c.rows)):.3f}"
                      for s in sorted(set(sims)))
    lines.append(f"# S-curve: rises through (1/b)^(1/r) = "
                 f"{approx_threshold(c.bands, c.rows):.3f}; P(candidate) at {probs}")
    return "\n".join(lines) + "\n"
