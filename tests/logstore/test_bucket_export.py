"""``BucketLogManager.export`` (bucket_export): a bucket log dir as a Kafka log dir that
kafka-python's record reader, seglog's ``check`` and the local LogManager read."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from bucket_helpers import log_values, memory_uri
from kafka.record.memory_records import MemoryRecords
from test_bucket_merge_retention import _commit_fragment, batch

from seglog.logstore.errors import LogDirError
from seglog.logstore.manager.log_manager import LogManager, check_log_dirs
from seglog.logstore.records.record_codec import encode_batches


def kafka_python_records(path: Path) -> list[tuple[int, bytes | None]]:
    records = MemoryRecords(path.read_bytes())
    out = []
    while (b := records.next_batch()) is not None:
        assert b.validate_crc(), path
        out += [(r.offset, r.value) for r in b]
    return out


@pytest.fixture
def bucket() -> LogManager:
    mgr = LogManager(memory_uri())
    mgr.create_topic("t", 3, {"retention.ms": -1, "index.interval.bytes": 100})
    mgr.create_topic("c", 1, {"cleanup.policy": "compact"})
    for i in range(6):
        mgr.append("t", 0, batch(i))
    mgr.merge_segments()
    _commit_fragment(mgr, 0, 24, 6)  # a sink fragment: stored offsets 0.., real 24..
    mgr.append("t", 1, batch(7))
    mgr.delete_records("t", 1, 2)
    mgr.append("c", 0, encode_batches(pa.array([b"x", None]), keys=pa.array([b"k", b"k"])))
    return mgr  # t-2 stays empty


def test_export_writes_a_kafka_log_dir_every_reader_reads(bucket: LogManager, tmp_path: Path):
    target = tmp_path / "exported"
    stats = bucket.export(target)
    assert (stats.partitions, stats.segments) == (4, 4)
    assert sorted(p.name for p in (target / "t-0").iterdir()
                  if p.suffix in (".log", ".index", ".timeindex")) == [
        f"{0:020d}.index", f"{0:020d}.log", f"{0:020d}.timeindex",
        f"{24:020d}.index", f"{24:020d}.log", f"{24:020d}.timeindex"]
    for name in (".kafka_cleanshutdown", "recovery-point-offset-checkpoint",
                 "replication-offset-checkpoint", "log-start-offset-checkpoint"):
        assert (target / name).is_file(), name
    # Kafka's own record reader: exact offsets (the fragment's were patched), valid CRCs.
    assert kafka_python_records(target / "t-0" / f"{24:020d}.log") == \
        [(24 + j, f"v6-{j}".encode()) for j in range(4)]
    assert [o for o, _v in kafka_python_records(target / "t-0" / f"{0:020d}.log")] == \
        list(range(24))
    # seglog's check: batches, indexes against the logs, checkpoints.
    assert [p.message for p in check_log_dirs([target], deep=True)] == []
    # The local engine opens it as a cleanly shut down dir and reads the same data.
    with LogManager([target]) as local:
        assert local.high_watermarks() == bucket.high_watermarks()
        assert local.log_start_offsets() == bucket.log_start_offsets()
        assert local.topic_overrides("c") == {"cleanup.policy": "compact"}
        assert log_values(local, "t", 0) == \
            [(4 * i + j, f"v{i}-{j}".encode()) for i in range(7) for j in range(4)]
        assert log_values(local, "t", 1) == [(2, b"v7-2"), (3, b"v7-3")]
        assert local.append("t", 2, batch(0)).first_offset == 0


def test_export_refuses_a_non_empty_target(bucket: LogManager, tmp_path: Path):
    (tmp_path / "x").write_text("mine")
    with pytest.raises(LogDirError, match=f"{tmp_path}.*not an empty directory"):
        bucket.export(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["x"]
