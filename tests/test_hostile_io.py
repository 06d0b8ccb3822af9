"""Hostile inputs at the reading edge: each one either runs cleanly or is
refused with one line (exit 2) before anything is read or written, and no
message carries a secret or an unprintable file name."""
from __future__ import annotations

import os

from hostile import guarded, run_cli, assert_clean_outcome

from gpu_dedup.io import fs

SECRET = "SECRETVALUE"
KEY = "AKIAXXXX"


# -- credentials in URLs ----------------------------------------------------

def test_redact_masks_the_user_info_of_any_url():
    text = "error: s3://AKIAXXXX:SECRETVALUE@bucket/x/: got a URI: 'AKIAXXXX:SECRETVALUE@bucket/x'"
    out = fs.redact(text)
    assert SECRET not in out and KEY not in out, out
    assert "s3://***@bucket/x/" in out
    assert fs.redact("see https://tok123@github.com/a/b now") == "see https://***@github.com/a/b now"
    assert fs.redact("gs://bucket/a/b.jsonl: fine") == "gs://bucket/a/b.jsonl: fine"
    # a secret holding a slash is still masked up to the '@'
    out = fs.redact("s3://AKIAXXXX:SECRET/VALUE@bucket/x")
    assert "SECRET" not in out and "VALUE@" not in out, out


def test_a_report_masks_a_secret_that_an_earlier_string_of_it_showed(monkeypatch):
    """:func:`gpu_dedup.edge.clean_tree` makes the list of secrets once; a
    URL in one of its strings adds its user-info for the strings after it."""
    from gpu_dedup.edge import clean_tree
    monkeypatch.setattr(fs, "_SEEN", set())
    monkeypatch.setenv("HF_TOKEN", "hf_tokenvalue")
    tree = {"input": "s3://NEWKEYID:NEWSECRET1@bucket/x", "later": ["NEWSECRET1 and NEWKEYID"],
            "hf_tokenvalue": 3}
    out = clean_tree(tree)
    assert out == {"input": "s3://***@bucket/x", "later": ["*** and ***"], "***": 3}


def test_secrets_held_reads_them_once_and_learns_from_later_urls(monkeypatch):
    """Within :class:`gpu_dedup.io.fs.secrets_held`, the list is made once
    (an environment variable set inside the block is not read again), and
    a URL cleaned inside it still teaches its user-info to the strings after
    it; outside the block every call reads the environment again."""
    from gpu_dedup.edge import clean
    monkeypatch.setattr(fs, "_SEEN", set())
    monkeypatch.setenv("HF_TOKEN", "hf_tokenvalue")
    with fs.secrets_held():
        assert clean("a hf_tokenvalue b") == "a *** b"
        monkeypatch.setenv("AWS_SESSION_TOKEN", "sessiontokenvalue")
        assert clean("sessiontokenvalue") == "sessiontokenvalue"
        assert clean("s3://NEWKEYID:NEWSECRET1@bucket/x") == "s3://***@bucket/x"
        assert clean("then NEWSECRET1 hf_tokenvalue") == "then *** ***"
        with fs.secrets_held():                       # nested: the same list
            assert clean("NEWKEYID") == "***"
    assert clean("sessiontokenvalue and hf_tokenvalue") == "*** and ***"


def test_a_report_page_masks_a_secret_in_a_document_it_shows(tmp_path, monkeypatch):
    """The page's word differences mask a secret whatever word it is in."""
    from types import SimpleNamespace
    import numpy as np
    import pyarrow as pa
    from gpu_dedup.report_html import _clusters_html, data_of_result
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "topsecretkey")
    result = SimpleNamespace(cluster=np.array([0, 0]), kept=np.array([True, False]),
                             duplicate_of=np.array([-1, 0]), similarity=np.array([np.nan, 0.9]),
                             pair_similarity=np.array([0.9]), pair_exact=np.array([False]))
    corpus = SimpleNamespace(texts=pa.array(["key topsecretkey here", "key topsecretkey there"]),
                             ids=pa.array(["a", "b"]))
    with fs.secrets_held():
        page = _clusters_html(data_of_result(result, 0.8), corpus)
    assert "topsecretkey" not in page and "***" in page


