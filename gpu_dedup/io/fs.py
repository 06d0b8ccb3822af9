"""Paths on other filesystems: ``s3://``, ``gs://``, ``az://``/``abfs://``,
``hf://`` (read) and ``file://``, through pyarrow's filesystems.

A *URL* is a path with one of those schemes; every other path is local and
goes through :mod:`os` as before (``file://`` URLs are turned into local
paths at once). For a URL:

* the filesystem comes from pyarrow (``S3FileSystem``, ``GcsFileSystem``,
  ``AzureFileSystem``; ``hf://`` through ``huggingface_hub``'s fsspec
  filesystem), built once per scheme and bucket. Credentials and endpoints
  come from each one's usual places (for S3: ``AWS_ENDPOINT_URL``,
  ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``,
  ``~/.aws``), or from :func:`set_storage_options` (``--storage-options``),
  which are never printed or written anywhere;
* reads are ranged: :func:`open_input_file` is a random-access file (JSONL
  byte ranges, Parquet footers and row groups, Arrow IPC), and
  :func:`open_input_stream` reads a compressed object once, front to back;
* an error is one line naming the URL (never a credential).
"""
from __future__ import annotations

import os
import re
import threading

import pyarrow as pa

from ..errors import InputError

SCHEMES = ("s3", "gs", "gcs", "az", "abfs", "abfss", "hf")


def __getattr__(name: str):
    # pyarrow's filesystem module (``fs.pafs``, for callers testing file
    # types), imported on first use: it loads OpenSSL and every cloud
    # filesystem, about 15 ms of a warm start that reads local files only
    if name == "pafs":
        return _pafs()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _pafs():
    import pyarrow.fs
    return pyarrow.fs


def urlparse(url: str):
    """``urllib.parse.urlparse``, imported at the first URL (it loads
    ``ipaddress``; a run of local files has none)."""
    from urllib.parse import urlparse as parse
    return parse(url)


_FS: dict = {}
_LOCK = threading.Lock()
_OPTIONS: dict = {}


def set_storage_options(options: dict | None) -> None:
    """Options for every remote filesystem built from now on (keyword
    arguments of pyarrow's ``S3FileSystem``, ``GcsFileSystem`` or
    ``AzureFileSystem``, e.g. ``endpoint_override``, ``access_key``,
    ``secret_key``, ``region``, ``scheme``)."""
    with _LOCK:
        _OPTIONS.clear()
        _OPTIONS.update(options or {})
        _FS.clear()


def default_storage_options(options: dict) -> None:
    """:func:`set_storage_options`, unless options were set already."""
    with _LOCK:
        given = bool(_OPTIONS)
    if not given:
        set_storage_options(options)


def is_url(path) -> bool:
    """Whether ``path`` names a remote object (a known scheme)."""
    s = str(path)
    i = s.find("://")
    return i > 0 and s[:i].lower() in SCHEMES


def local_path(path):
    """``file://`` URLs as local paths; anything else unchanged."""
    s = str(path)
    if s.lower().startswith("file://"):
        return urlparse(s).path or "/"
    return path


#: a URL in a text: a scheme, ``://`` and what follows up to a blank or a quote
_URL_RE = re.compile(r"""([A-Za-z][A-Za-z0-9+.\-]*://)([^\s'"<>`]*)""")
#: user-info parts seen in URLs (whole, and the password alone), masked in
#: every text :func:`redact` sees afterwards, scheme or not
_SEEN: set = set()


def _split_userinfo(rest: str) -> tuple[str, str]:
    """``(user-info, the rest)`` of what follows ``scheme://``: up to the last
    ``@`` before the first ``/``; or, when the part before the first ``@``
    holds a ``:`` (``user:pa/ss@host``), up to that ``@``."""
    auth = rest.split("/", 1)[0]
    if "@" in auth:
        i = auth.rindex("@")
        return rest[:i], rest[i + 1:]
    if "@" in rest:
        i = rest.index("@")
        if ":" in rest[:i]:
            return rest[:i], rest[i + 1:]
    return "", rest


def _userinfo_of(scheme: str, rest: str) -> str:
    info, _ = _split_userinfo(rest)
    # az://container@account...: a plain name before the '@' is the
    # container, not a credential
    if info and scheme.lower().rstrip(":/") in ("az", "abfs", "abfss") and ":" not in info:
        return ""
    return info


def _remember(info: str) -> None:
    if info:
        _SEEN.add(info)
        if ":" in info:
            _SEEN.add(info.split(":", 1)[1])
        _SEEN.add(info.split(":", 1)[0])


_HELD = threading.local()


class secrets_held:
    """Within the ``with`` block, on this thread, :func:`secrets` is made
    once and made again only when a URL has taught a new one: for code
    that cleans many strings at once (a report, and its page, which cleans
    every word it shows: reading the environment for each took longer than
    the rest of a small run's report)."""

    def __enter__(self):
        self._before = getattr(_HELD, "made", None)
        if self._before is None:
            _HELD.made = (-1, [])
        return self

    def __exit__(self, *exc):
        _HELD.made = self._before
        return False


