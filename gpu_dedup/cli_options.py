"""Options and small helpers shared by the commands that run the engine over
inputs (``run``, ``index``, ``substr``, ``semantic``).
"""
from __future__ import annotations

import json
import logging

import click

from .edge import clean_tree

#: Click settings of every command.
CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


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


storage_option = click.option(
    "--storage-options", metavar="JSON", default=None, expose_value=False, is_eager=True,
    callback=_storage_callback,
    help="Options of the s3:// (gs://, az://) filesystem as a JSON object, e.g. "
         "'{\"endpoint_override\": \"host:9000\", \"scheme\": \"http\"}' (pyarrow's "
         "S3FileSystem arguments); by default credentials and endpoints come from the usual "
         "places (AWS_* variables, ~/.aws). Never printed or saved.")


def quiet_logs():
    """Log errors only (``--quiet``)."""
    logging.getLogger("gpu_dedup").setLevel(logging.ERROR)


def exec_options(f):
    """Options of a command that runs the engine over inputs."""
    opts = [
        storage_option,
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


def work_options(f):
    """``--work-dir``, ``--keep-work-dir`` and ``--overwrite``."""
    for o in reversed([
            click.option("--work-dir", default=None, metavar="PATH",
                         help="Where an out-of-core run keeps its stage outputs (default: "
                              "beside --output); rerunning after a crash resumes from what "
                              "was completed."),
            click.option("--keep-work-dir", is_flag=True,
                         help="Keep the work directory after a successful run."),
            click.option("--overwrite", is_flag=True,
                         help="Replace a non-empty output directory.")]):
        f = o(f)
    return f


def exec_kw(text_field, id_field, on_bad_record, device, memory_limit, scheduler, workers):
    """The keyword arguments of a command's library call from :func:`exec_options`."""
    return {"text_field": text_field,
            "id_field": None if id_field.lower() == "none" else id_field,
            "on_bad_record": on_bad_record, "device": device, "memory_limit": memory_limit,
            "scheduler": scheduler, "workers": workers}


def as_json_text(obj) -> str:
    """``--json`` output: credentials masked, names printable."""
    return json.dumps(clean_tree(obj))
