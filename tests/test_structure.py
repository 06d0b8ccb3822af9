"""The shape of the code: no import cycle between the modules of ``gpu_dedup``
and ``gpu_dedup.kernels``, no private name imported from another module, no
module over 600 lines, no handler catching every exception that does not
raise.

The modules are found from the installed package's paths (``gpu_dedup`` and
``gpu_dedup.kernels``, which lives in ``kernels/``). The import graph is read
with ``ast`` from every import statement, at the top of a module and inside
functions alike (a lazy import is still a dependency), relative imports
resolved. Each test prints what violates the rule, with file and line.
"""
from __future__ import annotations

import ast
import os
from collections import deque
from dataclasses import dataclass

import pytest

import gpu_dedup
import gpu_dedup.kernels

MAX_LINES = 600


@dataclass(frozen=True)
class Edge:
    """``source`` imports ``target`` at ``path:line``."""

    source: str
    target: str
    path: str
    line: int

    def __str__(self) -> str:
        return f"{self.source} -> {self.target} ({self.path}:{self.line})"


def modules() -> dict[str, str]:
    """Every module of the two packages: dotted name -> file."""
    out = {}
    for package in (gpu_dedup, gpu_dedup.kernels):
        for root in package.__path__:
            for folder, dirs, files in os.walk(root):
                dirs[:] = sorted(d for d in dirs if d != "__pycache__" and
                                 os.path.exists(os.path.join(folder, d, "__init__.py")))
                rel = os.path.relpath(folder, root)
                parts = [package.__name__] + ([] if rel == "." else rel.split(os.sep))
                for name in sorted(files):
                    if not name.endswith(".py"):
                        continue
                    stem = name[:-3]
                    dotted = ".".join(parts if stem == "__init__" else parts + [stem])
                    out.setdefault(dotted, os.path.join(folder, name))
    return out


MODULES = modules()
#: What file names are shown relative to: the folder holding both packages.
ROOT = os.path.commonpath([os.path.dirname(p) for package in (gpu_dedup, gpu_dedup.kernels)
                           for p in package.__path__])


def _where(path: str) -> str:
    return os.path.relpath(path, ROOT)


def _is_package(name: str) -> bool:
    return os.path.basename(MODULES[name]) == "__init__.py"


def _base(module: str, node: ast.ImportFrom) -> str:
    """The absolute module a ``from ... import`` names."""
    if not node.level:
        return node.module or ""
    package = module if _is_package(module) else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def _known(name: str) -> str | None:
    """The deepest module of ours that ``name`` is or lies in."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports(module: str) -> list[tuple[str, str, int]]:
    """``(target module, name imported or '', line)`` for every import of ours."""
    path = MODULES[module]
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _known(alias.name)
                if target:
                    out.append((target, "", node.lineno))
        elif isinstance(node, ast.ImportFrom):
            base = _base(module, node)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in MODULES:                  # a module: from pkg import mod
                    out.append((sub, "", node.lineno))
                else:
                    target = _known(base)
                    if target:
                        out.append((target, alias.name, node.lineno))
    return out


def graph() -> dict[str, list[Edge]]:
    edges: dict[str, list[Edge]] = {m: [] for m in MODULES}
    for m, path in MODULES.items():
        seen = set()
        for target, _name, line in imports(m):
            if target != m and target not in seen:
                seen.add(target)
                edges[m].append(Edge(m, target, _where(path), line))
    return edges


def strongly_connected(edges: dict[str, list[Edge]]) -> list[list[str]]:
    """Tarjan's components of more than one module, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for e in edges[v]:
            if e.target not in index:
                visit(e.target)
                low[v] = min(low[v], low[e.target])
            elif e.target in on_stack:
                low[v] = min(low[v], index[e.target])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(out)


def shortest_cycle(edges: dict[str, list[Edge]], members: list[str]) -> list[Edge]:
    """A shortest cycle through the first module of a component."""
    inside = set(members)
    start = members[0]
    came: dict[str, Edge | None] = {start: None}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for e in edges[v]:
            if e.target not in inside:
                continue
            if e.target == start:
                path = [e]
                while came[path[-1].source] is not None:
                    path.append(came[path[-1].source])
                return path[::-1]
            if e.target not in came:
                came[e.target] = e
                queue.append(e.target)
    raise AssertionError(f"no cycle through {start}")    # a component always has one


def cycles() -> list[str]:
    edges = graph()
    out = []
    for comp in strongly_connected(edges):
        cycle = shortest_cycle(edges, comp)
        inside = [e for m in comp for e in edges[m] if e.target in comp]
        out.append(f"{len(comp)} modules import each other: {', '.join(comp)}\n"
                   f"  a cycle: {' -> '.join([e.source for e in cycle] + [comp[0]])}\n"
                   f"  the imports between them:\n" + "\n".join(f"    {e}" for e in inside))
    return out


def private_imports() -> list[str]:
    out = []
    for m, path in MODULES.items():
        for target, name, line in imports(m):
            private = name.startswith("_") and not name.startswith("__")
            if private and target != m:
                out.append(f"{_where(path)}:{line}: from {target} import {name}")
            module_name = target.rpartition(".")[2]
            if (not name and module_name.startswith("_") and not module_name.startswith("__")
                    and not m.startswith(target.rpartition(".")[0] + ".")):
                out.append(f"{_where(path)}:{line}: imports {target}, private to its package")
    return out


def long_modules() -> list[str]:
    out = []
    for m, path in sorted(MODULES.items()):
        with open(path, encoding="utf-8") as f:
            n = sum(1 for _ in f)
        if n > MAX_LINES:
            out.append(f"{_where(path)}: {n} lines")
    return out


