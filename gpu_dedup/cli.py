"""The ``gpu-dedup`` command line: a thin layer over the library.

Owns the commands and their options, the warnings about options that another
option overrides, and the mapping of errors to exit statuses: a library
error, a usage error and an error of the user's environment (a full disk, a
denied permission, a closed pipe: :mod:`gpu_dedup.edge`) each become one line
on stderr and exit status 2 here, and only here; ``--debug`` prints the
traceback before that line, with the same status. A bug keeps its traceback.
Everything printed, logged or saved in a report goes through
:func:`gpu_dedup.edge.clean`: no credential, and names that are not valid
UTF-8 escaped.
"""
from __future__ import annotations

import logging
import os
import sys
import traceback

import click
from click.core import ParameterSource

from .version import __version__
from .cli_corpus import semantic, substr
from .cli_options import (CONTEXT, as_json_text, exec_kw, exec_options, quiet_logs,
                          storage_option, work_options)
from .cli_tools import check_num_perm_option, demo, doctor, tune
from .edge import (echo, environment_message, install_log_filter,
                   is_environment_error, one_line, quiet_stdout, remember_secrets,
                   usage_message)
from .errors import DedupError



def _fail(message: str, debug: bool = False, code: int = 2):
    """The one ``error:`` line (after the traceback with ``debug``), then exit."""
    if debug:
        try:
            echo(traceback.format_exc(), err=True, nl=False)
        except OSError:
            pass
    try:
        echo(f"error: {one_line(message)}", err=True)
    except OSError:                  # stderr gone too: the status still says it
        pass
    sys.exit(code)


def _fail_environment(exc: OSError, debug: bool):
    """:func:`_fail` for an environment error (stdout silenced on a closed pipe), else raise."""
    if not is_environment_error(exc):
        raise exc
    if isinstance(exc, BrokenPipeError):
        quiet_stdout()
    _fail(environment_message(exc), debug)


