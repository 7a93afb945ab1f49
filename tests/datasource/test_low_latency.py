"""docs/operations.md's low-latency settings (``LOW_LATENCY_SPARK_CONF``): a query that
runs with them keeps its exactly-once restart; ``SEGLOG_TRACE_FILE`` in that same query
traces the source's read and the sink's write (tasks) and commit (driver) of every
micro-batch under Spark's batch ids, in the order they ran; and the latency benchmark's
split of ``addBatch`` joins the traced steps to Spark's progress as documented.

One streaming query carries the settings' and the trace's assertions: each query costs
~13 s of fixed start-up, and the trace does not depend on the checkpoint manager."""

from __future__ import annotations

import collections
import importlib
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest
from _bucket_checks import forget_worker_env, point_workers_at
from _sink_checks import kafka_python_records, multiset

from seglog.datasource import LOW_LATENCY_SPARK_CONF
from seglog.streaming.step_trace import TRACE_ENV, StepTime, read_trace

ROOT = Path(__file__).resolve().parents[2]


def _write_input(spark, path: str, start: int, end: int) -> None:
    (
        spark.range(start, end, numPartitions=2)
        .selectExpr("cast(id % 5 as string) AS key", "concat('v', id) AS value")
        .write.format("seglog")
        .option("path", path)
        .option("topic", "in")
        .option("numPartitions", "2")
        .mode("append")
        .save()
    )


@pytest.mark.spark
def test_a_query_with_the_recommended_settings_traces_its_steps_and_restarts_exactly_once(
    spark, tmp_path: Path
) -> None:
    path, chk = str(tmp_path / "logs"), str(tmp_path / "chk")
    _write_input(spark, path, 0, 500)
    before = {k: spark.conf.get(k, None) for k in LOW_LATENCY_SPARK_CONF}
    for k, v in LOW_LATENCY_SPARK_CONF.items():
        spark.conf.set(k, v)

    def run() -> list[int]:
        q = (
            spark.readStream.format("seglog")
            .option("path", path)
            .option("subscribe", "in")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "200")
            .load()
            .select("key", "value")
            .writeStream.format("seglog")
            .option("path", path)
            .option("topic", "out")
            .option("checkpointLocation", chk)
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(240)
        assert q.exception() is None
        return sorted(p["batchId"] for p in q.recentProgress if p["numInputRows"] > 0)

    trace = tmp_path / "trace.jsonl"
    try:
        point_workers_at(spark, {TRACE_ENV: str(trace)})
        try:
            traced = run()
        finally:
            forget_worker_env(spark, [TRACE_ENV])
        steps = read_trace(str(trace))  # the first run's steps
        _write_input(spark, path, 500, 700)
        run()  # from the checkpoint those settings wrote
    finally:
        for k, v in before.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)
    expected = collections.Counter((str(i % 5).encode(), f"v{i}".encode()) for i in range(700))
    assert multiset(kafka_python_records(Path(path), "out"), (2, 3)) == expected
    # Spark's offset and commit logs, one file per micro-batch: 4 of 200, 1 of 200.
    assert sorted(int(f.name) for f in (Path(chk) / "commits").iterdir() if f.name.isdigit()) == [
        0,
        1,
        2,
        3,
    ]

    assert traced == [0, 1, 2]  # 500 records, 200 a trigger
    for b in traced:
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
    assert {t.batch for t in steps} == set(traced)


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """``benchmarks/bench_e2e_latency.py``, imported with its changes to ``sys.path``
    and the environment undone afterwards."""
    monkeypatch.setattr(sys, "path", [str(ROOT), *sys.path])
    for name in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
        if name in os.environ:
            monkeypatch.setenv(name, os.environ[name])
        else:
            monkeypatch.delenv(name, raising=False)
    return importlib.import_module("benchmarks.bench_e2e_latency")


def _step(step: str, batch: int, start_ms: float, end_ms: float, part: int | None = 0) -> StepTime:
    base = 1_000_000_000_000_000_000
    return StepTime(step, batch, part, base + int(start_ms * 1e6), base + int(end_ms * 1e6), 1)


def test_the_benchmark_splits_add_batch_by_the_traced_steps(bench: ModuleType) -> None:
    progress = [
        {"batchId": 4, "durationMs": {"addBatch": 100}},
        {"batchId": 5, "durationMs": {"addBatch": 60}},
        {"batchId": 6, "durationMs": {"addBatch": 50}},  # no commit traced: left out
    ]
    steps = [
        # batch 4: addBatch [0, 100]: tasks read [30, 40] and [35, 45], write until 52,
        # the commit [70, 98] (addBatch ends 2 ms after it returns)
        _step("read", 4, 30, 40, 0),
        _step("read", 4, 35, 45, 1),
        _step("write", 4, 31, 50, 0),
        _step("write", 4, 36, 52, 1),
        _step("commit", 4, 70, 100, None),
        # batch 5: addBatch [200, 260]
        _step("read", 5, 210, 214),
        _step("write", 5, 211, 220),
        _step("commit", 5, 230, 260, None),
        _step("read", 6, 300, 301),
        _step("write", 6, 300, 302),
    ]
    split = bench.split_add_batch(progress, steps)
    assert split.pop("micro-batches") == 2
    want = {
        "launch": (30 + 10) / 2,
        "read": (15 + 4) / 2,
        "write": (7 + 6) / 2,
        "to commit": (18 + 10) / 2,
        "commit": (30 + 30) / 2,
        "addBatch": (100 + 60) / 2,
    }
    assert split == pytest.approx(want)
    assert bench.split_add_batch(progress[2:], steps) == {}
