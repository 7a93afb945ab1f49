"""The options Spark itself passes to a Python data source, and errors as the user reads
them, end to end in Spark.

PySpark 4.3 passes (logged from real queries, batch and streaming, classic and Connect):
``path`` from ``load(dir)``, ``save(dir)``, ``start(dir)``; ``paths`` (a JSON array) from
``load(dir1, dir2)``; ``queryName`` and ``checkpointLocation`` (the latter only when given
with ``option()``) to a stream's writer. Nothing else: the session's
``spark.sql.streaming.checkpointLocation`` is not passed, and ``partitionBy`` on a batch
write is refused by Spark itself before the sink sees it."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from seglog.datasource.progress import SeglogLagListener, SourceLag

pytestmark = pytest.mark.spark


def _write(spark, path: Path, topic: str, n: int, partitions: int = 1) -> None:
    (
        spark.range(0, n, numPartitions=1)
        .selectExpr("cast(id AS string) AS value")
        .write.format("seglog")
        .option("topic", topic)
        .option("numPartitions", str(partitions))
        .mode("append")
        .save(str(path))
    )  # save(path): Spark's 'path'


def _first_line_names(error: BaseException, message: str) -> None:
    """seglog's message is on the first line the user reads, and no traceback follows."""
    text = str(error)
    assert message in text.splitlines()[0], text[:2000]
    assert "Traceback" not in text, text[:2000]


def test_a_named_query_from_and_to_paths_spark_passes(spark, tmp_path):
    logs = tmp_path / "logs"
    _write(spark, logs, "in", 20)
    lags: list[SourceLag] = []
    listener = SeglogLagListener(lags.append)
    spark.streams.addListener(listener)
    try:
        q = (
            spark.readStream.format("seglog")
            .option("subscribe", "in")
            .option("startingOffsets", "earliest")
            .load(str(logs))  # load(path)
            .select("value")
            .writeStream.format("seglog")
            .queryName("copy_in")
            .option("topic", "out")
            .option("checkpointLocation", str(tmp_path / "chk"))
            .trigger(availableNow=True)
            .start(str(logs))
        )  # start(path)
        q.awaitTermination(240)
        assert q.exception() is None
        deadline = time.monotonic() + 60  # listener events are delivered asynchronously
        while not lags and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        spark.streams.removeListener(listener)
    assert q.name == "copy_in"
    assert lags and {lag.query_name for lag in lags} == {"copy_in"}
    out = spark.read.format("seglog").option("subscribe", "out").load(str(logs)).collect()
    assert sorted(int(r.value) for r in out) == list(range(20))


def test_load_of_several_log_dirs(spark, tmp_path):
    _write(spark, tmp_path / "a", "left", 3)
    _write(spark, tmp_path / "b", "right", 4)
    both = (
        spark.read.format("seglog")
        .option("subscribe", "left,right")
        .load([str(tmp_path / "a"), str(tmp_path / "b")])
    )  # Spark's 'paths'
    assert sorted((r.topic, int(r.value)) for r in both.collect()) == [
        ("left", i) for i in range(3)
    ] + [("right", i) for i in range(4)]


def test_batch_read_errors_come_in_one_line(spark, tmp_path):
    _write(spark, tmp_path, "events", 4, partitions=2)
    future = str(int(time.time() * 1000) + 10**9)
    with pytest.raises(Exception) as e:  # checked at load(), before any plan
        spark.read.format("seglog").option("subscribe", "events").load(str(tmp_path / "nope"))
    _first_line_names(
        e.value, f"LogDirError: option 'path': log dir {tmp_path / 'nope'} does not exist"
    )
    cases = [
        (
            {"subscribe": "events", "startingOffsets": json.dumps({"events": {"0": 1}})},
            "ConfigError: option 'startingOffsets' must name every subscribed partition",
        ),
        (
            {"subscribe": "events", "startingTimestamp": future},
            f"option 'startingTimestamp': no record with a timestamp at or after {future}",
        ),
        (
            {"assign": json.dumps({"events": [0, 7]})},
            "option 'assign' names [events-7], which do not exist",
        ),
        (
            {"subscribe": "evnets"},
            "option 'subscribe' names topic 'evnets' (closest: 'events'), which does not exist",
        ),
    ]
    for options, message in cases:
        with pytest.raises(Exception) as e:
            # a fresh reader each time: a DataFrameReader keeps the options given to it
            spark.read.format("seglog").options(**options).load(str(tmp_path)).collect()
        _first_line_names(e.value, message)


def test_stream_errors_come_in_one_line(spark, tmp_path):
    _write(spark, tmp_path, "events", 4, partitions=2)
    with pytest.raises(Exception) as e:  # checked at load(), before start()
        (
            spark.readStream.format("seglog")
            .option("subscribe", "events")
            .load(str(tmp_path / "nope"))
        )
    _first_line_names(e.value, "option 'path': log dir")
    cases = [
        (
            {"startingOffsets": json.dumps({"events": {"0": 1}})},
            "ConfigError: option 'startingOffsets' must name every subscribed partition",
        ),
        (
            {"startingTimestamp": str(int(time.time() * 1000) + 10**9)},
            "OffsetOutOfRangeError: option 'startingTimestamp': no record",
        ),
    ]
    for i, (options, message) in enumerate(cases):
        q = (
            spark.readStream.format("seglog")
            .option("subscribe", "events")
            .options(**options)
            .load(str(tmp_path))
            .writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path / f"chk{i}"))
            .trigger(availableNow=True)
            .start()
        )
        try:
            with pytest.raises(Exception) as e:
                q.awaitTermination(240)
        finally:
            q.stop()
        _first_line_names(e.value, message)
