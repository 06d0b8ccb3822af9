"""gpu_dedup.ids: the one duplicate-id rule and its message."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from gpu_dedup.errors import InputError
from gpu_dedup.ids import GENERATE_HINT, duplicate_id_error, first_duplicate


@pytest.mark.parametrize("ids, want", [
    (pa.array(["a", "b", "c"]), None),
    (pa.array([], pa.large_string()), None),
    (pa.array(["a", "b", "b", "a"]), (0, 3)),         # 'a' is seen first, repeated at 3
    (pa.array(["q", "a", "b", "b", "a", "a"]), (1, 4)),
    (pa.chunked_array([["z", "y"], ["y", "z"]]), (0, 3)),
    (pa.array([7, 8, 9, 8], pa.int64()), (1, 3)),
    (np.array([5, 1, 5, 1, 1], np.uint64), (0, 2)),
    (np.array([[1, 2], [3, 4], [3, 4], [1, 3]], np.uint64), (1, 2)),   # fingerprints: rows
    (np.array([[1, 2], [1, 3], [3, 4]], np.uint64), None),
])
def test_first_duplicate(ids, want):
    assert first_duplicate(ids) == want


def test_first_duplicate_agrees_with_a_plain_scan():
    rng = np.random.default_rng(3)
    for n in (2, 10, 200):
        for _ in range(30):
            x = rng.integers(0, n, size=n)
            seen, pairs = {}, []
            for i, v in enumerate(x.tolist()):
                if v in seen and seen[v] >= 0:
                    pairs.append((seen[v], i))
                    seen[v] = -1                      # its second occurrence only
                elif v not in seen:
                    seen[v] = i
            want = min(pairs) if pairs else None
            assert first_duplicate(x) == want
            assert first_duplicate(pa.array([f"s{v}" for v in x.tolist()])) == want


def test_the_message_names_both_places_and_the_way_out():
    exc = duplicate_id_error("g2", "b.jsonl:2", "a.jsonl:3")
    assert isinstance(exc, InputError)
    assert str(exc) == ("b.jsonl:2: duplicate id 'g2' (first at a.jsonl:3); ids must be "
                        "unique, or pass --id-field none to generate them")
    assert GENERATE_HINT in str(exc) and "\n" not in str(exc)
    assert str(duplicate_id_error(3, "row 4", "row 1", hint=None)) == \
        "row 4: duplicate id 3 (first at row 1)"
