"""Deduplicate a table in memory: a ``pyarrow.Table``, a pandas or Polars
DataFrame, or a Hugging Face ``datasets.Dataset``.

:func:`deduplicate_frame` hands the text column, as Arrow, to
:func:`gpu_dedup.pipeline.deduplicate` and returns the same kind of object
with the per-document result added as columns. pandas, Polars and
``datasets`` are imported only when given one of their objects.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa

from .compute import pc
from .config import Config
from .errors import ConfigError, InputError
from .ids import duplicate_id_error, first_duplicate

__all__ = ["ADDED_COLUMNS", "deduplicate_frame"]

#: The columns :func:`deduplicate_frame` adds, in order.
ADDED_COLUMNS = ("cluster", "kept", "duplicate_of", "similarity")

#: Keyword options passed on to :func:`gpu_dedup.pipeline.deduplicate`.
_RUN_OPTIONS = ("backend", "memory_limit", "scheduler", "workers", "partition_bytes",
                "on_stage", "on_progress")
#: Keyword options that choose the backend (instead of ``backend``).
_DEVICE_OPTIONS = ("device", "gpu_memory")
_CONFIG_FIELDS = tuple(f.name for f in dataclasses.fields(Config))

_SUPPORTED = "a pyarrow.Table, a pandas or Polars DataFrame, or a datasets.Dataset"


def deduplicate_frame(frame, text: str = "text", id: str | None = None,
                      config: Config | None = None, *, semantic: bool = False,
                      embedding: str | None = None, **options):
    """Find the near-duplicate rows of a table and mark them.

    The text column goes to :func:`gpu_dedup.pipeline.deduplicate` as an
    Arrow array, without a copy where Arrow allows it; the result is the
    same as ``gpu-dedup run`` over the same rows with the same options.

    Args:
        frame: a ``pyarrow.Table``, a ``pandas.DataFrame``, a
            ``polars.DataFrame`` or a ``datasets.Dataset``.
        text: the name of the column holding the texts (strings, no nulls).
        id: the name of a column of unique ids (strings or integers, no
            nulls), or None to name documents by their row number
            (``"0"``, ``"1"``, ...).
        config: the run's :class:`gpu_dedup.Config` (defaults if None).
        semantic: find duplicates by meaning instead
            (:func:`gpu_dedup.semantic_deduplicate`): ``options`` are then
            its own (``threshold``, ``search``, ``keep``, ``model``,
            ``probe``, ``n_clusters``, ``seed``, ``memory_limit``) and
            ``similarity`` is the cosine.
        embedding: with ``semantic``, a column of precomputed embeddings
            (a list of floats a row) to use instead of embedding ``text``.
        **options: :class:`~gpu_dedup.Config` fields that override
            ``config`` (``threshold=0.9``, ``shingle="word"``...); the run
            options of :func:`gpu_dedup.pipeline.deduplicate` (``backend``,
            ``memory_limit``, ``scheduler``, ``workers``,
            ``partition_bytes``, ``on_stage``, ``on_progress``); or
            ``device`` (``cpu``, ``gpu`` or ``auto``) and ``gpu_memory``
            instead of ``backend``.

    Returns:
        An object of the same type as ``frame``, its columns unchanged, with
        four columns added: ``cluster`` (int64, the input row of the kept
        document of the row's cluster), ``kept`` (bool), ``duplicate_of``
        (string: the id of the kept document a removed row duplicates, null
        for kept rows) and ``similarity`` (float64: the removed row's
        similarity to it, null for kept rows; NaN in pandas).

    Raises:
        ConfigError: a column that does not exist or has the wrong type, a
            column name that clashes with an added column, or an unknown
            option.
        InputError: a null text, or a null or duplicated id.
        TypeError: ``frame`` is none of the supported types.

    Example:
        >>> import pyarrow as pa
        >>> from gpu_dedup import deduplicate_frame
        >>> table = pa.table({"id": ["a", "b", "c"],
        ...                   "text": ["the cat sat on the mat",
        ...                            "the cat sat on the mat!", "dogs bark"]})
        >>> out = deduplicate_frame(table, text="text", id="id", threshold=0.7)
        >>> out["kept"].to_pylist(), out["duplicate_of"].to_pylist()
        ([True, False, True], [None, 'a', None])
    """
    from .pipeline import deduplicate

    kind = _kind(frame)
    names = _column_names(frame, kind)
    if semantic:
        if config is not None:
            raise ConfigError("deduplicate_frame: a Config is for near-duplicates by shingles; "
                              "give semantic options as keywords")
        cfg, run_kw = Config(), {}
    elif embedding is not None:
        raise ConfigError("deduplicate_frame: embedding= needs semantic=True")
    else:
        cfg, run_kw = _split_options(config, options)
    for col, what in ((text, "text"), (id, "id")):
        if col is not None and col not in names:
            raise ConfigError(f"deduplicate_frame: no {what} column {col!r}; the columns are "
                              f"{', '.join(map(repr, names)) or '(none)'}")
    clash = [c for c in ADDED_COLUMNS if c in names]
    if clash:
        raise ConfigError(f"deduplicate_frame: the frame already has column(s) "
                          f"{', '.join(map(repr, clash))}, which the result adds; "
                          f"rename or drop them first")

    texts = _texts(_column(frame, kind, text), text)
    ids = _ids(_column(frame, kind, id), id) if id is not None else None
    if ids is not None:
        _check_unique(ids, id)
    _check_no_nulls(texts, text, ids)

    n = len(texts)
    if n:
        r = (_semantic(frame, kind, names, texts, embedding, options) if semantic
             else deduplicate(texts, cfg, **run_kw))
        cluster, kept, dup, sim = r.cluster, r.kept, r.duplicate_of, r.similarity
    else:                                   # nothing to run the stages over
        cluster, dup = np.zeros(0, np.int64), np.zeros(0, np.int64)
        kept, sim = np.zeros(0, bool), np.zeros(0, np.float64)
    kept = np.asarray(kept, dtype=bool)
    removed = ~kept
    # a removed row's kept document, a null index for a kept row
    target = pa.array(np.where(removed, np.asarray(dup, dtype=np.int64), 0), pa.int64(),
                      mask=kept)
    if ids is None:
        duplicate_of = target.cast(pa.string())
    else:
        duplicate_of = ids.take(target).cast(pa.string())
    columns = {
        "cluster": pa.array(np.asarray(cluster, dtype=np.int64), pa.int64()),
        "kept": pa.array(kept, pa.bool_()),
        "duplicate_of": duplicate_of,
        "similarity": pa.array(np.asarray(sim, dtype=np.float64), pa.float64(), mask=kept),
    }
    key = (f"semantic {sorted(options.items())!r} {embedding!r}" if semantic
           else f"{cfg.to_dict()!r}") + f"|{text!r}|{id!r}"
    return _attach(frame, kind, columns, key)


def _semantic(frame, kind: str, names, texts, embedding, options: dict):
    """:func:`gpu_dedup.semantic_deduplicate` of the frame's texts, or of its
    column ``embedding``."""
    from .semantic.api import semantic_deduplicate
    allowed = ("threshold", "search", "keep", "model", "probe", "n_clusters", "seed",
               "memory_limit")
    unknown = [k for k in options if k not in allowed]
    if unknown:
        raise ConfigError(f"deduplicate_frame: unknown semantic option(s) "
                          f"{', '.join(map(repr, unknown))}; give {', '.join(allowed)}")
    if embedding is None:
        return semantic_deduplicate(texts, **options)
    if embedding not in names:
        raise ConfigError(f"deduplicate_frame: no embedding column {embedding!r}")
    from .semantic.embed import embeddings_from_column
    emb = embeddings_from_column(_column(frame, kind, embedding), f"column {embedding!r}")
    return semantic_deduplicate(embeddings=emb, **options)


# ---------------------------------------------------------------------------
# options
# ---------------------------------------------------------------------------

def _split_options(config: Config | None, options: dict) -> tuple[Config, dict]:
    """The run's configuration (``config`` with the Config fields of
    ``options`` on top) and the keyword arguments of ``deduplicate``."""
    if config is not None and not isinstance(config, Config):
        raise ConfigError(f"deduplicate_frame: config must be a gpu_dedup.Config, got "
                          f"{type(config).__name__}")
    fields = {k: v for k, v in options.items() if k in _CONFIG_FIELDS}
    run_kw = {k: v for k, v in options.items() if k in _RUN_OPTIONS}
    device = {k: v for k, v in options.items() if k in _DEVICE_OPTIONS}
    unknown = [k for k in options if k not in fields and k not in run_kw and k not in device]
    if unknown:
        raise ConfigError(f"deduplicate_frame: unknown option(s) {', '.join(map(repr, unknown))}; "
                          f"give Config fields ({', '.join(_CONFIG_FIELDS)}) or "
                          f"{', '.join(_RUN_OPTIONS + _DEVICE_OPTIONS)}")
    if device:
        if "backend" in run_kw:
            raise ConfigError("deduplicate_frame: give backend, or device/gpu_memory, not both")
        from .backend import get_backend
        run_kw["backend"] = get_backend(device.get("device", "cpu"),
                                        device.get("gpu_memory"))[0]
    cfg = config if config is not None else Config()
    if fields:
        cfg = dataclasses.replace(cfg, **fields)
    return cfg, run_kw


# ---------------------------------------------------------------------------
# the kinds of frame
# ---------------------------------------------------------------------------

def _kind(frame) -> str:
    """``arrow``, ``pandas``, ``polars`` or ``datasets``, from the modules of
    the frame's class and its bases (a library is imported only when one of
    its classes is there)."""
    if isinstance(frame, pa.Table):
        return "arrow"
    roots = {(getattr(c, "__module__", None) or "").split(".")[0] for c in type(frame).__mro__}
    if "pandas" in roots:
        import pandas as pd
        if isinstance(frame, pd.DataFrame):
            return "pandas"
    if "polars" in roots:
        import polars as pl
        if isinstance(frame, pl.DataFrame):
            return "polars"
        if isinstance(frame, pl.LazyFrame):
            raise TypeError("deduplicate_frame: a polars.LazyFrame must be collected first "
                            "(frame.collect())")
    if "datasets" in roots:
        import datasets
        if isinstance(frame, datasets.Dataset):
            return "datasets"
        if isinstance(frame, datasets.DatasetDict):
            raise TypeError("deduplicate_frame: a datasets.DatasetDict holds several splits; "
                            "pass one of them (e.g. ds['train'])")
    raise TypeError(f"deduplicate_frame: expected {_SUPPORTED}, got "
                    f"{type(frame).__module__}.{type(frame).__qualname__}")


def _column_names(frame, kind: str) -> list:
    if kind in ("arrow", "datasets"):
        return list(frame.column_names)
    return list(frame.columns)


def _column(frame, kind: str, name):
    """Column ``name`` as an Arrow array or chunked array (no copy where the
    frame holds Arrow data already)."""
    if kind == "arrow":
        return frame.column(name)
    if kind == "polars":
        return frame.get_column(name).to_arrow()
    if kind == "datasets":
        col = frame.with_format("arrow")[name]    # follows a selection's indices
        if isinstance(col, pa.Table):
            col = col.column(0)
        return col
    series = frame[name]
    if getattr(series, "ndim", 1) != 1:
        raise ConfigError(f"deduplicate_frame: column {name!r} appears more than once")
    try:
        return pa.array(series)               # pandas nulls (None, NaN) become nulls
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise ConfigError(f"deduplicate_frame: column {name!r} cannot be read as Arrow "
                          f"({series.dtype}: {exc})") from None


def _is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def _texts(col, name: str):
    t = col.type
    if pa.types.is_null(t):                   # a column of nulls only
        return col
    if pa.types.is_dictionary(t) and _is_string(t.value_type):
        return col.cast(pa.large_string())
    if not _is_string(t):
        raise ConfigError(f"deduplicate_frame: column {name!r} is not a string column ({t}); "
                          f"choose the text column with text=")
    return col


def _ids(col, name: str) -> pa.Array:
    """The ids as one ``large_string`` array, as the files' ids are read."""
    t = col.type
    value = t.value_type if pa.types.is_dictionary(t) else t
    if not (pa.types.is_null(t) or _is_string(value) or pa.types.is_integer(value)):
        raise ConfigError(f"deduplicate_frame: column {name!r} cannot be used as an id ({t}; "
                          f"ids must be strings or integers); pass id=None to use row numbers")
    if pa.types.is_null(t):
        col = col.cast(pa.large_string())
    if col.null_count:
        row = int(pc.index(pc.is_null(col), True).as_py())
        raise InputError(f"deduplicate_frame: column {name!r}: row {row} has a null id")
    col = col.cast(pa.large_string())
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    return col


