"""A small run imports only what it uses: pandas, installed beside the
package here (the tests need it), stays out of a CLI run."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_a_small_run_does_not_import_pandas(tmp_path):
    src = tmp_path / "docs.jsonl"
    src.write_text("".join(json.dumps({"id": i, "text": f"document {i % 7} says hello world"})
                           + "\n" for i in range(60)))
    out = tmp_path / "out"
    code = textwrap.dedent(f"""
        import json, sys
        from gpu_dedup.cli import main
        try:
            main(["run", {str(src)!r}, "--output", {str(out)!r}, "-q"], standalone_mode=False)
        except SystemExit as e:
            assert not e.code, e.code
        print(json.dumps("pandas" in sys.modules))
        import pandas                      # installed: the check above could fail
        print(json.dumps("pandas" in sys.modules))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    before, after = (json.loads(x) for x in r.stdout.strip().splitlines()[-2:])
    assert (before, after) == (False, True)
    import pyarrow.parquet as pq
    clusters = pq.read_table(out / "clusters.parquet")
    assert clusters.num_rows == 60 and clusters.column("kept").to_pylist().count(True) == 7
