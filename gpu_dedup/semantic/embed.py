"""Document embeddings for semantic deduplication: static token vectors, mean-pooled.

A document's embedding is the mean of the vectors of its tokens, L2-normalised
(float32). The tokens are those of the model's tokenizer, with no special
tokens added; the unknown token is left out (but for a byte-fallback BPE such
as WordLlama's, which spells every text with known tokens: there it only comes
from the text ``<unk>`` itself), and every token counts (or the first
``max_tokens``, when given: two long documents that open alike would then
look alike). A document with no token left (an empty text, or one of unknown words
only) gets the zero vector: its cosine with every document is 0, so it is
never anyone's duplicate.

The models (:func:`load_model`):

* the default, :func:`bundled_model`: the 256-dimension ``l2_supercat`` token
  embeddings of WordLlama, read from the files of the ``wordllama`` wheel
  (``pip install wordllama``). It gives the vectors of WordLlama's own
  ``embed``, normalised (WordLlama counts every token of a text too);
* a local folder of a static model: model2vec's ``save_pretrained`` layout
  (``model.safetensors`` with an ``embeddings`` tensor, ``tokenizer.json``,
  ``config.json``), or a sentence-transformers model whose only module, but
  for ``Normalize``, is a ``StaticEmbedding``;
* a local sentence-transformers model of a BERT-family encoder
  (:mod:`gpu_dedup.semantic.transformer`), run without torch, on a GPU when
  the run has one.

Models are never downloaded: nothing here opens a network connection.
"""
from __future__ import annotations

import importlib.util
import itertools
import json
import numbers
import os
import sys

import numpy as np

from ..errors import ConfigError, InputError, ModelError
from .model_files import normalize_rows, read_tensors, read_tokenizer, text_list

#: The name of the default model.
BUNDLED_NAME = "wordllama l2_supercat 256"
#: Its files, relative to the ``wordllama`` package folder.
WORDLLAMA_WEIGHTS = os.path.join("weights", "l2_supercat_256.safetensors")
WORDLLAMA_TOKENIZER = os.path.join("tokenizers", "l2_supercat_tokenizer_config.json")
#: The tensor of the token vectors in the WordLlama file, in a model2vec file,
#: and in a sentence-transformers ``StaticEmbedding`` file.
WORDLLAMA_KEY, MODEL2VEC_KEY, STATIC_KEY = "embedding.weight", "embeddings", "embedding.weight"
#: A text is cut to ``max_tokens`` times this many characters (or the longest
#: token of the vocabulary, if longer) before it is tokenized, so that a long
#: document is not tokenized past what counts. No token of a real vocabulary
#: is this long, so the cut keeps every counted token.
CHARS_PER_TOKEN = 64

INSTALL = "pip install wordllama (or pip install gpu-dedup[semantic])"
NO_DOWNLOAD = ("models are never downloaded: on a machine with network save a model2vec model "
               "to a folder (python -c \"from model2vec import StaticModel; "
               "StaticModel.from_pretrained('minishlab/potion-base-8M').save_pretrained('DIR')\"), "
               "copy DIR here and give --model DIR")