BROAD = ("Exception", "BaseException")


def _catches_everything(handler: ast.ExceptHandler) -> bool:
    """A bare ``except:`` or one naming ``Exception``/``BaseException``
    (alone, in a tuple, or as ``builtins.Exception``)."""
    if handler.type is None:
        return True
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any((isinstance(t, ast.Name) and t.id in BROAD)
               or (isinstance(t, ast.Attribute) and t.attr in BROAD) for t in types)


def _raises(body: list[ast.stmt]) -> bool:
    """Whether a ``raise`` runs in ``body`` itself (functions and classes
    defined there do not count)."""
    todo = list(body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Raise):
            return True
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        todo.extend(ast.iter_child_nodes(node))
    return False


def swallowing_handlers() -> list[str]:
    out = []
    for _m, path in sorted(MODULES.items()):
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for node in ast.walk(tree):
            if (isinstance(node, ast.ExceptHandler) and _catches_everything(node)
                    and not _raises(node.body)):
                what = "except:" if node.type is None else f"except {ast.unparse(node.type)}"
                out.append((_where(path), node.lineno, what))
    return [f"{where}:{line}: {what} without a raise" for where, line, what in sorted(out)]


def _report(title: str, found: list[str]) -> str:
    text = f"{len(found)} {title}:\n" + "\n".join(found)
    print(text)
    return text


# -- the rules ------------------------------------------------------------------

def test_no_import_cycle():
    found = cycles()
    assert not found, _report("import cycles", found)


def test_no_private_name_imported_from_another_module():
    found = private_imports()
    assert not found, _report("private names imported across modules", found)


def test_no_module_over_600_lines():
    found = long_modules()
    assert not found, _report(f"modules over {MAX_LINES} lines", found)


def test_no_handler_catches_every_exception_without_raising():
    found = swallowing_handlers()
    assert not found, _report("handlers that catch every exception and do not raise", found)


# -- the checks above can fail ----------------------------------------------------

def _fake(tmp_path, files: dict[str, str]):
    """Point the checks at a made-up package ``pkg``."""
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return {name: str(tmp_path / rel) for name, rel in (
        (rel[:-3].replace("/", ".").removesuffix(".__init__"), rel) for rel in files)}


def test_the_checks_find_what_they_look_for(tmp_path, monkeypatch):
    fake = _fake(tmp_path, {
        "pkg/__init__.py": "from .a import run\n",
        "pkg/a.py": "from . import b\ndef run():\n    from pkg.sub.c import _helper\n",
        "pkg/b.py": "import os\n" + "x = 1\n" * 700,
        "pkg/sub/__init__.py": "",
        "pkg/sub/c.py": "def f():\n    from ..a import run\n_helper = 1\n",
        "pkg/sub/_impl.py": "",
        "pkg/d.py": "from pkg.sub import _impl\nfrom .sub import __version__\n",
    })
    monkeypatch.setitem(globals(), "MODULES", fake)
    monkeypatch.setitem(globals(), "ROOT", str(tmp_path))
    # function-level and relative imports count: a -> c (in a function), c -> a (..a)
    found = cycles()
    assert len(found) == 1 and found[0].startswith("2 modules import each other: pkg.a, "
                                                   "pkg.sub.c"), found
    assert "a cycle: pkg.a -> pkg.sub.c -> pkg.a" in found[0]
    assert "pkg.a -> pkg.sub.c (pkg/a.py:3)" in found[0]
    assert "pkg.sub.c -> pkg.a (pkg/sub/c.py:2)" in found[0]
    assert private_imports() == ["pkg/a.py:3: from pkg.sub.c import _helper",
                                 "pkg/d.py:1: imports pkg.sub._impl, private to its package"]
    assert long_modules() == ["pkg/b.py: 701 lines"]


def test_the_handler_check_finds_what_it_looks_for(tmp_path, monkeypatch):
    fake = _fake(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": ("try:\n    pass\nexcept Exception:\n    pass\n"            # 3: swallows
                     "try:\n    pass\nexcept:\n    x = 1\n"                     # 7: bare
                     "try:\n    pass\nexcept (OSError, BaseException):\n"        # 11: in a tuple
                     "    def f():\n        raise\n"
                     "try:\n    pass\nexcept Exception:\n    if x:\n        raise\n"
                     "try:\n    pass\nexcept BaseException:\n    cleanup()\n    raise\n"
                     "try:\n    pass\nexcept (OSError, ValueError):\n    pass\n"),
    })
    monkeypatch.setitem(globals(), "MODULES", fake)
    monkeypatch.setitem(globals(), "ROOT", str(tmp_path))
    assert swallowing_handlers() == [
        "pkg/a.py:3: except Exception without a raise",
        "pkg/a.py:7: except: without a raise",
        "pkg/a.py:11: except (OSError, BaseException) without a raise"]


# -- the test suite's quick lane --------------------------------------------------

def test_every_test_the_quick_lane_leaves_out_exists():
    """``conftest.SLOW`` names test functions of its files (a renamed test
    would otherwise silently join the quick lane)."""
    from conftest import SLOW
    here = os.path.dirname(os.path.abspath(__file__))
    missing = []
    for name, tests in SLOW.items():
        path = os.path.join(here, name)
        if not os.path.exists(path):
            missing.append(f"{name}: no such file")
            continue
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        defined = {n.name for n in ast.walk(tree)
                   if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                   and n.name.startswith("test")}
        missing += [f"{name}::{t}" for t in tests if t.split("[", 1)[0] not in defined]
    assert not missing, _report("tests named in conftest.SLOW that do not exist", missing)
