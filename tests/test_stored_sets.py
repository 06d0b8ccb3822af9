"""Scoring tasks in other processes share shingle sets through the store:
a task builds a range's sets once, as files, and every scoring task maps
them instead of building them again. The outputs are those of one process,
byte for byte; fewer sets are built; the files are gone once the scorer is
done; files that are not the sets they claim to be are refused."""
from __future__ import annotations

import os
import pickle

import numpy as np
import pytest

from gpu_dedup.engine import layout, runner as runner_module, session, tasks
from gpu_dedup.engine.executors import InProcess
from gpu_dedup.engine.records import StoredSets
from gpu_dedup.engine.store import DamagedWorkFile, DiskStore
from test_staged import CFG, make_texts, output_bytes, run, run_staged, write_inputs


class OtherProcesses(InProcess):
    """Tasks run here, but as if in other processes: what they are given is
    pickled and read back (a store without this process's file sums), and
    nothing they hold is shared with the driver."""

    name = "other-processes"
    concurrency = 2
    shared_memory = False

    def map(self, fn, items, *args, on_done=None) -> list:
        args = pickle.loads(pickle.dumps(args))
        return super().map(fn, [pickle.loads(pickle.dumps(i)) for i in items], *args,
                           on_done=on_done)


def near_copies(originals: int = 12, copies: int = 25) -> list[str]:
    """Clusters of near-copies: each original with one word changed in each
    copy, so that every copy is scored against many others."""
    rng = np.random.default_rng(9)
    out = []
    for o in range(originals):
        words = [f"t{o}w{i}" for i in range(30)]
        out.append(" ".join(words))
        for _ in range(copies):
            w = list(words)
            w[int(rng.integers(len(w)))] = f"v{int(rng.integers(1000))}"
            out.append(" ".join(w))
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("stored_sets")
    paths = write_inputs(str(folder / "in"), make_texts(200, seed=5) + near_copies())
    ref = str(folder / "ref")
    run(paths, ref, CFG)
    return paths, ref


def run_elsewhere(paths, out, monkeypatch, *, stored: bool) -> tuple[dict, dict]:
    """A staged run whose tasks run 'in other processes'; what the scoring
    tasks built and the stored sets they were given are counted."""
    seen = {"built": 0, "stored": [], "present": []}
    monkeypatch.setattr(session, "make_executor", lambda *a, **k: OtherProcesses())
    monkeypatch.setattr(runner_module, "MIN_SCORE_BATCH", 16)     # many batches a call
    sets_of = tasks.sets_of

    def counting_sets_of(ctx, be, documents, docs):
        seen["built"] += int(np.asarray(docs).size)
        return sets_of(ctx, be, documents, docs)
    monkeypatch.setattr(tasks, "sets_of", counting_sets_of)
    open_sets = tasks.open_sets

    def recording_open_sets(store, s):
        seen["stored"].append(s.unit)
        seen["present"].append(all(os.path.exists(os.path.join(store.root, f))
                                   for f in layout.files(s.unit, layout.SETS)))
        return open_sets(store, s)
    monkeypatch.setattr(tasks, "open_sets", recording_open_sets)
    if not stored:
        monkeypatch.setattr(runner_module.Runner, "_shared_sets", lambda self, p, unit: None)
    store_sets = tasks.task_store_sets
    built_for_store = [0]

    def counting_store_sets(item, ctx, documents):
        built_for_store[0] += int(np.asarray(item[1]).size)
        return store_sets(item, ctx, documents)
    monkeypatch.setattr(tasks, "task_store_sets", counting_store_sets)
    report = run_staged(paths, out, CFG, memory_limit="1MiB", keep_work_dir=True)
    seen["for_store"] = built_for_store[0]
    return report, seen


def test_stored_sets_give_the_bytes_of_one_process_and_build_fewer_sets(corpus, tmp_path,
                                                                          monkeypatch):
    paths, ref = corpus
    with monkeypatch.context() as m:
        _, without = run_elsewhere(paths, str(tmp_path / "without"), m, stored=False)
    report, with_ = run_elsewhere(paths, str(tmp_path / "with"), monkeypatch, stored=True)
    want = output_bytes(ref)
    for out in ("without", "with"):
        got = output_bytes(str(tmp_path / out))
        assert sorted(got) == sorted(want)
        assert all(got[n] == want[n] for n in want), out
    assert without["stored"] == [] and without["for_store"] == 0
    # the selection shared sets through the store, read by its tasks while
    # their files were there
    assert with_["stored"] and all(with_["present"])
    assert with_["for_store"] > 0
    # building a range's sets once beats building them in every batch
    assert with_["built"] < without["built"], (with_["built"], without["built"])
    # and once the scorers are done, no set is left in the work directory
    left = [os.path.join(d, n) for d, _, names in os.walk(report["work"]["dir"])
            for n in names if f"{os.sep}sets" in os.path.join(d, n)]
    assert left == []


def test_sets_that_are_not_what_they_claim_are_refused(tmp_path):
    st = DiskStore(str(tmp_path / "w")).open()
    try:
        unit = layout.shared_sets(layout.range_batches(0))
        pos = np.array([3, 7, 9], np.int64)
        off = np.array([0, 2, 3, 5], np.int64)
        val = np.arange(5, dtype=np.uint64)
        for name, arr in zip(layout.files(unit, layout.SETS), (pos, off, val)):
            st.save_npy(name, arr)
        got = tasks.open_sets(st, StoredSets(unit, pos))
        assert [a.tolist() for a in got] == [pos.tolist(), off.tolist(), val.tolist()]
        # other documents, or offsets that do not end at the values' end
        with pytest.raises(DamagedWorkFile, match="not the shingle sets of 3 documents"):
            tasks.open_sets(st, StoredSets(unit, np.array([3, 7, 10], np.int64)))
        st.save_npy(layout.files(unit, layout.SETS)[1], np.array([0, 2, 3, 6], np.int64))
        with pytest.raises(DamagedWorkFile, match="damaged work"):
            tasks.open_sets(st, StoredSets(unit, pos))
        # forgetting the unit deletes what it lists, and its folder
        st.mark_done(unit, {"sets": 3}, layout.files(unit, layout.SETS))
        st.forget(unit)
        assert not os.path.exists(os.path.join(st.root, unit))
        assert st.done(unit) is None
    finally:
        st.close()
