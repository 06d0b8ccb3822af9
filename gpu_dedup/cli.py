"""The ``gpu-dedup`` command line: a thin layer over the library.

Owns the commands and their options, the warnings about options that another
option overrides, and the mapping of library errors to exit statuses: a
library error becomes one line on stderr and exit status 2 here, and only
here; ``--debug`` prints the traceback before that line, with the same status.
"""
from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import traceback

import click
from click.core import ParameterSource

from . import __version__
from .errors import DedupError

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class _Group(click.Group):
    """The top-level group: turns a :class:`DedupError` into exit status 2."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except DedupError as exc:
            if ctx.params.get("debug") or os.environ.get("GPU_DEDUP_DEBUG"):
                click.echo(traceback.format_exc(), err=True, nl=False)
            click.echo(f"error: {exc}", err=True)
            ctx.exit(2)


@click.group(cls=_Group, context_settings=CONTEXT)
@click.version_option(__version__, prog_name="gpu-dedup", help="Show the version and exit.")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.option("--log-level", default="warning", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]),
              help="How much to log on stderr.")
def main(debug, log_level):
    """Near-duplicate detection for text corpora: MinHash signatures, LSH
    banding, verified candidates and a greedy selection in which every removed
    document names the kept one it duplicates (or connected components), on
    the CPU or a GPU.

    Start with `gpu-dedup demo`; deduplicate your shards with
    `gpu-dedup run INPUT... -o DIR`."""
    logging.basicConfig(level=getattr(logging, log_level.upper()),
                        format="%(levelname)s: %(message)s")


#: Options that map to Config fields: (click name, Config field, converter).
_CONFIG_FIELDS = [("shingle", "shingle", str), ("ngram", "ngram", int),
                  ("normalize", "normalize", str), ("num_perm", "num_perm", int),
                  ("bands", "bands", int), ("rows", "rows", int),
                  ("threshold", "threshold", float), ("seed", "seed", int),
                  ("signature_bits", "signature_bits", int), ("sketch", "sketch", str),
                  ("similarity", "similarity", str), ("verify", "verify", bool),
                  ("exact", "exact", bool), ("keep", "keep", str),
                  ("cluster", "cluster", str), ("bucket_limit", "bucket_limit", int)]


def _storage_callback(ctx, param, value):
    if value is None:
        return
    try:
        opts = json.loads(value)
    except ValueError:
        raise click.BadParameter("not valid JSON (the value is not shown: it may hold "
                                 "credentials)") from None
    if not isinstance(opts, dict):
        raise click.BadParameter("must be a JSON object of filesystem options")
    from .io.fs import set_storage_options
    set_storage_options(opts)


_storage_option = click.option(
    "--storage-options", metavar="JSON", default=None, expose_value=False, is_eager=True,
    callback=_storage_callback,
    help="Options of the s3:// (gs://, az://) filesystem as a JSON object, e.g. "
         "'{\"endpoint_override\": \"host:9000\", \"scheme\": \"http\"}' (pyarrow's "
         "S3FileSystem arguments); by default credentials and endpoints come from the usual "
         "places (AWS_* variables, ~/.aws). Never printed or saved.")


def _config_options(f):
    opts = [
        click.option("--config", "config_spec", default=None, metavar="NAME|PATH",
                     help="A preset (default, cookbook, fineweb, nemo, slimpajama) or a TOML "
                          "file. The options below override it only when given; the defaults "
                          "shown apply without --config. See `gpu-dedup config list` and "
                          "`gpu-dedup config show --config NAME`."),
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
                     help="Similarity at which two documents are duplicates: verified "
                          "candidate edges are accepted from it up, and it chooses the LSH "
                          "split unless --bands/--rows or the --config preset fix one."),
        click.option("--seed", type=int, default=42, show_default=True,
                     help="Seed of the hash functions."),
        click.option("--signature-bits", type=click.Choice(["32", "64"]), default="32",
                     show_default=True, help="Width of signature values."),
        click.option("--sketch", type=click.Choice(["minhash", "oph"]), default="minhash",
                     show_default=True,
                     help="Signatures: minhash (K hash functions) or oph (one permutation "
                          "into K bins, densified: one hash per shingle, several times "
                          "faster; see README)."),
        click.option("--similarity", type=click.Choice(["jaccard", "signature"]),
                     default="jaccard", show_default=True,
                     help="How candidates are verified: exact Jaccard of the shingle sets, "
                          "or the signature estimate."),
        click.option("--verify/--no-verify", default=True, show_default=True,
                     help="Verify candidate edges against --threshold."),
        click.option("--exact/--no-exact", default=True, show_default=True,
                     help="Cluster identical normalized texts before the fuzzy stages."),
        click.option("--keep", type=click.Choice(["first", "longest"]), default="first",
                     show_default=True,
                     help="Keep priority: the first document in input order, or the longest "
                          "(then the first)."),
        click.option("--cluster", type=click.Choice(["greedy", "components"]),
                     default="greedy", show_default=True,
                     help="greedy: in keep priority, a document is removed exactly when it is "
                          "verified similar to one already kept, which it names "
                          "(duplicate_of). components: one document kept per connected "
                          "component of verified pairs (transitive; chains can join "
                          "dissimilar documents)."),
        click.option("--bucket-limit", type=int, default=32, show_default=True,
                     help="Greedy: kept documents of one bucket each document is compared "
                          "with; comparisons beyond it are skipped and counted in "
                          "report.json."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def _given(ctx: click.Context, name: str) -> bool:
    src = ctx.get_parameter_source(name)
    return src not in (None, ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)


def _resolve_config(ctx: click.Context, kw: dict, warn: bool = True):
    """The preset named by --config (or the built-in defaults) with the
    options the user actually gave applied on top; with ``warn``, says on
    stderr when ``--threshold`` meets a fixed LSH split."""
    from .presets import resolve
    spec = kw.get("config_spec")
    values, overrides = {}, {}
    for opt, fld, conv in _CONFIG_FIELDS:
        if opt in kw:
            v = kw[opt]
            values[fld] = v if v is None else conv(v)
            if _given(ctx, opt):
                overrides[fld] = values[fld]
    if not spec:
        # no preset: the options' own defaults are the base
        res = resolve(None, overrides, base=values)
    else:
        res = resolve(spec, overrides)
    warning = threshold_warning(res) if warn else None
    if warning:
        click.echo(warning, err=True)
    return res


def threshold_warning(res) -> str | None:
    """One line saying what ``--threshold`` still decides when the LSH split
    is fixed by ``--bands/--rows`` or by the preset, or None.

    Args:
        res: a :class:`gpu_dedup.presets.Resolved` configuration.

    Returns:
        The warning, or None when ``--threshold`` was not given or the split
        is chosen from it.
    """
    c = res.config
    if "threshold" not in res.overrides or c.bands is None:
        return None
    if "bands" in res.overrides or "rows" in res.overrides:
        where = "given on the command line"
    else:
        where = f"from --config {res.preset}"
    t = f"{float(c.threshold):g}"
    if c.verify:
        score = "Jaccard" if c.similarity == "jaccard" else "signature estimate"
        rest = (f"the threshold still decides which candidate edges are accepted "
                f"(verified {score} >= {t})")
    else:
        rest = "with --no-verify every candidate is accepted, so the threshold has no effect"
    return (f"warning: --threshold {t} does not choose the LSH split: --bands {c.bands} "
            f"--rows {c.rows} ({where}) fix it; {rest}")


def _check_gpu_memory(ctx, param, value):
    """Reject a bad ``--gpu-memory`` at once, whatever the device (the value
    passes on unchanged)."""
    from .memory import parse_memory
    parse_memory(value)          # ConfigError naming --gpu-memory: one line, exit 2
    return value


def _index_config(index: str, res):
    """The index's configuration with the options given on the command line
    on top (those that define similarity must agree with it)."""
    from .index import Index
    from .index.remote import local_index
    with local_index(index, meta_only=True) as local:
        idx = Index(local)
        cfg = idx.config(**res.overrides)
        idx.check(cfg)
    return cfg


def _quiet_logs():
    logging.getLogger("gpu_dedup").setLevel(logging.ERROR)


@main.command(context_settings=CONTEXT)
@click.argument("inputs", nargs=-1, required=True)
@click.option("--output", "-o", required=True,
              help="Output directory: clusters.parquet, pairs.parquet, report.json, "
                   "report.html and data/.")
@click.option("--text-field", default="text", show_default=True, help="Field holding the text.")
@click.option("--id-field", default="id", show_default=True,
              help="Field holding a unique id ('none' to generate FILE:LINE ids).")
@_config_options
@click.option("--on-bad-record", type=click.Choice(["error", "skip"]), default="error",
              show_default=True,
              help="A malformed record (bad JSON, no text, text not a string): stop with an "
                   "error naming its file and line, or skip it, count it and list it in "
                   "report.json.")
@click.option("--device", type=click.Choice(["cpu", "gpu", "auto"]), default="cpu",
              show_default=True, help="Where to run: cpu, gpu, or auto (a GPU if usable).")
@click.option("--gpu-memory", default=None, callback=_check_gpu_memory,
              help="Device memory the GPU backend may use, e.g. 8GiB (default: a safe "
                   "share of the free memory).")
@click.option("--memory-limit", default=None, metavar="SIZE",
              help="Memory budget, e.g. 4GiB, 512MiB, 8GB (default: a safe share of RAM). "
                   "A corpus that may not fit runs out of core: shards streamed, "
                   "signatures and band keys in the work directory, bands in groups.")
@click.option("--scheduler", default="none", show_default=True, metavar="SPEC",
              help="none (in process), threads, processes (a local Dask cluster of "
                   "--workers processes; Dask-CUDA with --device gpu) or the tcp://HOST:PORT "
                   "of a running Dask scheduler.")
@click.option("--workers", type=int, default=None,
              help="Threads or worker processes for --scheduler threads|processes.")
@click.option("--work-dir", default=None, metavar="PATH",
              help="Where a bounded-memory run keeps its stage outputs (default: beside "
                   "--output); rerunning after a crash resumes from what was completed.")
@click.option("--keep-work-dir", is_flag=True,
              help="Keep the work directory after a successful run.")
@click.option("--overwrite", is_flag=True, help="Replace a non-empty output directory.")
@click.option("--html/--no-html", default=True, show_default=True,
              help="Also write report.html.")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing on success (no progress).")
@click.option("--json", "as_json", is_flag=True,
              help="Print the report summary as JSON on stdout.")
@click.option("--against", multiple=True, metavar="DIR",
              help="An index (`gpu-dedup index build`) to deduplicate against, as if its "
                   "documents came first in the same run; repeat for several. The options "
                   "that define similarity are the index's (giving a different one is "
                   "refused).")
@_storage_option
@click.pass_context
def run(ctx, inputs, output, text_field, id_field, on_bad_record, device, gpu_memory,
        memory_limit, scheduler, workers, work_dir, keep_work_dir,
        overwrite, html, quiet, as_json, against, **kw):
    """Deduplicate INPUTS into OUTPUT.

    INPUTS are files, directories and glob patterns: JSONL (.jsonl, .jsonl.gz,
    .jsonl.zst), Parquet (files, or directories of shards such as a Hugging Face
    export) and plain text (a directory of .txt files, one document each, the
    relative path as id). OUTPUT gets clusters.parquet, pairs.parquet,
    report.json, report.html and data/ (the kept records, one shard per input
    shard, in the input's format)."""
    from . import progress
    from .pipeline import run as run_pipeline, summary_line
    res = _resolve_config(ctx, kw, warn=not quiet)
    config = _index_config(against[0], res) if against else res.config
    if quiet:
        _quiet_logs()
    prog = progress.StageProgress() if progress.wanted(quiet) else None
    try:
        if prog is not None:
            prog.__enter__()
        report = run_pipeline(inputs, output, config, device=device, text_field=text_field,
                              id_field=None if id_field.lower() == "none" else id_field,
                              overwrite=overwrite, gpu_memory=gpu_memory,
                              on_stage=prog.stage if prog else None,
                              on_progress=prog.fraction if prog else None,
                              on_bytes=prog.read_bytes if prog else None,
                              on_bad_record=on_bad_record, html=html,
                              memory_limit=memory_limit, scheduler=scheduler, workers=workers,
                              work_dir=work_dir, keep_work_dir=keep_work_dir,
                              against=list(against) or None)
    finally:
        if prog is not None:
            prog.close()
    if device == "auto" and not quiet:
        click.echo(report["device"] if report["device"].startswith("auto") else
                   f"device: {report['device']}", err=True)
    if as_json:
        click.echo(json.dumps({k: report[k] for k in ("documents", "clusters", "edges",
                                                       "selection", "bad_records", "seconds",
                                                       "device")}))
    elif not quiet:
        click.echo(summary_line(report))
        name = "report.html" if html else "report.json"
        click.echo(f"report: {os.path.join(os.path.abspath(output), name)}")


@main.command(context_settings=CONTEXT)
@click.option("--threshold", "-t", type=float, default=0.8, show_default=True,
              help="Similarity at which two documents are duplicates.")
@click.option("--num-perm", "-k", type=int, default=128, show_default=True,
              help="Hash budget K (number of MinHash hash functions).")
@click.option("--fp-weight", type=float, default=None,
              help="Weight of the false-positive area in the choice (default: the engine's, "
                   "0.01).")
@click.option("--fn-weight", type=float, default=None,
              help="Weight of the false-negative area in the choice (default: the engine's, "
                   "0.99).")
@click.option("--plot", default=None, metavar="FILE.png",
              help="Also draw the S-curves, the threshold marked, into this PNG.")
@click.option("--json", "as_json", is_flag=True, help="Print the table as JSON.")
def tune(threshold, num_perm, fp_weight, fn_weight, plot, as_json):
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
        plot_table(t, plot)
    if as_json:
        d = to_dict(t)
        if plot:
            d["plot"] = os.path.abspath(plot)
        click.echo(json.dumps(d, indent=2))
        return
    click.echo(format_table(t))
    if plot:
        click.echo(f"plot: {os.path.abspath(plot)}")


@main.group(context_settings=CONTEXT)
def config():
    """Presets and the resolved configuration."""


@config.command("show", context_settings=CONTEXT)
@_config_options
@click.pass_context
def config_show(ctx, **kw):
    """Print the configuration a run would use, as TOML that --config reads
    back: the preset (if any) with the options given applied, bands and rows
    resolved, and the S-curve."""
    from .presets import to_toml
    click.echo(to_toml(_resolve_config(ctx, kw)), nl=False)


@config.command("list", context_settings=CONTEXT)
def config_list():
    """List the shipped presets and the file each comes from."""
    from .presets import preset_names, preset_path, resolve
    for name in preset_names():
        c = resolve(name).config.resolved()
        click.echo(f"{name:<12} {c.name:<42} {preset_path(name)}")


_DEMO_MARK = ".gpu-dedup-demo"


@main.command(context_settings=CONTEXT)
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
    from .pipeline import run as run_pipeline, summary_line
    if docs < 1:
        raise DedupError(f"--docs must be at least 1, got {docs}")
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
    click.echo(f"output: {out}")
    click.echo(f"report: {os.path.join(out, 'report.html')}")


def _warm_defaults(texts, device) -> None:
    """Run the default options once on a few documents, so that the kernels a
    first plain `gpu-dedup run` needs are already in Numba's on-disk cache."""
    from .config import Config
    from .pipeline import run as run_pipeline
    with tempfile.TemporaryDirectory(prefix="gpu-dedup-warm-") as d:
        src = os.path.join(d, "sample.jsonl")
        with open(src, "w") as f:
            for t in texts:
                f.write(json.dumps({"text": t.upper() + "  "}) + "\n")
        run_pipeline([src], os.path.join(d, "out"), Config(), device=device, html=False)


def _exec_options(f):
    """Options of a command that runs the engine over inputs."""
    opts = [
        _storage_option,
        click.option("--text-field", default="text", show_default=True,
                     help="Field holding the text."),
        click.option("--id-field", default="id", show_default=True,
                     help="Field holding a unique id ('none' to generate FILE:LINE ids)."),
        click.option("--on-bad-record", type=click.Choice(["error", "skip"]), default="error",
                     show_default=True, help="Stop at a malformed record, or skip and count it."),
        click.option("--device", type=click.Choice(["cpu", "gpu", "auto"]), default="cpu",
                     show_default=True, help="Where to run: cpu, gpu, or auto."),
        click.option("--memory-limit", default=None, metavar="SIZE",
                     help="Memory budget, e.g. 4GiB (default: a safe share of RAM)."),
        click.option("--scheduler", default="none", show_default=True, metavar="SPEC",
                     help="none, threads, processes or tcp://HOST:PORT (as for run)."),
        click.option("--workers", type=int, default=None, help="Threads or worker processes."),
        click.option("--quiet", "-q", is_flag=True, help="Print nothing on success."),
        click.option("--json", "as_json", is_flag=True, help="Print the result as JSON."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def _exec_kw(text_field, id_field, on_bad_record, device, memory_limit, scheduler, workers):
    return {"text_field": text_field,
            "id_field": None if id_field.lower() == "none" else id_field,
            "on_bad_record": on_bad_record, "device": device, "memory_limit": memory_limit,
            "scheduler": scheduler, "workers": workers}


@main.group(context_settings=CONTEXT)
def index():
    """A persistent index of kept documents, to deduplicate new data against
    (`run --against`) and to check evaluation sets for contamination
    (`overlap`)."""


@index.command("build", context_settings=CONTEXT)
@click.argument("inputs", nargs=-1, required=True)
@click.option("--index", "index_dir", required=True, metavar="DIR",
              help="The new index folder (must not exist, or be empty).")
@_config_options
@_exec_options
@click.pass_context
def index_build(ctx, inputs, index_dir, text_field, id_field, on_bad_record, device,
                memory_limit, scheduler, workers, quiet, as_json, **kw):
    """Deduplicate INPUTS and keep what they keep in a new index at DIR."""
    from . import index as ix
    res = _resolve_config(ctx, kw, warn=not quiet)
    if quiet:
        _quiet_logs()
    report = ix.build(inputs, index_dir, res.config,
                      **_exec_kw(text_field, id_field, on_bad_record, device, memory_limit,
                                 scheduler, workers))
    _index_done(report, "built", report["documents"]["kept"], quiet, as_json)


@index.command("add", context_settings=CONTEXT)
@click.argument("inputs", nargs=-1, required=True)
@click.option("--index", "index_dir", required=True, metavar="DIR", help="The index folder.")
@_exec_options
def index_add(inputs, index_dir, text_field, id_field, on_bad_record, device, memory_limit,
              scheduler, workers, quiet, as_json):
    """Append the documents of INPUTS that are not duplicates of the index or
    of each other, with the index's options. Atomic; adding the same input
    twice adds nothing."""
    from . import index as ix
    if quiet:
        _quiet_logs()
    report = ix.add(inputs, index_dir, **_exec_kw(text_field, id_field, on_bad_record, device,
                                                  memory_limit, scheduler, workers))
    _index_done(report, "added", report["added"], quiet, as_json)


def _index_done(report: dict, verb: str, n: int, quiet: bool, as_json: bool) -> None:
    info = report["index"]
    if as_json:
        click.echo(json.dumps({"documents": report["documents"], verb: n, "index": info}))
    elif not quiet:
        d = report["documents"]
        click.echo(f"{d['in']:,} documents read, {n:,} {verb}; the index {info['index']} "
                   f"holds {info['docs']:,} in {len(info['parts'])} part(s)")


@index.command("info", context_settings=CONTEXT)
@click.option("--index", "index_dir", required=True, metavar="DIR", help="The index folder.")
@click.option("--json", "as_json", is_flag=True, help="Print it as JSON.")
def index_info(index_dir, as_json):
    """What an index holds: documents, parts and the options it was built with."""
    from . import index as ix
    info = ix.info(index_dir)
    if as_json:
        click.echo(json.dumps(info))
        return
    click.echo(f"{info['index']}: {info['docs']:,} documents in {len(info['parts'])} part(s)")
    click.echo("options: " + ", ".join(f"{k}={v}" for k, v in info["options"].items()))
    for p in info["parts"]:
        click.echo(f"  {p['name']}: {p['docs']:,} documents from ordinal {p['first']:,}, "
                   f"{p['windows']:,} windows; " + ", ".join(p["inputs"]))


@main.command(context_settings=CONTEXT)
@click.argument("inputs", nargs=-1, required=True)
@click.option("--against", "index_dir", required=True, metavar="DIR",
              help="The index of the training corpus.")
@click.option("--output", "-o", required=True,
              help="Output directory: overlap.parquet, report.json and report.html.")
@click.option("--threshold", "-t", type=float, default=None,
              help="Similarity (Jaccard, or containment in a longer document) at which an "
                   "item is flagged (default: the index's threshold).")
@click.option("--text-field", default="text", show_default=True, help="Field holding the text.")
@click.option("--id-field", default="id", show_default=True,
              help="Field holding a unique id ('none' to generate FILE:LINE ids).")
@click.option("--overwrite", is_flag=True, help="Replace a non-empty output directory.")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing on success.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def overlap(inputs, index_dir, output, threshold, text_field, id_field, overwrite, quiet,
            as_json):
    """Contamination report: each document of INPUTS (an evaluation set)
    against the indexed training corpus: its best match and their verified
    similarity, flagged as a near-duplicate or as contained in a longer
    training document (a passage cut from it)."""
    from .index.overlap import overlap as run_overlap
    report = run_overlap(inputs, index_dir, output, threshold=threshold,
                         text_field=text_field,
                         id_field=None if id_field.lower() == "none" else id_field,
                         overwrite=overwrite)
    s = report["summary"]
    if as_json:
        click.echo(json.dumps(s))
    elif not quiet:
        click.echo(f"{s['items']:,} items: {s['flagged']:,} flagged ({s['near_duplicate']:,} "
                   f"near-duplicate, {s['contained']:,} contained) at {s['threshold']:g}")
        click.echo(f"report: {os.path.join(os.path.abspath(output), 'report.html')}")


@main.command(context_settings=CONTEXT)
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
@click.option("--work-dir", default=None, metavar="PATH",
              help="Where an out-of-core run keeps its stage outputs (default: beside "
                   "--output); rerunning after a crash resumes from what was completed.")
@click.option("--keep-work-dir", is_flag=True,
              help="Keep the work directory after a successful run.")
@click.option("--overwrite", is_flag=True, help="Replace a non-empty output directory.")
@_exec_options
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
        _quiet_logs()
    report = run_substr(inputs, output, unit=unit, min_length=min_length, keep=keep,
                        min_doc_length=min_doc_length, normalize=parse_normalize(normalize),
                        overwrite=overwrite, work_dir=work_dir, keep_work_dir=keep_work_dir,
                        **_exec_kw(text_field, id_field, on_bad_record, device, memory_limit,
                                   scheduler, workers))
    if as_json:
        click.echo(json.dumps({k: report[k] for k in ("documents", "units", "bytes", "spans")}))
    elif not quiet:
        d, u = report["documents"], report["units"]
        click.echo(f"{d['in']:,} documents: removed {u['removed']:,} of {u['total']:,} "
                   f"{u['unit']}s ({100 * u['removed_share']:.2f}%) in "
                   f"{report['spans']['count']:,} spans; dropped {d['dropped']:,}")
        click.echo(f"report: {os.path.join(os.path.abspath(output), 'report.html')}")


@main.command(context_settings=CONTEXT)
def doctor():
    """Report what the GPU backend finds, then run the GPU and CPU kernels on a
    small generated corpus and compare every output bit for bit. Exits 0 only
    when they are identical."""
    from .doctor import main as doctor_main
    sys.exit(doctor_main(click.echo))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
