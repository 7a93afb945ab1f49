"""A commit waits for its create, never for the snapshot of its version (issue 25, goal
4's tail): the writer of every ``SNAPSHOT_EVERY``-th version writes its snapshot and then
the hint after the commit is acknowledged, off the caller's path
(``bucket_snapshot_writer.SnapshotWriter``). Counted on a real S3 server behind
``tests/s3_proxy.py``: the requests a call waited for are those answered before it
returned. Readers stay right whether a snapshot is late, never written, or its writer
died; a clean process exit still writes it."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator

import pyarrow as pa
import pytest
from bucket_helpers import log_values
from s3_proxy import RequestRecord, S3Proxy, sequential_round_trips
from s3_server import S3Server

from seglog.logstore.bucket.bucket_commit_log import Attempt, Change, CommitLog
from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.bucket.bucket_state import (
    SNAPSHOT_EVERY,
    BucketState,
    LogLayout,
    TopicSpec,
    topic_layout,
)
from seglog.logstore.errors import KafkaStorageError
from seglog.logstore.records.record_codec import encode_batches
from seglog.logstore.storage.object_storage import ObjectStorage
from seglog.logstore.storage.storage import StoragePath
from seglog.logstore.util.clock import MockClock

DELAY_S = 0.05


@pytest.fixture
def proxy(bucket_server: S3Server) -> Iterator[S3Proxy]:
    with S3Proxy(bucket_server.endpoint, delay_s=DELAY_S, log_requests=True) as p:
        yield p


def _storage(server: S3Server, bucket: str, endpoint: str | None = None) -> ObjectStorage:
    options = server.storage_options()
    if endpoint is not None:
        options = {**options, "aws_endpoint": endpoint}
    return ObjectStorage(f"s3://{bucket}/logs", options)


def _batch(tag: str) -> bytearray:
    return encode_batches(pa.array([tag.encode()]))


def _waited_for(proxy: S3Proxy, since: float, until: float) -> list[RequestRecord]:
    """The requests made from ``since`` whose answers came before ``until`` (the call's
    return): what the caller can have waited for. A snapshot written after the commit
    is acknowledged is answered a proxy delay after the return at the earliest."""
    return [r for r in proxy.requests(since) if r.replied is not None and r.replied < until]


def _topic_layout(mgr: BucketLogManager, topic: str) -> LogLayout:
    return topic_layout(mgr.state.topic_logs[topic])


def _hint(storage: ObjectStorage, layout: LogLayout) -> int:
    version = json.loads(storage.read(layout.hint_key))["version"]
    assert isinstance(version, int)
    return version


def test_an_append_on_a_version_due_a_snapshot_waits_for_its_put_and_create_only(
    bucket_server: S3Server, proxy: S3Proxy
) -> None:
    bucket = bucket_server.create_bucket()
    direct = _storage(bucket_server, bucket)
    with BucketLogManager(_storage(bucket_server, bucket, proxy.endpoint)) as mgr:
        mgr.create_topic("t", 1)  # the topic log's version 0
        for i in range(1, SNAPSHOT_EVERY):
            mgr.append("t", 0, _batch(f"r{i}"))
        layout = _topic_layout(mgr, "t")
        since = proxy.clock()
        info = mgr.append("t", 0, _batch("due"))  # version 10: due a snapshot
        until = proxy.clock()
        assert mgr.commits.logs()[mgr.state.topic_logs["t"]].state.version == 10
        waited = _waited_for(proxy, since, until)
        # The segment's PUT, then the create: the durability point, and the end of the
        # call. Before: then the snapshot's PUT beside the hint's GET, then the hint's
        # PUT, 4 round trips on the producer's path every 10th append.
        assert sorted(r.kind for r in waited) == ["CONDITIONAL_PUT", "PUT"], waited
        assert sequential_round_trips(waited) == 2
    # Written after the acknowledgement, and by the close at the latest.
    assert _hint(direct, layout) == 10
    snapshot = BucketState.decode(direct.read(layout.snapshot_key(10)), "snapshot", 10)
    assert snapshot.partitions["t-0"].high_watermark == info.last_offset + 1 == 10


def test_a_commit_through_commit_steps_sends_only_its_create_when_its_view_is_current(
    bucket_server: S3Server, proxy: S3Proxy
) -> None:
    """The Spark sink's driver commits through ``commit_steps``, once a micro-batch: a
    lone writer's view is current after its own last commit, so nothing is read before
    the create, on a version due a snapshot as on any other."""
    bucket = bucket_server.create_bucket()
    clock = MockClock()
    log = CommitLog(_storage(bucket_server, bucket, proxy.endpoint), clock=clock)
    for version in range(2 * SNAPSHOT_EVERY + 1):
        # A micro-batch later (a writer committing in a tight loop, under 50 ms apart,
        # also looks at the turn marker beside its build: ``bucket_turn``).
        clock.advance(200)
        log.flush_snapshots()  # the last one's, not to be counted as this commit's
        attempt = Attempt()
        since = proxy.clock()
        for state in log.commit_steps("create_topic", attempt):
            with attempt:
                attempt.change = _topic(f"topic-{state.version + 1}")
        until = proxy.clock()
        assert attempt.result is not None and attempt.result.version == version
        waited = _waited_for(proxy, since, until)
        if version:  # version 0: the log's open LISTed it first
            assert [r.kind for r in waited] == ["CONDITIONAL_PUT"], (version, waited)
    log.flush_snapshots()
    assert _hint(_storage(bucket_server, bucket), log.layout) == 2 * SNAPSHOT_EVERY


def _topic(name: str) -> Change:
    return Change(topics={name: TopicSpec(1)})


class _HeldSnapshots(ObjectStorage):
    """An S3 store whose snapshot and hint PUTs wait for ``release`` (a writer slower
    than its readers), or fail (``fail``: its writer never gets them written)."""

    release: threading.Event
    fail = False

    def write_atomic(self, path: StoragePath, data: bytes | bytearray | memoryview) -> None:
        name = str(path)
        if "/snapshots/" in name or name.endswith("last-snapshot"):
            if self.fail:
                raise KafkaStorageError(f"PUT {name} failed: 503 SlowDown")
            self.release.wait(timeout=10)
        super().write_atomic(path, data)


@pytest.mark.parametrize("fail", [False, True], ids=["late", "never"])
def test_readers_are_right_while_a_snapshot_is_late_or_never_written(
    bucket_server: S3Server, fail: bool
) -> None:
    bucket = bucket_server.create_bucket()
    options = bucket_server.storage_options()
    held = _HeldSnapshots(f"s3://{bucket}/logs", options)
    held.release = threading.Event()
    with BucketLogManager(_storage(bucket_server, bucket)) as setup:
        setup.create_topic("t", 1)  # version 0 and its snapshot, not held
    writer = BucketLogManager(held)
    held.fail = fail
    for i in range(1, 2 * SNAPSHOT_EVERY + 3):  # versions 10 and 20 due snapshots
        writer.append("t", 0, _batch(f"r{i}"))  # acknowledged with the snapshots pending
    layout = _topic_layout(writer, "t")
    direct = _storage(bucket_server, bucket)
    assert _hint(direct, layout) == 0  # only version 0's is there
    expected = [(i - 1, f"r{i}".encode()) for i in range(1, 2 * SNAPSHOT_EVERY + 3)]
    with BucketLogManager(_storage(bucket_server, bucket), read_only=True) as reader:
        # Opened from snapshot 0: folds 22 commits instead of 2, and is right.
        assert log_values(reader) == expected
    with BucketLogManager(_storage(bucket_server, bucket)) as other:
        other.append("t", 0, _batch("other"))  # another writer commits on: version 23
        assert log_values(other) == [*expected, (len(expected), b"other")]
    held.release.set()
    writer.close()  # waits for the snapshots in flight
    if fail:
        assert _hint(direct, layout) == 0
        assert not any(direct.exists(layout.snapshot_key(v)) for v in (10, 20))
    else:
        assert _hint(direct, layout) == 2 * SNAPSHOT_EVERY
    with BucketLogManager(_storage(bucket_server, bucket), read_only=True) as reader:
        assert log_values(reader) == [*expected, (len(expected), b"other")]


EXITS_WITHOUT_CLOSE = r"""
import sys
import pyarrow as pa
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches

