"""The output directory: early checks, staging inside it, locked publishing,
clean-up after failures and after killed runs (gpu_dedup.output)."""
from __future__ import annotations

import errno
import fcntl
import json
import os
import stat
import subprocess
import sys
import textwrap
import threading

import pytest
import xxhash

import gpu_dedup.output
from gpu_dedup.errors import ConfigError, DedupError, InputError
from gpu_dedup.manifest import PENDING_NAME, host
from gpu_dedup.output import (LOCK_NAME, MANIFEST_NAME, STAGING_PREFIX, OutputDir, inside,
                              output_complete)

#: The folder holding the gpu_dedup package imported here, for child processes.
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(gpu_dedup.output.__file__)))


def write(path, text="x"):
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def read(path):
    with open(path) as f:
        return f.read()


def tree(root):
    """{relative path: content or None for a directory} of everything under root."""
    out = {}
    for d, dirs, files in os.walk(root):
        for n in dirs:
            out[os.path.relpath(os.path.join(d, n), root)] = None
        for n in files:
            out[os.path.relpath(os.path.join(d, n), root)] = read(os.path.join(d, n))
    return out


def stage_outputs(staging, tag):
    write(os.path.join(staging, "clusters.parquet"), f"clusters {tag}")
    write(os.path.join(staging, "data", "part-0.jsonl"), f"data {tag}")
    write(os.path.join(staging, f"run-{tag}.txt"), tag)


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


@pytest.fixture
def sleeper():
    p = subprocess.Popen(["sleep", "60"])
    yield p.pid
    p.kill()
    p.wait()


# -- inside ---------------------------------------------------------------
def test_inside_resolves_links_and_respects_component_boundaries(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "ab").mkdir()
    os.symlink(tmp_path / "a", tmp_path / "link")
    assert inside(str(tmp_path / "a" / "b"), str(tmp_path / "a"))
    assert inside(str(tmp_path / "a"), str(tmp_path / "a"))
    assert inside(str(tmp_path / "link" / "b" / "new"), str(tmp_path / "a"))
    assert not inside(str(tmp_path / "ab"), str(tmp_path / "a"))
    assert not inside(str(tmp_path / "a"), str(tmp_path / "a" / "b"))


# -- check ----------------------------------------------------------------
def test_non_empty_without_overwrite_is_refused_and_left_alone(tmp_path):
    out = tmp_path / "out"
    write(out / "notes.txt", "mine")
    write(out / "sub" / "keep.bin", "data")
    before = tree(out)
    with pytest.raises(InputError, match="output directory is not empty") as ei:
        OutputDir(str(out)).check()
    assert "\n" not in str(ei.value) and str(out) in str(ei.value)
    assert tree(out) == before
    # --overwrite replaces an earlier output only: a user's file is named, never removed
    with pytest.raises(InputError, match=f"{out}/notes.txt: not written by gpu-dedup"):
        OutputDir(str(out), overwrite=True).check()
    assert tree(out) == before


def test_output_that_is_a_file_is_refused(tmp_path):
    write(tmp_path / "out", "file")
    with pytest.raises(InputError, match="not a directory"):
        OutputDir(str(tmp_path / "out")).check()


def test_output_is_holds_or_sits_inside_an_input_is_refused(tmp_path):
    corpus = tmp_path / "corpus"
    write(corpus / "a.jsonl", "{}")
    for output in (corpus, corpus / "out"):
        with pytest.raises(InputError, match="must not be an input"):
            OutputDir(str(output), inputs=[str(corpus)]).check()
    with pytest.raises(InputError, match="must not be an input"):
        OutputDir(str(tmp_path), inputs=[str(corpus / "a.jsonl")], overwrite=True).check()
    # Raw specs that name nothing (globs, say) do not count.
    OutputDir(str(tmp_path / "out"), inputs=[str(corpus / "*.jsonl"), str(corpus)]).check()


def test_work_dir_equal_to_or_inside_output_is_refused(tmp_path):
    out = tmp_path / "out"
    for wd in (out, out / "work", out / "a" / "b"):
        with pytest.raises(ConfigError) as ei:
            OutputDir(str(out), work_dir=str(wd)).check()
        assert str(ei.value).startswith(f"--work-dir {wd}: must not be --output or inside it")
        assert "\n" not in str(ei.value)
    OutputDir(str(out), work_dir=str(tmp_path / "work")).check()


def test_work_dir_inside_an_input_is_refused(tmp_path):
    corpus = tmp_path / "corpus"
    write(corpus / "a.jsonl", "{}")
    with pytest.raises(ConfigError, match="--work-dir .*must not be an input"):
        OutputDir(str(tmp_path / "out"), inputs=[str(corpus)],
                  work_dir=str(corpus / "work")).check()


