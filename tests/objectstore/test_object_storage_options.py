"""Object-store options given in code (``LogManager(uri, storage_options=...)``) instead of
the environment: they reach the bucket, they are refused for local dirs, and their secret
values never reach a repr or an error message."""

from __future__ import annotations

import os
import pickle

import pyarrow as pa
import pytest

from seglog.logstore.errors import ConfigError
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches
from seglog.logstore.storage.object_storage import ObjectStorage
from seglog.logstore.storage.object_store_config import StorageOptions

SECRET = "wJalrXUtnFEMI-not-a-real-secret"


def test_a_manager_reaches_the_bucket_through_options_alone(bucket_server, no_aws_env):
    uri = f"s3://{bucket_server.create_bucket()}/logs"
    options = bucket_server.storage_options()
    with LogManager(uri, storage_options=options) as mgr:
        mgr.create_topic("t", 1)
        mgr.append("t", 0, encode_batches(pa.array([b"a", b"b"], pa.binary())))
    with LogManager(uri, read_only=True, storage_options=options) as reader:
        assert reader.high_watermarks() == {("t", 0): 2}
        assert reader.storage.options == StorageOptions.of(options)
    assert not [n for n in os.environ if n.startswith("AWS_")]


@pytest.mark.parametrize("read_only", [False, True])
def test_options_for_a_local_dir_are_refused_by_name(tmp_path, read_only):
    with pytest.raises(ConfigError) as e:
        LogManager(str(tmp_path), read_only=read_only,
                   storage_options={"aws_secret_access_key": SECRET, "aws_region": "x"})
    message = str(e.value)
    assert "aws_secret_access_key" in message and str(tmp_path) in message
    assert SECRET not in message
    assert list(tmp_path.iterdir()) == []  # nothing opened, locked or written


def test_repr_shows_public_values_only_and_the_value_pickles():
    o = StorageOptions.of({"AWS_REGION": "eu-west-1", "aws_access_key_id": "AKIAEXAMPLE",
                           "aws_secret_access_key": SECRET, "aws_session_token": "tok3n",
                           "google_service_account_key": '{"k": 1}', "allow_http": True})
    text = repr(o)
    for hidden in ("AKIAEXAMPLE", SECRET, "tok3n", '{"k": 1}'):
        assert hidden not in text
    assert "eu-west-1" in text and "allow_http='true'" in text
    assert pickle.loads(pickle.dumps(o)) == o and hash(o) == hash(StorageOptions.of(o))
    with pytest.raises(ConfigError, match="aws_region"):
        StorageOptions.of({"aws_region": "a", "AWS_REGION": "b"})


def test_a_secret_the_store_quotes_in_its_error_is_redacted():
    # obstore quotes a value it cannot parse; here the value is also the secret (a value
    # pasted into the wrong option), so the message must not carry it.
    with pytest.raises(ConfigError) as e:
        ObjectStorage("s3://bucket-x/logs", {"aws_secret_access_key": SECRET,
                                             "aws_checksum_algorithm": SECRET})
    assert "checksum" in str(e.value) and SECRET not in str(e.value)
    # the store's own exception (which quotes it) is not chained into tracebacks
    assert e.value.__cause__ is None and e.value.__suppress_context__