class StaticEmbedder:
    """Mean-pooled static token embeddings, L2-normalised rows (float32).

    Attributes:
        name: what the model is (``"wordllama l2_supercat 256"``, or the
            folder name of a local model).
        dim: the number of dimensions of an embedding.
        max_tokens: the tokens of a text that count, at most (None: all).
        matrix: the token vectors, float32 ``(tokens, dim)``.
        tokenizer: the ``tokenizers.Tokenizer``; its padding and truncation
            are turned off.
    """

    def __init__(self, matrix: np.ndarray, tokenizer, name: str, max_tokens: int | None = None):
        """Args:
            matrix: the vector of each token id, ``(tokens, dim)``, any real
                dtype (cast to float32 once, here).
            tokenizer: a ``tokenizers.Tokenizer`` whose ids index ``matrix``.
            name: what the model is, for messages and reports.
            max_tokens: the tokens of a text that count, at most (None: all).

        Raises:
            ModelError: a matrix that is not one of finite real numbers, or
                a tokenizer with more tokens than the matrix has rows.
            ConfigError: ``max_tokens`` that is not a positive integer.
        """
        m = np.asarray(matrix)
        if m.ndim != 2 or 0 in m.shape or m.dtype.kind not in "iuf":
            raise ModelError(f"{name}: the token vectors are {m.dtype} of shape {m.shape}, "
                             "not a (tokens, dimensions) matrix of numbers")
        self.matrix = np.ascontiguousarray(m, dtype=np.float32)
        if not np.isfinite(self.matrix).all():
            raise ModelError(f"{name}: the token vectors hold NaN or infinite values")
        vocab = tokenizer.get_vocab_size(with_added_tokens=True)
        if vocab > len(m):
            raise ModelError(f"{name}: the tokenizer has {vocab} tokens but there are only "
                             f"{len(m)} token vectors; the tokenizer is not this model's")
        if max_tokens is not None and (isinstance(max_tokens, bool)
                                       or not isinstance(max_tokens, (int, np.integer))
                                       or max_tokens < 1):
            raise ConfigError(f"max_tokens must be a positive number of tokens or None, "
                              f"got {max_tokens!r}")
        tokenizer.no_padding()
        tokenizer.no_truncation()
        self.tokenizer, self.name, self.dim = tokenizer, name, int(m.shape[1])
        self.max_tokens = None if max_tokens is None else int(max_tokens)
        # A byte-fallback BPE spells every text with known tokens: its unknown
        # token only stands for itself, written out in a text, and counts.
        unk = getattr(tokenizer.model, "unk_token", None)
        if getattr(tokenizer.model, "byte_fallback", False):
            unk = None
        unk_id = None if unk is None else tokenizer.token_to_id(unk)
        self._unk = -1 if unk_id is None else int(unk_id)
        longest = max(map(len, tokenizer.get_vocab(with_added_tokens=True)), default=1)
        self._max_chars = (None if max_tokens is None
                           else self.max_tokens * max(CHARS_PER_TOKEN, longest))
        self._encode = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)

    #: Sums its vectors on the host, where the tokens are, whatever the run's device.
    on_device = False

    def __repr__(self) -> str:
        return f"StaticEmbedder({self.name!r}, dim={self.dim}, max_tokens={self.max_tokens})"

    def embed(self, texts, batch_size: int = 4096, xp=None) -> np.ndarray:
        """The embedding of each text.

        Args:
            texts: a list of str, or a pyarrow string array (or chunked
                array); a null counts as an empty text.
            batch_size: texts tokenized at a time (the result never depends
                on it, to the bit).
            xp: not used: static vectors are summed on the host, where the
                tokens are.

        Returns:
            float32 ``(len(texts), dim)``: rows of norm 1, or 0 for a text
            with no known token. Two calls give the same bits.

        Example:
            >>> m = bundled_model()
            >>> e = m.embed(["The cat sat on the mat.", "A cat was sitting on the mat."])
            >>> e.shape, bool(e[0] @ e[1] > 0.8)
            ((2, 256), True)
        """
        if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ConfigError(f"batch_size must be a positive number of texts, got {batch_size!r}")
        texts = text_list(texts)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), batch_size):
            out[start:start + batch_size] = self._embed_batch(texts[start:start + batch_size])
        return out

    def _embed_batch(self, texts: list) -> np.ndarray:
        from scipy import sparse
        n = len(texts)
        if self._max_chars is not None:
            cut = self._max_chars
            texts = [t if len(t) <= cut else t[:cut] for t in texts]
        ids_lists = [e.ids for e in self._encode(texts, add_special_tokens=False)]
        lengths = np.fromiter(map(len, ids_lists), dtype=np.int64, count=n)
        ids = np.fromiter(itertools.chain.from_iterable(ids_lists), dtype=np.int64,
                          count=int(lengths.sum()))
        doc = np.repeat(np.arange(n, dtype=np.int64), lengths)
        known = ids != self._unk
        ids, doc = ids[known], doc[known]
        counts = np.bincount(doc, minlength=n)
        if self.max_tokens is not None and len(ids):
            first = np.cumsum(counts) - counts
            keep = np.arange(len(ids)) - np.repeat(first, counts) < self.max_tokens
            ids = ids[keep]
            counts = np.minimum(counts, self.max_tokens)
        indptr = np.concatenate([[0], np.cumsum(counts)])
        # Each row of ``bag @ matrix`` is the sum of its tokens' vectors,
        # added in token order in float32 (the mean has the same direction).
        bag = sparse.csr_array((np.ones(len(ids), dtype=np.float32), ids, indptr),
                               shape=(n, len(self.matrix)))
        return normalize_rows(np.asarray(bag @ self.matrix))


# -- loading ----------------------------------------------------------------------

