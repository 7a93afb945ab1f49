"""A topic deleted and re-created under a running source: the plan carries the topic ids
it was made against, a task's cached log of another topic never serves its rows, and
the driver treats the old topic's offsets as lost (``failOnDataLoss``)."""

from __future__ import annotations

import logging
import os
import sys
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from seglog.datasource.schema import arrow_schema
from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.errors import CorruptPartitionMetadataError, DataLossError
from seglog.logstore.log.partition_metadata import (
    new_topic_id,
    read_topic_id,
    write_partition_metadata,
)
from seglog.logstore.manager.log_dirs_reader import LogDirsReader
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches
from seglog.logstore.storage.file_names import PARTITION_METADATA_FILE
from seglog.streaming import log_readers
from seglog.streaming.read_planning import ReadRange
from seglog.streaming.source_offsets import (
    TOPIC_IDS_KEY,
    offsets_from_json,
    offsets_to_json,
    reconcile_start,
    snapshot_log_dirs,
    topic_ids_from_json,
)
from seglog.streaming.source_options import SourceOptions
from seglog.streaming.source_read import read_range

SCHEMA = arrow_schema(False)


def _batch(prefix: str, n: int) -> bytearray:
    return encode_batches(pa.array([f"{prefix}{i}".encode() for i in range(n)]))


def _values(r: ReadRange) -> list[bytes]:
    return [v for b in read_range(r, SCHEMA) for v in b.column("value").to_pylist()]


class _Local:
    """A local log dir written by a writer that stays open (the old topic's directory
    stays as ``-delete`` for ``file.delete.delay.ms``, as in real life)."""

    def __init__(self, path: Path) -> None:
        self.uri = str(path)
        self.mgr = LogManager([path], default_topic_config={"file.delete.delay.ms": 60_000})

    def create(self, prefix: str, n: int) -> None:
        self.mgr.create_topic("t", 1)
        self.mgr.append("t", 0, _batch(prefix, n))
        self.mgr.checkpoint_high_watermarks()

    def delete(self) -> None:
        self.mgr.delete_topic("t")

    def close(self) -> None:
        self.mgr.close()


class _Bucket(_Local):
    def __init__(self, path: Path) -> None:
        self.uri = f"memory://topic-ids-{uuid.uuid4().hex}"
        self.mgr = BucketLogManager(self.uri)  # type: ignore[assignment]

    def create(self, prefix: str, n: int) -> None:
        self.mgr.create_topic("t", 1)
        self.mgr.append("t", 0, _batch(prefix, n))


@pytest.fixture(params=["local", "bucket"])
def store(request, tmp_path: Path):
    s = _Local(tmp_path) if request.param == "local" else _Bucket(tmp_path)
    yield s
    s.close()


def _plan(uri: str, start: int, end: int, *, fail: bool = True) -> ReadRange:
    """A range planned now, with the topic id the driver sees now."""
    options = SourceOptions.parse({"path": uri, "subscribe": "t"}, streaming=True)
    snap = snapshot_log_dirs([uri], options=options)
    return ReadRange(
        (uri,), "t", 0, start, end, fail_on_data_loss=fail, topic_id=snap.topic_ids["t"]
    )


def test_a_plan_of_the_new_topic_never_reads_a_cached_log_of_the_old(store):
    store.create("old", 6)
    # A worker read the old topic: its process caches the log (and, for a bucket, the
    # state that covers offsets [0, 6)).
    assert _values(_plan(store.uri, 0, 6)) == [f"old{i}".encode() for i in range(6)]
    store.delete()
    store.create("new", 6)
    r = _plan(store.uri, 0, 6)
    assert r.topic_id is not None
    assert _values(r) == [f"new{i}".encode() for i in range(6)]


@pytest.mark.parametrize("fail", [True, False])
def test_a_plan_of_the_old_topic_is_data_loss_once_it_is_recreated(store, fail, caplog):
    """Planned before the delete, read after the re-create: the rows of offsets [2, 6)
    in the new topic are not the planned ones."""
    store.create("old", 6)
    r = _plan(store.uri, 2, 6, fail=fail)
    log_readers.close_all()  # the driver's process: the worker's is another one
    store.delete()
    store.create("new", 8)
    message = (
        rf"topic 't' partition 0: offsets \[2, 6\) were planned in topic id "
        rf"{r.topic_id}, but the topic now has id \S+ \(it was deleted and re-created\)"
    )
    if fail:
        with pytest.raises(DataLossError, match=message):
            _values(r)
    else:
        with caplog.at_level(logging.WARNING):
            assert _values(r) == []
        assert any("were planned in topic id" in m for m in caplog.messages)


