"""``gpu-dedup ARGS`` in a child process that starts warm.

A fresh ``python -m gpu_dedup.cli`` spends about two seconds importing NumPy,
PyArrow and Numba and setting up Numba's CPU target before it reads its
options, and most of the command-line tests run hundreds of small commands.
Here one interpreter per test process (the *zygote*) imports the command line
once and then forks a child for each command: the child takes the caller's
working directory, environment, arguments and standard streams, and runs
``gpu_dedup.cli`` as ``__main__`` exactly as ``python -m`` does, ending the way
an interpreter ends (exit status, traceback of an uncaught exception, exit
handlers). Each command is still its own process, with its own exit status,
stdout and stderr.

What a fresh interpreter reads at start-up (``PYTHON*``, ``NUMBA_*``, ``DASK_*``
... in the environment) cannot change in a fork: :func:`run` runs a command
whose environment changes one of those in a fresh interpreter, as it does
when the zygote cannot start. The zygote is single-threaded in Python when it
forks (the native threads of OpenBLAS and jemalloc handle a fork themselves).
"""
from __future__ import annotations

import atexit
import json
import locale
import os
import selectors
import socket
import subprocess
import sys
import time

#: Environment variables read when an interpreter, Numba, Dask or fsspec
#: starts: a command that changes one gets a fresh interpreter.
STARTUP_PREFIXES = ("PYTHON", "NUMBA_", "DASK_", "FSSPEC_", "OMP_", "OPENBLAS_", "MKL_",
                    "JEMALLOC", "LD_", "MALLOC_", "CUDA_", "NVIDIA_", "LANG", "LC_")

ZYGOTE = r'''
import gc, json, os, select, socket, sys
sock = socket.socket(fileno=int(sys.argv[1]))
import gpu_dedup
import gpu_dedup.cli  # noqa: F401  (what every command imports first)
# ``python -m`` runs the module as __main__ only: it is not imported as itself
del sys.modules["gpu_dedup.cli"], gpu_dedup.cli
import numba
numba.njit(lambda x: x + 1)(1)          # Numba's CPU target, set up once
gc.collect()
gc.freeze()                              # a child's collections skip the zygote's objects
children = set()


def serve():
    """Forked children come back from here with their command; the zygote
    itself returns when its caller goes away."""
    while True:
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            children.discard(pid)
            sock.send(json.dumps({"pid": pid, "status": status}).encode() + b"\n")
        ready, _, _ = select.select([sock], [], [], 0.02 if children else None)
        if not ready:
            continue
        msg, fds, _flags, _addr = socket.recv_fds(sock, 1 << 20, 3)
        if not msg:
            return None
        pid = os.fork()
        if pid == 0:
            sock.close()
            return json.loads(msg), fds
        for fd in fds:
            os.close(fd)
        children.add(pid)
        sock.send(json.dumps({"started": pid}).encode() + b"\n")


job = serve()
if job is None:
    sys.exit(0)
request, fds = job
del job, serve, children
for target, fd in zip((0, 1, 2), fds):
    os.dup2(fd, target)
    os.close(fd)
os.chdir(request["cwd"])
os.environ.clear()
os.environ.update(request["env"])
sys.argv = ["-m"] + request["args"]
del request, fds, sock
import runpy
runpy.run_module("gpu_dedup.cli", run_name="__main__", alter_sys=True)
'''


