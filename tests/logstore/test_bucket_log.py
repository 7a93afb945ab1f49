"""BucketLog (logstore/bucket/bucket_log.py) over memory://: the state a partition's reader keeps
(never older than one it already had), reads that meet vanished objects, deleted topics."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest
from bucket_helpers import memory_uri

from seglog.logstore.bucket.bucket_commit_log import Change
from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.bucket.bucket_segment import object_keys
from seglog.logstore.bucket.bucket_state import PartitionChange
from seglog.logstore.errors import (
    MissingSegmentError,
    OffsetBelowLogStartError,
    UnknownTopicOrPartitionError,
)
from seglog.logstore.records.record_codec import decode_batches, encode_batches

TS = 1_700_000_000_000


def batches(n: int, start: int = 0) -> bytearray:
    """Several small batches (so a segment has index entries)."""
    return encode_batches(pa.array([b"v%d" % i for i in range(start, start + n)]),
                          timestamps=pa.array([TS + i for i in range(start, start + n)],
                                              pa.int64()), max_batch_bytes=100)


def test_a_slow_sync_never_takes_the_high_watermark_back():
    """A thread that read the state before an append stores it after the append's sync."""
    mgr = BucketLogManager(memory_uri())
    mgr.create_topic("t", 1)
    mgr.append("t", 0, batches(3))
    log = mgr.get_log("t", 0)
    fetched, go = threading.Event(), threading.Event()
    real = log._source

    def slow_source(refresh: bool):
        got = real(refresh)
        if threading.current_thread().name == "slow-reader":
            fetched.set()
            go.wait()
        return got

    log._source = slow_source
    slow = threading.Thread(target=log.sync, name="slow-reader")
    slow.start()
    fetched.wait()
    mgr.append("t", 0, batches(4, 3))  # the manager syncs its logs: hw 7
    assert log.high_watermark == 7
    go.set()
    slow.join()
    assert log.high_watermark == 7
    assert log.read(3).next_offset == 7


def two_segments_then_the_first_collected() -> tuple[BucketLogManager, str]:
    """Two segments [0, 10) and [10, 20); then a retention-like commit removes the first
    and its objects are deleted, as the collector will once the delay is over."""
    uri = memory_uri()
    writer = BucketLogManager(uri)
    writer.create_topic("t", 1, {"index.interval.bytes": 1})
    writer.append("t", 0, batches(10))
    writer.append("t", 0, batches(10, 10))
    return writer, uri


def collect_first(writer: BucketLogManager) -> None:
    first = writer.state.partitions["t-0"].segments[0]
    writer.commits.commit("retention", lambda s: Change(partitions={"t-0": PartitionChange(
        remove=(first.key,), log_start_offset=10)}))
    for key in object_keys(first):
        writer.storage.delete(key)


@pytest.mark.parametrize("operation", ["read", "read_chunks", "offset_for_timestamp"])
def test_a_reader_whose_segment_was_collected_looks_again(operation):
    writer, uri = two_segments_then_the_first_collected()
    log = BucketLogManager(uri, read_only=True).get_log("t", 0)
    collect_first(writer)
    if operation == "offset_for_timestamp":
        assert log.offset_for_timestamp(TS) == 10  # the earliest record left
        return
    with pytest.raises(OffsetBelowLogStartError, match=r"\[0, 10\) of t-0 were removed"):
        if operation == "read":
            log.read(0)
        else:
            list(log.read_chunks(0, 20))


@pytest.mark.parametrize("operation", ["read", "read_chunks", "offset_for_timestamp"])
def test_a_referenced_object_that_is_missing_is_reported_as_damage(operation):
    """Still referenced once the state was read again: the bucket is damaged, and the
    error says which state references which segment."""
    writer, uri = two_segments_then_the_first_collected()
    second = writer.state.partitions["t-0"].segments[1]
    writer.storage.delete(second.key + ".log")
    log = BucketLogManager(uri, read_only=True).get_log("t", 0)
    message = (rf"{second.key}\.log is missing, though version \d+ of the bucket's state "
               rf"references it \(segment {second.key}\): offsets \[10, 20\) of t-0 "
               rf"cannot be read; the bucket is damaged")
    with pytest.raises(MissingSegmentError, match=message):
        if operation == "offset_for_timestamp":
            log.offset_for_timestamp(TS + 15)
        elif operation == "read":
            log.read(15)
        else:
            list(log.read_chunks(10, 20))


def test_a_reader_of_a_deleted_topic_is_told_so_not_shown_an_empty_partition():
    uri = memory_uri()
    writer = BucketLogManager(uri)
    writer.create_topic("t", 1)
    writer.append("t", 0, batches(3))
    reader = BucketLogManager(uri, read_only=True)
    log = reader.get_log("t", 0)
    writer.delete_topic("t")
    with pytest.raises(UnknownTopicOrPartitionError, match=r"partition t-0 of memory://.* "
                                                           r"no longer exists"):
        log.refresh()
    assert log.high_watermark == 3  # what it knew stays, never 0
    assert ("t", 0) not in reader.high_watermarks()
    with pytest.raises(UnknownTopicOrPartitionError):
        reader.get_log("t", 0)


def keyed(keys: list[bytes]) -> bytearray:
    return encode_batches(pa.array([b"v%d" % i for i in range(len(keys))]),
                          keys=pa.array(keys), max_batch_bytes=60)


@pytest.mark.parametrize("back_to_delete", [False, True])
def test_a_cached_log_takes_the_config_of_an_altered_then_compacted_topic(back_to_delete):
    """A reader's log opened while the topic was cleanup.policy=delete reads the gaps
    compaction left once the topic is altered to compact and cleaned, and still after the
    policy goes back to delete (the gaps stay: the partition has a cleaner offset)."""
    uri = memory_uri()
    writer = BucketLogManager(uri, config={"log.cleaner.dedupe.buffer.size": 1 << 20})
    writer.create_topic("t", 1, {"min.cleanable.dirty.ratio": 0.01})
    writer.append("t", 0, keyed([b"k0", b"k1", b"k1", b"k2", b"k2", b"k3"]))
    writer.append("t", 0, keyed([b"k9"]))  # rolls: the first segment is cleanable
    reader = BucketLogManager(uri, read_only=True)
    log = reader.get_log("t", 0)
    assert not log.config.compact
    writer.alter_topic_config("t", {"cleanup.policy": "compact"})
    assert writer.clean() is not None
    if back_to_delete:
        writer.alter_topic_config("t", {"cleanup.policy": "delete"})
    reader.refresh()
    assert log.config.compact is not back_to_delete
    offsets = [o for chunk in log.read_chunks(0, 7)
               for o in decode_batches(chunk).column("offset").to_pylist()]
    assert offsets == [0, 2, 4, 5, 6]
