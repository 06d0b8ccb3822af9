"""The ``gpu-dedup`` command line: a thin layer over the library.

Library errors become one line on stderr and exit status 2 here, and only
here; ``--debug`` shows the traceback instead.
"""
from __future__ import annotations

import json
import logging
import os
import sys
import tempfile

import click

from . import __version__
from .config import Config
from .errors import DedupError

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class _Group(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except DedupError as exc:
            if ctx.params.get("debug") or os.environ.get("GPU_DEDUP_DEBUG"):
                raise
            click.echo(f"error: {exc}", err=True)
            ctx.exit(2)


@click.group(cls=_Group, context_settings=CONTEXT)
@click.version_option(__version__, prog_name="gpu-dedup")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.option("--log-level", default="warning", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]),
              help="How much to log on stderr.")
def main(debug, log_level):
    """Near-duplicate detection for text corpora: MinHash signatures, LSH
    banding, verified edges and connected components, on the CPU or a GPU."""
    logging.basicConfig(level=getattr(logging, log_level.upper()),
                        format="%(levelname)s: %(message)s")


def _config_options(f):
    opts = [
        click.option("--shingle", type=click.Choice(["char", "word"]), default="char",
                     show_default=True, help="Shingles: n-grams of characters or of words."),
        click.option("--ngram", type=int, default=5, show_default=True,
                     help="Shingle length n."),
        click.option("--normalize", default="nfkc,lower,ws", show_default=True,
                     help="Comma-separated steps before shingling: nfkc, lower, punct, digits, "
                          "ws (fold whitespace), or none."),
        click.option("--num-perm", type=int, default=128, show_default=True,
                     help="Number of MinHash hash functions K."),
        click.option("--bands", type=int, default=None,
                     help="LSH bands B (with --rows; default: chosen from --threshold)."),
        click.option("--rows", type=int, default=None, help="Rows per band R (B*R <= K)."),
        click.option("--threshold", type=float, default=0.8, show_default=True,
                     help="Similarity at which two documents are duplicates."),
        click.option("--seed", type=int, default=42, show_default=True,
                     help="Seed of the hash functions."),
        click.option("--signature-bits", type=click.Choice(["32", "64"]), default="32",
                     show_default=True, help="Width of signature values."),
        click.option("--similarity", type=click.Choice(["jaccard", "signature"]),
                     default="jaccard", show_default=True,
                     help="How candidates are verified: exact Jaccard of the shingle sets, "
                          "or the signature estimate."),
        click.option("--verify/--no-verify", default=True, show_default=True,
                     help="Verify candidate edges against --threshold."),
        click.option("--exact/--no-exact", default=True, show_default=True,
                     help="Cluster identical normalized texts before the fuzzy stages."),
        click.option("--keep", type=click.Choice(["first", "longest"]), default="first",
                     show_default=True, help="Which document of each cluster is kept."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def _make_config(kw) -> Config:
    return Config(shingle=kw["shingle"], ngram=kw["ngram"], normalize=kw["normalize"],
                  num_perm=kw["num_perm"], bands=kw["bands"], rows=kw["rows"],
                  threshold=kw["threshold"], seed=kw["seed"],
                  signature_bits=int(kw["signature_bits"]), similarity=kw["similarity"],
                  verify=kw["verify"], exact=kw["exact"], keep=kw["keep"])


@main.command(context_settings=CONTEXT)
@click.argument("inputs", nargs=-1, required=True)
@click.option("--output", "-o", required=True, help="Output directory.")
@click.option("--text-field", default="text", show_default=True, help="Field holding the text.")
@click.option("--id-field", default="id", show_default=True,
              help="Field holding a unique id ('none' to generate FILE:LINE ids).")
@_config_options
@click.option("--device", type=click.Choice(["cpu", "gpu", "auto"]), default="cpu",
              show_default=True, help="Where to run: cpu, gpu, or auto (a GPU if usable).")
@click.option("--gpu-memory", default=None,
              help="Device memory the GPU backend may use, e.g. 8GiB (default: a safe "
                   "share of the free memory).")
@click.option("--overwrite", is_flag=True, help="Replace a non-empty output directory.")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing on success.")
@click.option("--json", "as_json", is_flag=True, help="Print the report summary as JSON.")
def run(inputs, output, text_field, id_field, device, gpu_memory, overwrite, quiet, as_json,
        **kw):
    """Deduplicate INPUTS (JSONL, JSONL.gz/.zst, Parquet files or directories)
    into OUTPUT: clusters.parquet, pairs.parquet, report.json and data/."""
    from .pipeline import run as run_pipeline, summary_line
    cfg = _make_config(kw)
    report = run_pipeline(inputs, output, cfg, device=device, text_field=text_field,
                          id_field=None if id_field.lower() == "none" else id_field,
                          overwrite=overwrite, gpu_memory=gpu_memory)
    if device == "auto" and not quiet:
        click.echo(report["device"] if report["device"].startswith("auto") else
                   f"device: {report['device']}", err=True)
    if as_json:
        click.echo(json.dumps({k: report[k] for k in ("documents", "clusters", "edges",
                                                       "seconds", "device")}))
    elif not quiet:
        click.echo(summary_line(report))


@main.command(context_settings=CONTEXT)
@click.option("--output", "-o", default=None,
              help="Folder for the generated corpus and the run (default: a new temporary one).")
@click.option("--docs", type=int, default=8000, show_default=True, help="Base documents.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the corpus.")
@click.option("--device", type=click.Choice(["cpu", "gpu", "auto"]), default="cpu",
              show_default=True, help="Where to run.")
def demo(output, docs, seed, device):
    """Generate the cookbook's planted corpus, deduplicate it with the cookbook's
    settings (word 3-grams, 128 hashes, 32 bands x 4 rows) and score the result
    against the plant."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from .demo import COOKBOOK_CONFIG, planted_corpus, score
    from .pipeline import run as run_pipeline, summary_line
    folder = output or tempfile.mkdtemp(prefix="gpu-dedup-demo-")
    os.makedirs(folder, exist_ok=True)
    texts, truth = planted_corpus(docs, seed)
    src = os.path.join(folder, "corpus.jsonl")
    with open(src, "w") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": str(i), "text": t}) + "\n")
    out = os.path.join(folder, "result")
    report = run_pipeline([src], out, COOKBOOK_CONFIG, device=device, overwrite=True)
    cl = pq.read_table(os.path.join(out, "clusters.parquet"))
    pairs = pq.read_table(os.path.join(out, "pairs.parquet"))
    index = {v: i for i, v in enumerate(cl["id"].to_pylist())}
    pa_ = [index[x] for x in pairs["id_a"].to_pylist()]
    pb_ = [index[x] for x in pairs["id_b"].to_pylist()]
    s = score(cl["cluster"].to_numpy(), pa_, pb_, truth)
    click.echo(f"corpus: {len(texts):,} documents, {s['planted_pairs']:,} planted near-duplicate "
               f"pairs ({src})")
    click.echo(summary_line(report))
    click.echo(f"found {s['found']:,} of {s['planted_pairs']:,} planted pairs: "
               f"recall {s['recall']:.3f}, precision {s['precision']:.3f}")
    click.echo(f"output and report: {out}")
    del pa


@main.command(context_settings=CONTEXT)
def doctor():
    """Report what the GPU backend finds, then run the GPU and CPU kernels on a
    small generated corpus and compare every output bit for bit. Exits 0 only
    when they are identical."""
    from .doctor import main as doctor_main
    sys.exit(doctor_main(click.echo))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
