"""``BucketLogManager.upgrade_topic_logs`` (bucket_upgrade): a bucket written before
per-topic commit logs (``topic_logs=False`` writes that layout) gets its legacy topics
moved into their own logs without copying a data object. Moved topics read the same bytes
(before and after, for a reader that planned before), take appends in their own log (a
writer with a stale view included: never the catalog again), and keep every partition's
log start, compaction gaps and sink ledgers; a move racing a writer of the topic never
names a stale log; a move killed between its logs and the catalog commit leaves the
topics legacy, and running it again finishes; a second run moves nothing. Real objects:
memory:// and the session's S3 server (moto), real subprocesses for the crash."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from bucket_helpers import log_values, memory_uri, store_moving_with

from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.bucket.bucket_state import CATALOG, TOPIC_LOGS_DIR
from seglog.logstore.errors import CorruptMetadataError, UnknownTopicOrPartitionError
from seglog.logstore.records.record_codec import encode_batches
from seglog.logstore.storage.object_storage import ObjectStorage
from seglog.logstore.storage.storage import Storage
from seglog.logstore.util.clock import MockClock

SRC = str(Path(__file__).resolve().parents[2] / "src")


def batch(text: str, n: int = 3) -> bytearray:
    return encode_batches(pa.array([f"{text}-{j}".encode() for j in range(n)]))


def legacy_bucket(uri: str | Storage, topics: dict[str, int], **kwargs: Any) -> None:
    """A bucket as seglog before per-topic logs wrote it: every topic in the catalog."""
    with BucketLogManager(uri, topic_logs=False, **kwargs) as old:
        for name, partitions in topics.items():
            old.create_topic(name, partitions)
            for p in range(partitions):
                old.append(name, p, batch(f"{name}{p}"))


def values(mgr: BucketLogManager, topic: str, partition: int = 0) -> list[bytes | None]:
    return [v for _, v in log_values(mgr, topic, partition)]


def topic_log_dirs(uri: str) -> set[str]:
    return {e.name for e in ObjectStorage(uri).list_dir(TOPIC_LOGS_DIR) if e.is_dir}


def test_upgrade_moves_every_legacy_topic_without_copying_data():
    uri = memory_uri()
    legacy_bucket(uri, {"a": 2, "b": 1})
    storage = ObjectStorage(uri)
    data_before = sorted(e.name for e in storage.list_dir("a-0"))
    with BucketLogManager(uri) as mgr:
        mgr.create_topic("fresh", 1)  # already in its own log: untouched
        fresh_log = mgr.commits.catalog.state.topic_logs["fresh"]
        dry = mgr.upgrade_topic_logs(dry_run=True)
        assert [(m.topic, m.partitions, m.segments, m.log_id) for m in dry.moved] == [
            ("a", 2, 2, None),
            ("b", 1, 1, None),
        ]
        assert all(m.size_bytes > 0 for m in dry.moved) and dry.already == ("fresh",)
        assert topic_log_dirs(uri) == {fresh_log}  # a dry run writes nothing
        report = mgr.upgrade_topic_logs()
        assert [m.topic for m in report.moved] == ["a", "b"]
        assert report.moved[0].size_bytes == dry.moved[0].size_bytes
        catalog = mgr.commits.catalog.state
        assert set(catalog.topics) == set()  # nothing legacy left
        assert catalog.topic_logs["a"] == report.moved[0].log_id
        assert mgr.commits.topic_log("a") is not None
        assert values(mgr, "a", 1) == [b"a1-0", b"a1-1", b"a1-2"]
        mgr.append("a", 1, batch("after"))
        assert mgr.commits.catalog.state.version == report.catalog_version  # not the catalog
        again = mgr.upgrade_topic_logs()
        assert again.moved == () and again.already == ("a", "b", "fresh")
    assert sorted(e.name for e in storage.list_dir("a-0")) == data_before  # nothing copied
    with BucketLogManager(uri, read_only=True) as reader:
        assert values(reader, "a", 1) == [b"a1-0", b"a1-1", b"a1-2"] + [
            f"after-{j}".encode() for j in range(3)
        ]
        assert reader.high_watermarks() == {("a", 0): 3, ("a", 1): 6, ("b", 0): 3, ("fresh", 0): 0}
    newest = storage.read(CATALOG.commit_key(report.catalog_version))
    doc = json.loads(newest)
    assert doc["format"] == 2 and doc["operation"] == "move_topic"
    assert doc["topics"] == {"a": None, "b": None}


def test_a_moved_partition_keeps_its_log_start_and_topic_id():
    uri = memory_uri()
    legacy_bucket(uri, {"t": 1})
    with BucketLogManager(uri, topic_logs=False) as old:
        old.append("t", 0, batch("second"))
        old.delete_records("t", 0, 4)
        topic_id = old.state.topics["t"].topic_id
    with BucketLogManager(uri) as mgr:
        mgr.upgrade_topic_logs(["t"])
    with BucketLogManager(uri, read_only=True) as reader:
        assert reader.log_start_offsets() == {("t", 0): 4}
        assert reader.state.topics["t"].topic_id == topic_id
        assert reader.commits.catalog.state.topic_logs["t"] == topic_id
        assert values(reader, "t") == [b"second-1", b"second-2"]


def test_a_named_topic_the_bucket_lacks_is_refused_and_nothing_moves():
    uri = memory_uri()
    legacy_bucket(uri, {"a": 1})
    with BucketLogManager(uri) as mgr:
        version = mgr.commits.catalog.state.version
        with pytest.raises(UnknownTopicOrPartitionError, match=r"no topic 'nope' to move"):
            mgr.upgrade_topic_logs(["a", "nope"])
        assert mgr.commits.catalog.state.version == version
    assert topic_log_dirs(uri) == set()


def test_a_manager_kept_readable_for_older_versions_refuses_to_move():
    from seglog.logstore.errors import ConfigError

    uri = memory_uri()
    legacy_bucket(uri, {"a": 1})
    with BucketLogManager(uri, topic_logs=False) as rolling:
        assert [m.topic for m in rolling.upgrade_topic_logs(dry_run=True).moved] == ["a"]
        with pytest.raises(ConfigError, match="opened with topic_logs=False"):
            rolling.upgrade_topic_logs()
    assert topic_log_dirs(uri) == set()


def test_a_writer_with_a_stale_view_appends_to_the_moved_topics_log():
    uri = memory_uri()
    legacy_bucket(uri, {"t": 1, "u": 1})
    stale = BucketLogManager(uri)  # opened before the move: sees t in the catalog
    assert stale.commits.topic_log("t") is None
    with BucketLogManager(uri) as mgr:
        moved = mgr.upgrade_topic_logs()
    stale.append("t", 0, batch("late"))
    assert stale.commits.topic_log("t") is not None  # its refresh routed it
    stale.close()
    with BucketLogManager(uri, read_only=True) as reader:
        assert reader.commits.catalog.state.version == moved.catalog_version
        assert values(reader, "t")[-3:] == [b"late-0", b"late-1", b"late-2"]
        log = reader.commits.topic_log("t")
        assert log is not None and log.state.version == 1


def test_a_move_racing_an_append_to_the_topic_never_names_the_stale_log(monkeypatch):
    """The append wins the catalog version the move wanted: the log prepared before it
    lacks the append, so the move prepares another and names that one."""
    from seglog.logstore.bucket import bucket_upgrade

    uri = memory_uri()
    clock = MockClock(int(time.time() * 1000))
    storage = store_moving_with(clock, uri)
    legacy_bucket(storage, {"t": 1}, clock=clock)
    writer = BucketLogManager(storage, clock=clock)
    prepare = bucket_upgrade._prepare
    calls: list[list[str]] = []

    def and_the_writer_appends(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        prepared = prepare(*args, **kwargs)
        calls.append(sorted(prepared))
        if len(calls) == 1:
            writer.append("t", 0, batch("raced"))  # lands in the catalog, at V+1
        return prepared

    monkeypatch.setattr(bucket_upgrade, "_prepare", and_the_writer_appends)
    with BucketLogManager(storage, clock=clock) as mgr:
        report = mgr.upgrade_topic_logs()
    assert calls == [["t"], ["t"]] and report.stale_logs == 1
    assert len(topic_log_dirs(uri)) == 2  # the stale one, named by nothing
    with BucketLogManager(storage, clock=clock) as reader:
        assert values(reader, "t")[-3:] == [b"raced-0", b"raced-1", b"raced-2"]
        named = reader.commits.catalog.state.topic_logs["t"]
        assert named == report.moved[0].log_id
        assert reader.collect().topic_logs == 0  # younger than the orphan grace
        clock.advance(3_600_000)
        assert reader.collect().topic_logs == 1
    assert topic_log_dirs(uri) == {named}
    writer.append("t", 0, batch("on"))  # its view is stale again: routed to the new log
    writer.close()
    with BucketLogManager(uri, read_only=True) as reader:
        assert values(reader, "t")[-3:] == [b"on-0", b"on-1", b"on-2"]


def test_the_fold_refuses_a_catalog_commit_of_a_moved_topic():
    uri = memory_uri()
    legacy_bucket(uri, {"t": 1})
    with BucketLogManager(uri) as mgr:
        version = mgr.upgrade_topic_logs().catalog_version
    storage = ObjectStorage(uri)
    earlier = json.loads(storage.read(CATALOG.commit_key(version - 1)))
    forged = {**earlier, "version": version + 1, "operation": "append"}
    storage.write_atomic(CATALOG.commit_key(version + 1), json.dumps(forged).encode())
    with pytest.raises(CorruptMetadataError, match=r"t-0, which does not exist"):
        BucketLogManager(uri, read_only=True)


def test_a_move_killed_before_the_catalog_commit_leaves_the_topics_legacy(s3_uri: str):
    legacy_bucket(s3_uri, {"a": 1, "b": 1})
    env = {**os.environ, "SEGLOG_CRASH_AT": "upgrade-after-topic-logs", "PYTHONPATH": SRC}
    code = (
        "from seglog.logstore.bucket.bucket_manager import BucketLogManager\n"
        f"BucketLogManager({s3_uri!r}).upgrade_topic_logs()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=120)
    assert done.returncode == -9, done.stderr.decode()[-2000:]  # killed at the step
    left = topic_log_dirs(s3_uri)
    assert len(left) == 2  # both logs written, named by nothing
    with BucketLogManager(s3_uri) as mgr:
        assert set(mgr.commits.catalog.state.topics) == {"a", "b"}  # still legacy
        mgr.append("a", 0, batch("still"))  # and writable, in the catalog
        assert mgr.commits.topic_log("a") is None
        report = mgr.upgrade_topic_logs()  # running it again finishes
        assert [m.topic for m in report.moved] == ["a", "b"]
        assert not {m.log_id for m in report.moved} & left  # new logs, the old unnamed
        assert values(mgr, "a")[-3:] == [b"still-0", b"still-1", b"still-2"]
    with BucketLogManager(s3_uri, orphan_grace_ms=0) as collector:  # the grace is past
        assert collector.collect().topic_logs == 2
        assert values(collector, "b") == [b"b0-0", b"b0-1", b"b0-2"]
    assert topic_log_dirs(s3_uri) == {m.log_id for m in report.moved}


def test_an_append_to_several_legacy_topics_racing_their_move_fails_whole(monkeypatch):
    """append_many over two legacy topics is one catalog commit; the move wins the
    version it wanted, so its rebuild would span two logs: it fails, nothing of it
    visible, and the retry commits each topic in its own log."""
    from seglog.logstore.bucket import bucket_append
    from seglog.logstore.errors import CommitConflictError

    uri = memory_uri()
    legacy_bucket(uri, {"a": 1, "b": 1})
    writer = BucketLogManager(uri)
    upload = bucket_append.upload_parts
    moved: list[int] = []

    def the_move_lands_meanwhile(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        if not moved:
            with BucketLogManager(uri) as other:
                moved.append(other.upgrade_topic_logs().catalog_version)
        return upload(*args, **kwargs)

    monkeypatch.setattr(bucket_append, "upload_parts", the_move_lands_meanwhile)
    records = {("a", 0): batch("both"), ("b", 0): batch("both")}
    with pytest.raises(CommitConflictError, match=r"\['a', 'b'\] moved to their own commit"):
        writer.append_many(records)
    with BucketLogManager(uri, read_only=True) as reader:
        assert reader.high_watermarks() == {("a", 0): 3, ("b", 0): 3}  # nothing of it
    writer.append_many(records)  # the retry groups by the new logs
    writer.close()
    with BucketLogManager(uri, read_only=True) as reader:
        assert reader.high_watermarks() == {("a", 0): 6, ("b", 0): 6}
        assert reader.commits.catalog.state.version == moved[0]


def test_a_reader_that_planned_a_range_before_the_move_reads_the_same_bytes_after():
    uri = memory_uri()
    legacy_bucket(uri, {"t": 1})
    with BucketLogManager(uri, topic_logs=False) as old:
        old.append("t", 0, batch("more"))
    reader = BucketLogManager(uri, read_only=True)
    log = reader.get_log("t", 0)
    start, end = log.log_start_offset, log.high_watermark  # the plan: [0, 6)
    before = b"".join(bytes(c) for c in log.read_chunks(start, end))
    with BucketLogManager(uri) as mgr:
        mgr.upgrade_topic_logs()
        mgr.append("t", 0, batch("later"))  # the log grows in its own log meanwhile
    assert b"".join(bytes(c) for c in log.read_chunks(start, end)) == before
    reader.refresh()
    moved = reader.get_log("t", 0)
    assert moved.high_watermark == end + 3
    assert b"".join(bytes(c) for c in moved.read_chunks(start, end)) == before
    reader.close()
    with BucketLogManager(uri, read_only=True) as fresh:
        again = fresh.get_log("t", 0)
        assert b"".join(bytes(c) for c in again.read_chunks(start, end)) == before


def test_version_0_of_a_moved_topic_keeps_compaction_gaps_and_its_cleaner_offset():
    """A compacted partition has offsets no segment holds and a log start above 0: an
    append-like first commit could not express it; ``move_topic`` sets it whole (and
    refuses to set a partition that holds segments already)."""
    from seglog.logstore.bucket.bucket_state import (
        MOVE_OPERATION,
        BucketState,
        Commit,
        PartitionChange,
        PartitionState,
        SegmentEntry,
        TopicSpec,
    )

    def entry(base: int, end: int) -> SegmentEntry:
        return SegmentEntry(f"t-0/{base:020d}-{base:016x}", base, end, 100, 1)

    segments = (entry(0, 5), entry(8, 10))  # [5, 8) compacted away
    change = PartitionChange(add=segments, log_start_offset=2, cleaner_offset=8)
    spec = TopicSpec(1, {"cleanup.policy": "compact"}, None)

    def first(operation: str) -> Commit:
        return Commit(0, "w", 1, operation, {"t": spec}, {"t-0": change})

    moved = BucketState().apply(Commit.decode(first(MOVE_OPERATION).encode(), "c", 0))
    assert moved.partitions["t-0"] == PartitionState(segments, 2, 8)
    with pytest.raises(CorruptMetadataError, match=r"offsets \[5, 8\) would be held by no"):
        BucketState().apply(first("create_topic"))
    again = Commit(1, "w", 1, MOVE_OPERATION, {}, {"t-0": change})
    with pytest.raises(CorruptMetadataError, match="holds segments already"):
        moved.apply(again)


def test_a_writer_process_appending_through_the_move_loses_nothing(s3_uri: str):
    """Another process appends to a legacy topic in a loop while this one moves it:
    every acknowledged append is read back once, in order, and none failed; the catalog
    holds no commit of the topic after the move."""
    legacy_bucket(s3_uri, {"t": 1, "u": 1})
    code = (
        "import sys\n"
        "import pyarrow as pa\n"
        "from seglog.logstore.bucket.bucket_manager import BucketLogManager\n"
        "from seglog.logstore.records.record_codec import encode_batches\n"
        f"mgr = BucketLogManager({s3_uri!r})\n"
        "for i in range(40):\n"
        "    mgr.append('t', 0, encode_batches(pa.array([f'w{i}'.encode()])))\n"
        "    print(i, flush=True)\n"
    )
    env = {**os.environ, "PYTHONPATH": SRC}
    writer = subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert writer.stdout is not None
        for _ in range(5):  # it is appending
            writer.stdout.readline()
        with BucketLogManager(s3_uri) as mgr:
            report = mgr.upgrade_topic_logs()
        out, err = writer.communicate(timeout=300)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    assert writer.returncode == 0, err.decode()[-2000:]
    assert [m.topic for m in report.moved] == ["t", "u"]
    with BucketLogManager(s3_uri, read_only=True) as reader:
        assert values(reader, "t")[3:] == [f"w{i}".encode() for i in range(40)]
        catalog = reader.commits.catalog.state
        assert catalog.version == report.catalog_version and set(catalog.topics) == set()
