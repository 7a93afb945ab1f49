"""The ``storage.<name>`` options of the source and the sink: parsed into the options
value that travels to every task, refused for a local path, hidden from reprs and
errors, and part of the key of the process's shared readers."""

from __future__ import annotations

import pickle

import pytest

from seglog.datasource.stream_reader import input_partitions
from seglog.logstore.errors import ConfigError
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.storage.object_store_config import StorageOptions
from seglog.streaming.log_readers import reader
from seglog.streaming.sink_options import SinkOptions
from seglog.streaming.source_options import SourceOptions

SECRET = "not-a-real-secret-9f3a"
URI = "s3://bucket-x/logs"


def spark_options(path: str, **extra: str) -> dict[str, str]:
    """As Spark hands them over: every name lowercased."""
    opts = {"path": path, "storage.aws_region": "eu-west-1",
            "storage.aws_secret_access_key": SECRET, **extra}
    return {k.lower(): v for k, v in opts.items()}


def test_source_and_sink_collect_storage_options():
    source = SourceOptions.parse(spark_options(URI, subscribe="t"), streaming=True)
    sink = SinkOptions.parse(spark_options(URI, topic="t"))
    expected = StorageOptions.of({"aws_region": "eu-west-1", "aws_secret_access_key": SECRET})
    assert source.storage == expected and sink.storage == expected
    assert pickle.loads(pickle.dumps(sink)).storage == expected
    for value in (source, sink):
        assert SECRET not in repr(value) and "eu-west-1" in repr(value)
    # Spark's own spelling of a mixed-case name reaches obstore lowercased
    mixed = SinkOptions.parse({"path": URI, "Storage.AWS_Endpoint": "http://127.0.0.1:1"})
    assert mixed.storage.as_dict() == {"aws_endpoint": "http://127.0.0.1:1"}


def test_every_task_of_a_read_carries_them_and_no_offset_does():
    o = SourceOptions.parse(spark_options(URI, subscribe="t", minpartitions="3"),
                            streaming=False)
    parts = input_partitions({("t", 0): 0}, {("t", 0): 30}, o)
    assert len(parts) == 3
    for part in parts:
        assert part.value.storage == o.storage
        assert SECRET not in repr(part.value)


@pytest.mark.parametrize("side", ["source", "sink"])
def test_storage_options_with_a_local_path_are_refused_by_name(side, tmp_path):
    if side == "source":
        opts = spark_options(str(tmp_path), subscribe="t")
        parse = lambda o: SourceOptions.parse(o, streaming=True)  # noqa: E731
    else:
        opts = spark_options(str(tmp_path), topic="t")
        parse = SinkOptions.parse
    with pytest.raises(ConfigError) as e:
        parse(opts)
    message = str(e.value)
    assert "storage.aws_secret_access_key" in message and str(tmp_path) in message
    assert SECRET not in message


def test_a_storage_option_without_a_name_is_refused():
    with pytest.raises(ConfigError, match="'storage.'"):
        SinkOptions.parse({"path": URI, "storage.": "x"})


@pytest.fixture
def bucket(bucket_server, no_aws_env) -> tuple[str, dict[str, str]]:
    options = bucket_server.storage_options()
    uri = f"s3://{bucket_server.create_bucket()}/logs"
    with LogManager(uri, storage_options=options) as mgr:
        mgr.create_topic("t", 2)
    return uri, options


def test_shared_readers_are_keyed_by_the_options_too(bucket):
    uri, options = bucket
    mine = StorageOptions.of(options)
    theirs = StorageOptions.of({**options, "aws_access_key_id": "someone-else"})
    with reader([uri], mine) as first, reader([uri], theirs) as second:
        assert first is not second
        assert first.storage.options == mine and second.storage.options == theirs
        assert first.high_watermarks() == {("t", 0): 0, ("t", 1): 0}
    with reader([uri], StorageOptions.of(dict(options))) as again:
        assert again is first
