"""Topic ids: Kafka's ``partition.metadata`` written at creation, read by readers, and a
topic deleted and re-created under a long-lived reader told apart from the old one."""

from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.bucket.bucket_state import BucketState, Commit, TopicSpec
from seglog.logstore.errors import CorruptMetadataError, CorruptPartitionMetadataError
from seglog.logstore.log.partition_metadata import (
    new_topic_id,
    parse_partition_metadata,
    read_topic_id,
    valid_topic_id,
)
from seglog.logstore.manager.log_dirs_reader import LogDirsReader
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import decode_batches, encode_batches
from seglog.logstore.storage.file_names import PARTITION_METADATA_FILE


def _values(log: object) -> list[bytes]:
    out: list[bytes] = []
    for chunk in log.read_chunks(log.log_start_offset, log.high_watermark):  # type: ignore[attr-defined]
        out += decode_batches(chunk).column("value").to_pylist()
    return out


def _append(mgr: LogManager, topic: str, values: list[bytes], partition: int = 0) -> None:
    mgr.append(topic, partition, encode_batches(pa.array(values)))
    mgr.checkpoint_high_watermarks()


def test_create_topic_writes_kafkas_partition_metadata(tmp_path: Path) -> None:
    with LogManager([tmp_path]) as mgr:
        mgr.create_topic("t", 3)
        mgr.create_topic("u", 1)
        mgr.add_partitions("t", 4)
    raw = (tmp_path / "t-0" / PARTITION_METADATA_FILE).read_bytes()
    # Kafka's PartitionMetadataFileFormatter: two lines, no trailing newline.
    head, _, topic_id = raw.partition(b"\ntopic_id: ")
    assert head == b"version: 0" and len(topic_id) == 22
    assert len(base64.urlsafe_b64decode(topic_id + b"==")) == 16
    ids = {read_topic_id(tmp_path / f"t-{p}") for p in range(4)}
    assert ids == {topic_id.decode()}  # every partition, the added one too
    assert read_topic_id(tmp_path / "u-0") not in ids
    assert not list(tmp_path.glob("t-0/*.tmp"))


def test_a_file_kafka_wrote_reads_and_bad_ones_name_the_file(tmp_path: Path) -> None:
    tid = new_topic_id()
    assert valid_topic_id(tid) and not tid.startswith("-")
    # Kafka 2.8+ brokers, and older seglog test fixtures, with or without a final newline.
    assert parse_partition_metadata(f"version: 0\ntopic_id: {tid}\n".encode(), "f") == tid
    assert parse_partition_metadata(f"version: 0\ntopic_id: {tid}".encode(), "f") == tid
    for bad in (b"", b"version: 0\n", f"version: 1\ntopic_id: {tid}".encode(),
                b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA",  # the zero id
                b"version: 0\ntopic_id: not-an-id", b"\xff\xfe",
                f"topic_id: {tid}\nversion: 0".encode()):
        with pytest.raises(CorruptPartitionMetadataError, match="where"):
            parse_partition_metadata(bad, "where")


def test_a_damaged_file_is_an_error_naming_it_never_no_id(tmp_path: Path) -> None:
    with LogManager([tmp_path]) as mgr:
        mgr.create_topic("t", 1)
        _append(mgr, "t", [b"a"])
    path = tmp_path / "t-0" / PARTITION_METADATA_FILE
    path.write_bytes(b"version: 0\ntopic_id: garbage")
    with LogDirsReader([tmp_path]) as reader:
        with pytest.raises(CorruptPartitionMetadataError, match=str(path)):
            reader.topic_id_of("t", 0)
        with pytest.raises(CorruptPartitionMetadataError, match=str(path)):
            reader.get_log("t", 0)


def test_an_old_dir_without_the_file_has_no_id_and_reads(tmp_path: Path) -> None:
    with LogManager([tmp_path]) as mgr:
        mgr.create_topic("t", 1)
        _append(mgr, "t", [b"a", b"b"])
    (tmp_path / "t-0" / PARTITION_METADATA_FILE).unlink()
    with LogManager([tmp_path]) as mgr:  # a writer opens it and does not add one
        mgr.add_partitions("t", 2)
        _append(mgr, "t", [b"c"])
    assert not (tmp_path / "t-1" / PARTITION_METADATA_FILE).exists()
    with LogDirsReader([tmp_path]) as reader:
        assert reader.topic_ids(["t", "nope"]) == {"t": None}
        log = reader.get_log("t", 0)
        assert log.topic_id is None and _values(log) == [b"a", b"b", b"c"]


def test_the_file_moves_with_a_deleted_partition(tmp_path: Path) -> None:
    with LogManager([tmp_path], default_topic_config={"file.delete.delay.ms": 60_000}) as mgr:
        mgr.create_topic("t", 1)
        tid = read_topic_id(tmp_path / "t-0")
        mgr.delete_topic("t")
        [deleted] = tmp_path.glob("t-0.*-delete")
        assert read_topic_id(deleted) == tid


