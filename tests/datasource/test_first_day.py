"""What a Kafka user meets first, checked without a SparkSession: a misspelt topic is
named with the closest existing ones (a stream warns once per query run, a batch read
fails), the sink's warning about ignored Kafka options comes once per query however many
micro-batches PySpark plans, and a seglog error leaving a data source method asks PySpark
to report it without a traceback. End to end in Spark: ``test_spark_options.py``."""

from __future__ import annotations

import logging
import os
import pickle
from pathlib import Path

import pytest

from seglog.datasource.batch_reader import SeglogBatchReader
from seglog.datasource.schema import source_schema
from seglog.datasource.stream_reader import SeglogStreamReader
from seglog.datasource.stream_writer import SeglogStreamWriter
from seglog.datasource.user_errors import HIDE_TRACEBACK, iterated_in_one_piece, user_errors
from seglog.logstore.errors import ConfigError, UnknownTopicOrPartitionError
from seglog.logstore.manager.log_manager import LogManager


def _topics(path: Path, *names: str) -> None:
    with LogManager([path]) as mgr:
        for name in names:
            mgr.create_topic(name, 1)


def _missing_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "does not exist" in r.getMessage()
    ]


def test_a_stream_of_a_misspelt_topic_warns_once_per_query_run(tmp_path, caplog):
    _topics(tmp_path, "events", "orders", "event-log")
    options = {"path": str(tmp_path), "subscribe": "evnets,orders"}
    reader = SeglogStreamReader(options, source_schema(options))
    with caplog.at_level(logging.WARNING):
        start = reader.initialOffset()
        for _ in range(3):  # triggers
            reader.latestOffset(start, reader.getDefaultReadLimit())
    [warning] = _missing_warnings(caplog)
    assert warning.startswith("option 'subscribe' names topic 'evnets' (closest: 'events'")
    assert "'orders'" not in warning and "until it is created" in warning
    caplog.clear()
    # a new run of the query (a restart) warns again
    again = SeglogStreamReader(options, source_schema(options))
    with caplog.at_level(logging.WARNING):
        again.latestOffset(start, again.getDefaultReadLimit())
    assert len(_missing_warnings(caplog)) == 1
    # the topic appears: it is read, without a warning
    _topics(tmp_path, "evnets")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        end = again.latestOffset(start, again.getDefaultReadLimit())
    assert _missing_warnings(caplog) == [] and "evnets" in end


def test_a_batch_read_of_a_misspelt_topic_fails_naming_the_closest(tmp_path):
    _topics(tmp_path, "events", "orders")
    options = {"path": str(tmp_path), "subscribe": "events,ordres"}
    reader = SeglogBatchReader.for_options(options, source_schema(options))
    with pytest.raises(
        UnknownTopicOrPartitionError,
        match=r"option 'subscribe' names topic 'ordres' \(closest: 'orders'\), "
        f"which does not exist in {tmp_path} .*subscribePattern",
    ):
        reader.partitions()
    # a pattern matching nothing is a normal, empty read
    pattern = {"path": str(tmp_path), "subscribePattern": "ordres.*"}
    assert SeglogBatchReader.for_options(pattern, source_schema(pattern)).partitions() == []


def _planned(options: dict) -> SeglogStreamWriter:
    """What PySpark's write planner does for each micro-batch: build, then pickle."""
    from pyspark.sql.types import StringType, StructField, StructType

    writer = SeglogStreamWriter(options, StructType([StructField("value", StringType())]))
    pickle.dumps(writer)
    pickle.dumps(writer)  # the write function's closure ships it a second time
    return writer


def _ignored_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "ignores these Kafka" in r.getMessage()]


def test_the_sink_warns_about_ignored_kafka_options_once_per_query(tmp_path, caplog):
    # as Spark hands them to a stream's writer: lowercased
    query = {
        "path": str(tmp_path),
        "topic": "t",
        "kafka.bootstrap.servers": "b:9092",
        "groupidprefix": "g",
        "queryname": "copy",
        "checkpointlocation": "/chk/a",
    }
    with caplog.at_level(logging.WARNING):
        for _ in range(3):  # three micro-batches, planned in the same reused worker
            _planned(query)
    [warning] = _ignored_warnings(caplog)
    assert warning.startswith("the seglog sink of query 'copy' ignores")
    assert warning.endswith("'kafka.bootstrap.servers', 'groupIdPrefix'")
    caplog.clear()
    with caplog.at_level(logging.WARNING):  # another query: its own warning
        _planned({**query, "queryname": "other", "checkpointlocation": "/chk/b"})
    assert len(_ignored_warnings(caplog)) == 1


def test_a_seglog_error_is_reported_without_a_traceback(monkeypatch):
    monkeypatch.setenv(HIDE_TRACEBACK, "x")  # restored after the test, whatever happens
    monkeypatch.delenv(HIDE_TRACEBACK)
    with pytest.raises(ValueError), user_errors():
        raise ValueError("a bug keeps its traceback")
    assert HIDE_TRACEBACK not in os.environ

    def rows():
        yield 1
        raise ConfigError("bad")

    it = iterated_in_one_piece(rows())
    assert next(it) == 1
    with pytest.raises(ConfigError):
        next(it)  # raised while Spark iterates a task's read()
    assert os.environ[HIDE_TRACEBACK] == "1"
