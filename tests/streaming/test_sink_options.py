"""Sink options and input columns: defaults, case-insensitivity, and errors that name the
option or column."""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest

from seglog.logstore.errors import ConfigError, InvalidTopicError, UnknownTopicOrPartitionError
from seglog.streaming.sink_options import SinkColumns, SinkOptions, require_creatable


def test_defaults_and_spark_lowercased_keys() -> None:
    o = SinkOptions.parse({"path": "/a", "checkpointlocation": "/chk"})
    assert o.log_dirs == ("/a",)
    assert o.topic is None
    assert o.compression == "none"
    assert o.create_topics is True
    assert o.num_partitions == 1
    assert o.topic_config == {}
    assert o.checkpoint_location == "/chk"
    o = SinkOptions.parse({"logdirs": "/a, /b", "topic": "t", "compression.type": "ZSTD",
                           "createtopics": "false", "numpartitions": "4",
                           "maxbatchbytes": "65536", "locktimeoutms": "0"})
    assert (o.log_dirs, o.topic, o.compression, o.create_topics, o.num_partitions,
            o.max_batch_bytes, o.lock_timeout_ms) == (("/a", "/b"), "t", "zstd", False, 4,
                                                      65536, 0)
    assert pickle.loads(pickle.dumps(o)) == o


@pytest.mark.parametrize("options", [
    {"path": "/a"},  # save(path), start(path)
    {"path": "/a", "queryname": "orders-copy"},  # writeStream.queryName(...)
    {"path": "/a", "checkpointlocation": "/chk"},  # option("checkpointLocation", ...)
    {"path": "/a", "queryname": "q", "checkpointlocation": "/chk"},
])
def test_every_option_spark_itself_passes_to_a_sink_is_accepted(options: dict) -> None:
    # As PySpark 4.3 hands them over, lowercased (logged from a real query, see
    # tests/datasource/test_spark_options.py)
    o = SinkOptions.parse(options)
    assert o.query_name == options.get("queryname")
    assert o.checkpoint_location == options.get("checkpointlocation")


def test_consumer_options_of_a_shared_kafka_dict_are_ignored_as_documented() -> None:
    o = SinkOptions.parse({"path": "/a", "groupidprefix": "g", "kafka.Linger.MS": "5",
                           "fetchoffset.numretries": "3"})
    assert o.ignored == ("groupIdPrefix", "kafka.linger.ms", "fetchOffset.numRetries")
    with pytest.raises(ConfigError, match="option 'kafka.partitioner.class' of Spark's"):
        SinkOptions.parse({"path": "/a", "KAFKA.PARTITIONER.CLASS": "x.Y"})


def test_topic_configs_pass_through_validated_by_log_config() -> None:
    o = SinkOptions.parse({"path": "/a", "topic.retention.ms": "1000",
                           "topic.cleanup.policy": "compact"})
    assert o.topic_config == {"cleanup.policy": "compact", "retention.ms": "1000"}
    with pytest.raises(ConfigError, match="retention.msx"):
        SinkOptions.parse({"path": "/a", "topic.retention.msx": "1"})
    with pytest.raises(ConfigError, match="segment.bytes"):
        SinkOptions.parse({"path": "/a", "topic.segment.bytes": "banana"})


