"""Every way an object-store log dir can be unusable gets its own error naming the URI and
the cause, after bounded retries, never a hang and never "not found" for a whole bucket."""

from __future__ import annotations

import socket

import pytest
from s3_server import MotoServer, SeaweedServer

from seglog.logstore.errors import (
    BucketNotFoundError,
    ConfigError,
    InvalidStorageUriError,
    KafkaStorageError,
    StorageAccessDeniedError,
    StorageUnreachableError,
)
from seglog.logstore.storage.object_storage import ObjectStorage


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_endpoint_fails_after_the_default_bounded_retries(monkeypatch):
    # Connection refused, with seglog's default retry bounds (no options).
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{_free_port()}")
    monkeypatch.setenv("AWS_ALLOW_HTTP", "true")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    st = ObjectStorage("s3://some-bucket/logs")
    with pytest.raises(StorageUnreachableError, match=r"s3://some-bucket/logs/t-0/x\.log") as e:
        st.read("t-0/x.log")
    assert "max_retries" in str(e.value) and "error sending request" in str(e.value)
    with pytest.raises(StorageUnreachableError):
        st.create("c.json", b"{}")


def test_an_endpoint_that_accepts_but_never_answers_times_out(s3_uri):
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        st = ObjectStorage(s3_uri, {"aws_endpoint": endpoint, "read_timeout": "300ms",
                                    "max_retries": "1", "retry_timeout": "2s"})
        with pytest.raises(StorageUnreachableError, match="did not answer"):
            st.read("x")
        with pytest.raises(StorageUnreachableError):
            st.list_dir("")


def test_a_missing_bucket_is_named_by_every_operation(bucket_server, monkeypatch):
    if isinstance(bucket_server, SeaweedServer):
        pytest.skip("SeaweedFS answers 403 AccessDenied, not S3's 404 NoSuchBucket, for a "
                    "bucket that does not exist: seglog reports what the server said")
    for name, value in bucket_server.env.items():
        monkeypatch.setenv(name, value)
    st = ObjectStorage("s3://no-such-bucket-seglog/logs")
    operations = {
        "read": lambda: st.read("t-0/x.log"),
        "read_range": lambda: st.read_range("t-0/x.log", 0, 10),
        "size": lambda: st.size("t-0/x.log"),
        "exists": lambda: st.exists("t-0/x.log"),
        "open_range_reader": lambda: st.open_range_reader("t-0/x.log"),
        "list_dir": lambda: st.list_dir("t-0"),
        "list_after": lambda: st.list_after("_seglog/commits", "0"),
        "write_atomic": lambda: st.write_atomic("t-0/x.log", b"x"),
        "create": lambda: st.create("c.json", b"x"),
        "delete": lambda: st.delete("t-0/x.log"),
    }
    for op, call in operations.items():
        # A fresh instance per HEAD: the bucket check runs once per instance.
        st = ObjectStorage("s3://no-such-bucket-seglog/logs")
        with pytest.raises(BucketNotFoundError, match="no-such-bucket-seglog") as e:
            call()
        assert not isinstance(e.value, FileNotFoundError), op


def test_a_missing_object_in_an_existing_bucket_is_file_not_found(s3_uri):
    st = ObjectStorage(s3_uri)
    with pytest.raises(FileNotFoundError, match="t-0/missing.log"):
        st.size("t-0/missing.log")
    assert not st.exists("t-0/missing.log")
    with pytest.raises(FileNotFoundError):
        st.read("t-0/missing.log")


@pytest.fixture(scope="module")
def auth_server():
    """A second moto server that checks credentials against its (empty) IAM: every key is
    unknown, so every request gets 403 InvalidAccessKeyId."""
    with MotoServer(enforce_auth_after=0) as server:
        yield server