mgr = LogManager(sys.argv[1])  # never closed: the interpreter's exit ends it
for i in range(int(sys.argv[2])):
    mgr.append("t", 0, encode_batches(pa.array([b"x%d" % i])))
print("acknowledged", flush=True)
"""


def test_a_process_that_exits_right_after_its_commit_still_writes_the_snapshot(
    s3_uri: str,
) -> None:
    """The snapshot's thread is not a daemon: a clean exit waits for it. (A kill leaves
    the commit without its snapshot, which readers cope with: ``test_bucket_processes``'
    ``after-commit``; a PUT is whole or absent, so no half-written snapshot is seen.)"""
    with BucketLogManager(ObjectStorage(s3_uri)) as mgr:
        mgr.create_topic("t", 1)
        layout = _topic_layout(mgr, "t")
    done = subprocess.run(
        [sys.executable, "-c", EXITS_WITHOUT_CLOSE, s3_uri, str(SNAPSHOT_EVERY)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and "acknowledged" in done.stdout, done.stderr[-3000:]
    storage = ObjectStorage(s3_uri)
    assert _hint(storage, layout) == SNAPSHOT_EVERY
    state = BucketState.decode(storage.read(layout.snapshot_key(SNAPSHOT_EVERY)), "s", 10)
    assert Counter(p.high_watermark for p in state.partitions.values()) == {SNAPSHOT_EVERY: 1}