@pytest.mark.parametrize("loaded_first", [True, False])
def test_a_reader_drops_a_partition_deleted_and_recreated_under_it(
        tmp_path: Path, loaded_first: bool) -> None:
    """A long-lived reader (a Spark worker's) keeps its entries across refreshes; one
    whose directory was replaced must answer for the new topic, never the old one."""
    config = {"file.delete.delay.ms": 60_000}  # the old directory stays, as in real life
    with LogManager([tmp_path], default_topic_config=config) as mgr:
        mgr.create_topic("t", 1)
        _append(mgr, "t", [b"old-0", b"old-1", b"old-2"])
        reader = LogDirsReader([tmp_path])
        old_id = reader.topic_id_of("t", 0)
        assert reader.high_watermarks() == {("t", 0): 3}
        if loaded_first:
            assert _values(reader.get_log("t", 0)) == [b"old-0", b"old-1", b"old-2"]
            reader.get_log("t", 0).close()  # segment files only, as a task does
        mgr.delete_topic("t")
        mgr.create_topic("t", 1)
        _append(mgr, "t", [b"new-0", b"new-1", b"new-2", b"new-3"])
    new_id = read_topic_id(tmp_path / "t-0")
    assert old_id is not None and new_id not in (None, old_id)
    with reader:
        assert reader.high_watermarks() == {("t", 0): 4}
        assert reader.topic_id_of("t", 0) == new_id
        log = reader.get_log("t", 0)
        assert log.topic_id == new_id
        assert _values(log) == [b"new-0", b"new-1", b"new-2", b"new-3"]


def test_reload_partition_sees_a_replacement_the_listing_missed(tmp_path: Path) -> None:
    """A task that finds another id in its plan looks again even when the log dir's
    mtime says nothing changed (a replacement within one timestamp tick)."""
    with LogManager([tmp_path], default_topic_config={"file.delete.delay.ms": 60_000}) as mgr:
        mgr.create_topic("t", 1)
        _append(mgr, "t", [b"old"])
        reader = LogDirsReader([tmp_path])
        log = reader.get_log("t", 0)
        old_id = log.topic_id
        mgr.delete_topic("t")
        mgr.create_topic("t", 1)
        _append(mgr, "t", [b"new"])
    with reader:
        reader.reload_partition("t", 0)
        log = reader.get_log("t", 0)
        assert log.topic_id not in (None, old_id)
        reader.high_watermarks()
        assert _values(log) == [b"new"]
        # gone altogether: the entry goes too
        for f in (tmp_path / "t-0").iterdir():
            f.unlink()
        (tmp_path / "t-0").rmdir()
        reader.reload_partition("t", 0)
        assert "t" not in reader.topics()


# -- a bucket's topics ------------------------------------------------------------------

def _topic_commit(version: int, spec: object) -> Commit:
    return Commit(version, "w", 0, "create_topic", topics={"t": spec})  # type: ignore[dict-item]


def test_a_bucket_topic_gets_an_id_that_alters_keep_and_a_recreate_changes(
        tmp_path: Path) -> None:
    mgr = BucketLogManager(f"memory://topic-ids-{uuid.uuid4().hex}")
    mgr.create_topic("t", 1)
    first = mgr.topic_id_of("t", 0)
    assert first is not None and valid_topic_id(first)
    mgr.alter_topic_config("t", {"retention.ms": 1000})
    mgr.add_partitions("t", 2)
    assert mgr.topic_ids(["t"]) == {"t": first} and mgr.topic_id_of("t", 1) == first
    mgr.delete_topic("t")
    mgr.create_topic("t", 1)
    assert mgr.topic_id_of("t", 0) not in (None, first)
    # the state written to the bucket holds it
    decoded = BucketState.decode(mgr.state.encode(), "snapshot", mgr.state.version)
    assert decoded.topics["t"].topic_id == mgr.topic_id_of("t", 0)
    # and an export (a Kafka log dir) has Kafka's file with it
    mgr.export(tmp_path / "export")
    assert read_topic_id(tmp_path / "export" / "t-0") == mgr.topic_id_of("t", 0)
    mgr.close()


def test_bucket_states_without_ids_and_ids_that_change_in_place() -> None:
    tid, other = new_topic_id(), new_topic_id()
    old = BucketState().apply(_topic_commit(0, TopicSpec(1)))  # written before topic ids
    assert old.topics["t"].topic_id is None
    assert "topic_id" not in json.loads(old.encode())["topics"]["t"]
    state = BucketState().apply(_topic_commit(0, TopicSpec(1, {}, tid)))
    # an older writer's alter names no id: the topic keeps its own
    assert state.apply(_topic_commit(1, TopicSpec(2))).topics["t"].topic_id == tid
    with pytest.raises(CorruptMetadataError, match="changes its id"):
        state.apply(_topic_commit(1, TopicSpec(1, {}, other)))
    with pytest.raises(CorruptMetadataError, match="invalid entry"):
        TopicSpec.from_json({"partitions": 1, "topic_id": "nope"}, "commit 3", "t")


def test_check_reports_a_damaged_file_and_ids_that_differ_and_never_fixes_them(
        tmp_path: Path) -> None:
    with LogManager([tmp_path]) as mgr:
        mgr.create_topic("t", 3)
        mgr.create_topic("u", 1)
    (tmp_path / "t-1" / PARTITION_METADATA_FILE).write_bytes(b"junk")
    (tmp_path / "u-0" / PARTITION_METADATA_FILE).replace(tmp_path / "t-2" / PARTITION_METADATA_FILE)
    with LogManager([tmp_path]) as mgr:
        problems = [p for p in mgr.check(fix=True) if p.kind == "topic-id"]
    assert [(p.path.parent.name if p.path.is_file() else p.path.name, p.fixed)
            for p in problems] == [("t-1", False), ("t-0", False)]
    assert "line 1" in problems[0].message and "partition(s) 2" in problems[1].message
    assert (tmp_path / "t-1" / PARTITION_METADATA_FILE).read_bytes() == b"junk"

