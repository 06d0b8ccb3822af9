"""What reaches the user's terminal and reports: masked and printable.

Every message the command line prints (its one ``error:`` line, warnings,
``--json`` output, log lines) and every string saved in report.json and
report.html goes through :func:`clean`: the user-info of any URL
(``scheme://user:pass@host`` -> ``scheme://***@host``) and the known secrets
are masked by :func:`gpu_dedup.io.fs.redact`, and a string holding lone
surrogates (a file name whose bytes are not UTF-8, decoded by the operating
system's ``surrogateescape``) is written with those escaped
(``\\udcff``), so printing or encoding it never fails.

It also names the errors of the user's environment (a full disk, a denied
permission, a closed pipe) that the command line turns into one line and
exit status 2, as opposed to a bug, which keeps its traceback.
"""
from __future__ import annotations

import errno
import logging
import os
import re
import sys

from .io.fs import redact, secrets_held

#: ``OSError`` numbers that say something about the machine, the files or the
#: network the user gave, not about this program.
ENVIRONMENT_ERRNOS = frozenset(getattr(errno, name) for name in (
    "ENOSPC", "EDQUOT", "EFBIG", "EACCES", "EPERM", "EROFS", "ENOENT", "ENOTDIR",
    "EISDIR", "EEXIST", "ENOTEMPTY", "ENAMETOOLONG", "ELOOP", "EMFILE", "ENFILE", "EIO",
    "EPIPE", "ETXTBSY", "EBUSY", "EXDEV", "ENOMEM", "ENODEV", "ENXIO", "ESTALE",
    "ECONNREFUSED", "ECONNRESET", "ECONNABORTED", "ETIMEDOUT", "EHOSTUNREACH",
    "ENETUNREACH", "ENETDOWN", "EADDRINUSE", "EADDRNOTAVAIL")
    if hasattr(errno, name))

_BREAKS = re.compile(r"[ \t]*[\r\n\v\f\x85\u2028\u2029]+[ \t]*")
_CONTROLS = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")

_HINTS = {errno.ENOSPC: "free some space or choose another --output or --work-dir",
          errno.EACCES: "check the permissions, or choose another path",
          errno.EROFS: "choose a writable --output or --work-dir"}


def printable(text) -> str:
    """``str(text)`` with lone surrogates written as ``\\udcff``: encodable
    as UTF-8 whatever bytes a file name held."""
    s = str(text)
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return s.encode("utf-8", "backslashreplace").decode("utf-8")
    return s


def clean(text) -> str:
    """``text`` as the user may see it: credentials masked, printable."""
    return printable(redact(printable(text)))


def clean_tree(obj):
    """A report (dicts, lists, strings, numbers) with every string, keys
    included, :func:`clean`, within one list of secrets
    (:class:`gpu_dedup.io.fs.secrets_held`)."""
    with secrets_held():
        return _clean_tree(obj)


def _clean_tree(obj):
    if isinstance(obj, str):
        return clean(obj)
    if isinstance(obj, dict):
        return {_clean_tree(k): _clean_tree(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_clean_tree(v) for v in obj)
    return obj


def remember_secrets(args) -> None:
    """Let :func:`redact` learn the user-info of every URL on the command
    line, so that a message quoting one without its scheme is masked too."""
    for a in args:
        redact(printable(a))


def one_line(text) -> str:
    """:func:`clean`, on one line: line breaks become a space and other
    control characters are escaped (``\\x1b``), so a hostile name can
    neither split the line nor drive the terminal."""
    s = _BREAKS.sub(" ", clean(text).strip())
    return _CONTROLS.sub(lambda m: f"\\x{ord(m.group()):02x}", s)


def echo(message="", err: bool = False, nl: bool = True) -> None:
    """``click.echo`` of a cleaned message, in whatever the stream can
    encode (characters it cannot are escaped, never an error)."""
    import click
    text = clean(message)
    stream = sys.stderr if err else sys.stdout
    enc = getattr(stream, "encoding", None) or "utf-8"
    try:
        text.encode(enc)
    except UnicodeEncodeError:
        text = text.encode(enc, "backslashreplace").decode(enc)
    except LookupError:
        pass
    click.echo(text, err=err, nl=nl)


def usage_message(exc) -> str:
    """One line for a ``click.ClickException``: its message, and where the
    help is for a usage error."""
    import click
    msg = exc.format_message()
    ctx = getattr(exc, "ctx", None)
    if isinstance(exc, click.UsageError) and ctx is not None:
        msg += f" (see {ctx.command_path} --help)"
    return msg


def quiet_stdout() -> None:
    """After a broken pipe on stdout: later writes (and the flush at exit)
    go nowhere instead of failing again."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, ValueError, AttributeError):   # not a real file: nothing to quiet
        pass


def is_environment_error(exc: BaseException) -> bool:
    """Whether ``exc`` is an ``OSError`` of the user's environment
    (:data:`ENVIRONMENT_ERRNOS`)."""
    return isinstance(exc, OSError) and exc.errno in ENVIRONMENT_ERRNOS


def environment_message(exc: OSError) -> str:
    """One line for an environment ``OSError``: the file(s), what happened,
    and what to do where that is clear."""
    what = exc.strerror or str(exc)
    if isinstance(exc, BrokenPipeError) or exc.errno == errno.EPIPE:
        where = exc.filename or "standard output"
        return one_line(f"{where}: closed before everything was written (broken pipe)")
    names = [n for n in (exc.filename, exc.filename2) if n is not None]
    where = " -> ".join(str(n) for n in names)
    msg = f"{where}: {what}" if where else what
    hint = _HINTS.get(exc.errno)
    if hint:
        msg += f"; {hint}"
    return one_line(msg)


class RedactingFilter(logging.Filter):
    """Masks and escapes each record's message (and its traceback) before a
    handler writes it."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            msg = record.getMessage()
        except (TypeError, ValueError):          # a bad format: keep it readable
            msg = f"{record.msg} {record.args}"
        record.msg, record.args = clean(msg), None
        if record.exc_info and not record.exc_text:
            record.exc_text = clean(logging.Formatter().formatException(record.exc_info))
        elif record.exc_text:
            record.exc_text = clean(record.exc_text)
        if record.stack_info:
            record.stack_info = clean(record.stack_info)
        return True


def install_log_filter() -> None:
    """A :class:`RedactingFilter` on every handler of the root logger (once
    each); Python's warnings go through logging too."""
    logging.captureWarnings(True)
    for h in logging.getLogger().handlers:
        if not any(isinstance(f, RedactingFilter) for f in h.filters):
            h.addFilter(RedactingFilter())
