"""The work directory's layout is named in one module,
:mod:`gpu_dedup.engine.layout`: no other engine module (nor the shell)
spells a key of its own, and what a run writes lies under the folders the
layout names, each named after the stage that writes it."""
from __future__ import annotations

import ast
import json
import os
import re

import pytest

from gpu_dedup.config import Config
from gpu_dedup.engine import layout

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENGINE = os.path.join(ROOT, "gpu_dedup", "engine")
#: The folders' names before each was named after its stage: no module may
#: bring one back either.
FORMER = ("prep", "sig", "lsh", "verify", "final")
FORMER_SEEDED = ("win",)


def _modules() -> list[str]:
    out = [os.path.join(ENGINE, n) for n in sorted(os.listdir(ENGINE))
           if n.endswith(".py") and n != "layout.py"]
    return out + [os.path.join(ROOT, "gpu_dedup", "shell.py")]


def _leading(node: ast.JoinedStr) -> tuple[str, bool]:
    """The literal text an f-string starts with, and whether a formatted
    value follows it."""
    text = ""
    for part in node.values:
        if isinstance(part, ast.Constant) and isinstance(part.value, str):
            text += part.value
        else:
            return text, True
    return text, False


def spelled_keys(source: str, fixed=layout.FOLDERS + FORMER,
                 seeded=layout.SEEDED + FORMER_SEEDED) -> list[tuple[int, str]]:
    """``(line, text)`` of each string constant or f-string of ``source``
    that starts with a work directory folder and ``/`` (for a seeded
    folder: its name, a seed, and ``/``)."""
    fixed_re = re.compile("^(" + "|".join(map(re.escape, fixed)) + ")/")
    seeded_re = re.compile("^(" + "|".join(map(re.escape, seeded)) + r")\d*/")
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text, formatted = node.value, False
        elif isinstance(node, ast.JoinedStr):
            text, formatted = _leading(node)
        else:
            continue
        if (fixed_re.match(text) or seeded_re.match(text)
                or (formatted and text in seeded)):
            found.add((node.lineno, text))
    return sorted(found)


def test_the_checker_finds_what_it_looks_for():
    src = ('a = "read/x/text.arrow"\n'
           'b = f"exact/{parts}/p{p:05d}"\n'
           'c = f"hash{seed}/uh.npy"\n'
           'd = f"prep/{key}"\n'
           'e = "windows3/1/p00000"\n'
           'f = f"win{seed}/{parts}"\n'
           'ok = ("read", "select", f"{unit}/reps.npy", "data/", f"x{a}/", "readme/x")\n')
    assert [line for line, _ in spelled_keys(src)] == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("path", _modules(), ids=os.path.basename)
def test_no_module_spells_a_work_directory_key(path):
    with open(path, encoding="utf-8") as f:
        src = f.read()
    assert spelled_keys(src) == [], \
        f"{os.path.relpath(path, ROOT)} builds keys by hand; use gpu_dedup.engine.layout"


def test_the_folders_are_the_stages():
    from gpu_dedup.engine.runner import Runner
    import inspect
    stages = re.findall(r'self\.stage\("(\w+)"\)', inspect.getsource(Runner.run))
    assert tuple(stages) == layout.NEAR_DUPLICATE_FOLDERS[:-1]
    from gpu_dedup.engine.substr import SubstrRunner
    stages = re.findall(r'self\.stage\("(\w+)"\)', inspect.getsource(SubstrRunner.run))
    assert set(stages) == set(layout.SUBSTRING_FOLDERS) - {layout.STAGE}
    # the scores' batches have their own folders, apart from any stage's files
    assert layout.SELECT_BATCHES != layout.SELECT and layout.ASSIGN_BATCHES != layout.ASSIGN
    assert layout.score_batch(layout.SELECT_BATCHES, 1, 0) != \
        layout.score_batch(layout.ASSIGN_BATCHES, 1, 0)


# -- what a run writes ---------------------------------------------------------------

def _top(rel: str) -> str:
    """The layout folder a key lies under, or ``""``."""
    head = rel.split("/")[0]
    if head in layout.FOLDERS:
        return head
    for name in layout.SEEDED:
        if re.fullmatch(re.escape(name) + r"\d+", head):
            return name
    return ""


def _tree(unit: str) -> list[str]:
    out = []
    for d, _dirs, names in os.walk(unit):
        for n in names:
            out.append(os.path.relpath(os.path.join(d, n), unit).replace(os.sep, "/"))
    return sorted(out)


def _assert_laid_out(unit: str, folders: tuple) -> list[str]:
    files = _tree(unit)
    assert files, unit
    stray = [f for f in files if f != layout.LOCK and not _top(f)]
    assert stray == [], stray
    tops = {_top(f) for f in files} - {""}
    assert set(folders) <= tops, sorted(set(folders) - tops)
    assert tops <= set(folders), sorted(tops - set(folders))
    # every file a marker lists is a file of the layout too
    for f in files:
        if f.endswith(layout.MARKER):
            with open(os.path.join(unit, f)) as fh:
                listed = json.load(fh).get("_files", {})
            assert all(_top(r) for r in listed), (f, listed)
    return files


