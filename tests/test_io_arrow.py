"""Arrow IPC / Feather inputs and Hugging Face ``datasets`` folders: the same
clusters as the same rows in JSONL, data/ in the input's own format (a
``datasets`` folder that ``load_from_disk`` opens), and stray ``.json``
metadata never taken for a shard."""
from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest

from test_staged import make_texts

import forkcli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

if os.environ.get("CI") == "true":
    import datasets
else:
    datasets = pytest.importorskip("datasets", reason="the datasets library is not installed")


def cli(*args):
    return forkcli.run(args, text=True, cwd=ROOT)


@pytest.fixture(scope="module")
def rows():
    texts = make_texts(300, seed=11)
    return [{"id": f"r{i}", "text": t, "n": i, "tags": [i % 3, i % 5]}
            for i, t in enumerate(texts)]


def jsonl_run(tmp, rows, *extra, cmd="run"):
    src = os.path.join(tmp, "rows.jsonl")
    with open(src, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    out = os.path.join(tmp, f"jsonl-{cmd}")
    p = cli(cmd, src, "-o", out, "-q", *extra)
    assert p.returncode == 0, p.stderr
    return out


def table_of(out, name):
    return pq.read_table(os.path.join(out, name)).select(["id", "cluster", "kept",
                                                          "duplicate_of", "similarity"])


@pytest.mark.parametrize("kind", ["feather", "stream"])
def test_arrow_ipc_files_give_the_jsonl_clusters_and_data_in_their_own_format(tmp_path, rows,
                                                                             kind):
    ref = jsonl_run(str(tmp_path), rows)
    t = pa.Table.from_pylist(rows)
    src = str(tmp_path / ("in.feather" if kind == "feather" else "in.arrow"))
    if kind == "feather":
        feather.write_feather(t, src, chunksize=70)
    else:
        with pa.OSFile(src, "wb") as f, pa.ipc.new_stream(f, t.schema) as w:
            for b in t.to_batches(max_chunksize=70):
                w.write_batch(b)
    out = str(tmp_path / "out")
    p = cli("run", src, "-o", out, "-q")
    assert p.returncode == 0, p.stderr
    assert table_of(out, "clusters.parquet").equals(table_of(ref, "clusters.parquet"))
    kept = [json.loads(x)["id"] for x in open(os.path.join(ref, "data", "rows.jsonl"))]
    assert 0 < len(kept) < len(rows)
    got_path = os.path.join(out, "data", os.path.basename(src))
    with pa.memory_map(got_path) as m:
        if kind == "feather":
            got = pa.ipc.open_file(m).read_all()
        else:
            got = pa.ipc.open_stream(m).read_all()       # the same kind it came in
    assert got.schema.equals(t.schema, check_metadata=True)
    assert got.column("id").to_pylist() == kept
    by_id = {r["id"]: r for r in rows}
    assert got.to_pylist() == [by_id[i] for i in kept]


def test_a_datasets_folder_gives_the_jsonl_clusters_and_a_loadable_data_folder(tmp_path, rows):
    ref = jsonl_run(str(tmp_path), rows)
    folder = str(tmp_path / "saved")
    datasets.Dataset.from_list(rows).save_to_disk(folder, num_shards=3)
    assert "dataset_info.json" in os.listdir(folder)
    out = str(tmp_path / "out")
    p = cli("run", folder, "-o", out, "-q")
    assert p.returncode == 0, p.stderr
    assert table_of(out, "clusters.parquet").equals(table_of(ref, "clusters.parquet"))
    kept = [json.loads(x)["id"] for x in open(os.path.join(ref, "data", "rows.jsonl"))]
    loaded = datasets.load_from_disk(os.path.join(out, "data", "saved"))
    assert loaded["id"] == kept
    assert loaded.features == datasets.load_from_disk(folder).features
    assert loaded[0] == next(r for r in rows if r["id"] == kept[0])
    rep = json.load(open(os.path.join(out, "report.json")))
    assert rep["documents"]["in"] == len(rows)


def test_a_dataset_dict_folder_is_one_shard_per_split(tmp_path, rows):
    folder = str(tmp_path / "dd")
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows[:200]),
                          "test": datasets.Dataset.from_list(rows[200:])}).save_to_disk(folder)
    out = str(tmp_path / "out")
    p = cli("run", folder, "-o", out, "-q")
    assert p.returncode == 0, p.stderr
    assert sorted(os.listdir(os.path.join(out, "data"))) == ["test", "train"]
    n = sum(len(datasets.load_from_disk(os.path.join(out, "data", s))) for s in ("test", "train"))
    rep = json.load(open(os.path.join(out, "report.json")))
    assert rep["documents"]["in"] == len(rows) and n == rep["documents"]["kept"]


