"""The bucket's collector (bucket_collect, through BucketLogManager.collect) over
memory://: removed objects after file.delete.delay.ms while a reader holding an older view
keeps reading, orphans after the grace, deleted topics, old commits and snapshots, and a
writer idle past the collection of its version."""

from __future__ import annotations

import logging
import time

import pyarrow as pa
from bucket_helpers import StoreClockStorage, store_moving_with

from seglog.logstore.bucket import bucket_append
from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.bucket.bucket_segment import object_keys
from seglog.logstore.bucket.bucket_state import LogLayout, parse_version_name
from seglog.logstore.records.record_codec import decode_batches, encode_batches
from seglog.logstore.util.clock import MockClock

TS = 1_700_000_000_000
HOUR = 3_600_000


def batch(i: int, n: int = 4) -> bytearray:
    return encode_batches(
        pa.array([f"v{i}-{j}".encode() for j in range(n)]),
        timestamps=pa.array([TS + i] * n, pa.int64()),
    )


def read_all(log, start: int = 0) -> list[int]:
    return [
        o
        for chunk in log.read_chunks(start, log.high_watermark)
        for o in decode_batches(bytes(chunk), start_offset=start).column("offset").to_pylist()
    ]


def now_clock() -> MockClock:
    """A test clock at the wall time (object stores stamp objects with it)."""
    return MockClock(int(time.time() * 1000))


def writer_of_kept_topic(clock: MockClock) -> tuple[StoreClockStorage, BucketLogManager]:
    """A store on ``clock``, and a writer of topic ``t`` (one partition, kept forever)."""
    storage = store_moving_with(clock)
    mgr = BucketLogManager(storage, clock=clock)
    mgr.create_topic("t", 1, {"retention.ms": -1})
    return storage, mgr


def names(mgr: BucketLogManager, prefix: str) -> set[str]:
    return {e.name for e in mgr.storage.list_dir(prefix) if not e.is_dir}


def log_of(mgr: BucketLogManager, topic: str = "t") -> LogLayout:
    """Where topic ``topic``'s own commit log is (every topic created now has one)."""
    log = mgr.commits.topic_log(topic)
    assert log is not None
    return log.layout


def log_version(mgr: BucketLogManager, topic: str = "t") -> int:
    log = mgr.commits.topic_log(topic)
    assert log is not None
    return log.state.version


def versions(mgr: BucketLogManager, prefix: str) -> list[int]:
    return sorted(v for v in (parse_version_name(n) for n in names(mgr, prefix)) if v is not None)


def test_a_reader_holding_an_older_view_reads_until_the_delay_passes():
    clock = now_clock()
    uri = store_moving_with(clock)
    mgr = BucketLogManager(uri, clock=clock)
    mgr.create_topic("t", 1, {"file.delete.delay.ms": 1000, "retention.ms": -1})
    for i in range(6):
        mgr.append("t", 0, batch(i))
    reader = BucketLogManager(uri, read_only=True)
    planned = reader.get_log("t", 0)  # holds the view of six segments
    assert planned.num_segments == 6
    old_objects = names(mgr, "t-0")

    mgr.delete_records("t", 0, 8)
    assert mgr.delete_old_segments() == 2
    assert mgr.merge_segments() == 4
    stats = mgr.collect()
    assert stats.removed_objects == 0 and stats.waiting == len(old_objects)
    assert read_all(planned) == list(range(24))  # everything it planned on is still there

    clock.advance(1001)
    stats = mgr.collect()
    assert stats.removed_objects == len(old_objects) and stats.orphans == 0
    (merged,) = mgr.state.partition("t", 0).segments
    assert {f"t-0/{n}" for n in names(mgr, "t-0")} == set(object_keys(merged))
    fresh = BucketLogManager(uri, read_only=True).get_log("t", 0)
    assert read_all(fresh, 8) == list(range(8, 24))
    # The stale reader finds its objects gone, refreshes once and reads the new view.
    assert read_all(planned, 8) == list(range(8, 24))


