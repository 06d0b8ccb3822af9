"""Hostile cases against the engine's executors: bad ``--scheduler``
addresses and servers that are no Dask scheduler, a quiet local cluster, and
tasks that run at once on the threads executor."""
from __future__ import annotations

import http.server
import json
import os
import socket
import threading
import time

import numpy as np
import pytest

from hostile import guarded, run_cli

LIMIT = "1GiB"           # pinned: the work directory's name depends on the plan


def _texts(n: int, seed: int = 3) -> list[str]:
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}" for i in range(400)]
    out = []
    while len(out) < n:
        words = [vocab[i] for i in rng.integers(0, 400, size=int(rng.integers(8, 20)))]
        out.append(" ".join(words))
        r = rng.random()
        if r < 0.3:                       # a near-duplicate
            w = list(words)
            w[int(rng.integers(len(w)))] = vocab[int(rng.integers(400))]
            out.append(" ".join(w))
        elif r < 0.4:                     # an exact duplicate
            out.append(" ".join(words))
    return out[:n]


def output_bytes(folder: str) -> dict:
    """clusters.parquet, pairs.parquet and every file under data/."""
    out = {}
    for root, _dirs, names in os.walk(folder):
        for n in names:
            p = os.path.join(root, n)
            rel = os.path.relpath(p, folder)
            if rel in ("clusters.parquet", "pairs.parquet") or rel.startswith("data" + os.sep):
                with open(p, "rb") as f:
                    out[rel] = f.read()
    assert {"clusters.parquet", "pairs.parquet"} <= set(out), sorted(out)
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Two inputs (ids given, ids generated), a reference run that kept its
    work directory, and the folder holding them."""
    folder = str(tmp_path_factory.mktemp("hostile-engine"))
    texts = _texts(3000)
    src = os.path.join(folder, "in")
    os.makedirs(src)
    with open(os.path.join(src, "a.jsonl"), "w") as f:
        for i, t in enumerate(texts[:2000]):
            f.write(json.dumps({"id": f"a{i}", "text": t}) + "\n")
    with open(os.path.join(src, "b.jsonl"), "w") as f:
        for t in texts[2000:]:
            f.write(json.dumps({"text": t}) + "\n")
    ref, work = os.path.join(folder, "ref"), os.path.join(folder, "work")
    p = run_cli("run", src, "-o", ref, "--work-dir", work, "--keep-work-dir",
                "--memory-limit", LIMIT, "--no-html", "-q")
    assert p.returncode == 0, p.stderr
    return folder, src, ref, work


def _unit_dir(work: str) -> str:
    (name,) = os.listdir(work)
    return os.path.join(work, name)


# -- --scheduler -------------------------------------------------------------------

@pytest.mark.parametrize("spec", ["tcp://notahost:abc", "tcp://host", "tcp://:8786",
                                  "tcp://h:0", "tcp://h:65536", "tcp://h:-1", "udp://h:8786",
                                  "tcp://h:8786/path", "tcp://a b:8786", "tcp://[::1:8786"])
def test_a_malformed_scheduler_address_is_one_line(corpus, tmp_path, spec):
    folder, src, _, _ = corpus
    out = str(tmp_path / "o")
    p = guarded(folder, "run", src, "-o", out, "--scheduler", spec, "-q", expect=2,
                says=spec, writable=(str(tmp_path),), timeout=60)
    assert not os.path.exists(out), p.stderr


class _Answer400(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture()
def http400():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answer400)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


@pytest.fixture()
def answers400():
    """A server that answers HTTP 400 as soon as a client connects."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    stop = threading.Event()

    def serve():
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                c, _ = srv.accept()
            except OSError:
                continue
            with c:
                c.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 11\r\n"
                          b"Connection: close\r\n\r\nBad Request")
                time.sleep(0.2)
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield srv.getsockname()[1]
    stop.set()
    t.join()
    srv.close()


@pytest.mark.parametrize("server", ["http400", "answers400"])
def test_a_server_that_is_no_dask_scheduler_is_one_line(corpus, tmp_path, server, request):
    folder, src, _, _ = corpus
    spec = f"tcp://127.0.0.1:{request.getfixturevalue(server)}"
    t0 = time.monotonic()
    guarded(folder, "run", src, "-o", str(tmp_path / "o"), "--scheduler", spec, "-q",
            expect=2, says=spec, writable=(str(tmp_path),), timeout=120)
    assert time.monotonic() - t0 < 90


def test_nothing_listening_or_no_such_host_is_one_line(corpus, tmp_path):
    folder, src, _, _ = corpus
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()                                     # nothing listens there now
    for spec in (f"tcp://127.0.0.1:{port}", "tcp://no-such-host.invalid:8786"):
        t0 = time.monotonic()
        guarded(folder, "run", src, "-o", str(tmp_path / "o"), "--scheduler", spec, "-q",
                expect=2, says=spec, writable=(str(tmp_path),), timeout=120)
        assert time.monotonic() - t0 < 60, spec


# -- a local cluster, quietly; threads at once ----------------------------------------

def test_a_local_cluster_run_with_q_prints_nothing(corpus, tmp_path):
    folder, src, ref, _ = corpus
    out = str(tmp_path / "o")
    p = guarded(folder, "run", src, "-o", out, "--scheduler", "processes", "--workers", "2",
                "--work-dir", str(tmp_path / "w"), "--memory-limit", LIMIT, "--no-html",
                "-q", expect=0, writable=(str(tmp_path),), timeout=600)
    assert p.stderr == "", p.stderr[-3000:]
    assert p.stdout == ""
    assert output_bytes(out) == output_bytes(ref)


def test_the_threads_executor_runs_tasks_at_once():
    import numba
    from gpu_dedup.engine.executors import DaskThreads
    from gpu_dedup.kernels import cpu
    cpu.codepoint_lengths(np.zeros(2, dtype=np.int64), np.zeros(1, dtype=np.uint8))
    with DaskThreads(2) as ex:
        if numba.threading_layer() == "workqueue":
            # not thread-safe: parallel kernels must not run from two threads
            assert ex._lock is not None
            return
        assert ex._lock is None
        meet = threading.Barrier(2, timeout=30)

        def task(i):
            meet.wait()                       # both tasks must be running at once
            return i * 10

        assert ex.map(task, [1, 2]) == [10, 20]
