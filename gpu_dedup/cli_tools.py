"""The commands of ``gpu-dedup`` that read no corpus of the user's:
``tune`` (the bands/rows table), ``demo`` (a planted corpus, deduplicated
and scored) and ``doctor`` (the kernels checked). :mod:`gpu_dedup.cli`
registers them on its group, which maps their errors to one line.
"""
from __future__ import annotations

import json
import os
import tempfile

import click

from .edge import clean_tree, echo
from .errors import DedupError

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def check_num_perm_option(ctx, param, value):
    """``--num-perm`` within the budgets the engine accepts (one line and exit
    status 2 otherwise)."""
    from .params import check_num_perm
    if value is not None:
        check_num_perm(value)
    return value


@click.command(context_settings=CONTEXT)
@click.option("--threshold", "-t", type=float, default=0.8, show_default=True,
              help="Similarity at which two documents are duplicates.")
@click.option("--num-perm", "-k", type=int, default=128, show_default=True,
              callback=check_num_perm_option,
              help="Hash budget K (number of MinHash hash functions, at most 131,072).")
@click.option("--fp-weight", type=float, default=None,
              help="Weight of the false-positive area in the choice (default: the engine's, "
                   "0.01).")
@click.option("--fn-weight", type=float, default=None,
              help="Weight of the false-negative area in the choice (default: the engine's, "
                   "0.99).")
@click.option("--plot", default=None, metavar="FILE.png",
              help="Also draw the S-curves, the threshold marked, into this PNG (a new "
                   "file, unless --overwrite).")
@click.option("--overwrite", is_flag=True, help="Replace the --plot file if it exists.")
@click.option("--json", "as_json", is_flag=True, help="Print the table as JSON.")
def tune(threshold, num_perm, fp_weight, fn_weight, plot, overwrite, as_json):
    """Show how to split K hashes into bands and rows for a threshold.

    Prints the cookbook's table (every split with bands x rows = K: the
    approximate threshold (1/b)^(1/r), the probability of becoming a candidate at
    a few similarities, the false-positive and false-negative areas under the
    S-curve) and the recommended split, the one `gpu-dedup run --threshold T
    --num-perm K` uses."""
    from .params import DEFAULT_FN_WEIGHT, DEFAULT_FP_WEIGHT
    from .tune import format_table, plot as plot_table, to_dict, tune_table
    t = tune_table(threshold, num_perm,
                   DEFAULT_FP_WEIGHT if fp_weight is None else fp_weight,
                   DEFAULT_FN_WEIGHT if fn_weight is None else fn_weight)
    if plot:
        plot_table(t, plot, overwrite=overwrite)
    if as_json:
        d = to_dict(t)
        if plot:
            d["plot"] = os.path.abspath(plot)
        echo(json.dumps(clean_tree(d), indent=2))
        return
    echo(format_table(t))
    if plot:
        echo(f"plot: {os.path.abspath(plot)}")


_DEMO_MARK = ".gpu-dedup-demo"


@click.command(context_settings=CONTEXT)
@click.option("--output", "-o", default=None,
              help="Folder for the generated corpus, the run's output and its report "
                   "(default: a new folder under the system's temporary directory).")
@click.option("--docs", type=int, default=8000, show_default=True, help="Base documents.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the corpus.")
@click.option("--device", type=click.Choice(["cpu", "gpu", "auto"]), default="cpu",
              show_default=True, help="Where to run.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bars.")
