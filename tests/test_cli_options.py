"""Options tried as a new user would: ``--threshold`` next to a fixed LSH
split warns and says what still applies, a bad ``--gpu-memory`` is refused at
once with one line, and ``--debug`` shows the traceback but keeps the exit
status of a library error."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from gpu_dedup.cli import main


def _invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def _lines(text):
    return [line for line in text.splitlines() if line.strip()]


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "docs.jsonl"
    texts = ["the cat sat on the mat today", "the cat sat on the mat today!",
             "a completely different document", "another one, unrelated"]
    with open(path, "w") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": f"d{i}", "text": t}) + "\n")
    return path


# -- --threshold with a fixed split ----------------------------------------------

def test_config_show_warns_when_the_preset_fixes_bands_and_rows():
    r = _invoke("config", "show", "--config", "nemo", "--threshold", "0.7")
    assert r.exit_code == 0, r.output
    warn = [line for line in _lines(r.stderr) if line.startswith("warning:")]
    assert len(warn) == 1 and len(_lines(r.stderr)) == 1, r.stderr
    line = warn[0]
    assert "--threshold 0.7" in line and "--bands 20 --rows 13" in line
    assert "--config nemo" in line
    assert "accepted" in line and "Jaccard >= 0.7" in line
    # the TOML on stdout keeps the preset's split and the new threshold
    assert "bands = 20" in r.stdout and "rows = 13" in r.stdout and "threshold = 0.7" in r.stdout
    assert "warning" not in r.stdout


def test_config_show_warns_when_bands_and_rows_are_given():
    r = _invoke("config", "show", "--bands", "8", "--rows", "4", "--threshold", "0.6",
                "--similarity", "signature")
    assert r.exit_code == 0, r.output
    (line,) = _lines(r.stderr)
    assert line.startswith("warning: --threshold 0.6")
    assert "--bands 8 --rows 4 (given on the command line)" in line
    assert "signature estimate >= 0.6" in line


def test_threshold_without_verification_is_said_to_have_no_effect():
    r = _invoke("config", "show", "--config", "cookbook", "--threshold", "0.5", "--no-verify")
    assert r.exit_code == 0, r.output
    (line,) = _lines(r.stderr)
    assert "--no-verify" in line and "no effect" in line


@pytest.mark.parametrize("args", [
    ["--threshold", "0.7"],                     # the split is chosen from the threshold
    ["--config", "default", "--threshold", "0.7"],
    ["--config", "nemo"],                       # no threshold given
    ["--bands", "8", "--rows", "4"],
])
def test_no_warning_when_the_threshold_chooses_the_split_or_is_not_given(args):
    r = _invoke("config", "show", *args)
    assert r.exit_code == 0, r.output
    assert r.stderr == ""


def test_run_warns_once_too(corpus, tmp_path):
    r = _invoke("run", corpus, "-o", tmp_path / "out", "--config", "cookbook",
                "--threshold", "0.5", "--html", "--json", "--device", "cpu")
    assert r.exit_code == 0, r.output
    warn = [line for line in _lines(r.stderr) if line.startswith("warning:")]
    assert len(warn) == 1, r.stderr
    assert "--bands 32 --rows 4 (from --config cookbook)" in warn[0]
    assert "documents" in json.loads(r.stdout.strip().splitlines()[-1])


# -- --gpu-memory ---------------------------------------------------------------

@pytest.mark.parametrize("value", ["lots", "-1GiB", "0", "8XB"])
@pytest.mark.parametrize("form", ["separate", "equals"])
def test_bad_gpu_memory_exits_2_with_one_line_even_on_cpu(corpus, tmp_path, value, form):
    out = tmp_path / "out"
    opt = ["--gpu-memory", value] if form == "separate" else [f"--gpu-memory={value}"]
    r = _invoke("run", corpus, "-o", out, "--device", "cpu", *opt)
    assert r.exit_code == 2, r.output
    lines = _lines(r.stderr)
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: --gpu-memory") and repr(value) in lines[0]
    assert r.stdout == ""
    assert not out.exists()


def test_good_gpu_memory_is_accepted_on_cpu(corpus, tmp_path):
    r = _invoke("run", corpus, "-o", tmp_path / "out", "--device", "cpu", "--gpu-memory",
                "2GiB", "-q")
    assert r.exit_code == 0, r.output
    assert r.stderr == ""


# -- --debug --------------------------------------------------------------------

def test_debug_shows_the_traceback_and_keeps_exit_status_2(tmp_path):
    missing = tmp_path / "missing.jsonl"
    plain = _invoke("run", missing, "-o", tmp_path / "out")
    assert plain.exit_code == 2
    assert len(_lines(plain.stderr)) == 1 and "Traceback" not in plain.stderr
    r = _invoke("--debug", "run", missing, "-o", tmp_path / "out")
    assert r.exit_code == 2, r.output
    assert "Traceback (most recent call last)" in r.stderr
    assert "InputError" in r.stderr
    last = _lines(r.stderr)[-1]
    assert last.startswith("error: ") and "missing.jsonl" in last
    assert not (tmp_path / "out").exists()


def test_debug_keeps_exit_status_2_for_an_option_error():
    r = _invoke("--debug", "config", "show", "--config", "no-such-preset")
    assert r.exit_code == 2
    assert "Traceback" in r.stderr and "ConfigError" in r.stderr
    assert _lines(r.stderr)[-1].startswith("error: --config no-such-preset")