def test_public_url_hides_the_credentials():
    assert fs.public_url("s3://AKIAXXXX:SECRETVALUE@bucket/x/") == "s3://***@bucket/x/"
    assert fs.public_url("s3://bucket/x/") == "s3://bucket/x/"


def test_credentials_in_an_input_url_never_reach_the_output(tmp_path):
    for url in (f"s3://{KEY}:{SECRET}@bucket/x/", f"s3://{KEY}:{SECRET}@bucket/x/a.jsonl"):
        p = run_cli("run", url, "-o", tmp_path / "out", cwd=tmp_path, timeout=120,
                    env={"AWS_ENDPOINT_URL": "http://127.0.0.1:9"})
        assert_clean_outcome(p, expect=2)
        assert SECRET not in p.stdout + p.stderr, p.stderr
        assert f"{KEY}:" not in p.stdout + p.stderr, p.stderr


# -- datasets folders whose state.json names files outside ------------------

def _texts(n=40):
    import random
    rnd = random.Random(5)
    words = [f"w{i}" for i in range(300)]
    out = []
    for i in range(n):
        t = " ".join(rnd.choice(words) for _ in range(40))
        out.append(t)
        if i % 4 == 0:
            out.append(t)                                 # a duplicate to drop
    return out


def _write_stream(path, texts, prefix="r"):
    import pyarrow as pa
    t = pa.table({"id": [f"{prefix}{i}" for i in range(len(texts))], "text": texts})
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with pa.OSFile(os.fsencode(str(path)), "wb") as f, pa.ipc.new_stream(f, t.schema) as w:
        w.write_table(t)


def _datasets_folder(folder, filenames):
    """A folder as ``Dataset.save_to_disk`` writes it, its state.json listing
    ``filenames``; the plain names among them are written as data files."""
    import json
    os.makedirs(folder, exist_ok=True)
    for k, name in enumerate(filenames):
        if "/" not in name and not os.path.lexists(os.path.join(folder, name)):
            _write_stream(os.path.join(folder, name), _texts(), prefix=f"f{k}-")
    with open(os.path.join(folder, "state.json"), "w") as f:
        json.dump({"_data_files": [{"filename": n} for n in filenames],
                   "_fingerprint": "0fb73ca97b77e59e", "_format_columns": None,
                   "_format_kwargs": {}, "_format_type": None, "_output_all_columns": False,
                   "_split": None}, f, indent=2)
    with open(os.path.join(folder, "dataset_info.json"), "w") as f:
        f.write('{"description": ""}')


def _victim(root):
    victim = os.path.join(root, "target", "X.arrow")
    _write_stream(victim, _texts(), prefix="v")
    with open(victim, "rb") as f:
        return victim, f.read()


def test_a_state_json_naming_a_file_above_the_folder_is_refused(tmp_path):
    root = str(tmp_path / "root")
    victim, before = _victim(root)
    ds = os.path.join(root, "a", "b", "c", "d", "ds")
    _datasets_folder(ds, ["data-00000-of-00002.arrow", "../../../../../target/X.arrow"])
    out = os.path.join(root, "a", "b", "c", "d", "out")
    p = guarded(str(tmp_path), "run", ds, "-o", out, "-q", writable=(out,), expect=2,
                says="state.json", timeout=300)
    assert "../../../../../target/X.arrow" in p.stderr
    with open(victim, "rb") as f:
        assert f.read() == before
    assert not os.path.exists(out) or not os.path.exists(os.path.join(out, "data"))


def test_a_state_json_naming_an_absolute_path_is_refused(tmp_path):
    root = str(tmp_path / "root")
    victim, before = _victim(root)
    ds = os.path.join(root, "ds")
    _datasets_folder(ds, [victim])
    out = os.path.join(root, "out")
    p = guarded(str(tmp_path), "run", ds, "-o", out, "-q", writable=(out,), expect=2,
                says="state.json", timeout=300)
    assert victim in p.stderr
    with open(victim, "rb") as f:
        assert f.read() == before


