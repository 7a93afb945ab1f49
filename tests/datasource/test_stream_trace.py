"""``SEGLOG_TRACE_FILE`` in a real query: the source's read and the sink's write (tasks)
and commit (driver) of every micro-batch are traced under Spark's batch ids, in the order
they ran, so ``benchmarks/bench_e2e_latency.py`` can split ``addBatch``."""

from __future__ import annotations

from pathlib import Path

import pytest
from _bucket_checks import forget_worker_env, point_workers_at

from seglog.streaming.step_trace import TRACE_ENV, read_trace

pytestmark = pytest.mark.spark


def test_each_micro_batch_traces_its_read_write_and_commit(spark, tmp_path: Path) -> None:
    path = str(tmp_path / "logs")
    (
        spark.range(0, 300, numPartitions=2)
        .selectExpr("cast(id % 7 as string) AS key", "cast(id as string) AS value")
        .write.format("seglog")
        .option("path", path)
        .option("topic", "in")
        .option("numPartitions", "2")
        .mode("append")
        .save()
    )
    trace = tmp_path / "trace.jsonl"
    point_workers_at(spark, {TRACE_ENV: str(trace)})
    try:
        q = (
            spark.readStream.format("seglog")
            .option("path", path)
            .option("subscribe", "in")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "120")
            .load()
            .select("key", "value")
            .writeStream.format("seglog")
            .option("path", path)
            .option("topic", "out")
            .option("checkpointLocation", str(tmp_path / "chk"))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(240)
        assert q.exception() is None
    finally:
        forget_worker_env(spark, [TRACE_ENV])
    batches = sorted(p["batchId"] for p in q.recentProgress if p["numInputRows"] > 0)
    assert batches == [0, 1, 2]  # 300 records, 120 a trigger

    steps = read_trace(str(trace))
    for b in batches:
        of = {
            s: [t for t in steps if t.batch == b and t.step == s]
            for s in ("read", "write", "commit")
        }
        # One task per topic partition: each reads and writes once; one commit.
        assert sorted(t.partition for t in of["read"]) == [0, 1], b
        assert sorted(t.partition for t in of["write"]) == [0, 1], b
        assert len(of["commit"]) == 1, b
        commit = of["commit"][0]
        assert commit.partition is None
        assert all(t.start_ns <= t.end_ns for ts in of.values() for t in ts)
        # The commit runs on the driver after every task's write returned.
        assert commit.start_ns >= max(t.end_ns for t in of["write"]), b
        assert commit.pid not in {t.pid for t in of["write"]}
    assert {t.batch for t in steps} == set(batches)
