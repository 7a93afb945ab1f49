"""The bucket commit log (logstore/bucket/bucket_state.py, bucket_commit_log.py,
bucket_commit_reader.py, bucket_snapshot_writer.py): the fold, snapshots and the hint,
bounded open and refresh costs, lost races and damage."""

from __future__ import annotations

import json
import logging

import pytest
from bucket_helpers import CountingStorage, counting_memory_storage, memory_uri

from seglog.logstore.bucket.bucket_collect import collectable_metadata
from seglog.logstore.bucket.bucket_commit_log import Attempt, Change, CommitLog
from seglog.logstore.bucket.bucket_commit_reader import MAX_VIEW_AGE_MS
from seglog.logstore.bucket.bucket_snapshot_writer import write_snapshot
from seglog.logstore.bucket.bucket_state import (
    CATALOG,
    HINT_KEY,
    BucketState,
    Commit,
    PartitionChange,
    SegmentEntry,
    TopicSpec,
    commit_key,
    snapshot_key,
    version_name,
)
from seglog.logstore.errors import (
    CommitConflictError,
    CommitOutcomeUnknownError,
    CorruptMetadataError,
    StorageUnreachableError,
    UnknownTopicOrPartitionError,
)
from seglog.logstore.storage.object_storage import ObjectStorage
from seglog.logstore.storage.storage import Entry
from seglog.logstore.util.clock import MockClock


def entry(base: int, n: int, tag: str = "0123456789abcdef") -> SegmentEntry:
    return SegmentEntry(f"t-0/{base:020d}-{tag}", base, base + n, 100 * n, 1000 + base)


def topic_change(partitions: int = 1) -> Change:
    return Change(topics={"t": TopicSpec(partitions, {"retention.ms": "1000"})})


def append_change(state: BucketState, n: int = 5) -> Change:
    end = state.partitions["t-0"].high_watermark
    return Change(partitions={"t-0": PartitionChange(add=(entry(end, n, f"{end:016x}"),))})


def history(log: CommitLog, appends: int) -> None:
    log.commit("create_topic", lambda s: topic_change())
    for _ in range(appends):
        log.commit("append", append_change)
    log.flush_snapshots()  # written off the commits' path


# ---------------------------------------------------------------------------- the fold


def test_the_fold_gives_topics_segments_and_offsets():
    c0 = Commit(0, "w", 1, "create_topic", {"t": TopicSpec(2, {})})
    s = BucketState().apply(c0)
    assert set(s.partitions) == {"t-0", "t-1"} and s.partition("t", 1).high_watermark == 0
    s = s.apply(
        Commit(1, "w", 2, "append", partitions={"t-0": PartitionChange(add=(entry(0, 5),))})
    )
    s = s.apply(
        Commit(
            2, "w", 3, "append", partitions={"t-0": PartitionChange(add=(entry(5, 3, "1" * 16),))}
        )
    )
    assert s.partition("t", 0).high_watermark == 8
    s = s.apply(
        Commit(
            3,
            "w",
            4,
            "retention",
            partitions={"t-0": PartitionChange(remove=(entry(0, 5).key,), log_start_offset=6)},
        )
    )
    assert s.partition("t", 0).log_start_offset == 6
    assert [e.base_offset for e in s.partition("t", 0).segments] == [5]
    s = s.apply(Commit(4, "w", 5, "delete_topic", {"t": None}))
    assert s.partitions == {} and s.topics == {}
    assert BucketState.decode(s.encode(), "snap", 4) == s


