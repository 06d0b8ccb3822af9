"""Runs over object storage, against a real S3 server on loopback
(SeaweedFS, ``tests/s3server.py``): inputs under an ``s3://`` prefix and
outputs to another give the clusters and the data/ bytes of the same run
over local copies, in memory and out of core with the work directory on S3,
killed mid-way and rerun; bad credentials, a missing bucket and a missing key
are one line naming the URL, without the secret."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pyarrow.fs as pafs
import pytest

import forkcli
from gpu_dedup.engine import layout
from gpu_dedup.io import fs
from gpu_dedup.output import SUCCESS_NAME, output_complete
from s3server import s3  # noqa: F401  (the fixture)
from test_staged import make_texts
from test_substr_engine import write_corpus

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARDS = ("a.jsonl", "b.jsonl.gz", "c.parquet")


def read(path):
    with open(path, "rb") as f:
        return f.read()


def s3fs_of(s3):
    return pafs.S3FileSystem(endpoint_override=s3.endpoint.split("://")[1], scheme="http",
                             access_key=s3.access_key, secret_key=s3.secret_key,
                             region=s3.region)


def put_dir(s3, local, bucket_prefix):
    f = s3fs_of(s3)
    for name in sorted(os.listdir(local)):
        with f.open_output_stream(f"{bucket_prefix}/{name}", compression=None) as out:
            out.write(read(os.path.join(local, name)))


def get(s3, key) -> bytes:
    with s3fs_of(s3).open_input_stream(key, compression=None) as f:
        return f.read()


def cli(s3, *args, env=None):
    """The command with the server's variables (or exactly the environment ``env``)."""
    e = dict(os.environ, **s3.env()) if env is None else dict(env)
    return forkcli.run(args, text=True, cwd=ROOT, env=e, timeout=600)


@pytest.fixture(scope="module")
def corpus(s3, tmp_path_factory):
    folder = tmp_path_factory.mktemp("s3corpus")
    local = str(folder / "in")
    write_corpus(local, make_texts(400, seed=21))
    s3.make_bucket("corpus")
    put_dir(s3, local, "corpus/shards")
    ref = str(folder / "ref")
    p = cli(s3, "run", local, "-o", ref, "-q", "--no-html")
    assert p.returncode == 0, p.stderr
    return local, ref


@pytest.fixture()
def env(s3, monkeypatch):
    """The server's variables in this process too (filesystems built afresh)."""
    for k, v in s3.env().items():
        monkeypatch.setenv(k, v)
    fs.set_storage_options(None)
    yield
    fs.set_storage_options(None)


def assert_same_as_local(s3, ref, key):
    assert get(s3, f"{key}/clusters.parquet") == read(os.path.join(ref, "clusters.parquet"))
    assert get(s3, f"{key}/pairs.parquet") == read(os.path.join(ref, "pairs.parquet"))
    for name in SHARDS:
        assert get(s3, f"{key}/data/{name}") == read(os.path.join(ref, "data", name)), name


def test_a_run_over_an_s3_prefix_to_another_gives_the_local_bytes(s3, corpus, env):
    local, ref = corpus
    s3.make_bucket("out1")
    p = cli(s3, "run", "s3://corpus/shards/", "-o", "s3://out1/run", "-q", "--no-html")
    assert p.returncode == 0, p.stderr
    assert_same_as_local(s3, ref, "out1/run")
    manifest = json.loads(get(s3, f"out1/run/{SUCCESS_NAME}"))
    names = {f["name"]: f["bytes"] for f in manifest["files"]}
    assert set(names) >= {"clusters.parquet", "pairs.parquet", "report.json",
                          *(f"data/{n}" for n in SHARDS)}
    assert names["clusters.parquet"] == len(read(os.path.join(ref, "clusters.parquet")))
    assert output_complete("s3://out1/run") == (True, "")
    # no temporary prefix is left behind
    assert all(not u.split("/run/", 1)[1].startswith(".") for u in fs.listdir("s3://out1/run"))
    # a glob over the shards reads the same
    p = cli(s3, "run", "s3://corpus/shards/*.jsonl*", "s3://corpus/shards/c.parquet", "-o",
            "s3://out1/glob", "-q", "--no-html")
    assert p.returncode == 0, p.stderr
    assert get(s3, "out1/glob/clusters.parquet") == read(os.path.join(ref, "clusters.parquet"))


