"""``deduplicate_frame`` over a pyarrow Table, a pandas and a Polars DataFrame
and a ``datasets.Dataset``: the same cluster, kept, duplicate_of and
similarity as ``gpu-dedup run`` over the same rows in JSONL, the same kind
of object back with its own columns untouched, and one-line errors for a
bad column or a null text."""
from __future__ import annotations

import importlib
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import forkcli
from gpu_dedup import Config, deduplicate_frame
from gpu_dedup.errors import ConfigError, InputError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KINDS = ("arrow", "pandas", "polars", "datasets")
ADDED = ("cluster", "kept", "duplicate_of", "similarity")
#: A second configuration, given to the CLI as options: words, not characters.
WORD_CFG = Config(shingle="word", ngram=2, threshold=0.6)
WORD_ARGS = ("--shingle", "word", "--ngram", "2", "--threshold", "0.6")


def need(module: str):
    """The library, or a skip when it is missing; under CI a missing one fails."""
    if os.environ.get("CI") == "true":
        return importlib.import_module(module)
    return pytest.importorskip(module, reason=f"{module} is not installed")


# ---------------------------------------------------------------------------
# a corpus of short news items with planted near-duplicates
# ---------------------------------------------------------------------------

SUBJECTS = ["The city council", "A local farmer", "The new public library", "Our engineering team",
            "The river authority", "A group of students", "The regional hospital",
            "The museum director", "The football club", "A small bakery on Main Street",
            "The transport ministry", "Volunteers from the harbour"]
VERBS = ["announced", "postponed", "approved", "criticised", "reviewed", "celebrated",
         "questioned", "funded", "rejected", "presented"]
OBJECTS = ["a plan to repair the old stone bridge", "the budget for the coming year",
           "an exhibition of early photographs", "a scheme to plant ten thousand trees",
           "the results of the spring survey", "new opening hours for the weekend",
           "a proposal to close the night bus route", "a festival of music and food",
           "the design of the new cycle lanes", "a study of flooding in the lower valley",
           "the price of tickets for the season", "a report on air quality near schools"]
TAILS = ["after a long public meeting on Tuesday.", "despite heavy rain across the valley.",
         "to the surprise of many residents.", "in a statement published this morning.",
         "following complaints from local businesses.", "before the summer holidays begin.",
         "with support from the national government.", "at a press conference in the town hall.",
         "as part of a wider review of services.", "while critics called for more consultation."]
SWAPS = {"Tuesday": "Wednesday", "heavy": "light", "many": "some", "this": "that",
         "long": "short", "new": "fresh", "old": "ancient", "summer": "winter"}


def sentence(rng) -> str:
    return " ".join([SUBJECTS[rng.integers(len(SUBJECTS))], VERBS[rng.integers(len(VERBS))],
                     OBJECTS[rng.integers(len(OBJECTS))], TAILS[rng.integers(len(TAILS))]])


def near_copy(text: str, rng) -> str:
    """One or two words swapped, or a sentence added: still a near-duplicate."""
    words = text.split(" ")
    swappable = [i for i, w in enumerate(words) if w in SWAPS]
    if swappable and rng.random() < 0.7:
        for i in rng.choice(swappable, size=min(2, len(swappable)), replace=False):
            words[i] = SWAPS[words[i]]
        return " ".join(words)
    return text + " Officials declined to comment further."


def make_rows(n_base: int = 150, seed: int = 7) -> tuple[list[dict], set]:
    """``(rows, planted)``: about 200 rows (id, text, n) and the row numbers
    of the planted copies (exact, re-cased or edited)."""
    rng = np.random.default_rng(seed)
    texts, planted = [], set()
    for _ in range(n_base):
        doc = " ".join(sentence(rng) for _ in range(int(rng.integers(3, 6))))
        texts.append(doc)
        r = rng.random()
        if r < 0.2:
            texts.append(near_copy(doc, rng))
        elif r < 0.28:
            texts.append(doc.upper())                    # the same after normalization
        elif r < 0.34:
            texts.append(doc)
        else:
            continue
        planted.add(len(texts) - 1)
    texts += ["Café au lait, naïve façade — 東京の天気は晴れです。", "", "   "]
    rows = [{"id": f"doc-{i:03d}", "text": t, "n": i} for i, t in enumerate(texts)]
    return rows, planted


@pytest.fixture(scope="module")
def corpus():
    return make_rows()


