"""The command line's edge against a hostile user: no credential is ever
shown or saved, a file name that is not valid UTF-8 is printed escaped, an
error of the user's environment is one line and exit status 2, ``tune``
neither overwrites a user's file nor takes minutes, and ``doctor`` passes on
a healthy machine without a GPU."""
from __future__ import annotations

import errno
import json
import logging
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from click.testing import CliRunner

from gpu_dedup import cli, edge
from gpu_dedup.errors import DedupError
from gpu_dedup.params import MAX_NUM_PERM, choose_bands_rows
from hostile import guarded, run_cli

KEY, SECRET = "AKIAPLANTED", "PLANTEDSECRET123"
S3_URL = f"s3://{KEY}:{SECRET}@bucket/x/"


def write_jsonl(path, texts, ids=True):
    with open(path, "w") as f:
        for i, t in enumerate(texts):
            rec = {"id": f"doc{i}", "text": t} if ids else {"text": t}
            f.write(json.dumps(rec) + "\n")


TEXTS = ["the cat sat on the mat today", "the cat sat on the mat today",
         "the cat sat on the mat today!", "a completely different document here"]


def assert_secret_nowhere(p, *folders):
    """Neither the key nor the secret in the run's stdout, stderr, or any file
    under ``folders``."""
    for text in (p.stdout, p.stderr):
        assert SECRET not in text and KEY not in text, text[-2000:]
    for folder in folders:
        for d, dirs, names in os.walk(folder):
            for n in names + dirs:
                assert SECRET not in n and KEY not in n, os.path.join(d, n)
            for n in names:
                with open(os.path.join(d, n), "rb") as f:
                    data = f.read()
                assert SECRET.encode() not in data and KEY.encode() not in data, \
                    os.path.join(d, n)


# -- credentials -----------------------------------------------------------

@pytest.fixture()
def docs(tmp_path):
    path = tmp_path / "docs.jsonl"
    write_jsonl(path, TEXTS)
    return path


def _args(command, where, docs, out, work):
    inputs = [S3_URL] if where == "input" else [str(docs)]
    output = S3_URL if where == "output" else str(out)
    work_dir = S3_URL if where == "work-dir" else str(work)
    return [command, *inputs, "-o", output, "--work-dir", work_dir]


@pytest.mark.parametrize("command", ["run", "substr"])
@pytest.mark.parametrize("where", ["input", "output", "work-dir"])
def test_a_url_with_credentials_is_never_shown(tmp_path, docs, command, where):
    out, work = tmp_path / "out", tmp_path / "work"
    args = _args(command, where, docs, out, work)
    p = guarded(tmp_path, *args, writable=(str(out), str(work)), expect=2)
    assert "***@bucket" in p.stderr, p.stderr
    assert_secret_nowhere(p, tmp_path)
    # the log lines and the JSON summary say nothing more
    p = guarded(tmp_path, "--log-level", "debug", *args, "--json",
                writable=(str(out), str(work)), expect=2)
    assert_secret_nowhere(p, tmp_path)


def test_debug_traceback_masks_credentials_too(tmp_path, docs):
    p = run_cli("--debug", "run", S3_URL, "-o", tmp_path / "out")
    assert p.returncode == 2 and "Traceback" in p.stderr
    assert p.stderr.strip().splitlines()[-1].startswith("error: ")
    assert_secret_nowhere(p, tmp_path)


def test_a_secret_in_options_and_a_url_like_input_name_are_not_saved(tmp_path):
    # a local folder whose relative name reads as a URL with credentials
    folder = tmp_path / "http:" / f"{KEY}:{SECRET}@host"
    folder.mkdir(parents=True)
    write_jsonl(folder / "docs.jsonl", TEXTS)
    name = f"http://{KEY}:{SECRET}@host/docs.jsonl"
    opts = json.dumps({"secret_key": SECRET, "access_key": KEY, "region": "us-east-1"})
    for command, out in (("run", tmp_path / "out"), ("substr", tmp_path / "sub")):
        extra = ["-L", "3"] if command == "substr" else []
        p = guarded(tmp_path, "--log-level", "info", command, name, "-o", out, "--json",
                    "--storage-options", opts, *extra, writable=(str(out),), expect=0,
                    cwd=tmp_path)
        assert_secret_nowhere(p, out)
        report = json.loads((out / "report.json").read_text())
        first = report["inputs"][0]
        assert (first["path"] if command == "run" else first) == "http://***@host/docs.jsonl"
        if command == "run":
            assert "http://***@host/docs.jsonl" in (out / "report.html").read_text()
        p = guarded(tmp_path, command, name, "-o", out, "--overwrite", *extra,
                    writable=(str(out),), expect=0, cwd=tmp_path)
        assert_secret_nowhere(p, out)