def test_an_incomplete_output_says_so_and_a_users_object_is_never_deleted(s3, corpus, env):
    s3.make_bucket("out2")
    f = s3fs_of(s3)
    with f.open_output_stream("out2/run/notes.txt") as o:
        o.write(b"mine")
    p = cli(s3, "run", "s3://corpus/shards/", "-o", "s3://out2/run", "-q", "--no-html")
    assert p.returncode == 2 and "s3://out2/run" in p.stderr and "not empty" in p.stderr
    assert output_complete("s3://out2/run")[0] is False
    # --overwrite replaces an earlier output only: the user's object is named and kept
    p = cli(s3, "run", "s3://corpus/shards/", "-o", "s3://out2/run", "-q", "--no-html",
            "--overwrite")
    assert p.returncode == 2 and "s3://out2/run/notes.txt: not written by gpu-dedup" in p.stderr
    assert get(s3, "out2/run/notes.txt") == b"mine"
    f.delete_file("out2/run/notes.txt")
    for _ in range(2):                    # a first output, then one replacing it
        p = cli(s3, "run", "s3://corpus/shards/", "-o", "s3://out2/run", "-q", "--no-html",
                "--overwrite")
        assert p.returncode == 0, p.stderr
    assert output_complete("s3://out2/run") == (True, "")
    f.delete_file("out2/run/data/a.jsonl")
    ok, why = output_complete("s3://out2/run")
    assert not ok and "data/a.jsonl" in why


def test_out_of_core_with_the_work_directory_on_s3(s3, corpus, env, tmp_path):
    from gpu_dedup.config import Config
    from gpu_dedup.pipeline import run
    local, ref = corpus
    s3.make_bucket("work")
    s3.make_bucket("out3")
    report = run(["s3://corpus/shards/"], "s3://out3/run", Config(), html=False,
                 work_dir="s3://work/w", partition_bytes="64KiB")
    assert report["work"]["store"] == "disk" and report["work"]["chunks"] > 3
    assert_same_as_local(s3, ref, "out3/run")
    left = s3fs_of(s3).get_file_info(pafs.FileSelector("work/w", recursive=True,
                                                        allow_not_found=True))
    # removed after success (the server may keep its empty folders, which hold nothing)
    assert [f.path for f in left if f.type == pafs.FileType.File] == []


CHILD = r"""
import json, os, signal, sys
from gpu_dedup.config import Config
from gpu_dedup.engine import runner
import gpu_dedup.pipeline as pl
a = json.loads(sys.argv[1])
class Kill(runner.Runner):
    def _progress(self, name, done, total):
        if name == a["stage"] and done >= a["after"]:
            os.kill(os.getpid(), signal.SIGKILL)
pl.Runner = Kill
pl.run(["s3://corpus/shards/"], a["out"], Config(), html=False, work_dir="s3://work/kill",
       partition_bytes="64KiB")
"""


def test_a_run_killed_midway_with_its_work_on_s3_resumes_to_the_same_bytes(s3, corpus, env):
    from gpu_dedup.config import Config
    from gpu_dedup.pipeline import run
    local, ref = corpus
    s3.make_bucket("work")
    s3.make_bucket("out4")
    p = subprocess.run([sys.executable, "-c", CHILD,
                        json.dumps({"stage": "signatures", "after": 2, "out": "s3://out4/run"})],
                       capture_output=True, text=True, cwd=ROOT, env=dict(os.environ),
                       timeout=600)
    assert p.returncode == -signal.SIGKILL, p.stderr[-3000:]
    assert output_complete("s3://out4/run")[0] is False
    # the read stage completed before the kill; its marker is on S3
    done = "/" + layout.stage("read") + layout.MARKER
    assert any(u.endswith(done) for u in fs.listdir("s3://work/kill"))
    report = run(["s3://corpus/shards/"], "s3://out4/run", Config(), html=False,
                 work_dir="s3://work/kill", partition_bytes="64KiB")
    assert report["work"]["reused"].get("read", 0) == report["work"]["units"]["read"]
    assert report["work"]["reused"].get("signatures", 0) >= 2
    assert_same_as_local(s3, ref, "out4/run")


def test_substr_from_s3_to_s3_gives_the_local_bytes(s3, corpus, env, tmp_path):
    local, _ = corpus
    ref = str(tmp_path / "ref")
    assert cli(s3, "substr", local, "-o", ref, "-q", "-L", "5").returncode == 0
    s3.make_bucket("out5")
    p = cli(s3, "substr", "s3://corpus/shards", "-o", "s3://out5/s", "-q", "-L", "5")
    assert p.returncode == 0, p.stderr
    for name in ("spans.parquet", "documents.parquet", *(f"data/{n}" for n in SHARDS)):
        assert get(s3, f"out5/s/{name}") == read(os.path.join(ref, name)), name