def test_a_data_file_linked_outside_the_folder_is_refused(tmp_path):
    root = str(tmp_path / "root")
    victim, before = _victim(root)
    ds = os.path.join(root, "ds")
    os.makedirs(ds)
    os.symlink(victim, os.path.join(ds, "data-00000-of-00001.arrow"))
    _datasets_folder(ds, ["data-00000-of-00001.arrow"])
    out = os.path.join(root, "out")
    p = guarded(str(tmp_path), "run", ds, "-o", out, "-q", writable=(out,), expect=2,
                says="state.json", timeout=300)
    assert "data-00000-of-00001.arrow" in p.stderr
    with open(victim, "rb") as f:
        assert f.read() == before


def test_metadata_linked_outside_the_folder_is_refused(tmp_path):
    root = str(tmp_path / "root")
    victim, _ = _victim(root)
    ds = os.path.join(root, "ds")
    _datasets_folder(ds, ["data-00000-of-00001.arrow"])
    os.symlink(victim, os.path.join(ds, "extra.json"))
    out = os.path.join(root, "out")
    guarded(str(tmp_path), "run", ds, "-o", out, "-q", writable=(out,), expect=2,
            says="extra.json", timeout=300)


def test_a_sound_datasets_folder_in_subfolders_still_runs(tmp_path):
    import json
    import pyarrow as pa
    root = str(tmp_path / "root")
    ds = os.path.join(root, "ds")
    os.makedirs(os.path.join(ds, "part"))
    _write_stream(os.path.join(ds, "part", "data-0.arrow"), _texts(), prefix="p")
    _datasets_folder(ds, ["part/data-0.arrow", "data-00001-of-00002.arrow"])
    out = os.path.join(root, "out")
    guarded(str(tmp_path), "run", ds, "-o", out, "-q", writable=(out,), expect=0, timeout=300)
    got = os.path.join(out, "data", "ds")
    state = json.load(open(os.path.join(got, "state.json")))
    assert [d["filename"] for d in state["_data_files"]] == ["part/data-0.arrow",
                                                              "data-00001-of-00002.arrow"]
    n = 0
    for name in ("part/data-0.arrow", "data-00001-of-00002.arrow"):
        with pa.memory_map(os.path.join(got, name)) as m:
            n += pa.ipc.open_stream(m).read_all().num_rows
    rep = json.load(open(os.path.join(out, "report.json")))
    assert n == rep["documents"]["kept"] < rep["documents"]["in"]
    assert os.path.isfile(os.path.join(got, "dataset_info.json"))


# -- JSON nested too deeply -------------------------------------------------

def _nested(depth, inner=b"", open_=b"[", close=b"]"):
    return open_ * depth + inner + close * depth


def test_a_text_nested_20000_deep_is_one_line_naming_file_and_line(tmp_path):
    src = tmp_path / "deep.jsonl"
    src.write_bytes(b'{"id":"0","text":"a fine first text here"}\n'
                    b'{"id":"a","text":' + _nested(20000) + b"}\n")
    out = tmp_path / "out"
    guarded(str(tmp_path), "run", src, "-o", out, "-q", writable=(str(out),), expect=2,
            says="deep.jsonl:2", timeout=120)


def test_a_text_nested_1000_deep_is_called_an_array(tmp_path):
    src = tmp_path / "deep.jsonl"
    src.write_bytes(b'{"id":"a","text":' + _nested(1000) + b"}\n")
    out = tmp_path / "out"
    p = guarded(str(tmp_path), "run", src, "-o", out, "-q", writable=(str(out),), expect=2,
                says="deep.jsonl:1", timeout=120)
    assert "array" in p.stderr and "object" not in p.stderr, p.stderr


