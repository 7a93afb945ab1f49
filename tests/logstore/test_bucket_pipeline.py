"""Pipelined bucket appends (logstore/bucket/bucket_pipeline.py, ``append_async``): order and
contiguity under concurrent callers, a bad batch in the middle, a lost race and a failed
commit mid-pipeline, group commits across time, a writer SIGKILLed with appends in
flight; and the local LogManager's same call."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from concurrent.futures import Future
from typing import Any

import pyarrow as pa
import pytest
from bucket_helpers import CountingStorage, memory_uri

from seglog.logstore.bucket.bucket_commit_log import BLIND_CREATES, CommitLog
from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.bucket.bucket_state import Commit
from seglog.logstore.errors import (
    AppendAbortedError,
    CommitConflictError,
    ConfigError,
    CorruptRecordError,
    LogDirError,
    ReadOnlyError,
    UnknownTopicOrPartitionError,
)
from seglog.logstore.log.log import AppendInfo
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import decode_batches, encode_batches
from seglog.logstore.storage.object_storage import ObjectStorage


def tagged(tag: str, n: int) -> bytearray:
    """``n`` records ``<tag>/<j>`` in batches of a few records each."""
    return encode_batches(pa.array([f"{tag}/{j}".encode() for j in range(n)]), max_batch_bytes=96)


def rows(mgr: Any, partition: int = 0) -> list[tuple[int, str]]:
    log = mgr.get_log("t", partition)
    if hasattr(log, "sync"):  # a bucket partition: the newest commits
        log.refresh()
    out: list[tuple[int, str]] = []
    for chunk in log.read_chunks(log.log_start_offset, log.high_watermark):
        t = decode_batches(bytes(chunk))
        out += [
            (o, v.decode())
            for o, v in zip(
                t.column("offset").to_pylist(), t.column("value").to_pylist(), strict=True
            )
        ]
    return out


def appends_in_log(log_rows: list[tuple[int, str]]) -> list[tuple[str, int, int]]:
    """(tag, first offset, last offset) of each append's records, in log order; asserts
    the offsets are contiguous from 0 and each append's records are whole and in order."""
    assert [o for o, _ in log_rows] == list(range(len(log_rows)))
    out: list[tuple[str, int, int]] = []
    for offset, value in log_rows:
        tag, j = value.rsplit("/", 1)
        if int(j) == 0:
            out.append((tag, offset, offset))
        else:
            last_tag, first, last = out[-1]
            assert (last_tag, last + 1) == (tag, offset), f"{value} at {offset} splits an append"
            out[-1] = (tag, first, offset)
    return out


def objects_are_the_committed_segments(mgr: BucketLogManager, partition: int = 0) -> None:
    """No upload of a lost attempt or a failed append is left behind."""
    names = sorted(e.name for e in mgr.storage.list_dir(f"t-{partition}"))
    segments = mgr.state.partition("t", partition).segments
    assert names == sorted(s.key.rpartition("/")[2] + ".log" for s in segments)


@pytest.fixture(params=("memory", "s3"))
def storage(request) -> CountingStorage:
    uri = memory_uri() if request.param == "memory" else request.getfixturevalue("s3_uri")
    return CountingStorage(ObjectStorage(uri))


