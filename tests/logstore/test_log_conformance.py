"""One log behaviour over every backend: a local log dir, memory:// and two S3 servers on
127.0.0.1 (moto, and SeaweedFS where its wheel installs). Each test runs the same
create / append / read / timestamp seek / read_committed / high-watermark / restart
steps through ``LogManager`` and the reader ``LogManager(dir, read_only=True)``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from bucket_helpers import memory_uri

from seglog.logstore.errors import OffsetOutOfRangeError, TopicExistsError
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import decode_batches, encode_batches

TS = 1_700_000_000_000


@pytest.fixture(params=["local", "memory", "s3", "seaweedfs"])
def log_dir(request, tmp_path: Path) -> str:
    if request.param == "local":
        return str(tmp_path / "logs")
    if request.param == "memory":
        return memory_uri()
    return request.getfixturevalue("s3_uri" if request.param == "s3" else "seaweed_uri")


def batches(n: int, start: int = 0) -> bytearray:
    return encode_batches(pa.array([b"v%d" % i for i in range(start, start + n)]),
                          keys=pa.array([b"k%d" % (i % 7) for i in range(start, start + n)]),
                          timestamps=pa.array([TS + 10 * i for i in range(start, start + n)],
                                              pa.int64()),
                          max_batch_bytes=120)


def publish(mgr) -> None:
    """What a writer does to make its appends visible to other processes (local dirs
    publish the high-watermark checkpoint; a bucket commit already did)."""
    if hasattr(mgr, "checkpoint_high_watermarks"):
        mgr.checkpoint_high_watermarks()


def read_all(log, start: int, end: int, **kw) -> list[tuple[int, bytes]]:
    rows = []
    for chunk in log.read_chunks(start, end, 256, **kw):
        t = decode_batches(bytes(chunk), start_offset=start, end_offset=end)
        rows += list(zip(t.column("offset").to_pylist(), t.column("value").to_pylist(),
                         strict=True))
    return rows


def with_writer(log_dir: str, fn: Callable[[object], None]) -> None:
    with LogManager([log_dir]) as mgr:
        fn(mgr)
        publish(mgr)


def test_create_append_and_read_back(log_dir: str):
    def write(mgr) -> None:
        mgr.create_topic("t", 2, {"segment.bytes": 1024})
        assert mgr.append("t", 0, batches(40)).last_offset == 39
        assert mgr.append("t", 0, batches(25, 40)).first_offset == 40
        mgr.append("t", 1, batches(3))
        with pytest.raises(TopicExistsError):
            mgr.create_topic("t", 1)

    with_writer(log_dir, write)
    reader = LogManager([log_dir], read_only=True)
    assert reader.topics() == ["t"] and reader.partitions("t") == [0, 1]
    assert reader.high_watermarks() == {("t", 0): 65, ("t", 1): 3}
    assert reader.log_start_offsets() == {("t", 0): 0, ("t", 1): 0}
    log = reader.get_log("t", 0)
    assert log.num_segments > 1
    assert read_all(log, 0, 65) == [(i, b"v%d" % i) for i in range(65)]
    assert read_all(log, 33, 47) == [(i, b"v%d" % i) for i in range(33, 47)]
    fetched = log.read(50, max_bytes=1)
    first = decode_batches(fetched.records, start_offset=50).column("offset")[0].as_py()
    assert first == 50 and fetched.next_offset > 50 and fetched.high_watermark == 65
    assert log.read(65).empty
    with pytest.raises(OffsetOutOfRangeError):
        log.read(66)
    reader.close()


def test_timestamp_seek_and_read_committed(log_dir: str):
    with_writer(log_dir, lambda mgr: (mgr.create_topic("t", 1, {"segment.bytes": 700}),
                                      mgr.append("t", 0, batches(30)),
                                      mgr.append("t", 0, batches(30, 30))))
    reader = LogManager([log_dir], read_only=True)
    log = reader.get_log("t", 0)
    assert log.offset_for_timestamp(TS) == 0
    assert log.offset_for_timestamp(TS + 10 * 37 - 5) == 37
    assert log.offset_for_timestamp(TS + 10 * 60) is None
    assert log.last_stable_offset == 60
    committed = read_all(log, 0, 60, isolation_level="read_committed")
    assert committed == read_all(log, 0, 60)
    fetched = log.read(10, isolation_level="read_committed")
    assert fetched.last_stable_offset == 60 and fetched.aborted_transactions == ()
    reader.close()


def test_a_reader_sees_new_appends_and_a_restarted_writer_continues(log_dir: str):
    with_writer(log_dir, lambda mgr: (mgr.create_topic("t", 1), mgr.append("t", 0, batches(5))))
    reader = LogManager([log_dir], read_only=True)
    assert reader.high_watermarks() == {("t", 0): 5}
    log = reader.get_log("t", 0)
    with_writer(log_dir, lambda mgr: mgr.append("t", 0, batches(4, 5)))  # a restart
    assert reader.high_watermarks() == {("t", 0): 9}
    assert read_all(log, 0, 9) == [(i, b"v%d" % i) for i in range(9)]
    with LogManager([log_dir]) as mgr:
        assert mgr.high_watermarks() == {("t", 0): 9}
        assert mgr.append("t", 0, batches(1, 9)).first_offset == 9
    reader.close()


def test_topic_configs_and_deletion(log_dir: str):
    def write(mgr) -> None:
        mgr.create_topic("t", 1, {"retention.ms": 60_000})
        mgr.create_topic("u", 1)
        assert mgr.alter_topic_config("t", {"segment.bytes": 2048}) == {
            "retention.ms": "60000", "segment.bytes": "2048"}
        mgr.add_partitions("u", 2)
        mgr.delete_topic("t")

    with_writer(log_dir, write)
    reader = LogManager([log_dir], read_only=True)
    assert reader.topics() == ["u"] and reader.partitions("u") == [0, 1]
    reader.close()