def test_a_topic_without_an_id_is_read_without_the_check(store):
    store.create("a", 3)
    r = _plan(store.uri, 0, 3)
    assert _values(ReadRange(r.log_dirs, "t", 0, 0, 3)) == [b"a0", b"a1", b"a2"]


def test_offsets_carry_topic_ids_apart_from_kafkas_offsets() -> None:
    data = offsets_to_json(
        {("t", 0): 5, ("u", 0): 1}, None, {"t": "x" * 22, "u": None, "gone": "y" * 22}
    )
    assert data == {"t": {"0": 5}, "u": {"0": 1}, TOPIC_IDS_KEY: {"t": "x" * 22}}
    assert offsets_from_json(data) == {("t", 0): 5, ("u", 0): 1}
    assert topic_ids_from_json(data) == {"t": "x" * 22}
    assert offsets_to_json({("t", 0): 5}, None, {"t": None}) == {"t": {"0": 5}}


@pytest.mark.parametrize("fail", [True, False])
def test_the_driver_treats_a_recreated_topics_offsets_as_lost(tmp_path, fail, caplog):
    """Between two triggers the topic was deleted and re-created with more records than
    the old offset: without ids the old offset would silently continue in the new topic
    (Spark's Kafka source cannot tell); with them it restarts at the new earliest."""
    store = _Local(tmp_path)
    store.create("old", 3)
    options = SourceOptions.parse(
        {"path": store.uri, "subscribe": "t", "failOnDataLoss": str(fail).lower()}, streaming=True
    )
    before = snapshot_log_dirs([store.uri], options=options)
    previous = offsets_to_json({("t", 0): 3}, None, before.topic_ids)
    store.delete()
    store.create("new", 10)
    snap = snapshot_log_dirs([store.uri], options=options)
    assert snap.topic_ids["t"] != before.topic_ids["t"]
    args = (offsets_from_json(previous), options, snap, topic_ids_from_json(previous))
    if fail:
        with pytest.raises(
            DataLossError,
            match=r"topic 't' partition 0: offsets from 3 on "
            r"of topic id \S+ may not have been read",
        ):
            reconcile_start(*args)
    else:
        with caplog.at_level(logging.WARNING):
            assert reconcile_start(*args) == {("t", 0): 0}
        assert any("deleted and re-created" in m for m in caplog.messages)
    # the same topic: nothing to report
    assert reconcile_start({("t", 0): 3}, options, snap, dict(snap.topic_ids)) == {("t", 0): 3}
    store.close()


_opened: list[str] | None = None


def _count_opens(event: str, args: tuple) -> None:
    if _opened is not None and event == "open" and isinstance(args[0], (str, Path)):
        _opened.append(str(args[0]))


sys.addaudithook(_count_opens)


def test_a_trigger_reads_no_partition_metadata_after_the_first(tmp_path):
    """Ids are read once per partition directory and process, not per trigger, and
    opening the log dirs reads none."""
    global _opened
    with LogManager([tmp_path]) as mgr:
        for t in ("a", "b"):
            mgr.create_topic(t, 4)
    options = SourceOptions.parse({"path": str(tmp_path), "subscribePattern": ".*"}, streaming=True)
    _opened = []
    try:
        with log_readers.reader([str(tmp_path)]):
            pass
        assert not [f for f in _opened if f.endswith(PARTITION_METADATA_FILE)]
        for _ in range(3):
            snap = snapshot_log_dirs([str(tmp_path)], options=options)
        read = sorted(Path(f).parent.name for f in _opened if f.endswith(PARTITION_METADATA_FILE))
    finally:
        _opened = None
    # every partition's once (they must agree), not once per trigger
    assert read == sorted(f"{t}-{p}" for t in "ab" for p in range(4))
    assert set(snap.topic_ids) == {"a", "b"} and None not in snap.topic_ids.values()


def test_a_damaged_file_fails_only_the_queries_of_its_topic(tmp_path):
    with LogManager([tmp_path]) as mgr:
        mgr.create_topic("mine", 1)
        mgr.create_topic("other", 1)
    damaged = tmp_path / "other-0" / PARTITION_METADATA_FILE
    damaged.write_bytes(b"version: 0\ntopic_id: ")
    for topic, fails in (("mine", False), ("other", True)):
        options = SourceOptions.parse({"path": str(tmp_path), "subscribe": topic}, streaming=True)
        if fails:
            with pytest.raises(CorruptPartitionMetadataError, match=str(damaged)):
                snapshot_log_dirs([str(tmp_path)], options=options)
        else:
            assert set(snapshot_log_dirs([str(tmp_path)], options=options).topic_ids) == {"mine"}


