"""A streaming query reads a compacted topic while the cleaner rewrites it underneath.

Offsets are no longer record counts: admission control (``maxOffsetsPerTrigger``) and
``maxRecordsPerPartition`` work on offset ranges, ranges may hold few or no records, and
every key's latest value still arrives exactly once."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest

from seglog.logstore.cleaner.cleaner import LogCleaner
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches

pytestmark = pytest.mark.spark

KEYS = 13
MAX_OFFSETS = 60
MAX_RECORDS_PER_PARTITION = 10


def key(o: int) -> bytes:
    return b"k%d" % (o % KEYS)


def value(o: int) -> bytes:
    return b"v%d" % o


def write(mgr: LogManager, n: int, per_append: int = 10) -> None:
    """``n`` records, ``per_append`` per append (a segment rolls only between appends)."""
    for _ in range(0, n, per_append):
        leo = mgr.get_log("kv", 0).log_end_offset
        offs = range(leo, leo + per_append)
        mgr.append("kv", 0, encode_batches(pa.array([value(o) for o in offs], pa.binary()),
                                           pa.array([key(o) for o in offs], pa.binary()),
                                           max_batch_bytes=120))


class Collector:
    def __init__(self) -> None:
        self.batches: list[tuple[int, int, list[tuple[int, bytes, bytes]]]] = []

    def __call__(self, df, batch_id: int) -> None:
        parts = df.rdd.getNumPartitions()
        rows = [(r.offset, bytes(r.key), bytes(r.value))
                for r in df.select("offset", "key", "value").collect()]
        self.batches.append((batch_id, parts, rows))


def test_stream_over_a_topic_compacted_while_it_is_read(spark, tmp_path):
    log_dir = str(tmp_path / "logs")
    got = Collector()
    with LogManager([log_dir]) as mgr:
        mgr.create_topic("kv", 1, config={"cleanup.policy": "compact", "segment.bytes": "1024",
                                          "min.cleanable.dirty.ratio": "0.01"})
        cleaner = LogCleaner(mgr.config.replace(log_cleaner_dedupe_buffer_size=1 << 20),
                             mgr.clock)
        write(mgr, 150)
        mgr.checkpoint_high_watermarks()  # the cleaner stays below the high watermark
        before = cleaner.clean_log(mgr.get_log("kv", 0))
        assert before.records_retained < before.records_read  # gaps before the start
        q = (spark.readStream.format("seglog").option("path", log_dir)
             .option("subscribe", "kv").option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", MAX_OFFSETS)
             .option("maxRecordsPerPartition", MAX_RECORDS_PER_PARTITION)
             .load().writeStream.foreachBatch(got)
             .option("checkpointLocation", str(tmp_path / "chk")).start())
        stop = threading.Event()
        cleaned = []

        def churn() -> None:  # the LogManager's maintenance, while the query runs
            for _ in range(6):
                if stop.is_set():
                    return
                write(mgr, 20)
                mgr.checkpoint_high_watermarks()
                cleaned.append(cleaner.clean_log(mgr.get_log("kv", 0)))
                time.sleep(0.7)

        t = threading.Thread(target=churn, daemon=True)
        try:
            t.start()
            t.join(timeout=60)
            assert not t.is_alive()
            mgr.checkpoint_high_watermarks()
            q.processAllAvailable()
        finally:
            stop.set()
            q.stop()
        leo = mgr.get_log("kv", 0).log_end_offset
    assert cleaned and sum(s.records_read - s.records_retained for s in cleaned) > 0

    rows = [r for _, _, batch in got.batches for r in batch]
    offsets = [o for o, _, _ in rows]
    assert offsets == sorted(set(offsets)), "a record was read twice or out of order"
    for o, k, v in rows:
        assert (k, v) == (key(o), value(o))
    last_seen = {k: v for _, k, v in rows}
    assert last_seen == {key(o): value(o) for o in range(leo)}  # every key's latest
    assert len(rows) < leo  # compaction removed records the query never saw
    for _, parts, batch in got.batches:
        assert len(batch) <= MAX_OFFSETS  # admission by offsets bounds the records
        assert parts <= -(-MAX_OFFSETS // MAX_RECORDS_PER_PARTITION)
    # the source advanced by offset ranges, not record counts
    assert len(got.batches) >= -(-leo // MAX_OFFSETS)
