"""The command line explains itself: every command and every option has help
text, and progress shows on a terminal only."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import click
import pytest

from gpu_dedup import progress
from gpu_dedup.cli import main
from gpu_dedup.config import Config
from gpu_dedup.pipeline import run

CLI = [sys.executable, "-m", "gpu_dedup.cli"]


def _walk(cmd, path=()):
    yield path, cmd
    if isinstance(cmd, click.Group):
        for name, sub in sorted(cmd.commands.items()):
            yield from _walk(sub, path + (name,))


def test_every_command_and_option_has_help():
    seen = []
    for path, cmd in _walk(main):
        name = " ".join(("gpu-dedup",) + path)
        assert (cmd.help or "").strip(), f"{name}: no help text"
        assert (cmd.get_short_help_str() or "").strip(), f"{name}: no short help"
        for p in cmd.params:
            if isinstance(p, click.Option):
                assert (p.help or "").strip(), f"{name} {p.opts[0]}: no help text"
                assert len(p.help.strip()) >= 10, f"{name} {p.opts[0]}: help too short"
            elif isinstance(p, click.Argument):
                assert p.name.upper() in cmd.help, f"{name}: help does not explain {p.name}"
        seen.append(path)
    assert {(), ("run",), ("tune",), ("demo",), ("doctor",), ("config",), ("config", "show"),
            ("config", "list")} <= set(seen)


@pytest.mark.parametrize("args", [["--help"], ["run", "--help"], ["tune", "--help"],
                                  ["config", "show", "--help"], ["demo", "-h"]])
def test_help_renders(args):
    r = subprocess.run(CLI + args, capture_output=True, text=True)
    assert r.returncode == 0 and "Usage:" in r.stdout and r.stderr == ""


def test_run_keeps_its_contract_options():
    run_cmd = main.commands["run"]
    opts = {o for p in run_cmd.params for o in getattr(p, "opts", [])}
    contract = {"--output", "--text-field", "--id-field", "--shingle", "--ngram", "--normalize",
                "--num-perm", "--bands", "--rows", "--threshold", "--seed", "--keep", "--device",
                "--overwrite", "--config", "--on-bad-record", "--quiet", "--json"}
    assert contract <= opts


class _TTY(io.StringIO):
    def isatty(self):
        return True


def test_progress_bars_per_stage_on_a_terminal_only(tmp_path):
    assert not progress.wanted(stream=io.StringIO())
    assert not progress.wanted(quiet=True, stream=_TTY())
    pytest.importorskip("tqdm", reason="progress bars need tqdm")
    assert progress.wanted(stream=_TTY())
    src = tmp_path / "a.jsonl"
    src.write_text("".join(json.dumps({"id": i, "text": f"some text number {i % 7} here"}) + "\n"
                           for i in range(200)))
    tty = _TTY()
    read = []
    with progress.StageProgress(stream=tty, delay=0) as prog:
        def on_bytes(done, total):
            read.append((done, total))
            prog.read_bytes(done, total)
        run([str(src)], str(tmp_path / "out"), Config(), on_stage=prog.stage,
            on_progress=prog.fraction, on_bytes=on_bytes)
    shown = tty.getvalue()
    # the bytes read, as the inputs are read
    size = os.path.getsize(src)
    assert read and read[-1] == (size, size)
    assert f"{size / 1e6:,.1f} of {size / 1e6:,.1f} MB read" in shown
    for stage in ("read", "exact", "signatures", "buckets", "select", "assign", "write",
                  "report"):
        assert stage in shown, stage
    # every stage whose tasks report progress reaches 100%
    assert shown.count("100%") >= 5
    # not a terminal (as here, captured): no bars on stderr
    r = subprocess.run(CLI + ["run", str(src), "-o", str(tmp_path / "out2")],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "%|" not in r.stderr
    assert r.stdout.startswith("200 documents: kept 7, removed 193")
