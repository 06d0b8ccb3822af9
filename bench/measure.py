"""Run a command and report its wall-clock seconds and peak resident memory.

    python bench/measure.py RESULT.json -- COMMAND...

A child created by a large process inherits that process's high-water mark
of resident memory across ``exec`` (Linux folds the old address space's peak
into the child's ``ru_maxrss``), so the harness does not start the measured
command itself: this small process does, and writes ``seconds``,
``peak_rss`` (bytes, from ``wait4``) and ``rc`` to RESULT.json. The command's
stderr passes through.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) < 3 or argv[1] != "--":
        print("usage: measure.py RESULT.json -- COMMAND...", file=sys.stderr)
        return 2
    result, cmd = argv[0], argv[2:]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    rc = os.waitstatus_to_exitcode(status)
    with open(result, "w") as f:
        json.dump({"seconds": seconds, "peak_rss": usage.ru_maxrss * 1024, "rc": rc,
                   "user_seconds": usage.ru_utime, "system_seconds": usage.ru_stime}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
