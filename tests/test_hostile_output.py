"""Hostile cases for the output directory: ``--overwrite`` removes exactly
the files an earlier run wrote (listed, with their sizes and XXH3-128 hashes,
in its manifest) and refuses, before any work, an output holding anything
else; a publish killed half-way leaves an output that says it is incomplete,
and the next run replaces it; on object storage the staging prefixes of killed
runs are removed by the next run and a user's object is never deleted."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow.fs as pafs
import pytest
import xxhash

from gpu_dedup.io import fs
from gpu_dedup.output import MANIFEST_NAME, STAGING_PREFIX, output_complete
from hostile import guarded, run_cli
from s3server import s3  # noqa: F401  (the fixture)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write_jsonl(path, n, start=0, words="some text number"):
    with open(path, "w") as f:
        for i in range(start, start + n):
            f.write(json.dumps({"id": f"{os.path.basename(path)}-{i}",
                                "text": f"{words} {i % 7} here and there {i}"}) + "\n")


@pytest.fixture()
def corpus(tmp_path):
    inp = tmp_path / "in"
    inp.mkdir()
    write_jsonl(inp / "a.jsonl", 30)
    write_jsonl(inp / "b.jsonl", 20, words="other words entirely")
    return inp


def files_under(root) -> dict[str, bytes]:
    """Every file below ``root``, relative name (with ``/``) -> bytes."""
    out = {}
    for d, _dirs, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root).replace(os.sep, "/")] = f.read()
    return out


def manifest_files(raw: bytes) -> dict[str, tuple[int, str]]:
    return {f["name"]: (f["bytes"], f["xxh3_128"]) for f in json.loads(raw)["files"]}


def assert_manifest_matches(out):
    """The manifest lists exactly the files of the output, with their sizes and hashes."""
    found = files_under(out)
    listed = manifest_files(found.pop(MANIFEST_NAME))
    assert listed == {n: (len(b), xxhash.xxh3_128(b).hexdigest()) for n, b in found.items()}


# -- --overwrite never deletes a user's file ------------------------------------------
def test_overwrite_refuses_a_folder_of_user_files_without_a_manifest(corpus, tmp_path):
    out = tmp_path / "out"
    (out / "data").mkdir(parents=True)
    (out / "clusters.parquet").write_bytes(b"my own clusters")
    (out / "report.json").write_text('{"mine": true}')
    (out / "data" / "mine.jsonl").write_text('{"text": "my data"}\n')
    guarded(tmp_path, "run", corpus / "a.jsonl", "--output", out, "--overwrite", "-q",
            expect=2, says=str(out / "clusters.parquet"))
    assert (out / "clusters.parquet").read_bytes() == b"my own clusters"
    assert (out / "data" / "mine.jsonl").read_text() == '{"text": "my data"}\n'


def test_overwrite_refuses_a_users_file_added_to_an_earlier_output(corpus, tmp_path):
    out = tmp_path / "out"
    p = run_cli("run", corpus / "a.jsonl", "--output", out, "-q")
    assert p.returncode == 0, p.stderr
    (out / "data" / "NOTES.md").write_text("my notes")
    guarded(tmp_path, "run", corpus / "a.jsonl", "--output", out, "--overwrite", "-q",
            expect=2, says=str(out / "data" / "NOTES.md"))
    assert (out / "data" / "NOTES.md").read_text() == "my notes"
    # a link the user put there is not followed, nor removed
    (out / "data" / "NOTES.md").unlink()
    (tmp_path / "precious.txt").write_text("keep")
    os.symlink(tmp_path / "precious.txt", out / "data" / "link.jsonl")
    guarded(tmp_path, "run", corpus / "a.jsonl", "--output", out, "--overwrite", "-q",
            expect=2, says=str(out / "data" / "link.jsonl"))
    assert os.path.islink(out / "data" / "link.jsonl")


def test_overwrite_refuses_an_output_file_the_user_changed(corpus, tmp_path):
    out = tmp_path / "out"
    p = run_cli("run", corpus / "a.jsonl", "--output", out, "-q")
    assert p.returncode == 0, p.stderr
    report = out / "report.json"
    original = report.read_bytes()
    report.write_bytes(b" " + original[1:])                   # same size, other bytes
    guarded(tmp_path, "run", corpus / "a.jsonl", "--output", out, "--overwrite", "-q",
            expect=2, says=str(report))
    report.write_bytes(original + b"\n")                     # another size
    guarded(tmp_path, "run", corpus / "a.jsonl", "--output", out, "--overwrite", "-q",
            expect=2, says=str(report))
    assert report.read_bytes() == original + b"\n"


def test_overwrite_removes_exactly_the_files_of_the_earlier_output(corpus, tmp_path):
    out, fresh = tmp_path / "out", tmp_path / "fresh"
    p = run_cli("run", corpus, "--output", out, "-q")
    assert p.returncode == 0, p.stderr
    assert {"data/a.jsonl", "data/b.jsonl"} <= set(files_under(out))
    assert_manifest_matches(out)
    p = guarded(tmp_path, "run", corpus / "a.jsonl", "--output", out, "--overwrite", "-q",
                writable=(str(out),), expect=0)
    p = run_cli("run", corpus / "a.jsonl", "--output", fresh, "-q")
    assert p.returncode == 0, p.stderr
    now, ref = files_under(out), files_under(fresh)
    assert set(now) == set(ref) and "data/b.jsonl" not in now
    for name in ("clusters.parquet", "pairs.parquet", "data/a.jsonl"):
        assert now[name] == ref[name], name
    assert_manifest_matches(out)
    assert output_complete(str(out)) == (True, "")


# -- a complete output says so, a half-published one says it is not -------------------
def test_output_complete_checks_every_listed_file(corpus, tmp_path):
    out = tmp_path / "out"
    p = run_cli("run", corpus, "--output", out, "-q")
    assert p.returncode == 0, p.stderr
    assert output_complete(str(out)) == (True, "")
    with open(out / "data" / "b.jsonl", "r+b") as f:
        f.truncate(10)
    ok, why = output_complete(str(out))
    assert not ok and "data/b.jsonl" in why
    (out / "data" / "b.jsonl").unlink()
    ok, why = output_complete(str(out))
    assert not ok and "data/b.jsonl" in why


KILL_DURING_PUBLISH = r"""
import os, runpy, sys
from gpu_dedup.output import STAGING_PREFIX
real, placed = os.rename, []

