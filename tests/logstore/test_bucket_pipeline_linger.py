"""When ``append_async``'s committer commits (logstore/bucket/bucket_pipeline.py,
``_linger_left``): a finished upload waits for the uploads running behind it, at most
``linger.ms`` (by the manager's clock), never while a caller is blocked for room, and
while a ``flush`` waits, until all of that flush's uploads ended; a due snapshot is
written after the futures of its commit are completed."""

from __future__ import annotations

import threading
from typing import Any

import pyarrow as pa
import pytest
from bucket_helpers import CountingStorage, memory_uri

from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.bucket.bucket_state import SNAPSHOT_EVERY, version_name
from seglog.logstore.errors import ConfigError
from seglog.logstore.records.record_codec import encode_batches
from seglog.logstore.storage.object_storage import ObjectStorage
from seglog.logstore.util.clock import SYSTEM_CLOCK, MockClock

HOUR_MS = 3_600_000
BOUND_S = 10  # a wait that should end far sooner; only a hang reaches it


def batches(tag: str, n: int = 3) -> bytearray:
    return encode_batches(pa.array([f"{tag}/{j}".encode() for j in range(n)]))


class PartitionGates(CountingStorage):
    """The ``.log`` uploads of partition ``t-<p>`` wait for ``gates[p]`` (bounded by
    ``bounds[p]`` seconds; ``waited[p]`` says whether the gate opened in time);
    ``created`` is set by the first commit create, ``uploaded[p]`` once an upload of
    ``t-<p>`` ended."""

    def __init__(self, inner: Any, bounds: dict[int, float]) -> None:
        super().__init__(inner)
        self.bounds = bounds
        self.gates = {p: threading.Event() for p in bounds}
        self.waited: dict[int, bool] = {}
        self.uploaded = {p: threading.Event() for p in range(4)}
        self.created = threading.Event()

    def write_atomic(self, key: str, data: Any) -> None:
        p = int(key.split("/", 1)[0].rpartition("-")[2]) if key.endswith(".log") else None
        if p in self.gates:
            self.waited[p] = self.gates[p].wait(self.bounds[p])
        self.inner.write_atomic(key, data)
        if p is not None:
            self.uploaded[p].set()

    def create(self, key: str, data: Any) -> bool:
        self.counts["create"] += 1
        result = self.inner.create(key, data)
        self.created.set()
        return result


def frozen_clock() -> MockClock:
    """Now, standing still (the batches' timestamps must be near it)."""
    return MockClock(SYSTEM_CLOCK.milliseconds())


def manager(storage: PartitionGates, linger_ms: int, **kwargs: Any) -> BucketLogManager:
    mgr = BucketLogManager(storage, config={"linger.ms": linger_ms}, **kwargs)
    mgr.create_topic("t", 3)
    storage.reset()
    storage.created.clear()  # set by the topic's creation
    return mgr


def test_a_finished_upload_waits_for_the_one_running_behind_it_and_both_share_a_commit():
    storage = PartitionGates(ObjectStorage(memory_uri()), {0: BOUND_S, 1: 1.0})
    storage.gates[1] = storage.created  # the second upload ends once a commit was made,
    # or after a second: one commit for both only if the first waited for it
    mgr = manager(storage, HOUR_MS)
    first = mgr.append_async("t", 0, batches("a"))
    second = mgr.append_async("t", 1, batches("b"))
    storage.gates[0].set()  # the first upload ends once the second is running
    assert first.result(timeout=BOUND_S).first_offset == 0
    assert second.result(timeout=BOUND_S).first_offset == 0
    assert storage.counts["create"] == 1
    mgr.close()


def test_the_wait_ends_linger_ms_after_the_upload_by_the_managers_clock():
    clock = frozen_clock()
    storage = PartitionGates(ObjectStorage(memory_uri()), {0: BOUND_S, 1: BOUND_S})
    storage.gates[1] = storage.created
    mgr = manager(storage, 50, clock=clock)
    first = mgr.append_async("t", 0, batches("a"))
    second = mgr.append_async("t", 1, batches("b"))
    storage.gates[0].set()
    assert storage.uploaded[0].wait(BOUND_S)
    # The clock stands still: nothing is committed until it passes linger_ms.
    assert not storage.created.is_set()
    clock.advance(50)
    assert first.result(timeout=BOUND_S).first_offset == 0
    assert second.result(timeout=BOUND_S).first_offset == 0
    assert storage.waited[1] is True  # the first was committed alone, before the second ended
    assert storage.counts["create"] == 2
    mgr.close()