def test_denied_credentials_are_named(auth_server, monkeypatch):
    for name, value in auth_server.env.items():
        monkeypatch.setenv(name, value)
    st = ObjectStorage("s3://denied-bucket/logs")
    for call in (lambda: st.read("x"), lambda: st.size("x"), lambda: st.list_dir(""),
                 lambda: st.list_after("", ""), lambda: st.create("x", b"1"),
                 lambda: st.write_atomic("x", b"1")):
        with pytest.raises(StorageAccessDeniedError, match="s3://denied-bucket/logs"):
            call()


@pytest.mark.parametrize("uri", [
    "s3://", "s3:///logs", "s3://Bad_Bucket/logs", "s3://ab/logs", "s3://bucket/a//b",
    "s3://bucket/../x", "s3://bucket/logs?versionId=1", "gs://", "s3://my bucket/x",
])
def test_a_bad_uri_is_named(uri):
    with pytest.raises(InvalidStorageUriError) as e:
        ObjectStorage(uri)
    assert repr(uri) in str(e.value)


def test_a_path_is_not_an_object_uri():
    with pytest.raises(InvalidStorageUriError, match="not an object-store URI"):
        ObjectStorage("/data/logs")


@pytest.mark.parametrize(("options", "named"), [
    ({"no_such_option": "1"}, "no_such_option"),
    ({"max_retries": "many"}, "max_retries"),
    ({"retry_timeout": "soon"}, "retry_timeout"),
    ({"timeout": "abc"}, "abc"),
])
def test_a_bad_option_is_named(options, named):
    with pytest.raises(ConfigError, match=named):
        ObjectStorage("s3://bucket-x/logs", options)


def test_a_memory_store_takes_no_options():
    with pytest.raises(ConfigError, match="aws_region"):
        ObjectStorage("memory://opts", {"aws_region": "x"})


@pytest.mark.parametrize("spelling", ["aws_endpoint", "endpoint", "AWS_ENDPOINT_URL",
                                      "aws_endpoint_url"])
def test_options_override_the_environment(s3_uri, bucket_server, monkeypatch, spelling):
    ObjectStorage(s3_uri).write_atomic("k", b"v")
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{_free_port()}")
    monkeypatch.delenv("AWS_ALLOW_HTTP")
    st = ObjectStorage(s3_uri, {spelling: bucket_server.endpoint, "AWS_ALLOW_HTTP": "true",
                                "max_retries": "0"})
    assert st.read("k") == b"v"
    with pytest.raises(StorageUnreachableError):
        ObjectStorage(s3_uri, {"allow_http": "true", "max_retries": "0"}).read("k")


def test_client_settings_still_come_from_the_environment(s3_uri):
    # seglog always passes client options (its timeouts); AWS_ALLOW_HTTP from the
    # environment must survive that, or no plain-http endpoint works.
    st = ObjectStorage(s3_uri, {"timeout": "30s"})
    st.write_atomic("k", b"v")
    assert st.read("k") == b"v"


def test_s3a_is_s3(s3_uri):
    ObjectStorage(s3_uri.replace("s3://", "s3a://", 1)).write_atomic("t-0/a", b"hadoop")
    assert ObjectStorage(s3_uri).read("t-0/a") == b"hadoop"


def test_other_failures_stay_kafka_storage_errors(s3_uri):
    st = ObjectStorage(s3_uri)
    st.write_atomic("t-0/x.log", b"0123456789")
    with pytest.raises(KafkaStorageError, match="t-0/x.log"):
        st.read_ranges("t-0/x.log", [(50, 10)])


@pytest.mark.parametrize("scheme", ["memory", "s3"])
def test_read_ranges_fetches_several_ranges_of_one_object(scheme, request):
    uri = request.getfixturevalue("s3_uri") if scheme == "s3" else "memory://read-ranges"
    st = ObjectStorage(uri)
    data = bytes(range(256)) * 64
    st.write_atomic("t-0/seg.log", data)
    ranges = [(0, 61), (5000, 12), (len(data) - 7, 7), (3_000_000 % len(data), 100)]
    assert st.read_ranges("t-0/seg.log", ranges) == [data[p:p + n] for p, n in ranges]
    assert st.read_ranges("t-0/seg.log", []) == []
