"""The sink's refusals without Spark: unusable log dirs (checked on the driver), negative
timestamps, null keys for a compacted topic, and a failed write that created a topic."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

import pyarrow as pa
import pytest

from seglog.cli import main as seglog_main
from seglog.logstore.errors import InvalidRecordError, LogDirError
from seglog.logstore.manager.log_manager import LogManager
from seglog.streaming.sink_commit import commit
from seglog.streaming.sink_local_staging import stage_rows
from seglog.streaming.sink_options import SinkColumns, SinkOptions, check_log_dirs

NOW = 1_700_000_000_000


@pytest.fixture
def immutable(tmp_path):
    """``chattr +i`` on a directory: even root cannot create or rename inside it."""
    made = []

    def make(path: Path) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.skip(f"chattr +i refused here: {proc.stderr.strip()}")
        made.append(path)
        return path

    yield make
    for path in made:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_log_dirs_are_checked_with_the_option_named(tmp_path, immutable):
    check_log_dirs((str(tmp_path / "new" / "deeper"),), "path")  # creatable: fine
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(LogDirError, match=rf"option 'path': {a_file} is a file"):
        check_log_dirs((str(a_file),), "path")
    with pytest.raises(LogDirError, match=rf"option 'logDirs': cannot create log dir "
                                          rf"{a_file}/sub: {a_file} is a file"):
        check_log_dirs((str(tmp_path), str(a_file / "sub")), "logDirs")
    locked = immutable(tmp_path / "locked")
    with pytest.raises(LogDirError, match=rf"option 'path': log dir {locked} is not writable"):
        check_log_dirs((str(locked),), "path")
    with pytest.raises(LogDirError, match=rf"cannot create log dir {locked}/sub: {locked} is "
                                          "not writable"):
        check_log_dirs((str(locked / "sub"),), "path")


def _stage(opts: SinkOptions, data: pa.RecordBatch, sink: str = "job-1"):
    cols = SinkColumns.resolve(data.schema, default_topic=opts.topic)
    return stage_rows(opts, cols, [data], sink, 0, 0, 0)


@pytest.mark.parametrize("ts", [-1, -5000])
def test_negative_timestamps_are_refused_naming_column_row_and_partition(tmp_path, ts):
    opts = SinkOptions.parse({"path": str(tmp_path), "topic": "t", "numPartitions": "2"})
    data = pa.record_batch({
        "value": pa.array([b"a", b"b", b"c"]),
        "partition": pa.array([0, 0, 1], pa.int32()),
        "Timestamp": pa.array([NOW, None, ts], pa.int64()),
    })
    with pytest.raises(InvalidRecordError,
                       match=rf"column 'Timestamp': row 2 \(topic-partition t-1\) has "
                             rf"timestamp {ts} ms"):
        _stage(opts, data)
    spark_ts = data.set_column(2, "Timestamp", pa.array([0, ts * 1000, 5], pa.timestamp("us")))
    with pytest.raises(InvalidRecordError, match=r"row 1 \(topic-partition t-0\)"):
        _stage(opts, spark_ts)
    assert not list(tmp_path.rglob("*.stage"))  # nothing staged, nothing to publish


def test_null_keys_for_a_new_compacted_topic_fail_in_the_task(tmp_path):
    opts = SinkOptions.parse({"path": str(tmp_path), "topic": "c",
                              "topic.cleanup.policy": "compact"})
    data = pa.record_batch({"key": pa.array([b"k", None]), "value": pa.array([b"1", b"2"])})
    with pytest.raises(InvalidRecordError, match=r"c-0 is compacted .* 1 row\(s\) have a null"):
        _stage(opts, data)
    with LogManager([tmp_path], read_only=True) as mgr:
        assert mgr.topics() == []


def test_a_commit_that_fails_deletes_the_topic_it_created(tmp_path):
    """A failure the tasks cannot see (the Log refuses old CreateTime timestamps at
    append): the topic the commit created goes again; an existing one stays."""
    opts = SinkOptions.parse({"path": str(tmp_path), "topic": "new",
                              "topic.message.timestamp.before.max.ms": "1000",
                              "allowExpiredTimestamps": "true"})
    old = pa.record_batch({"value": pa.array([b"1"]), "timestamp": pa.array([5], pa.int64())})
    staged = _stage(opts, old)
    with pytest.raises(InvalidRecordError):
        commit([staged], 0, opts, use_ledger=False)
    with LogManager([tmp_path], read_only=True) as mgr:
        assert mgr.topics() == []
    with LogManager([tmp_path]) as mgr:
        mgr.create_topic("new", 1, {"message.timestamp.before.max.ms": "1000"})
    with pytest.raises(InvalidRecordError):
        commit([_stage(opts, old, "job-2")], 0, opts, use_ledger=False)
    with LogManager([tmp_path], read_only=True) as mgr:
        assert mgr.topics() == ["new"] and mgr.high_watermarks() == {("new", 0): 0}
    out = io.StringIO()
    assert seglog_main(["check", str(tmp_path)], out) == 0, out.getvalue()
    assert "log end offset 0: OK" in out.getvalue()