def test_generated_ids_do_not_carry_credentials(tmp_path):
    folder = tmp_path / "http:" / f"{KEY}:{SECRET}@host"
    folder.mkdir(parents=True)
    write_jsonl(folder / "docs.jsonl", TEXTS, ids=False)
    out = tmp_path / "out"
    p = guarded(tmp_path, "run", f"http://{KEY}:{SECRET}@host/docs.jsonl", "-o", out,
                "--id-field", "none", writable=(str(out),), expect=0, cwd=tmp_path)
    assert_secret_nowhere(p, out)


def test_log_records_are_masked():
    import io
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    root = logging.getLogger()
    root.addHandler(handler)
    # another test in this process may have quietened the library's logger
    lib = logging.getLogger("gpu_dedup")
    level = lib.level
    lib.setLevel(logging.WARNING)
    try:
        edge.install_log_filter()
        logging.getLogger("gpu_dedup.io").warning("reading %s, name \udcff", S3_URL)
    finally:
        root.removeHandler(handler)
        lib.setLevel(level)
    text = buf.getvalue()
    assert "s3://***@bucket/x/" in text and "\\udcff" in text
    assert SECRET not in text and KEY not in text


# -- names that are not valid UTF-8 ----------------------------------------

def test_printable_escapes_lone_surrogates():
    assert edge.printable("ok é 日本") == "ok é 日本"
    assert edge.printable("a\udcffb") == "a\\udcffb"
    tree = edge.clean_tree({"p\udcfe": ["x\udcff", 3, {"u": S3_URL}], "n": None})
    assert tree == {"p\\udcfe": ["x\\udcff", 3, {"u": "s3://***@bucket/x/"}], "n": None}
    json.dumps(tree).encode("utf-8")


def test_the_error_line_is_one_line_whatever_the_message(monkeypatch, tmp_path):
    from gpu_dedup import pipeline

    def boom(*a, **k):
        raise DedupError("bad\nname \x1b[2Jhere\r\nand \udcff")
    monkeypatch.setattr(pipeline, "run", boom)
    r = CliRunner().invoke(cli.main, ["run", "x.jsonl", "-o", str(tmp_path / "o")],
                           catch_exceptions=False)
    assert r.exit_code == 2
    assert r.stderr == "error: bad name \\x1b[2Jhere and \\udcff\n"


def test_tune_plot_name_with_an_undecodable_byte(tmp_path):
    name = os.fsdecode(b"curves\xff.png")
    p = guarded(tmp_path, "tune", "--plot", name, cwd=tmp_path, writable=(str(tmp_path),),
                expect=0)
    assert "curves\\udcff.png" in p.stdout
    assert os.path.exists(os.path.join(os.fsencode(tmp_path), b"curves\xff.png"))
    p = guarded(tmp_path, "tune", "--plot", name, cwd=tmp_path, expect=2, says="\\udcff")
    assert "already exists" in p.stderr


def _fake_report(path):
    return {"documents": {"in": 1, "kept": 1, "removed": 0, "exact_removed": 0,
                          "fuzzy_removed": 0},
            "clusters": {}, "edges": {"candidates": 0, "verified": 0}, "selection": {},
            "bad_records": {"skipped": 0}, "seconds": {"total": 0.1},
            "device": f"cpu {path}", "inputs": [{"path": path}]}