@pytest.mark.parametrize(("options", "named"), [
    ({}, "'path'"),
    ({"path": "/a", "logDirs": "/b"}, "conflict"),
    ({"path": "/a,/a"}, "twice"),
    ({"path": "/a", "compression.type": "brotli"}, "'compression.type'"),
    ({"path": "/a", "numPartitions": "0"}, "'numPartitions'"),
    ({"path": "/a", "numPartitions": "two"}, "'numPartitions'"),
    ({"path": "/a", "createTopics": "yes"}, "'createTopics'"),
    ({"path": "/a", "lockTimeoutMs": "-1"}, "'lockTimeoutMs'"),
    ({"path": "/a", "subscribe": "t"}, "'subscribe'"),
])
def test_bad_options_name_the_option(options: dict, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        SinkOptions.parse(options)


@pytest.mark.parametrize("name", ["", "a/b", "..", "x" * 250, "sp ace"])
def test_invalid_topic_names(name: str) -> None:
    with pytest.raises(InvalidTopicError, match="option 'topic'"):
        SinkOptions.parse({"path": "/a", "topic": name})


def test_columns_resolved_case_insensitively() -> None:
    schema = pa.schema([
        ("Value", pa.binary()), ("KEY", pa.string()), ("topic", pa.string()),
        ("partition", pa.int32()),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
        ("timestamp", pa.timestamp("us", tz="UTC")),
    ])
    cols = SinkColumns.resolve(schema, default_topic=None)
    assert (cols.value, cols.key, cols.topic, cols.partition, cols.headers, cols.timestamp) == \
        ("Value", "KEY", "topic", "partition", "headers", "timestamp")
    only_value = SinkColumns.resolve(pa.schema([("value", pa.string())]), default_topic="t")
    assert only_value.key is None and only_value.timestamp is None


@pytest.mark.parametrize(("fields", "message"), [
    ([("key", pa.binary())], "required column 'value'"),
    ([("value", pa.int64())], "column 'value' has type int64"),
    ([("value", pa.binary()), ("key", pa.float64())], "column 'key' has type double"),
    ([("value", pa.binary()), ("partition", pa.string())], "column 'partition'"),
    ([("value", pa.binary()), ("timestamp", pa.string())], "column 'timestamp'"),
    ([("value", pa.binary()), ("headers", pa.list_(pa.binary()))], "column 'headers'"),
    ([("value", pa.binary()), ("VALUE", pa.binary())], "both map"),
    # Spark's Kafka sink refuses these two, and so does seglog's
    ([("value", pa.binary()), ("partition", pa.int64())],
     r"column 'partition' has type int64; the seglog sink expects int \(cast it"),
    ([("value", pa.binary()), ("partition", pa.int16())], "column 'partition' has type int16"),
    ([("value", pa.binary()),
      ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.string())])))],
     r"column 'headers' has type .*value: string.*a header value is binary"),
])
def test_bad_columns_are_named(fields: list, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        SinkColumns.resolve(pa.schema(fields), default_topic="t")


def test_a_topic_is_required_from_option_or_column() -> None:
    with pytest.raises(ConfigError, match="option 'topic' or a 'topic' column"):
        SinkColumns.resolve(pa.schema([("value", pa.binary())]), default_topic=None)


def test_the_topic_option_overrides_the_topic_column_as_in_kafka() -> None:
    schema = pa.schema([("value", pa.binary()), ("topic", pa.binary())])
    cols = SinkColumns.resolve(schema, default_topic="t")
    assert cols.topic is None and cols.ignored == ("topic",)
    with pytest.raises(ConfigError, match="column 'topic' has type binary"):
        SinkColumns.resolve(schema, default_topic=None)


def test_columns_the_sink_does_not_use_are_ignored_so_a_source_frame_writes_back() -> None:
    source = pa.schema([("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
                        ("partition", pa.int32()), ("offset", pa.int64()),
                        ("timestamp", pa.timestamp("us", tz="UTC")),
                        ("timestampType", pa.int32()), ("extra", pa.float64())])
    cols = SinkColumns.resolve(source, default_topic=None)
    assert (cols.key, cols.value, cols.topic, cols.partition, cols.timestamp) == \
        ("key", "value", "topic", "partition", "timestamp")
    assert cols.ignored == ("offset", "timestampType", "extra")


def test_kafka_producer_options_are_mapped_ignored_or_refused() -> None:
    o = SinkOptions.parse({"path": "/a", "kafka.bootstrap.servers": "b:9092",
                           "kafka.acks": "all", "kafka.compression.type": "LZ4",
                           "kafka.batch.size": "16384"})
    assert o.ignored == ("kafka.bootstrap.servers", "kafka.acks")
    assert (o.compression, o.max_batch_bytes) == ("lz4", 16384)
    same = SinkOptions.parse({"path": "/a", "kafka.compression.type": "gzip",
                              "compression.type": "GZIP"})
    assert same.compression == "gzip"
    with pytest.raises(ConfigError, match="'compression.type' .*'kafka.compression.type'"):
        SinkOptions.parse({"path": "/a", "kafka.compression.type": "gzip",
                           "compression.type": "zstd"})
    with pytest.raises(ConfigError, match="option 'kafka.compression.type'"):
        SinkOptions.parse({"path": "/a", "kafka.compression.type": "brotli"})
    with pytest.raises(ConfigError, match="option 'kafka.batch.size'"):
        SinkOptions.parse({"path": "/a", "kafka.batch.size": "0"})
    for refused in ("kafka.key.serializer", "kafka.value.serializer",
                    "kafka.partitioner.class", "kafka.interceptor.classes"):
        with pytest.raises(ConfigError, match=f"option '{refused}' .*not supported"):
            SinkOptions.parse({"path": "/a", refused: "x"})


def test_expired_timestamps_opt_in_and_explicit_partition_count() -> None:
    o = SinkOptions.parse({"path": "/a"})
    assert not o.allow_expired_timestamps and not o.num_partitions_given
    o = SinkOptions.parse({"path": "/a", "allowexpiredtimestamps": "true",
                           "numpartitions": "1"})
    assert o.allow_expired_timestamps and o.num_partitions_given
    with pytest.raises(ConfigError, match="'allowExpiredTimestamps'"):
        SinkOptions.parse({"path": "/a", "allowExpiredTimestamps": "yes"})


def test_the_create_topics_rule_names_the_dirs_and_the_option(tmp_path):
    allowed = SinkOptions.parse({"path": str(tmp_path), "topic": "t"})
    require_creatable(allowed, "t")  # createTopics defaults to true
    refused = SinkOptions.parse({"path": str(tmp_path), "topic": "t", "createTopics": "false"})
    with pytest.raises(UnknownTopicOrPartitionError,
                       match=f"option 'topic': topic 't' does not exist in {tmp_path} and "
                             "the option 'createTopics' is false"):
        require_creatable(refused, "t", named_by="topic")