# -- staging and publishing ----------------------------------------------
def test_publish_moves_staged_files_and_writes_a_manifest_last(tmp_path):
    out = tmp_path / "a" / "out"
    with OutputDir(str(out)) as o:
        o.check()
        s = o.staging()
        assert os.path.dirname(s) == str(out)
        assert os.path.basename(s).startswith(STAGING_PREFIX)
        stage_outputs(s, "one")
        names = o.publish()
    assert names == ["clusters.parquet", "data", "run-one.txt"]
    assert sorted(os.listdir(out)) == sorted(names + [MANIFEST_NAME])
    manifest = json.loads(read(out / MANIFEST_NAME))
    assert manifest["tool"] == "gpu-dedup"
    files = {f["name"]: f for f in manifest["files"]}     # files at any depth, no folders
    assert set(files) == {"clusters.parquet", "data/part-0.jsonl", "run-one.txt"}
    assert files["data/part-0.jsonl"]["bytes"] == len("data one")
    assert files["clusters.parquet"]["xxh3_128"] == \
        xxhash.xxh3_128(b"clusters one").hexdigest()
    assert read(out / "data" / "part-0.jsonl") == "data one"
    assert output_complete(str(out)) == (True, "")


def test_file_dropped_in_while_working_stops_publish(tmp_path):
    out = tmp_path / "out"
    o = OutputDir(str(out))
    o.check()
    s = o.staging()
    stage_outputs(s, "one")
    write(out / "user.txt", "mine")
    with pytest.raises(InputError) as ei:
        o.publish()
    msg = str(ei.value)
    assert "\n" not in msg
    assert msg.startswith(f"{out}: output directory is no longer empty (user.txt appeared")
    assert "nothing was written" in msg and "--overwrite" in msg
    assert not os.path.exists(s)
    assert os.listdir(out) == ["user.txt"]              # nothing of ours: no lock, no staging
    assert read(out / "user.txt") == "mine"


def test_two_runs_in_one_process_exactly_one_publishes(tmp_path):
    out = tmp_path / "out"
    a, b = OutputDir(str(out)), OutputDir(str(out))
    a.check()
    b.check()
    sa, sb = a.staging(), b.staging()
    assert sa != sb
    stage_outputs(sa, "a")
    stage_outputs(sb, "b")
    assert a.publish()
    with pytest.raises(InputError, match="no longer empty"):
        b.publish()
    assert tree(out) == {"clusters.parquet": "clusters a", "data": None,
                         "data/part-0.jsonl": "data a", "run-a.txt": "a",
                         MANIFEST_NAME: read(out / MANIFEST_NAME)}


def test_publish_waits_for_the_lock_and_checks_again_under_it(tmp_path):
    out = tmp_path / "out"
    o = OutputDir(str(out))
    stage_outputs(o.staging(), "one")
    lock = str(out / LOCK_NAME)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)                      # another run is publishing
    raised = []

    def publish():
        try:
            o.publish()
        except InputError as exc:
            raised.append(exc)
    t = threading.Thread(target=publish)
    t.start()
    t.join(0.3)
    assert t.is_alive() and not (out / "clusters.parquet").exists()
    write(out / "clusters.parquet", "other run")        # what the other run published
    os.unlink(lock)                                     # it removes its lock file, then lets go
    os.close(fd)
    t.join(10)
    assert not t.is_alive() and len(raised) == 1
    assert "clusters.parquet appeared" in str(raised[0])
    assert os.listdir(out) == ["clusters.parquet"]
    assert read(out / "clusters.parquet") == "other run"


RACER = textwrap.dedent("""
    import os, sys, time
    from gpu_dedup.errors import InputError
    from gpu_dedup.output import OutputDir
    out, sync, tag = sys.argv[1:4]
    o = OutputDir(out)
    o.check()
    s = o.staging()
    for i in range(50):
        with open(os.path.join(s, f"part-{i:02d}.txt"), "w") as f:
            f.write(tag)
    os.makedirs(os.path.join(s, "data"))
    with open(os.path.join(s, "data", "x.txt"), "w") as f:
        f.write(tag)
    with open(os.path.join(s, "run-" + tag), "w") as f:
        f.write(tag)
    open(os.path.join(sync, tag), "w").close()
    deadline = time.time() + 20
    while len(os.listdir(sync)) < 2 and time.time() < deadline:
        time.sleep(0.001)
    try:
        o.publish()
        print("published")
    except InputError as exc:
        print("refused:", exc)
""")


