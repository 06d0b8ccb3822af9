"""Errors that say what to fix: exit status 2, one line naming the file and
line (or row) and the field or id, no traceback (``--debug`` shows it), and
nothing written. ``--on-bad-record skip`` skips bad records instead and lists
them; no valid record is lost."""
from __future__ import annotations

import gzip
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

import forkcli

GOOD = [{"id": f"g{i}", "text": f"good document number {i} with a few more words"}
        for i in range(4)]


def _run(*args):
    return forkcli.run([str(a) for a in args], text=True)


def _jsonl(recs) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in recs).encode()


def _gz_flipped() -> bytes:
    raw = gzip.compress(_jsonl(GOOD * 50), mtime=0)
    b = bytearray(raw)
    b[len(b) // 2] ^= 0xFF
    return bytes(b)


# name -> (file name, bytes, text the one-line message must hold after the path)
CASES = {
    "malformed JSON": ("a.jsonl", _jsonl(GOOD[:2]) + b'{"id": "x", "text": "unclosed\n',
                       ":3: malformed JSON"),
    "missing text field": ("a.jsonl", _jsonl(GOOD[:1]) + b'\n{"id": "x", "body": "t"}\n',
                           ":3: missing text field 'text'"),
    "text not a string": ("a.jsonl", _jsonl(GOOD[:3]) + b'{"id": "x", "text": ["a"]}\n',
                          ":4: field 'text' is not a string (array)"),
    "text null": ("a.jsonl", b'{"id": "x", "text": null}\n' + _jsonl(GOOD),
                  ":1: field 'text' is not a string (null)"),
    "not an object": ("a.jsonl", _jsonl(GOOD[:1]) + b"null\n", ":2: expected a JSON object"),
    "missing id": ("a.jsonl", _jsonl(GOOD[:2]) + b'{"text": "no id here"}\n',
                   ":3: missing id field 'id'"),
    "corrupt gzip": ("a.jsonl.gz", _gz_flipped(), ": corrupt or unreadable gzip data"),
    "not gzip at all": ("a.jsonl.gz", b"plain text pretending", ": corrupt or unreadable gzip"),
    "truncated zstd": ("a.jsonl.zst", zstandard.ZstdCompressor().compress(
        _jsonl(GOOD * 40))[:-9], ": corrupt or unreadable zstd data"),
    "empty gzip file": ("a.jsonl.gz", b"", ": empty file, not valid gzip data"),
    "not parquet": ("a.parquet", b"PAR1 but not really", ": not a readable Parquet file"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_exits_2_with_one_line_and_writes_nothing(tmp_path, name):
    fname, body, where = CASES[name]
    src = tmp_path / fname
    src.write_bytes(body)
    out = tmp_path / "out"
    r = _run("run", src, "-o", out)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: ") and (str(src) + where) in lines[0], lines[0]
    assert "Traceback" not in r.stderr and r.stdout == ""
    assert sorted(os.listdir(tmp_path)) == [fname]          # no output, no temp folder


def test_debug_shows_the_traceback(tmp_path):
    src = tmp_path / "a.jsonl"
    src.write_bytes(CASES["malformed JSON"][1])
    r = _run("--debug", "run", src, "-o", tmp_path / "out")
    assert r.returncode != 0 and "Traceback" in r.stderr and "InputError" in r.stderr
    assert not (tmp_path / "out").exists()


def test_duplicate_ids_across_files_name_both_places(tmp_path):
    a = tmp_path / "a.jsonl"
    a.write_bytes(_jsonl(GOOD))
    b = tmp_path / "b.jsonl"
    b.write_bytes(_jsonl([{"id": "other", "text": "x y z"}, {"id": "g2", "text": "again"}]))
    r = _run("run", a, b, "-o", tmp_path / "out")
    assert r.returncode == 2
    line = r.stderr.strip()
    assert f"{b}:2: duplicate id 'g2' (first at {a}:3)" in line and "--id-field none" in line
    assert not (tmp_path / "out").exists()


def test_parquet_null_text_and_missing_column(tmp_path):
    p = tmp_path / "p.parquet"
    pq.write_table(pa.table({"text": ["a b c", None, "d e f"], "id": ["1", "2", "3"]}), p)
    r = _run("run", p, "-o", tmp_path / "out")
    assert r.returncode == 2 and f"{p}: row 2: field 'text' is not a string (null)" in r.stderr
    q = tmp_path / "q.parquet"
    pq.write_table(pa.table({"body": ["a b c"]}), q)
    r = _run("run", q, "-o", tmp_path / "out2", "--on-bad-record", "skip")
    assert r.returncode == 2 and f"{q}: missing text field 'text' (columns: body)" in r.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "out2").exists()


def test_output_that_is_an_input_or_inside_one(tmp_path):
    d = tmp_path / "shards"
    d.mkdir()
    (d / "a.jsonl").write_bytes(_jsonl(GOOD))
    before = sorted(os.listdir(d))
    for out in (d, d / "out", d / "a.jsonl"):
        r = _run("run", d, "-o", out, "--overwrite")
        assert r.returncode == 2, out
        assert "must not be an input" in r.stderr and len(r.stderr.strip().splitlines()) == 1
        assert sorted(os.listdir(d)) == before
    # a text corpus directory is an input too
    t = tmp_path / "texts"
    t.mkdir()
    (t / "x.txt").write_text("hello there")
    r = _run("run", t, "-o", t / "out")
    assert r.returncode == 2 and "must not be an input" in r.stderr and not (t / "out").exists()


def test_non_empty_output_survives_without_overwrite(tmp_path):
    src = tmp_path / "a.jsonl"
    src.write_bytes(_jsonl(GOOD))
    out = tmp_path / "out"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    (out / "sub").mkdir()
    (out / "sub" / "x").write_bytes(b"\x00\x01")
    r = _run("run", src, "-o", out)
    assert r.returncode == 2 and "--overwrite" in r.stderr
    assert sorted(os.listdir(out)) == ["precious.txt", "sub"]
    assert (out / "precious.txt").read_text() == "keep me"
    assert (out / "sub" / "x").read_bytes() == b"\x00\x01"
    assert sorted(os.listdir(tmp_path)) == ["a.jsonl", "out"]
    r = _run("run", src, "-o", out, "--overwrite", "--quiet")
    # --overwrite replaces a run's outputs, never a file the run did not make:
    # a file no earlier output listed is named, and the run does nothing
    assert r.returncode == 2 and "precious.txt" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert sorted(os.listdir(out)) == ["precious.txt", "sub"]
    assert (out / "precious.txt").read_text() == "keep me"
    assert (out / "sub" / "x").read_bytes() == b"\x00\x01"


def test_skip_bad_records_counts_lists_and_keeps_every_valid_one(tmp_path):
    body = (_jsonl(GOOD[:2]) + b'{"id": "bad1", "text": \n' + b"\n"
            + b'{"id": "bad2", "text": 7}\n' + _jsonl(GOOD[2:]) + b"not json at all\n"
            + b'{"id": "u1", "text": "caf\xe9 and more words here"}\n')
    src = tmp_path / "a.jsonl"
    src.write_bytes(body)
    pq_src = tmp_path / "b.parquet"
    pq.write_table(pa.table({"id": ["p1", "p2", "p3"], "text": ["x y z", None, "z y x w"]}),
                   pq_src)
    out = tmp_path / "out"
    r = _run("run", src, pq_src, "-o", out, "--on-bad-record", "skip", "--json")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["bad_records"]["skipped"] == 4
    report = json.loads((out / "report.json").read_text())
    recs = report["bad_records"]["records"]
    assert [x.split(": ")[0] for x in recs] == [f"{src}:3", f"{src}:5", f"{src}:8",
                                                f"{pq_src}"]
    assert recs[3].startswith(f"{pq_src}: row 2: field 'text' is not a string")
    assert report["bad_records"]["policy"] == "skip"
    assert report["documents"]["in"] == len(GOOD) + 1 + 2
    assert report["documents"]["invalid_utf8_replaced"] == 1
    ids = pq.read_table(out / "clusters.parquet")["id"].to_pylist()
    assert ids == [r["id"] for r in GOOD] + ["u1", "p1", "p3"]
    # data/ holds the valid kept lines only, byte for byte
    kept = set(pq.read_table(out / "clusters.parquet").filter(
        pa.compute.field("kept"))["id"].to_pylist())
    want = [ln for ln in body.split(b"\n") if ln.startswith(b'{"id": "g')
            or ln.startswith(b'{"id": "u1"')]
    want = [ln for ln in want if json.loads(ln.decode("utf-8", "replace"))["id"] in kept]
    got = (out / "data" / "a.jsonl").read_bytes().split(b"\n")[:-1]
    assert [json.loads(g.decode("utf-8", "replace"))["id"] for g in got] == [json.loads(w.decode("utf-8", "replace"))["id"]
                                                  for w in want]


def test_lone_surrogate_escapes_are_replaced_and_counted(tmp_path):
    src = tmp_path / "s.jsonl"
    src.write_bytes(b'{"id": "a", "text": "broken \\ud800 escape"}\n'
                    b'{"id": "b", "text": "a fine \\ud83d\\ude00 pair"}\n')
    out = tmp_path / "out"
    r = _run("run", src, "-o", out, "--quiet")
    assert r.returncode == 0, r.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["documents"]["invalid_utf8_replaced"] == 1
