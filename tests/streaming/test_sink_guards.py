"""The sink never loses data silently: rows already past the topic's retention.ms are
refused before anything is staged (unless opted in), an explicit numPartitions that
contradicts an existing topic is an error, and creating a topic logs its retention."""

from __future__ import annotations

import logging
from pathlib import Path

import pyarrow as pa
import pytest

from seglog.logstore.errors import ConfigError, InvalidRecordError
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.util.clock import MockClock
from seglog.streaming.sink_commit import commit
from seglog.streaming.sink_local_staging import stage_rows
from seglog.streaming.sink_options import SinkColumns, SinkOptions
from seglog.streaming.sink_stager import min_timestamp_ms

NOW = 1_700_000_000_000
DAY = 86_400_000


def _rows(timestamps: pa.Array) -> pa.RecordBatch:
    n = len(timestamps)
    return pa.record_batch({"value": pa.array([f"v{i}".encode() for i in range(n)]),
                            "timestamp": timestamps})


def _stage(log_dir: Path, batch: pa.RecordBatch, **extra: str):
    opts = SinkOptions.parse({"path": str(log_dir), "topic": "t", **extra})
    cols = SinkColumns.resolve(batch.schema, default_topic=opts.topic)
    return opts, stage_rows(opts, cols, [batch], "sink", 0, 0, 0, clock=MockClock(NOW))


def _staged_files(log_dir: Path) -> list[Path]:
    return sorted(p for p in log_dir.rglob("*.stage"))


def test_a_backfill_older_than_retention_fails_naming_topic_retention_and_oldest(tmp_path):
    old = NOW - 8 * DAY  # the default retention.ms is 7 days
    batch = _rows(pa.array([NOW - 1000, old, None], pa.int64()))
    with pytest.raises(InvalidRecordError) as e:
        _stage(tmp_path, batch)
    message = str(e.value)
    assert "'t'" in message and "retention.ms (604800000 ms, 7 days)" in message
    assert f"({old} ms)" in message and "2023-11-06T22:13:20.000+00:00" in message
    assert "'allowExpiredTimestamps'" in message
    assert _staged_files(tmp_path) == []
    # opting in writes them
    _, staged = _stage(tmp_path, batch, allowExpiredTimestamps="true")
    assert staged.records == 3


@pytest.mark.parametrize("config", [
    {"topic.retention.ms": "-1"},
    {"topic.cleanup.policy": "compact"},
    {"topic.message.timestamp.type": "LogAppendTime"},
    {"topic.retention.ms": str(20 * DAY)},
])
def test_topics_that_keep_old_rows_accept_them(tmp_path, config):
    # keyed: a compacted topic's rows need keys (the sink refuses null ones in the task)
    batch = _rows(pa.array([NOW - 10 * DAY], pa.int64())).append_column("key",
                                                                       pa.array([b"k"]))
    _, staged = _stage(tmp_path, batch, **config)
    assert staged.records == 1


def test_an_existing_topics_own_retention_decides(tmp_path):
    with LogManager([tmp_path]) as mgr:
        mgr.create_topic("t", 1, {"retention.ms": "60000"})
    ts = pa.array([NOW - 120_000_000_000 // 1000], pa.timestamp("us", tz="UTC"))  # -120 s
    with pytest.raises(InvalidRecordError, match=r"retention.ms \(60000 ms, 1 minutes\)"):
        _stage(tmp_path, _rows(ts), **{"topic.retention.ms": "-1"})  # only for new topics
    fresh = pa.array([(NOW - 30_000) * 1000], pa.timestamp("us", tz="UTC"))
    assert _stage(tmp_path, _rows(fresh))[1].records == 1


def test_min_timestamp_of_every_column_type_in_ms():
    assert min_timestamp_ms(pa.array([5, 3, None], pa.int64())) == 3
    assert min_timestamp_ms(pa.array([None], pa.int64())) is None
    assert min_timestamp_ms(pa.array([2], pa.timestamp("s"))) == 2000
    assert min_timestamp_ms(pa.array([1999], pa.timestamp("us", tz="UTC"))) == 1
    assert min_timestamp_ms(pa.array([-1], pa.timestamp("us"))) == -1  # rounded down
    assert min_timestamp_ms(pa.chunked_array([[7_000_000], [9_000_000]],
                                             pa.timestamp("ns"))) == 7


def test_an_explicit_partition_count_must_match_an_existing_topic(tmp_path):
    with LogManager([tmp_path]) as mgr:
        mgr.create_topic("t", 2)
    batch = pa.record_batch({"value": pa.array([b"a", b"b"]),
                             "topic": pa.array(["t", "t"])})
    opts = SinkOptions.parse({"path": str(tmp_path), "numPartitions": "3"})
    cols = SinkColumns.resolve(batch.schema, default_topic=None)
    with pytest.raises(ConfigError, match="'numPartitions' is 3 but topic 't' already exists "
                                          "with 2 partition"):
        stage_rows(opts, cols, [batch], "sink", 0, 0, 0)
    same = SinkOptions.parse({"path": str(tmp_path), "numPartitions": "2"})
    assert stage_rows(same, cols, [batch], "sink", 0, 0, 0).records == 2
    unset = SinkOptions.parse({"path": str(tmp_path)})
    assert stage_rows(unset, cols, [batch], "sink", 1, 0, 0).records == 2


def test_creating_a_topic_logs_the_retention_in_force(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="seglog.logstore.manager.log_manager")
    with LogManager([tmp_path]) as mgr:
        mgr.create_topic("a", 2)
        mgr.create_topic("b", 1, {"retention.ms": "-1"})
    lines = [r.getMessage() for r in caplog.records if "created topic" in r.getMessage()]
    assert "created topic a with 2 partition(s)" in lines[0]
    assert "retention.ms=604800000 (7 days: older records are deleted)" in lines[0]
    assert "retention.ms=-1, cleanup.policy=delete" in lines[1]
    # the sink creates topics through the same call, with its topic.* options
    caplog.clear()
    batch = _rows(pa.array([NOW], pa.int64()))
    opts, staged = _stage(tmp_path, batch, **{"topic": "c", "topic.retention.ms": "3600000"})
    commit([staged], 0, opts, clock=MockClock(NOW))
    assert any("created topic c" in r.getMessage() and "retention.ms=3600000 (0.0417 days"
               in r.getMessage() for r in caplog.records)
