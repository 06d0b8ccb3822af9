"""The plan: how a memory budget is split between tasks, and whether the
run's store is in memory or on disk.

:func:`make_plan` takes the budget, the executor's concurrency and the
measured size of the inputs (:func:`gpu_dedup.io.plan.input_bytes`: file
sizes, the text files of a directory, the uncompressed size recorded by gzip
and zstd, Parquet metadata) and decides:

* ``task_bytes``: each concurrent task's share of the budget, after a
  reserve for the interpreter and its libraries; the stages size their
  partitions (input chunks, signature blocks, band units, verification
  batches) from it;
* ``chunk_bytes``: input bytes per read unit (a twelfth of a task's share:
  reading, parsing and normalizing hold several copies of a chunk);
* ``store``: ``memory`` when the estimated peak of holding the corpus fits
  the budget and every task runs in this process, else ``disk`` (the work
  directory). A run on a Dask cluster, or one given a work directory, always
  uses the disk.

The result never depends on the plan: every partitioning gives the same
bytes.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from ..errors import ConfigError
from ..memory import format_size

#: Part of the budget kept for the interpreter and its libraries.
RESERVE = 256 << 20
#: The smallest budget a run can honour: an interpreter with NumPy, Arrow and
#: the compiled kernels loaded holds about 250 MiB by itself.
MIN_BUDGET = 256 << 20
#: Peak resident memory of an in-memory run per byte of input text, with room
#: to spare (measured: about 26x on a million 57-byte documents, where the
#: per-document arrays dominate; less on longer documents).
MEMORY_PER_INPUT_BYTE = 40
#: A small run runs the CPU kernels interpreted
#: (:func:`gpu_dedup.kernels.jit.interpreted`) when they would take it less
#: time that way than loading Numba and its cached kernels (about a second
#: of a warm run, whatever its size). Interpreted, a run costs about
#: :data:`INTERPRET_SECONDS_PER_BYTE` a byte of text (the whole-array
#: hashing and sketching) and up to :data:`INTERPRET_SECONDS_PER_RECORD` a
#: document (the greedy rule's passes, on short lines with heavy
#: near-duplication: its worst case), measured by ``bench/first_run.py``,
#: which times both ways (warm processes, 0.3 s of which is the start):
#: 300 long documents (1.5 MB) 0.73 s against 1.58 s compiled, 3,000 real
#: documents (1.4 MB) 0.77 s against 1.38 s, 4,000 and 16,000 heavily
#: duplicated short lines (0.3 and 1.1 MB) 0.97 and 2.74 s against 1.48
#: and 1.53 s.
INTERPRET_SECONDS = 1.0
INTERPRET_SECONDS_PER_BYTE = 0.35e-6
INTERPRET_SECONDS_PER_RECORD = 0.15e-3
#: The greedy selection of an interpreted run costs about this a pair of its
#: buckets' windows (counted by the buckets stage): on pages of a few
#: templates, whose pairs all need their exact similarity, 2.5-4.2 µs, and
#: 1.4 µs on heavily duplicated short lines. A selection whose windows would
#: take more than :data:`INTERPRET_SECONDS` that way runs compiled: 4,000
#: templated pages took 8.8 s in the selection interpreted, 0.6 s compiled
#: (and 0.5-1 s to load Numba); whole runs 1.6 against 8.9 s.
INTERPRET_SECONDS_PER_WINDOW_PAIR = 2e-6
#: Inputs of more bytes always compile (their text alone takes longer).
INTERPRET_MAX_BYTES = int(INTERPRET_SECONDS / INTERPRET_SECONDS_PER_BYTE)
#: Inputs whose documents are not counted before they are read (compressed
#: or remote files, Arrow IPC) run interpreted up to this many bytes.
INTERPRET_BYTES = 512 << 10
#: Bytes a pair takes while sorted pairs are merged and written a slice at
#: a time (its columns, those of the sources' slices, the merge's order).
PAIR_BYTES = 96
#: A slice of merged pairs takes at most this share of a task's memory.
PAIR_SLICE_SHARE = 8


def interpreted_kernels(input_bytes: int, executor, backend, records: int | None = None) -> bool:
    """Whether a run runs its kernels interpreted: every task on this thread
    (the in-process executor), on the CPU, and a small input: with
    ``records`` (its documents, when known), one that costs at most
    :data:`INTERPRET_SECONDS` interpreted by the estimate above; without,
    at most :data:`INTERPRET_BYTES`. The results are the same either way."""
    if executor.name != "none" or backend.name != "cpu":
        return False
    if records is None:
        return int(input_bytes) <= INTERPRET_BYTES
    return (int(input_bytes) * INTERPRET_SECONDS_PER_BYTE
            + int(records) * INTERPRET_SECONDS_PER_RECORD) <= INTERPRET_SECONDS


def compile_selection(window_pairs: int) -> bool:
    """Whether an interpreted run's selection, over buckets whose windows
    hold ``window_pairs`` pairs, should run its kernels compiled."""
    return int(window_pairs) * INTERPRET_SECONDS_PER_WINDOW_PAIR > INTERPRET_SECONDS


def _floor_pow2(x: int) -> int:
    return 1 << (max(int(x), 1).bit_length() - 1)


@dataclass(frozen=True)
class Plan:
    """How a budget is split, and where the run's arrays live."""

    budget: int
    concurrency: int
    task_bytes: int
    chunk_bytes: int
    kernel_threads: int
    store: str = "memory"
    input_bytes: int = 0
    reason: str = ""

    def key(self) -> dict:
        """What determines the intermediate results (the store's name)."""
        d = asdict(self)
        for k in ("store", "input_bytes", "reason"):
            d.pop(k)
        return d

    @property
    def pair_slice_rows(self) -> int:
        """Rows of a slice of pairs merged in order
        (:func:`gpu_dedup.arrays.merged_pair_slices`): a chunk's pairs, or
        those of a range of first members, however many there are."""
        return max(1 << 12, int(self.task_bytes) // (PAIR_SLICE_SHARE * PAIR_BYTES))

    def describe(self) -> dict:
        d = asdict(self)
        d["budget_human"] = format_size(self.budget)
        return d


def check_budget(budget: int, option: str = "--memory-limit") -> None:
    """Refuse a budget below :data:`MIN_BUDGET`."""
    if budget < MIN_BUDGET:
        raise ConfigError(f"{option} {format_size(budget)} is below the smallest budget a run "
                          f"can honour ({format_size(MIN_BUDGET)}); pass at least "
                          f"{format_size(MIN_BUDGET)}")


def make_plan(budget: int, concurrency: int = 1, input_bytes: int = 0, *,
              shared_memory: bool = True, force_disk: str = "",
              partition_bytes: int | None = None, chunk_share: int = 12,
              memory_per_byte: int | None = None) -> Plan:
    """Split ``budget`` bytes between ``concurrency`` tasks and choose the store.

    Args:
        budget: bytes the run may hold.
        concurrency: tasks that run at once.
        input_bytes: measured size of the inputs' text.
        shared_memory: whether every task runs in this process.
        force_disk: a reason to use the disk whatever the size (empty: none).
        partition_bytes: each task's share, instead of the budget's split
            (small values cut even a small corpus into many partitions, which
            tests use; the result never depends on it).
    """
    from ..kernels.threads import threads as kernel_threads
    check_budget(budget)
    reserve = min(RESERVE, budget // 4)
    work = max(budget - reserve, 1)
    task = max(work // max(1, concurrency), 1)
    if partition_bytes is not None:
        task = max(int(partition_bytes), 1)
    chunk = _floor_pow2(min(max(task // max(1, int(chunk_share)), 4096), 1 << 30))
    need = int(input_bytes) * (MEMORY_PER_INPUT_BYTE if memory_per_byte is None
                               else int(memory_per_byte))
    if force_disk:
        store, reason = "disk", force_disk
    elif not shared_memory:
        store, reason = "disk", "tasks run in other processes"
    elif need > work:
        store, reason = "disk", (f"the inputs ({format_size(input_bytes)}) may need "
                                 f"{format_size(need)}, more than the budget")
    else:
        store, reason = "memory", (f"the inputs ({format_size(input_bytes)}) fit the budget "
                                   f"of {format_size(budget)}")
    return Plan(int(budget), int(concurrency), int(task), int(chunk),
                kernel_threads(), store, int(input_bytes), reason)
