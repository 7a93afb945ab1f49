"""A store that ignores create-if-absent (or does not hold it under load) lets two writers
both "create" one commit version; the writer whose commit was replaced finds out at its
next refresh and says so (``ConditionalWriteNotEnforcedError`` naming the version and
``seglog probe-store``), instead of carrying on with an acknowledged operation the log does
not hold. Simulated at the storage seam: a wrapper whose ``create`` overwrites."""

from __future__ import annotations

from typing import Any

import pytest
from bucket_helpers import CountingStorage, memory_uri
from test_bucket_commit_log import append_change, topic_change

from seglog.logstore.bucket.bucket_commit_log import CommitLog
from seglog.logstore.bucket.bucket_commit_reader import MAX_READ_BACK
from seglog.logstore.errors import ConditionalWriteNotEnforcedError
from seglog.logstore.storage.object_storage import ObjectStorage
from seglog.logstore.storage.storage import Storage, StoragePath


class CreateIgnoringStorage:
    """Forwards to ``inner``, but ``create`` is a plain PUT that always succeeds: what a
    store that ignores ``If-None-Match: *`` answers."""

    def __init__(self, inner: Storage) -> None:
        self.inner = inner

    @property
    def uri(self) -> str:
        return self.inner.uri

    def create(self, path: StoragePath, data: Any) -> bool:
        self.inner.write_atomic(path, data)
        return True

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _two_writers() -> tuple[CreateIgnoringStorage, CommitLog, CommitLog]:
    storage = CreateIgnoringStorage(ObjectStorage(memory_uri()))
    first = CommitLog(storage, writer_id="writer-a")
    first.commit("create_topic", lambda s: topic_change())
    second = CommitLog(storage, writer_id="writer-b")
    return storage, first, second


def test_a_writer_whose_commit_was_replaced_by_a_later_writer_says_so():
    _, a, b = _two_writers()
    a.commit("append", append_change)  # version 1, a's
    # b has not looked since version 0 (its view is fresh): it creates version 1 too, and
    # the store says yes; then it goes on to version 2.
    b.commit("append", lambda s: append_change(s, 7))
    b.commit("append", append_change)
    with pytest.raises(ConditionalWriteNotEnforcedError) as e:
        a.refresh()
    message = str(e.value)
    assert "_seglog/log/00000000000000000001.json" in message
    assert "writer-a" in message and "writer writer-b's append" in message
    assert f"seglog probe-store {a.uri}" in message
    # a's state is the bucket's again: nothing more is built on its lost append
    assert a.state == CommitLog(a.storage).state == b.state
    assert a.refresh() is False
    # and it refuses to commit on that store again; reading goes on
    with pytest.raises(ConditionalWriteNotEnforcedError, match="refusing to commit append"):
        a.commit("append", append_change)
    assert a.state == b.state


def test_a_lone_writer_sees_a_replaced_commit_of_another_size():
    _, a, b = _two_writers()
    a.commit("append", append_change)
    b.commit("append", lambda s: append_change(s, 123456))  # replaces version 1
    with pytest.raises(ConditionalWriteNotEnforcedError, match=r"commit 1 \(append\)"):
        a.refresh()
    assert a.state.partition("t", 0).high_watermark == 123456


def test_a_writer_that_won_its_versions_reads_nothing_back():
    counting = CountingStorage(ObjectStorage(memory_uri()))
    a = CommitLog(counting, writer_id="writer-a")
    a.commit("create_topic", lambda s: topic_change())
    for _ in range(3):
        a.commit("append", append_change)
    counting.reset()
    assert a.refresh() is False
    assert dict(counting.counts) == {"list_after": 1}
    # another writer's honest commit: a's own are read back once, and match
    b = CommitLog(counting.inner, writer_id="writer-b")
    b.commit("append", append_change)
    counting.reset()
    assert a.refresh() is True
    assert counting.counts["read"] == 4 + 1  # a's four commits, then b's
    counting.reset()
    a.commit("append", append_change)
    b.commit("append", append_change)
    assert a.refresh() is True  # nothing raised: a's append holds a's bytes


def test_read_back_after_a_long_lone_run_is_bounded():
    counting = CountingStorage(ObjectStorage(memory_uri()))
    a = CommitLog(counting, writer_id="writer-a")
    a.commit("create_topic", lambda s: topic_change())
    for _ in range(MAX_READ_BACK + 10):
        a.commit("append", append_change)
    assert a.refresh() is False  # alone: sizes only, nothing read
    CommitLog(counting.inner, writer_id="writer-b").commit("append", append_change)
    counting.reset()
    assert a.refresh() is True
    assert counting.counts["read"] == MAX_READ_BACK + 1  # the newest own ones, then b's


def test_the_writer_whose_commit_stayed_names_the_fork_when_the_other_builds_on_its_own():
    _, a, b = _two_writers()
    a.commit("append", append_change)  # version 1, a's: 5 records
    b.commit("append", lambda s: append_change(s, 7))  # version 1 again, b's: 7 records
    # a goes on from its own version 1 (its view is fresh, the store says yes)
    a.commit("append", append_change)  # version 2: a segment at 5
    # b folds a's version 2 onto b's version 1 (log end 7): it cannot follow
    with pytest.raises(ConditionalWriteNotEnforcedError) as e:
        b.refresh()
    message = str(e.value)
    assert "_seglog/log/00000000000000000002.json" in message
    assert "does not follow commit 1, which this writer (writer-b) created" in message
    assert "(partition t-0: segment t-0/00000000000000000005-" in message
    assert message.count("00000000000000000002.json") == 1
    assert f"seglog probe-store {b.uri}" in message
    with pytest.raises(ConditionalWriteNotEnforcedError, match="refusing to commit append"):
        b.commit("append", append_change)