def wordllama_dir() -> str | None:
    """The folder of the installed ``wordllama`` package that holds the
    default model's files, found without importing it; None if there is none."""
    try:
        spec = importlib.util.find_spec("wordllama")
    except (ImportError, ValueError):
        spec = None
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    folders += [os.path.join(p, "wordllama") for p in sys.path if isinstance(p, str) and p]
    for d in folders:
        if (os.path.isfile(os.path.join(d, WORDLLAMA_WEIGHTS))
                and os.path.isfile(os.path.join(d, WORDLLAMA_TOKENIZER))):
            return d
    return None


def bundled_model() -> StaticEmbedder:
    """The default model: WordLlama's ``l2_supercat`` 256-dimension token
    vectors, read from the installed ``wordllama`` wheel (never downloaded).

    Raises:
        ModelError: ``wordllama`` (or ``safetensors``/``tokenizers``) is not
            installed.
    """
    d = wordllama_dir()
    if d is None:
        raise ModelError(f"the default semantic model comes with the wordllama package, which is "
                         f"not installed: {INSTALL}, or give --model DIR, a local model2vec folder")
    weights = os.path.join(d, WORDLLAMA_WEIGHTS)
    tensors = read_tensors(weights, lambda keys: [WORDLLAMA_KEY] if WORDLLAMA_KEY in keys else [])
    if WORDLLAMA_KEY not in tensors:
        raise ModelError(f"{weights}: no {WORDLLAMA_KEY!r} tensor; reinstall wordllama "
                         f"(pip install --force-reinstall wordllama)")
    tokenizer = read_tokenizer(os.path.join(d, WORDLLAMA_TOKENIZER))
    return StaticEmbedder(tensors[WORDLLAMA_KEY], tokenizer, BUNDLED_NAME)


def load_model(path: str | None):
    """The model at ``path``: a local model folder, or the default
    (:func:`bundled_model`) if None.

    A sentence-transformers folder of a BERT-family encoder (its
    ``modules.json`` lists a ``Transformer``), or such an encoder's folder
    alone, gives a :class:`gpu_dedup.semantic.transformer.TransformerEmbedder`.
    Any other folder is read as model2vec's layout (``model.safetensors`` with an
    ``embeddings`` tensor, and its optional ``mapping`` and ``weights`` of
    a vocabulary-quantized model, ``tokenizer.json``, ``config.json``) or as
    a sentence-transformers model of one ``StaticEmbedding`` module (and
    ``Normalize``): its ``modules.json`` names the module folder, else
    ``0_StaticEmbedding``. The ``normalize`` flag of ``config.json`` does not
    matter: the embeddings are always normalised.

    Raises:
        ModelError: one line, for a path that is not a local folder (a Hub
            name: models are never downloaded), a folder that holds no
            model read here (``pytorch_model.bin`` only, an encoder of
            another architecture), or unreadable files.
    """
    if path is None:
        return bundled_model()
    path = os.fspath(path)
    if not os.path.isdir(path):
        what = "is a file, not a model folder" if os.path.exists(path) else "is not a local folder"
        raise ModelError(f"model {path!r} {what}; {NO_DOWNLOAD}")
    from .transformer import TransformerEmbedder, is_encoder_folder
    if is_encoder_folder(path):
        return TransformerEmbedder(path)
    folder = _static_folder(path)
    weights, tok = os.path.join(folder, "model.safetensors"), os.path.join(folder, "tokenizer.json")
    if not os.path.isfile(weights):
        has = [f for f in ("pytorch_model.bin", "model.bin", "model.onnx")
               if os.path.isfile(os.path.join(folder, f))]
        found = f"has {has[0]} but no model.safetensors" if has else "has no model.safetensors"
        raise ModelError(f"{folder} {found}: only models in safetensors format are read "
                         f"(model2vec, a sentence-transformers StaticEmbedding, or a BERT-family "
                         f"encoder); {NO_DOWNLOAD}")
    if not os.path.isfile(tok):
        raise ModelError(f"{folder} has no tokenizer.json: save the model with model2vec's "
                         f"save_pretrained, which writes it")
    config = os.path.join(folder, "config.json")
    if os.path.isfile(config):
        try:
            with open(config, encoding="utf-8") as f:
                if not isinstance(json.load(f), dict):
                    raise ValueError("not a JSON object")
        except (OSError, ValueError) as e:
            raise ModelError(f"{config}: not a readable model config ({e})") from None

    def want(keys):
        if MODEL2VEC_KEY not in keys and STATIC_KEY not in keys:
            shown = ", ".join(sorted(keys)[:3]) + (", ..." if len(keys) > 3 else "")
            raise ModelError(f"{weights} has no {MODEL2VEC_KEY!r} tensor (it has {shown}): not a "
                             f"static embedding model, nor an encoder whose config.json has "
                             f"model_type bert, roberta, xlm-roberta, distilbert or mpnet; {NO_DOWNLOAD}")
        key = MODEL2VEC_KEY if MODEL2VEC_KEY in keys else STATIC_KEY
        return [key] + [k for k in ("mapping", "weights") if k in keys]
    tensors = read_tensors(weights, want)
    matrix = _token_vectors(tensors, weights)
    name = os.path.basename(os.path.normpath(os.path.abspath(path)))
    return StaticEmbedder(matrix, read_tokenizer(tok), name)