def test_deep_records_agree_on_the_fast_and_the_line_by_line_paths():
    from gpu_dedup.io.jsonl import ShardReadState, parse_block
    deep_other = b'{"id":"b","text":"kept text","meta":' + _nested(20000) + b"}"
    deep_text = b'{"id":"c","text":' + _nested(20000, b"1", b'{"a":', b"}") + b"}"
    fine = b'{"id":"a","text":"first"}'
    bad = b'not json at all'
    for lines in ([fine, deep_other, deep_text], [fine, deep_other, deep_text, bad]):
        st = ShardReadState(path="x.jsonl", text_field="text", id_field="id",
                            on_bad_record="skip")
        parse_block(b"\n".join(lines) + b"\n", st)
        got = st.texts.array().to_pylist()
        assert got == ["first", "kept text"], got
        assert [ln for ln, _ in st.skipped][:1] == [3]
        assert "deep" in st.skipped[0][1] or "object" in st.skipped[0][1]


# -- file names that are not UTF-8 ------------------------------------------

def test_a_file_name_with_an_undecodable_byte_runs_and_is_named_printably(tmp_path):
    name = os.fsdecode(b"a\xff.jsonl")
    good = b"".join(b'{"id":"%d","text":"%s"}\n' % (i, t.encode()) for i, t in enumerate(_texts()))
    (tmp_path / name).write_bytes(good)
    out = tmp_path / "out"
    p = guarded(str(tmp_path), "run", tmp_path / name, "-o", out, "-q", writable=(str(out),),
                timeout=300)
    assert p.returncode == 0, p.stderr
    kept = (out / "data" / name).read_bytes().splitlines()
    assert 0 < len(kept) < len(good.splitlines())
    # a bad record in it: the message names the file printably
    (tmp_path / name).write_bytes(good + b"{broken\n")
    out2 = tmp_path / "out2"
    p = guarded(str(tmp_path), "run", tmp_path / name, "-o", out2, "-q",
                writable=(str(out2),), expect=2, timeout=300)
    assert "a\\xff.jsonl:" in p.stderr, p.stderr


