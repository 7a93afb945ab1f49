"""``BucketCommitter`` (logstore/bucket/bucket_committer.py): what the bucket helpers are handed
instead of the manager. A helper runs on a committer alone (no ``BucketLogManager``),
a refresh says whether it folded commits, the logs take the folded state themselves
(``PartitionSource``), and a manager's own operations go through its committer. Real
objects in a memory:// bucket."""

from __future__ import annotations

import pyarrow as pa
import pytest
from bucket_helpers import memory_uri

from seglog.logstore.bucket.bucket_append import append_many
from seglog.logstore.bucket.bucket_commit_log import Change
from seglog.logstore.bucket.bucket_committer import BucketCommitter
from seglog.logstore.bucket.bucket_logs import BucketLogs
from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.bucket.bucket_state import BucketState, TopicSpec
from seglog.logstore.config.config import LogConfig, ManagerConfig
from seglog.logstore.errors import LogDirError, ReadOnlyError, UnknownTopicOrPartitionError
from seglog.logstore.records.record_codec import encode_batches
from seglog.logstore.storage.object_storage import ObjectStorage
from seglog.logstore.util.clock import SYSTEM_CLOCK


def committer_of(uri: str, *, read_only: bool = False) -> BucketCommitter:
    storage = ObjectStorage(uri)
    commits = BucketLogs(storage)
    return BucketCommitter(
        storage,
        commits,
        clock=SYSTEM_CLOCK,
        config=ManagerConfig.of(None),
        default_topic_config=LogConfig.of(None),
        read_only=read_only,
    )


def test_an_append_runs_on_a_committer_alone_and_a_manager_reads_it() -> None:
    uri = memory_uri()
    committer = committer_of(uri)

    def create(state: BucketState) -> Change:
        return Change(topics={"t": TopicSpec(2, {}, None)})

    committer.commit("create_topic", create)
    assert committer.state.topics["t"].partitions == 2
    info = append_many(committer, {("t", 1): encode_batches(pa.array([b"a", b"b"]))})
    assert info[("t", 1)].last_offset == 1
    assert committer.partition_state("t", 1).high_watermark == 2
    with pytest.raises(UnknownTopicOrPartitionError, match=r"unknown partition t-2 in memory"):
        committer.partition_state("t", 2)
    with BucketLogManager(uri, read_only=True) as reader:
        assert reader.high_watermarks() == {("t", 0): 0, ("t", 1): 2}


def test_a_refresh_says_whether_it_folded_commits() -> None:
    uri = memory_uri()
    committer = committer_of(uri)
    with BucketLogManager(uri) as other:
        other.create_topic("t")
    assert committer.refresh()
    assert not committer.refresh()  # nothing new
    with committer.one_refresh(refresh=False):
        with BucketLogManager(uri) as other:
            other.create_topic("u")
        assert committer.topics() == ["t"]  # inside the block: the block's state
    assert committer.topics() == ["t", "u"]


def test_the_managers_writes_go_through_its_committer() -> None:
    uri = memory_uri()
    with BucketLogManager(uri, read_only=True) as reader:
        assert reader.read_only and reader.committer.read_only
        with pytest.raises(ReadOnlyError, match=f"log dir {uri} is open read-only"):
            reader.create_topic("t")
    mgr = BucketLogManager(uri)
    mgr.inline_index_bytes = 0
    assert mgr.committer.inline_index_bytes == 0
    mgr.close()
    with pytest.raises(LogDirError, match=f"the manager of {uri} is closed"):
        mgr.committer.check_writable()
