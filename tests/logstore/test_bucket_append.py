"""Bucket appends (logstore/bucket/bucket_append.py): small indexes inline in the commit entry, so
an append is two sequential requests; group commits of several partitions; and the local
LogManager's same ``append_many`` call."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from bucket_helpers import CountingStorage, memory_uri

from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.bucket.bucket_state import SNAPSHOT_EVERY, SegmentEntry
from seglog.logstore.errors import CorruptMetadataError, CorruptRecordError
from seglog.logstore.manager.log_manager import LogManager, check_log_dirs
from seglog.logstore.records.record_codec import decode_batches, encode_batches
from seglog.logstore.storage.object_storage import ObjectStorage
from seglog.logstore.util.clock import MockClock

TS = 1_700_000_000_000


def batches(n: int, start: int = 0, *, batch_bytes: int = 4096) -> bytearray:
    return encode_batches(
        pa.array([b"value-%06d" % i for i in range(start, start + n)]),
        timestamps=pa.array([TS + i for i in range(start, start + n)], pa.int64()),
        max_batch_bytes=batch_bytes,
    )


def offsets(mgr, topic: str, partition: int) -> list[int]:
    log = mgr.get_log(topic, partition)
    return [
        o
        for c in log.read_chunks(log.log_start_offset, log.high_watermark)
        for o in decode_batches(bytes(c), start_offset=log.log_start_offset)
        .column("offset")
        .to_pylist()
    ]


def counting_manager(partitions: int = 1) -> tuple[BucketLogManager, CountingStorage]:
    storage = CountingStorage(ObjectStorage(memory_uri()))
    # A clock that stands still: the counts are an append's own requests, never the
    # refresh a writer makes when its view aged past MAX_VIEW_AGE_MS (a first append
    # that compiles the kernels on a loaded machine can take that long).
    mgr = BucketLogManager(storage, clock=MockClock())
    mgr.create_topic("t", partitions)
    mgr.commits.flush_snapshots()  # version 0's, written off the create's path
    storage.reset()
    return mgr, storage


def test_an_append_is_one_log_put_then_the_commit():
    mgr, storage = counting_manager()
    mgr.append("t", 0, batches(2000))
    assert dict(storage.counts) == {"write_atomic": 1, "create": 1}
    (seg,) = mgr.state.partition("t", 0).segments
    assert seg.inline_index and seg.inline_timeindex
    assert [e.name for e in storage.list_dir("t-0")] == [seg.key.rpartition("/")[2] + ".log"]


def test_inline_indexes_serve_lookups_without_a_request_and_survive_a_snapshot():
    mgr, storage = counting_manager()
    for i in range(SNAPSHOT_EVERY):
        mgr.append("t", 0, batches(500, 500 * i))
    mgr.commits.flush_snapshots()
    segments = mgr.state.partition("t", 0).segments
    assert all(s.inline_index for s in segments)
    storage.reset()
    reader = BucketLogManager(storage, read_only=True)  # opens from the snapshots
    # The catalog's hint and snapshot (of its one version), the topic log's hint and
    # snapshot (of its last version).
    assert storage.counts["read"] == 4
    assert reader.state.partition("t", 0).segments == segments
    log = reader.get_log("t", 0)
    storage.reset()
    assert log.offset_for_timestamp(TS + 4321) == 4321
    fetched = log.read(2750, max_bytes=100)
    assert decode_batches(fetched.records, start_offset=2750).column("offset")[0].as_py() == 2750
    assert storage.counts["read"] == 0  # no index object fetched
    assert offsets(reader, "t", 0) == list(range(500 * SNAPSHOT_EVERY))


def test_a_group_commit_appends_every_partition_in_one_commit():
    mgr, storage = counting_manager(8)
    version = mgr.state.version
    infos = mgr.append_many({("t", p): batches(100 + p, 1000 * p) for p in range(8)})
    assert mgr.state.version == version + 1
    assert dict(storage.counts) == {"write_atomic": 8, "create": 1}
    assert [(i.first_offset, i.last_offset, i.num_records) for i in infos.values()] == [
        (0, 99 + p, 100 + p) for p in range(8)
    ]
    assert list(infos) == [("t", p) for p in range(8)]
    infos = mgr.append_many({("t", 3): batches(5), ("t", 1): b""})
    assert (infos[("t", 3)].first_offset, infos[("t", 1)].first_offset) == (103, 101)
    reader = LogManager(mgr.uri, read_only=True)
    assert reader.high_watermarks() == {("t", p): 100 + p + 5 * (p == 3) for p in range(8)}
    assert offsets(reader, "t", 5) == list(range(105))


def test_a_bad_batch_in_any_partition_uploads_and_commits_nothing():
    mgr, storage = counting_manager(3)
    bad = batches(10)
    bad[-1] ^= 0xFF  # the last record's byte: the CRC no longer matches
    with pytest.raises(CorruptRecordError, match="t-2"):
        mgr.append_many({("t", 0): batches(10), ("t", 1): batches(10), ("t", 2): bad})
    assert storage.counts["write_atomic"] == storage.counts["create"] == 0
    assert mgr.high_watermarks() == {("t", p): 0 for p in range(3)}


def test_a_lost_race_reuploads_nothing_and_commits_the_upload_with_an_offset_delta(tmp_path: Path):
    uri = memory_uri()
    storage = CountingStorage(ObjectStorage(uri))
    a, b = BucketLogManager(storage), LogManager(uri)
    a.create_topic("t", 2)
    a.commits.flush_snapshots()  # version 0's, written off the create's path
    b.refresh()
    b.append("t", 0, batches(7))  # a is one commit behind
    storage.reset()
    infos = a.append_many({("t", 0): batches(3, 7), ("t", 1): batches(4)})
    assert (
        infos[("t", 0)].first_offset,
        infos[("t", 0)].last_offset,
        infos[("t", 1)].first_offset,
    ) == (7, 9, 0)
    # Both .logs once; the lost create, the fold of the winner, the create that wins.
    assert (storage.counts["write_atomic"], storage.counts["delete"], storage.counts["create"]) == (
        2,
        0,
        2,
    )
    # t-0's upload was stamped from 0 and is named so; the commit moves it up by 7.
    kept = a.state.partition("t", 0).segments[-1]
    assert (
        kept.key.rpartition("/")[2][:20],
        kept.base_offset,
        kept.next_offset,
        kept.offset_delta,
    ) == (f"{0:020d}", 7, 10, 7)
    assert a.state.partition("t", 1).segments[-1].offset_delta == 0
    for reader in (a, LogManager(uri, read_only=True)):
        assert offsets(reader, "t", 0) == list(range(10))
        assert offsets(reader, "t", 1) == list(range(4))
    logs = {e.name for p in (0, 1) for e in storage.list_dir(f"t-{p}")}
    assert logs == {
        s.key.rpartition("/")[2] + ".log"
        for p in (0, 1)
        for s in a.state.partition("t", p).segments
    }
    # seglog check accepts it; export writes exact Kafka segments (real base offsets).
    assert [f for f in a.check_objects()[0] if f.problem] == []
    a.export(tmp_path / "out")
    assert [p.message for p in check_log_dirs([tmp_path / "out"], deep=True)] == []
    exported = sorted(p.name for p in (tmp_path / "out" / "t-0").glob("*.log"))
    assert exported == [f"{0:020d}.log", f"{7:020d}.log"]
    with LogManager([tmp_path / "out"]) as local:
        assert offsets(local, "t", 0) == list(range(10))
    # A merge finds the kept upload by its name (which carries the stored base).
    assert a.merge_segments() == 2
    (merged,) = a.state.partition("t", 0).segments
    assert merged.offset_delta == 0 and offsets(LogManager(uri, read_only=True), "t", 0) == list(
        range(10)
    )


# --------------------------------------------------------------- the entry's format


def test_an_entry_without_inline_indexes_keeps_the_old_format():
    old = {
        "key": "t-0/00000000000000000000-0123456789abcdef",
        "base_offset": 0,
        "next_offset": 5,
        "size": 100,
        "max_timestamp": TS,
        "index_bytes": 8,
        "timeindex_bytes": 12,
    }
    entry = SegmentEntry.from_json(old, "here")
    assert entry.inline_index == entry.inline_timeindex == b""
    assert entry.to_json() == old
    inline = SegmentEntry(
        old["key"], 0, 5, 100, TS, inline_index=bytes(8), inline_timeindex=bytes(24)
    )
    assert SegmentEntry.from_json(json.loads(json.dumps(inline.to_json())), "here") == inline


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("inline_index", "not base64!", "inline_index is not valid base64"),
        ("inline_index", "AAAAAAAA", "inline_index holds 6 bytes, not whole 8-byte"),
        ("inline_timeindex", 12, "inline_timeindex is not a base64 string"),
        ("index_bytes", 8, "names an index both as an object and inline"),
    ],
)
def test_a_damaged_inline_index_is_an_error_naming_the_commit(field: str, value, message: str):
    mgr = LogManager(memory_uri())
    mgr.create_topic("t", 1)
    mgr.append("t", 0, batches(2000))
    log = mgr.commits.topic_log("t")  # the topic's own commit log holds its appends
    key = log.layout.commit_key(log.state.version)
    doc = json.loads(mgr.storage.read(key))
    (entry,) = doc["partitions"]["t-0"]["add"]
    assert entry["inline_index"]
    entry[field] = value
    mgr.storage.write_atomic(key, json.dumps(doc).encode())
    with pytest.raises(CorruptMetadataError, match=f"{key}.*{message}"):
        LogManager(mgr.uri, read_only=True)


# ------------------------------------------------------------- the local manager


def test_the_local_append_many_publishes_every_partition_with_one_checkpoint(tmp_path: Path):
    with LogManager([tmp_path]) as mgr:
        mgr.create_topic("t", 2)
        infos = mgr.append_many({("t", 0): batches(3), ("t", 1): batches(5)}, publish=False)
        assert [i.last_offset for i in infos.values()] == [2, 4]
        assert LogManager([tmp_path], read_only=True).high_watermarks() == {
            ("t", 0): 0,
            ("t", 1): 0,
        }  # appended, not yet published
        mgr.append_many({("t", 1): batches(2, 5)})
        assert LogManager([tmp_path], read_only=True).high_watermarks() == {
            ("t", 0): 3,
            ("t", 1): 7,
        }


# ------------------------------------------------- maintenance and export of inline indexes


def test_export_writes_inline_indexes_as_real_files_and_a_merge_makes_them_objects(tmp_path: Path):
    mgr = LogManager(memory_uri())
    mgr.create_topic("t", 1, {"index.interval.bytes": 100, "segment.bytes": 1 << 20})
    for i in range(3):
        mgr.append("t", 0, batches(300, 300 * i, batch_bytes=200))
    segments = mgr.state.partition("t", 0).segments
    assert all(s.inline_index and s.inline_timeindex for s in segments)
    mgr.export(tmp_path / "out")
    for s in segments:
        stem = tmp_path / "out" / "t-0" / f"{s.base_offset:020d}"
        assert stem.with_suffix(".index").read_bytes() == s.inline_index
        assert stem.with_suffix(".timeindex").read_bytes() == s.inline_timeindex
    with LogManager([tmp_path / "out"]) as local:  # the local engine trusts those files
        assert local.get_log("t", 0).offset_for_timestamp(TS + 555) == 555
    assert mgr.merge_segments() == 3  # the segments merged
    (merged,) = mgr.state.partition("t", 0).segments
    assert merged.inline_index == merged.inline_timeindex == b""
    assert merged.index_bytes and merged.timeindex_bytes  # objects: snapshots stay small
    assert offsets(mgr, "t", 0) == list(range(900))


def test_a_part_stamped_by_a_build_that_failed_is_uploaded_by_the_next(monkeypatch):
    """A build that stamped y-0, then failed on x-0 (deleted, as far as this process
    knew), uploaded nothing of y-0: the build after the refresh (x-0 recreated meanwhile)
    must upload it, not take it as done, or the commit names objects never uploaded. (Two
    topics in one commit: the catalog of a bucket without per-topic logs.)"""
    uri = memory_uri()
    mgr = BucketLogManager(ObjectStorage(uri), topic_logs=False)
    other = BucketLogManager(ObjectStorage(uri), topic_logs=False)
    mgr.create_topic("y", 1)
    mgr.create_topic("x", 1)
    commit = mgr.commits.commit

    def x_deleted_then_recreated(operation, build, **kwargs):
        # Between the append's checks and its commit another process deletes x, this
        # process folds that (as a reader's refresh would), and x is created again
        # before the commit's retry reads the bucket.
        other.delete_topic("x")
        mgr.commits.refresh()
        other.create_topic("x", 1)
        return commit(operation, build, **kwargs)

    monkeypatch.setattr(mgr.commits, "commit", x_deleted_then_recreated)
    infos = mgr.append_many({("y", 0): batches(3), ("x", 0): batches(2)})
    assert infos[("y", 0)].first_offset == 0 and infos[("x", 0)].first_offset == 0
    reader = BucketLogManager(ObjectStorage(uri), read_only=True)
    assert offsets(reader, "y", 0) == [0, 1, 2]
    assert offsets(reader, "x", 0) == [0, 1]
