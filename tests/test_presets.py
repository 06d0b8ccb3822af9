"""Presets in configs/: what each sets, where it comes from, that each runs,
that --config NAME|PATH works with command-line flags overriding only what
was given, and that `config show` prints TOML that --config reads back."""
from __future__ import annotations

import json
import tomllib

import pytest

import forkcli
from gpu_dedup.config import Config
from gpu_dedup.demo import COOKBOOK_CONFIG, planted_corpus
from gpu_dedup.errors import ConfigError
from gpu_dedup.params import choose_bands_rows
from gpu_dedup.presets import load_preset, preset_names, preset_path, resolve

PRESETS = ["cookbook", "default", "fineweb", "nemo", "slimpajama"]


def _run(*args):
    return forkcli.run([str(a) for a in args], text=True)


def test_the_shipped_presets_and_their_sources():
    assert set(PRESETS) <= set(preset_names())
    for name in PRESETS:
        text = preset_path(name).read_text()
        comments = [ln for ln in text.splitlines() if ln.startswith("#")]
        assert len(comments) >= 3, name                      # says where it comes from
        assert comments[0].startswith(f"# {name}:"), name
    assert "cookbook" in preset_path("cookbook").read_text().lower()
    assert "datatrove" in preset_path("fineweb").read_text()
    assert "NeMo Curator" in preset_path("nemo").read_text()
    assert "SlimPajama" in preset_path("slimpajama").read_text()


def test_presets_hold_the_documented_settings():
    assert resolve("default").config == Config()
    assert resolve("cookbook").config == COOKBOOK_CONFIG
    c = resolve("cookbook").config
    assert (c.shingle, c.ngram, c.num_perm, c.bands, c.rows) == ("word", 3, 128, 32, 4)
    f = resolve("fineweb").config
    assert (f.shingle, f.ngram, f.bands, f.rows, f.num_perm, f.seed) == ("word", 5, 14, 8, 112, 1)
    assert {"lower", "punct", "ws"} <= set(f.normalize)
    n = resolve("nemo").config
    assert (n.shingle, n.ngram, n.bands, n.rows, n.num_perm, n.normalize) == \
        ("char", 24, 20, 13, 260, ())
    s = resolve("slimpajama").config
    assert (s.shingle, s.ngram, s.num_perm, s.threshold) == ("char", 13, 128, 0.8)
    assert s.normalize == ("lower", "punct", "ws")
    eq = choose_bands_rows(0.8, 128, 0.5, 0.5)            # datasketch's equal weights
    assert (s.bands, s.rows) == (eq.bands, eq.rows)


def test_overrides_and_errors(tmp_path):
    r = resolve("nemo", {"threshold": 0.7, "bands": 10, "rows": 26})
    assert (r.config.ngram, r.config.threshold, r.config.bands, r.config.rows) == (24, 0.7, 10, 26)
    assert resolve("nemo", {"threshold": 0.7}).config.bands == 20     # split kept
    with pytest.raises(ConfigError, match=r"20 bands x 13 rows = 260 .* --num-perm 128"):
        resolve("nemo", {"num_perm": 128})
    with pytest.raises(ConfigError, match="unknown preset"):
        resolve("nope")
    bad = tmp_path / "bad.toml"
    bad.write_text('shingle = "word"\nngrams = 3\n')
    with pytest.raises(ConfigError, match=r"bad.toml: unknown key 'ngrams'"):
        load_preset(str(bad))
    bad.write_text('ngram = "three"\n')
    with pytest.raises(ConfigError, match="key 'ngram' has the wrong type"):
        load_preset(str(bad))
    bad.write_text('ngram = = 3\n')
    with pytest.raises(ConfigError, match=r"bad.toml: not valid TOML.*line 1"):
        load_preset(str(bad))


def test_config_show_round_trips_through_a_file(tmp_path):
    r = _run("config", "show", "--config", "fineweb", "--threshold", "0.6", "--keep", "longest")
    assert r.returncode == 0, r.stderr
    values = tomllib.loads(r.stdout)
    assert values["threshold"] == 0.6 and values["keep"] == "longest"
    assert values["ngram"] == 5 and values["bands"] == 14 and values["seed"] == 1
    assert "overridden on the command line: keep, threshold" in r.stdout
    f = tmp_path / "mine.toml"
    f.write_text(r.stdout)
    r2 = _run("config", "show", "--config", f)
    assert r2.returncode == 0, r2.stderr
    assert tomllib.loads(r2.stdout) == values
    r3 = _run("config", "show", "--config", "nemo", "--num-perm", "64")
    assert r3.returncode == 2 and "tune" in r3.stderr and "Traceback" not in r3.stderr


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("presets")
    texts, _ = planted_corpus(150, seed=5)
    texts = [t + " and some more words to make long char shingles work" for t in texts]
    p = d / "c.jsonl"
    p.write_text("".join(json.dumps({"id": str(i), "text": t}) + "\n"
                         for i, t in enumerate(texts)))
    return p


@pytest.mark.parametrize("name", PRESETS)
def test_each_preset_runs(corpus, tmp_path, name):
    out = tmp_path / "out"
    r = _run("run", corpus, "-o", out, "--config", name, "--seed", "7", "--quiet")
    assert r.returncode == 0, r.stderr
    rep = json.loads((out / "report.json").read_text())
    want = resolve(name, {"seed": 7}).config.resolved()
    got = rep["parameters"]
    for k in ("shingle", "ngram", "num_perm", "bands", "rows", "threshold"):
        assert got[k] == getattr(want, k), (name, k)
    assert got["seed"] == 7 and got["normalize"] == list(want.normalize)
    assert rep["documents"]["in"] == rep["documents"]["kept"] + rep["documents"]["removed"]
    if name == "cookbook":
        assert rep["documents"]["removed"] > 0              # planted pairs are found