def test_concurrent_async_appends_commit_in_call_order_contiguous_and_whole(storage):
    mgr = BucketLogManager(storage)
    mgr.max_in_flight_appends = 4
    mgr.create_topic("t", 3)
    storage.reset()
    futures: dict[str, Future[AppendInfo]] = {}
    calls: dict[int, list[str]] = {p: [] for p in range(3)}
    calls_lock = threading.Lock()

    def caller(c: int) -> None:
        for i in range(8):
            p = (c + i) % 3
            tag = f"c{c}-{i}"
            with calls_lock:  # the call order of each partition, as the pipeline saw it
                futures[tag] = mgr.append_async("t", p, tagged(tag, 1 + (i * 7 + c) % 9))
                calls[p].append(tag)

    threads = [threading.Thread(target=caller, args=(c,)) for c in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    mgr.close()  # flushes
    assert all(f.done() for f in futures.values())
    appends = 0
    for p in range(3):
        in_log = appends_in_log(rows(BucketLogManager(storage.inner, read_only=True), p))
        assert [tag for tag, _, _ in in_log] == calls[p]
        for tag, first, last in in_log:
            info = futures[tag].result()
            assert (info.first_offset, info.last_offset) == (first, last)
        appends += len(in_log)
    assert appends == 24
    assert storage.counts["write_atomic"] >= 24  # every .log uploaded once (and snapshots)
    assert storage.counts["create"] <= 24


class GatedStorage(CountingStorage):
    """Once ``armed``, holds every commit create until ``uploads`` .log objects were
    written (and then answers ``fail_creates`` of them False: another writer won, its
    commit, one of nothing, is there)."""

    def __init__(self, inner: Any, uploads: int) -> None:
        super().__init__(inner)
        self.uploads = uploads
        self.armed = False
        self.all_uploaded = threading.Event()

    def write_atomic(self, key: str, data: Any) -> None:
        self.inner.write_atomic(key, data)
        self.counts["write_atomic"] += 1
        if key.endswith(".log"):
            self.counts["log"] += 1
            if self.counts["log"] >= self.uploads:
                self.all_uploaded.set()

    def create(self, key: str, data: Any) -> bool:
        self.counts["create"] += 1
        if self.armed:
            assert self.all_uploaded.wait(60), "the uploads never finished"
            if self.fail_creates:
                self.fail_creates -= 1
                version = int(key.rpartition("/")[2].removesuffix(".json"))
                other = Commit(version, "another-writer", 0, "append").encode()
                assert self.inner.create(key, other)
                return False
        return self.inner.create(key, data)


def test_appends_uploaded_while_a_commit_is_out_share_the_next_commit():
    storage = GatedStorage(ObjectStorage(memory_uri()), uploads=5)
    mgr = BucketLogManager(storage)
    mgr.create_topic("t", 2)
    storage.armed = True
    storage.reset()
    futures = [mgr.append_async("t", i % 2, tagged(f"a{i}", 3)) for i in range(5)]
    mgr.flush()
    assert [f.result().first_offset for f in futures] == [0, 0, 3, 3, 6]
    # The first commit waited for all five uploads: the next one takes every append left.
    assert storage.counts["log"] == 5
    assert 1 <= storage.counts["create"] <= 2
    assert [t for t, _, _ in appends_in_log(rows(mgr, 0))] == ["a0", "a2", "a4"]
    assert [t for t, _, _ in appends_in_log(rows(mgr, 1))] == ["a1", "a3"]
    mgr.close()


def test_a_bad_batch_in_the_middle_fails_its_future_at_once_and_nothing_else():
    storage = CountingStorage(ObjectStorage(memory_uri()))
    mgr = BucketLogManager(storage)
    mgr.create_topic("t", 1)
    mgr.commits.flush_snapshots()  # version 0's, written off the create's path
    storage.reset()
    bad = tagged("bad", 4)
    bad[-1] ^= 0xFF  # the last record's bytes: the CRC no longer matches
    first = [mgr.append_async("t", 0, tagged(f"a{i}", 2)) for i in range(3)]
    failed = mgr.append_async("t", 0, bad)
    unknown = mgr.append_async("t", 7, tagged("x", 1))
    assert failed.done() and unknown.done()  # checked in the call, before any upload
    with pytest.raises(CorruptRecordError, match="t-0"):
        failed.result()
    with pytest.raises(UnknownTopicOrPartitionError, match="t-7"):
        unknown.result()
    later = [mgr.append_async("t", 0, tagged(f"b{i}", 2)) for i in range(3)]
    mgr.close()
    assert [f.result().first_offset for f in first + later] == [0, 2, 4, 6, 8, 10]
    assert [t for t, _, _ in appends_in_log(rows(BucketLogManager(storage.inner)))] == [
        "a0",
        "a1",
        "a2",
        "b0",
        "b1",
        "b2",
    ]
    assert storage.counts["write_atomic"] == 6  # the bad batch uploaded nothing


class RacedStorage(CountingStorage):
    """Before the first commit create once armed, another writer appends ``racer``."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.racer: bytearray | None = None

    def write_atomic(self, key: str, data: Any) -> None:
        self.counts["log" if key.endswith(".log") else "write_atomic"] += 1
        self.inner.write_atomic(key, data)

    def create(self, key: str, data: Any) -> bool:
        self.counts["create"] += 1
        if self.racer is not None:
            records, self.racer = self.racer, None
            with BucketLogManager(self.inner) as other:
                other.append("t", 0, records)
        return self.inner.create(key, data)


def test_a_lost_race_mid_pipeline_commits_the_appends_in_order_without_uploading_again():
    storage = RacedStorage(ObjectStorage(memory_uri()))
    mgr = BucketLogManager(storage)
    mgr.create_topic("t", 1)
    storage.racer = tagged("other", 5)
    appends = [tagged(f"a{i}", 2 + i % 3) for i in range(8)]
    # At most three appends between their call and their commit: four never fit.
    mgr.max_in_flight_bytes = sum(sorted(len(a) for a in appends)[:3])
    futures = [mgr.append_async("t", 0, data) for data in appends]
    mgr.close()
    in_log = appends_in_log(rows(BucketLogManager(storage.inner)))
    # The other writer's commit took the version the first commit wanted: it went first.
    assert [t for t, _, _ in in_log] == ["other"] + [f"a{i}" for i in range(8)]
    for (_tag, first, last), future in zip(in_log[1:], futures, strict=True):
        info = future.result()
        assert (info.first_offset, info.last_offset) == (first, last)
    objects_are_the_committed_segments(BucketLogManager(storage.inner))
    # No append was uploaded twice: the ones in flight when the race was lost were
    # committed with an offset_delta, the ones called after it were given offsets after
    # the other writer's records at once.
    assert storage.counts["log"] == 8
    deltas = [
        s.offset_delta for s in BucketLogManager(storage.inner).state.partition("t", 0).segments
    ]
    assert deltas[0] == 0 and any(d == 5 for d in deltas), deltas


def test_a_failed_commit_fails_the_appends_it_covers_and_every_later_one():
    storage = GatedStorage(ObjectStorage(memory_uri()), uploads=4)
    mgr = BucketLogManager(
        storage, commit_log=CommitLog(storage, max_attempts=2, sleep=lambda _s: None)
    )
    mgr.max_in_flight_appends = 4
    mgr.create_topic("t", 2)
    # The first commit waits for all four uploads (so all four are in flight when it
    # fails), then loses both its attempts (each a create and its blind retries).
    storage.armed = True
    storage.fail_creates = 2 * (1 + BLIND_CREATES)
    futures = [mgr.append_async("t", 0, tagged(f"a{i}", 3)) for i in range(4)]
    mgr.flush()
    errors = [f.exception() for f in futures]
    # The first commit covered a prefix; the rest were in flight behind it: void.
    assert isinstance(errors[0], CommitConflictError)
    kinds = [type(e) for e in errors]
    assert kinds == sorted(kinds, key=lambda k: k is AppendAbortedError)
    assert set(kinds) <= {CommitConflictError, AppendAbortedError}
    for e in errors:
        if isinstance(e, AppendAbortedError):
            assert isinstance(e.__cause__, CommitConflictError) and "t-0" in str(e)
    assert mgr.state.partition("t", 0).high_watermark == 0
    storage.armed = False
    after = mgr.append_async("t", 0, tagged("after", 2))
    other = mgr.append_async("t", 1, tagged("other", 2))
    mgr.close()  # waits for the voided uploads to be deleted too
    assert after.result().first_offset == 0 and other.result().first_offset == 0
    assert [t for t, _, _ in appends_in_log(rows(BucketLogManager(storage.inner)))] == ["after"]
    objects_are_the_committed_segments(BucketLogManager(storage.inner))


class UploadCountingStorage(CountingStorage):
    """Counts the ``.log`` uploads that ended (``counts["log"]``) and the most that were
    ever running at once (``most_at_once``)."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self._lock = threading.Lock()  # guards running, most_at_once
        self.running = 0
        self.most_at_once = 0

    def write_atomic(self, key: str, data: Any) -> None:
        if not key.endswith(".log"):
            self.inner.write_atomic(key, data)
            self.counts["write_atomic"] += 1
            return
        with self._lock:
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
        try:
            self.inner.write_atomic(key, data)
        finally:
            with self._lock:
                self.running -= 1
        self.counts["log"] += 1


@pytest.mark.parametrize("limit", ("uploads", "bytes", "one-too-big"))
def test_a_caller_beyond_the_in_flight_limits_waits(storage, limit):
    storage = UploadCountingStorage(storage.inner)
    mgr = BucketLogManager(storage)
    mgr.create_topic("t", 1)
    size = len(tagged("a00", 1))
    # uploads: at most two uploading, the others queued (the caller does not wait for
    # them, as Kafka's producer does not wait for its in-flight requests); bytes: two
    # appends' bytes between call and commit; an append larger than the bytes limit is
    # taken alone.
    mgr.max_in_flight_appends = {"uploads": 2}.get(limit, 100)
    mgr.max_in_flight_bytes = {"uploads": 1 << 30, "bytes": 2 * size}.get(limit, size - 1)
    futures = []
    for k in range(1, 13):
        futures.append(mgr.append_async("t", 0, tagged(f"a{k:02d}", 1)))
        if limit != "uploads":
            # The call returned only once all but the limit's appends were committed
            # (the counts move before a waiting caller is woken).
            committed = mgr.state.partition("t", 0).high_watermark
            assert committed >= k - (2 if limit == "bytes" else 1)
    mgr.close()
    assert [f.result().first_offset for f in futures] == list(range(12))
    assert storage.counts["log"] == 12
    assert 1 <= storage.most_at_once <= (2 if limit == "uploads" else 100)


def test_a_closed_or_read_only_manager_fails_the_future_and_a_bad_limit_is_named():
    uri = memory_uri()
    mgr = BucketLogManager(uri)
    mgr.create_topic("t", 1)
    mgr.close()
    assert isinstance(mgr.append_async("t", 0, tagged("x", 1)).exception(), LogDirError)
    reader = BucketLogManager(uri, read_only=True)
    assert isinstance(reader.append_async("t", 0, tagged("x", 1)).exception(), ReadOnlyError)
    fresh = BucketLogManager(uri)
    fresh.max_in_flight_bytes = 0
    with pytest.raises(ConfigError, match=f"max_in_flight_bytes of the manager of {uri}"):
        fresh.append_async("t", 0, tagged("x", 1))
    assert fresh.state.partition("t", 0).high_watermark == 0


def test_the_local_manager_completes_append_async_at_once(tmp_path):
    with LogManager([tmp_path]) as mgr:
        mgr.create_topic("t", 1)
        done = mgr.append_async("t", 0, tagged("a", 3))
        bad = tagged("bad", 2)
        bad[-1] ^= 0xFF
        failed = mgr.append_async("t", 0, bad)
        mgr.flush()
        assert done.result().last_offset == 2
        assert isinstance(failed.exception(), CorruptRecordError)
        assert [t for t, _, _ in appends_in_log(rows(mgr))] == ["a"]


KILLED_WRITER = r"""
import os, signal, sys, threading
import pyarrow as pa
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches

uri = sys.argv[1]
mgr = LogManager(uri)
mgr.max_in_flight_appends = 4
acked = threading.Semaphore(0)

def report(tag):
    def done(future):
        info = future.result()
        print("acked", tag, info.first_offset, info.last_offset, flush=True)
        acked.release()
    return done

for i in range(40):
    values = pa.array([f"w{i}/{j}".encode() for j in range(50)])
    future = mgr.append_async("t", 0, encode_batches(values, max_batch_bytes=256))
    future.add_done_callback(report(f"w{i}"))
    if i == 12:
        for _ in range(3):
            acked.acquire()
        os.kill(os.getpid(), signal.SIGKILL)  # appends 13.. not even called, 4 in flight
"""


def test_a_writer_killed_with_appends_in_flight_keeps_every_acknowledged_one(s3_uri):
    with BucketLogManager(s3_uri) as mgr:
        mgr.create_topic("t", 1)
    proc = subprocess.run(
        [sys.executable, "-c", KILLED_WRITER, s3_uri],
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == -9, proc.stderr[-3000:]
    acked = {}
    for line in proc.stdout.splitlines(keepends=True):
        if not line.endswith("\n"):
            # Torn by the SIGKILL mid-print (PYTHONUNBUFFERED writes each piece at
            # once): an ack the writer was still reporting, not one it made.
            continue
        _, tag, first, last = line.split()
        acked[tag] = (int(first), int(last))
    assert len(acked) >= 3
    with BucketLogManager(s3_uri, read_only=True) as reader:
        in_log = appends_in_log(rows(reader))
    # Commits land in call order: what is visible is a prefix of the calls, each whole.
    assert [t for t, _, _ in in_log] == [f"w{i}" for i in range(len(in_log))]
    assert len(in_log) <= 13
    visible = {t: (first, last) for t, first, last in in_log}
    for tag, offsets in acked.items():
        assert visible[tag] == offsets


class HeldUploads(CountingStorage):
    """Holds every ``.log`` upload until ``go`` is set (a bounded wait: a hang fails)."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.go = threading.Event()

    def write_atomic(self, key: str, data: Any) -> None:
        if key.endswith(".log"):
            assert self.go.wait(10), "the test never let the uploads go"
        self.inner.write_atomic(key, data)


def test_an_accepted_append_cannot_be_cancelled_and_a_meddled_future_stops_nothing():
    storage = HeldUploads(ObjectStorage(memory_uri()))
    mgr = BucketLogManager(storage)
    mgr.create_topic("t", 2)
    first = mgr.append_async("t", 0, tagged("a", 3))
    # Still uploading, yet taken: its commit goes on, so cancel() must say so.
    assert first.cancel() is False and not first.cancelled()
    meddled = mgr.append_async("t", 0, tagged("b", 2))
    meddled.set_exception(RuntimeError("completed by its caller"))  # misuse
    storage.go.set()
    later = mgr.append_async("t", 1, tagged("c", 2))
    # The committer outlived the future it could not complete.
    assert later.result(timeout=10).first_offset == 0
    assert first.result(timeout=10).first_offset == 0
    mgr.close()
    assert [t for t, _, _ in appends_in_log(rows(mgr.__class__(storage.inner)))] == ["a", "b"]


def test_a_partition_failing_in_a_group_commit_fails_only_its_own_appends(storage):
    held = HeldUploads(storage.inner)
    mgr = BucketLogManager(held)
    mgr.create_topic("t", 1)
    mgr.create_topic("gone", 1)
    good = mgr.append_async("t", 0, tagged("g", 3))
    gone = mgr.append_async("gone", 0, tagged("x", 3))
    good2 = mgr.append_async("t", 0, tagged("g2", 3))
    gone2 = mgr.append_async("gone", 0, tagged("x2", 3))
    with BucketLogManager(storage.inner) as other:
        other.delete_topic("gone")  # the four then commit together, and lose the race
    held.go.set()
    mgr.flush()
    assert (good.result().first_offset, good2.result().first_offset) == (0, 3)
    with pytest.raises(UnknownTopicOrPartitionError, match="gone-0"):
        gone.result()
    with pytest.raises(AppendAbortedError, match="gone-0"):
        gone2.result()
    mgr.close()
    reader = BucketLogManager(storage.inner, read_only=True)
    assert [t for t, _, _ in appends_in_log(rows(reader))] == ["g", "g2"]
    objects_are_the_committed_segments(reader)
    assert list(storage.inner.list_dir("gone-0")) == []  # its uploads deleted


class SecondUploadFirst(CountingStorage):
    """The first ``.log`` upload ends only after the second: both appends finish
    together, so one commit takes both."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self._lock = threading.Lock()  # guards logs
        self.logs = 0
        self.second_done = threading.Event()

    def write_atomic(self, key: str, data: Any) -> None:
        if not key.endswith(".log"):
            self.inner.write_atomic(key, data)
            return
        with self._lock:
            self.logs += 1
            n = self.logs
        if n == 1:
            assert self.second_done.wait(10), "the second upload never ended"
        self.inner.write_atomic(key, data)
        if n == 2:
            self.second_done.set()


def test_flush_returns_only_once_every_future_before_it_is_completed():
    mgr = BucketLogManager(SecondUploadFirst(ObjectStorage(memory_uri())))
    mgr.create_topic("t", 2)
    seen: list[bool] = []
    flushed = threading.Event()
    later: list[Future[AppendInfo]] = []

    def flusher() -> None:
        mgr.flush()
        seen.append(all(f.done() for f in later))
        flushed.set()

    def on_first(_future: Future[AppendInfo]) -> None:
        # Runs on the committer while it completes the commit's futures: the others of
        # that commit are not completed yet, so a flush now must wait for them. (The
        # bound only keeps a pre-fix flush, which returns at once, from being missed.)
        threading.Thread(target=flusher).start()
        flushed.wait(0.5)

    first = mgr.append_async("t", 0, tagged("a", 3))
    first.add_done_callback(on_first)
    later.append(mgr.append_async("t", 0, b""))  # empty: completes with "a", the end after it
    later.append(mgr.append_async("t", 1, tagged("b", 2)))
    assert flushed.wait(10), "flush hung"
    assert seen == [True]
    assert [(f.result().first_offset, f.result().last_offset) for f in later] == [(3, 2), (0, 1)]
    mgr.close()