@pytest.mark.parametrize(
    "bad, message",
    [
        (
            Commit(
                1,
                "w",
                1,
                "append",
                partitions={
                    "t-0": PartitionChange(remove=("t-0/00000000000000000000-ffffffffffffffff",))
                },
            ),
            "does not hold",
        ),
        (
            Commit(
                1,
                "w",
                1,
                "append",
                partitions={"t-0": PartitionChange(add=(entry(0, 5), entry(3, 5, "2" * 16)))},
            ),
            "inside",
        ),
        (Commit(1, "w", 1, "append", partitions={"u-0": PartitionChange()}), "does not exist"),
        (Commit(2, "w", 1, "append"), "does not follow"),
        (Commit(1, "w", 1, "create_topic", {"t": TopicSpec(1, {})}), None),
    ],
)
def test_a_commit_that_does_not_follow_is_refused(bad, message):
    s = BucketState().apply(Commit(0, "w", 1, "create_topic", {"t": TopicSpec(2, {})}))
    if message is None:  # shrinking a topic
        with pytest.raises(CorruptMetadataError, match="shrinks"):
            s.apply(bad)
        return
    with pytest.raises(CorruptMetadataError, match=message):
        s.apply(bad, "where")


def test_a_damaged_commit_is_an_error_naming_it():
    storage = counting_memory_storage()
    log = CommitLog(storage)
    history(log, 2)
    storage.inner.write_atomic(commit_key(3), b'{"format": 1, "version": 3, "writer"')
    with pytest.raises(CorruptMetadataError, match=r"memory://.*/_seglog/log/0+3\.json"):
        log.refresh()
    assert log.state.version == 2  # nothing of it was taken


# ------------------------------------------------------------------- bounded costs


@pytest.mark.parametrize("appends", [14, 58])
def test_open_costs_a_bounded_number_of_requests(appends):
    storage = counting_memory_storage()
    history(CommitLog(storage), appends)
    storage.reset()
    log = CommitLog(storage)
    assert log.state.version == appends
    assert log.state.partition("t", 0).high_watermark == 5 * appends
    # the hint, its snapshot, one LIST, and the commits after that snapshot (< 10)
    assert storage.counts["list_after"] == 1 and storage.counts["list_dir"] == 0
    assert storage.counts["read"] == 2 + appends % 10
    storage.reset()
    assert log.refresh() is False
    assert dict(storage.counts) == {"list_after": 1}


def test_a_commit_costs_the_same_late_in_history():
    storage = counting_memory_storage()
    log = CommitLog(storage)
    history(log, 3)
    costs = []
    for _ in range(24):
        storage.reset()
        log.commit("append", append_change)
        log.flush_snapshots()  # not on the commit's path, counted all the same
        costs.append(dict(storage.counts))
    plain = {"create": 1}
    with_snapshot = {"create": 1, "write_atomic": 2, "read": 1}  # snapshot, hint (read first)
    assert all(c in (plain, with_snapshot) for c in costs), costs
    assert costs.count(with_snapshot) == 2  # versions 10 and 20


def test_open_without_a_hint_or_with_a_damaged_one_lists_the_snapshots(caplog):
    storage = counting_memory_storage()
    history(CommitLog(storage), 23)
    storage.inner.delete(HINT_KEY)
    assert CommitLog(storage).state.version == 23
    storage.inner.write_atomic(HINT_KEY, b"{not json")
    with caplog.at_level(logging.WARNING):
        log = CommitLog(storage)
    assert log.state.version == 23
    assert any("last-snapshot is damaged" in r.getMessage() for r in caplog.records)
    storage.inner.write_atomic(HINT_KEY, json.dumps({"version": 30}).encode())  # no such
    assert CommitLog(storage).state.version == 23


def test_a_reader_behind_collected_commits_reloads_from_a_snapshot():
    storage = counting_memory_storage()
    writer = CommitLog(storage)
    history(writer, 2)
    reader = CommitLog(storage)
    for _ in range(20):
        writer.commit("append", append_change)
    writer.flush_snapshots()
    for v in range(0, 20):  # the collector took commits older than snapshot 20
        storage.inner.delete(commit_key(v))
    for v in (0, 10):
        storage.inner.delete(snapshot_key(v))
    assert reader.refresh()
    assert reader.state == writer.state


def test_a_missing_commit_with_no_snapshot_is_an_error():
    storage = counting_memory_storage()
    log = CommitLog(storage)
    history(log, 3)
    storage.inner.delete(commit_key(1))
    with pytest.raises(CorruptMetadataError, match="commit 1 is missing"):
        CommitLog(storage)


