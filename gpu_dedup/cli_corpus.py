"""The commands that deduplicate a corpus otherwise than ``run``: ``substr``
(repeated passages) and ``semantic`` (near-duplicates by meaning). The
command line (:mod:`gpu_dedup.cli`) adds them to its group.
"""
from __future__ import annotations

import os

import click

from .cli_options import (CONTEXT, as_json_text, exec_kw, exec_options, quiet_logs,
                          work_options)
from .edge import echo


@click.command(context_settings=CONTEXT)
@click.argument("inputs", nargs=-1, required=True)
@click.option("--output", "-o", required=True,
              help="Output directory: spans.parquet, documents.parquet, data/, report.json "
                   "and report.html.")
@click.option("--unit", default="word", show_default=True,
              help="Units: word (runs of non-whitespace) or char (code points).")
@click.option("--min-length", "-L", type=int, default=50, show_default=True,
              help="A repeated passage is a run of at least this many units.")
@click.option("--keep", default="first", show_default=True,
              help="first: remove every occurrence but the first; none: remove every "
                   "occurrence of a repeated passage.")
@click.option("--min-doc-length", type=int, default=0, show_default=True,
              help="Drop a document left with fewer units than this.")
@click.option("--normalize", default="none", show_default=True,
              help="Steps applied to each unit before comparing (nfkc, lower, punct, digits); "
                   "offsets stay those of the original text.")
@work_options
@exec_options
def substr(inputs, output, unit, min_length, keep, min_doc_length, normalize, work_dir,
           keep_work_dir, overwrite, text_field, id_field, on_bad_record, device, memory_limit,
           scheduler, workers, quiet, as_json):
    """Exact-substring deduplication: cut every repeated passage of at least
    --min-length units out of the documents of INPUTS (all occurrences but the
    first, or all), after Lee et al. (2021). Runs out of core under
    --memory-limit, on Dask with --scheduler, and on the GPU with --device."""
    from .config import parse_normalize
    from .substr import run as run_substr
    if quiet:
        quiet_logs()
    report = run_substr(inputs, output, unit=unit, min_length=min_length, keep=keep,
                        min_doc_length=min_doc_length, normalize=parse_normalize(normalize),
                        overwrite=overwrite, work_dir=work_dir, keep_work_dir=keep_work_dir,
                        **exec_kw(text_field, id_field, on_bad_record, device, memory_limit,
                                   scheduler, workers))
    if as_json:
        echo(as_json_text({k: report[k] for k in ("documents", "units", "bytes", "spans")}))
    elif not quiet:
        d, u = report["documents"], report["units"]
        echo(f"{d['in']:,} documents: removed {u['removed']:,} of {u['total']:,} "
             f"{u['unit']}s ({100 * u['removed_share']:.2f}%) in "
             f"{report['spans']['count']:,} spans; dropped {d['dropped']:,}")
        echo(f"report: {os.path.join(os.path.abspath(output), 'report.html')}")


@click.command(context_settings=CONTEXT)
@click.argument("inputs", nargs=-1, required=True)
@click.option("--output", "-o", required=True,
              help="Output directory: clusters.parquet, pairs.parquet, data/, report.json and "
                   "report.html, as for run.")
@click.option("--threshold", "-t", type=float, default=None,
              help="Cosine at or above which two documents are duplicates [default: 0.95].")
@click.option("--search", default="auto", show_default=True,
              help="exact: compare every pair; kmeans: within k-means clusters and the --probe "
                   "nearest other clusters; auto: exact while it fits a time bound.")
@click.option("--probe", type=int, default=2, show_default=True,
              help="With kmeans: the nearest other clusters each document is also compared in.")
@click.option("--clusters", "n_clusters", type=int, default=None,
              help="With kmeans: how many clusters (default: the square root of the documents).")
@click.option("--keep", default="first", show_default=True,
              help="Keep priority: first (input order) or longest.")
@click.option("--model", default=None, metavar="PATH",
              help="A local model2vec folder, or a local sentence-transformers model of a "
                   "BERT-family encoder (run without torch, on the GPU with --device gpu); "
                   "default: the static embeddings bundled with the wordllama package. Models "
                   "are never downloaded.")
@click.option("--embedding-field", default=None, metavar="NAME",
              help="Read each record's embedding (a list of numbers) from this field of the "
                   "JSONL, Parquet or Arrow inputs instead of embedding the texts.")
@work_options
@exec_options
def semantic(inputs, output, threshold, search, probe, n_clusters, keep, model, embedding_field,
             work_dir, keep_work_dir, overwrite, text_field, id_field, on_bad_record, device,
             memory_limit, scheduler, workers, quiet, as_json):
    """Semantic deduplication: remove the documents of INPUTS whose embedding's
    cosine to a kept document reaches --threshold (SemDeDup's rule, greedy:
    each removed document names the kept one it duplicates)."""
    from .semantic.api import run as run_semantic
    if quiet:
        quiet_logs()
    from .semantic.api import DEFAULT_THRESHOLD
    threshold = DEFAULT_THRESHOLD if threshold is None else threshold
    report = run_semantic(inputs, output, threshold=threshold, search=search, probe=probe,
                          n_clusters=n_clusters, keep=keep, model=model,
                          embedding_field=embedding_field, overwrite=overwrite,
                          work_dir=work_dir, keep_work_dir=keep_work_dir,
                          **exec_kw(text_field, id_field, on_bad_record, device, memory_limit,
                                     scheduler, workers))
    if as_json:
        echo(as_json_text({k: report[k] for k in ("documents", "threshold", "model", "search")}))
    elif not quiet:
        d = report["documents"]
        echo(f"{d['in']:,} documents: kept {d['kept']:,}, removed {d['removed']:,} at cosine "
             f">= {report['threshold']:g} ({report['search']['mode']} search)")
        echo(f"report: {os.path.join(os.path.abspath(output), 'report.html')}")
