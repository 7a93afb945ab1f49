"""Objects of a bucket that are not what its commits say, over memory:// and a moto S3
server: a ``.log`` shorter or longer than its entry, a batch whose CRC fails, a missing
``.log`` or index object, a damaged commit or snapshot. Each is an error naming the URI,
the key and the offsets (``MissingDataError`` where data is missing, which
``failOnDataLoss`` governs as for a local segment file; ``CorruptRecordError`` where the
bytes are wrong, never skipped); nothing damaged is returned as data."""

from __future__ import annotations

import io
import logging
import uuid

import pyarrow as pa
import pytest

from seglog.cli import main as seglog_main
from seglog.logstore.bucket import bucket_log
from seglog.logstore.bucket.bucket_state import SNAPSHOT_EVERY
from seglog.logstore.errors import (
    CorruptMetadataError,
    CorruptRecordError,
    KafkaStorageError,
    MissingDataError,
)
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import decode_batches, encode_batches
from seglog.logstore.records.record_format import iter_batch_headers, set_base_offset
from seglog.logstore.storage.object_storage import ObjectStorage

TS = 1_700_000_000_000


@pytest.fixture(params=("memory", "s3"))
def uri(request) -> str:
    if request.param == "memory":
        return f"memory://bucket-corruption-{uuid.uuid4().hex}"
    return request.getfixturevalue("s3_uri")


def batches(n: int, start: int = 0) -> bytearray:
    return encode_batches(
        pa.array([b"value-%06d" % i for i in range(start, start + n)]),
        timestamps=pa.array([TS + i for i in range(start, start + n)], pa.int64()),
        max_batch_bytes=200,
    )


def three_segments(uri: str) -> tuple[LogManager, list]:
    """Partition t-0 with segments [0, 20), [20, 40), [40, 60), each of several batches
    (an offset index object each, not inline: the objects are what these tests damage)."""
    mgr = LogManager(uri)
    mgr.inline_index_bytes = 0
    mgr.create_topic("t", 1, {"index.interval.bytes": "100"})
    for i in range(3):
        mgr.append("t", 0, batches(20, 20 * i))
    segments = list(mgr.state.partition("t", 0).segments)
    assert [(s.base_offset, s.next_offset) for s in segments] == [(0, 20), (20, 40), (40, 60)]
    assert all(s.index_bytes for s in segments)
    return mgr, segments


def read_all(mgr: LogManager, start: int = 0, end: int | None = None) -> list[int]:
    log = mgr.get_log("t", 0)
    end = log.high_watermark if end is None else end
    return [
        o
        for c in log.read_chunks(start, end)
        for o in decode_batches(bytes(c), start_offset=start).column("offset").to_pylist()
    ]


def test_a_log_object_shorter_than_its_entry_is_corruption(uri):
    """Not data loss: objects are written whole and never rewritten, so a short one is
    damaged or replaced; failOnDataLoss=false must not skip it (its readable half would
    pass for the data)."""
    mgr, segs = three_segments(uri)
    storage = ObjectStorage(uri)
    key = segs[1].key + ".log"
    size = len(storage.read(key))
    storage.write_atomic(key, storage.read(key)[:-7])  # cut short: the last batch is partial
    reader = LogManager(uri, read_only=True)
    with pytest.raises(CorruptRecordError) as e:
        read_all(reader)
    message = str(e.value)
    assert f"{uri}/{key}" in message and f"key {key} of {uri}" in message
    assert f"has {size - 7} bytes, but the commit that added it says {size}" in message
    assert "offsets [20, 40) of t-0" in message
    assert not isinstance(e.value, MissingDataError)  # never skipped
    assert read_all(reader, 40) == list(range(40, 60))  # the next segment is sound
    with pytest.raises(CorruptRecordError, match=key):
        reader.get_log("t", 0).read(25)


def test_a_log_object_longer_than_its_entry_is_corruption(uri):
    mgr, segs = three_segments(uri)
    storage = ObjectStorage(uri)
    key = segs[2].key + ".log"
    storage.write_atomic(key, storage.read(key) + bytes(batches(1, 60)))
    reader = LogManager(uri, read_only=True)
    with pytest.raises(CorruptRecordError) as e:
        read_all(reader)
    assert f"{uri}/{key}" in str(e.value) and "offsets [40, 60) of t-0" in str(e.value)
    assert not isinstance(e.value, MissingDataError)  # never skipped
    assert read_all(reader, 0, 40) == list(range(40))  # the segments before it are sound
    with pytest.raises(CorruptRecordError, match="not the one committed"):
        reader.get_log("t", 0).read(45)