def test_generated_ids_and_other_formats_with_an_undecodable_name(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    folder = tmp_path / os.fsdecode(b"in\xfe")
    folder.mkdir()
    texts = _texts()
    with pa.OSFile(os.fsencode(str(folder / os.fsdecode(b"p\xff.parquet"))), "wb") as f:
        pq.write_table(pa.table({"text": texts}), f)
    _write_stream(str(folder / os.fsdecode(b"s\xff.arrow")), texts)
    out = tmp_path / "out"
    p = guarded(str(tmp_path), "run", folder, "-o", out, "-q", "--id-field", "none",
                writable=(str(out),), timeout=300)
    assert p.returncode == 0, p.stderr
    assert sorted(os.listdir(out / "data")) == sorted([os.fsdecode(b"p\xff.parquet"),
                                                       os.fsdecode(b"s\xff.arrow")])


def test_every_reader_and_writer_takes_an_undecodable_name(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    import numpy as np
    from gpu_dedup.io.sources import expand_inputs, output_names, read_corpus
    folder = tmp_path / os.fsdecode(b"in\xfe")
    (folder / "t").mkdir(parents=True)
    texts = _texts(8)
    with open(folder / os.fsdecode(b"j\xff.jsonl"), "w") as f:
        for i, t in enumerate(texts):
            f.write('{"text": "%s"}\n' % t)
    with pa.OSFile(os.fsencode(str(folder / os.fsdecode(b"p\xff.parquet"))), "wb") as f:
        pq.write_table(pa.table({"text": texts}), f)
    _write_stream(str(folder / os.fsdecode(b"s\xff.arrow")), texts)
    for i, t in enumerate(texts[:3]):
        (folder / "t" / os.fsdecode(b"d%d\xff.txt" % i)).write_text(t)
    paths = expand_inputs([str(folder)]) + expand_inputs([str(folder / "t")])
    c = read_corpus(paths, id_field=None)
    assert len(c) == 3 * len(texts) + 3
    for name in c.ids.to_pylist():
        assert name.isprintable() and "\\x" in name, name
    out = tmp_path / "out"
    out.mkdir()
    names = output_names([s.path for s in c.shards])
    for s, name in zip(c.shards, names):
        n = s.write_kept(np.ones(len(s), bool), str(out / name))
        assert n == len(s)
    got = sorted(os.listdir(out))
    assert got == sorted([os.fsdecode(b"j\xff.jsonl"), os.fsdecode(b"p\xff.parquet"),
                          os.fsdecode(b"s\xff.arrow"), "t"])
    assert len(os.listdir(out / "t")) == 3
    assert pq.read_table(pa.memory_map(os.fsencode(str(out / os.fsdecode(b"p\xff.parquet"))))
                         ).num_rows == len(texts)


def test_display_name_is_printable():
    from gpu_dedup.io.stdin import display_name
    assert display_name(os.fsdecode(b"dir/a\xff.jsonl")) == "dir/a\\xff.jsonl"
    assert display_name("tab\there.jsonl") == "tab\\there.jsonl"
    assert display_name("caf\u00e9.jsonl") == "caf\u00e9.jsonl"
    assert display_name("-") == "<stdin>"
    assert display_name(f"s3://{KEY}:{SECRET}@b/x.jsonl") == "s3://***@b/x.jsonl"


# -- inputs that are not regular files --------------------------------------

def test_a_fifo_input_is_refused_before_it_is_read(tmp_path):
    fifo = tmp_path / "f.jsonl"
    os.mkfifo(fifo)
    out = tmp_path / "out"
    guarded(str(tmp_path), "run", fifo, "-o", out, "-q", writable=(str(out),), expect=2,
            says="f.jsonl", timeout=60)


def test_counting_records_never_reads_a_special_file(tmp_path):
    """Counting an input's records before the run (to choose how its
    kernels run) opens regular files only: a FIFO would block, and a link
    to /dev/zero never ends."""
    from gpu_dedup.io.plan import input_records
    fifo = tmp_path / "f.jsonl"
    os.mkfifo(fifo)
    link = tmp_path / "z.jsonl"
    os.symlink("/dev/zero", link)
    assert input_records(str(fifo)) is None and input_records(str(link)) is None
    plain = tmp_path / "p.jsonl"
    plain.write_text('{"text": "a"}\n{"text": "b"}')
    assert input_records(str(plain)) == 2


def test_a_link_to_a_device_is_refused(tmp_path):
    link = tmp_path / "z.jsonl"
    os.symlink("/dev/zero", link)
    out = tmp_path / "out"
    guarded(str(tmp_path), "run", link, "-o", out, "-q", writable=(str(out),), expect=2,
            says="z.jsonl", timeout=60)


def test_special_files_inside_input_folders_are_refused(tmp_path):
    for name in ("x.jsonl", "x.json", "x.parquet", "x.txt"):
        folder = tmp_path / ("in-" + name.replace(".", "-"))
        folder.mkdir()
        if name != "x.txt":
            (folder / "a.jsonl").write_text('{"id":"1","text":"some text"}\n')
        else:
            (folder / "a.txt").write_text("some text")
        os.mkfifo(folder / name)
        out = tmp_path / ("out-" + name)
        guarded(str(tmp_path), "run", folder, "-o", out, "-q", writable=(str(out),), expect=2,
                says=name, timeout=60)


def test_stdin_still_reads(tmp_path):
    out = tmp_path / "out"
    p = guarded(str(tmp_path), "run", "-", "-o", out, "-q", writable=(str(out),), expect=0,
                input=b'{"id":"1","text":"some text here"}\n', timeout=120)
    assert (out / "data" / "stdin.jsonl").read_bytes() == b'{"id":"1","text":"some text here"}\n'


def test_a_deep_record_whose_text_is_cut_is_one_line_not_a_recursion_error(tmp_path):
    import numpy as np
    import pytest
    from gpu_dedup.errors import InputError
    from gpu_dedup.io.jsonl import read_jsonl_shard, write_edited_lines
    src = tmp_path / "d.jsonl"
    src.write_bytes(b'{"id":"z","text":"q"}\n'
                    b'{"id":"a","text":"abc def","m":' + _nested(1500) + b"}\n")
    d = read_jsonl_shard(str(src))
    assert d.texts.to_pylist() == ["q", "abc def"]
    with pytest.raises(InputError, match=r"d\.jsonl:2: nested too deeply"):
        write_edited_lines(str(src), np.array([1, 2]), np.array([True, True]),
                           np.array([False, True]), lambda i: "x", "text",
                           str(tmp_path / "out.jsonl"))
