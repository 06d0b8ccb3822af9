"""Dependencies point one way: cli -> index -> pipeline -> engine; the index
computes its keys and verifies its matches on the backend ``--device``
chooses.

* ``gpu_dedup.pipeline`` imports nothing of ``gpu_dedup.index`` (at any
  level, inside functions too): ``run --against`` is the index package's,
  which hands the pipeline the documents that come first (``pipeline.Prior``).
* No module of ``gpu_dedup/index/`` imports the package's ``__init__``.
* ``keys_of``, ``window_keys`` and ``overlap`` call the backend (text
  normalization, shingle presence, signatures, band keys, shingle sets,
  Jaccard), and the backend is the one the run uses: ``--device``
  reaches the keys an index stores and the similarities ``overlap`` reports.
"""
from __future__ import annotations

import ast
import json
import os
import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import gpu_dedup
from gpu_dedup import Config, pipeline, shell
from gpu_dedup.backend import CpuBackend

PKG = os.path.dirname(os.path.abspath(gpu_dedup.__file__))


# -- the import graph -------------------------------------------------------------

def _modules() -> dict[str, str]:
    """Every module of ``gpu_dedup`` and of ``gpu_dedup.kernels`` (the
    top-level ``kernels/`` folder): dotted name -> file."""
    import gpu_dedup.kernels
    out = {}
    roots = [(PKG, "gpu_dedup")] + [(k, "gpu_dedup.kernels")
                                    for k in gpu_dedup.kernels.__path__]
    for root, package in roots:
        out.update(_walk(root, package))
    return out


def _walk(root: str, package: str) -> dict[str, str]:
    out = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if os.path.exists(os.path.join(folder, d, "__init__.py"))]
        rel = os.path.relpath(folder, root)
        parts = package.split(".") + ([] if rel == "." else rel.split(os.sep))
        for name in files:
            if name.endswith(".py"):
                stem = name[:-3]
                out[".".join(parts if stem == "__init__" else parts + [stem])] = \
                    os.path.join(folder, name)
    return out


MODULES = _modules()


def _imports(module: str) -> list[tuple[str, list[str], int]]:
    """``(absolute module, names, line)`` of every import statement of
    ``module``, at any level (inside functions too), relative ones resolved."""
    path = MODULES[module]
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, [], node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            out.append((base, [a.name for a in node.names], node.lineno))
    return out


def _targets(module: str) -> list[tuple[str, int]]:
    """The modules of ours ``module`` imports: ``(module, line)``."""
    out = []
    for base, names, line in _imports(module):
        subs = [f"{base}.{n}" for n in names if f"{base}.{n}" in MODULES]
        out += [(s, line) for s in subs]
        if len(subs) < len(names) or not names:
            name = base
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name:
                out.append((name, line))
    return out


def _reachable(start: str) -> dict[str, str]:
    """Every module ``start`` imports, directly or not, with the chain."""
    seen = {start: start}
    todo = [start]
    while todo:
        m = todo.pop()
        for t, line in _targets(m):
            if t not in seen:
                seen[t] = f"{seen[m]} -> {t} (line {line} of {m})"
                todo.append(t)
    del seen[start]
    return seen