def test_stray_json_metadata_is_never_a_shard(tmp_path, rows):
    folder = tmp_path / "mixed"
    folder.mkdir()
    with open(folder / "part.json", "w") as f:              # JSON Lines named .json: a shard
        for r in rows[:50]:
            f.write(json.dumps(r) + "\n")
    (folder / "meta.json").write_text(json.dumps({"name": "x", "rows": 50}, indent=2))
    (folder / "dataset_info.json").write_text(json.dumps({"description": ""}))
    (folder / "stats.json").write_text("[1, 2, 3]\n")
    out = str(tmp_path / "out")
    p = cli("run", str(folder), "-o", out, "-q")
    assert p.returncode == 0, p.stderr
    rep = json.load(open(os.path.join(out, "report.json")))
    assert rep["documents"]["in"] == 50
    assert [os.path.basename(s["path"]) for s in rep["inputs"]] == ["part.json"]


def test_substr_over_a_datasets_folder_and_feather_cuts_the_same_texts(tmp_path, rows):
    ref = jsonl_run(str(tmp_path), rows, "--min-length", "6", cmd="substr")
    want = [json.loads(x)["text"] for x in open(os.path.join(ref, "data", "rows.jsonl"))]
    folder = str(tmp_path / "saved")
    datasets.Dataset.from_list(rows).save_to_disk(folder, num_shards=2)
    p = cli("substr", folder, "-o", str(tmp_path / "s1"), "-q", "--min-length", "6")
    assert p.returncode == 0, p.stderr
    loaded = datasets.load_from_disk(str(tmp_path / "s1" / "data" / "saved"))
    assert loaded["text"] == want and loaded["n"] == list(range(len(rows)))
    assert sum(a != b for a, b in zip(want, [r["text"] for r in rows])) > 10
    src = str(tmp_path / "in.feather")
    feather.write_feather(pa.Table.from_pylist(rows), src)
    p = cli("substr", src, "-o", str(tmp_path / "s2"), "-q", "--min-length", "6")
    assert p.returncode == 0, p.stderr
    assert feather.read_table(str(tmp_path / "s2" / "data" / "in.feather")).column(
        "text").to_pylist() == want


def test_a_corrupt_arrow_file_is_one_line_naming_it(tmp_path):
    bad = tmp_path / "broken.arrow"
    bad.write_bytes(b"ARROW1\x00\x00not really")
    p = cli("run", str(bad), "-o", str(tmp_path / "out"))
    assert p.returncode == 2
    assert "broken.arrow" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_large_arrow_shards_are_read_in_record_batches_with_the_same_bytes(tmp_path, rows):
    from gpu_dedup.config import Config
    from gpu_dedup.io.plan import plan_reads
    from gpu_dedup.pipeline import run
    t = pa.Table.from_pylist(rows)
    src = str(tmp_path / "in.feather")
    feather.write_feather(t, src, chunksize=25)
    folder = str(tmp_path / "saved")
    datasets.Dataset.from_list(rows).save_to_disk(folder, num_shards=3)
    for path, name in ((src, "in.feather"), (folder, "saved")):
        units = plan_reads([path], 4096)
        assert len(units) >= 3 and all(u["kind"] == "batches" for u in units), units[:2]
        whole = run([path], str(tmp_path / f"whole-{name}"), Config(), html=False)
        split = run([path], str(tmp_path / f"split-{name}"), Config(), html=False,
                    work_dir=str(tmp_path / f"w-{name}"), partition_bytes="48KiB")
        assert split["work"]["chunks"] >= 3 and whole["work"]["chunks"] == 1
        for f in ("clusters.parquet", "pairs.parquet"):
            assert read_bytes(tmp_path / f"whole-{name}" / f) == \
                read_bytes(tmp_path / f"split-{name}" / f), (name, f)
    a = feather.read_table(str(tmp_path / "whole-in.feather" / "data" / "in.feather"))
    b = feather.read_table(str(tmp_path / "split-in.feather" / "data" / "in.feather"))
    assert a.equals(b) and 0 < a.num_rows < len(rows)
    assert datasets.load_from_disk(str(tmp_path / "split-saved" / "data" / "saved"))["id"] == \
        datasets.load_from_disk(str(tmp_path / "whole-saved" / "data" / "saved"))["id"]


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()