def secrets() -> list[str]:
    """What :func:`redact` masks besides URLs' user-info, longest first: the
    user-info seen in URLs before, the storage options' keys and the key
    variables of the storage services."""
    made = getattr(_HELD, "made", None)
    if made is not None and made[0] == len(_SEEN):
        return list(made[1])
    found = {v for v in _SEEN if len(v) >= 4}
    for k in ("secret_key", "access_key", "session_token", "account_key", "token",
              "sas_token", "client_secret"):
        v = _OPTIONS.get(k)
        if v:
            found.add(str(v))
    for k in ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID",
              "AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_SAS_TOKEN", "HF_TOKEN"):
        v = os.environ.get(k)
        if v and len(v) >= 4:
            found.add(v)
    found = sorted(found, key=len, reverse=True)
    if made is not None:
        _HELD.made = (len(_SEEN), found)
        return list(found)
    return found


def redact(text: str) -> str:
    """``text`` with no credential in it: the user-info of every URL
    (``scheme://user:pass@host/...`` -> ``scheme://***@host/...``, and a bare
    ``user@`` too), and :func:`secrets` are masked (a URL's user-info is
    learned first, so this text's and later texts' copies of it are masked
    too). For many texts at once, within :class:`secrets_held`."""
    text = str(text)

    def url(m):
        scheme, rest = m.group(1), m.group(2)
        info = _userinfo_of(scheme[:-3], rest)
        if not info:
            return m.group(0)
        _remember(info)
        return scheme + "***@" + rest[len(info) + 1:]

    text = _URL_RE.sub(url, text)
    for v in secrets():
        text = text.replace(v, "***")
    return text


def _redact(text: str) -> str:
    """:func:`redact`, on one line."""
    return " ".join(redact(text).split())


def public_url(url) -> str:
    """How a URL is named in messages and reports: its user-info masked
    (:func:`redact`); a path that is no URL is returned unchanged."""
    s = str(url)
    if "://" not in s:
        return s
    m = _URL_RE.match(s)
    if not m:
        return s
    info = _userinfo_of(m.group(1)[:-3], m.group(2))
    if not info:
        return s
    _remember(info)
    return m.group(1) + "***@" + m.group(2)[len(info) + 1:] + s[m.end():]


def error(url: str, exc: BaseException, what: str = "cannot read") -> InputError:
    """One line naming ``url``, with no credential in it."""
    public_url(url)  # remember its user-info, masked in the message below too
    msg = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return InputError(_redact(f"{public_url(url)}: {what}: {msg}"))


def _build(scheme: str, netloc: str):
    opts = dict(_OPTIONS)
    if scheme == "s3":
        if "endpoint_override" not in opts and os.environ.get("AWS_ENDPOINT_URL"):
            ep = urlparse(os.environ["AWS_ENDPOINT_URL"])
            opts["endpoint_override"] = ep.netloc or ep.path
            opts.setdefault("scheme", ep.scheme or "https")
        if "region" not in opts and (os.environ.get("AWS_REGION")
                                     or os.environ.get("AWS_DEFAULT_REGION")):
            opts["region"] = os.environ.get("AWS_REGION") or os.environ["AWS_DEFAULT_REGION"]
        ep = opts.get("endpoint_override")
        if isinstance(ep, str) and "://" in ep:
            u = urlparse(ep)
            opts["endpoint_override"] = u.netloc
            opts.setdefault("scheme", u.scheme)
        return _pafs().S3FileSystem(**opts)
    if scheme in ("gs", "gcs"):
        return _pafs().GcsFileSystem(**opts)
    if scheme in ("az", "abfs", "abfss"):
        if "account_name" not in opts:
            account = netloc.split("@", 1)[1].split(".", 1)[0] if "@" in netloc else \
                os.environ.get("AZURE_STORAGE_ACCOUNT_NAME", "")
            opts["account_name"] = account
        return _pafs().AzureFileSystem(**opts)
    if scheme == "hf":
        try:
            from huggingface_hub import HfFileSystem
        except ImportError as exc:
            raise InputError("hf:// paths need huggingface_hub: pip install huggingface_hub") \
                from exc
        return _pafs().PyFileSystem(_pafs().FSSpecHandler(HfFileSystem(**opts)))
    raise InputError(f"{scheme}://: unsupported scheme; use one of {', '.join(SCHEMES)}")


