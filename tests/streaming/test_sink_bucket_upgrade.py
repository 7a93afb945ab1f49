"""The bucket sink's exactly-once outcome across ``seglog upgrade``: a sink that wrote
legacy topics (in the catalog log, with its ledger there) and restarts after they moved to
their own logs replays nothing twice (each topic's log carries the ledger it had in the
catalog) and publishes its next batches into the topics' own logs, never the catalog
again. Real objects on the session's S3 server; the driver's restart is a fresh writer
(the process's cached ones closed)."""

from __future__ import annotations

import collections

import pyarrow as pa

from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import decode_batches
from seglog.streaming import log_writers
from seglog.streaming.sink_bucket_commit import commit
from seglog.streaming.sink_bucket_staging import stage_rows
from seglog.streaming.sink_options import SinkColumns, SinkOptions

SINK = "upgraded-query"
TOPICS = ("alpha", "beta", "gamma")


def rows(batch: int, n: int = 60) -> pa.RecordBatch:
    return pa.record_batch(
        {
            "topic": pa.array([TOPICS[i % 3] for i in range(n)], pa.string()),
            "value": pa.array([f"b{batch}-row{i}".encode() for i in range(n)], pa.binary()),
        }
    )


def options(uri: str) -> SinkOptions:
    return SinkOptions.parse({"path": uri, "numPartitions": "2"})


def stage(uri: str, batch: int):  # noqa: ANN201 - a StagedTask
    rb = rows(batch)
    return stage_rows(
        options(uri), SinkColumns.resolve(rb.schema, default_topic=None), [rb], SINK, batch, 0, 0
    )


def published(uri: str) -> collections.Counter[bytes]:
    out: collections.Counter[bytes] = collections.Counter()
    with LogManager(uri, read_only=True) as mgr:
        for topic in mgr.topics():
            for p in mgr.partitions(topic):
                log = mgr.get_log(topic, p)
                for chunk in log.read_chunks(log.log_start_offset, log.high_watermark):
                    out.update(decode_batches(chunk).column("value").to_pylist())
    return out


def expected(*batches: int) -> collections.Counter[bytes]:
    return collections.Counter(v for b in batches for v in rows(b).column("value").to_pylist())


def restart() -> None:
    """What a new driver process has: no writer cached."""
    log_writers.close_all()


def test_a_sink_restarted_after_the_upgrade_replays_nothing_twice(s3_uri: str):
    with BucketLogManager(s3_uri, topic_logs=False) as old:  # a bucket from before
        for topic in TOPICS:
            old.create_topic(topic, 2)
    commit([stage(s3_uri, 0)], 0, options(s3_uri))
    commit([stage(s3_uri, 1)], 1, options(s3_uri))
    assert published(s3_uri) == expected(0, 1)
    restart()
    with BucketLogManager(s3_uri) as mgr:
        assert mgr.commits.topic_log("alpha") is None  # the sink wrote them legacy
        moved = mgr.upgrade_topic_logs()
    assert [m.topic for m in moved.moved] == list(TOPICS)
    restart()
    # Batch 1's driver had died before Spark recorded it done: the restart replays it.
    replay = commit([stage(s3_uri, 1)], 1, options(s3_uri))
    assert replay.published == () and len(replay.skipped) == 6
    assert published(s3_uri) == expected(0, 1)
    commit([stage(s3_uri, 2)], 2, options(s3_uri))
    assert published(s3_uri) == expected(0, 1, 2)
    restart()
    with BucketLogManager(s3_uri, read_only=True) as reader:
        assert reader.commits.catalog.state.version == moved.catalog_version  # own logs only
        log = reader.commits.topic_log("beta")
        assert log is not None and log.state.sinks[SINK]["batch_id"] == 2