# ------------------------------------------------------------------------ races


def test_a_lost_race_rebuilds_on_the_new_state():
    storage = counting_memory_storage()
    a, b = CommitLog(storage), CommitLog(storage)
    a.commit("create_topic", lambda s: topic_change())
    b.refresh()
    a.commit("append", append_change)  # b does not know
    seen = []

    def build(state: BucketState) -> Change:
        seen.append(state.version)
        return append_change(state)

    sleeps: list[float] = []
    b._sleep = sleeps.append
    state = b.commit("append", build)
    # At once: a loser that sleeps before its next try never catches a writer in a loop.
    assert seen == [0, 1] and not sleeps and b.last_attempts == 2
    assert [e.base_offset for e in state.partition("t", 0).segments] == [0, 5]
    assert CommitLog(storage).state == state


def test_a_writer_that_always_loses_gives_up_with_a_clear_error():
    storage = counting_memory_storage()
    log = CommitLog(storage, max_attempts=4, sleep=lambda s: None, clock=MockClock())
    log.commit("create_topic", lambda s: topic_change())
    storage.fail_creates = 100
    with pytest.raises(
        CommitConflictError,
        match=r"memory://.*could not commit append after "
        r"4 attempts",
    ):
        log.commit("append", append_change)
    assert storage.counts["create"] == 5
    assert CommitLog(storage).state.version == 0


def test_a_create_refused_on_the_clients_retry_of_our_own_put_is_our_commit():
    """The client retries a PUT whose first attempt succeeded unseen; the retry gets 412."""
    storage = counting_memory_storage()
    log = CommitLog(storage, sleep=lambda s: None)
    log.commit("create_topic", lambda s: topic_change())
    storage.swallow_creates = 1
    built = []
    state = log.commit("append", lambda s: built.append(s.version) or append_change(s))
    assert built == [0] and state.version == 1  # not rebuilt as a lost race
    assert CommitLog(storage).state == state


def test_a_build_error_on_the_new_state_stops_the_commit():
    storage = counting_memory_storage()
    a, b = CommitLog(storage), CommitLog(storage)
    a.commit("create_topic", lambda s: topic_change())
    b.refresh()
    a.commit("delete_topic", lambda s: Change(topics={"t": None}))

    def build(state: BucketState) -> Change:
        if "t" not in state.topics:
            raise KeyError("t is gone")
        return append_change(state)

    with pytest.raises(KeyError, match="gone"):
        b.commit("append", build)
    assert b.state.version == 1


def test_a_caller_driven_commit_is_given_each_state_to_build_on():
    """``commit_steps``: the caller's own loop builds; a check failing on a cached state
    is handed back and the loop yields the state just read; a lost race yields the
    winner's state."""
    storage = counting_memory_storage()
    a, b = CommitLog(storage), CommitLog(storage)
    a.commit("create_topic", lambda s: topic_change())  # b's cached state has no topic
    seen: list[int] = []
    attempt = Attempt()
    for state in b.commit_steps("append", attempt):
        with attempt:
            seen.append(state.version)
            if "t" not in state.topics:
                raise UnknownTopicOrPartitionError("no topic 't'")
            if state.version == 0:
                a.commit("append", append_change)  # wins the race for version 1
            attempt.change = append_change(state)
    assert seen == [-1, 0, 1] and b.last_attempts == 2
    assert attempt.result is not None and attempt.result.version == 2
    assert CommitLog(storage).state == attempt.result


def test_a_caller_driven_commit_raises_a_check_the_refreshed_state_fails_too():
    storage = counting_memory_storage()
    log = CommitLog(storage)
    attempt = Attempt()
    with pytest.raises(UnknownTopicOrPartitionError, match="no topic 't'"):
        for _ in log.commit_steps("append", attempt):
            with attempt:
                raise UnknownTopicOrPartitionError("no topic 't'")
    attempt = Attempt()
    for _ in log.commit_steps("create_topic", attempt):
        with attempt:
            attempt.change = None  # nothing to do: no commit
    assert attempt.result is None and storage.counts["create"] == 0


