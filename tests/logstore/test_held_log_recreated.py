"""A log held by a library reader (``get_log``) while another manager deletes its topic,
re-creates it under the same name and appends: the held log never serves the new
topic's records under the offsets it knew. With ``fail.on.data.loss=true`` (the default)
every later call raises ``TopicIdChangedError`` naming the topic and both ids; with
``false`` it warns and follows the new topic from its log start. Local dirs (also after
the deleted directory was collected) and buckets."""

from __future__ import annotations

import logging
from pathlib import Path

import pyarrow as pa
import pytest

from seglog.logstore.errors import DataLossError, TopicIdChangedError
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import decode_batches, encode_batches


def _values(log, start: int = 0) -> list[tuple[int, bytes]]:
    out = []
    for chunk in log.read_chunks(start, log.high_watermark):
        t = decode_batches(bytes(chunk), start_offset=start)
        out += list(zip(t.column("offset").to_pylist(), t.column("value").to_pylist(), strict=True))
    return out


def _append(mgr, prefix: str, n: int) -> None:
    for i in range(n):
        mgr.append("t", 0, encode_batches(pa.array([f"{prefix}{i}".encode()])))


def _recreate(writer, n: int = 6) -> None:
    writer.delete_topic("t")
    writer.create_topic("t", 1, {"segment.bytes": 200})
    _append(writer, "new", n)


def _raises_naming_both_ids(call, old_id: str, new_id: str) -> None:
    with pytest.raises(TopicIdChangedError) as e:
        call()
    assert isinstance(e.value, DataLossError)
    assert (e.value.topic, e.value.partition) == ("t", 0)
    assert (e.value.old_id, e.value.new_id) == (old_id, new_id)
    assert "t-0" in str(e.value) and old_id in str(e.value) and new_id in str(e.value)


# -- local dirs ------------------------------------------------------------------------


@pytest.fixture
def local(tmp_path: Path):
    d = tmp_path / "logs"
    writer = LogManager(
        [d], config={"log.cleaner.enable": False}, default_topic_config={"file.delete.delay.ms": 0}
    )
    writer.create_topic("t", 1, {"segment.bytes": 200})
    _append(writer, "old", 6)
    writer.checkpoint_high_watermarks()
    yield d, writer
    writer.close()


@pytest.mark.parametrize("collected", [False, True])
def test_a_held_local_log_raises_after_its_topic_was_recreated(local, collected):
    d, writer = local
    reader = LogManager([d], read_only=True)
    log = reader.get_log("t", 0)
    assert [v for _, v in _values(log)] == [f"old{i}".encode() for i in range(6)]
    old_id = log.topic_id
    log.close()  # its segments are opened again from the path by the next read
    _recreate(writer)
    writer.checkpoint_high_watermarks()
    if collected:
        writer.delete_logs(writer.clock.milliseconds() + 10**9)
        assert not [p for p in d.iterdir() if p.name.endswith("-delete")]
    new_id = writer.topic_ids(["t"])["t"]
    assert new_id is not None and new_id != old_id
    _raises_naming_both_ids(log.refresh, old_id, new_id)
    _raises_naming_both_ids(lambda: log.read(0), old_id, new_id)
    _raises_naming_both_ids(lambda: _values(log), old_id, new_id)
    # the manager's own answer is the new topic's log
    reader.high_watermarks()
    fresh = reader.get_log("t", 0)
    assert fresh.topic_id == new_id
    assert [v for _, v in _values(fresh)] == [f"new{i}".encode() for i in range(6)]
    reader.close()


def test_a_held_local_log_warns_and_follows_the_new_topic(local, caplog):
    d, writer = local
    reader = LogManager([d], read_only=True, config={"fail.on.data.loss": "false"})
    log = reader.get_log("t", 0)
    old_id = log.topic_id
    assert len(_values(log)) == 6
    _recreate(writer, n=3)
    writer.checkpoint_high_watermarks()
    writer.delete_logs(writer.clock.milliseconds() + 10**9)
    new_id = writer.topic_ids(["t"])["t"]
    with caplog.at_level(logging.WARNING):
        assert log.refresh() is True
    [warning] = [r.getMessage() for r in caplog.records if "re-created" in r.getMessage()]
    assert old_id in warning and new_id in warning and "t-0" in warning
    assert log.topic_id == new_id
    assert log.high_watermark == 3
    assert [v for _, v in _values(log)] == [b"new0", b"new1", b"new2"]
    reader.close()


# -- buckets ---------------------------------------------------------------------------


@pytest.fixture
def bucket(s3_uri: str):
    writer = LogManager(s3_uri)
    writer.create_topic("t", 1, {"segment.bytes": 200})
    _append(writer, "old", 6)
    yield s3_uri, writer
    writer.close()


def test_a_held_bucket_log_raises_after_its_topic_was_recreated(bucket):
    uri, writer = bucket
    reader = LogManager(uri, read_only=True)
    log = reader.get_log("t", 0)
    assert [v for _, v in _values(log)] == [f"old{i}".encode() for i in range(6)]
    old_id = log.topic_id
    _recreate(writer)
    new_id = writer.topic_ids(["t"])["t"]
    assert new_id is not None and new_id != old_id
    _raises_naming_both_ids(log.refresh, old_id, new_id)
    _raises_naming_both_ids(lambda: log.refresh(), old_id, new_id)  # and again
    # the manager refreshes without an error and answers with the new topic's log
    reader.refresh()
    fresh = reader.get_log("t", 0)
    assert fresh is not log and fresh.topic_id == new_id
    assert [v for _, v in _values(fresh)] == [f"new{i}".encode() for i in range(6)]
    _raises_naming_both_ids(lambda: _values(log), old_id, new_id)
    reader.close()


def test_a_held_bucket_log_warns_and_follows_the_new_topic(bucket, caplog):
    uri, writer = bucket
    reader = LogManager(uri, read_only=True, config={"fail.on.data.loss": "false"})
    log = reader.get_log("t", 0)
    old_id = log.topic_id
    _recreate(writer, n=3)
    new_id = writer.topic_ids(["t"])["t"]
    with caplog.at_level(logging.WARNING):
        assert log.refresh() is True
    [warning] = [r.getMessage() for r in caplog.records if "re-created" in r.getMessage()]
    assert old_id in warning and new_id in warning
    assert log.topic_id == new_id and log.high_watermark == 3
    assert [v for _, v in _values(log)] == [b"new0", b"new1", b"new2"]
    reader.close()
