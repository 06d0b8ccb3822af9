"""The kernels on one shared layer: each per-document step is written once
(in ``kernels/text.py``, ``kernels/primitives.py`` or ``kernels/runs.py``)
and called by the CPU loops and the CUDA kernels alike; modules import one way, keep their private
names to themselves and stay under 600 lines; the CPU path imports no GPU
package.
"""
from __future__ import annotations

import ast
import glob
import os
import random
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KERNELS = os.path.join(ROOT, "kernels")
MODULES = sorted(glob.glob(os.path.join(KERNELS, "*.py"))
                 + glob.glob(os.path.join(ROOT, "gpu_dedup", "backend*.py")))


def _name(path: str) -> str:
    rel = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
    return "gpu_dedup." + rel if rel.startswith("kernels.") else rel


def _tree(path: str) -> ast.Module:
    with open(path, encoding="utf-8") as f:
        return ast.parse(f.read())


def _imports(path: str):
    """``(module, name)`` of every import from a gpu_dedup module (``name``
    None for ``import module``), relative imports resolved."""
    package = _name(path).rsplit(".", 1)[0]
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("gpu_dedup"):
                    yield a.name, None
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("gpu_dedup"):
                for a in node.names:
                    yield target, a.name


def test_no_kernel_or_backend_module_is_over_600_lines():
    long = {}
    for path in MODULES:
        with open(path, encoding="utf-8") as f:
            n = sum(1 for _ in f)
        if n > 600:
            long[os.path.relpath(path, ROOT)] = n
    assert not long, long


def test_no_private_name_is_imported_across_modules():
    known = {_name(p) for p in MODULES}
    crossing = []
    for path in MODULES:
        aliases = {}
        for module, name in _imports(path):
            if name is None:
                continue
            if f"{module}.{name}" in known:          # ``from . import cpu as _cpu``
                aliases[name] = module
            if name.startswith("_") and not name.startswith("__"):
                crossing.append(f"{os.path.relpath(path, ROOT)}: from {module} import {name}")
        tree = _tree(path)
        bound = {a.asname or a.name for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom)
                 for a in node.names if a.name in aliases}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in bound and node.attr.startswith("_")
                    and not node.attr.startswith("__")):
                crossing.append(f"{os.path.relpath(path, ROOT)}: {node.value.id}.{node.attr}")
    assert not crossing, crossing


def _kernel_graph():
    graph = {}
    for path in glob.glob(os.path.join(KERNELS, "*.py")):
        me = _name(path)
        deps = set()
        for module, name in _imports(path):
            for cand in (f"{module}.{name}", module):
                if cand.startswith("gpu_dedup.kernels.") and cand != me:
                    deps.add(cand.rsplit(".", 1)[1] if cand.count(".") == 2 else cand)
        graph[me.rsplit(".", 1)[1]] = {d.rsplit(".", 1)[-1] for d in deps}
    return graph


def test_kernel_modules_import_one_way():
    graph = _kernel_graph()
    # no cycle
    state: dict = {}

    def visit(m, path):
        if state.get(m) == 1:
            pytest.fail(f"import cycle: {' -> '.join(path + [m])}")
        if state.get(m) == 2:
            return
        state[m] = 1
        for d in sorted(graph.get(m, ())):
            visit(d, path + [m])
        state[m] = 2
    for m in sorted(graph):
        visit(m, [])
    # the shared layer imports no loop of either target, and the targets
    # do not import each other
    targets = {"cpu", "buckets", "cuda", "cuda_kernels", "simulator"}
    for shared in ("text", "hashing", "primitives", "runs", "greedy", "substr"):
        assert shared in graph and not graph[shared] & targets, (shared, graph.get(shared))
    assert not {"cuda", "cuda_kernels"} & graph["cpu"], graph["cpu"]
    assert "cpu" not in graph["cuda"] | graph.get("cuda_kernels", set())


#: Steps written once: the kernel modules allowed to call each of them.
WRITTEN_ONCE = {
    "is_space": {"text"},              # words: kernels.text.next_word
    "permute": {"primitives"},         # the minimum fold
    "band_key_step": {"primitives"},   # band keys
    "intersect_at_least": {"runs"},
}


def test_each_shared_step_is_called_from_its_one_definition():
    callers: dict = {k: set() for k in WRITTEN_ONCE}
    for path in glob.glob(os.path.join(KERNELS, "*.py")):
        me = os.path.basename(path)[:-3]
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
                name = name.lstrip("_")
                if name in callers:
                    callers[name].add(me)
    wrong = {k: sorted(v - WRITTEN_ONCE[k]) for k, v in callers.items() if v - WRITTEN_ONCE[k]}
    assert not wrong, wrong


def test_the_cpu_path_imports_no_gpu_package():
    code = ("import sys\nimport pyarrow as pa\nimport gpu_dedup, gpu_dedup.backend\n"
            "from gpu_dedup import Config, deduplicate\n"
            "deduplicate(pa.array(['the cat sat on the mat', 'the cat sat on a mat', 'x']),"
            " Config(threshold=0.5, shingle='word', ngram=2))\n"
            "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('cupy', 'cupyx', 'cudf', 'cugraph') or m.startswith(('numba.cuda', "
            "'gpu_dedup.kernels.cuda', 'gpu_dedup.kernels.simulator', 'gpu_dedup.backend_')))))\n")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "", proc.stdout


# -- the word scanner ------------------------------------------------------------

SPACES = [chr(c) for c in range(0x3100) if chr(c).isspace()]


def _random_text(rng: random.Random) -> str:
    pool = ["a", "bc", "é", "日本", "😀", "x1"] + SPACES
    return "".join(rng.choice(pool) for _ in range(rng.randint(0, 30)))


def test_next_word_finds_python_words_with_their_code_point_bounds():
    from gpu_dedup.kernels.text import next_word
    rng = random.Random(5)
    for _ in range(400):
        text = _random_text(rng)
        buf = np.frombuffer(text.encode() or b"\0", np.uint8)
        end = len(text.encode())
        words, p, cp = [], 0, 0
        while True:
            s, e, c0, cp = next_word(buf, p, end, cp)
            if s == e:
                assert s == end
                break
            words.append((bytes(buf[s:e]).decode(), c0, cp))
            p = e
        want, at = [], 0
        for w in text.split():
            at = text.index(w, at)
            want.append((w, at, at + len(w)))
            at += len(w)
        assert words == want, repr(text)


def test_folded_spaces_are_python_split_joined():
    from gpu_dedup.kernels.text import fold_spaces_doc
    rng = random.Random(6)
    for _ in range(400):
        text = _random_text(rng)
        data = np.frombuffer(text.encode() or b"\0", np.uint8)
        end = len(text.encode())
        out = np.zeros(max(end, 1), np.uint8)
        n = fold_spaces_doc(data, 0, end, out, 0)
        assert n == fold_spaces_doc(data, 0, end, np.zeros(0, np.uint8), 0)
        assert bytes(out[:n]).decode() == " ".join(text.split()), repr(text)
