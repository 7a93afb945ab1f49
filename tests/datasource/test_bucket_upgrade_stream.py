"""A seglog -> seglog streaming query on a bucket written before per-topic commit logs:
its sink's commit of micro-batch 1 lands in the catalog log and the driver is SIGKILLed
right after; ``seglog upgrade`` then moves both topics into their own logs; the query
restarted from its checkpoint replays batch 1 (its ledger moved with the topic: nothing
published twice), reads on from the moved source topic, and commits its next batches to
the topics' own logs, never the catalog. Real S3 server (moto), the shared Spark session."""

from __future__ import annotations

import collections

import pytest
from _bucket_checks import (
    bucket_records,
    check_offsets,
    forget_worker_env,
    point_workers_at,
    run_in_to_out,
)

from seglog.logstore.bucket.bucket_manager import BucketLogManager

pytestmark = pytest.mark.spark

N = 3000


@pytest.fixture
def bucket(spark, s3_uri, bucket_server):
    point_workers_at(spark, dict(bucket_server.env))
    yield s3_uri
    forget_worker_env(spark, ["SEGLOG_CRASH_AT", "SEGLOG_CRASH_ONCE"])


def test_a_query_restarted_after_the_upgrade_is_exactly_once(spark, bucket, tmp_path):
    with BucketLogManager(bucket, topic_logs=False) as old:  # as seglog before wrote it
        old.create_topic("in", 3)
        old.create_topic("out", 2)
    (
        spark.range(0, N, numPartitions=3)
        .selectExpr("cast(id % 17 AS string) AS key", "concat('e', id) AS value")
        .write.format("seglog")
        .option("path", bucket)
        .option("topic", "in")
        .mode("append")
        .save()
    )
    crashed = tmp_path / "crashed"
    point_workers_at(
        spark, {"SEGLOG_CRASH_AT": "bucket-after-commit@1", "SEGLOG_CRASH_ONCE": str(crashed)}
    )
    assert run_in_to_out(spark, bucket, tmp_path / "chk") is not None
    assert crashed.exists(), "the commit was never killed"
    forget_worker_env(spark, ["SEGLOG_CRASH_AT", "SEGLOG_CRASH_ONCE"])
    with BucketLogManager(bucket) as mgr:
        assert mgr.commits.topic_log("out") is None  # batch 1 landed in the catalog
        report = mgr.upgrade_topic_logs()
    assert [m.topic for m in report.moved] == ["in", "out"]

    assert run_in_to_out(spark, bucket, tmp_path / "chk") is None  # restarted from the checkpoint
    expected = collections.Counter((str(i % 17).encode(), f"out-e{i}".encode()) for i in range(N))
    records = bucket_records(bucket, "out", tmp_path / "export")
    assert collections.Counter((r[2], r[3]) for r in records) == expected
    check_offsets(records)
    with BucketLogManager(bucket, read_only=True) as mgr:
        assert mgr.commits.catalog.state.version == report.catalog_version  # own logs only
        out = mgr.commits.topic_log("out")
        assert out is not None
        (ledger,) = out.state.sinks.values()
        assert ledger["batch_id"] == 2  # batch 2 committed in the topic's own log