def test_summary_json_and_error_line_with_surrogates(monkeypatch, tmp_path):
    from gpu_dedup import pipeline
    monkeypatch.setattr(pipeline, "run", lambda *a, **k: _fake_report("in\udcff.jsonl"))
    out = str(tmp_path / "o\udcff")
    r = CliRunner().invoke(cli.main, ["run", "x.jsonl", "-o", out], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "o\\udcff" in r.stdout and "report.html" in r.stdout
    r = CliRunner().invoke(cli.main, ["run", "x.jsonl", "-o", out, "--json"],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["device"] == "cpu in\\udcff.jsonl"

    def boom(*a, **k):
        raise DedupError(f"in\udcff.jsonl: no such file, nor {S3_URL}")
    monkeypatch.setattr(pipeline, "run", boom)
    r = CliRunner().invoke(cli.main, ["run", "x.jsonl", "-o", out], catch_exceptions=False)
    assert r.exit_code == 2
    assert r.stderr.strip() == "error: in\\udcff.jsonl: no such file, nor s3://***@bucket/x/"


def test_report_json_and_html_escape_surrogates(tmp_path):
    import pyarrow as pa

    from gpu_dedup.config import Config
    from gpu_dedup.pipeline import deduplicate
    from gpu_dedup.pipeline import run
    from gpu_dedup.report import write_report_json
    from gpu_dedup.report_html import write_html
    src = tmp_path / "docs.jsonl"
    write_jsonl(src, TEXTS)
    report = run([str(src)], str(tmp_path / "out"), Config(num_perm=16), html=False)
    report["inputs"][0]["path"] = "in\udcff.jsonl"
    report["work"]["dir"] = S3_URL
    write_report_json(str(tmp_path / "r.json"), report)
    raw = (tmp_path / "r.json").read_bytes()
    back = json.loads(raw.decode("utf-8"))
    assert back["inputs"][0]["path"] == "in\\udcff.jsonl"
    assert back["work"]["dir"] == "s3://***@bucket/x/" and SECRET.encode() not in raw

    result = deduplicate(TEXTS, Config(num_perm=16))

    class Corpus:                    # ids that quote a URL with its credentials
        texts = pa.array(TEXTS, pa.large_string())
        ids = pa.array([f"{S3_URL}docs.jsonl:{i}" for i in range(len(TEXTS))])
    write_html(str(tmp_path / "r.html"), report, result, Corpus)
    page = (tmp_path / "r.html").read_bytes().decode("utf-8")
    assert "in\\udcff.jsonl" in page and SECRET not in page and KEY not in page
    assert "s3://***@bucket/x/docs.jsonl:0" in page


# -- the user's environment: one line, exit 2 ------------------------------

@pytest.mark.parametrize("exc,says", [
    (OSError(errno.ENOSPC, "No space left on device", "/full/out/clusters.parquet"),
     "error: /full/out/clusters.parquet: No space left on device"),
    (PermissionError(errno.EACCES, "Permission denied", "/ro/out"),
     "error: /ro/out: Permission denied"),
    (OSError(errno.EROFS, "Read-only file system", f"{S3_URL}a"),
     "error: s3://***@bucket/x/a: Read-only file system"),
    (OSError(errno.EDQUOT, "Disk quota exceeded"), "error: Disk quota exceeded"),
])
def test_environment_errors_are_one_line(monkeypatch, tmp_path, exc, says):
    from gpu_dedup import pipeline

    def boom(*a, **k):
        raise exc
    monkeypatch.setattr(pipeline, "run", boom)
    r = CliRunner().invoke(cli.main, ["run", "x.jsonl", "-o", str(tmp_path / "o")],
                           catch_exceptions=False)
    assert r.exit_code == 2
    assert r.stderr.strip().splitlines() == [r.stderr.strip()]
    assert r.stderr.strip().startswith(says), r.stderr


@pytest.mark.parametrize("exc", [OSError(errno.EBADF, "Bad file descriptor"), OSError("odd"),
                                 ValueError("a bug"), KeyError("k")])
def test_genuine_bugs_are_not_hidden(monkeypatch, tmp_path, exc):
    from gpu_dedup import pipeline

    def boom(*a, **k):
        raise exc
    monkeypatch.setattr(pipeline, "run", boom)
    with pytest.raises(type(exc)):
        CliRunner().invoke(cli.main, ["run", "x.jsonl", "-o", str(tmp_path / "o")],
                           catch_exceptions=False)


def test_broken_pipe_on_stdout_is_one_line():
    p = subprocess.Popen([sys.executable, "-m", "gpu_dedup.cli", "tune"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()                 # the reader goes away before anything is written
    err = p.stderr.read().decode("utf-8", "replace")
    assert p.wait(timeout=120) == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "pipe" in lines[0], err


@pytest.mark.parametrize("args,says", [
    (["run"], "Missing argument 'INPUTS...'"),
    (["run", "x.jsonl", "-o", "o", "--workers", "many"], "'many' is not a valid integer"),
    (["tune", "--bogus"], "No such option '--bogus'"),
    (["nosuchcommand"], "No such command 'nosuchcommand'"),
])
def test_usage_errors_are_one_line(tmp_path, args, says):
    guarded(tmp_path, *args, cwd=tmp_path, expect=2, says=says)


# -- tune --plot never overwrites a user's file ----------------------------

def test_tune_plot_refuses_an_existing_file(tmp_path):
    target = tmp_path / "mine.jsonl"
    target.write_bytes(b'{"text": "precious"}\n')
    p = guarded(tmp_path, "tune", "--plot", target, expect=2, says=str(target))
    assert "--overwrite" in p.stderr
    assert target.read_bytes() == b'{"text": "precious"}\n'
    guarded(tmp_path, "tune", "--plot", target, "--overwrite", writable=(str(target),),
            expect=0)
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(os.listdir(tmp_path)) == ["mine.jsonl"]       # no temporary left


def test_tune_plot_is_atomic(tmp_path, monkeypatch):
    import matplotlib.figure

    from gpu_dedup.tune import plot, tune_table
    target = tmp_path / "curves.png"
    target.write_bytes(b"old")

    def fail(self, fname, **kw):
        with open(fname, "wb") as f:
            f.write(b"half a png")
        raise OSError(errno.ENOSPC, "No space left on device", str(fname))
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", fail)
    with pytest.raises(DedupError, match="No space left"):
        plot(tune_table(0.8, 128), str(target), overwrite=True)
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["curves.png"]


def test_tune_plot_into_a_missing_folder_is_one_line(tmp_path):
    guarded(tmp_path, "tune", "--plot", tmp_path / "no" / "such" / "p.png", expect=2,
            says="p.png")


# -- tune is fast for a large budget, and chooses as before -----------------

def _exhaustive(threshold, num_perm, fp_weight=0.01, fn_weight=0.99):
    """The choice by trying every split, as the engine did before."""
    grid = np.linspace(0.0, 1.0, 2001)
    lo, hi = grid <= threshold, grid >= threshold
    best, best_err = None, np.inf
    for b in range(1, num_perm + 1):
        for r in range(1, num_perm // b + 1):
            p = 1.0 - (1.0 - grid ** r) ** b
            fp = float(np.trapezoid(p[lo], grid[lo])) if lo.sum() > 1 else 0.0
            fn = float(np.trapezoid(1.0 - p[hi], grid[hi])) if hi.sum() > 1 else 0.0
            err = fp_weight * fp + fn_weight * fn
            if err < best_err - 1e-12:
                best_err, best = err, (b, r, fp, fn)
    return best


@pytest.mark.parametrize("k", [1, 2, 3, 7, 16, 64, 96, 127, 128, 200, 256])
@pytest.mark.parametrize("t", [0.05, 0.3, 0.5, 0.7, 0.8, 0.85, 0.9, 0.99, 1.0])
def test_choice_equals_trying_every_split(k, t):
    c = choose_bands_rows(t, k)
    b, r, fp, fn = _exhaustive(t, k)
    # the oracle's ``**`` may differ from the module's products in the last bit
    assert (c.bands, c.rows) == (b, r)
    assert (c.fp_area, c.fn_area) == (pytest.approx(fp, rel=1e-12, abs=1e-300),
                                      pytest.approx(fn, rel=1e-12, abs=1e-300))


@pytest.mark.parametrize("t,k,fp,fn", [(0.8, 128, 0.5, 0.5), (0.7, 256, 1.0, 0.0),
                                       (0.7, 256, 0.0, 1.0), (0.5, 64, 0.3, 0.7),
                                       (0.6, 100, 0.2, 0.8)])
def test_choice_with_other_weights_equals_trying_every_split(t, k, fp, fn):
    c = choose_bands_rows(t, k, fp, fn)
    b, r, fp_area, fn_area = _exhaustive(t, k, fp, fn)
    assert (c.bands, c.rows) == (b, r)
    assert (c.fp_area, c.fn_area) == (pytest.approx(fp_area, rel=1e-12, abs=1e-300),
                                      pytest.approx(fn_area, rel=1e-12, abs=1e-300))


#: (threshold, K) -> (bands, rows, FP area, FN area) as trying every split
#: chose them (that took up to 34 s each); the areas are the module's own, to
#: the last bit, which is the same on every CPU
LARGE = {
    (0.8, 128): (18, 7, 0.18405555474772545, 0.0002869925205166382),
    (0.5, 1000): (158, 5, 0.1667936398479074, 0.00011391303224692456),
    (0.8, 1024): (78, 13, 0.11310332753697902, 0.00013895142884437034),
    (0.9, 2048): (75, 27, 0.0651585469533786, 6.764727784208319e-05),
    (0.8, 2048): (132, 15, 0.10291512448288383, 8.346604238447416e-05),
    (0.5, 2048): (315, 6, 0.14455437537592533, 0.00010182527113745951),
    (0.7, 512): (64, 8, 0.14057648451728985, 0.0004158738625987615),
    (0.05, 1024): (128, 1, 0.04225576892042699, 1.0373393806215436e-05),
    (0.99, 2048): (14, 145, 0.012169892386926043, 3.1407326406556934e-05),
    (0.5, 4096): (585, 7, 0.12373875656601557, 0.00013583497110521568),
    (0.8, 4096): (227, 18, 0.0820181434080772, 0.00014398055997595535),
    (0.9, 4096): (128, 32, 0.05554912885835755, 5.935673609673607e-05),
    (0.5, 9000): (1125, 8, 0.1088471003046671, 0.000148191204740133),
    (0.8, 9000): (428, 21, 0.06981506081537293, 0.00015052602820213637),
    (0.9, 9000): (236, 38, 0.04660983889803196, 5.865210277628671e-05),
    # thresholds within a grid step or two of 0 or 1: long runs of near ties
    (0.999, 9000): (9, 1000, 0.0018283520767274932, 4.1522481219449036e-06),
    (0.9995, 9000): (7, 1285, 0.0015166863177481108, 1.3461246271280108e-06),
    (0.001, 9000): (9000, 1, 0.0007444210352744707, 3.139996402060086e-08),
    (0.0005, 9000): (9000, 1, 0.00024722587455458246, 2.836239244132427e-06),
    (1.0, 6000): (1, 6000, 0.00027617500856661967, 0.0),
    (1.0, 20000): (1, 19999, 0.00025002265561562323, 0.0),
    (0.0004, 6000): (6000, 1, 0.0, 1.3737576160741727e-05),
    (0.0004, 12000): (12000, 1, 0.0, 6.218201471583918e-07),
}
#: the same with other weights: (threshold, K, fp weight, fn weight) -> choice
LARGE_WEIGHED = {
    (0.8, 6000, 1.0, 0.0): (1, 108, 2.509273899775633e-13, 0.19082343817996972),
    (0.8, 6000, 0.0, 1.0): (15, 1, 0.7374996875006467, 4.0965103531576055e-13),
    (0.9, 5000, 0.001, 0.999): (161, 31, 0.0662368178642602, 7.6074907395796255e-06),
    (0.95, 5000, 0.0001, 0.9999): (102, 49, 0.050012691637322394, 3.544398496086684e-07),
}


@pytest.mark.parametrize("t,k", sorted(LARGE))
def test_choice_for_large_budgets_is_unchanged(t, k):
    c = choose_bands_rows(t, k)
    assert (c.bands, c.rows, c.fp_area, c.fn_area) == LARGE[(t, k)]


def test_choice_and_areas_do_not_depend_on_the_cpus_vector_unit():
    """NumPy picks its loops by CPU (AVX-512, AVX2, baseline), and ``power``
    differs between them in the last bit; a run must choose the same bands
    and rows, with the same areas, on every machine."""
    try:
        from numpy._core import _multiarray_umath as umath
    except ImportError:                          # NumPy 1.x
        from numpy.core import _multiarray_umath as umath
    keys = [(0.9, 4096), (0.99, 2048), (0.999, 9000), (0.8, 128), (0.5, 1000)]
    code = ("import json, sys; from gpu_dedup.params import choose_bands_rows as c; "
            "print(json.dumps([[x.bands, x.rows, x.fp_area.hex(), x.fn_area.hex()] "
            f"for x in (c(t, k) for t, k in {keys!r})]))")
    env = dict(os.environ, NPY_DISABLE_CPU_FEATURES=" ".join(umath.__cpu_dispatch__))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, check=True)
    here = [[x.bands, x.rows, x.fp_area.hex(), x.fn_area.hex()]
            for x in (choose_bands_rows(t, k) for t, k in keys)]
    assert json.loads(done.stdout) == here


@pytest.mark.parametrize("t,k,fp,fn", sorted(LARGE_WEIGHED))
def test_choice_for_large_budgets_and_other_weights_is_unchanged(t, k, fp, fn):
    c = choose_bands_rows(t, k, fp, fn)
    assert (c.bands, c.rows, c.fp_area, c.fn_area) == LARGE_WEIGHED[(t, k, fp, fn)]


def test_tune_with_100000_hashes_takes_seconds(tmp_path):
    t0 = time.perf_counter()
    p = guarded(tmp_path, "tune", "--num-perm", "100000", expect=0, timeout=120)
    assert time.perf_counter() - t0 < 30, "tune --num-perm 100000 is too slow"
    assert "recommended (*)" in p.stdout and "of 100000 hashes" in p.stdout
    t0 = time.perf_counter()
    c = choose_bands_rows(0.8, 100_000)
    assert time.perf_counter() - t0 < 10
    assert c.bands * c.rows <= 100_000


@pytest.mark.parametrize("command", [["tune"], ["config", "show"]])
def test_num_perm_has_an_upper_bound(tmp_path, command):
    guarded(tmp_path, *command, "--num-perm", MAX_NUM_PERM + 1, expect=2, says="--num-perm")


# -- doctor without a GPU --------------------------------------------------

def test_doctor_passes_on_a_healthy_machine_without_gpu(monkeypatch):
    from gpu_dedup import backend_gpu, doctor
    monkeypatch.setattr(backend_gpu, "probe", lambda: (False, "CuPy is not installed"))
    monkeypatch.setattr(backend_gpu, "simulator_enabled", lambda: False)
    lines = []
    assert doctor.main(lines.append) == 0
    text = "\n".join(lines)
    assert "GPU: none usable (CuPy is not installed)" in text
    oks = [ln for ln in lines if ln.strip().startswith("ok ")]
    assert len(oks) >= 6 and not any(ln.strip().startswith("DIFF") for ln in lines)
    last = lines[-1]
    assert last.startswith("verdict: CPU path healthy") and "no GPU" in last
    assert "CuPy is not installed" in last


def test_doctor_fails_when_the_cpu_path_is_broken(monkeypatch):
    from gpu_dedup import backend, backend_gpu, doctor
    monkeypatch.setattr(backend_gpu, "probe", lambda: (False, "no CUDA device"))
    monkeypatch.setattr(backend_gpu, "simulator_enabled", lambda: False)
    real = backend.CpuBackend.minhash

    def flipped(self, *a, **k):
        sig, counts = real(self, *a, **k)
        sig = sig.copy()
        sig[0, 0] ^= sig.dtype.type(1)
        return sig, counts
    monkeypatch.setattr(backend.CpuBackend, "minhash", flipped)
    lines = []
    assert doctor.main(lines.append) == 2
    assert any(ln.strip().startswith("DIFF") for ln in lines)
    assert lines[-1].startswith("verdict: CPU path BROKEN")


def test_doctor_cli_exits_0_without_gpu(tmp_path):
    from gpu_dedup.backend_gpu import probe
    usable, _ = probe()
    assert "NUMBA_ENABLE_CUDASIM" not in os.environ
    p = run_cli("doctor", timeout=300)
    if usable:                      # a GPU here: the full comparison decides
        assert p.returncode in (0, 2)
        return
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert p.stdout.strip().splitlines()[-1].startswith("verdict: CPU path healthy")


def test_echo_survives_a_strict_ascii_stdout():
    p = subprocess.run([sys.executable, "-c",
                        "from gpu_dedup.edge import echo; echo('caf\u00e9 \\udcff x')"],
                       capture_output=True, env={**os.environ, "PYTHONIOENCODING": "ascii"})
    assert p.returncode == 0, p.stderr
    assert p.stdout.decode("ascii").strip() == "caf\\xe9 \\udcff x"