def _in(name: str, *packages: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def test_the_pipeline_imports_nothing_of_the_index():
    found = [f"{MODULES['gpu_dedup.pipeline']}:{line}: imports {t}"
             for base, names, line in _imports("gpu_dedup.pipeline")
             for t in [base] + [f"{base}.{n}" for n in names]
             if _in(t, "gpu_dedup.index")]
    assert not found, "\n".join(found)


def test_no_module_of_the_index_imports_its_package():
    found = []
    for m, path in MODULES.items():
        if not m.startswith("gpu_dedup.index."):
            continue
        for base, names, line in _imports(m):
            whole = base == "gpu_dedup.index" and (
                not names or any(f"{base}.{n}" not in MODULES for n in names))
            if whole or (base == "gpu_dedup" and "index" in names):
                found.append(f"{path}:{line}: from {base} import {', '.join(names)}")
    assert not found, "\n".join(found)


@pytest.mark.parametrize("lower, upper", [
    ("gpu_dedup.pipeline", ("gpu_dedup.index", "gpu_dedup.cli", "gpu_dedup.cli_tools")),
    ("gpu_dedup.shell", ("gpu_dedup.pipeline", "gpu_dedup.substr", "gpu_dedup.index",
                         "gpu_dedup.cli")),
    ("gpu_dedup.engine", ("gpu_dedup.shell", "gpu_dedup.pipeline", "gpu_dedup.substr",
                          "gpu_dedup.index", "gpu_dedup.cli")),
    ("gpu_dedup.index", ("gpu_dedup.cli", "gpu_dedup.cli_tools")),
])
def test_dependencies_point_one_way(lower, upper):
    found = []
    for m in MODULES:
        if _in(m, lower):
            found += [chain for t, chain in _reachable(m).items() if _in(t, *upper)]
    assert not found, "\n".join(sorted(found)[:20])


def test_the_checks_see_a_function_level_import():
    """The import reader finds what the rules look for."""
    assert any(base == "gpu_dedup.index.overlap"
               for base, _, _ in _imports("gpu_dedup.cli"))       # inside a function
    assert any(t == "gpu_dedup.index.store" for t, _ in _targets("gpu_dedup.index.overlap"))


# -- the backend reaches the index ---------------------------------------------------

class Recording(CpuBackend):
    """The CPU backend, recording the calls made on it."""

    CALLS = ("normalize", "has_shingles", "minhash", "band_keys", "shingle_sets",
             "jaccard_rows")

    def __init__(self):
        super().__init__()
        self.calls: list[str] = []
        for name in self.CALLS:
            setattr(self, name, self._recorded(name, getattr(CpuBackend, name)))

    def _recorded(self, name, method):
        def call(*args, **kw):
            self.calls.append(name)
            return method(self, *args, **kw)
        return call


class Salted(CpuBackend):
    """Band keys XOR a constant: a run groups them as the CPU's (equal keys
    stay equal), but keys stored from it differ."""

    SALT = np.uint64(0x5A5A5A5A5A5A5A5A)

    def band_keys(self, sig, bands, rows):
        return super().band_keys(sig, bands, rows) ^ self.SALT


def _corpus(tmp_path, name="a.jsonl", n=300, seed=1, prefix="a"):
    rng = random.Random(seed)
    vocab = ["".join(rng.choice("abcdefghijklmnop") for _ in range(rng.randint(3, 8)))
             for _ in range(800)]
    texts = [" ".join(rng.choice(vocab) for _ in range(rng.randint(20, 40))) for _ in range(n)]
    texts += [" ".join(rng.choice(vocab) for _ in range(150)) for _ in range(20)]
    for i in range(40):                                    # planted near-duplicates
        w = texts[i].split()
        w[rng.randrange(len(w))] = "changed"
        texts.append(" ".join(w))
    path = str(tmp_path / name)
    with open(path, "w") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": f"{prefix}{i}", "text": t}) + "\n")
    return path, texts


def _eval_set(tmp_path, texts):
    items = [texts[i] + " extra" for i in range(10)]
    items += [" ".join(texts[n].split()[30:110]) for n in range(300, 310)]   # passages
    path = str(tmp_path / "eval.jsonl")
    with open(path, "w") as f:
        for i, t in enumerate(items):
            f.write(json.dumps({"id": f"e{i}", "text": t}) + "\n")
    return path


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    from gpu_dedup import index as ix
    d = tmp_path_factory.mktemp("layering")
    a, texts = _corpus(d)
    ix.build([a], str(d / "idx"), Config(normalize=("lower", "ws")))
    return d, a, texts, str(d / "idx")


def test_keys_of_and_window_keys_run_on_the_backend_given(indexed):
    from gpu_dedup.index.keys import keys_of
    from gpu_dedup.index.windows import window_keys
    d, a, texts, idx = indexed
    cfg = Config(normalize=("lower", "ws"))
    arr = pa.array(texts, pa.large_string())
    be = Recording()
    keys, docs = keys_of(arr, cfg, be)
    assert {"normalize", "has_shingles", "minhash", "band_keys"} <= set(be.calls), be.calls
    want, want_docs = keys_of(arr, cfg)
    assert np.array_equal(keys, want) and np.array_equal(docs, want_docs)
    be = Recording()
    wk, wd = window_keys(arr, cfg, be)
    assert {"normalize", "has_shingles", "minhash", "band_keys"} <= set(be.calls), be.calls
    assert wk.shape[0] > 0 and np.array_equal(wk, window_keys(arr, cfg)[0])


def test_overlap_verifies_on_the_backend_given(indexed, tmp_path):
    from gpu_dedup.index.overlap import overlap
    d, a, texts, idx = indexed
    ev = _eval_set(tmp_path, texts)
    be = Recording()
    r = overlap([ev], idx, str(tmp_path / "rec"), backend=be)
    assert {"normalize", "has_shingles", "minhash", "band_keys", "shingle_sets",
            "jaccard_rows"} <= set(be.calls), be.calls
    overlap([ev], idx, str(tmp_path / "cpu"))
    got = pq.read_table(str(tmp_path / "rec" / "overlap.parquet"))
    assert got.equals(pq.read_table(str(tmp_path / "cpu" / "overlap.parquet")))
    assert r["summary"]["near_duplicate"] >= 9 and r["summary"]["contained"] >= 9


@pytest.fixture
def device_gpu_is(monkeypatch):
    """``--device gpu`` chooses the backend a test gives (on any machine)."""
    chosen = {}

    def get_backend(device="cpu", gpu_memory=None):
        if device == "gpu":
            return chosen["gpu"], "device: gpu (a test's backend)"
        return CpuBackend(), "device: cpu"
    monkeypatch.setattr(shell, "get_backend", get_backend)

    def use(be):
        chosen["gpu"] = be
        return be
    return use


def test_index_build_stores_the_keys_of_the_device_chosen(tmp_path, device_gpu_is):
    from gpu_dedup import index as ix
    from gpu_dedup.index.keys import keys_of
    from gpu_dedup.index.store import Index
    a, texts = _corpus(tmp_path, n=120)
    device_gpu_is(Salted())
    cfg = Config()
    report = ix.build([a], str(tmp_path / "idx"), cfg, device="gpu")
    assert report["device"] == "gpu (a test's backend)"
    idx = Index(str(tmp_path / "idx"))
    arr = pa.array(texts, pa.large_string())
    salted, _ = keys_of(arr, cfg, Salted())
    plain, _ = keys_of(arr, cfg)
    assert idx.lookup(salted)[0].size == idx.docs
    assert idx.lookup(plain)[0].size == 0


def test_run_against_and_overlap_take_the_device_on_the_command_line(indexed, tmp_path,
                                                                     device_gpu_is):
    from gpu_dedup.cli import main
    d, a, texts, idx = indexed
    b = str(tmp_path / "b.jsonl")
    with open(b, "w") as f:
        for i, t in enumerate(texts[:60]):
            f.write(json.dumps({"id": f"b{i}", "text": t + (" more" if i % 2 else "")}) + "\n")
    ev = _eval_set(tmp_path, texts)
    be = device_gpu_is(Recording())
    r = CliRunner().invoke(main, ["overlap", ev, "--against", idx, "-o", str(tmp_path / "ov"),
                                  "--device", "gpu", "-q"])
    assert r.exit_code == 0, r.output
    assert {"shingle_sets", "jaccard_rows", "band_keys"} <= set(be.calls)
    be = device_gpu_is(Recording())
    r = CliRunner().invoke(main, ["run", b, "--against", idx, "-o", str(tmp_path / "r"),
                                  "--device", "gpu", "-q", "--no-html"])
    assert r.exit_code == 0, r.output
    assert "band_keys" in be.calls
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["device"] == "gpu (a test's backend)" and report["against"][0]["matched"] > 0


def test_run_against_is_the_index_packages(indexed, tmp_path):
    """The inputs against an index equal one run over the indexed documents
    followed by the inputs, restricted to the inputs."""
    from gpu_dedup import index as ix
    d, a, texts, idx = indexed
    cfg = Config(normalize=("lower", "ws"))
    report = ix.run_against([a], str(tmp_path / "again"), cfg, against=[idx], html=False)
    assert report["documents"]["kept"] == 0              # every one indexed already
    assert report["against"][0]["matched"] == report["against"][0]["indexed"]
    with pytest.raises(TypeError):
        pipeline.run([a], str(tmp_path / "x"), cfg, against=[idx])