def test_orphans_are_deleted_after_the_grace_only():
    clock = now_clock()
    mgr = BucketLogManager(store_moving_with(clock), clock=clock)
    mgr.create_topic("t", 1, {"retention.ms": -1})
    mgr.append("t", 0, batch(0))
    committed = names(mgr, "t-0")
    orphan = "t-0/00000000000000000004-0123456789abcdef.log"
    mgr.storage.write_atomic(orphan, b"a dead writer's upload")
    mgr.storage.write_atomic("_seglog/staging/q1/part-0.bin", b"not a sink's upload")
    # No commit names a partition gone-0: not provably this log dir's, never deleted.
    mgr.storage.write_atomic("gone-0/00000000000000000000-0123456789abcdef.log", b"x")
    stats = mgr.collect()
    assert (stats.orphans, stats.orphans_waiting) == (0, 2)
    clock.advance(HOUR - 10_000)
    assert mgr.collect().orphans == 0
    clock.advance(20_000)
    stats = mgr.collect()
    assert (stats.orphans, stats.orphans_waiting) == (2, 0)
    assert names(mgr, "t-0") == committed
    assert not mgr.storage.list_dir("_seglog/staging")
    assert names(mgr, "gone-0") == {"00000000000000000000-0123456789abcdef.log"}


def test_a_configured_orphan_grace():
    clock = now_clock()
    mgr = BucketLogManager(store_moving_with(clock), clock=clock, orphan_grace_ms=5_000)
    mgr.create_topic("t", 1)
    mgr.storage.write_atomic("t-0/00000000000000000000-0123456789abcdef.log", b"x")
    # The store stamps the object with the wall time of the write, after the clock's start.
    clock.advance(max(0, int(time.time() * 1000) - clock.milliseconds()))
    assert mgr.collect().orphans == 0
    clock.advance(5_001)
    assert mgr.collect().orphans == 1


def test_a_deleted_topics_objects_go_after_its_delay():
    clock = now_clock()
    mgr = BucketLogManager(
        store_moving_with(clock), clock=clock, default_topic_config={"file.delete.delay.ms": 2000}
    )
    mgr.create_topic("gone", 2, {"retention.ms": -1})
    mgr.append("gone", 0, batch(0))
    mgr.append("gone", 1, batch(1))
    mgr.delete_topic("gone")
    assert mgr.collect().removed_objects == 0
    clock.advance(2000)
    assert mgr.collect().removed_objects == 2  # a .log per partition (indexes inline)
    assert not mgr.storage.list_dir("gone-0") and not mgr.storage.list_dir("gone-1")


def test_old_commits_and_snapshots_go_and_every_view_still_opens():
    clock = now_clock()
    uri, mgr = writer_of_kept_topic(clock)
    stale = BucketLogManager(uri, read_only=True)  # at version 0
    for i in range(25):
        mgr.append("t", 0, batch(i))
    mgr.commits.flush_snapshots()  # written off the commits' path: at the store's "now"
    assert versions(mgr, log_of(mgr).snapshot_dir) == [0, 10, 20]
    assert mgr.collect().commits == 0  # younger than a minute: kept
    clock.advance(60_000)
    stats = mgr.collect()
    # Commit 20 stays with its snapshot: only commits before the covering snapshot go.
    assert (stats.commits, stats.snapshots) == (20, 2)
    assert versions(mgr, log_of(mgr).commit_dir) == list(range(20, 26))
    assert versions(mgr, log_of(mgr).snapshot_dir) == [20]
    assert BucketLogManager(uri, read_only=True).high_watermarks() == {("t", 0): 100}
    assert stale.high_watermarks() == {("t", 0): 100}  # reloads from the snapshot
    assert mgr.collect().commits == 0


