"""Hostile cases against the engine: a work directory damaged between runs
(truncated, flipped, zeroed, replaced by valid files of other values,
deleted) on disk and on object storage, bad ``--scheduler`` addresses and
servers that are no Dask scheduler, a quiet local cluster, and tasks that
run at once on the threads executor."""
from __future__ import annotations

import http.server
import json
import os
import shutil
import socket
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from hostile import guarded, run_cli
from s3server import s3  # noqa: F401  (the fixture)
from gpu_dedup.engine import layout
from gpu_dedup.errors import DedupError

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


# -- damage -----------------------------------------------------------------------

def _npy_data_offset(path: str) -> int:
    with open(path, "rb") as f:
        major, _minor = np.lib.format.read_magic(f)
        if major == 1:
            np.lib.format.read_array_header_1_0(f)
        else:
            np.lib.format.read_array_header_2_0(f)
        return f.tell()


def truncate(path):
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(max(0, size // 2))


def flip(path):
    start = _npy_data_offset(path) if path.endswith(".npy") else 0
    size = os.path.getsize(path)
    at = start + (size - start) // 2
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x01]))


def zero(path):
    size = os.path.getsize(path)
    with open(path, "wb") as f:
        f.write(b"\0" * size)


def other(path):
    """A valid file of the same kind and shape with other values."""
    if path.endswith(".npy"):
        a = np.load(path)
        if a.dtype == bool:
            b = ~a
        elif a.dtype.kind == "f":
            b = np.where(np.isnan(a), 0.5, a * 0.5)
        else:
            b = a[::-1].copy() if a.ndim == 1 else a + a.dtype.type(1)
            if np.array_equal(a, b):
                b = a + a.dtype.type(1)
        np.save(path, b, allow_pickle=False)
    elif path.endswith(".arrow"):
        t = ipc.open_file(pa.memory_map(path, "r")).read_all()
        col = t.column(0).combine_chunks()
        new = pa.array([f"x{i}" for i in range(len(col))], col.type)
        with pa.OSFile(path, "wb") as sink, ipc.new_file(sink, t.schema) as w:
            w.write_table(pa.table({t.schema.names[0]: new}))
    else:                                            # a .done marker: valid JSON
        with open(path) as f:
            meta = json.load(f)
        for k in ("kept", "n", "reps", "shingles", "units"):
            if isinstance(meta.get(k), int):
                meta[k] += 1
                break
        else:
            meta["chunks"] = []
        with open(path, "w") as f:
            json.dump(meta, f)


def delete(path):
    os.remove(path)


DAMAGE = {"truncate": truncate, "flip": flip, "zero": zero, "other": other, "delete": delete}
CHUNK0, CHUNK1 = layout.chunk_key(0, 0), layout.chunk_key(1, 0)
FILES = [layout.final_file(CHUNK0, "kept"), layout.final_file(CHUNK1, "similarity"),
         layout.final_file(CHUNK0, "cluster"), layout.final_file(CHUNK1, "duplicate_of"),
         layout.final_file(CHUNK0, "pair_a"), layout.exact("pair_member"),
         layout.chunk_file(CHUNK0, layout.IDS),
         layout.chunk_file(CHUNK1, layout.IDS),
         layout.signature_file(layout.block_key(0), layout.KEYS),
         layout.chunk_file(CHUNK0, layout.TEXT), layout.exact("reps"),
         layout.selected("accepted_a"), layout.selected("accepted_b")]
MARKERS = [layout.stage("assign") + layout.MARKER, layout.stage("read") + layout.MARKER,
           layout.chunk(CHUNK0) + layout.MARKER]
SIMILARITY = layout.final_file(CHUNK0, "similarity")


#: The work directory's folders in stage order (each named as the stage that
#: writes it, as are the stages' own markers).
ORDER = [layout.READ, layout.EXACT, layout.SIGNATURES, layout.BUCKETS, layout.SELECT,
         layout.ASSIGN]


def _forget_after(unit: str, rel: str) -> None:
    """Remove the markers of every stage after ``rel``'s: the work directory
    of a run killed just after that stage, whose next stages read ``rel``."""
    k = ORDER.index(rel.split("/")[0])
    for d, _dirs, names in os.walk(unit):
        for n in names:
            if not n.endswith(layout.MARKER):
                continue
            r = os.path.relpath(os.path.join(d, n), unit).split(os.sep)
            at = ORDER.index(n[:-len(layout.MARKER)] if r[0] == layout.STAGE else r[0])
            if at > k:
                os.remove(os.path.join(d, n))


