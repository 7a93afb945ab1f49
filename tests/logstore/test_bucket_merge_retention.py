"""Merging and retention of bucket partitions (bucket_merge, bucket_retention, through
BucketLogManager) over memory://: exact Kafka segments, patched offset deltas, conflicts,
Kafka's retention rules."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
import pytest
from bucket_helpers import log_values, memory_uri
from kafka.record.memory_records import MemoryRecords

from seglog.logstore.bucket import bucket_merge
from seglog.logstore.bucket.bucket_commit_log import Change
from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.bucket.bucket_segment import build_segments
from seglog.logstore.bucket.bucket_state import PartitionChange, SegmentEntry, segment_key
from seglog.logstore.errors import CorruptRecordError
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches
from seglog.logstore.records.record_format import iter_batch_headers
from seglog.logstore.util.clock import MockClock

TS = 1_700_000_000_000


def batch(i: int, n: int = 4, ts: int | None = None) -> bytearray:
    """One batch of ``n`` records with values ``v<i>-<j>`` (timestamp ``ts``)."""
    t = TS + i if ts is None else ts
    return encode_batches(pa.array([f"v{i}-{j}".encode() for j in range(n)]),
                          keys=pa.array([f"k{j}".encode() for j in range(n)]),
                          timestamps=pa.array([t] * n, pa.int64()))


def segments(mgr, topic: str = "t", partition: int = 0) -> tuple[SegmentEntry, ...]:
    mgr.refresh()
    return mgr.state.partition(topic, partition).segments


# ---------------------------------------------------------------------------- merging

def test_merge_gives_the_segments_a_local_log_dir_rolls(tmp_path: Path):
    """Twenty one-batch appends, merged with segment.bytes=1000, give byte for byte the
    .log/.index/.timeindex files a local log dir writes for the same appends."""
    cfg = {"segment.bytes": 1000, "index.interval.bytes": 150}
    appends = [batch(i) for i in range(20)]
    with LogManager([tmp_path]) as local:
        local.create_topic("t", 1, cfg)
        for b in appends:
            local.append("t", 0, bytes(b))
    mgr = LogManager(memory_uri())
    mgr.create_topic("t", 1, cfg)
    for b in appends:
        mgr.append("t", 0, bytes(b))
    before = log_values(mgr)
    assert len(segments(mgr)) == 20
    merged_away = mgr.merge_segments()
    after = segments(mgr)
    assert merged_away == 20 and 1 < len(after) < 20
    assert log_values(mgr) == before
    local_logs = sorted((tmp_path / "t-0").glob("*.log"))
    assert [f"{s.base_offset:020d}.log" for s in after] == [p.name for p in local_logs]
    for seg in after[:-1]:  # the local dir's last segment is still active (no final entry)
        for suffix in (".log", ".index", ".timeindex"):
            local_bytes = (tmp_path / "t-0" / f"{seg.base_offset:020d}{suffix}").read_bytes()
            stored = mgr.storage.read(seg.key + suffix) if local_bytes else b""
            assert stored == local_bytes, (seg.key, suffix)
    assert mgr.merge_segments() == 0  # nothing left to merge
    # The sources stay until collected: a reader holding the old view still reads.
    assert all(mgr.storage.exists(f"t-0/{n}") for n in
               [e.name for e in mgr.storage.list_dir("t-0")])


def test_a_merged_object_is_read_by_kafka_python():
    mgr = LogManager(memory_uri())
    mgr.create_topic("t", 1)
    for i in range(5):
        mgr.append("t", 0, batch(i))
    mgr.merge_segments()
    (seg,) = segments(mgr)
    records = MemoryRecords(mgr.storage.read(seg.key + ".log"))
    seen = []
    while (b := records.next_batch()) is not None:
        assert b.validate_crc()
        seen += [(r.offset, r.value) for r in b]
    assert seen == [(4 * i + j, f"v{i}-{j}".encode()) for i in range(5) for j in range(4)]


def _commit_fragment(mgr: BucketLogManager, stored_base: int, real_base: int, i: int) -> None:
    """A sink-style fragment: batches stored with base offset ``stored_base``, committed
    at ``real_base`` with ``offset_delta`` (readers patch the 8-byte base offset)."""
    buf = batch(i)
    headers = list(iter_batch_headers(buf))
    (seg,) = build_segments(buf, headers, topic="t", partition=0, segment_bytes=1 << 20,
                            index_interval_bytes=4096)
    key = segment_key("t", 0, real_base, seg.entry.key[-16:])
    entry = SegmentEntry(key, real_base, real_base + 4, seg.entry.size,
                         seg.entry.max_timestamp, offset_delta=real_base - stored_base)
    mgr.storage.write_atomic(key + ".log", seg.log)
    mgr.commits.commit("append", lambda state: Change(
        partitions={"t-0": PartitionChange(add=(entry,))}))


def test_merge_patches_segments_committed_with_an_offset_delta():
    mgr = LogManager(memory_uri())
    mgr.create_topic("t", 1)
    mgr.append("t", 0, batch(0))
    _commit_fragment(mgr, 0, 4, 1)
    _commit_fragment(mgr, 0, 8, 2)
    assert [s.offset_delta for s in segments(mgr)] == [0, 4, 8]
    assert mgr.merge_segments() == 3
    (seg,) = segments(mgr)
    assert seg.offset_delta == 0 and (seg.base_offset, seg.next_offset) == (0, 12)
    data = mgr.storage.read(seg.key + ".log")
    assert [(h.base_offset, h.last_offset) for h in iter_batch_headers(data)] == \
        [(0, 3), (4, 7), (8, 11)]
    assert log_values(mgr) == [(4 * i + j, f"v{i}-{j}".encode())
                               for i in range(3) for j in range(4)]


def test_merge_refuses_a_source_object_that_is_not_what_its_commit_says():
    mgr = LogManager(memory_uri())
    mgr.create_topic("t", 1)
    for i in range(3):
        mgr.append("t", 0, batch(i))
    victim = segments(mgr)[1]
    data = bytearray(mgr.storage.read(victim.key + ".log"))
    data[-1] ^= 0xFF  # a record byte: the CRC no longer matches
    mgr.storage.write_atomic(victim.key + ".log", bytes(data))
    with pytest.raises(CorruptRecordError, match=f"{victim.key}.log.*CRC"):
        mgr.merge_segments()
    assert len(segments(mgr)) == 3  # nothing committed


def test_merge_respects_segment_ms():
    mgr = LogManager(memory_uri())
    mgr.create_topic("t", 1, {"segment.ms": 1000})
    for i, ts in enumerate([TS, TS + 400, TS + 900, TS + 1500, TS + 1600]):
        mgr.append("t", 0, batch(i, ts=ts))
    mgr.merge_segments()
    assert [(s.base_offset, s.next_offset) for s in segments(mgr)] == [(0, 12), (12, 20)]


def test_a_merge_whose_source_left_the_log_is_abandoned(monkeypatch):
    uri = memory_uri()
    mgr, other = LogManager(uri), LogManager(uri)
    mgr.create_topic("t", 1, {"retention.ms": -1})
    for i in range(4):
        mgr.append("t", 0, batch(i))
    real_upload = bucket_merge.upload

    def upload_then_race(storage, built):
        real_upload(storage, built)
        other.refresh()
        other.delete_records("t", 0, 4)  # another process's retention removes a source
        other.delete_old_segments()

    first = segments(mgr)[0].key
    monkeypatch.setattr(bucket_merge, "upload", upload_then_race)
    assert mgr.merge_segments() == 0
    assert [s.base_offset for s in segments(mgr)] == [4, 8, 12]
    # The committed segments and the one retention removed (kept for readers until
    # collected); the abandoned merge's upload was deleted at once.
    expected = {s.key for s in segments(mgr)} | {first}
    assert {f"t-0/{e.name[:-4]}" for e in mgr.storage.list_dir("t-0")
            if e.name.endswith(".log")} == expected


def test_a_merge_never_commits_uploads_older_than_half_the_grace(monkeypatch):
    clock = MockClock(int(time.time() * 1000))
    mgr = BucketLogManager(memory_uri(), clock=clock, orphan_grace_ms=10_000)
    mgr.create_topic("t", 1)
    for i in range(3):
        mgr.append("t", 0, batch(i))
    real_upload = bucket_merge.upload

    def slow_upload(storage, built):
        real_upload(storage, built)
        clock.advance(5_001)

    monkeypatch.setattr(bucket_merge, "upload", slow_upload)
    assert mgr.merge_segments() == 0
    assert len(segments(mgr)) == 3
    assert len(mgr.storage.list_dir("t-0")) == 3  # a .log each (indexes inline), no upload


# -------------------------------------------------------------------------- retention

def test_retention_by_time_removes_old_segments_and_moves_the_log_start():
    clock = MockClock(TS + 10_000)
    mgr = BucketLogManager(memory_uri(), clock=clock)
    mgr.create_topic("t", 1, {"retention.ms": 5_000})
    for i, ts in enumerate([TS, TS + 1_000, TS + 8_000]):
        mgr.append("t", 0, batch(i, ts=ts))
    assert mgr.delete_old_segments() == 2
    assert mgr.log_start_offsets() == {("t", 0): 8}
    assert [o for o, _v in log_values(mgr)] == [8, 9, 10, 11]
    clock.advance(10_000)
    assert mgr.delete_old_segments() == 1
    # Every segment gone: the log is empty at its old end, as Kafka leaves it.
    assert mgr.high_watermarks() == {("t", 0): 12}
    assert mgr.log_start_offsets() == {("t", 0): 12}
    info = mgr.append("t", 0, batch(9))
    assert info.first_offset == 12


def test_retention_by_size_keeps_the_newest_segments_within_the_limit():
    mgr = LogManager(memory_uri())
    mgr.create_topic("t", 1)
    for i in range(5):
        mgr.append("t", 0, batch(i))
    size = segments(mgr)[0].size
    mgr.alter_topic_config("t", {"retention.bytes": 2 * size, "retention.ms": -1})
    assert mgr.delete_old_segments() == 3
    assert [s.base_offset for s in segments(mgr)] == [12, 16]
    mgr.alter_topic_config("t", {"retention.bytes": size + 1})
    assert mgr.delete_old_segments() == 0  # never below the limit, as Kafka


def test_retention_by_log_start_offset_and_a_compact_only_topic():
    clock = MockClock(TS + 100_000)
    mgr = BucketLogManager(memory_uri(), clock=clock)
    mgr.create_topic("t", 1, {"cleanup.policy": "compact", "retention.ms": 1})
    for i in range(4):
        mgr.append("t", 0, batch(i))
    assert mgr.delete_old_segments() == 0  # no delete policy: time does not apply
    mgr.delete_records("t", 0, 9)
    assert mgr.delete_old_segments() == 2  # [0,4) and [4,8) lie below offset 9
    assert [s.base_offset for s in segments(mgr)] == [8, 12]
    assert mgr.log_start_offsets() == {("t", 0): 9}
    assert mgr.delete_old_segments() == 0


def test_a_merge_reads_its_sources_at_once(monkeypatch):
    """Each source is a GET, a round trip on a real store: a merge of many tiny fragments
    (what a sink merges after its commit, while its next micro-batch waits) reads them
    concurrently. Every read here waits until 4 are in flight: sequential reads would
    break the barrier, and the merge would fail."""
    import threading

    mgr = BucketLogManager(memory_uri())
    mgr.create_topic("t", 1, {"retention.ms": -1})
    for i in range(8):
        mgr.append("t", 0, batch(i))
    real_read = bucket_merge.read_segment
    together = threading.Barrier(4, timeout=30)

    def read_when_4_are_in_flight(storage, entry):
        together.wait()
        return real_read(storage, entry)

    monkeypatch.setattr(bucket_merge, "READ_THREADS", 4)
    monkeypatch.setattr(bucket_merge, "read_segment", read_when_4_are_in_flight)
    assert mgr.merge_segments() == 8
    assert [v for _, v in log_values(mgr, "t")] == [
        f"v{i}-{j}".encode() for i in range(8) for j in range(4)
    ]