def test_a_writer_idle_past_the_collection_of_its_version_commits_after_it():
    """A writer still at version 1 must not create the collected version 2 again: its
    commit would be invisible to everyone past it (an acknowledged append lost)."""
    clock = now_clock()
    uri, mgr = writer_of_kept_topic(clock)
    mgr.append("t", 0, batch(0))
    idle_clock = MockClock(clock.milliseconds())
    idle = BucketLogManager(uri, clock=idle_clock)  # at version 1
    for i in range(1, 12):
        mgr.append("t", 0, batch(i))
    mgr.commits.flush_snapshots()  # snapshot 10, stamped before the clock moves
    clock.advance(60_000)
    assert mgr.collect().commits == 10  # versions 0..9 (snapshot 10 covers them)
    idle_clock.advance(60_000)  # the same wall time as the collector: its view is stale
    info = idle.append("t", 0, batch(99))
    assert info.first_offset == 48
    fresh = BucketLogManager(uri, read_only=True)
    assert fresh.high_watermarks() == {("t", 0): 52}
    assert read_all(fresh.get_log("t", 0), 44) == list(range(44, 52))


def test_the_newest_commit_is_never_collected():
    """An empty listing after a writer's version must mean "nothing new": the collector
    keeps the newest commit however old, even when a snapshot covers it."""
    clock = now_clock()
    uri, mgr = writer_of_kept_topic(clock)
    for i in range(10):
        mgr.append("t", 0, batch(i))
    mgr.commits.flush_snapshots()  # stamped before the clock moves
    layout = log_of(mgr)
    assert versions(mgr, layout.snapshot_dir)[-1] == 10 == versions(mgr, layout.commit_dir)[-1]
    clock.advance(120_000)
    mgr.collect()
    assert versions(mgr, log_of(mgr).commit_dir) == [10]
    mgr.append("t", 0, batch(10))
    assert BucketLogManager(uri, read_only=True).high_watermarks() == {("t", 0): 44}


def test_a_build_slower_than_the_collection_of_the_next_version_does_not_fork(monkeypatch):
    """An append's build uploads (minutes, possibly): others commit and the collector frees
    the version the writer is about to create. The writer looks again just before the
    create and builds on the new state: its append is visible, no offset twice."""
    clock = now_clock()
    storage = store_moving_with(clock)
    other = BucketLogManager(storage, clock=clock)
    other.create_topic("t", 1, {"retention.ms": -1})
    writer = BucketLogManager(storage, clock=clock)
    writer.refresh()
    upload = bucket_append.upload_parts
    slow: list[int] = []

    def slow_upload(storage, parts):  # the writer's first upload "takes 70 s"
        if not slow:
            slow.append(1)
            for i in range(12):
                other.append("t", 0, batch(i))
            other.commits.flush_snapshots()  # stamped before the clock moves
            clock.advance(70_000)
            assert other.collect().commits > 0  # the version it builds on is gone
        upload(storage, parts)

    monkeypatch.setattr(bucket_append, "upload_parts", slow_upload)
    info = writer.append("t", 0, batch(99))
    assert info.first_offset == 48
    fresh = BucketLogManager(storage, read_only=True)
    assert fresh.high_watermarks() == {("t", 0): 52}
    assert log_version(fresh) == log_version(writer) == 13
    assert read_all(fresh.get_log("t", 0), 48) == [48, 49, 50, 51]


def test_a_writer_with_a_longer_delay_than_the_collectors_does_not_fork():
    """The writer's refresh does not depend on its file.delete.delay.ms: one configured
    with 10 min, idle 80 s, still looks before it commits after a collector whose delay is
    Kafka's 60 s collected the version it would create."""
    clock = now_clock()
    storage = store_moving_with(clock)
    other = BucketLogManager(storage, clock=clock)
    other.create_topic("t", 1, {"retention.ms": -1})
    writer = BucketLogManager(
        storage, clock=clock, default_topic_config={"file.delete.delay.ms": 600_000}
    )
    writer.append("t", 0, batch(0))
    clock.advance(10_000)
    for i in range(1, 25):
        other.append("t", 0, batch(i))
    other.commits.flush_snapshots()  # stamped before the clock moves
    clock.advance(70_000)
    assert other.collect().commits > 0
    info = writer.append("t", 0, batch(99))
    assert info.first_offset == 100
    fresh = BucketLogManager(storage, read_only=True)
    assert fresh.high_watermarks() == {("t", 0): 104}
    assert log_version(fresh) == log_version(writer) == 26