def test_a_lone_append_is_committed_at_once_whatever_the_linger():
    storage = PartitionGates(ObjectStorage(memory_uri()), {})
    mgr = manager(storage, HOUR_MS, clock=frozen_clock())
    assert mgr.append_async("t", 0, batches("a")).result(timeout=BOUND_S).first_offset == 0
    mgr.close()


def test_a_caller_blocked_for_room_gets_it_from_a_commit_not_after_the_linger():
    storage = PartitionGates(ObjectStorage(memory_uri()), {0: BOUND_S, 1: BOUND_S})
    mgr = manager(storage, HOUR_MS, clock=frozen_clock())
    size = len(batches("a"))
    mgr.max_in_flight_bytes = 2 * size
    first = mgr.append_async("t", 0, batches("a"))
    second = mgr.append_async("t", 1, batches("b"))  # held until the third is taken
    storage.gates[0].set()
    assert storage.uploaded[0].wait(BOUND_S)
    # Blocks for room until the first is committed, which the committer does at once
    # although the second is still running and the clock never passes the linger.
    third = mgr.append_async("t", 2, batches("c"))
    storage.gates[1].set()
    mgr.flush()
    assert [f.result().first_offset for f in (first, second, third)] == [0, 0, 0]
    assert storage.waited[1] is True
    mgr.close()


def test_while_a_flush_waits_its_appends_are_committed_once_all_their_uploads_ended():
    # linger_ms 0: without the flush, the first would be committed alone at once.
    storage = PartitionGates(ObjectStorage(memory_uri()), {0: BOUND_S, 1: 1.0})
    storage.gates[1] = storage.created  # or after a second (see the first test)
    mgr = manager(storage, 0)
    futures = [mgr.append_async("t", 0, batches("a")), mgr.append_async("t", 1, batches("b")),
               mgr.append_async("t", 1, batches("c"))]
    flusher = threading.Thread(target=mgr.flush)
    flusher.start()
    pipeline = mgr._pipeline
    assert pipeline is not None
    with pipeline._cond:  # the flush registered itself, then the first upload may end
        assert pipeline._cond.wait_for(lambda: pipeline._flushes, BOUND_S)
    storage.gates[0].set()
    flusher.join(BOUND_S)
    assert not flusher.is_alive()
    assert [f.result().first_offset for f in futures] == [0, 0, 3]
    assert storage.counts["create"] == 1
    mgr.close()


def test_linger_ms_has_a_documented_default_and_a_bad_one_is_named():
    uri = memory_uri()
    mgr = BucketLogManager(uri)
    assert mgr.config.linger_ms == 5  # the local manager's key and default
    mgr.close()
    with pytest.raises(ConfigError, match="-1 for config .linger.ms."):
        BucketLogManager(uri, config={"linger.ms": -1})


class HeldSnapshots(CountingStorage):
    """Holds the write of snapshot ``SNAPSHOT_EVERY`` until ``go`` is set (bounded: a
    hang fails)."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.go = threading.Event()

    def write_atomic(self, key: str, data: Any) -> None:
        if key.endswith("/snapshots/" + version_name(SNAPSHOT_EVERY)):
            assert self.go.wait(BOUND_S), "the test never let the snapshot go"
        self.inner.write_atomic(key, data)


def test_an_append_is_acknowledged_before_the_snapshot_its_commit_is_due():
    storage = HeldSnapshots(ObjectStorage(memory_uri()))
    mgr = BucketLogManager(storage)
    mgr.create_topic("t", 1)
    for i in range(SNAPSHOT_EVERY - 1):  # versions 1..9 (the topic is version 0)
        mgr.append("t", 0, batches(f"s{i}", 1))
    hint_key = mgr.commits.topic_log("t").layout.hint_key  # the topic's own log
    due = mgr.append_async("t", 0, batches("a"))  # version 10: due a snapshot
    assert due.result(timeout=BOUND_S).first_offset == SNAPSHOT_EVERY - 1
    mgr.flush()  # acknowledged = committed: nothing left to wait for
    assert storage.inner.read(hint_key) != b'{"version": %d}' % SNAPSHOT_EVERY
    storage.go.set()
    mgr.close()  # the committer finishes the snapshot and the hint before it stops
    assert storage.inner.read(hint_key) == b'{"version": %d}' % SNAPSHOT_EVERY
    reader = BucketLogManager(storage.inner, read_only=True)
    assert reader.commits.topic_log("t").state.version == SNAPSHOT_EVERY
