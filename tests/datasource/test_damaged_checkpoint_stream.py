"""A stream over a log dir whose high-watermark checkpoint is damaged fails with the
clear error (never an empty stream), and reads everything after ``seglog check --fix``."""

from __future__ import annotations

import io

import pyarrow as pa
import pytest

from seglog.cli import main
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches
from seglog.logstore.storage.file_names import HIGH_WATERMARK_CHECKPOINT

pytestmark = pytest.mark.spark


def test_a_stream_fails_clearly_on_a_damaged_high_watermark_then_reads_all_after_fix(
        spark, tmp_path):
    from pyspark.errors import StreamingQueryException

    log_dir = tmp_path / "logs"
    with LogManager([log_dir]) as mgr:
        mgr.create_topic("events", 2)
        for p in (0, 1):
            mgr.append("events", p, encode_batches(
                pa.array([f"{p}-{i}".encode() for i in range(50)], pa.binary()),
                max_batch_bytes=256))
    checkpoint = log_dir / HIGH_WATERMARK_CHECKPOINT
    checkpoint.write_bytes(b"\x30\x0a" + checkpoint.read_bytes()[2:-1])  # cut mid-line

    def run(name: str):
        q = (spark.readStream.format("seglog").option("path", str(log_dir))
             .option("subscribe", "events").option("startingOffsets", "earliest")
             .option("failOnDataLoss", "true").load()
             .writeStream.format("memory").queryName(name)
             .option("checkpointLocation", str(tmp_path / name))
             .trigger(availableNow=True).start())
        return q

    q = run("damaged")
    with pytest.raises(StreamingQueryException) as err:
        q.awaitTermination(240)
    assert str(checkpoint) in str(err.value) and "seglog check --fix" in str(err.value)
    assert spark.sql("select * from damaged").count() == 0

    out = io.StringIO()
    assert main(["check", "--fix", str(log_dir)], out) == 0, out.getvalue()
    q = run("repaired")
    assert q.awaitTermination(240)
    assert q.exception() is None
    rows = spark.sql("select partition, offset, value from repaired").collect()
    assert sorted((r.partition, r.offset, bytes(r.value)) for r in rows) == [
        (p, i, f"{p}-{i}".encode()) for p in (0, 1) for i in range(50)]