def test_two_processes_into_one_empty_dir_exactly_one_publishes(tmp_path):
    out, sync = tmp_path / "out", tmp_path / "sync"
    sync.mkdir()
    script = tmp_path / "racer.py"
    script.write_text(RACER)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([PACKAGE_ROOT] + [p for p in
                                         env.get("PYTHONPATH", "").split(os.pathsep) if p])
    procs = {tag: subprocess.Popen([sys.executable, str(script), str(out), str(sync), tag],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   env=env)
             for tag in ("p", "q")}
    results = {}
    for tag, p in procs.items():
        stdout, stderr = p.communicate(timeout=60)
        assert p.returncode == 0, stderr
        results[tag] = stdout.strip()
    winners = [t for t, r in results.items() if r == "published"]
    assert len(winners) == 1, results
    loser = ({"p", "q"} - set(winners)).pop()
    assert results[loser].startswith(f"refused: {out}: output directory is no longer empty")
    winner = winners[0]
    files = tree(out)
    assert f"run-{winner}" in files and f"run-{loser}" not in files
    assert {k for k, v in files.items() if v is not None and k != MANIFEST_NAME} == \
        {f"part-{i:02d}.txt" for i in range(50)} | {"data/x.txt", f"run-{winner}"}
    assert all(v == winner for k, v in files.items() if v is not None and k != MANIFEST_NAME)
    assert not any(n.startswith(STAGING_PREFIX) or n == LOCK_NAME for n in os.listdir(out))