def _rerun_after(corpus, tmp_path, damages: list, killed: bool = False) -> dict:
    folder, src, ref, work0 = corpus
    work = str(tmp_path / "work")
    shutil.copytree(work0, work)
    unit = _unit_dir(work)
    for rel, how in damages:
        path = os.path.join(unit, rel)
        assert os.path.exists(path), rel
        DAMAGE[how](path)
        if killed:
            _forget_after(unit, rel)
    out = str(tmp_path / "out")
    guarded(folder, "run", src, "-o", out, "--work-dir", work, "--keep-work-dir",
            "--memory-limit", LIMIT, "--no-html", "-q", "--overwrite",
            writable=(str(tmp_path),), expect=0)
    assert output_bytes(out) == output_bytes(ref)
    with open(os.path.join(out, "report.json")) as f:
        report = json.load(f)
    assert report["work"]["reused"], "the rerun reused nothing: the damage was not tested"
    return report


def _rotate(files: list, kinds: list) -> list:
    """Each file once, the kinds of damage taken in turn: every file and every
    kind is covered without running every pair (each case is a whole run)."""
    return [(f, kinds[i % len(kinds)]) for i, f in enumerate(files)]


#: Every kind of damage on one file the outputs are written from, then each
#: other file with one kind, in turn.
FILE_CASES = ([(SIMILARITY, h) for h in sorted(DAMAGE)]
              + _rotate([f for f in FILES if f != SIMILARITY], sorted(DAMAGE)))


@pytest.mark.parametrize("rel,how", FILE_CASES)
def test_a_damaged_work_file_is_recomputed_to_the_same_outputs(corpus, tmp_path, rel, how):
    _rerun_after(corpus, tmp_path, [(rel, how)])


@pytest.mark.parametrize("rel,how", _rotate([f for f in FILES
                                             if not f.startswith(layout.ASSIGN + "/")],
                                             sorted(DAMAGE, reverse=True)))
def test_a_damaged_file_read_by_the_next_stages_is_recomputed(corpus, tmp_path, rel, how):
    """The run was killed after the file's stage: what comes next reads it."""
    _rerun_after(corpus, tmp_path, [(rel, how)], killed=True)


@pytest.mark.parametrize("rel,how", _rotate(MARKERS, ["truncate", "flip", "other", "delete"]))
def test_a_damaged_marker_is_recomputed_to_the_same_outputs(corpus, tmp_path, rel, how):
    _rerun_after(corpus, tmp_path, [(rel, how)])


def test_many_damaged_files_at_once(corpus, tmp_path):
    report = _rerun_after(corpus, tmp_path, [(r, h) for r, h in zip(
        FILES, ["truncate", "flip", "zero", "other", "delete"] * 2)])
    assert report["work"]["reused"]


def test_the_repaired_work_directory_is_trusted_again(corpus, tmp_path):
    """After a rerun repaired it, a third run reuses every stage."""
    folder, src, ref, _ = corpus
    _rerun_after(corpus, tmp_path, [(layout.final_file(CHUNK0, "kept"), "delete")])
    out = str(tmp_path / "again")
    p = run_cli("run", src, "-o", out, "--work-dir", str(tmp_path / "work"),
                "--keep-work-dir", "--memory-limit", LIMIT, "--no-html", "-q")
    assert p.returncode == 0, p.stderr
    assert output_bytes(out) == output_bytes(ref)
    with open(os.path.join(out, "report.json")) as f:
        report = json.load(f)
    units = report["work"]["units"]["assign"]
    assert units >= 2 and report["work"]["reused"].get("assign") == units


def test_leftover_temporary_files_of_every_writer_are_removed(corpus, tmp_path):
    """One temporary-name rule for everything written into the work
    directory, and the store removes what a killed run left."""
    from gpu_dedup.atomic import tmp_path as tmp_name
    from gpu_dedup.engine.store import DiskStore
    root = tmp_path / "w"
    root.mkdir()
    uh = layout.hash_file(0, layout.UNIT_HASHES)
    left = tmp_name(str(root / uh))
    os.makedirs(os.path.dirname(left))
    with open(left, "wb") as f:
        f.write(b"partial")
    st = DiskStore(str(root)).open()
    try:
        assert not os.path.exists(left)
        st.concat_npy(uh, [], np.uint64)
        st.save_npy("a.npy", np.arange(3))
        st.concat_npy("b.npy", ["a.npy", "a.npy"], np.int64)
        assert st.load_npy("b.npy").tolist() == [0, 1, 2, 0, 1, 2]
        names = [n for _d, _s, ns in os.walk(root) for n in ns]
        assert not [n for n in names if "tmp" in n], names
    finally:
        st.close()


# -- the store's own contract -------------------------------------------------------

