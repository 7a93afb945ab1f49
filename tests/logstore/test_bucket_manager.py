"""BucketLogManager (logstore/bucket/bucket_manager.py) over memory://: the LogManager API on a
bucket, appends checked and committed, lost races, the objects it writes, ranged reads."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from bucket_helpers import CountingStorage, memory_uri
from kafka.record.memory_records import MemoryRecords

from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.bucket.bucket_segment import INLINE_INDEX_BYTES
from seglog.logstore.errors import (
    ConfigError,
    CorruptRecordError,
    InvalidRecordError,
    LogDirError,
    OffsetOutOfRangeError,
    ReadOnlyError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import (
    decode_batches,
    encode_batches,
    encode_control_batch,
)
from seglog.logstore.storage.object_storage import ObjectStorage

TS = 1_700_000_000_000


def batches(n: int, start: int = 0, *, batch_bytes: int = 1 << 20) -> bytearray:
    return encode_batches(
        pa.array([b"value-%06d" % i for i in range(start, start + n)]),
        timestamps=pa.array([TS + i for i in range(start, start + n)], pa.int64()),
        max_batch_bytes=batch_bytes,
    )


def offsets(mgr, topic: str = "t", partition: int = 0) -> list[int]:
    log = mgr.get_log(topic, partition)
    log.refresh()
    chunks = log.read_chunks(log.log_start_offset, log.high_watermark)
    start = log.log_start_offset
    return [
        o
        for c in chunks
        for o in decode_batches(bytes(c), start_offset=start).column("offset").to_pylist()
    ]


def objects(storage, prefix: str) -> list[str]:
    return [e.name for e in storage.list_dir(prefix)]


# ----------------------------------------------------------------------- the factory


def test_log_manager_of_a_uri_is_a_bucket_manager(tmp_path: Path):
    uri = memory_uri()
    with LogManager([uri]) as mgr:
        assert isinstance(mgr, BucketLogManager) and not mgr.read_only
        mgr.create_topic("t", 2)
    reader = LogManager(uri, read_only=True)
    assert isinstance(reader, BucketLogManager) and reader.partitions("t") == [0, 1]
    with pytest.raises(ReadOnlyError, match=uri):
        reader.append("t", 0, batches(1))
    with pytest.raises(LogDirError, match="mix object-store URIs and local paths"):
        LogManager([uri, tmp_path])
    with pytest.raises(ConfigError, match="repair=True"):
        LogManager(uri, repair=True)


# ---------------------------------------------------------------------------- topics


def test_topics_are_commits_every_process_sees():
    uri = memory_uri()
    mgr, other = LogManager(uri), LogManager(uri)
    mgr.create_topic("t", 2, {"retention.ms": 5000})
    assert other.topics() == ["t"] and other.topic_config("t").retention_ms == 5000
    with pytest.raises(TopicExistsError, match="'t' already exists"):
        other.create_topic("t", 1)
    with pytest.raises(ConfigError, match="retention.ms"):
        mgr.create_topic("u", 1, {"retention.ms": "soon"})
    version = mgr.state.version
    assert other.alter_topic_config("t", {"segment.bytes": 4096}, ["retention.ms"]) == {
        "segment.bytes": "4096"
    }
    other.add_partitions("t", 3)
    mgr.refresh()
    assert mgr.partitions("t") == [0, 1, 2] and mgr.topic_config("t").segment_bytes == 4096
    assert mgr.topic_overrides("t") == {"segment.bytes": "4096"}
    assert mgr.state.version == version + 2  # the refused create committed nothing
    mgr.delete_topic("t")
    assert other.topics() == []
    with pytest.raises(UnknownTopicOrPartitionError, match="unknown topic 't'"):
        other.partitions("t")


# ---------------------------------------------------------------------------- append


def test_append_then_read_through_the_shared_read_path():
    mgr = LogManager(memory_uri())
    mgr.create_topic("t", 1)
    first = mgr.append("t", 0, batches(30, batch_bytes=200))
    second = mgr.append("t", 0, batches(20, 30, batch_bytes=200))
    assert (first.first_offset, first.last_offset, second.first_offset) == (0, 29, 30)
    assert second.num_records == 20 and second.max_timestamp == TS + 49
    assert mgr.high_watermarks() == {("t", 0): 50}
    assert offsets(mgr) == list(range(50))
    log = mgr.get_log("t", 0)
    fetched = log.read(35, max_bytes=1)
    rows = decode_batches(fetched.records, start_offset=35)
    assert rows.column("offset")[0].as_py() == 35 and fetched.high_watermark == 50
    assert log.offset_for_timestamp(TS + 42) == 42
    assert log.offset_for_timestamp(TS + 99) is None
    assert log.read(50).empty
    with pytest.raises(OffsetOutOfRangeError):
        log.read(51)
    committed = log.read(0, isolation_level="read_committed", max_bytes=1 << 20)
    assert committed.last_stable_offset == 50 and committed.aborted_transactions == ()


def test_a_bad_append_commits_and_uploads_nothing():
    mgr = LogManager(memory_uri())
    mgr.create_topic("t", 1)
    buf = batches(5)
    buf[-1] ^= 0xFF  # the CRC no longer matches
    version = mgr.state.version
    with pytest.raises(CorruptRecordError, match="t-0"):
        mgr.append("t", 0, buf)
    control = encode_control_batch(1, producer_id=7, producer_epoch=0)
    with pytest.raises(InvalidRecordError, match="transactional"):
        mgr.append("t", 0, control)
    assert mgr.state.version == version and objects(mgr.storage, "t-0") == []


def test_an_append_larger_than_segment_bytes_makes_several_segments():
    mgr = LogManager(memory_uri())
    mgr.create_topic("t", 1, {"segment.bytes": 2048, "index.interval.bytes": 300})
    mgr.append("t", 0, batches(400, batch_bytes=256))
    segments = mgr.state.partition("t", 0).segments
    assert len(segments) > 3 and all(s.size <= 2048 for s in segments)
    assert [s.base_offset for s in segments[1:]] == [s.next_offset for s in segments[:-1]]
    assert offsets(mgr) == list(range(400))


@pytest.mark.parametrize(
    "records, interval, inline",
    [
        (300, 500, True),  # 17 + 17 entries: inline in the commit entry
        (1000, 1, False),  # an entry per batch: 20 KB of indexes, above INLINE_INDEX_BYTES
    ],
)
def test_index_bytes_equal_the_local_engines_index_files(
    tmp_path: Path, records: int, interval: int, inline: bool
):
    """The same append to a local log dir and to a bucket gives the same index bytes,
    inline in the segment's entry when small, else as objects."""
    cfg = {"index.interval.bytes": interval}
    buf = batches(records, batch_bytes=180 if inline else 1)
    with LogManager([tmp_path]) as local:
        local.create_topic("t", 1, cfg)
        local.append("t", 0, bytes(buf))
    mgr = LogManager(memory_uri())
    mgr.create_topic("t", 1, cfg)
    mgr.append("t", 0, bytes(buf))
    (seg,) = mgr.state.partition("t", 0).segments
    local_bytes = {
        suffix: (tmp_path / "t-0" / f"{0:020d}{suffix}").read_bytes()
        for suffix in (".log", ".index", ".timeindex")
    }
    assert mgr.storage.read(seg.key + ".log") == local_bytes[".log"]
    if inline:
        assert (seg.index_bytes, seg.timeindex_bytes) == (0, 0)
        assert seg.inline_index == local_bytes[".index"] != b""
        assert seg.inline_timeindex == local_bytes[".timeindex"] != b""
        assert objects(mgr.storage, "t-0") == [seg.key.rpartition("/")[2] + ".log"]
    else:
        assert seg.index_bytes + seg.timeindex_bytes > INLINE_INDEX_BYTES
        assert seg.inline_index == seg.inline_timeindex == b""
        for suffix in (".index", ".timeindex"):
            assert mgr.storage.read(seg.key + suffix) == local_bytes[suffix], suffix