def rename(src, dst, *a, **kw):
    # the second file moved from the staging folder into the output: killed
    if STAGING_PREFIX in os.fspath(src) and STAGING_PREFIX not in os.fspath(dst):
        placed.append(dst)
        if len(placed) == 2:
            os._exit(9)
    return real(src, dst, *a, **kw)
os.rename = rename
sys.argv = ["gpu-dedup"] + sys.argv[1:]
runpy.run_module("gpu_dedup.cli", run_name="__main__")
"""


def test_a_publish_killed_half_way_is_incomplete_and_the_next_overwrite_replaces_it(
        corpus, tmp_path):
    out, fresh = tmp_path / "out", tmp_path / "fresh"
    p = run_cli("run", corpus, "--output", out, "-q")
    assert p.returncode == 0, p.stderr
    p = subprocess.run([sys.executable, "-c", KILL_DURING_PUBLISH, "run",
                        str(corpus / "a.jsonl"), "--output", str(out), "--overwrite", "-q"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert p.returncode == 9, p.stderr
    ok, why = output_complete(str(out))
    assert not ok and why
    guarded(tmp_path, "run", corpus / "a.jsonl", "--output", out, "--overwrite", "-q",
            writable=(str(out),), expect=0)
    assert output_complete(str(out)) == (True, "")
    assert run_cli("run", corpus / "a.jsonl", "--output", fresh, "-q").returncode == 0
    assert set(files_under(out)) == set(files_under(fresh))
    assert not any(n.startswith(STAGING_PREFIX) for n in os.listdir(out))
    assert_manifest_matches(out)


# -- object storage ---------------------------------------------------------------
def s3fs_of(s3):
    return pafs.S3FileSystem(endpoint_override=s3.endpoint.split("://")[1], scheme="http",
                             access_key=s3.access_key, secret_key=s3.secret_key,
                             region=s3.region)


def objects(s3, prefix) -> dict[str, bytes]:
    f = s3fs_of(s3)
    out = {}
    for i in f.get_file_info(pafs.FileSelector(prefix, recursive=True, allow_not_found=True)):
        if i.type == pafs.FileType.File:
            with f.open_input_stream(i.path, compression=None) as s:
                out[i.path[len(prefix) + 1:]] = s.read()
    return out


def put(s3, key, data: bytes):
    with s3fs_of(s3).open_output_stream(key, compression=None) as o:
        o.write(data)


@pytest.fixture()
def env(s3, monkeypatch):
    for k, v in s3.env().items():
        monkeypatch.setenv(k, v)
    fs.set_storage_options(None)
    yield
    fs.set_storage_options(None)


KILL_DURING_REMOTE_PUBLISH = r"""
import os, runpy, sys
from gpu_dedup.io import fs
real = fs.copy

