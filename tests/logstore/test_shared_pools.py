"""The process-wide pools of a bucket's request fan-outs (``util.shared_pools``): a
steady look at a bucket log dir (a streaming trigger's, a consumer's) starts no thread,
where a pool per call started one per request each time; ``submit_all``/``settle``/
``joined`` keep the per-call pool's contract (results in order, at most N at once,
every call ended before the caller returns or raises). On a real S3 server; threads
counted, not timed."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator

import pyarrow as pa
import pytest
from s3_server import S3Server

from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.records.record_codec import encode_batches
from seglog.logstore.storage.object_storage import ObjectStorage
from seglog.logstore.util.shared_pools import joined, settle, submit_all


@pytest.fixture
def thread_starts(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The names of the threads started while the test runs (the real start runs)."""
    started: list[str] = []
    start = threading.Thread.start

    def counted(self: threading.Thread) -> None:
        started.append(self.name)
        start(self)

    monkeypatch.setattr(threading.Thread, "start", counted)
    yield started


def test_a_steady_look_at_a_log_being_written_starts_no_thread(
    bucket_server: S3Server, thread_starts: list[str]
) -> None:
    bucket = bucket_server.create_bucket()
    storage = ObjectStorage(f"s3://{bucket}/logs", bucket_server.storage_options())
    writer = BucketLogManager(storage)
    writer.create_topic("t", 1)
    reader = BucketLogManager(storage, read_only=True)
    for n in range(1, 3):  # the reader opens and starts reading ahead
        writer.append("t", 0, encode_batches(pa.array([b"warm-%d" % n])))
        assert reader.high_watermarks()[("t", 0)] == n
    thread_starts.clear()
    for n in range(3, 9):
        writer.append("t", 0, encode_batches(pa.array([b"steady-%d" % n])))
        # Catalog and topic log LISTed at once, the next commit read ahead beside them.
        assert reader.high_watermarks()[("t", 0)] == n
    reader_threads = [n for n in thread_starts if "topic-logs" in n or "read-ahead" in n]
    assert reader_threads == [], thread_starts
    reader.close()
    writer.close()


def test_a_look_makes_one_of_its_lists_itself(
    bucket_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A look at a log dir of per-topic logs LISTs the catalog and the topic's log at
    once: the first on the caller's thread, which would only wait otherwise (before:
    both on pool threads, the caller handing off and waiting). Still at once, and a
    failure of the caller's own LIST raised once the others ended."""
    bucket = bucket_server.create_bucket()
    storage = ObjectStorage(f"s3://{bucket}/logs", bucket_server.storage_options())
    writer = BucketLogManager(storage)
    writer.create_topic("t", 1)
    reader = BucketLogManager(storage, read_only=True)
    writer.append("t", 0, encode_batches(pa.array([b"first"])))
    assert reader.high_watermarks()[("t", 0)] == 1
    real = ObjectStorage.list_after
    listed_on: list[str] = []
    fail_on = [""]

    def recorded(self: ObjectStorage, path: str, start_after: str) -> list[object]:
        listed_on.append(threading.current_thread().name)
        if listed_on[-1] == fail_on[0]:
            raise OSError("the catalog's LIST failed")
        return real(self, path, start_after)

    monkeypatch.setattr(ObjectStorage, "list_after", recorded)
    writer.append("t", 0, encode_batches(pa.array([b"second"])))
    assert reader.high_watermarks()[("t", 0)] == 2
    me = threading.current_thread().name
    assert len(listed_on) == 2 and listed_on.count(me) == 1, listed_on
    listed_on.clear()
    fail_on[0] = me
    with pytest.raises(OSError, match="the catalog's LIST failed"):
        reader.refresh()
    assert len(listed_on) == 2, listed_on
    reader.close()
    writer.close()


def test_submit_all_settles_in_order_at_most_n_at_once() -> None:
    lock = threading.Lock()
    running = [0]
    most = [0]

    def call(i: int) -> int:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        # Hand the other runners the GIL so they can overlap.
        threading.Event().wait(0.001)
        with lock:
            running[0] -= 1
        return i * i

    squares = settle(submit_all("test-order", call, range(40), at_most=3))
    assert squares == [i * i for i in range(40)]
    assert 1 <= most[0] <= 3
    assert settle(submit_all("test-order", call, [7])) == [49]
    assert settle(submit_all("test-order", call, [])) == []


@pytest.mark.parametrize("at_most", [2, 64])
def test_settle_raises_the_first_failure_after_every_call_ended(at_most: int) -> None:
    ended: list[int] = []

    def call(i: int) -> int:
        threading.Event().wait(0.001)
        ended.append(i)
        if i in (3, 5):
            raise ValueError(f"item {i}")
        return i

    with pytest.raises(ValueError, match="item 3"):
        settle(submit_all("test-failure", call, range(8), at_most=at_most))
    assert sorted(ended) == list(range(8))


def test_a_failure_beside_the_calls_is_raised_once_they_ended() -> None:
    ended: list[int] = []

    def call(i: int) -> int:
        threading.Event().wait(0.001)
        ended.append(i)
        return i

    futures = submit_all("test-joined", call, range(4))
    with pytest.raises(OSError, match="the LIST failed"), joined(futures):
        raise OSError("the LIST failed")
    assert sorted(ended) == list(range(4))


def test_a_forked_child_builds_its_own_pool() -> None:
    """The parent's pool threads do not exist in a child; the child's calls still run
    (its pools are its own, built on first use: ``os.register_at_fork``)."""
    assert settle(submit_all("test-fork", abs, [-1, -2])) == [1, 2]
    threading.Event().wait(0.2)  # its threads idle when the child is forked
    pid = os.fork()
    if pid == 0:  # the child: answer within 10 s, or die of the alarm
        signal.alarm(10)
        ok = settle(submit_all("test-fork", abs, [-3, -4])) == [3, 4]
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