def resolve(url: str):
    """``(filesystem, path inside it)`` of a URL."""
    u = urlparse(str(url))
    scheme = u.scheme.lower()
    key = (scheme, u.netloc)
    with _LOCK:
        fs = _FS.get(key)
        if fs is None:
            try:
                fs = _build(scheme, u.netloc)
            except InputError:
                raise
            except Exception as exc:  # noqa: BLE001 - bad options: one line
                raise error(url, exc, "cannot open the filesystem") from exc
            _FS[key] = fs
    # az://container@account...: the container is the top folder
    bucket = u.netloc.split("@", 1)[0] if scheme in ("az", "abfs", "abfss") else u.netloc
    path = bucket + u.path
    return fs, path.rstrip("/") or path


def info(url: str):
    fs, p = resolve(url)
    try:
        return fs.get_file_info(p)
    except Exception as exc:  # noqa: BLE001
        raise error(url, exc) from exc


def exists(url: str) -> bool:
    return info(url).type != _pafs().FileType.NotFound


def size(url: str) -> int:
    i = info(url)
    if i.type != _pafs().FileType.File:
        raise InputError(f"{public_url(url)}: no such file or directory")
    return int(i.size)


def mtime_ns(url: str) -> int:
    i = info(url)
    return int(i.mtime_ns or 0)


def listdir(url: str, quiet: bool = False) -> list[str]:
    """Every object below ``url`` (recursive), as URLs, sorted."""
    fs, p = resolve(url)
    base = str(url).rstrip("/")
    try:
        found = fs.get_file_info(_pafs().FileSelector(p, recursive=True, allow_not_found=True))
    except Exception as exc:  # noqa: BLE001
        if quiet:
            return []
        raise error(url, exc, "cannot list") from exc
    out = []
    for f in found:
        if f.type == _pafs().FileType.File:
            rel = f.path[len(p):].lstrip("/")
            out.append(base + "/" + rel)
    return sorted(out)


def open_input_file(url: str):
    """A random-access file (ranged reads) of the object ``url``."""
    fs, p = resolve(url)
    try:
        return fs.open_input_file(p)
    except FileNotFoundError as exc:
        raise InputError(f"{public_url(url)}: no such file or directory") from exc
    except Exception as exc:  # noqa: BLE001
        raise error(url, exc) from exc


def open_input_stream(url: str, compression=None):
    """The object ``url`` read once, front to back, decompressed."""
    fs, p = resolve(url)
    try:
        stream = fs.open_input_stream(p, compression=None)
        return pa.CompressedInputStream(stream, compression) if compression else stream
    except FileNotFoundError as exc:
        raise InputError(f"{public_url(url)}: no such file or directory") from exc
    except Exception as exc:  # noqa: BLE001
        raise error(url, exc) from exc


def open_output_stream(url: str):
    fs, p = resolve(url)
    try:
        return fs.open_output_stream(p, compression=None)
    except Exception as exc:  # noqa: BLE001
        raise error(url, exc, "cannot write") from exc


def upload(local: str, url: str) -> None:
    """Copy the local file ``local`` to the object ``url``."""
    fs, p = resolve(url)
    try:
        _pafs().copy_files(local, p, source_filesystem=_pafs().LocalFileSystem(),
                           destination_filesystem=fs)
    except Exception as exc:  # noqa: BLE001
        raise error(url, exc, "cannot write") from exc


def download(url: str, local: str) -> None:
    fs, p = resolve(url)
    os.makedirs(os.path.dirname(local) or ".", exist_ok=True)
    try:
        _pafs().copy_files(p, local, source_filesystem=fs,
                           destination_filesystem=_pafs().LocalFileSystem())
    except Exception as exc:  # noqa: BLE001
        raise error(url, exc) from exc


def copy(src: str, dst: str) -> None:
    """Server-side copy of one object."""
    fs, a = resolve(src)
    _, b = resolve(dst)
    try:
        fs.copy_file(a, b)
    except Exception as exc:  # noqa: BLE001
        raise error(dst, exc, "cannot write") from exc


def delete(url: str) -> None:
    fs, p = resolve(url)
    try:
        fs.delete_file(p)
    except FileNotFoundError:
        pass
    except Exception as exc:  # noqa: BLE001
        raise error(url, exc, "cannot delete") from exc


def open_binary(path: str):
    """A seekable binary file of a local path or a URL (a local path that is
    no regular file is refused before it is opened)."""
    if is_url(path):
        return open_input_file(path)
    from .names import require_regular
    require_regular(path)
    return open(path, "rb")


def getsize(path: str) -> int:
    """The size of a local file or of an object."""
    return size(path) if is_url(path) else os.path.getsize(path)


def write_bytes(url: str, data: bytes) -> None:
    with open_output_stream(url) as f:
        f.write(data)


def read_bytes(url: str) -> bytes:
    with open_input_stream(url) as f:
        return f.read()


__all__ = ["is_url", "local_path", "set_storage_options", "default_storage_options", "resolve",
           "listdir", "exists", "size", "mtime_ns", "open_input_file", "open_input_stream",
           "open_output_stream", "upload", "download", "copy", "delete", "read_bytes",
           "write_bytes", "error", "open_binary", "getsize", "redact", "public_url"]
