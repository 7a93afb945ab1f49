"""A malformed endpoint, a plain-HTTP one not allowed, missing credentials: each is a
one-line seglog error naming the option (or variable) and the fix, never a Rust panic
(``pyo3_runtime.PanicException``, a ``BaseException`` that ``except Exception`` misses),
and secrets are redacted as whole values only."""

from __future__ import annotations

import pytest

from seglog.logstore.errors import (
    BucketNotFoundError,
    ConfigError,
    KafkaStorageError,
    StorageAccessDeniedError,
)
from seglog.logstore.storage.object_storage import ObjectStorage
from seglog.logstore.storage.object_store_config import StorageOptions

BAD_ENDPOINTS = [
    "127.0.0.1:9000",
    "localhost:9000",
    "not a url",
    "",
    "http://",
    "ftp://127.0.0.1:9000",
    "http://127.0.0.1:99999",
]
CREDENTIALS = {
    "aws_region": "us-east-1",
    "aws_access_key_id": "k",
    "aws_secret_access_key": "s",
    "aws_allow_http": "true",
}


def _first_request(st: ObjectStorage) -> None:
    st.list_dir("")


@pytest.mark.usefixtures("no_aws_env")
@pytest.mark.parametrize("endpoint", BAD_ENDPOINTS)
def test_a_malformed_endpoint_option_is_a_config_error_naming_it(endpoint):
    try:
        with pytest.raises(ConfigError) as e:
            _first_request(
                ObjectStorage("s3://bucket-a/logs", {"aws_endpoint": endpoint, **CREDENTIALS})
            )
    except BaseException as panic:  # the old code's PanicException: not an Exception
        pytest.fail(f"endpoint {endpoint!r}: {type(panic).__name__}: {panic}")
    message = str(e.value)
    assert f"option aws_endpoint={endpoint!r}" in message
    assert "http://host[:port]" in message and "\n" not in message


@pytest.mark.usefixtures("no_aws_env")
@pytest.mark.parametrize("endpoint", BAD_ENDPOINTS)
def test_a_malformed_endpoint_variable_is_a_config_error_naming_it(endpoint, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    try:
        with pytest.raises(ConfigError) as e:
            _first_request(ObjectStorage("s3://bucket-a/logs", CREDENTIALS))
    except BaseException as panic:
        pytest.fail(f"AWS_ENDPOINT_URL={endpoint!r}: {type(panic).__name__}: {panic}")
    assert f"environment variable AWS_ENDPOINT_URL={endpoint!r}" in str(e.value)


@pytest.mark.usefixtures("no_aws_env")
def test_a_panic_of_the_client_becomes_a_storage_error():
    # Passes the URL check (a host with a character URLs allow but the client's HTTP
    # stack does not): the client panics on the first request; seglog names the option.
    st = ObjectStorage(
        "s3://bucket-a/logs",
        {"aws_endpoint": "http://ho^st:9000", "max_retries": "0", **CREDENTIALS},
    )
    try:
        with pytest.raises(KafkaStorageError, match="aws_endpoint") as e:
            _first_request(st)
    except BaseException as panic:
        pytest.fail(f"{type(panic).__name__} escaped: {panic}")
    assert "s3://bucket-a/logs" in str(e.value)


@pytest.mark.usefixtures("no_aws_env")
def test_plain_http_without_allow_http_names_the_option(bucket_server):
    options = {**bucket_server.storage_options()}
    del options["aws_allow_http"]
    with pytest.raises(ConfigError) as e:
        ObjectStorage(f"s3://{bucket_server.create_bucket()}/logs", options)
    message = str(e.value)
    assert "plain HTTP" in message and "aws_allow_http=true" in message
    assert "AWS_ALLOW_HTTP=true" in message and "builder error" not in message


def test_plain_http_allowed_by_the_variable_works(bucket_server, monkeypatch, no_aws_env):
    options = {**bucket_server.storage_options()}
    del options["aws_allow_http"]
    monkeypatch.setenv("AWS_ALLOW_HTTP", "true")
    st = ObjectStorage(f"s3://{bucket_server.create_bucket()}/logs", options)
    assert st.create("a", b"1") and st.read("a") == b"1"


@pytest.mark.usefixtures("no_aws_env")
def test_no_credentials_names_the_variables_and_options(bucket_server):
    # No key in options or environment: the client falls back to the EC2 instance metadata
    # service (169.254.169.254), which is not there (refused, or silent: bounded below).
    st = ObjectStorage(
        f"s3://{bucket_server.create_bucket()}/logs",
        {
            "aws_endpoint": bucket_server.endpoint,
            "aws_region": "us-east-1",
            "aws_allow_http": "true",
            "max_retries": "0",
            "connect_timeout": "1s",
            "retry_timeout": "2s",
        },
    )
    with pytest.raises(StorageAccessDeniedError) as e:
        _first_request(st)
    message = str(e.value)
    assert "no credentials" in message and "169.254.169.254" in message
    assert "AWS_ACCESS_KEY_ID" in message and "aws_access_key_id" in message
    assert "AWS_ENDPOINT_URL" in message


def test_redaction_replaces_whole_values_only():
    options = StorageOptions.of({"aws_access_key_id": "x", "aws_secret_access_key": "ab/cd+ef=="})
    text = (
        "GET http://127.0.0.1:9000/bucket-x?list-type=2 for u-x-bucket: "
        "Credential=x/20250101/us-east-1/s3 secret 'ab/cd+ef=='"
    )
    assert options.redact(text) == (
        "GET http://127.0.0.1:9000/bucket-x?list-type=2 for u-x-bucket: "
        "Credential=***/20250101/us-east-1/s3 secret '***'"
    )


@pytest.mark.usefixtures("no_aws_env")
def test_a_short_access_key_leaves_the_bucket_name_in_errors_whole(bucket_server):
    options = {**bucket_server.storage_options(), "aws_access_key_id": "x"}
    st = ObjectStorage("s3://u-x-bucket/logs", options)
    with pytest.raises(BucketNotFoundError) as e:
        st.read("t-0/a.log")
    assert "s3://u-x-bucket/logs" in str(e.value)
    assert "u-***" not in str(e.value)
