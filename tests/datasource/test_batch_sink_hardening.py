"""The sink through Spark: the longest legal topic name end to end, log dirs checked on
the driver, and refused input (negative timestamps, null keys for a new compacted topic)
that leaves nothing behind, as a reader and ``seglog check`` both see."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest
from _sink_checks import staging_files

from seglog.cli import main as seglog_main
from seglog.logstore.config.topics import MAX_NAME_LENGTH
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.util.clock import MockClock
from seglog.streaming.sink_commit import STAGING_TTL_MS, sweep_staging

pytestmark = pytest.mark.spark

LONGEST = ("sink.long_name-" * 20)[:MAX_NAME_LENGTH]


def _write(df, path: Path, topic: str, **options: str) -> None:
    w = df.write.format("seglog").option("path", str(path)).option("topic", topic)
    for k, v in options.items():
        w = w.option(k, v)
    w.mode("append").save()


def _check_says(path: Path, end: int) -> None:
    out = io.StringIO()
    seglog_main(["check", str(path)], out)
    assert f"log end offset {end}: OK" in out.getvalue(), out.getvalue()


def test_the_longest_topic_is_written_read_and_deleted(spark, tmp_path: Path) -> None:
    df = spark.range(0, 200, numPartitions=2).selectExpr("cast(id as string) AS value")
    _write(df, tmp_path, LONGEST, numPartitions="2")
    back = spark.read.format("seglog").option("path", str(tmp_path)) \
        .option("subscribe", LONGEST).load()
    assert back.count() == 200
    assert staging_files(tmp_path) == []
    with LogManager([tmp_path], clock=MockClock(1_700_000_000_000)) as mgr:
        mgr.delete_topic(LONGEST)
        assert mgr.topics() == []
    assert max(len(p.name) for p in tmp_path.rglob("*")) <= 255


def test_a_path_that_is_a_file_fails_on_the_driver(spark, tmp_path: Path) -> None:
    a_file = tmp_path / "not-a-dir"
    a_file.write_text("x")
    df = spark.range(0, 5).selectExpr("cast(id as string) AS value")
    with pytest.raises(Exception, match=rf"option 'path': {a_file} is a file"):
        _write(df, a_file, "t")
    with pytest.raises(Exception, match=rf"option 'path': cannot create log dir "
                                        rf"{a_file}/logs: {a_file} is a file"):
        _write(df, a_file / "logs", "t")


def test_refused_rows_leave_no_topic_and_nothing_visible(spark, tmp_path: Path) -> None:
    keyed = spark.range(0, 10, numPartitions=2).selectExpr(
        "CASE WHEN id = 7 THEN NULL ELSE cast(id as string) END AS key",
        "cast(id as string) AS value")
    with pytest.raises(Exception, match=r"compacted .* null key"):
        _write(keyed, tmp_path, "compacted", **{"topic.cleanup.policy": "compact"})
    _write(spark.range(0, 3).selectExpr("cast(id as string) AS value"), tmp_path, "events")
    negative = spark.range(0, 10, numPartitions=1).selectExpr(
        "cast(id as string) AS value",
        "CASE WHEN id = 4 THEN -5000 ELSE unix_millis(current_timestamp()) END AS timestamp")
    with pytest.raises(Exception, match=r"column 'timestamp': row 4 \(topic-partition "
                                        r"events-0\) has timestamp -5000 ms"):
        _write(negative, tmp_path, "events")
    with LogManager([tmp_path], read_only=True) as reader:
        assert reader.topics() == ["events"]
        assert reader.high_watermarks() == {("events", 0): 3}
    # Spark calls abort() as soon as the job fails, while it may still be cancelling a
    # task of that job: such a task can stage after abort() ran. Its file belongs to the
    # aborted job's sink and batch, and the staging sweep collects it.
    leftovers = staging_files(tmp_path)
    assert all(p.parent.name == "0" and p.parent.parent.name.startswith("job-")
               for p in leftovers), leftovers
    later = MockClock(int(time.time() * 1000) + STAGING_TTL_MS + 60_000)
    assert sweep_staging([str(tmp_path)], "job-writing-now", 0, clock=later) == len(leftovers)
    assert staging_files(tmp_path) == []
    _check_says(tmp_path, 3)
