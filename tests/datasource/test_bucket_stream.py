"""The source and the exactly-once sink on a bucket (a real S3 server on 127.0.0.1: moto,
or SeaweedFS for the first test where it installs), in the shared session: a batch
write, a seglog -> transform -> seglog stream whose commit is SIGKILLed after its
conditional PUT and which is restarted from its checkpoint, batch reads; what the bucket
holds is read back by kafka-python."""

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
from _sink_checks import kafka_partition

from seglog.logstore.manager.log_manager import LogManager
from seglog.streaming.sink_staging import producer_id_of

pytestmark = pytest.mark.spark

N = 3000


@pytest.fixture(params=["s3"])
def bucket(spark, request, tmp_path):
    """A fresh bucket on moto (``s3``), or on SeaweedFS where a test parametrizes it
    with ``seaweedfs-else-s3`` (moto where SeaweedFS does not install); Spark's Python
    workers get the server's ``AWS_*`` variables."""
    from s3_server import seaweed_unavailable

    on_moto = request.param == "s3" or seaweed_unavailable() is not None
    uri = request.getfixturevalue("s3_uri" if on_moto else "seaweed_uri")
    server = request.getfixturevalue("bucket_server" if on_moto else "seaweed_server")
    point_workers_at(spark, dict(server.env))
    yield uri
    forget_worker_env(spark, ["SEGLOG_CRASH_AT", "SEGLOG_CRASH_ONCE"])


# One server, not both: the Spark run costs ~40 s, and seglog's requests are the same on
# either; SeaweedFS's are the production server's answers (and its folder markers), moto
# serves every other bucket test (SEGLOG_TEST_S3_SERVER=seaweedfs moves them all).
@pytest.mark.parametrize("bucket", ["seaweedfs-else-s3"], indirect=True)
def test_pipeline_on_a_bucket_is_exactly_once_across_a_killed_commit(spark, bucket, tmp_path):
    (
        spark.range(0, N, numPartitions=3)
        .selectExpr("cast(id % 17 AS string) AS key", "concat('e', id) AS value")
        .write.format("seglog")
        .option("path", bucket)
        .option("topic", "in")
        .option("numPartitions", "3")
        .mode("append")
        .save()
    )
    crashed = tmp_path / "crashed"
    point_workers_at(
        spark, {"SEGLOG_CRASH_AT": "bucket-after-commit@1", "SEGLOG_CRASH_ONCE": str(crashed)}
    )
    first = run_in_to_out(spark, bucket, tmp_path / "chk")
    assert crashed.exists(), "the commit was never killed"
    assert first is not None
    forget_worker_env(spark, ["SEGLOG_CRASH_AT", "SEGLOG_CRASH_ONCE"])
    assert run_in_to_out(spark, bucket, tmp_path / "chk") is None  # restarted from the checkpoint

    expected = collections.Counter((str(i % 17).encode(), f"out-e{i}".encode()) for i in range(N))
    records = bucket_records(bucket, "out", tmp_path / "export")
    assert collections.Counter((r[2], r[3]) for r in records) == expected
    check_offsets(records)
    assert all(p == kafka_partition(k, 2) for p, _, k, _, _ in records)
    with LogManager(bucket, read_only=True) as mgr:
        (sink_id,) = [s for s in mgr.state.sinks]
        assert mgr.state.sinks[sink_id]["batch_id"] == 2  # three micro-batches, 0..2
        # Every commit of every log: the catalog's and each topic's own.
        logs = [mgr.commits.catalog, *mgr.commits.logs().values()]
        ops = [
            mgr.storage.read(log.layout.commit_key(v))
            for log in logs
            for v in range(log.state.version + 1)
        ]
    assert {r[4] for r in records} == {producer_id_of(sink_id)}
    assert sum(b'"operation":"sink_append"' in o for o in ops) == 4  # 3 streaming + 1 batch
    # batch reads of the bucket, through Spark
    out = spark.read.format("seglog").option("path", bucket).option("subscribe", "out").load()
    assert out.count() == N
    assert out.selectExpr("max(offset)").first()[0] < N


def test_two_queries_write_one_topic_at_once_both_exactly_once(spark, bucket, tmp_path):
    for name in ("a", "b"):
        (
            spark.range(0, 2000, numPartitions=2)
            .selectExpr("cast(id % 7 AS string) AS key", f"concat('{name}', id) AS value")
            .write.format("seglog")
            .option("path", bucket)
            .option("topic", name)
            .option("numPartitions", "2")
            .mode("append")
            .save()
        )
    queries = [
        (
            spark.readStream.format("seglog")
            .option("path", bucket)
            .option("subscribe", name)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "500")
            .load()
            .selectExpr("key", "value")
            .writeStream.format("seglog")
            .option("path", bucket)
            .option("topic", "shared")
            .option("numPartitions", "3")
            .option("checkpointLocation", str(tmp_path / name))
            .trigger(availableNow=True)
            .start()
        )
        for name in ("a", "b")
    ]
    for q in queries:
        q.awaitTermination(300)
        assert q.exception() is None
    records = bucket_records(bucket, "shared", tmp_path / "export")
    check_offsets(records)
    expected = collections.Counter(
        (str(i % 7).encode(), f"{n}{i}".encode()) for n in ("a", "b") for i in range(2000)
    )
    assert collections.Counter((r[2], r[3]) for r in records) == expected
    with LogManager(bucket, read_only=True) as mgr:
        assert {v["batch_id"] for v in mgr.state.sinks.values()} == {3}  # 4 batches each
        assert len(mgr.state.sinks) == 2


def test_a_query_merges_its_fragments_in_the_background_of_the_driver(spark, bucket, tmp_path):
    """A real query of 6 micro-batches of 2 tasks into 1 partition (``mergeMinSegments``
    4): its commits hand the merges to the background merger of Spark's reused commit
    worker and return; the merges land (waited for here: they may end after the query)
    and every record is read once, at the offsets the commits gave."""
    import time

    (
        spark.range(0, N, numPartitions=2)
        .selectExpr("cast(id % 7 AS string) AS key", "cast(id AS string) AS value")
        .write.format("seglog")
        .option("path", bucket)
        .option("topic", "in")
        .option("numPartitions", "2")
        .mode("append")
        .save()
    )
    q = (
        spark.readStream.format("seglog")
        .option("path", bucket)
        .option("subscribe", "in")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(N // 6))
        .load()
        .selectExpr("key", "value")
        .writeStream.format("seglog")
        .option("path", bucket)
        .option("topic", "out")
        .option("numPartitions", "1")
        .option("mergeMinSegments", "4")
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(300)
    assert q.exception() is None

    def out_segments() -> int:
        with LogManager(bucket, read_only=True) as mgr:
            return len(mgr.get_log("out", 0).segments)

    # 2 fragments a micro-batch: 12 unmerged; merged from 4 on, the last merge after the
    # query's last commit returned
    deadline = time.monotonic() + 120
    while out_segments() >= 4:
        assert time.monotonic() < deadline, f"{out_segments()} segments: nothing merged"
        time.sleep(0.5)
    records = bucket_records(bucket, "out", tmp_path / "export")
    check_offsets(records)
    expected = collections.Counter((str(i % 7).encode(), str(i).encode()) for i in range(N))
    assert collections.Counter((r[2], r[3]) for r in records) == expected