class _Group(click.Group):
    """The top-level group: the one place errors become a line and a status."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True,
             **extra):
        args = list(sys.argv[1:] if args is None else args)
        remember_secrets(args)
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False,
                                **extra)
        debug = "--debug" in args[:args.index("--")] if "--" in args else "--debug" in args
        debug = debug or bool(os.environ.get("GPU_DEDUP_DEBUG"))
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
            sys.stdout.flush()
        except click.ClickException as exc:
            _fail(usage_message(exc), debug)
        except click.exceptions.Abort:
            _fail("interrupted", debug, code=130)
        except OSError as exc:      # a write to stdout that failed after the command (the flush)
            _fail_environment(exc, debug)
        sys.exit(rv if isinstance(rv, int) else 0)

    def invoke(self, ctx):
        debug = bool(ctx.params.get("debug") or os.environ.get("GPU_DEDUP_DEBUG"))
        try:
            return super().invoke(ctx)
        except DedupError as exc:
            _fail(str(exc), debug)
        except OSError as exc:
            _fail_environment(exc, debug)


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
    install_log_filter()


#: Options that map to Config fields: (click name, Config field, converter).
_CONFIG_FIELDS = [("shingle", "shingle", str), ("ngram", "ngram", int),
                  ("normalize", "normalize", str), ("num_perm", "num_perm", int),
                  ("bands", "bands", int), ("rows", "rows", int),
                  ("threshold", "threshold", float), ("seed", "seed", int),
                  ("signature_bits", "signature_bits", int), ("sketch", "sketch", str),
                  ("similarity", "similarity", str), ("verify", "verify", bool),
                  ("exact", "exact", bool), ("keep", "keep", str),
                  ("cluster", "cluster", str), ("bucket_limit", "bucket_limit", int)]


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
                     callback=check_num_perm_option,
                     help="Number of MinHash hash functions K (at most 131,072)."),
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
        click.option("--sketch", type=click.Choice(["oph", "minhash"]), default="oph",
                     show_default=True,
                     help="Signatures: oph (one permutation into K bins, densified: one "
                          "hash per shingle) or minhash (K hash functions, several times "
                          "slower, as accurate; see README)."),
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
        echo(warning, err=True)
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
@work_options
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
@storage_option
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
    from .pipeline import summary_line
    res = _resolve_config(ctx, kw, warn=not quiet)
    if against:                 # the index package runs the pipeline against its documents
        from .index.against import query_config, run_against as run_pipeline
        config, extra = query_config(against[0], **res.overrides), {"against": list(against)}
    else:
        from .pipeline import run as run_pipeline
        config, extra = res.config, {}
    if quiet:
        quiet_logs()
    notice = None if quiet else progress.compile_notice
    prog = progress.StageProgress() if progress.wanted(quiet) else None
    on_stage = progress.noticing(notice, lambda line: echo(line, err=True),
                                 prog.stage if prog else None)
    try:
        if prog is not None:
            prog.__enter__()
        report = run_pipeline(inputs, output, config, device=device, text_field=text_field,
                              id_field=None if id_field.lower() == "none" else id_field,
                              overwrite=overwrite, gpu_memory=gpu_memory,
                              on_stage=on_stage,
                              on_progress=prog.fraction if prog else None,
                              on_bytes=prog.read_bytes if prog else None,
                              on_bad_record=on_bad_record, html=html,
                              memory_limit=memory_limit, scheduler=scheduler, workers=workers,
                              work_dir=work_dir, keep_work_dir=keep_work_dir, **extra)
    finally:
        if prog is not None:
            prog.close()
    if device == "auto" and not quiet:
        echo(report["device"] if report["device"].startswith("auto") else
             f"device: {report['device']}", err=True)
    if as_json:
        echo(as_json_text({k: report[k] for k in ("documents", "clusters", "edges", "selection",
                                           "bad_records", "seconds", "device")}))
    elif not quiet:
        echo(summary_line(report))
        name = "report.html" if html else "report.json"
        echo(f"report: {os.path.join(os.path.abspath(output), name)}")


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
    echo(to_toml(_resolve_config(ctx, kw)), nl=False)


@config.command("list", context_settings=CONTEXT)
def config_list():
    """List the shipped presets and the file each comes from."""
    from .presets import preset_names, preset_path, resolve
    for name in preset_names():
        c = resolve(name).config.resolved()
        echo(f"{name:<12} {c.name:<42} {preset_path(name)}")


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
@exec_options
@click.pass_context
def index_build(ctx, inputs, index_dir, text_field, id_field, on_bad_record, device,
                memory_limit, scheduler, workers, quiet, as_json, **kw):
    """Deduplicate INPUTS and keep what they keep in a new index at DIR."""
    from . import index as ix
    res = _resolve_config(ctx, kw, warn=not quiet)
    if quiet:
        quiet_logs()
    report = ix.build(inputs, index_dir, res.config,
                      **exec_kw(text_field, id_field, on_bad_record, device, memory_limit,
                                 scheduler, workers))
    _index_done(report, "built", report["documents"]["kept"], quiet, as_json)


@index.command("add", context_settings=CONTEXT)
@click.argument("inputs", nargs=-1, required=True)
@click.option("--index", "index_dir", required=True, metavar="DIR", help="The index folder.")
@exec_options
def index_add(inputs, index_dir, text_field, id_field, on_bad_record, device, memory_limit,
              scheduler, workers, quiet, as_json):
    """Append the documents of INPUTS that are not duplicates of the index or
    of each other, with the index's options. Atomic; adding the same input
    twice adds nothing."""
    from . import index as ix
    if quiet:
        quiet_logs()
    report = ix.add(inputs, index_dir, **exec_kw(text_field, id_field, on_bad_record, device,
                                                  memory_limit, scheduler, workers))
    _index_done(report, "added", report["added"], quiet, as_json)


def _index_done(report: dict, verb: str, n: int, quiet: bool, as_json: bool) -> None:
    info = report["index"]
    if as_json:
        echo(as_json_text({"documents": report["documents"], verb: n, "index": info}))
    elif not quiet:
        d = report["documents"]
        echo(f"{d['in']:,} documents read, {n:,} {verb}; the index {info['index']} "
             f"holds {info['docs']:,} in {len(info['parts'])} part(s)")


@index.command("info", context_settings=CONTEXT)
@click.option("--index", "index_dir", required=True, metavar="DIR", help="The index folder.")
@click.option("--json", "as_json", is_flag=True, help="Print it as JSON.")
def index_info(index_dir, as_json):
    """What an index holds: documents, parts and the options it was built with."""
    from . import index as ix
    info = ix.info(index_dir)
    if as_json:
        echo(as_json_text(info))
        return
    echo(f"{info['index']}: {info['docs']:,} documents in {len(info['parts'])} part(s)")
    echo("options: " + ", ".join(f"{k}={v}" for k, v in info["options"].items()))
    for p in info["parts"]:
        echo(f"  {p['name']}: {p['docs']:,} documents from ordinal {p['first']:,}, "
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
@click.option("--device", type=click.Choice(["cpu", "gpu", "auto"]), default="cpu",
              show_default=True, help="Where keys and similarities are computed (as for run).")
@click.option("--gpu-memory", default=None, callback=_check_gpu_memory,
              help="Device memory the GPU backend may use (as for run).")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing on success.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def overlap(inputs, index_dir, output, threshold, text_field, id_field, overwrite, device,
            gpu_memory, quiet, as_json):
    """Contamination report: each document of INPUTS (an evaluation set)
    against the indexed training corpus: its best match and their verified
    similarity, flagged as a near-duplicate or as contained in a longer
    training document (a passage cut from it)."""
    from .index.overlap import overlap as run_overlap
    report = run_overlap(inputs, index_dir, output, threshold=threshold,
                         text_field=text_field,
                         id_field=None if id_field.lower() == "none" else id_field,
                         overwrite=overwrite, device=device, gpu_memory=gpu_memory)
    s = report["summary"]
    if as_json:
        echo(as_json_text(s))
    elif not quiet:
        echo(f"{s['items']:,} items: {s['flagged']:,} flagged ({s['near_duplicate']:,} "
             f"near-duplicate, {s['contained']:,} contained) at {s['threshold']:g}")
        echo(f"report: {os.path.join(os.path.abspath(output), 'report.html')}")


for _command in (substr, semantic, tune, demo, doctor):
    main.add_command(_command)


def console() -> None:
    """The ``gpu-dedup`` program: :func:`main`, then :func:`quick_exit` with
    its status."""
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code
    quick_exit(code)


def quick_exit(code) -> None:
    """End the process with status ``code`` without tearing the interpreter
    down (freeing every module of NumPy, Arrow and the package: 30-40 ms of
    a run of 0.3 s), once that can lose nothing: standard output and error
    flushed, the at-exit handlers run (logging's flush, temporary folders'
    removal, a Dask cluster's shutdown), the package's idle reading and
    kernel threads ended, and no other thread left that a normal exit would
    wait for. Otherwise, or for a status that is not a number,
    the usual ``sys.exit``."""
    import atexit
    import threading
    code = 0 if code is None else code
    if not isinstance(code, int):
        sys.exit(code)
    from .io.jsonl_scan import stop_reader
    from .kernels.threads import stop_pool
    stop_reader()                        # the package's idle pools: as a normal exit does
    stop_pool()
    main_thread = threading.main_thread()
    if any(t is not main_thread and not t.daemon and t.is_alive()
           for t in threading.enumerate()):
        sys.exit(code)
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError, AttributeError):   # a closed pipe, or no such hook
        sys.exit(code)
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    console()
