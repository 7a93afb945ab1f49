"""The bucket sink's micro-batch over several topics, each in its own commit log
(bucket_logs): one commit per topic, in name order, each carrying the sink's ledger for
that topic. A driver killed between the topic commits leaves the first topics published;
the replay publishes exactly the topics that lack the batch: every row exactly once.
Real objects on the session's S3 server, a real subprocess killed at the step."""

from __future__ import annotations

import collections
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa

from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import decode_batches
from seglog.streaming.sink_bucket_commit import commit
from seglog.streaming.sink_bucket_staging import stage_rows
from seglog.streaming.sink_options import SinkColumns, SinkOptions

SRC = str(Path(__file__).resolve().parents[2] / "src")
SINK = "multi-query"
TOPICS = ("alpha", "beta", "gamma")


def rows(batch: int, n: int = 90) -> pa.RecordBatch:
    return pa.record_batch(
        {
            "topic": pa.array([TOPICS[i % 3] for i in range(n)], pa.string()),
            "value": pa.array([f"b{batch}-row{i}".encode() for i in range(n)], pa.binary()),
        }
    )


def options(uri: str) -> SinkOptions:
    return SinkOptions.parse({"path": uri, "numPartitions": "2"})


def stage(uri: str, batch: int):  # noqa: ANN201 - a StagedTask
    opts = options(uri)
    rb = rows(batch)
    return stage_rows(
        opts, SinkColumns.resolve(rb.schema, default_topic=None), [rb], SINK, batch, 0, 0
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


def test_a_driver_killed_between_topic_commits_is_replayed_exactly_once(s3_uri: str):
    commit([stage(s3_uri, 0)], 0, options(s3_uri))  # creates the three topics
    assert published(s3_uri) == expected(0)
    # Batch 1's driver dies after its first topic's commit (alpha), before beta's.
    code = (
        "import pickle, sys\n"
        "from seglog.streaming.sink_bucket_commit import commit\n"
        "from seglog.streaming.sink_options import SinkOptions\n"
        "task = pickle.loads(sys.stdin.buffer.read())\n"
        f"commit([task], 1, SinkOptions.parse({{'path': {s3_uri!r}, "
        "'numPartitions': '2'}))\n"
    )
    import pickle

    env = {**os.environ, "SEGLOG_CRASH_AT": "bucket-between-topics@1", "PYTHONPATH": SRC}
    done = subprocess.run(
        [sys.executable, "-c", code],
        input=pickle.dumps(stage(s3_uri, 1)),
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == -9, done.stderr.decode()[-2000:]
    partly = published(s3_uri) - expected(0)
    assert set(partly) == {
        v for v in expected(1) if b"row" in v and int(v.split(b"row")[1]) % 3 == 0
    }  # alpha's rows only
    # The rerun of batch 1 (new uploads): alpha is a replay, beta and gamma are published.
    result = commit([stage(s3_uri, 1)], 1, options(s3_uri))
    assert {tp[0] for tp in result.skipped} == {"alpha"}
    assert {p.topic for p in result.published} == {"beta", "gamma"}
    assert published(s3_uri) == expected(0, 1)
    again = commit([stage(s3_uri, 1)], 1, options(s3_uri))  # a second replay: nothing
    assert again.published == () and len(again.skipped) == 6
    commit([stage(s3_uri, 2)], 2, options(s3_uri))
    assert published(s3_uri) == expected(0, 1, 2)