def demo(output, docs, seed, device, quiet):
    """Generate the cookbook's planted corpus, deduplicate it with the cookbook's
    settings (word 3-grams, 128 hashes, 32 bands x 4 rows) and score the result
    against the plant. Leaves the corpus, the output and report.html in a
    folder it names."""
    import pyarrow.parquet as pq

    from . import progress
    from .demo import COOKBOOK_CONFIG, planted_corpus, score
    from .kernels import ahead
    from .memory import default_budget
    from .pipeline import run as run_pipeline, summary_line
    if docs < 1:
        raise DedupError(f"--docs must be at least 1, got {docs}")
    if not quiet and (notice := progress.compile_notice()) is not None:
        echo(notice, err=True)
    if output:
        folder = os.path.abspath(output)
        if (os.path.isdir(folder) and os.listdir(folder)
                and not os.path.exists(os.path.join(folder, _DEMO_MARK))):
            raise DedupError(f"{folder}: folder is not empty and holds no earlier demo; choose "
                             f"an empty or new --output")
        if os.path.exists(folder) and not os.path.isdir(folder):
            raise DedupError(f"{folder}: exists and is not a folder; choose another --output")
        os.makedirs(folder, exist_ok=True)
    else:
        folder = tempfile.mkdtemp(prefix="gpu-dedup-demo-")
    with open(os.path.join(folder, _DEMO_MARK), "w") as f:
        f.write("made by gpu-dedup demo\n")
    texts, truth = planted_corpus(docs, seed)
    src = os.path.join(folder, "corpus.jsonl")
    with open(src, "w") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": str(i), "text": t}) + "\n")
    out = os.path.join(folder, "result")
    prog = progress.StageProgress() if progress.wanted(quiet) else None
    # a first demo compiles the kernels of both runs below: one helper
    # process compiles ahead for the two (a run started inside starts none)
    helper = ahead.start(default_budget()) if device == "cpu" else None
    try:
        try:
            if prog is not None:
                prog.__enter__()
            report = run_pipeline([src], out, COOKBOOK_CONFIG, device=device, overwrite=True,
                                  on_stage=prog.stage if prog else None,
                                  on_progress=prog.fraction if prog else None)
        finally:
            if prog is not None:
                prog.close()
        _warm_defaults(texts[:400], device)
    finally:
        ahead.finish(helper)
    cl = pq.read_table(os.path.join(out, "clusters.parquet"))
    pairs = pq.read_table(os.path.join(out, "pairs.parquet"))
    index = {v: i for i, v in enumerate(cl["id"].to_pylist())}
    pa_ = [index[x] for x in pairs["id_a"].to_pylist()]
    pb_ = [index[x] for x in pairs["id_b"].to_pylist()]
    s = score(cl["cluster"].to_numpy(), pa_, pb_, truth)
    echo(f"corpus: {len(texts):,} documents, {s['planted_pairs']:,} planted near-duplicate "
         f"pairs ({src})")
    echo(summary_line(report))
    echo(f"found {s['found']:,} of {s['planted_pairs']:,} planted pairs: "
         f"recall {s['recall']:.3f}, precision {s['precision']:.3f}")
    echo(f"output: {out}")
    echo(f"report: {os.path.join(out, 'report.html')}")


def _warm_defaults(texts, device) -> None:
    """Run the default options once on a few documents, compiled (a run this
    small would otherwise run its kernels interpreted), so that the kernels a
    first plain `gpu-dedup run` of more text needs are already in Numba's
    on-disk cache."""
    from .config import Config
    from .kernels.jit import compiling
    from .pipeline import run as run_pipeline
    with tempfile.TemporaryDirectory(prefix="gpu-dedup-warm-") as d, compiling():
        src = os.path.join(d, "sample.jsonl")
        with open(src, "w") as f:
            for t in texts:
                f.write(json.dumps({"text": t.upper() + "  "}) + "\n")
        run_pipeline([src], os.path.join(d, "out"), Config(), device=device, html=False)


@click.command(context_settings=CONTEXT)
@click.pass_context
def doctor(ctx):
    """Check this machine: the CPU kernels against the plain-Python reference,
    then what the GPU backend finds, and the GPU and CPU kernels compared bit
    for bit on a small generated corpus. Exits 0 when the CPU path is healthy
    and a GPU, if there is one, matches it; without a GPU it says what is
    missing and still exits 0. Exits 2 when the CPU path is broken or a GPU
    differs from it."""
    from .doctor import main as doctor_main
    ctx.exit(doctor_main(echo))
