"""``SeglogLagListener``: offsets behind latest per partition and their avg/max/min, from
Spark's progress events (the metrics Spark's Kafka source reports); and ``seglog lag``
on the checkpoint of that same real query (its hand-made checkpoints are in
``tests/cli/test_cli_lag.py``: one streaming query carries both, as each costs ~13 s of
fixed start-up)."""

from __future__ import annotations

import io
import json
import time

import pyarrow as pa
import pytest

from seglog.cli import main as seglog_main
from seglog.datasource.progress import SeglogLagListener, SourceLag, lags_of_progress
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches

PYTHON_SOURCE = "org.apache.spark.sql.execution.datasources.v2.python.PythonMicroBatchStream@1"


def _progress(*sources: dict) -> dict:
    return {"id": "q-1", "name": "lagging", "batchId": 4, "sources": list(sources)}


def test_lag_per_partition_and_kafkas_metric_names():
    progress = _progress(
        {
            "description": PYTHON_SOURCE,
            "endOffset": {"t": {"0": 15, "1": 15}},
            "latestOffset": json.dumps({"t": {"0": 51, "1": 49}, "$lastTriggerMs": 7}),
        },
        {
            "description": "KafkaV2[Subscribe[t]]",
            "endOffset": {"t": {"0": 1}},
            "latestOffset": {"t": {"0": 9}},
        },
        {
            "description": PYTHON_SOURCE,
            "endOffset": {"other": "shape"},
            "latestOffset": {"t": {"0": 9}},
        },
        {"description": PYTHON_SOURCE, "endOffset": None, "latestOffset": None},
    )
    [lag] = lags_of_progress(progress)
    assert lag == SourceLag("q-1", "lagging", 4, 0, {("t", 0): 36, ("t", 1): 34})
    assert lag.metrics() == {
        "avgOffsetsBehindLatest": "35.0",
        "maxOffsetsBehindLatest": "36",
        "minOffsetsBehindLatest": "34",
    }
    empty = SourceLag("q", None, 0, 0, {})
    assert empty.metrics() == {} and empty.max_offsets_behind is None


def test_a_failing_callback_is_logged_and_the_listener_goes_on(caplog):
    seen = []

    def callback(lag: SourceLag) -> None:
        seen.append(lag)
        raise RuntimeError("dashboard down")

    listener = SeglogLagListener(callback)
    lag = SourceLag("q", None, 0, 0, {("t", 0): 1})
    listener.report([lag, lag])
    assert seen == [lag, lag]
    assert sum("callback failed" in r.getMessage() for r in caplog.records) == 2


def _seglog_lag(*argv: str) -> dict:
    out = io.StringIO()
    assert seglog_main(["lag", *argv, "--json"], out) == 0
    return json.loads(out.getvalue())


@pytest.mark.spark
def test_listener_and_seglog_lag_report_lag_of_a_real_stream(spark, tmp_path):
    logs = tmp_path / "logs"
    (
        spark.range(0, 100, numPartitions=2)
        .selectExpr("cast(id AS string) AS value")
        .write.format("seglog")
        .option("path", str(logs))
        .option("topic", "t")
        .option("numPartitions", "2")
        .mode("append")
        .save()
    )
    lags: list[SourceLag] = []
    listener = SeglogLagListener(lags.append)
    spark.streams.addListener(listener)
    try:
        q = (
            spark.readStream.format("seglog")
            .option("path", str(logs))
            .option("subscribe", "t")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "30")
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path / "chk"))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(240)
        progress = [json.loads(p.json) for p in q.recentProgress]
        deadline = time.monotonic() + 60  # listener events are delivered asynchronously
        while len(lags) < len(progress) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        spark.streams.removeListener(listener)
    assert len(progress) == 4  # 100 records, 30 per trigger
    assert lags == [lag for p in progress for lag in lags_of_progress(p)]
    assert [lag.batch_id for lag in lags] == [0, 1, 2, 3]
    first, last = lags[0], lags[-1]
    latest = {("t", 0), ("t", 1)}
    assert set(first.offsets_behind) == latest
    assert sum(first.offsets_behind.values()) == 70  # 30 of 100 read
    assert last.metrics() == {
        "avgOffsetsBehindLatest": "0.0",
        "maxOffsetsBehindLatest": "0",
        "minOffsetsBehindLatest": "0",
    }

    # seglog lag reads the same query's checkpoint: all committed, nothing behind ...
    chk = tmp_path / "chk"
    with LogManager([logs], read_only=True) as mgr:
        ends = mgr.high_watermarks()
    doc = _seglog_lag("--checkpoint", str(chk), "--path", str(logs))
    assert doc["committedBatch"] == 3 and doc["pendingBatch"] is None
    assert [(r["partition"], r["committed"], r["end"], r["lag"]) for r in doc["partitions"]] == [
        (p, ends[("t", p)], ends[("t", p)], 0) for p in (0, 1)
    ]
    # ... until the topic grows past it
    with LogManager([logs]) as mgr:
        mgr.append("t", 1, encode_batches(pa.array([b"more"] * 5)))
        mgr.checkpoint_high_watermarks()
    doc = _seglog_lag("--checkpoint", str(chk), "--path", str(logs))
    assert doc["totalLag"] == 5 and doc["partitions"][1]["lag"] == 5