def test_symlink_output_writes_into_its_target_and_stays_a_link(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    os.symlink(real, link)
    with OutputDir(str(link)) as o:
        assert o.path == str(link) and o.target == str(real)
        o.check()
        s = o.staging()
        assert os.path.dirname(s) == str(real)
        stage_outputs(s, "one")
        o.publish()
    assert os.path.islink(link) and os.readlink(link) == str(real)
    assert read(real / "run-one.txt") == "one"
    assert sorted(os.listdir(tmp_path)) == ["link", "real"]


def test_existing_empty_dir_keeps_its_mode_and_inode(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    os.chmod(out, 0o750)
    ino = os.stat(out).st_ino
    with OutputDir(str(out)) as o:
        o.check()
        stage_outputs(o.staging(), "one")
        o.publish()
    st = os.stat(out)
    assert stat.S_IMODE(st.st_mode) == 0o750 and st.st_ino == ino
    assert read(out / "run-one.txt") == "one"


def test_mount_point_is_never_renamed_and_nothing_is_made_beside_it(tmp_path, monkeypatch):
    # A mount point cannot be renamed, and its parent may be read-only: every
    # change must happen strictly inside the directory.
    parent = tmp_path / "mnt"
    out = parent / "volume"
    out.mkdir(parents=True)
    write(parent / "other", "neighbour")
    ino, dev = os.stat(out).st_ino, os.stat(out).st_dev
    beside = sorted(os.listdir(parent))
    calls = []
    for name in ("rename", "replace"):
        real = getattr(os, name)

        def spy(src, dst, *a, _real=real, **kw):
            calls.append((os.fspath(src), os.fspath(dst)))
            return _real(src, dst, *a, **kw)
        monkeypatch.setattr(os, name, spy)
    for overwrite in (False, True):
        with OutputDir(str(out), overwrite=overwrite) as o:
            o.check()
            stage_outputs(o.staging(), f"run{int(overwrite)}")
            assert sorted(os.listdir(parent)) == beside
            o.publish()
        assert sorted(os.listdir(parent)) == beside
        assert (os.stat(out).st_ino, os.stat(out).st_dev) == (ino, dev)
    monkeypatch.undo()
    assert calls
    for src, dst in calls:
        assert src.startswith(str(out) + os.sep) and dst.startswith(str(out) + os.sep)
    assert read(out / "run-run1.txt") == "run1" and not (out / "run-run0.txt").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_parent_is_fine(tmp_path):
    parent = tmp_path / "ro"
    out = parent / "out"
    out.mkdir(parents=True)
    os.chmod(parent, 0o555)
    try:
        with OutputDir(str(out)) as o:
            o.check()
            stage_outputs(o.staging(), "one")
            o.publish()
        assert read(out / "run-one.txt") == "one"
    finally:
        os.chmod(parent, 0o755)


# -- leftovers of killed runs ---------------------------------------------
def test_leftovers_of_dead_runs_are_removed_live_ones_kept(tmp_path, sleeper):
    out = tmp_path / "out"
    dead = out / f"{STAGING_PREFIX}{host()}-{dead_pid()}-0badc0de"
    live = out / f"{STAGING_PREFIX}{host()}-{sleeper}-00c0ffee"
    write(dead / "clusters.parquet", "half")
    write(live / "clusters.parquet", "busy")
    beside = tmp_path / ".out.tmp-999999"                # beside the output: never touched
    write(beside / "report.json", "{}")
    o = OutputDir(str(out))
    o.check()                                            # leftovers do not make it non-empty
    assert not dead.exists() and live.exists()
    stage_outputs(o.staging(), "one")
    assert read(beside / "report.json") == "{}"
    o.publish()                                          # a live run's staging is not "foreign"
    assert read(live / "clusters.parquet") == "busy"
    assert read(out / "clusters.parquet") == "clusters one"


# -- failures -------------------------------------------------------------
def test_disk_full_in_a_created_dir_removes_everything(tmp_path):
    out = tmp_path / "a" / "b" / "out"
    with pytest.raises(DedupError) as ei:
        with OutputDir(str(out)) as o:
            o.check()
            s = o.staging()
            write(os.path.join(s, "clusters.parquet"), "half")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    msg = str(ei.value)
    assert "\n" not in msg and "No space left on device" in msg
    assert msg.startswith(f"{out}: cannot write the outputs: ")
    assert isinstance(ei.value.__cause__, OSError)
    assert os.listdir(tmp_path) == []                    # a/, b/ and out/ were this run's


def test_disk_full_in_an_existing_dir_leaves_it_as_it_was(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    os.chmod(out, 0o750)
    ino = os.stat(out).st_ino
    with pytest.raises(DedupError, match="No space left on device"):
        with OutputDir(str(out)) as o:
            stage_outputs(o.staging(), "one")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert os.listdir(out) == []
    st = os.stat(out)
    assert st.st_ino == ino and stat.S_IMODE(st.st_mode) == 0o750


def test_failed_overwrite_publish_restores_the_previous_output(tmp_path, monkeypatch):
    out = tmp_path / "out"
    with OutputDir(str(out)) as o:
        stage_outputs(o.staging(), "old")
        o.publish()
    before = tree(out)
    real, seen = os.rename, []

    def failing(src, dst, *a, **kw):
        seen.append(dst)
        if len(seen) == 5:                               # mid-way through the new entries
            raise OSError(errno.EACCES, os.strerror(errno.EACCES))
        return real(src, dst, *a, **kw)
    monkeypatch.setattr(os, "rename", failing)
    o = OutputDir(str(out), overwrite=True)
    s = o.staging()
    stage_outputs(s, "new")
    with pytest.raises(DedupError, match="cannot write the outputs: Permission denied"):
        o.publish()
    monkeypatch.undo()
    assert tree(out) == before and not os.path.exists(s)


def test_leaving_the_block_without_publish_discards_the_staging(tmp_path):
    out = tmp_path / "out"
    with OutputDir(str(out)) as o:
        s = o.staging()
        stage_outputs(s, "one")
    assert not os.path.exists(s) and not out.exists()


# -- overwrite ------------------------------------------------------------
def test_overwrite_removes_exactly_the_files_of_the_earlier_output(tmp_path):
    out = tmp_path / "out"
    with OutputDir(str(out)) as o:
        s = o.staging()
        stage_outputs(s, "old")
        write(os.path.join(s, "report.html"), "old report")
        write(os.path.join(s, "old", "deep", "x.txt"), "old deep")
        write(os.path.join(s, "data", "part-1.jsonl"), "old part")
        o.publish()
    os.makedirs(out / "data" / "empty")                   # a user's empty folder: kept
    with OutputDir(str(out), overwrite=True) as o:
        o.check()
        stage_outputs(o.staging(), "new")
        names = o.publish()
    assert names == ["clusters.parquet", "data", "run-new.txt"]
    assert tree(out) == {"clusters.parquet": "clusters new", "data": None,
                         "data/part-0.jsonl": "data new", "data/empty": None,
                         "run-new.txt": "new", MANIFEST_NAME: read(out / MANIFEST_NAME)}
    manifest = json.loads(read(out / MANIFEST_NAME))
    assert [f["name"] for f in manifest["files"]] == \
        ["clusters.parquet", "data/part-0.jsonl", "run-new.txt"]


def test_overwrite_refuses_user_files_anywhere_and_changed_output_files(tmp_path):
    out = tmp_path / "out"
    with OutputDir(str(out)) as o:
        stage_outputs(o.staging(), "old")
        o.publish()
    for name, text in (("notes.txt", "mine"), ("data/mine/keep.txt", "mine too")):
        write(out / name, text)
        before = tree(out)
        with pytest.raises(InputError, match=f"{out}/{name}: not written by gpu-dedup") as ei:
            OutputDir(str(out), overwrite=True).check()
        assert "\n" not in str(ei.value)
        assert tree(out) == before
        os.unlink(out / name)
    write(out / "run-old.txt", "OLD")                   # same size, other bytes
    with pytest.raises(InputError, match=f"{out}/run-old.txt: changed since gpu-dedup"):
        OutputDir(str(out), overwrite=True).check()
    # a user's file that appears while the run works stops the publish
    write(out / "run-old.txt", "old")
    o = OutputDir(str(out), overwrite=True)
    o.check()
    stage_outputs(o.staging(), "new")
    write(out / "data" / "late.txt", "mine")
    before = {k: v for k, v in tree(out).items() if not k.startswith(STAGING_PREFIX)}
    with pytest.raises(InputError, match="data/late.txt: not written by gpu-dedup"):
        o.publish()
    assert tree(out) == before


def test_overwrite_of_a_folder_without_manifest_is_refused(tmp_path):
    out = tmp_path / "out"
    write(out / "clusters.parquet", "legacy")
    write(out / "data" / "part-9.jsonl", "legacy part")
    before = tree(out)
    with pytest.raises(InputError, match="clusters.parquet: not written by gpu-dedup"):
        OutputDir(str(out), overwrite=True).check()
    assert tree(out) == before
    # an output of the gpu-dedup versions whose manifest listed folders is named as such
    write(out / ".gpu-dedup-manifest.json", json.dumps({"entries": [{"name": "data"}]}))
    with pytest.raises(InputError, match="an output of an earlier gpu-dedup version"):
        OutputDir(str(out), overwrite=True).check()


def test_a_manifest_naming_files_outside_the_directory_is_refused(tmp_path):
    out = tmp_path / "out"
    write(tmp_path / "precious.txt", "keep")
    for name in ("../precious.txt", "/etc/passwd", "a/../../precious.txt"):
        write(out / MANIFEST_NAME, json.dumps({"tool": "gpu-dedup", "format": 1, "files": [
            {"name": name, "bytes": 4, "xxh3_128": xxhash.xxh3_128(b"keep").hexdigest()}]}))
        with pytest.raises(InputError, match="not a plain relative file name"):
            OutputDir(str(out), overwrite=True).check()
    assert read(tmp_path / "precious.txt") == "keep"
    write(out / MANIFEST_NAME, "")                        # another tool's _SUCCESS
    for overwrite in (False, True):
        with pytest.raises(InputError, match=f"{MANIFEST_NAME}: not a gpu-dedup manifest"):
            OutputDir(str(out), overwrite=overwrite).check()
    assert read(out / MANIFEST_NAME) == ""


def test_a_publish_stopped_half_way_is_incomplete_and_replaced_by_the_next(tmp_path,
                                                                          monkeypatch):
    out = tmp_path / "out"
    with OutputDir(str(out)) as o:
        stage_outputs(o.staging(), "old")
        o.publish()
    o = OutputDir(str(out), overwrite=True)
    stage_outputs(o.staging(), "new")
    real, moved = os.rename, []

    def stop(src, dst, *a, **kw):
        if STAGING_PREFIX in os.fspath(src) and STAGING_PREFIX not in os.fspath(dst):
            moved.append(dst)
            if len(moved) == 2:                          # the second new file: stopped
                raise KeyboardInterrupt
        return real(src, dst, *a, **kw)
    # what a kill leaves: the moves done so far, the pending list, no manifest
    monkeypatch.setattr(os, "rename", stop)
    monkeypatch.setattr(o, "_rollback", lambda: None)
    monkeypatch.setattr(o, "abort", lambda: None)
    with pytest.raises(KeyboardInterrupt):
        o.publish()
    monkeypatch.undo()
    assert os.path.exists(out / PENDING_NAME) and not os.path.exists(out / MANIFEST_NAME)
    ok, why = output_complete(str(out))
    assert not ok and MANIFEST_NAME in why
    with pytest.raises(InputError, match="not empty"):
        OutputDir(str(out)).check()
    with OutputDir(str(out), overwrite=True) as o2:
        o2.check()
        stage_outputs(o2.staging(), "again")
        o2.publish()
    o.abort()
    assert {k: v for k, v in tree(out).items() if k != MANIFEST_NAME} == {
        "clusters.parquet": "clusters again", "data": None, "data/part-0.jsonl": "data again",
        "run-again.txt": "again"}
    assert output_complete(str(out)) == (True, "")
    with open(out / "data" / "part-0.jsonl", "w") as f:
        f.write("data")                                  # truncated
    ok, why = output_complete(str(out))
    assert not ok and "data/part-0.jsonl" in why
