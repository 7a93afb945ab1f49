"""A topic deleted and re-created between two triggers of a streaming query (topic ids,
KIP-516), on a local log dir and on a bucket; a task planned before a re-creation is
covered Spark-free (``tests/streaming/test_source_topic_ids.py``).

Two queries run side by side (one query start costs ~13 s): failOnDataLoss=true fails
naming the topic, failOnDataLoss=false warns and reads the new topic from its earliest
offset. The new topics hold more records than the old offsets, so reading on from the
old offsets (what offsets alone allow, and what Spark's Kafka source does) would skip
the new topic's first records in silence.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches

pytestmark = pytest.mark.spark


def _append(mgr: LogManager, topic: str, prefix: str, n: int) -> None:
    mgr.append(topic, 0, encode_batches(pa.array([f"{prefix}{i}".encode() for i in range(n)])))
    mgr.checkpoint_high_watermarks()


def _start(spark, log_dir: str, topic: str, rows: list, checkpoint) -> object:
    def collect(df, batch_id: int) -> None:
        rows.extend((r.offset, bytes(r.value)) for r in df.select("offset", "value").collect())

    return (spark.readStream.format("seglog").option("path", log_dir)
            .option("subscribe", topic).option("startingOffsets", "earliest")
            .option("failOnDataLoss", str(topic == "strict").lower()).load()
            .writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(checkpoint)).start())


@pytest.fixture(params=["local", "bucket"])
def log_dir(request, spark, tmp_path):
    if request.param == "local":
        yield str(tmp_path / "logs")
        return
    from _bucket_checks import forget_worker_env, point_workers_at

    point_workers_at(spark, dict(request.getfixturevalue("bucket_server").env))
    yield request.getfixturevalue("s3_uri")
    forget_worker_env(spark, [])


def test_a_topic_recreated_between_triggers(spark, tmp_path, log_dir):
    topics = ("strict", "lenient")
    rows: dict[str, list] = {t: [] for t in topics}
    with LogManager([log_dir]) as mgr:
        for t in topics:
            mgr.create_topic(t, 1)
            _append(mgr, t, "old", 3)
        qs = {}
        try:
            for t in topics:
                qs[t] = _start(spark, log_dir, t, rows[t], tmp_path / f"chk-{t}")
            for t in topics:
                qs[t].processAllAvailable()
            # Stopped across the re-creation: a running query's trigger could fall
            # between the delete and the create, and see the topic gone (reported as a
            # disappeared partition), not re-created. The Python workers, and their
            # cached logs of the old topics, stay for the restarted queries.
            for t in topics:
                qs.pop(t).stop()
            for t in topics:
                mgr.delete_topic(t)
                mgr.create_topic(t, 1)
                _append(mgr, t, "new", 5)
            for t in topics:
                qs[t] = _start(spark, log_dir, t, rows[t], tmp_path / f"chk-{t}")
            qs["lenient"].processAllAvailable()
            with pytest.raises(Exception, match=r"topic 'strict' partition 0: offsets from 3 "
                                                r"on of topic id \S+ may not have been read: "
                                                r"the topic was deleted and re-created"):
                qs["strict"].processAllAvailable()
        finally:
            for q in qs.values():
                q.stop()
    old = [(i, f"old{i}".encode()) for i in range(3)]
    lenient = rows["lenient"]
    assert sorted(lenient[:3]) == old
    assert sorted(lenient[3:]) == [(i, f"new{i}".encode()) for i in range(5)]
    assert sorted(rows["strict"]) == old