def test_a_published_log_object_is_read_by_kafka_python():
    mgr = LogManager(memory_uri())
    mgr.create_topic("t", 1)
    mgr.append("t", 0, batches(7))
    mgr.append("t", 0, batches(5, 7, batch_bytes=100))
    seen = []
    for seg in mgr.state.partition("t", 0).segments:
        records = MemoryRecords(mgr.storage.read(seg.key + ".log"))
        while (batch := records.next_batch()) is not None:
            assert batch.validate_crc()
            seen += [(r.offset, r.value) for r in batch]
    assert seen == [(i, b"value-%06d" % i) for i in range(12)]


def test_a_lost_race_restamps_offsets_and_leaves_no_orphan():
    uri = memory_uri()
    a, b = LogManager(uri), LogManager(uri)
    a.create_topic("t", 1)
    b.refresh()
    a.append("t", 0, batches(10))  # b's state is one commit behind
    info = b.append("t", 0, batches(5, 10))
    assert (info.first_offset, info.last_offset) == (10, 14)
    assert offsets(a) == list(range(15))
    committed = {s.key.rpartition("/")[2] + ".log" for s in a.state.partition("t", 0).segments}
    assert {n for n in objects(a.storage, "t-0") if n.endswith(".log")} == committed


def test_delete_records_moves_the_log_start():
    mgr = LogManager(memory_uri())
    mgr.create_topic("t", 1)
    mgr.append("t", 0, batches(10))
    assert mgr.delete_records("t", 0, 4) == 4
    assert mgr.log_start_offsets() == {("t", 0): 4}
    assert offsets(mgr) == list(range(4, 10))
    with pytest.raises(OffsetOutOfRangeError, match="holds \\[4, 10\\)"):
        mgr.delete_records("t", 0, 11)