def _corpus(folder) -> list[str]:
    words = [f"w{i}" for i in range(50)]
    texts = []
    for i in range(120):
        doc = [words[(i * 7 + k) % 50] for k in range(24)]
        if i % 3 == 1:                    # a near-duplicate of the one before
            doc = [words[((i - 1) * 7 + k) % 50] for k in range(24)]
            doc[5] = "changed"
        texts.append(" ".join(doc))
    texts[10] = texts[4]                  # an exact duplicate
    paths = []
    for k in range(2):
        p = os.path.join(str(folder), f"part{k}.jsonl")
        with open(p, "w") as f:
            for i, t in enumerate(texts[k * 60:(k + 1) * 60]):
                f.write(json.dumps({"id": f"d{k}-{i}", "text": t}) + "\n")
        paths.append(p)
    return paths


def _laid_out_run(tmp_path, cluster: str) -> tuple[str, list]:
    """A run in many small partitions, its work directory kept: its unit
    folder and its files, checked to lie under the layout."""
    from gpu_dedup.pipeline import run
    paths = _corpus(tmp_path)
    cfg = Config(shingle="word", ngram=2, num_perm=32, bands=16, rows=2, threshold=0.5,
                 cluster=cluster)
    report = run(paths, str(tmp_path / "out"), cfg, work_dir=str(tmp_path / "work"),
                 keep_work_dir=True, html=False, partition_bytes="4KiB")
    unit = report["work"]["dir"]
    return unit, _assert_laid_out(unit, layout.NEAR_DUPLICATE_FOLDERS)


@pytest.mark.parametrize("cluster", ["greedy", "components"])
def test_a_run_writes_only_under_the_layout(tmp_path, cluster):
    unit, files = _laid_out_run(tmp_path, cluster)
    for stage in layout.NEAR_DUPLICATE_FOLDERS[:-1]:
        assert layout.stage(stage) + layout.MARKER in files, stage
    for key in (layout.chunk_key(0, 0), layout.chunk_key(1, 0)):
        for name in layout.FINAL + layout.TARGETS:
            assert layout.final_file(key, name) in files, name
    for name in layout.EXACT_FOR_ASSIGN:
        assert layout.exact(name) in files, name
    assert layout.exact("reps") in files
    assert layout.selected("accepted_a") in files and layout.selected("accepted_b") in files
    assert layout.chunk_file(layout.chunk_key(1, 0), layout.TEXT) in files
    batches = [f for f in files if f.startswith(layout.SELECT_BATCHES + "/")]
    assert batches, "no scores were saved: the batches' folder was not tested"
    if cluster == "components":
        assert layout.FIRST_ROUND in files
    else:
        groups = [f for f in files if f.startswith(layout.BUCKETS + "/")
                  and "/r" in f and f.endswith(layout.OFF)]
        assert groups, "no group of buckets was written"


def test_a_substring_run_writes_only_under_the_layout(tmp_path):
    from gpu_dedup.substr import run
    paths = _corpus(tmp_path)
    report = run(paths, str(tmp_path / "out"), min_length=8, work_dir=str(tmp_path / "work"),
                 keep_work_dir=True, html=False, partition_bytes="4KiB")
    unit = report["work"]["dir"]
    files = _assert_laid_out(unit, layout.SUBSTRING_FOLDERS)
    seed = report["hash_seed"]
    assert layout.stage(layout.seeded(layout.HASH, seed)) + layout.MARKER in files
    assert layout.hash_file(seed, layout.DOC_UNITS) in files
    cut = [f for f in files if f.startswith(layout.seeded(layout.CUT, seed) + "/")]
    assert {f.rsplit("/", 1)[1] for f in cut} >= set(layout.CUT_FILES)


def test_an_in_memory_run_keeps_its_keys_under_the_layout(monkeypatch):
    from gpu_dedup.engine import store as store_mod
    from gpu_dedup.pipeline import deduplicate
    stores = []

    class Recording(store_mod.MemoryStore):
        def __init__(self):
            super().__init__()
            stores.append(self)

    monkeypatch.setattr(store_mod, "MemoryStore", Recording)
    texts = ["a cat sat on the mat", "a cat sat on the mat!", "something else entirely"]
    deduplicate(texts, Config(threshold=0.5, cluster="components"))
    (st,) = stores
    keys = [k for k in st._items if isinstance(k, str)] + list(st._done)
    assert layout.INPUT_TEXTS in keys
    assert [k for k in keys if not _top(k)] == []


@pytest.mark.parametrize("cluster", ["greedy", "components"])
def test_band_keys_leave_the_page_cache_once_greedy_selection_needs_none(
        tmp_path, monkeypatch, cluster):
    # greedy selection reads no band key after the buckets: the run advises
    # the system to drop exactly those files' pages (they stay on disk);
    # components read the keys again, so nothing is advised
    advised = []
    real = os.posix_fadvise

    def record(fd, offset, length, advice):
        advised.append((os.readlink(f"/proc/self/fd/{fd}"), advice))
        return real(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", record)
    unit, files = _laid_out_run(tmp_path, cluster)
    keys = sorted(os.path.join(unit, f) for f in files
                  if f.startswith(layout.SIGNATURES + "/") and f.endswith(layout.KEYS))
    assert len(keys) >= 2, "one block of keys: the test would not tell all from one"
    if cluster == "greedy":
        assert sorted(p for p, _ in advised) == [os.path.realpath(k) for k in keys]
        assert {a for _, a in advised} == {os.POSIX_FADV_DONTNEED}
    else:
        assert advised == []
    assert all(os.path.getsize(k) > 0 for k in keys)