class _Zygote:
    def __init__(self):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.env = dict(_BASE_ENV)
        self.proc = subprocess.Popen([sys.executable, "-c", ZYGOTE, str(theirs.fileno())],
                                     pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     env=self.env)
        theirs.close()
        self.sock = ours
        self.buf = b""
        self.exits: dict[int, int] = {}

    def _message(self) -> dict:
        while b"\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise OSError("the zygote exited")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def _take(self, msg: dict):
        if "pid" in msg:
            self.exits[msg["pid"]] = os.waitstatus_to_exitcode(msg["status"])
            return None
        return msg["started"]

    def start(self, args, cwd, env, fds) -> int:
        req = json.dumps({"args": args, "cwd": cwd, "env": env}).encode()
        socket.send_fds(self.sock, [req], fds)
        while True:
            pid = self._take(self._message())
            if pid is not None:
                return pid

    def poll_exit(self, pid: int, timeout: float) -> int | None:
        """The exit code of ``pid`` once the zygote has reaped it, waiting up
        to ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while pid not in self.exits:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self.sock.settimeout(left)
            try:
                self._take(self._message())
            except socket.timeout:
                return None
            finally:
                self.sock.settimeout(None)
        return self.exits.pop(pid)

    def close(self):
        self.sock.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


#: The environment the zygote starts with: this process's, before any test changes it.
_BASE_ENV = dict(os.environ)
_ZYGOTE: list = []       # [(_Zygote or None, pid of the process that started it)]


def _zygote():
    if not _ZYGOTE or _ZYGOTE[0][1] != os.getpid():
        try:
            z = _Zygote()
        except OSError:
            z = None
        _ZYGOTE[:] = [(z, os.getpid())]
        if z is not None:
            atexit.register(z.close)
    return _ZYGOTE[0][0]


def _startup_env_changed(env: dict, base: dict) -> bool:
    keys = {k for k in set(env) | set(base) if env.get(k) != base.get(k)}
    return any(k.upper().startswith(STARTUP_PREFIXES) for k in keys)


def run(args, *, cwd=None, env=None, input: bytes | None = None,
        timeout: float | None = None, text: bool = False) -> subprocess.CompletedProcess:
    """``python -m gpu_dedup.cli ARGS`` with stdout and stderr captured, like
    :func:`subprocess.run` with ``capture_output=True`` (and ``text``);
    ``env=None`` is this process's environment."""
    p = _run([os.fsdecode(a) for a in args], cwd, env, input, timeout)
    if text:
        p.stdout, p.stderr = _text(p.stdout), _text(p.stderr)
    return p


def _text(data: bytes) -> str:
    """What ``subprocess.run(..., text=True)`` makes of ``data``."""
    return data.decode(locale.getpreferredencoding(False)).replace("\r\n", "\n").replace("\r", "\n")


def _run(args, cwd, env, input, timeout) -> subprocess.CompletedProcess:
    env = dict(os.environ if env is None else env)
    cmd = [sys.executable, "-m", "gpu_dedup.cli", *args]
    z = _zygote()
    if z is None or _startup_env_changed(env, z.env):
        return subprocess.run(cmd, capture_output=True, cwd=cwd, env=env, input=input,
                              timeout=timeout)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    in_r = in_w = None
    if input is not None:
        in_r, in_w = os.pipe()
    try:
        pid = z.start(args, os.path.abspath(cwd if cwd is not None else os.getcwd()), env,
                      [in_r if in_r is not None else 0, out_w, err_w])
    finally:
        for fd in (out_w, err_w, in_r):
            if fd is not None:
                os.close(fd)
    chunks = {out_r: [], err_r: []}
    sel = selectors.DefaultSelector()
    for fd in chunks:
        sel.register(fd, selectors.EVENT_READ)
    pending = memoryview(input or b"")
    if in_w is not None:
        os.set_blocking(in_w, False)
        if pending:
            sel.register(in_w, selectors.EVENT_WRITE)
        else:
            os.close(in_w)
            in_w = None
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        open_fds = set(chunks)
        while open_fds:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                os.kill(pid, 9)
                z.poll_exit(pid, 30)
                raise subprocess.TimeoutExpired(cmd, timeout)
            for key, _ in sel.select(left):
                fd = key.fd
                if fd == in_w:
                    try:
                        n = os.write(in_w, pending[:65536])
                    except BrokenPipeError:
                        n = len(pending)
                    pending = pending[n:]
                    if not pending:
                        sel.unregister(in_w)
                        os.close(in_w)
                        in_w = None
                    continue
                data = os.read(fd, 65536)
                if data:
                    chunks[fd].append(data)
                else:
                    sel.unregister(fd)
                    open_fds.discard(fd)
        left = None if deadline is None else max(deadline - time.monotonic(), 0)
        code = z.poll_exit(pid, 1e9 if left is None else left)
        if code is None:
            os.kill(pid, 9)
            z.poll_exit(pid, 30)
            raise subprocess.TimeoutExpired(cmd, timeout)
    finally:
        sel.close()
        for fd in (out_r, err_r, in_w):
            if fd is not None:
                os.close(fd)
    return subprocess.CompletedProcess(cmd, code, b"".join(chunks[out_r]),
                                       b"".join(chunks[err_r]))
