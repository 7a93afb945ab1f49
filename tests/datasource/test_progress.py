"""``SeglogLagListener``: offsets behind latest per partition and their avg/max/min, from
Spark's progress events (the metrics Spark's Kafka source reports)."""

from __future__ import annotations

import json
import time

import pytest

from seglog.datasource.progress import SeglogLagListener, SourceLag, lags_of_progress

PYTHON_SOURCE = "org.apache.spark.sql.execution.datasources.v2.python.PythonMicroBatchStream@1"


def _progress(*sources: dict) -> dict:
    return {"id": "q-1", "name": "lagging", "batchId": 4, "sources": list(sources)}


def test_lag_per_partition_and_kafkas_metric_names():
    progress = _progress(
        {"description": PYTHON_SOURCE, "endOffset": {"t": {"0": 15, "1": 15}},
         "latestOffset": json.dumps({"t": {"0": 51, "1": 49}, "$lastTriggerMs": 7})},
        {"description": "KafkaV2[Subscribe[t]]", "endOffset": {"t": {"0": 1}},
         "latestOffset": {"t": {"0": 9}}},
        {"description": PYTHON_SOURCE, "endOffset": {"other": "shape"},
         "latestOffset": {"t": {"0": 9}}},
        {"description": PYTHON_SOURCE, "endOffset": None, "latestOffset": None},
    )
    [lag] = lags_of_progress(progress)
    assert lag == SourceLag("q-1", "lagging", 4, 0, {("t", 0): 36, ("t", 1): 34})
    assert lag.metrics() == {"avgOffsetsBehindLatest": "35.0",
                             "maxOffsetsBehindLatest": "36", "minOffsetsBehindLatest": "34"}
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


@pytest.mark.spark
def test_listener_reports_lag_of_a_running_stream(spark, tmp_path):
    logs = tmp_path / "logs"
    (spark.range(0, 100, numPartitions=2).selectExpr("cast(id AS string) AS value")
     .write.format("seglog").option("path", str(logs)).option("topic", "t")
     .option("numPartitions", "2").mode("append").save())
    lags: list[SourceLag] = []
    listener = SeglogLagListener(lags.append)
    spark.streams.addListener(listener)
    try:
        q = (spark.readStream.format("seglog").option("path", str(logs))
             .option("subscribe", "t").option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "30").load()
             .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "chk"))
             .trigger(availableNow=True).start())
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
    assert last.metrics() == {"avgOffsetsBehindLatest": "0.0",
                              "maxOffsetsBehindLatest": "0", "minOffsetsBehindLatest": "0"}