def test_an_id_written_into_an_old_dir_later_is_read_by_a_cached_reader(tmp_path):
    """A Kafka broker writes ``partition.metadata`` into an existing directory (an
    upgrade to topic ids): a worker that cached "no id" for it reads a plan made with
    the id (a restarted driver), never reports its rows as lost."""
    store = _Local(tmp_path)
    store.create("a", 3)
    (tmp_path / "t-0" / PARTITION_METADATA_FILE).unlink()  # a dir from before topic ids
    assert _values(ReadRange((store.uri,), "t", 0, 0, 2)) == [b"a0", b"a1"]
    write_partition_metadata(tmp_path / "t-0", new_topic_id())  # in place, same inode
    with LogDirsReader([tmp_path]) as driver:
        topic_id = driver.topic_ids(["t"])["t"]
    assert topic_id is not None
    assert _values(ReadRange((store.uri,), "t", 0, 2, 3, topic_id=topic_id)) == [b"a2"]
    store.close()


def _drop_id(store) -> None:
    """The topic's id disappears, nothing else changes: a partition directory restored
    without its ``partition.metadata``, or an older seglog's snapshot of a bucket state
    (TopicSpec as it was written before topic ids)."""
    if isinstance(store, _Bucket):
        from seglog.logstore.bucket import bucket_state

        real = bucket_state.TopicSpec.to_json
        bucket_state.TopicSpec.to_json = lambda self: {  # type: ignore[method-assign]
            "partitions": self.partitions,
            "config": dict(sorted(self.config.items())),
        }
        try:
            old = BucketLogManager(store.uri)
            while True:  # an older writer appends up to its snapshot
                old.append("t", 0, _batch("x", 1))
                log = old.commits.topic_log("t")  # the topic's own commit log
                if log is not None and log.state.version % bucket_state.SNAPSHOT_EVERY == 0:
                    old.commits.flush_snapshots()  # encoded by the older writer's code
                    break
        finally:
            bucket_state.TopicSpec.to_json = real  # type: ignore[method-assign]
        fresh = BucketLogManager(store.uri)
        assert fresh.topic_ids(["t"])["t"] is None  # what such a snapshot does
        fresh.close()
    else:
        (Path(store.uri) / "t-0" / PARTITION_METADATA_FILE).unlink()
        store.mgr.append("t", 0, _batch("x", 1))
        store.mgr.checkpoint_high_watermarks()


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_an_id_that_disappears_is_not_a_recreation(store, caplog, fail_on_data_loss):
    """No loss is reported and nothing is read twice: the next trigger plans from the
    previous end, in the same topic."""
    from seglog.datasource.stream_reader import SeglogStreamReader

    store.create("a", 3)
    source = SeglogStreamReader(
        {"path": store.uri, "subscribe": "t", "failOnDataLoss": fail_on_data_loss}, None
    )  # type: ignore[arg-type]
    first = source.latestOffset(source.initialOffset(), None)  # type: ignore[arg-type]
    assert offsets_from_json(first) == {("t", 0): 3} and TOPIC_IDS_KEY in first
    log_readers.close_all()  # a restarted driver: the reader sees the state as it is now
    _drop_id(store)
    with caplog.at_level(logging.WARNING):
        second = source.latestOffset(first, None)  # type: ignore[arg-type]
        (planned,) = [p.value for p in source.partitions(first, second)]
        assert planned.start == 3 and planned.end > 3
        got = _values(planned)
        # a task planned before the id went (the first trigger's id), its log without one
        before = ReadRange(
            (store.uri,), "t", 0, 3, planned.end, topic_id=topic_ids_from_json(first)["t"]
        )
        assert _values(before) == got
    assert got and all(v.startswith(b"x") for v in got)
    assert not [m for m in caplog.messages if "re-created" in m or "lost" in m]
    store.close()


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_a_flipped_id_in_one_partition_is_damage_not_a_recreation(tmp_path, fail_on_data_loss):
    """A bit flip that leaves another valid id in one partition's file: the topic's
    partitions disagree, which a re-creation never does, so the trigger fails naming
    them (whatever failOnDataLoss says) instead of reading the topic again from its
    earliest offset; once the file is restored the query goes on where it was."""
    from seglog.datasource.stream_reader import SeglogStreamReader

    with LogManager([tmp_path]) as mgr:
        mgr.create_topic("t", 3)
        for p in range(3):
            mgr.append("t", p, _batch(f"p{p}-", 4))
        mgr.checkpoint_high_watermarks()
    source = SeglogStreamReader(
        {"path": str(tmp_path), "subscribe": "t", "failOnDataLoss": fail_on_data_loss}, None
    )  # type: ignore[arg-type]
    first = source.latestOffset(source.initialOffset(), None)  # type: ignore[arg-type]
    assert offsets_from_json(first) == {("t", p): 4 for p in range(3)}
    path = tmp_path / "t-1" / PARTITION_METADATA_FILE
    good = path.read_bytes()
    damaged = bytearray(good)
    i = good.index(b"topic_id: ") + len(b"topic_id: ") + 5
    damaged[i] = ord("B") if damaged[i] != ord("B") else ord("C")  # still a valid id
    path.write_bytes(bytes(damaged))
    log_readers.close_all()  # a restarted driver
    with pytest.raises(
        CorruptPartitionMetadataError,
        match=r"'t' hold different topic ids"
        r".* in partition\(s\) 1;|in partition\(s\) 1\)",
    ):
        source.latestOffset(first, None)  # type: ignore[arg-type]
    path.write_bytes(good)
    log_readers.close_all()
    assert source.latestOffset(first, None) == first  # type: ignore[arg-type]