def make_frame(kind: str, rows: list[dict]):
    if kind == "arrow":
        return pa.Table.from_pylist(rows)
    if kind == "pandas":
        return need("pandas").DataFrame(rows)
    if kind == "polars":
        return need("polars").DataFrame(rows)
    return need("datasets").Dataset.from_list(rows)


def as_table(frame) -> pa.Table:
    """Any of the four kinds as a pyarrow Table (pandas NaN as null)."""
    if isinstance(frame, pa.Table):
        return frame
    mod = type(frame).__module__.split(".")[0]
    if mod == "pandas":
        return pa.Table.from_pandas(frame, preserve_index=False)
    if mod == "polars":
        return frame.to_arrow()
    return frame.with_format("arrow")[:]


def columns_of(table: pa.Table) -> dict:
    return {c: table.column(c).to_pylist() for c in ADDED}


def cli(*args):
    return forkcli.run([str(a) for a in args], text=True, cwd=ROOT)


@pytest.fixture(scope="module")
def cli_clusters(corpus, tmp_path_factory):
    """clusters.parquet of ``gpu-dedup run`` over the rows in JSONL, for the
    default configuration and for ``WORD_CFG``."""
    rows, _ = corpus
    d = tmp_path_factory.mktemp("frames")
    src = d / "rows.jsonl"
    with open(src, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    out = {}
    for name, extra in (("default", ()), ("word", WORD_ARGS)):
        o = d / f"out-{name}"
        p = cli("run", src, "-o", o, "-q", *extra)
        assert p.returncode == 0, p.stderr
        cl = pq.read_table(o / "clusters.parquet")
        assert cl.column("id").to_pylist() == [r["id"] for r in rows]
        out[name] = columns_of(cl)
    return out


# ---------------------------------------------------------------------------
# the same result as the CLI, for every kind
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_frame_gives_the_cli_result_row_for_row(kind, corpus, cli_clusters):
    rows, planted = corpus
    frame = make_frame(kind, rows)
    before = as_table(frame)
    out = deduplicate_frame(frame, text="text", id="id")
    assert type(out) is type(frame)
    table = as_table(out)
    assert table.column_names == ["id", "text", "n", *ADDED]
    # the original columns, unchanged, and the input itself untouched
    assert table.select(["id", "text", "n"]).equals(before)
    assert as_table(frame).equals(before)
    got = columns_of(table)
    assert got == cli_clusters["default"]
    kept = np.array(got["kept"])
    assert 0 < (~kept).sum() < len(rows)
    assert (~kept)[sorted(planted)].mean() >= 0.9      # the planted copies are removed
    assert all(got["duplicate_of"][i] is None and got["similarity"][i] is None
               for i in np.flatnonzero(kept))
    ids = {r["id"] for r in rows}
    assert all(got["duplicate_of"][i] in ids and 0 < got["similarity"][i] <= 1
               for i in np.flatnonzero(~kept))


@pytest.mark.parametrize("kind", KINDS)
def test_the_config_passes_through(kind, corpus, cli_clusters):
    rows, _ = corpus
    frame = make_frame(kind, rows)
    by_config = columns_of(as_table(deduplicate_frame(frame, id="id", config=WORD_CFG)))
    assert by_config == cli_clusters["word"]
    assert by_config != cli_clusters["default"]
    # Config fields given as keywords override the config (or the defaults)
    by_options = deduplicate_frame(frame, id="id", shingle="word", ngram=2, threshold=0.6)
    assert columns_of(as_table(by_options)) == cli_clusters["word"]
    over = deduplicate_frame(frame, id="id", config=WORD_CFG, threshold=0.99)
    assert sum(as_table(over).column("kept").to_pylist()) > sum(by_config["kept"])


@pytest.mark.parametrize("kind", KINDS)
def test_native_column_types(kind, corpus):
    rows, _ = corpus
    out = deduplicate_frame(make_frame(kind, rows), id="id")
    if kind == "arrow":
        assert [out.schema.field(c).type for c in ADDED] == \
            [pa.int64(), pa.bool_(), pa.string(), pa.float64()]
    elif kind == "pandas":
        assert [str(out[c].dtype) for c in ("cluster", "kept", "similarity")] == \
            ["int64", "bool", "float64"]
        assert out["similarity"][out["kept"]].isna().all()
        assert out["duplicate_of"][out["kept"]].isna().all()
    elif kind == "polars":
        pl = need("polars")
        assert [out.schema[c] for c in ADDED] == [pl.Int64, pl.Boolean, pl.String, pl.Float64]
    else:
        ds = need("datasets")
        assert [out.features[c] for c in ADDED] == \
            [ds.Value("int64"), ds.Value("bool"), ds.Value("string"), ds.Value("float64")]


@pytest.mark.parametrize("kind", KINDS)
def test_without_ids_rows_are_named_by_number(kind, corpus, cli_clusters):
    rows, _ = corpus
    frame = make_frame(kind, [{"text": r["text"]} for r in rows])
    got = columns_of(as_table(deduplicate_frame(frame, text="text")))
    want = dict(cli_clusters["default"])
    want["duplicate_of"] = [None if d is None else str(int(d.split("-")[1]))
                            for d in want["duplicate_of"]]
    assert got == want


# ---------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
def test_a_missing_column_is_a_one_line_error(kind, corpus):
    rows, _ = corpus
    frame = make_frame(kind, rows[:20])
    for kw, name in (({"text": "body"}, "body"), ({"id": "doc_id"}, "doc_id")):
        with pytest.raises(ConfigError) as e:
            deduplicate_frame(frame, **kw)
        msg = str(e.value)
        assert "\n" not in msg
        assert repr(name) in msg
        assert all(repr(c) in msg for c in ("id", "text", "n"))


@pytest.mark.parametrize("kind", KINDS)
def test_a_null_text_names_its_row(kind, corpus):
    rows, _ = corpus
    rows = [dict(r) for r in rows[:30]]
    rows[12]["text"] = None
    rows[20]["text"] = None
    with pytest.raises(InputError) as e:
        deduplicate_frame(make_frame(kind, rows), id="id")
    msg = str(e.value)
    assert "\n" not in msg and "row 12" in msg and "doc-012" in msg and "'text'" in msg


def test_a_repeated_id_is_named_as_a_file_run_names_it():
    """Of the ids that occur more than once, the one seen first is named, at
    its second row: the rule of reading files (gpu_dedup.ids.first_duplicate)."""
    table = pa.table({"id": ["x", "y", "y", "x"], "text": ["a b", "c d", "e f", "g h"]})
    with pytest.raises(InputError, match=r"column 'id': row 3: duplicate id 'x' "
                                         r"\(first at row 0\)"):
        deduplicate_frame(table, id="id")


def test_other_bad_input_is_refused(corpus):
    rows, _ = corpus
    table = pa.Table.from_pylist(rows[:30])
    with pytest.raises(ConfigError, match="not a string column"):
        deduplicate_frame(table, text="n")
    with pytest.raises(ConfigError, match="unknown option"):
        deduplicate_frame(table, treshold=0.5)
    with pytest.raises(ConfigError, match="already has column"):
        deduplicate_frame(deduplicate_frame(table, id="id"), id="id")
    dup = pa.Table.from_pylist(rows[:5] + [dict(rows[7], id=rows[2]["id"])])
    with pytest.raises(InputError, match=r"row 5: duplicate id 'doc-002' \(first at row 2\)"):
        deduplicate_frame(dup, id="id")
    with pytest.raises(TypeError, match="pyarrow.Table"):
        deduplicate_frame([r["text"] for r in rows])


# ---------------------------------------------------------------------------
# positions, not labels
# ---------------------------------------------------------------------------

def test_pandas_index_and_dataset_selection_are_positional(corpus):
    rows, _ = corpus
    want = columns_of(deduplicate_frame(pa.Table.from_pylist(rows), id="id"))
    pd = need("pandas")
    df = pd.DataFrame(rows, index=[f"r{len(rows) - i}" for i in range(len(rows))])
    out = deduplicate_frame(df, id="id")
    assert list(out.index) == list(df.index)
    assert columns_of(as_table(out)) == want
    # a selection (indices over the table) is read in its own order
    ds = need("datasets").Dataset.from_list(rows[::-1] + [{"id": "x", "text": "x", "n": -1}])
    sel = ds.select(range(len(rows) - 1, -1, -1))
    got = as_table(deduplicate_frame(sel, id="id"))
    assert got.column("id").to_pylist() == [r["id"] for r in rows]
    assert columns_of(got) == want


def test_an_empty_frame_gets_empty_columns():
    out = deduplicate_frame(pa.table({"text": pa.array([], pa.string())}))
    assert out.num_rows == 0 and out.column_names == ["text", *ADDED]
    assert out.schema.field("cluster").type == pa.int64()