class LostAnswers(CountingStorage):
    """Creates that land on the server but whose answer is lost (``lose``), creates that
    fail before landing (``fail``), and reads that fail (``fail_reads``)."""

    lose = 0
    fail = 0
    fail_reads = 0

    def create(self, key, data):
        self.counts["create"] += 1
        if self.fail:
            self.fail -= 1
            raise StorageUnreachableError(f"PUT {self.uri}/{key}: no answer (not sent)")
        created = self.inner.create(key, data)
        if self.lose:
            self.lose -= 1
            raise StorageUnreachableError(f"PUT {self.uri}/{key}: no answer (landed)")
        return created

    def read(self, key):
        if self.fail_reads:
            self.fail_reads -= 1
            raise StorageUnreachableError(f"GET {self.uri}/{key}: no answer")
        return self.inner.read(key)


def test_a_create_that_fails_on_the_wire_is_settled_by_reading_the_commit():
    storage = LostAnswers(ObjectStorage(memory_uri()))
    log = CommitLog(storage, sleep=lambda s: None)
    log.commit("create_topic", lambda s: topic_change())
    storage.lose = 1  # landed: ours, committed once
    assert log.commit("append", append_change).version == 1
    storage.fail = 1  # did not land: the same bytes again
    assert log.commit("append", append_change).version == 2
    assert CommitLog(storage.inner).state == log.state
    assert log.state.partition("t", 0).high_watermark == 10
    storage.lose, storage.fail_reads = 1, 1  # landed, and the read cannot tell
    with pytest.raises(
        CommitOutcomeUnknownError,
        match=r"memory://.*/_seglog/log/0+3\.json: the outcome of this append "
        r"is unknown.*may be visible",
    ):
        log.commit("append", append_change)
    assert CommitLog(storage.inner).state.version == 3


def test_a_writer_whose_newest_commit_is_gone_with_nothing_after_it_refuses():
    """The newest commit is never collected: if it is gone, an empty listing cannot be
    told from "everything was collected", and writing the next version could fork."""
    storage = counting_memory_storage()
    clock = MockClock()
    log = CommitLog(storage, clock=clock)
    history(log, 3)
    storage.inner.delete(commit_key(3))
    with pytest.raises(
        CorruptMetadataError,
        match=r"commit 3, the newest this process "
        r"knows, is gone",
    ):
        log.refresh()
    clock.advance(MAX_VIEW_AGE_MS + 1)  # idle: the writer looks before it commits
    with pytest.raises(CorruptMetadataError, match="commit 3"):
        log.commit("append", append_change)
    assert CommitLog(storage).state.version == 2  # nothing written


