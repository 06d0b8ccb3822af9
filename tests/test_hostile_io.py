"""Hostile inputs at the reading edge: each one either runs cleanly or is
refused with one line (exit 2) before anything is read or written, and no
message carries a secret or an unprintable file name."""
from __future__ import annotations

import os

from hostile import guarded, run_cli, assert_clean_outcome

from gpu_dedup.io import fs

SECRET = "SECRETVALUE"
KEY = "AKIAXXXX"


# -- credentials in URLs ----------------------------------------------------

def test_redact_masks_the_user_info_of_any_url():
    text = "error: s3://AKIAXXXX:SECRETVALUE@bucket/x/: got a URI: 'AKIAXXXX:SECRETVALUE@bucket/x'"
    out = fs.redact(text)
    assert SECRET not in out and KEY not in out, out
    assert "s3://***@bucket/x/" in out
    assert fs.redact("see https://tok123@github.com/a/b now") == "see https://***@github.com/a/b now"
    assert fs.redact("gs://bucket/a/b.jsonl: fine") == "gs://bucket/a/b.jsonl: fine"
    # a secret holding a slash is still masked up to the '@'
    out = fs.redact("s3://AKIAXXXX:SECRET/VALUE@bucket/x")
    assert "SECRET" not in out and "VALUE@" not in out, out


def test_public_url_hides_the_credentials():
    assert fs.public_url("s3://AKIAXXXX:SECRETVALUE@bucket/x/") == "s3://***@bucket/x/"
    assert fs.public_url("s3://bucket/x/") == "s3://bucket/x/"


def test_credentials_in_an_input_url_never_reach_the_output(tmp_path):
    for url in (f"s3://{KEY}:{SECRET}@bucket/x/", f"s3://{KEY}:{SECRET}@bucket/x/a.jsonl"):
        p = run_cli("run", url, "-o", tmp_path / "out", cwd=tmp_path, timeout=120,
                    env={"AWS_ENDPOINT_URL": "http://127.0.0.1:9"})
        assert_clean_outcome(p, expect=2)
        assert SECRET not in p.stdout + p.stderr, p.stderr
        assert f"{KEY}:" not in p.stdout + p.stderr, p.stderr
