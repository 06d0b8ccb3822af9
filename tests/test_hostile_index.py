"""A damaged, raced or colliding index, as a hostile user makes one.

* Every damage to an index file (a part folder, a keys/ folder or a key file
  deleted, a key file cut short, a byte of docs.parquet flipped, index.json's
  counts edited) stops `run --against` and `overlap` with exit status 2 and
  one line naming the file, before anything is written; a query never runs
  on part of an index.
* Two `index add` started together leave the index that running them one
  after the other leaves.
* An input id that is already an indexed id is refused unless its text is
  the indexed text too (then it is already indexed).
"""
from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest

from hostile import guarded, run_cli
from s3server import s3  # noqa: F401  (the fixture)

from gpu_dedup.index.store import Index

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _write(path: str, texts, ids) -> str:
    with open(path, "w", encoding="utf-8") as f:
        for i, t in zip(ids, texts):
            f.write(json.dumps({"id": i, "text": t}) + "\n")
    return path


def _texts(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 9)))
             for _ in range(5000)]
    return [" ".join(rng.choice(words) for _ in range(40)) for _ in range(n)], words


def _near(texts, words, seed: int = 11) -> list[str]:
    """Each text with one of its 40 words replaced: Jaccard about 0.9."""
    rng = random.Random(seed)
    out = []
    for t in texts:
        w = t.split()
        w[rng.randrange(len(w))] = rng.choice(words)
        out.append(" ".join(w))
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """An index of 3,000 generated documents in two parts (a build and an
    add), and 3,000 near-copies of them to query it with."""
    d = tmp_path_factory.mktemp("hostile-index")
    texts, words = _texts(3000)
    a1 = _write(str(d / "a1.jsonl"), texts[:1500], [f"a{i}" for i in range(1500)])
    a2 = _write(str(d / "a2.jsonl"), texts[1500:], [f"a{i}" for i in range(1500, 3000)])
    b = _write(str(d / "b.jsonl"), _near(texts, words), [f"b{i}" for i in range(3000)])
    idx = str(d / "idx")
    p = run_cli("index", "build", a1, "--index", idx, "-q")
    assert p.returncode == 0, p.stderr
    p = run_cli("index", "add", a2, "--index", idx, "-q")
    assert p.returncode == 0, p.stderr
    assert Index(idx).docs == 3000 and len(Index(idx).parts) == 2
    return {"dir": d, "idx": idx, "b": b, "a1": a1, "a2": a2, "texts": texts, "words": words}


def test_an_undamaged_index_answers_every_query(corpus, tmp_path):
    idx = str(tmp_path / "idx")
    shutil.copytree(corpus["idx"], idx)
    out = str(tmp_path / "out")
    p = guarded(str(tmp_path), "run", corpus["b"], "-o", out, "--against", idx, "-q", "--json",
                writable=(out,), expect=0)
    assert json.loads(p.stdout)["documents"]["removed"] == 3000
    ov = str(tmp_path / "ov")
    p = guarded(str(tmp_path), "overlap", corpus["b"], "--against", idx, "-o", ov, "--json",
                writable=(ov,), expect=0)
    assert json.loads(p.stdout)["flagged"] == 3000


def _flip(path: str, at: float = 0.5) -> None:
    with open(path, "r+b") as f:
        size = os.path.getsize(path)
        f.seek(int(size * at))
        b = f.read(1)
        f.seek(int(size * at))
        f.write(bytes([b[0] ^ 0x01]))


def _cut(path: str) -> None:
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def _edit_json(idx: str, change) -> None:
    p = os.path.join(idx, "index.json")
    with open(p) as f:
        meta = json.load(f)
    change(meta)
    with open(p, "w") as f:
        json.dump(meta, f, indent=1)


def _docs_99_everywhere(meta):
    """index.json made consistent with a first part of 99 documents."""
    meta["parts"][0]["docs"] = 99
    meta["parts"][1]["first"] = 99
    meta["docs"] = 99 + meta["parts"][1]["docs"]


