"""seglog as a drop-in for Spark's Kafka connector, end to end in Spark: broker-only
options accepted, Kafka's sink rules (topic option over column, unused columns ignored),
errors shown in one piece, and old rows never lost silently."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from seglog.logstore.manager.log_manager import LogManager

pytestmark = pytest.mark.spark

KAFKA_CLIENT = {"kafka.bootstrap.servers": "broker:9092", "kafka.security.protocol": "SASL_SSL"}
KAFKA_CONSUMER = {**KAFKA_CLIENT, "kafka.group.id": "g", "fetchOffset.numRetries": "5",
                  "kafkaConsumer.pollTimeoutMs": "1000"}


def _read(spark, path: Path, topic: str, **opts: str):
    r = spark.read.format("seglog").option("path", str(path)).option("subscribe", topic)
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def _write(df, path: Path, **opts: str) -> None:
    w = df.write.format("seglog").option("path", str(path)).mode("append")
    for k, v in opts.items():
        w = w.option(k, v)
    w.save()


def _first_line_names(error: Exception, message: str) -> None:
    """seglog's message is on the first line the user reads, and no traceback follows."""
    text = str(error)
    assert message in text.splitlines()[0], text[:2000]
    assert "Traceback" not in text, text[:2000]


def test_a_kafka_job_runs_unchanged_and_writes_its_source_frame_back(spark, tmp_path):
    src = spark.range(0, 40, numPartitions=2).selectExpr(
        "cast(concat('k', id % 7) AS binary) AS key", "cast(id AS string) AS value")
    _write(src, tmp_path, topic="a", numPartitions="2",
           **{**KAFKA_CLIENT, "kafka.acks": "all", "kafka.compression.type": "lz4"})

    read = _read(spark, tmp_path, "a", startingOffsets="earliest", **KAFKA_CONSUMER)
    rows = read.collect()
    assert len(rows) == 40 and {r.topic for r in rows} == {"a"}
    # the whole source frame (offset, timestampType...) goes back: the option 'topic'
    # overrides the 'topic' column, the 'partition' column is honoured
    _write(read, tmp_path, topic="copy", numPartitions="2")
    copy = {(r.key, r.value): (r.partition, r.timestamp)
            for r in _read(spark, tmp_path, "copy").collect()}
    assert copy == {(r.key, r.value): (r.partition, r.timestamp) for r in rows}
    # without the option, each row's 'topic' column says where it goes
    _write(read.selectExpr("key", "value", "'b' AS topic", "offset"), tmp_path)
    assert _read(spark, tmp_path, "b").count() == 40
    with LogManager([tmp_path], read_only=True) as mgr:
        assert mgr.topics() == ["a", "b", "copy"]


def test_errors_are_shown_in_one_piece_naming_the_option(spark, tmp_path):
    df = spark.createDataFrame([("k", "v")], "key string, value string")
    _write(df, tmp_path, topic="t", numPartitions="2")

    with pytest.raises(Exception) as e:
        _read(spark, tmp_path, "t", startingOffsets="{oops").collect()
    _first_line_names(e.value, "ConfigError: malformed JSON for option 'startingOffsets'")
    with pytest.raises(Exception) as e:  # a stream is checked at load(), before start()
        (spark.readStream.format("seglog").option("path", str(tmp_path))
         .option("subscribe", "t").option("kafka.auto.offset.reset", "earliest").load())
    _first_line_names(e.value, "option 'kafka.auto.offset.reset' of Spark's Kafka connector "
                               "is not supported by the seglog source: set the option "
                               "'startingOffsets'")
    with pytest.raises(Exception) as e:
        _write(df, tmp_path, topic="t", **{"Compression.Type": "brotli"})
    _first_line_names(e.value, "invalid value 'brotli' for option 'compression.type'")
    with pytest.raises(Exception) as e:
        _write(df, tmp_path, topic="t", **{"kafka.compression.type": "brotli"})
    _first_line_names(e.value, "for option 'kafka.compression.type'")
    with pytest.raises(Exception) as e:
        _write(df, tmp_path, topic="t", numPartitions="3")
    _first_line_names(e.value, "option 'numPartitions' is 3 but topic 't' already exists "
                               "with 2 partition(s)")
    with pytest.raises(Exception) as e:
        _write(df, tmp_path, topic="t", **{"kafka.partitioner.class": "x.Y"})
    _first_line_names(e.value, "option 'kafka.partitioner.class'")
    assert _read(spark, tmp_path, "t").count() == 1


def test_old_rows_fail_the_write_unless_allowed(spark, tmp_path):
    old = dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc)
    df = spark.createDataFrame([("v1", old), ("v2", dt.datetime.now(dt.timezone.utc))],
                               "value string, timestamp timestamp")
    with pytest.raises(Exception, match="rows for topic 'backfill' have timestamps older "
                                        r"than its retention.ms \(604800000 ms, 7 days\): "
                                        "the oldest is 2020-01-01T00:00:00.000"):
        _write(df, tmp_path, topic="backfill")
    # No staging assertion here: a task of the other partition can finish staging after
    # Spark's abort ran (task cancellation is asynchronous); its files are invisible and
    # swept after the staging TTL. What matters: nothing was created or published.
    with LogManager([tmp_path], read_only=True) as mgr:
        assert mgr.topics() == []  # nothing was created or published
    # opted in: both rows are written, and the maintenance after the commit deletes the
    # old one at once (its segment rolled by segment.ms and expired): the loss the error
    # warned about
    _write(df, tmp_path, topic="backfill", allowExpiredTimestamps="true")
    assert [r.value for r in _read(spark, tmp_path, "backfill").collect()] == [b"v2"]
    _write(df, tmp_path, topic="kept", **{"topic.retention.ms": "-1"})
    assert _read(spark, tmp_path, "kept").count() == 2


def test_a_stream_only_refusal_reaches_the_user_not_pysparks_masking_error(spark, tmp_path):
    # streamReader() raising would be masked by PySpark's own UnboundLocalError
    q = (spark.readStream.format("seglog").option("path", str(tmp_path))
         .option("subscribe", "t").option("endingOffsets", "latest").load()
         .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "chk"))
         .start())
    try:
        with pytest.raises(Exception) as e:
            q.awaitTermination(120)
    finally:
        q.stop()
    text = str(e.value)
    assert "ConfigError: option 'endingOffsets' is not applicable to streaming queries" in text
    assert "UnboundLocalError" not in text and "Traceback" not in text
