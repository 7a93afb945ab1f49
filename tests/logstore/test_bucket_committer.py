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
from seglog.logstore.bucket.bucket_committer import BucketCommitter, PartitionSource
from seglog.logstore.bucket.bucket_log import BucketLog
from seglog.logstore.bucket.bucket_logs import BucketLogs
from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.bucket.bucket_state import BucketState, TopicSpec
from seglog.logstore.config.config import LogConfig, ManagerConfig
from seglog.logstore.errors import LogDirError, ReadOnlyError, UnknownTopicOrPartitionError
from seglog.logstore.records.record_codec import decode_batches, encode_batches
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


def test_a_log_takes_the_state_a_helper_folded_with_no_one_telling_it() -> None:
    """A ``BucketLog`` is handed a ``PartitionSource``: commits a helper makes on the
    committer alone (no manager to push anything), and a refresh another log asked for,
    show in its answers and reads."""
    uri = memory_uri()
    committer = committer_of(uri)

    def create(state: BucketState) -> Change:
        return Change(topics={"t": TopicSpec(2, {}, None)})

    committer.commit("create_topic", create)
    log0 = BucketLog(
        committer.storage, "t", 0, committer.topic_config("t"), PartitionSource(committer, "t", 0)
    )
    log1 = BucketLog(
        committer.storage, "t", 1, committer.topic_config("t"), PartitionSource(committer, "t", 1)
    )
    assert (log0.high_watermark, log0.num_segments) == (0, 0)
    append_many(committer, {("t", 0): encode_batches(pa.array([b"a", b"b", b"c"]))})
    assert (log0.high_watermark, log0.log_end_offset, log0.num_segments) == (3, 3, 1)
    fetched = log0.read(0, max_offset=3)
    assert decode_batches(fetched.records).column("value").to_pylist() == [b"a", b"b", b"c"]
    with BucketLogManager(uri) as other:
        other.append("t", 1, encode_batches(pa.array([b"x"])))
    assert log1.high_watermark == 0  # nothing asked the bucket yet
    assert log0.refresh() is False  # partition 0 did not change...
    assert log1.high_watermark == 1  # ...but the state folded for it holds partition 1's