DAMAGES = {
    # name: (damage(idx), a text the one error line holds)
    "part folder deleted": (lambda i: shutil.rmtree(os.path.join(i, "part-000001")),
                            "part-000001"),
    "keys folder deleted": (lambda i: shutil.rmtree(os.path.join(i, "part-000000", "keys")),
                            os.path.join("part-000000", "keys")),
    "key file deleted": (lambda i: os.unlink(os.path.join(i, "part-000000", "keys",
                                                          "b003-r000.arrow")),
                         "b003-r000.arrow"),
    # a window key file: `run --against` never reads one, and still refuses
    "window key file deleted": (lambda i: os.unlink(os.path.join(i, "part-000001", "wkeys",
                                                                 "b002-r000.arrow")),
                                "b002-r000.arrow"),
    "key file cut short": (lambda i: _cut(os.path.join(i, "part-000001", "keys",
                                                       "b005-r000.arrow")),
                           "b005-r000.arrow"),
    "key file byte flipped": (lambda i: _flip(os.path.join(i, "part-000000", "keys",
                                                           "b000-r000.arrow"), 0.3),
                              "b000-r000.arrow"),
    "docs.parquet byte flipped": (lambda i: _flip(os.path.join(i, "part-000000",
                                                               "docs.parquet"), 0.5),
                                  os.path.join("part-000000", "docs.parquet")),
    "index.json part docs 99": (lambda i: _edit_json(i, lambda m: m["parts"][0].update(docs=99)),
                                "index.json"),
    "index.json docs 99 everywhere": (lambda i: _edit_json(i, _docs_99_everywhere),
                                      "index.json"),
    "index.json of format 1": (lambda i: _edit_json(i, lambda m: m.update(format=1)),
                               "rebuild"),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_index_stops_every_query_naming_the_file(corpus, tmp_path, damage):
    idx = str(tmp_path / "idx")
    shutil.copytree(corpus["idx"], idx)
    hurt, says = DAMAGES[damage]
    hurt(idx)
    out = str(tmp_path / "out")
    guarded(str(tmp_path), "run", corpus["b"], "-o", out, "--against", idx, "-q",
            writable=(out,), expect=2, says=says)
    assert not os.path.exists(out)
    ov = str(tmp_path / "ov")
    guarded(str(tmp_path), "overlap", corpus["b"], "--against", idx, "-o", ov, "-q",
            writable=(ov,), expect=2, says=says)
    assert not os.path.exists(ov)
    # nor is anything added to it
    guarded(str(tmp_path), "index", "add", corpus["b"], "--index", idx, "-q",
            expect=2, says=says)


def _start(*args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "gpu_dedup.cli", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def racing(corpus, tmp_path_factory):
    """An index of a1, two overlapping inputs x and y (y's first 500 are
    near-copies of x's last 500), and the indexes of adding them one after
    the other, both ways."""
    d = tmp_path_factory.mktemp("racing")
    texts, words = corpus["texts"], corpus["words"]
    x = _write(str(d / "x.jsonl"), texts[1500:2500], [f"x{i}" for i in range(1000)])
    y = _write(str(d / "y.jsonl"), _near(texts[2000:3000], words, 5),
               [f"y{i}" for i in range(1000)])
    base = str(d / "base")
    assert run_cli("index", "build", corpus["a1"], "--index", base, "-q").returncode == 0
    seq = {}
    for order in ((x, y), (y, x)):
        idx = str(d / ("seq-" + "".join(os.path.basename(p)[0] for p in order)))
        shutil.copytree(base, idx)
        for p in order:
            r = run_cli("index", "add", p, "--index", idx, "-q")
            assert r.returncode == 0, r.stderr
        seq[order[0] == x] = {str(i) for i in _all_ids(idx)}
    return base, x, y, seq


def _all_ids(idx: str) -> list[str]:
    out = []
    for p in Index(idx).parts:
        out += pq.read_table(os.path.join(idx, p["name"], "docs.parquet"),
                             columns=["id"]).column("id").to_pylist()
    return out


@pytest.mark.parametrize("apart", [0.0, 0.5])
def test_two_adds_at_once_leave_what_one_after_the_other_leaves(racing, tmp_path, apart):
    base, x, y, seq = racing
    assert len(seq[True]) == len(seq[False]) == 1500 + 1000 + 500
    idx = str(tmp_path / "idx")
    shutil.copytree(base, idx)
    first = _start("index", "add", x, "--index", idx, "-q")
    time.sleep(apart)
    second = _start("index", "add", y, "--index", idx, "-q")
    outs = [first.communicate(timeout=300), second.communicate(timeout=300)]
    assert first.returncode == 0, outs[0][1]
    assert second.returncode == 0, outs[1][1]
    assert all("Traceback" not in err for _, err in outs)
    got = _all_ids(idx)
    assert len(got) == len(set(got)) == 3000
    assert set(got) in (seq[True], seq[False])
    ix = Index(idx)
    assert ix.docs == 3000 and len(ix.parts) == 3
    assert not [n for n in os.listdir(idx) if n.startswith(".staging-")]
    # and the index is whole: a query over it runs
    out = str(tmp_path / "out")
    p = run_cli("run", x, "-o", out, "--against", idx, "-q", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["documents"]["kept"] == 0


def test_two_builds_of_one_folder_at_once_build_it_once(corpus, tmp_path):
    idx = str(tmp_path / "idx")
    procs = [_start("index", "build", corpus["a1"], "--index", idx, "-q") for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 2], outs
    err = [e for p, (_, e) in zip(procs, outs) if p.returncode == 2][0]
    assert len(err.strip().splitlines()) == 1 and "already exists" in err, err
    assert Index(idx).docs == 1500


def test_an_id_already_indexed_with_another_text_is_refused(corpus, tmp_path):
    idx = str(tmp_path / "idx")
    shutil.copytree(corpus["idx"], idx)
    texts, words = corpus["texts"], corpus["words"]
    fresh, _ = _texts(20, seed=99)
    # a20 is a near-copy of the indexed a20, given as a20
    inp = _write(str(tmp_path / "c.jsonl"),
                 [fresh[0], _near([texts[20]], words)[0], fresh[1]], ["new0", "a20", "new1"])
    out = str(tmp_path / "out")
    p = guarded(str(tmp_path), "run", inp, "-o", out, "--against", idx, "-q",
                writable=(out,), expect=2, says="'a20'")
    assert idx in p.stderr and "c.jsonl" in p.stderr
    assert not os.path.exists(out)
    p = guarded(str(tmp_path), "index", "add", inp, "--index", idx, "-q", expect=2, says="'a20'")
    assert idx in p.stderr
    unrelated = _write(str(tmp_path / "d.jsonl"), [fresh[2]], ["a1600"])
    guarded(str(tmp_path), "index", "add", unrelated, "--index", idx, "-q", expect=2,
            says="'a1600'")
    assert Index(idx).docs == 3000


def test_an_id_already_indexed_with_its_own_text_is_already_indexed(corpus, tmp_path):
    idx = str(tmp_path / "idx")
    shutil.copytree(corpus["idx"], idx)
    texts = corpus["texts"]
    fresh, _ = _texts(3, seed=98)
    inp = _write(str(tmp_path / "c.jsonl"), [texts[7], fresh[0], texts[2100]],
                 ["a7", "new0", "a2100"])
    out = str(tmp_path / "out")
    p = run_cli("run", inp, "-o", out, "--against", idx, "-q")
    assert p.returncode == 0, p.stderr
    rows = {r["id"]: r for r in pq.read_table(os.path.join(out, "clusters.parquet")).to_pylist()}
    # a7 is the indexed a7: removed, naming itself in the index
    assert not rows["a7"]["kept"] and rows["a7"]["duplicate_of"] == "a7"
    assert rows["a7"]["duplicate_of_index"] == idx
    assert rows["new0"]["kept"]
    p = run_cli("index", "add", inp, "--index", idx, "-q", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["added"] == 1
    ids = _all_ids(idx)
    assert len(ids) == len(set(ids)) == 3001


def test_an_empty_text_added_twice_under_one_id_is_indexed_once(tmp_path):
    texts, _ = _texts(30, seed=5)
    a = _write(str(tmp_path / "a.jsonl"), texts[:20], [f"a{i}" for i in range(20)])
    idx = str(tmp_path / "idx")
    assert run_cli("index", "build", a, "--index", idx, "-q").returncode == 0
    e = _write(str(tmp_path / "e.jsonl"), ["", texts[25]], ["empty", "e1"])
    for want in (2, 0):
        p = run_cli("index", "add", e, "--index", idx, "-q", "--json")
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout)["added"] == want
    ids = _all_ids(idx)
    assert len(ids) == len(set(ids)) == 22


def test_two_adds_at_once_to_a_remote_index_run_one_after_the_other(racing, s3, tmp_path):
    """On one machine, writers of a remote index share a lock named after it."""
    base, x, y, seq = racing
    env = s3.env()
    s3.make_bucket("racing")
    url = "s3://racing/idx"
    p = run_cli("index", "build", _a1_of(base), "--index", url, "-q", env=env)
    assert p.returncode == 0, p.stderr
    e = dict(os.environ, **env)
    procs = [subprocess.Popen([sys.executable, "-m", "gpu_dedup.cli", "index", "add", f,
                               "--index", url, "-q"], cwd=ROOT, env=e, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for f in (x, y)]
    outs = [q.communicate(timeout=300) for q in procs]
    assert [q.returncode for q in procs] == [0, 0], outs
    p = run_cli("index", "info", "--index", url, "--json", env=env)
    assert p.returncode == 0, p.stderr
    info = json.loads(p.stdout)
    assert info["docs"] == 3000 and len(info["parts"]) == 3
    # the remote index is whole: a query over it checks every file it reads
    out = str(tmp_path / "out")
    p = run_cli("run", x, "-o", out, "--against", url, "-q", "--json", env=env)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["documents"]["kept"] == 0


def _a1_of(base: str) -> str:
    return Index(base).parts[0]["inputs"][0]


def test_a_remote_index_changed_under_a_writer_stops_it(racing, s3, monkeypatch):
    from gpu_dedup.index.remote import local_index
    from gpu_dedup.index.store import BadIndex
    from gpu_dedup.io import fs
    base, x, y, seq = racing
    for k, v in s3.env().items():
        monkeypatch.setenv(k, v)
    fs.set_storage_options(None)
    s3.make_bucket("changed")
    url = "s3://changed/idx"
    p = run_cli("index", "build", _a1_of(base), "--index", url, "-q", env=s3.env())
    assert p.returncode == 0, p.stderr
    before = fs.listdir(url)
    meta = fs.read_bytes(f"{url}/index.json")
    try:
        with pytest.raises(BadIndex, match="changed while this command ran"):
            with local_index(url, write=True) as local:
                os.makedirs(os.path.join(local, "part-000001"))
                with open(os.path.join(local, "part-000001", "docs.parquet"), "wb") as f:
                    f.write(b"a part of this writer")
                with open(os.path.join(local, "index.json"), "ab") as f:
                    f.write(b" ")
                fs.write_bytes(f"{url}/index.json", meta + b"\n")     # another writer
        assert fs.listdir(url) == before                # nothing more uploaded
        assert fs.read_bytes(f"{url}/index.json") == meta + b"\n"
    finally:
        fs.set_storage_options(None)


def test_a_writer_waits_for_the_lock_a_bounded_time_and_says_so(tmp_path, caplog):
    from gpu_dedup.index.lock import writer_lock
    from gpu_dedup.index.store import BadIndex
    d = str(tmp_path)
    # another test in this process may have quietened the library's logger
    caplog.set_level("WARNING", logger="gpu_dedup")
    caplog.set_level("WARNING", logger="gpu_dedup.index")
    with writer_lock(d):
        t0 = time.monotonic()
        with pytest.raises(BadIndex, match="another command has been writing this index"):
            with writer_lock(d, wait=0.5):
                pass
        assert 0.5 <= time.monotonic() - t0 < 5
    assert "waiting for it to end" in caplog.text
    with writer_lock(d, wait=0.0):            # released: taken at once
        pass
    assert os.listdir(d) == ["index.lock"] and os.path.getsize(os.path.join(d, "index.lock")) == 0