def test_a_collector_whose_clock_runs_ahead_keeps_young_commits():
    """Commits are aged by the store's clock, not the collector's: one 40 s ahead of the
    writers (and of the store) collects nothing younger than the delay."""
    clock = now_clock()
    storage, mgr = writer_of_kept_topic(clock)
    for i in range(25):
        mgr.append("t", 0, batch(i))
    clock.advance(24_000)
    ahead = BucketLogManager(storage, clock=MockClock(clock.milliseconds() + 40_000))
    stats = ahead.collect()
    assert (stats.commits, stats.snapshots) == (0, 0)
    assert versions(mgr, log_of(mgr).commit_dir) == list(range(26))


def test_a_collector_whose_clock_runs_ahead_keeps_removed_objects_for_the_delay():
    """Removed objects wait file.delete.delay.ms by the store's clock: a reader holding
    the older view keeps reading, however far the collector's clock is ahead."""
    clock = now_clock()
    storage = store_moving_with(clock)
    mgr = BucketLogManager(storage, clock=clock)
    mgr.create_topic("t", 1, {"file.delete.delay.ms": 1000, "retention.ms": -1})
    for i in range(3):
        mgr.append("t", 0, batch(i))
    planned = BucketLogManager(storage, read_only=True).get_log("t", 0)
    mgr.delete_records("t", 0, 8)
    assert mgr.delete_old_segments() == 2
    ahead = BucketLogManager(storage, clock=MockClock(clock.milliseconds() + 3_600_000))
    stats = ahead.collect()
    assert stats.removed_objects == 0 and stats.waiting == 2
    assert read_all(planned) == list(range(12))
    clock.advance(1000)
    assert ahead.collect().removed_objects == 2


def test_a_damaged_snapshot_is_never_the_one_the_collection_relies_on(caplog):
    """Snapshot 20 is damaged (opens fold from snapshot 10 and the commits): the collector
    decodes the snapshot it would keep, says which is damaged, and keeps the commits that
    only it would stand for."""
    clock = now_clock()
    storage, mgr = writer_of_kept_topic(clock)
    for i in range(24):
        mgr.append("t", 0, batch(i))
    mgr.commits.flush_snapshots()  # then damaged: not overwritten by its late writer
    storage.write_atomic(log_of(mgr).snapshot_key(20), b'{"format": 1, "vers')
    clock.advance(120_000)
    with caplog.at_level(logging.ERROR, "seglog.logstore.bucket.bucket_collect"):
        stats = mgr.collect()
    assert (stats.commits, stats.snapshots) == (10, 1)  # what the valid snapshot 10 covers
    assert any(log_of(mgr).snapshot_key(20) in e for e in stats.errors)
    assert any(log_of(mgr).snapshot_key(20) in r.getMessage() for r in caplog.records)
    assert versions(mgr, log_of(mgr).commit_dir) == list(range(10, 25))
    assert versions(mgr, log_of(mgr).snapshot_dir) == [10, 20]
    assert BucketLogManager(storage, read_only=True).high_watermarks() == {("t", 0): 96}
    assert mgr.collect().commits == 0


def test_a_commit_collected_by_another_collector_meanwhile_skips_the_pass(monkeypatch):
    # Found by the soak: two collectors (a query's driver, `seglog maintain`) at once; one
    # listed a commit the other deleted before it was read: FileNotFoundError escaped.
    clock = now_clock()
    _, mgr = writer_of_kept_topic(clock)
    for i in range(25):
        mgr.append("t", 0, batch(i))
    mgr.commits.flush_snapshots()  # stamped before the clock moves
    clock.advance(60_000)
    real_read = mgr.storage.read
    gone = []

    def read(key: str) -> bytes:
        if key.startswith(log_of(mgr).commit_dir) and not gone:
            gone.append(key)
            raise FileNotFoundError(f"{mgr.uri}/{key}")
        return real_read(key)

    monkeypatch.setattr(mgr.storage, "read", read)
    before = versions(mgr, log_of(mgr).commit_dir)
    stats = mgr.collect()
    assert gone and (stats.commits, stats.removed_objects, stats.orphans) == (0, 0, 0)
    assert versions(mgr, log_of(mgr).commit_dir) == before  # nothing deleted by the skipped pass
    assert mgr.collect().commits == 20  # the next pass does the work