def test_bad_credentials_a_missing_bucket_and_key_are_one_line_without_the_secret(s3, corpus):
    wrong = {**os.environ, **s3.env(), "AWS_SECRET_ACCESS_KEY": "not-the-secret-4711"}
    p = cli(s3, "run", "s3://corpus/shards/", "-o", "/tmp/never-written", env=wrong)
    assert p.returncode == 2, p.stderr
    line = p.stderr.strip()
    assert len(line.splitlines()) == 1 and "s3://corpus/shards" in line
    assert "not-the-secret-4711" not in line and s3.secret_key not in line
    p = cli(s3, "run", "s3://no-such-bucket/x/", "-o", "/tmp/never-written")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
    assert "s3://no-such-bucket/x" in p.stderr
    p = cli(s3, "run", "s3://corpus/shards/missing.jsonl", "-o", "/tmp/never-written")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
    assert "s3://corpus/shards/missing.jsonl" in p.stderr
    assert not os.path.exists("/tmp/never-written")
    p = cli(s3, "run", "s3://corpus/shards/", "-o", "s3://no-such-bucket/out")
    assert p.returncode == 2 and "s3://no-such-bucket/out" in p.stderr
    assert s3.secret_key not in p.stderr


def test_an_index_on_s3_builds_adds_and_deduplicates_like_a_local_one(s3, corpus, env,
                                                                      tmp_path):
    local, _ = corpus
    li = str(tmp_path / "idx")
    assert cli(s3, "index", "build", os.path.join(local, "a.jsonl"), "--index", li,
               "-q").returncode == 0
    ref = str(tmp_path / "ref")
    assert cli(s3, "run", os.path.join(local, "c.parquet"), "--against", li, "-o", ref,
               "-q", "--no-html").returncode == 0
    s3.make_bucket("idx")
    p = cli(s3, "index", "build", "s3://corpus/shards/a.jsonl", "--index", "s3://idx/idx", "-q")
    assert p.returncode == 0, p.stderr
    assert any(u.endswith("/index.json") for u in fs.listdir("s3://idx/idx"))
    p = cli(s3, "index", "build", "s3://corpus/shards/a.jsonl", "--index", "s3://idx/idx", "-q")
    assert p.returncode == 2 and "s3://idx/idx" in p.stderr          # never built over
    s3.make_bucket("out6")
    p = cli(s3, "run", "s3://corpus/shards/c.parquet", "--against", "s3://idx/idx", "-o",
            "s3://out6/r", "-q", "--no-html")
    assert p.returncode == 0, p.stderr
    assert get(s3, "out6/r/clusters.parquet") == read(os.path.join(ref, "clusters.parquet"))
    # adding an input grows the remote index as it grows a local one
    for idx in (li, "s3://idx/idx"):
        p = cli(s3, "index", "add", os.path.join(local, "b.jsonl.gz"), "--index", idx, "-q",
                "--json")
        assert p.returncode == 0, p.stderr
    infos = [json.loads(cli(s3, "index", "info", "--index", i, "--json").stdout)
             for i in (li, "s3://idx/idx")]
    assert infos[0]["docs"] == infos[1]["docs"] > 0


def test_storage_options_from_the_command_line_or_a_preset_table(s3, corpus, tmp_path):
    local, ref = corpus
    bare = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    opts = {"endpoint_override": s3.endpoint, "access_key": s3.access_key,
            "secret_key": s3.secret_key, "region": s3.region}
    s3.make_bucket("out7")
    p = cli(s3, "run", "s3://corpus/shards/", "-o", "s3://out7/a", "-q", "--no-html",
            "--storage-options", json.dumps(opts), env=bare)
    assert p.returncode == 0, p.stderr
    assert get(s3, "out7/a/clusters.parquet") == read(os.path.join(ref, "clusters.parquet"))
    preset = tmp_path / "p.toml"
    preset.write_text("threshold = 0.8\n[storage]\n" + "".join(
        f"{k} = {json.dumps(v)}\n" for k, v in opts.items()))
    p = cli(s3, "run", "s3://corpus/shards/", "-o", "s3://out7/b", "-q", "--no-html",
            "--config", str(preset), env=bare)
    assert p.returncode == 0, p.stderr
    assert json.loads(get(s3, f"out7/b/{SUCCESS_NAME}"))["files"]
    # no secret in the report
    assert s3.secret_key.encode() not in get(s3, "out7/b/report.json")
    assert s3.secret_key.encode() not in get(s3, "out7/a/report.json")