@pytest.mark.parametrize("inline", [True, False])
def test_a_read_fetches_only_the_ranges_it_needs(inline: bool):
    storage = CountingStorage(ObjectStorage(memory_uri()))
    mgr = BucketLogManager(storage)
    if not inline:
        mgr.inline_index_bytes = 0
    mgr.create_topic("t", 1, {"segment.bytes": 1 << 30})
    mgr.append("t", 0, batches(20_000, batch_bytes=1024))
    (seg,) = mgr.state.partition("t", 0).segments
    assert bool(seg.inline_index) == inline and bool(seg.index_bytes) != inline
    reader = BucketLogManager(storage, read_only=True)
    log = reader.get_log("t", 0)
    storage.reset()
    for _ in range(2):  # the second read uses the index the first one parsed
        fetched = log.read(19_000, max_bytes=2048)
        assert (
            decode_batches(fetched.records, start_offset=19_000).column("offset")[0].as_py()
            == 19_000
        )
        assert len(fetched.records) < seg.size // 50
    # the index object once (none when inline), then a few ranged GETs: never the
    # whole segment
    assert storage.counts["read"] == (0 if inline else 1)
    assert storage.counts["read_range"] <= 8


def test_a_writers_open_log_sees_its_own_appends_and_others():
    uri = memory_uri()
    mgr, other = LogManager(uri), LogManager(uri)
    mgr.create_topic("t", 1)
    log = mgr.get_log("t", 0)
    mgr.append("t", 0, batches(3))
    assert log.high_watermark == 3 and not log.read(0).empty
    other.append("t", 0, batches(2, 3))
    assert log.high_watermark == 3  # not asked yet
    assert mgr.high_watermarks() == {("t", 0): 5} and log.high_watermark == 5


# ------------------------------------------------------- checks on a fresh state only


def test_a_check_that_fails_on_a_stale_state_is_made_again_on_a_fresh_one():
    """Another process changed the bucket since this writer last looked: its checks
    (an offset beyond the log end it knew, a topic it did not know or knew alive) are
    made again on the refreshed state before any error."""
    uri = memory_uri()
    a = BucketLogManager(uri)
    a.create_topic("t", 1)
    b = BucketLogManager(uri)
    a.append("t", 0, batches(10))
    assert b.delete_records("t", 0, 5) == 5
    a.create_topic("u", 1)
    c = BucketLogManager(uri)
    assert b.alter_topic_config("u", {"retention.ms": "1"}) == {"retention.ms": "1"}
    b.add_partitions("u", 3)
    a.create_topic("v", 1)
    b.delete_topic("v")
    c.create_topic("v", 2)  # c knew v, b deleted it
    assert BucketLogManager(uri).partitions("v") == [0, 1]
    # a fresh state that says no still says no, naming the real state
    with pytest.raises(OffsetOutOfRangeError, match=r"holds \[5, 10\)"):
        c.delete_records("t", 0, 11)
    with pytest.raises(TopicExistsError):
        b.create_topic("u", 1)


def test_an_append_whose_commit_answer_is_lost_is_committed_once():
    from test_bucket_commit_log import LostAnswers

    storage = LostAnswers(ObjectStorage(memory_uri()))
    mgr = BucketLogManager(storage)
    mgr.create_topic("t", 1)
    storage.lose = 1  # the commit lands, its answer does not
    info = mgr.append("t", 0, batches(2))
    assert (info.first_offset, info.last_offset) == (0, 1)
    assert offsets(BucketLogManager(storage.inner, read_only=True)) == [0, 1]


def test_a_writer_idle_past_the_collection_of_old_commits_does_not_fork_the_log():
    """Commits older than file.delete.delay.ms are collected once a snapshot covers them:
    version ``current + 1`` of a writer idle that long is a free name again. It looks
    before it writes, and appends after the records others committed meanwhile."""
    from seglog.logstore.util.clock import MockClock

    clock = MockClock()
    uri = memory_uri()
    a = BucketLogManager(uri, clock=clock)
    a.create_topic("t", 1)
    a.append("t", 0, batches(1))
    idle = BucketLogManager(uri, clock=clock)  # version 1, then idle
    for i in range(21):
        a.append("t", 0, batches(1, 1 + i))  # versions 2..22, snapshots 10 and 20
    a.commits.flush_snapshots()
    clock.advance(a.default_topic_config.file_delete_delay_ms + 1)
    layout = a.commits.topic_log("t").layout  # the topic's own commit log
    for v in range(20):  # what the collector may take now
        a.storage.delete(layout.commit_key(v))
    for v in (0, 10):
        a.storage.delete(layout.snapshot_key(v))
    info = idle.append("t", 0, batches(5, 22))
    assert (info.first_offset, info.last_offset) == (22, 26)
    assert offsets(BucketLogManager(uri, read_only=True)) == list(range(27))


def test_an_append_is_checked_against_the_config_another_process_just_set():
    from seglog.logstore.errors import RecordTooLargeError

    uri = memory_uri()
    a = BucketLogManager(uri)
    a.create_topic("t", 1)
    a.append("t", 0, batches(1))  # a caches t's config
    b = BucketLogManager(uri)
    b.alter_topic_config("t", {"max.message.bytes": "100"})
    big = batches(50)
    assert len(big) > 100
    with pytest.raises(RecordTooLargeError, match="100"):
        a.append("t", 0, big)
    assert offsets(BucketLogManager(uri, read_only=True)) == [0]
    logs = [n for n in objects(a.storage, "t-0") if n.endswith(".log")]
    assert len(logs) == 1  # the refused attempt's upload is gone
