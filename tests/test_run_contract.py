"""`gpu-dedup run`: the output contract, determinism and bad input."""
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import forkcli
from gpu_dedup.demo import planted_corpus


def _run(*args, cwd=None):
    return forkcli.run([str(a) for a in args], text=True, cwd=cwd)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("corpus")
    texts, truth = planted_corpus(300, seed=2)
    texts = texts + [texts[0], ""]
    path = d / "docs.jsonl"
    with open(path, "w") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": f"doc-{i}", "text": t, "meta": {"n": i}}) + "\n")
    return path, texts


def test_outputs_account_for_every_document(corpus, tmp_path):
    path, texts = corpus
    out = tmp_path / "out"
    r = _run("run", path, "--output", out, "--shingle", "word", "--ngram", "3",
             "--threshold", "0.4", "--bands", "32", "--rows", "4")
    assert r.returncode == 0, r.stderr
    cl = pq.read_table(out / "clusters.parquet")
    assert cl.schema.field("id").type == pa.string()
    assert cl.schema.field("cluster").type == pa.int64()
    assert cl.schema.field("kept").type == pa.bool_()
    assert cl["id"].to_pylist() == [f"doc-{i}" for i in range(len(texts))]
    kept = cl["kept"].to_pylist()
    cluster = cl["cluster"].to_pylist()
    assert len(set(cluster)) == sum(kept)
    report = json.loads((out / "report.json").read_text())
    assert report["documents"]["in"] == len(texts)
    assert report["documents"]["kept"] + report["documents"]["removed"] == len(texts)
    assert report["documents"]["kept"] == sum(kept)
    assert report["documents"]["exact_removed"] == 1
    assert report["parameters"]["bands"] == 32 and report["parameters"]["rows"] == 4
    assert 0 < report["parameters"]["s_curve"]["approx_threshold"] < 1
    assert {"read", "signatures", "buckets", "select", "assign", "write", "total"} <= set(report["seconds"])
    # what the process spent in each stage: CPU seconds of each, no more
    # than its wall time on every core
    usage = report["work"]["stage_usage"]
    assert {"read", "signatures", "buckets", "select", "assign", "write"} <= set(usage)
    assert set(usage) <= set(report["seconds"])
    cores = os.cpu_count() or 1
    assert all(0 <= u["cpu_seconds"] <= report["seconds"][k] * cores + 0.01
               for k, u in usage.items())
    assert sum(u["cpu_seconds"] for u in usage.values()) > 0
    assert "numpy" in report["versions"] and "gpu_dedup" in report["versions"]
    pairs = pq.read_table(out / "pairs.parquet")
    assert pairs.column_names == ["id_a", "id_b", "similarity"]
    assert pairs.schema.field("similarity").type == pa.float64()
    assert min(pairs["similarity"].to_pylist()) >= 0.4
    ids = set(cl["id"].to_pylist())
    assert set(pairs["id_a"].to_pylist()) <= ids and set(pairs["id_b"].to_pylist()) <= ids
    # data/ holds exactly the kept records, byte for byte, in input order
    lines = path.read_bytes().splitlines(keepends=True)
    kept_lines = [ln for ln, k in zip(lines, kept) if k]
    assert (out / "data" / "docs.jsonl").read_bytes() == b"".join(kept_lines)


def test_same_command_gives_byte_identical_outputs(corpus, tmp_path):
    path, _ = corpus
    outs = []
    for name in ("a", "b"):
        out = tmp_path / name
        r = _run("run", path, "-o", out, "--threshold", "0.5", "--quiet")
        assert r.returncode == 0, r.stderr
        assert r.stdout == ""
        outs.append(out)
    for f in ("clusters.parquet", "pairs.parquet"):
        assert (outs[0] / f).read_bytes() == (outs[1] / f).read_bytes()


def test_parquet_input_and_generated_ids(tmp_path):
    texts = ["alpha beta gamma delta", "alpha beta gamma delta!", "something else entirely"]
    pq.write_table(pa.table({"text": texts, "n": [1, 2, 3]}), tmp_path / "in.parquet")
    out = tmp_path / "out"
    r = _run("run", tmp_path / "in.parquet", "-o", out, "--threshold", "0.7")
    assert r.returncode == 0, r.stderr
    cl = pq.read_table(out / "clusters.parquet")
    assert cl["cluster"].to_pylist() == [0, 0, 2]
    ids = cl["id"].to_pylist()
    assert len(set(ids)) == 3 and all(i.endswith(f":{k + 1}") for k, i in enumerate(ids))
    kept = pq.read_table(out / "data" / "in.parquet")
    assert kept.column_names == ["text", "n"] and kept["n"].to_pylist() == [1, 3]


def test_refuses_non_empty_output_and_never_writes_into_inputs(corpus, tmp_path):
    path, _ = corpus
    out = tmp_path / "busy"
    out.mkdir()
    (out / "keep.txt").write_text("precious")
    r = _run("run", path, "-o", out)
    assert r.returncode == 2
    assert "--overwrite" in r.stderr and "Traceback" not in r.stderr
    assert os.listdir(out) == ["keep.txt"]
    r = _run("run", path.parent, "-o", path.parent / "inside")
    assert r.returncode == 2 and "input" in r.stderr
    assert not (path.parent / "inside").exists()
    r = _run("run", path, "-o", path)
    assert r.returncode == 2


@pytest.mark.parametrize("body,where", [
    (b'{"id": 1, "text": "a b c"}\n{"id": 2, "text": "a b c"\n', ":2: malformed JSON"),
    (b'{"id": 1, "text": "a b c"}\n\n{"id": 2, "txt": "x"}\n', ":3: missing text field 'text'"),
    (b'{"id": 1, "text": "a b c"}\n{"id": 2, "text": 7}\n', ":2: field 'text' is not a string"),
    (b'{"id": 1, "text": "a b c"}\n{"id": 1, "text": "d e f"}\n', ":2: duplicate id '1'"),
])
def test_bad_input_exits_2_naming_file_and_line(tmp_path, body, where):
    src = tmp_path / "bad.jsonl"
    src.write_bytes(body)
    out = tmp_path / "out"
    r = _run("run", src, "-o", out)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(src) + where in lines[0], r.stderr
    assert not out.exists()
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".out")]


def test_invalid_utf8_is_replaced_and_counted(tmp_path):
    src = tmp_path / "u.jsonl"
    src.write_bytes(b'{"id": "a", "text": "caf\xe9 au lait with milk"}\n'
                    b'{"id": "b", "text": "fine text"}\n'
                    b'{"id": "c", "text": "bad \xff\xfe bytes"}\n')
    out = tmp_path / "out"
    r = _run("run", src, "-o", out)
    assert r.returncode == 0, r.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["documents"]["invalid_utf8_replaced"] == 2
    assert report["documents"]["in"] == 3
