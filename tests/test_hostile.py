"""The hostile sweep: one table of command lines a hostile (or careless) user
gives, each run through :func:`hostile.guarded`. Every case ends in exit
status 0 with the outputs it should have, or in exit status 2 with one
``error:`` line holding the text the table names; nothing outside the
output and work folders changes, and no planted credential shows anywhere.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Callable

import pytest

from hostile import guarded

KEY, SECRET = "AKIAPLANTED", "PLANTEDSECRET123"
S3_URL = f"s3://{KEY}:{SECRET}@bucket/x/"
TEXTS = ["the cat sat on the mat today", "the cat sat on the mat today",
         "the cat sat on the mat today!", "a completely different document here",
         "and one more that is unrelated to the others"]


def _jsonl(path, texts=TEXTS):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": f"d{i}", "text": t}) + "\n")


def corpus(root):
    _jsonl(root / "in" / "docs.jsonl")


def bytes_file(name: str | bytes, data: bytes):
    def setup(root):
        (root / "in").mkdir()
        path = os.path.join(os.fsencode(root / "in"), os.fsencode(name))
        with open(path, "wb") as f:
            f.write(data)
    return setup


def nothing(root):
    (root / "in").mkdir()


@dataclass
class Case:
    setup: Callable                      # root -> None: the files of the case under root
    argv: Callable                       # root -> the command line
    expect: int
    says: str | None = None              # a text the error line holds (exit 2)
    outputs: Callable | None = None      # (root, process) -> None: checks an exit 0
    stdin: bytes | None = None
    reason: str | None = None            # fails for a reason in another module: xfail


def run_args(*inputs, extra=()):
    return lambda root: ["run", *[i(root) if callable(i) else i for i in inputs],
                         "-o", root / "out", "--work-dir", root / "work", *extra]


IN = lambda root: root / "in"                                 # noqa: E731
DOCS = lambda root: root / "in" / "docs.jsonl"                # noqa: E731


def run_outputs(documents: int):
    def check(root, p):
        out = root / "out"
        report = json.loads((out / "report.json").read_text())
        assert report["documents"]["in"] == documents
        for name in ("clusters.parquet", "pairs.parquet", "report.html", "data"):
            assert (out / name).exists(), name
        assert "report:" in p.stdout
    return check


def plot_written(root, p):
    assert (root / "out" / "p.png").read_bytes()[:4] == b"\x89PNG"


def tune_printed(root, p):
    assert "recommended (*)" in p.stdout


def doctor_said(root, p):
    assert p.stdout.strip().splitlines()[-1].startswith("verdict: ")


def _non_empty_output(root):
    corpus(root)
    (root / "out").mkdir()
    (root / "out" / "mine.txt").write_text("a user's file")


def _existing_plot_target(root):
    corpus(root)
    (root / "out").mkdir()


def _named_input(name: bytes):
    def setup(root):
        (root / "in").mkdir()
        with open(os.path.join(os.fsencode(root / "in"), name), "w") as f:
            for i, t in enumerate(TEXTS):
                f.write(json.dumps({"id": f"d{i}", "text": t}) + "\n")
    return setup


def _undecodable_input_ok(root, p):
    run_outputs(len(TEXTS))(root, p)
    report = json.loads((root / "out" / "report.json").read_text())
    assert "\\udcff" in report["inputs"][0]["path"]


def _undecodable_output_ok(root, p):
    out = os.path.join(os.fsencode(root / "out"), b"o\xff")
    with open(os.path.join(out, b"report.json"), "rb") as f:
        assert json.load(f)["documents"]["in"] == len(TEXTS)
    import pyarrow as pa
    import pyarrow.parquet as pq
    with pa.OSFile(os.path.join(out, b"clusters.parquet")) as f:
        assert pq.read_table(f).num_rows == len(TEXTS)
    assert "o\\udcff" in p.stdout


CASES = {
    # -- inputs
    "missing input": Case(nothing, run_args(lambda r: r / "in" / "missing.jsonl"), 2,
                          "missing.jsonl"),
    "missing input named with a line break and an escape": Case(
        nothing, run_args(lambda r: r / "in" / "a\nb\x1b[2J.jsonl"), 2, "\\x1b[2J"),
    "directory with no readable files": Case(
        bytes_file("notes.md", b"# not data\n"), run_args(IN), 2, "directory holds no"),
    "empty directory": Case(nothing, run_args(IN), 2, "directory holds no"),
    "empty file": Case(bytes_file("empty.jsonl", b""), run_args(IN), 0,
                       outputs=run_outputs(0)),
    "binary file named .jsonl": Case(bytes_file("bin.jsonl", bytes(range(256)) * 4),
                                     run_args(IN), 2, "bin.jsonl:1"),
    "0-byte parquet": Case(bytes_file("zero.parquet", b""), run_args(IN), 2, "zero.parquet"),
    "parquet that is text": Case(bytes_file("t.parquet", b"PAR1 not really\n"),
                                 run_args(IN), 2, "t.parquet"),
    "stdin with garbage bytes": Case(nothing, run_args("-"), 2, "<stdin>:1",
                                     stdin=b"\x00\xff\xfe garbage \x80\n{not json\n"),
    "stdin empty": Case(nothing, run_args("-"), 0, outputs=run_outputs(0), stdin=b""),
    "input name with an undecodable byte": Case(
        _named_input(b"docs\xff.jsonl"), run_args(IN), 0, outputs=_undecodable_input_ok),
    "input with credentials": Case(nothing, run_args(S3_URL), 2, "s3://***@bucket"),
    # -- outputs
    "output that is an input": Case(
        corpus, lambda r: ["run", DOCS(r), "-o", DOCS(r)], 2, "must not be an input"),
    "output inside an input": Case(
        corpus, lambda r: ["run", IN(r), "-o", r / "in" / "out"], 2, "must not be an input"),
    "non-empty output without --overwrite": Case(_non_empty_output, run_args(IN), 2,
                                                 "--overwrite"),
    "output with credentials": Case(
        corpus, lambda r: ["run", IN(r), "-o", S3_URL], 2, "s3://***@bucket"),
    "work dir with credentials": Case(
        corpus, lambda r: ["run", IN(r), "-o", r / "out", "--work-dir", S3_URL], 2,
        "s3://***@bucket"),
    "output name with an undecodable byte": Case(
        corpus, lambda r: ["run", IN(r), "-o", os.fsdecode(os.path.join(
            os.fsencode(r / "out"), b"o\xff"))], 0,
        outputs=_undecodable_output_ok),
    # -- options
    "threshold 1.5": Case(corpus, run_args(IN, extra=["--threshold", "1.5"]), 2,
                          "--threshold must be in (0, 1]"),
    "threshold not a number": Case(corpus, run_args(IN, extra=["--threshold", "high"]), 2,
                                   "'high' is not a valid float"),
    "bands x rows above num-perm": Case(
        corpus, run_args(IN, extra=["--bands", "100", "--rows", "100"]), 2,
        "exceeds --num-perm"),
    "memory limit 12XB": Case(corpus, run_args(IN, extra=["--memory-limit", "12XB"]), 2,
                              "--memory-limit"),
    "config nosuch": Case(corpus, run_args(IN, extra=["--config", "nosuch"]), 2,
                          "--config nosuch"),
    "storage options not JSON": Case(
        corpus, run_args(IN, extra=["--storage-options", f"{{'secret_key': {SECRET}"]), 2,
        "--storage-options"),
    "missing inputs argument": Case(nothing, lambda r: ["run", "-o", r / "out"], 2,
                                    "Missing argument"),
    "a good run": Case(corpus, run_args(IN), 0, outputs=run_outputs(len(TEXTS))),
    "substr on an empty file": Case(
        bytes_file("empty.jsonl", b""), lambda r: ["substr", IN(r), "-o", r / "out"], 0,
        outputs=lambda r, p: json.loads((r / "out" / "report.json").read_text())),
    # -- tune and doctor
    "tune plot over a user's file": Case(
        corpus, lambda r: ["tune", "--plot", DOCS(r)], 2, "docs.jsonl"),
    "tune plot into the output": Case(
        _existing_plot_target, lambda r: ["tune", "--plot", r / "out" / "p.png"], 0,
        outputs=plot_written),
    "tune plot into a missing folder": Case(
        nothing, lambda r: ["tune", "--plot", r / "in" / "no" / "p.png"], 2, "p.png"),
    "tune 100000 hashes": Case(nothing, lambda r: ["tune", "--num-perm", "100000"], 0,
                               outputs=tune_printed),
    "tune too many hashes": Case(nothing, lambda r: ["tune", "--num-perm", "10000000"], 2,
                                 "--num-perm"),
    "tune threshold 0": Case(nothing, lambda r: ["tune", "--threshold", "0"], 2,
                             "--threshold"),
    "doctor": Case(nothing, lambda r: ["doctor"], 0, outputs=doctor_said),
}


def _param(name, case):
    marks = [pytest.mark.xfail(strict=True, reason=case.reason)] if case.reason else []
    return pytest.param(case, id=name, marks=marks)


@pytest.mark.parametrize("case", [_param(n, c) for n, c in CASES.items()])
def test_hostile(tmp_path, case):
    case.setup(tmp_path)
    argv = case.argv(tmp_path)
    p = guarded(tmp_path, *argv, writable=(str(tmp_path / "out"), str(tmp_path / "work")),
                expect=case.expect, says=case.says, input=case.stdin, cwd=tmp_path)
    for text in (p.stdout, p.stderr):
        assert SECRET not in text and KEY not in text
    if case.expect == 0 and case.outputs is not None:
        case.outputs(tmp_path, p)
