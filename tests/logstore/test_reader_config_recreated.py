"""A reader held open while another process deletes topic ``t`` and re-creates it with
other config overrides: once it has looked again (``topics()``, as a source's trigger
does), it reports the new topic's config, and the log it opens for the new topic (the
new topic id) is configured by the new overrides, never the deleted topic's. Local dirs
(the deleted directory kept, or collected so that its inode number can come back) and
buckets."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import decode_batches, encode_batches

_OLD = {"cleanup.policy": "compact", "retention.ms": 111_111, "segment.bytes": 2000}
_NEW = {"cleanup.policy": "delete", "retention.ms": 222_222, "segment.bytes": 3000}


def _append(mgr, prefix: str, n: int) -> None:
    for i in range(n):
        mgr.append(
            "t",
            0,
            encode_batches(pa.array([f"{prefix}{i}".encode()]), keys=pa.array([f"k{i}".encode()])),
        )


def _values(log) -> list[bytes]:
    out: list[bytes] = []
    for chunk in log.read_chunks(log.log_start_offset, log.high_watermark):
        out += decode_batches(bytes(chunk)).column("value").to_pylist()
    return out


def _assert_old(reader) -> None:
    config = reader.topic_config("t")
    assert config.compact and not config.delete
    assert (config.retention_ms, config.segment_bytes) == (111_111, 2000)
    assert reader.topic_overrides("t")["cleanup.policy"] == "compact"


def _assert_new(reader, new_id: str) -> None:
    assert reader.topics() == ["t"]
    config = reader.topic_config("t")
    assert config.delete and not config.compact
    assert (config.retention_ms, config.segment_bytes) == (222_222, 3000)
    assert reader.topic_overrides("t") == {k: str(v) for k, v in _NEW.items()}
    assert reader.topic_id_of("t", 0) == new_id
    reader.high_watermarks()
    log = reader.get_log("t", 0)
    # the log that serves the new topic's records carries the new topic's config
    assert log.topic_id == new_id
    assert (log.config.compact, log.config.retention_ms, log.config.segment_bytes) == (
        False,
        222_222,
        3000,
    )
    assert _values(log) == [b"new0", b"new1", b"new2"]


def _recreate(writer, between=lambda: None) -> str:
    old_id = writer.topic_ids(["t"])["t"]
    writer.delete_topic("t")
    between()
    writer.create_topic("t", 1, _NEW)
    _append(writer, "new", 3)
    new_id = writer.topic_ids(["t"])["t"]
    assert new_id is not None and new_id != old_id
    return new_id


@pytest.mark.parametrize("loaded", [False, True], ids=["config-only", "log-loaded"])
@pytest.mark.parametrize("collected", ["kept", "after", "before"])
def test_a_local_reader_reports_the_recreated_topics_config(
    tmp_path: Path, collected: str, loaded: bool
) -> None:
    """``collected``: the deleted directory is kept, removed after the re-creation, or
    removed before it (ext4 then gives the new directory the old one's inode number:
    only the topic id in ``partition.metadata`` tells the two apart)."""
    delay = 60_000 if collected == "kept" else 0
    writer = LogManager(
        [tmp_path],
        config={"log.cleaner.enable": False},
        default_topic_config={"file.delete.delay.ms": delay},
    )
    writer.create_topic("t", 1, _OLD)
    _append(writer, "old", 4)
    writer.checkpoint_high_watermarks()
    reader = LogManager([tmp_path], read_only=True)
    _assert_old(reader)
    if loaded:
        reader.high_watermarks()
        assert _values(reader.get_log("t", 0)) == [b"old0", b"old1", b"old2", b"old3"]

    def collect() -> None:
        writer.delete_logs(writer.clock.milliseconds() + 10**9)
        assert not [p for p in tmp_path.iterdir() if p.name.endswith("-delete")]

    new_id = _recreate(writer, collect if collected == "before" else lambda: None)
    writer.checkpoint_high_watermarks()
    if collected == "after":
        collect()
    _assert_new(reader, new_id)
    reader.close()
    writer.close()


@pytest.mark.parametrize("loaded", [False, True], ids=["config-only", "log-loaded"])
def test_a_bucket_reader_reports_the_recreated_topics_config(s3_uri: str, loaded: bool) -> None:
    writer = LogManager(s3_uri, config={"log.cleaner.enable": False})
    writer.create_topic("t", 1, _OLD)
    _append(writer, "old", 4)
    reader = LogManager(s3_uri, read_only=True)
    _assert_old(reader)
    if loaded:
        reader.high_watermarks()
        assert _values(reader.get_log("t", 0)) == [b"old0", b"old1", b"old2", b"old3"]
    new_id = _recreate(writer)
    _assert_new(reader, new_id)
    reader.close()
    writer.close()