def _static_folder(path: str) -> str:
    """The folder of the static embedding files inside model folder ``path``."""
    modules = os.path.join(path, "modules.json")
    if os.path.isfile(modules):
        try:
            with open(modules, encoding="utf-8") as f:
                entries = json.load(f)
            types = [(str(m.get("type", "")), str(m.get("path", ""))) for m in entries]
        except (OSError, ValueError, TypeError, AttributeError) as e:
            raise ModelError(f"{modules}: not a readable sentence-transformers module list "
                             f"({e})") from None
        static = [p for t, p in types if t.endswith("StaticEmbedding")]
        other = [t.rpartition(".")[2] for t, _ in types
                 if not t.endswith(("StaticEmbedding", "Normalize"))]
        if not static or other:
            found = ", ".join(t.rpartition(".")[2] for t, _ in types) or "none"
            raise ModelError(f"{path}: a sentence-transformers model of modules {found}, not one "
                             f"StaticEmbedding (and Normalize), nor a Transformer then Pooling "
                             f"(then Dense or Normalize); {NO_DOWNLOAD}")
        return os.path.normpath(os.path.join(path, static[0]))
    nested = os.path.join(path, "0_StaticEmbedding")
    if not os.path.isfile(os.path.join(path, "model.safetensors")) and os.path.isdir(nested):
        return nested
    return path


def _token_vectors(tensors: dict, where: str) -> np.ndarray:
    """The float32 vector of each token id: a model2vec ``embeddings``
    matrix, indexed by ``mapping`` and scaled by ``weights`` if present."""
    m = tensors.get(MODEL2VEC_KEY, tensors.get(STATIC_KEY))
    if m.ndim != 2 or m.dtype.kind not in "iuf":
        raise ModelError(f"{where}: the token vectors are {m.dtype} of shape {m.shape}, "
                         "not a (tokens, dimensions) matrix of numbers")
    m = m.astype(np.float32)
    mapping = tensors.get("mapping")
    if mapping is not None:
        if (mapping.ndim != 1 or mapping.dtype.kind not in "iu"
                or (len(mapping) and (mapping.min() < 0 or mapping.max() >= len(m)))):
            raise ModelError(f"{where}: its 'mapping' tensor does not map token ids to rows "
                             f"of its {len(m)} token vectors")
        m = m[mapping]
    w = tensors.get("weights")
    if w is not None:
        if w.shape != (len(m),) or w.dtype.kind not in "iuf":
            raise ModelError(f"{where}: its 'weights' tensor has shape {w.shape}, not "
                             f"({len(m)},), one weight a token")
        m = m * w.astype(np.float32)[:, None]
    return m


# -- precomputed embeddings --------------------------------------------------------

def embeddings_from_column(column, source: str, rows=None) -> np.ndarray:
    """Precomputed embeddings, checked and L2-normalised.

    Args:
        column: a pyarrow ``list``/``large_list``/``fixed_size_list`` column
            of numbers (an Array or ChunkedArray), or a Python list of lists.
        source: what the rows are read from, for messages (a file name).
        rows: the number that names each row in messages (its line in
            ``source``); None: 1, 2, ...

    Returns:
        float32 ``(n, d)``, rows of norm 1 (``(0, 0)`` for no rows).

    Raises:
        InputError: one line naming ``source`` and the 1-based row, for a
            null, an empty list, a row of another length than the first,
            a null, NaN, infinite or non-numeric value, an all-zero row.

    Example:
        >>> embeddings_from_column([[3, 4], [0, 2]], "x.jsonl").tolist()
        [[0.6000000238418579, 0.800000011920929], [0.0, 1.0]]
    """
    if rows is None:
        return _checked(column, source)
    try:
        return _checked(column, source)
    except InputError as exc:                 # name the row by its own number
        msg = str(exc)
        head, sep, tail = msg[len(source) + 1:].partition(":")
        if not msg.startswith(f"{source}:") or not sep or not head.isdigit():
            raise
        raise InputError(f"{source}:{int(np.asarray(rows)[int(head) - 1])}:{tail}") from None