def test_partitions_without_the_file_do_not_disagree(tmp_path):
    """A topic part of whose directories predate ids (an upgrade in progress) has the id
    the others hold."""
    with LogManager([tmp_path]) as mgr:
        mgr.create_topic("t", 2)
    (tmp_path / "t-0" / PARTITION_METADATA_FILE).unlink()
    with LogDirsReader([tmp_path]) as reader:
        assert reader.topic_ids(["t"])["t"] == reader.topic_id_of("t", 1) is not None


def test_a_topic_recreated_after_the_task_checked_it_is_never_read_under_the_old_plan(store):
    """The task checks the id, then its read refreshes the log (a local re-list, a bucket
    state synced): a re-creation in between is data loss for the planned range, never
    the new topic's rows at the old plan's offsets."""
    store.create("old", 5)
    old_id = _plan(store.uri, 0, 5).topic_id
    assert _values(ReadRange((store.uri,), "t", 0, 0, 5, topic_id=old_id))[-1] == b"old4"
    store.mgr.append("t", 0, _batch("more", 5))
    if isinstance(store, _Local):
        store.mgr.checkpoint_high_watermarks()
    plan = ReadRange((store.uri,), "t", 0, 5, 10, topic_id=old_id)
    store.delete()
    store.create("NEW", 10)
    got = []
    try:
        got = _values(plan)
    except DataLossError as e:
        assert "re-created while it was read" in str(e) or "now has id" in str(e)
    # the old topic's rows (still there for a bucket's delete delay), or none: never NEW
    assert not [v for v in got if v.startswith(b"NEW")]
    store.close()


def test_a_recreated_directory_that_got_the_old_inode_back_is_read_as_the_new_topic(tmp_path):
    """ext4 gives a re-created directory the deleted one's inode number at once: a
    worker's cached entry of the same inode but another id is replaced, so a plan made
    with the new id reads the new topic (forced here, whatever the filesystem does)."""
    store = _Local(tmp_path)
    store.create("old", 3)
    old_id = _plan(store.uri, 0, 3).topic_id
    assert _values(ReadRange((store.uri,), "t", 0, 0, 3, topic_id=old_id)) == [
        b"old0",
        b"old1",
        b"old2",
    ]
    store.delete()
    store.create("new", 3)
    new_id = read_topic_id(tmp_path / "t-0")  # what a driver in another process plans
    assert new_id is not None and new_id != old_id
    with log_readers.reader([store.uri]) as worker:  # the task's shared reader
        entry = worker.partition("t", 0)  # still the old directory's entry
        assert entry.topic_id == old_id
        entry.inode = os.stat(tmp_path / "t-0").st_ino  # as if the number came back
    assert _values(ReadRange((store.uri,), "t", 0, 0, 3, topic_id=new_id)) == [
        b"new0",
        b"new1",
        b"new2",
    ]
    store.close()
