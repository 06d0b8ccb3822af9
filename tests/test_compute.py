"""Arrow's compute functions called through :mod:`gpu_dedup.compute` give
what ``pyarrow.compute`` gives, and importing the module loads no
``pyarrow.compute``."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pyarrow.compute as pac
import pytest

from gpu_dedup import compute

TEXTS = pa.array(["Ab  C", None, "\ufb01 X\u00c5!", "", "  12 apples, 345 pears  "],
                 pa.large_string())


def test_cast_is_a_safe_cast():
    ints = pa.array([7, None, -42], pa.int64())
    assert compute.cast(ints, pa.large_string()).equals(ints.cast(pa.large_string()))
    chunked = pa.chunked_array([ints, ints])
    assert compute.cast(chunked, pa.string()).equals(chunked.cast(pa.string()))
    with pytest.raises(pa.ArrowInvalid):                # a value would change
        compute.cast(pa.array([1.5]), pa.int64())


def test_take_and_filter():
    idx = pa.array([4, None, 0, 0], pa.int64())
    assert compute.take(TEXTS, idx).equals(TEXTS.take(idx))
    table = pa.table({"t": TEXTS, "n": pa.array(range(5))})
    mask = pa.array([True, False, True, False, True])
    assert compute.call("filter", table, mask).equals(table.filter(mask))


@pytest.mark.parametrize("step", ["nfkc", "lower", "punct", "digits", "ws"])
def test_the_normalization_steps_are_arrows(step):
    from gpu_dedup.stages.normalize import _arrow_step
    want = {"nfkc": lambda a: pac.utf8_normalize(a, "NFKC"),
            "lower": pac.utf8_lower,
            "punct": lambda a: pac.replace_substring_regex(a, r"\p{P}+", ""),
            "digits": lambda a: pac.replace_substring_regex(a, r"\p{Nd}+", "0"),
            "ws": lambda a: pac.utf8_trim(
                pac.replace_substring_regex(a, r"[\s\x{0b}\x{1c}-\x{1f}\x{85}\p{Z}]+", " "),
                " ")}[step](TEXTS)
    got = _arrow_step(TEXTS, step)
    assert got.equals(want)
    assert got.to_pylist() != TEXTS.to_pylist()          # the step did something


def test_prefixed():
    got = compute.prefixed("d\u00e9j\u00e0/a.jsonl:", pa.array(["1", "22"], pa.large_string()))
    assert got.type == pa.large_string()
    assert got.to_pylist() == ["d\u00e9j\u00e0/a.jsonl:1", "d\u00e9j\u00e0/a.jsonl:22"]


def test_the_lazy_module_is_pyarrow_compute():
    assert compute.pc.utf8_upper is pac.utf8_upper
    with pytest.raises(AttributeError):
        compute.pc.no_such_function


def test_importing_and_calling_loads_no_pyarrow_compute():
    code = textwrap.dedent("""
        import sys
        import numpy as np
        import pyarrow as pa
        from gpu_dedup import compute
        from gpu_dedup.arrays import arrow
        a = compute.cast(arrow(np.arange(3)), pa.large_string())
        a = compute.prefixed("x:", compute.take(a, arrow(np.array([2, 0]))))
        assert a.to_pylist() == ["x:2", "x:0"], a
        print("pyarrow.compute" in sys.modules)
        compute.pc.utf8_upper
        print("pyarrow.compute" in sys.modules)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["False", "True"]