def test_a_unit_is_done_only_while_its_files_match(tmp_path):
    from gpu_dedup.engine.store import DiskStore
    st = DiskStore(str(tmp_path / "w")).open()
    try:
        st.save_npy("u/a.npy", np.arange(10))
        st.save_arrow("u/b.arrow", {"x": pa.array(["p", "q"], pa.large_string())})
        st.mark_done("u", {"k": 1}, files=["u/a.npy", "u/b.arrow"])
        assert st.done("u") == {"k": 1}
        st.mark_done(layout.stage("s"), {"n": 2}, units=["u"])
        assert st.done(layout.stage("s")) == {"n": 2}
        np.save(str(tmp_path / "w" / "u" / "a.npy"), np.arange(10) + 1)
    finally:
        st.close()
    again = DiskStore(str(tmp_path / "w")).open()          # a later run
    try:
        assert again.done("u") is None
        assert again.done(layout.stage("s")) is None
        # where nothing can be recomputed: one line naming the file
        with pytest.raises(DedupError, match="a.npy"):
            again.load_npy("u/a.npy")
    finally:
        again.close()


def test_a_damaged_file_read_without_a_unit_is_one_line(tmp_path):
    from gpu_dedup.engine.store import DiskStore
    st = DiskStore(str(tmp_path / "w")).open()
    try:
        st.save_npy("a.npy", np.arange(1000))
        st.save_arrow("b.arrow", {"x": pa.array(["p"] * 100, pa.large_string())})
        for rel in ("a.npy", "b.arrow"):
            truncate(str(tmp_path / "w" / rel))
        with pytest.raises(DedupError, match="a.npy"):
            st.load_npy("a.npy")
        with pytest.raises(DedupError, match="b.arrow"):
            st.column("b.arrow")
        st.save_npy("c.npy", np.arange(1000))
        np.save(str(tmp_path / "w" / "c.npy"), np.arange(1000) * 2)   # valid, other values
        with pytest.raises(DedupError, match="c.npy"):
            st.load_npy("c.npy", mmap=True)
        with pytest.raises(DedupError, match="missing.npy"):
            st.load_npy("missing.npy")
    finally:
        st.close()


# -- on object storage --------------------------------------------------------------

def test_a_damaged_work_file_on_object_storage_is_recomputed(corpus, tmp_path, s3):
    import pyarrow.fs as pafs
    folder, src, ref, _ = corpus
    s3.make_bucket("hostile")
    env = s3.env()
    url = "s3://hostile/w"
    p = run_cli("run", src, "-o", str(tmp_path / "o1"), "--work-dir", url, "--keep-work-dir",
                "--memory-limit", LIMIT, "--no-html", "-q", env=env)
    assert p.returncode == 0, p.stderr
    f3 = s3.filesystem()
    files = [f.path for f in f3.get_file_info(pafs.FileSelector("hostile/w", recursive=True))
             if f.type == pafs.FileType.File]

    def find(suffix):
        (hit,) = [f for f in files if f.endswith(suffix)]
        return hit

    kept = find("/" + layout.final_file(CHUNK0, "kept"))
    with f3.open_input_stream(kept, compression=None) as f:
        raw = f.read()
    with f3.open_output_stream(kept, compression=None) as f:
        f.write(raw[:len(raw) // 2])                          # truncated
    f3.delete_file(find("/" + layout.chunk_file(CHUNK0, layout.IDS)))
    with f3.open_output_stream(find("/" + layout.stage("assign") + layout.MARKER),
                               compression=None) as f:
        f.write(b'{"kept": 1}')                               # valid, other values
    sig = find("/" + layout.signature_file(layout.block_key(0), layout.KEYS))
    with f3.open_input_stream(sig, compression=None) as f:
        keys = bytearray(f.read())
    keys[-5] ^= 0xFF                                          # one flipped byte
    with f3.open_output_stream(sig, compression=None) as f:
        f.write(bytes(keys))
    out = str(tmp_path / "o2")
    guarded(folder, "run", src, "-o", out, "--work-dir", url, "--keep-work-dir",
            "--memory-limit", LIMIT, "--no-html", "-q", env=env,
            writable=(str(tmp_path),), expect=0)
    assert output_bytes(out) == output_bytes(ref)
    with f3.open_input_stream(kept, compression=None) as f:
        assert f.read() == raw                                # repaired


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
    from gpu_dedup.engine.executors import DaskThreads
    with DaskThreads(2) as ex:
        meet = threading.Barrier(2, timeout=30)

        def task(i):
            meet.wait()                       # both tasks must be running at once
            return i * 10

        assert ex.map(task, [1, 2]) == [10, 20]