def test_a_batch_whose_crc_fails_is_never_returned(uri):
    mgr, segs = three_segments(uri)
    storage = ObjectStorage(uri)
    key = segs[1].key + ".log"
    data = bytearray(storage.read(key))
    data[-3] ^= 0x40  # inside the last batch's records: same size, only the CRC knows
    storage.write_atomic(key, data)
    reader = LogManager(uri, read_only=True)
    log = reader.get_log("t", 0)
    seen: list[int] = []
    with pytest.raises(CorruptRecordError) as e:
        for chunk in log.read_chunks(0, log.high_watermark):
            seen += decode_batches(bytes(chunk), start_offset=0).column("offset").to_pylist()
    assert f"{uri}/{key}" in str(e.value) and "CRC" in str(e.value)
    assert "t-0" in str(e.value) and "..39 has CRC" in str(e.value)
    assert seen == list(range(20))  # the damaged segment gave nothing
    with pytest.raises(CorruptRecordError, match=key):
        log.read(20, max_bytes=1 << 20)


@pytest.mark.parametrize("table_rows", [2, 4096])  # 2: the check walks several tables
@pytest.mark.parametrize("which", [0, 1, -1])
def test_a_damaged_batch_anywhere_in_a_chunk_is_found(uri, monkeypatch, table_rows, which):
    monkeypatch.setattr(bucket_log, "_CRC_TABLE_ROWS", table_rows)
    mgr, segs = three_segments(uri)
    storage = ObjectStorage(uri)
    key = segs[1].key + ".log"
    data = bytearray(storage.read(key))
    headers = list(iter_batch_headers(data))
    assert len(headers) >= 3
    bad = headers[which]
    data[bad.end_position - 2] ^= 0x01  # inside its records: only the CRC knows
    storage.write_atomic(key, data)
    log = LogManager(uri, read_only=True).get_log("t", 0)
    seen: list[int] = []
    with pytest.raises(CorruptRecordError) as e:
        for chunk in log.read_chunks(0, log.high_watermark):
            seen += decode_batches(bytes(chunk), start_offset=0).column("offset").to_pylist()
    assert f"{uri}/{key}" in str(e.value)
    assert f"offsets {bad.base_offset}..{bad.last_offset} has CRC" in str(e.value)
    assert seen == list(range(20))  # nothing of the damaged segment


def test_a_missing_log_object_is_missing_data_after_one_refresh(uri):
    mgr, segs = three_segments(uri)
    storage = ObjectStorage(uri)
    key = segs[0].key + ".log"
    storage.delete(key)
    reader = LogManager(uri, read_only=True)
    with pytest.raises(MissingDataError) as e:
        read_all(reader)
    assert isinstance(e.value, KafkaStorageError)
    assert f"{uri}/{key} is missing" in str(e.value)
    assert "offsets [0, 20) of t-0" in str(e.value) and (e.value.start, e.value.end) == (0, 20)
    assert read_all(reader, 20) == list(range(20, 60))


def test_a_missing_or_wrong_sized_index_object_reads_by_scanning(uri, caplog):
    mgr, segs = three_segments(uri)
    storage = ObjectStorage(uri)
    missing, cut = segs[1].key + ".index", segs[2].key + ".index"
    storage.delete(missing)
    storage.write_atomic(cut, storage.read(cut)[:-8])
    reader = LogManager(uri, read_only=True)
    log = reader.get_log("t", 0)
    with caplog.at_level(logging.WARNING, logger="seglog.logstore.bucket.bucket_segment"):
        assert log.read(35).first_offset <= 35 < log.read(35).next_offset
        assert log.read(55).first_offset <= 55 < log.read(55).next_offset
    text = caplog.text
    assert f"{uri}/{missing} is missing" in text
    assert f"{uri}/{cut} has" in text and "offsets [40, 60)" in text
    assert read_all(reader) == list(range(60))