def _checked(column, source: str) -> np.ndarray:
    """:func:`embeddings_from_column` with rows named 1, 2, ..."""
    if hasattr(column, "type") and hasattr(column, "to_pylist"):
        rows = _arrow_rows(column, source)
    else:
        rows = _python_rows(column, source)
    bad = ~np.isfinite(rows).all(axis=1)
    if bad.any():
        raise InputError(f"{source}:{int(np.argmax(bad)) + 1}: embedding has a NaN or "
                         f"infinite value")
    zero = ~rows.any(axis=1)
    if zero.any():
        raise InputError(f"{source}:{int(np.argmax(zero)) + 1}: embedding is all zeros, "
                         f"which has no direction")
    return normalize_rows(rows)


def _check_lengths(lengths: np.ndarray, source: str) -> int:
    """The common length of the rows; InputError for an empty or odd one."""
    if not len(lengths):
        return 0
    if (lengths == 0).any():
        raise InputError(f"{source}:{int(np.argmax(lengths == 0)) + 1}: embedding is an empty "
                         f"list")
    d = int(lengths[0])
    odd = lengths != d
    if odd.any():
        i = int(np.argmax(odd))
        raise InputError(f"{source}:{i + 1}: embedding has {int(lengths[i])} values, not {d} "
                         f"like the first row")
    return d


def _arrow_rows(column, source: str) -> np.ndarray:
    import pyarrow as pa
    import pyarrow.compute as pc
    if isinstance(column, pa.ChunkedArray):
        column = (column.combine_chunks() if column.num_chunks
                  else pa.array([], type=column.type))
    t = column.type
    if not (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)):
        raise InputError(f"{source}: the embedding column is {t}, not a list of numbers")
    if column.null_count:
        i = int(np.argmax(column.is_null().to_numpy(zero_copy_only=False)))
        raise InputError(f"{source}:{i + 1}: embedding is null")
    lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False).astype(np.int64)
    d = _check_lengths(lengths, source)
    if not len(column):
        return np.zeros((0, 0))
    vt = t.value_type
    if not (pa.types.is_integer(vt) or pa.types.is_floating(vt)):
        raise InputError(f"{source}:1: embedding values are {vt}, not numbers")
    values = column.flatten()
    if values.null_count:
        k = int(np.argmax(values.is_null().to_numpy(zero_copy_only=False)))
        raise InputError(f"{source}:{k // d + 1}: embedding value {k % d + 1} is null")
    flat = values.cast(pa.float64()).to_numpy(zero_copy_only=False)
    return flat.reshape(len(column), d)


def _python_rows(column, source: str) -> np.ndarray:
    rows = []
    for i, row in enumerate(column):
        if row is None:
            raise InputError(f"{source}:{i + 1}: embedding is null")
        if isinstance(row, list):            # the usual case: plain numbers, in C
            a = np.array(row)
            if a.ndim == 1 and a.dtype.kind in "if" and not any(v.__class__ is bool
                                                                 for v in row):
                rows.append(a)
                continue
        if isinstance(row, (str, bytes)) or not hasattr(row, "__len__"):
            raise InputError(f"{source}:{i + 1}: embedding is {type(row).__name__}, not a list "
                             f"of numbers")
        a = np.asarray(row, dtype=object if not isinstance(row, np.ndarray) else None)
        if a.dtype == object:
            kinds = [v for v in a.ravel().tolist()
                     if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real)]
            if kinds:
                what = "null" if kinds[0] is None else f"{type(kinds[0]).__name__}"
                raise InputError(f"{source}:{i + 1}: embedding has a value that is {what}, not "
                                 f"a number")
        elif a.dtype.kind not in "iuf":
            raise InputError(f"{source}:{i + 1}: embedding values are {a.dtype}, not numbers")
        if a.ndim != 1:
            raise InputError(f"{source}:{i + 1}: embedding is not a flat list of numbers")
        rows.append(a)
    d = _check_lengths(np.array([len(r) for r in rows], dtype=np.int64), source)
    if not rows:
        return np.zeros((0, 0))
    return np.stack([r.astype(np.float64) for r in rows]).reshape(len(rows), d)
