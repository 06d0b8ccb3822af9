"""The loopback S3 server (tests/s3server.py) and pyarrow's S3 filesystem against it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid

import pytest
from pyarrow import fs

from s3server import s3  # noqa: F401  (session-scoped fixture)


@pytest.fixture
def bucket(s3):  # noqa: F811
    return s3.make_bucket("t-" + uuid.uuid4().hex[:16])


def _write(filesystem, path: str, data: bytes) -> None:
    with filesystem.open_output_stream(path) as out:
        out.write(data)


def test_server_is_loopback_and_env_is_complete(s3):  # noqa: F811
    assert s3.endpoint == f"http://127.0.0.1:{s3.port}"
    assert s3.region == "us-east-1"
    assert s3.env() == {
        "AWS_ENDPOINT_URL": s3.endpoint,
        "AWS_ACCESS_KEY_ID": s3.access_key,
        "AWS_SECRET_ACCESS_KEY": s3.secret_key,
        "AWS_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    # an unsigned request is refused with an S3 error document
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(s3.endpoint + "/", timeout=5)
    assert err.value.code == 403
    assert b"AccessDenied" in err.value.read()
    for proc in s3.procs:
        assert proc.poll() is None
    status = json.load(urllib.request.urlopen(
        f"http://127.0.0.1:{s3.master_port}/dir/status", timeout=5))
    assert status["Topology"]["DataCenters"]


def test_write_read_and_ranged_read(s3, bucket):  # noqa: F811
    s3fs = s3.filesystem()
    data = bytes(range(256)) * 40
    _write(s3fs, f"{bucket}/dir/blob.bin", data)
    assert s3fs.open_input_stream(f"{bucket}/dir/blob.bin").read() == data
    with s3fs.open_input_file(f"{bucket}/dir/blob.bin") as f:
        assert f.size() == len(data)
        assert f.read_at(10, 1000) == data[1000:1010]
        assert f.read_at(5, len(data) - 3) == data[-3:]  # clipped at the end
    info = s3fs.get_file_info(f"{bucket}/dir/blob.bin")
    assert info.type == fs.FileType.File and info.size == len(data)
    assert s3fs.get_file_info(bucket).type == fs.FileType.Directory


def test_scheme_given_separately(s3, bucket):  # noqa: F811
    s3fs = fs.S3FileSystem(endpoint_override=f"127.0.0.1:{s3.port}", scheme="http",
                           access_key=s3.access_key, secret_key=s3.secret_key,
                           region=s3.region)
    _write(s3fs, f"{bucket}/k", b"payload")
    assert s3.filesystem().open_input_stream(f"{bucket}/k").read() == b"payload"


def test_multipart_sized_object_roundtrips(s3, bucket):  # noqa: F811
    s3fs = s3.filesystem()
    data = bytes(range(251)) * (21 * 1024 * 1024 // 251)  # > 2 parts of 10 MiB
    _write(s3fs, f"{bucket}/big.bin", data)
    with s3fs.open_input_file(f"{bucket}/big.bin") as f:
        assert f.size() == len(data)
        off = 10 * 1024 * 1024 - 7  # across a part boundary
        assert f.read_at(1000, off) == data[off:off + 1000]


def test_recursive_listing_of_a_prefix(s3, bucket):  # noqa: F811
    s3fs = s3.filesystem()
    for key in ("a/1.txt", "a/b/2.txt", "a/b/c/3.txt", "other/4.txt"):
        _write(s3fs, f"{bucket}/{key}", key.encode())
    infos = s3fs.get_file_info(fs.FileSelector(f"{bucket}/a", recursive=True))
    files = sorted(i.path for i in infos if i.type == fs.FileType.File)
    dirs = sorted(i.path for i in infos if i.type == fs.FileType.Directory)
    assert files == [f"{bucket}/a/1.txt", f"{bucket}/a/b/2.txt", f"{bucket}/a/b/c/3.txt"]
    assert dirs == [f"{bucket}/a/b", f"{bucket}/a/b/c"]
    sizes = {i.path: i.size for i in infos if i.type == fs.FileType.File}
    assert sizes[f"{bucket}/a/b/2.txt"] == len(b"a/b/2.txt")
    flat = s3fs.get_file_info(fs.FileSelector(f"{bucket}/a", recursive=False))
    assert sorted(i.path for i in flat) == [f"{bucket}/a/1.txt", f"{bucket}/a/b"]
    # nothing under the prefix
    with pytest.raises(FileNotFoundError, match="Path does not exist"):
        s3fs.get_file_info(fs.FileSelector(f"{bucket}/nope", recursive=True))
    assert s3fs.get_file_info(
        fs.FileSelector(f"{bucket}/nope", recursive=True, allow_not_found=True)) == []


def test_missing_key_and_missing_bucket(s3, bucket):  # noqa: F811
    s3fs = s3.filesystem()
    missing_bucket = "no-such-" + uuid.uuid4().hex[:12]
    assert s3fs.get_file_info(f"{bucket}/missing").type == fs.FileType.NotFound
    assert s3fs.get_file_info(f"{missing_bucket}/key").type == fs.FileType.NotFound
    assert s3fs.get_file_info(missing_bucket).type == fs.FileType.NotFound
    with pytest.raises(FileNotFoundError, match="Path does not exist"):
        s3fs.open_input_file(f"{bucket}/missing")
    with pytest.raises(FileNotFoundError, match="Path does not exist"):
        s3fs.open_input_stream(f"{missing_bucket}/key")
    with pytest.raises(OSError, match="NO_SUCH_BUCKET"):
        s3fs.get_file_info(fs.FileSelector(f"{missing_bucket}/x", recursive=True))
    # writes do not create buckets (-s3.autoCreateBucket=false)
    with pytest.raises(OSError, match="NO_SUCH_BUCKET"):
        _write(s3fs, f"{missing_bucket}/key", b"x")
    assert s3fs.get_file_info(missing_bucket).type == fs.FileType.NotFound


def test_bucket_creation(s3):  # noqa: F811
    name = "t-" + uuid.uuid4().hex[:16]
    with pytest.raises(OSError, match="allow_bucket_creation"):
        s3.filesystem().create_dir(name)
    assert s3.make_bucket(name) == name
    assert s3.make_bucket(name) == name  # again: no error
    buckets = s3.filesystem().get_file_info(fs.FileSelector("", recursive=False))
    assert name in {b.path for b in buckets}
    with pytest.raises(OSError, match="InvalidBucketName"):
        s3.make_bucket("ab")  # S3 bucket names have at least 3 characters


def test_delete_and_copy(s3, bucket):  # noqa: F811
    s3fs = s3.filesystem()
    _write(s3fs, f"{bucket}/src.txt", b"copy me")
    s3fs.copy_file(f"{bucket}/src.txt", f"{bucket}/sub/dst.txt")
    assert s3fs.open_input_stream(f"{bucket}/sub/dst.txt").read() == b"copy me"
    assert s3fs.open_input_stream(f"{bucket}/src.txt").read() == b"copy me"
    s3fs.delete_file(f"{bucket}/src.txt")
    assert s3fs.get_file_info(f"{bucket}/src.txt").type == fs.FileType.NotFound
    assert s3fs.get_file_info(f"{bucket}/sub/dst.txt").type == fs.FileType.File
    with pytest.raises(FileNotFoundError):
        s3fs.delete_file(f"{bucket}/src.txt")
    # copying a missing key: a plain OSError, not FileNotFoundError
    with pytest.raises(OSError, match="NO_SUCH_KEY during CopyObject") as err:
        s3fs.copy_file(f"{bucket}/src.txt", f"{bucket}/again.txt")
    assert not isinstance(err.value, FileNotFoundError)


# error code pyarrow reports for GET/POST requests; HEAD requests carry no
# body, so those all read "ACCESS_DENIED during HeadObject operation"
REFUSAL = {"wrong-secret": "SIGNATURE_DOES_NOT_MATCH",
           "unknown-key": "INVALID_ACCESS_KEY_ID",
           "anonymous": "ACCESS_DENIED"}


@pytest.mark.parametrize("who", sorted(REFUSAL))
def test_wrong_credentials_are_refused(s3, bucket, who):  # noqa: F811
    _write(s3.filesystem(), f"{bucket}/k.txt", b"secret data")
    wrong_secret = "WRONG-" + uuid.uuid4().hex
    unknown_key = "unknown-" + uuid.uuid4().hex[:8]
    if who == "wrong-secret":
        bad = s3.filesystem(secret_key=wrong_secret)
    elif who == "unknown-key":
        bad = s3.filesystem(access_key=unknown_key)
    else:
        bad = fs.S3FileSystem(endpoint_override=s3.endpoint, anonymous=True,
                              region=s3.region)
    code = REFUSAL[who]
    errors = []
    with pytest.raises(OSError, match="ACCESS_DENIED during HeadObject") as err:
        bad.get_file_info(f"{bucket}/k.txt")
    errors.append(err.value)
    with pytest.raises(OSError, match="ACCESS_DENIED during HeadObject") as err:
        bad.open_input_stream(f"{bucket}/k.txt").read()
    errors.append(err.value)
    with pytest.raises(OSError, match=f"{code} during ListObjectsV2") as err:
        bad.get_file_info(fs.FileSelector(bucket, recursive=True))
    errors.append(err.value)
    with pytest.raises(OSError, match=f"{code} during CreateMultipartUpload") as err:
        _write(bad, f"{bucket}/new.txt", b"x")
    errors.append(err.value)
    with pytest.raises(OSError, match=f"{code} during ListBuckets") as err:
        bad.get_file_info(fs.FileSelector("", recursive=False))
    errors.append(err.value)
    for error in errors:
        assert not isinstance(error, FileNotFoundError)
        for secret in (s3.secret_key, wrong_secret, s3.access_key, unknown_key):
            assert secret not in str(error)
    # nothing was written, nothing changed
    assert s3.filesystem().get_file_info(f"{bucket}/new.txt").type == fs.FileType.NotFound
    assert s3.filesystem().open_input_stream(f"{bucket}/k.txt").read() == b"secret data"


def test_from_uri_uses_aws_endpoint_url(s3, bucket, monkeypatch):  # noqa: F811
    _write(s3.filesystem(), f"{bucket}/p/k.txt", b"via env")
    for name in ("AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    for name, value in s3.env().items():
        monkeypatch.setenv(name, value)
    s3fs, path = fs.FileSystem.from_uri(f"s3://{bucket}/p/k.txt")
    assert isinstance(s3fs, fs.S3FileSystem)
    assert path == f"{bucket}/p/k.txt"
    assert s3fs.region == "us-east-1"
    assert s3fs.open_input_stream(path).read() == b"via env"
    _write(s3fs, f"{bucket}/p/written.txt", b"back")
    assert s3.filesystem().open_input_stream(f"{bucket}/p/written.txt").read() == b"back"
