"""The source's task read (``source_read.read_range``) over a bucket and a local log dir
when the log changed since planning: a deleted topic found at any step, a log that no
longer reaches the planned range. Both are data loss (``failOnDataLoss``), never an
unrelated error nor a silently short range."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from seglog.datasource.schema import arrow_schema
from seglog.logstore.bucket.bucket_log import BucketLog
from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.bucket.bucket_segment import object_keys
from seglog.logstore.errors import CorruptRecordError, DataLossError
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches
from seglog.streaming.read_planning import ReadRange
from seglog.streaming.source_read import read_range

SCHEMA = arrow_schema(False)


def memory_uri() -> str:
    return f"memory://source-read-{uuid.uuid4().hex}"


def values(prefix: str, n: int) -> bytearray:
    return encode_batches(pa.array([f"{prefix}{i}".encode() for i in range(n)]),
                          max_batch_bytes=80)


def offsets(r: ReadRange) -> list[int]:
    return [o for b in read_range(r, SCHEMA) for o in b.column("offset").to_pylist()]


@pytest.mark.parametrize("end", [10, 12], ids=["within-cached-hw", "beyond-cached-hw"])
@pytest.mark.parametrize("fail", [True, False])
def test_a_topic_deleted_under_a_workers_cached_log_is_data_loss(end, fail, caplog):
    """The worker's log was cached by an earlier task; the topic is then deleted and its
    objects collected. Found by the read's retry (a vanished object, range within what
    the cache knew) or by the refresh (range beyond it), never by get_log."""
    uri = memory_uri()
    writer = BucketLogManager(uri)
    writer.create_topic("t", 1)
    writer.append("t", 0, values("a", 10))
    assert offsets(ReadRange((uri,), "t", 0, 0, 5)) == [0, 1, 2, 3, 4]
    segments = writer.state.partitions["t-0"].segments
    writer.delete_topic("t")
    for s in segments:
        for key in object_keys(s):
            writer.storage.delete(key)
    r = ReadRange((uri,), "t", 0, 5, end, fail_on_data_loss=fail)
    message = rf"topic 't' partition 0 disappeared before offsets \[5, {end}\) were read"
    if fail:
        with pytest.raises(DataLossError, match=message):
            offsets(r)
    else:
        with caplog.at_level(logging.WARNING):
            assert offsets(r) == []
        assert any("disappeared before offsets [5, " in m for m in caplog.messages)


def recreated_with_4_records() -> str:
    """A bucket whose t-0 held 10 records, deleted and recreated with 4."""
    uri = memory_uri()
    writer = BucketLogManager(uri)
    writer.create_topic("t", 1)
    writer.append("t", 0, values("old", 10))
    writer.delete_topic("t")
    writer.create_topic("t", 1)
    writer.append("t", 0, values("new", 4))
    return uri


def local_dir_with_4_records(tmp_path: Path) -> str:
    with LogManager([str(tmp_path)]) as mgr:
        mgr.create_topic("t", 1)
        mgr.append("t", 0, values("new", 4))
    return str(tmp_path)


@pytest.fixture(params=["bucket", "local"])
def log_dir(request, tmp_path: Path) -> str:
    return (recreated_with_4_records() if request.param == "bucket"
            else local_dir_with_4_records(tmp_path))


def test_a_log_that_ends_before_the_planned_range_fails_the_task(log_dir):
    with pytest.raises(DataLossError, match=r"offsets \[4, 10\) were planned but the log "
                                            r"ends at 4"):
        offsets(ReadRange((log_dir,), "t", 0, 0, 10))


def test_a_log_that_ends_before_the_planned_range_warns_and_reads_what_exists(
        log_dir, caplog):
    with caplog.at_level(logging.WARNING):
        got = offsets(ReadRange((log_dir,), "t", 0, 0, 10, fail_on_data_loss=False))
    assert got == [0, 1, 2, 3]
    assert any("offsets [4, 10) were planned" in m for m in caplog.messages)


@pytest.mark.parametrize("fail", [True, False])
def test_a_start_beyond_the_log_end_is_data_loss_not_out_of_range(log_dir, fail, caplog):
    r = ReadRange((log_dir,), "t", 0, 6, 10, fail_on_data_loss=fail)
    if fail:
        with pytest.raises(DataLossError, match=r"offsets \[6, 10\) were planned"):
            offsets(r)
    else:
        with caplog.at_level(logging.WARNING):
            assert offsets(r) == []
        assert any("offsets [6, 10) were planned" in m for m in caplog.messages)


@pytest.mark.parametrize("cut", [-1, 1], ids=["shorter", "longer"])
def test_an_object_of_another_size_than_committed_fails_even_without_fail_on_data_loss(cut):
    """Damage, not data loss: the task fails naming the object, whatever failOnDataLoss
    says, rather than skip the segment's offsets."""
    uri = memory_uri()
    writer = BucketLogManager(uri)
    writer.create_topic("t", 1)
    for prefix in "abc":
        writer.append("t", 0, values(prefix, 10))
    seg = writer.state.partitions["t-0"].segments[1]
    key = seg.key + ".log"
    data = bytes(writer.storage.read(key))
    damaged = data[:len(data) // 2] if cut < 0 else data + b"\0"
    writer.storage.write_atomic(key, damaged)
    message = (rf"{uri}/{key} .*has {len(damaged)} bytes, but the commit that added it "
               rf"says {len(data)}")
    with pytest.raises(CorruptRecordError, match=message):
        offsets(ReadRange((uri,), "t", 0, 0, 30, fail_on_data_loss=False))


def test_a_referenced_object_missing_after_a_refresh_stays_data_loss(caplog):
    uri = memory_uri()
    writer = BucketLogManager(uri)
    writer.create_topic("t", 1)
    for prefix in "abc":
        writer.append("t", 0, values(prefix, 10))
    writer.storage.delete(writer.state.partitions["t-0"].segments[1].key + ".log")
    with caplog.at_level(logging.WARNING):
        got = offsets(ReadRange((uri,), "t", 0, 0, 30, fail_on_data_loss=False))
    assert got == list(range(10)) + list(range(20, 30))
    assert any("offsets [10, 20) cannot be read" in m and "is missing" in m
               for m in caplog.messages)


def test_a_task_checks_each_batchs_crc_once_and_still_names_a_damaged_object(monkeypatch):
    """The task decodes with ``verify_crc``: the bucket log does not check the same
    CRCs first (each batch's CRC is computed once), and a batch whose records were
    flipped still fails the task, naming the partition and the object."""
    uri = memory_uri()
    writer = BucketLogManager(uri)
    writer.create_topic("t", 1)
    for prefix in "abc":
        writer.append("t", 0, values(prefix, 10))
    checked: list[int] = []
    real = BucketLog._check_crcs

    def counting(self: BucketLog, buf: bytes | memoryview) -> None:
        checked.append(len(buf))
        real(self, buf)

    monkeypatch.setattr(BucketLog, "_check_crcs", counting)
    assert offsets(ReadRange((uri,), "t", 0, 0, 30)) == list(range(30))
    assert checked == []
    # The log's own check stays for callers that do not decode (``read``).
    assert writer.get_log("t", 0).read(0).records and checked
    seg = writer.state.partitions["t-0"].segments[1]
    key = seg.key + ".log"
    data = bytearray(writer.storage.read(key))
    data[-3] ^= 0x40  # inside the last batch's records: only the CRC knows
    writer.storage.write_atomic(key, bytes(data))
    with pytest.raises(CorruptRecordError, match="CRC") as info:
        offsets(ReadRange((uri,), "t", 0, 0, 30))
    assert "topic 't' partition 0" in str(info.value) and f"{uri}/{key}" in str(info.value)