def test_a_damaged_commit_is_an_error_naming_it(uri):
    mgr, _segs = three_segments(uri)
    log = mgr.commits.topic_log("t")  # the topic's own commit log
    version = log.state.version
    ObjectStorage(uri).write_atomic(
        log.layout.commit_key(version + 1), b'{"format": 1, "version": '
    )
    with pytest.raises(
        CorruptMetadataError, match=rf"{uri}/_seglog/topics/[^/]+/log/0*{version + 1}\.json"
    ):
        LogManager(uri, read_only=True)
    with pytest.raises(CorruptMetadataError, match="not valid JSON"):
        mgr.refresh()
    assert log.state.version == version  # nothing of it was taken


def test_a_damaged_snapshot_is_skipped_while_the_commits_it_sums_up_exist(uri, caplog):
    mgr = LogManager(uri)
    mgr.create_topic("t", 1)
    for i in range(SNAPSHOT_EVERY + 2):
        mgr.append("t", 0, batches(2, 2 * i))
    mgr.commits.flush_snapshots()  # written off the commits' path
    storage = ObjectStorage(uri)
    layout = mgr.commits.topic_log("t").layout  # the topic's own commit log
    snapshot = layout.snapshot_key(SNAPSHOT_EVERY)
    assert storage.read(layout.hint_key) == b'{"version": %d}' % SNAPSHOT_EVERY
    storage.write_atomic(snapshot, storage.read(snapshot)[:-30])
    with caplog.at_level(logging.WARNING, logger="seglog.logstore.bucket.bucket_commit_reader"):
        reader = LogManager(uri, read_only=True)
    assert f"{uri}/{snapshot}" in caplog.text
    # Folded from version 0 instead.
    assert reader.state.partitions == mgr.state.partitions
    assert reader.state.topics == mgr.state.topics
    assert read_all(reader) == list(range(2 * (SNAPSHOT_EVERY + 2)))
    # With a commit it stood for gone as well, nothing is durable to rebuild from.
    storage.delete(layout.commit_key(SNAPSHOT_EVERY - 3))
    with pytest.raises(CorruptMetadataError) as e:
        LogManager(uri, read_only=True)
    assert f"commit {SNAPSHOT_EVERY - 3} is missing" in str(e.value)
    assert f"{uri}/{snapshot}" in str(e.value)


def same_size_batch(size: int, first_offset: int, records: int) -> bytearray:
    """One batch of ``records`` records from ``first_offset`` whose bytes are exactly
    ``size`` (its first values padded): what stands in for a batch of another count."""
    for pad in range(3):
        for width in range(size):
            values = [b"x" * width, b"y" * pad] + [b""] * (records - 2)
            data = encode_batches(
                pa.array(values),
                timestamps=pa.array([TS + first_offset + i for i in range(records)], pa.int64()),
            )
            if len(data) == size:
                set_base_offset(data, 0, first_offset)
                return data
            if len(data) > size:
                break
    raise AssertionError(f"no batch of {records} records has {size} bytes")


@pytest.mark.parametrize("records", [-1, +1])
def test_check_names_a_last_segment_whose_batches_miss_its_commits_log_end(uri, records, capsys):
    """The last ``.log`` has the size its commit entry says, but its batches end one
    offset before the entry's ``next_offset`` (the high watermark readers were told) or
    run one past it: ``check`` reports it as the local deep check reports a log end that
    misses the high watermark, naming the object and the offsets."""
    mgr, segs = three_segments(uri)
    clean, _ = mgr.check_objects()
    assert [f for f in clean if f.problem] == []  # healthy: no problem, no log end finding
    storage = ObjectStorage(uri)
    key = segs[2].key + ".log"
    data = bytearray(storage.read(key))
    last = list(iter_batch_headers(data))[-1]
    count = last.last_offset - last.base_offset + 1 + records
    data[last.position :] = same_size_batch(last.size, last.base_offset, count)
    storage.write_atomic(key, data)
    findings, _ = LogManager(uri, read_only=True).check_objects()
    problems = [(f.where, f.message) for f in findings if f.problem]
    if records < 0:
        expected = (
            f"{uri}/{key}",
            f"t-0: offsets [59, 60) are missing: the batches of "
            f"{uri}/{key} end at offset 59, below the high watermark 60",
        )
    else:
        expected = (
            f"{uri}/{key}",
            f"{uri}/{key} holds offsets up to 60, but the commit "
            f"that added it says the segment ends before 60",
        )
    assert any(w == expected[0] and expected[1] in m for w, m in problems), problems
    capsys.readouterr()
    out = io.StringIO()
    assert seglog_main(["check", uri], out) == 1
    assert expected[1] in out.getvalue(), out.getvalue()