def test_a_lone_writer_committing_on_never_lists_before_its_create():
    """A won create is a look at the log as good as a LIST sent when it was: the view
    of a writer that keeps making the last commit never ages past ``MAX_VIEW_AGE_MS``
    (before: a LIST before the create once every 10 s, a p99 round trip of a producer)."""
    storage = counting_memory_storage()
    clock = MockClock()
    log = CommitLog(storage, clock=clock)
    history(log, 1)
    storage.reset()
    for _ in range(5):  # 30 s of commits, 6 s apart: each view is 6 s old
        clock.advance(MAX_VIEW_AGE_MS * 6 // 10)
        log.commit("append", append_change)
        assert log.view_age_ms() == 0
    assert storage.counts["list_after"] == 0 and storage.counts["read"] == 0
    assert storage.counts["create"] == 5
    clock.advance(MAX_VIEW_AGE_MS + 1)  # idle past the bound: the writer looks first
    log.commit("append", append_change)
    assert storage.counts["list_after"] == 1
    assert CommitLog(storage.inner).state == log.state


def test_the_collector_keeps_young_commits_and_the_newest():
    delay = 60_000

    def listed(versions_and_ages: dict[int, int]) -> list[Entry]:
        return [Entry(version_name(v), 10, NOW - age) for v, age in versions_and_ages.items()]

    NOW = 10_000_000
    old, young = delay + 1, delay - 1
    commits = listed({v: old for v in range(25)} | {25: young, 26: young})
    # snapshot 20 is old: commits and snapshots before it go
    assert collectable_metadata(commits, listed({10: old, 20: old}), NOW, delay) == (
        list(range(20)),
        [10],
    )
    # snapshot 20 is young: only what snapshot 10 covers
    assert collectable_metadata(commits, listed({10: old, 20: young}), NOW, delay) == (
        list(range(10)),
        [],
    )
    # commits younger than the delay stay, though a snapshot covers them
    commits = listed({v: old for v in range(15)} | {v: young for v in range(15, 22)})
    assert collectable_metadata(commits, listed({20: old}), NOW, delay)[0] == list(range(15))
    # the newest commit stays, however old
    commits = listed({v: old for v in range(21)})
    assert collectable_metadata(commits, listed({20: old}), NOW, delay)[0] == list(range(20))
    commits = listed({v: old for v in range(20)})
    assert 19 not in collectable_metadata(commits, listed({20: old}), NOW, delay)[0]


def test_a_slow_snapshot_writer_never_moves_the_hint_back():
    storage = counting_memory_storage()
    log = CommitLog(storage)
    history(log, 9)
    version_10 = log.commit("append", append_change)
    for _ in range(12):
        log.commit("append", append_change)
    log.flush_snapshots()
    assert json.loads(storage.inner.read(HINT_KEY)) == {"version": 20}
    write_snapshot(storage, CATALOG, version_10, log.uri)  # the writer of 10, late
    assert json.loads(storage.inner.read(HINT_KEY)) == {"version": 20}


@pytest.mark.parametrize("collected", [False, True])
def test_an_open_from_a_stale_hint_reads_a_bounded_number_of_objects(collected):
    """A hint left behind (a lost race of plain PUTs), or naming a collected snapshot:
    the open GETs the newest snapshot by name, not every commit since, and lists no
    snapshots."""
    storage = counting_memory_storage()
    log = CommitLog(storage)
    history(log, 22)
    storage.inner.write_atomic(HINT_KEY, json.dumps({"version": 10}).encode())
    if collected:
        for v in range(20):
            storage.inner.delete(commit_key(v))
        for v in (0, 10):
            storage.inner.delete(snapshot_key(v))
    storage.reset()
    assert CommitLog(storage).state == log.state
    # the hint, snapshot 10 (or its absence), snapshot 20, commits 21 and 22; one LIST
    assert storage.counts["read"] == 5 and storage.counts["list_after"] == 1
    assert storage.counts["list_dir"] == 0


def test_a_slow_build_does_not_hold_up_other_commits_of_the_process():
    """build (an append's uploads) runs outside the lock: another thread commits while it
    runs, and the slow one then builds again on the new state."""
    import threading

    storage = counting_memory_storage()
    log = CommitLog(storage, sleep=lambda s: None)
    log.commit("create_topic", lambda s: topic_change(2))
    uploading, go = threading.Event(), threading.Event()
    seen: list[int] = []

    def slow_build(state: BucketState) -> Change:
        seen.append(state.version)
        uploading.set()
        go.wait()
        return append_change(state)

    slow = threading.Thread(target=log.commit, args=("append", slow_build))
    slow.start()
    uploading.wait()
    other = threading.Thread(
        target=log.commit,
        args=(
            "append",
            lambda s: Change(
                partitions={
                    "t-1": PartitionChange(
                        add=(SegmentEntry(f"t-1/{0:020d}-{'e' * 16}", 0, 3, 30, 1),)
                    )
                }
            ),
        ),
    )
    other.start()
    other.join(timeout=60)  # a bound so a regression fails instead of hanging
    finished = not other.is_alive()
    go.set()
    other.join()
    slow.join()
    assert finished, "a commit waited for another thread's build"
    assert seen == [0, 1]  # the slow build ran again on the other thread's commit
    assert CommitLog(storage).state == log.state and log.state.version == 2
