"""Several columns written by the store in one pass over their pieces: each
piece made once, every file whole once the pass ends, and none written
where the pass fails."""
from __future__ import annotations

import os

import numpy as np
import pytest

from gpu_dedup.engine.store import DiskStore


@pytest.mark.parametrize("kind", ["disk", "memory"])
def test_columns_written_in_one_pass_read_back_whole_or_not_at_all(tmp_path, kind):
    from gpu_dedup.engine.store import MemoryStore
    st = DiskStore(str(tmp_path / "w")).open() if kind == "disk" else MemoryStore()
    try:
        reads = [0]

        def pieces():
            for lo in range(0, 10, 4):
                reads[0] += 1
                a = np.arange(lo, min(lo + 4, 10))
                yield a, a * 0.5, a % 2 == 0
        names = ["c/a.npy", "c/b.npy", "c/c.npy"]
        st.save_npy_columns(names, (np.int64, np.float64, bool), pieces(), 10)
        assert reads[0] == 3                          # each piece made once
        a, b, c = (st.load_npy(n) for n in names)
        assert a.tolist() == list(range(10)) and b.dtype == np.float64
        assert b.tolist() == [x * 0.5 for x in range(10)]
        assert c.tolist() == [x % 2 == 0 for x in range(10)]
        # fewer elements than announced: an error naming the file, and none
        # of the files written (the earlier ones stay as they were)
        more = ["d/a.npy", "d/b.npy"]
        with pytest.raises(ValueError, match="d/a.npy: 10 elements written, 11 announced"):
            st.save_npy_columns(more, (np.int64, np.float64),
                                ((x, y) for x, y, _ in pieces()), 11)
        assert not any(st.exists(n) for n in more)
        if kind == "disk":
            assert not os.listdir(os.path.join(st.root, "d"))    # no temporary file left
    finally:
        st.close()