def copy(src, dst):
    real(src, dst)
    os._exit(9)            # after the first object is copied into place
fs.copy = copy
sys.argv = ["gpu-dedup"] + sys.argv[1:]
runpy.run_module("gpu_dedup.cli", run_name="__main__")
"""


def test_s3_staging_prefixes_of_killed_runs_are_removed_by_the_next_run(s3, env, corpus,
                                                                        tmp_path):
    s3.make_bucket("hostile1")
    url = "s3://hostile1/run"
    p = run_cli("run", corpus, "--output", url, "-q", env=s3.env())
    assert p.returncode == 0, p.stderr
    for _ in range(2):
        p = subprocess.run([sys.executable, "-c", KILL_DURING_REMOTE_PUBLISH, "run",
                            str(corpus / "a.jsonl"), "--output", url, "--overwrite", "-q"],
                           capture_output=True, text=True, cwd=ROOT, timeout=300,
                           # its local staging folder, which a killed run leaves
                           env=dict(os.environ, **s3.env(), TMPDIR=str(tmp_path)))
        assert p.returncode == 9, p.stderr
        assert any(n.startswith(STAGING_PREFIX) for n in objects(s3, "hostile1/run"))
        assert output_complete(url)[0] is False
    p = run_cli("run", corpus / "a.jsonl", "--output", url, "--overwrite", "-q", env=s3.env())
    assert p.returncode == 0, p.stderr
    left = objects(s3, "hostile1/run")
    assert not [n for n in left if n.startswith(".")], sorted(left)
    assert output_complete(url) == (True, "")
    listed = manifest_files(left.pop(MANIFEST_NAME))
    assert listed == {n: (len(b), xxhash.xxh3_128(b).hexdigest()) for n, b in left.items()}
    assert "data/a.jsonl" in left and "data/b.jsonl" not in left


def test_s3_overwrite_never_deletes_a_users_object(s3, env, corpus):
    s3.make_bucket("hostile2")
    url = "s3://hostile2/run"
    put(s3, "hostile2/run/data/mine.jsonl", b'{"text": "mine"}\n')
    p = run_cli("run", corpus / "a.jsonl", "--output", url, "--overwrite", "-q", env=s3.env())
    assert p.returncode == 2 and f"{url}/data/mine.jsonl" in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    assert objects(s3, "hostile2/run") == {"data/mine.jsonl": b'{"text": "mine"}\n'}
    s3fs_of(s3).delete_file("hostile2/run/data/mine.jsonl")
    p = run_cli("run", corpus, "--output", url, "-q", env=s3.env())
    assert p.returncode == 0, p.stderr
    put(s3, "hostile2/run/data/NOTES.md", b"notes")
    before = objects(s3, "hostile2/run")
    p = run_cli("run", corpus / "a.jsonl", "--output", url, "--overwrite", "-q", env=s3.env())
    assert p.returncode == 2 and f"{url}/data/NOTES.md" in p.stderr, p.stderr
    assert objects(s3, "hostile2/run") == before
    # an object of the output the user rewrote is refused too
    s3fs_of(s3).delete_file("hostile2/run/data/NOTES.md")
    put(s3, "hostile2/run/report.json", b"{}")
    p = run_cli("run", corpus / "a.jsonl", "--output", url, "--overwrite", "-q", env=s3.env())
    assert p.returncode == 2 and f"{url}/report.json" in p.stderr, p.stderr
    assert objects(s3, "hostile2/run")["report.json"] == b"{}"