def _check_unique(ids: pa.Array, name: str) -> None:
    pair = first_duplicate(ids)
    if pair is not None:
        first, second = pair
        raise duplicate_id_error(ids[first].as_py(),
                                 f"deduplicate_frame: column {name!r}: row {second}",
                                 f"row {first}", hint=None)


def _check_no_nulls(texts, name: str, ids) -> None:
    if not texts.null_count:
        return
    row = int(pc.index(pc.is_null(texts), True).as_py())
    which = f" (id {ids[row].as_py()!r})" if ids is not None else ""
    raise InputError(f"deduplicate_frame: column {name!r}: row {row}{which} is null, not a "
                     f"string; drop or fill the null texts first")


def _attach(frame, kind: str, columns: dict, key: str):
    """``frame`` with ``columns`` (Arrow arrays, in order) added, as the same
    kind of object; ``frame`` itself is left as it was."""
    if kind == "arrow":
        out = frame
        for name, col in columns.items():
            out = out.append_column(name, col)
        return out
    if kind == "polars":
        import polars as pl
        return frame.with_columns([pl.Series(name, col) for name, col in columns.items()])
    if kind == "datasets":
        # an explicit fingerprint: the default one would hash the columns
        import hashlib
        base = getattr(frame, "_fingerprint", None) or ""
        out = frame
        for name, col in columns.items():
            fp = hashlib.sha256(f"{base}|gpu_dedup|{key}|{name}".encode()).hexdigest()[:16]
            out = out.add_column(name, col, new_fingerprint=fp)
        return out
    # pandas: positional arrays (the frame's index may be anything)
    pd_cols = {
        "cluster": columns["cluster"].to_numpy(),
        "kept": columns["kept"].to_numpy(zero_copy_only=False),
        "duplicate_of": columns["duplicate_of"].to_pandas().array,
        "similarity": columns["similarity"].to_numpy(zero_copy_only=False),  # nulls: NaN
    }
    return frame.assign(**pd_cols)
