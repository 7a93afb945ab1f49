"""A segment is built from injected parts (``segment_parts``): the medium is decided once,
where the parts are assembled, and a bucket segment is the same ``LogSegment`` over
object-backed parts. Reads of a bucket and of a local log dir holding the same batches
answer the same."""

from __future__ import annotations

import ast
from pathlib import Path, PurePath

import pyarrow as pa
import pytest
from bucket_helpers import memory_uri

from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.bucket.bucket_segment import BucketSegment, ObjectRecords
from seglog.logstore.errors import CorruptMetadataError
from seglog.logstore.index.offset_index import OffsetIndex
from seglog.logstore.index.time_index import TimeIndex
from seglog.logstore.log.log_segment import LogSegment
from seglog.logstore.log.segment_parts import file_parts
from seglog.logstore.log.segment_records import FileRecords
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches
from seglog.logstore.storage.storage import LOCAL

ROOT = Path(__file__).resolve().parent.parent.parent
TS = 1_700_000_000_000
CONFIG = {"index.interval.bytes": "100", "segment.bytes": "3000"}


def batches(n: int, start: int) -> bytearray:
    return encode_batches(
        pa.array([b"value-%06d" % i for i in range(start, start + n)]),
        timestamps=pa.array([TS + 10 * i for i in range(start, start + n)], pa.int64()),
        max_batch_bytes=400,
    )


def _medium_checks(path: Path) -> list[str]:
    """``isinstance`` calls in ``path`` asking which storage or file type is at hand."""
    mediums = {
        "PosixStorage",
        "FileHandle",
        "RangeReader",
        "BytesRangeReader",
        "Storage",
        "BucketSegment",
        "ObjectRecords",
    }
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "isinstance"
            and len(node.args) == 2
        ):
            names = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}
            if names & mediums:
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_segment_and_index_modules_never_ask_which_medium_they_are_on():
    found = [
        c
        for name in (
            "log_segment",
            "segment_reads",
            "segment_records",
            "abstract_index",
            "txn_index",
            "lazy_index",
            "offset_index",
            "time_index",
        )
        for c in _medium_checks(next((ROOT / "logstore").rglob(f"{name}.py")))
    ]
    assert found == []


def _bucket(n_appends: int = 4) -> tuple[str, BucketLogManager]:
    uri = memory_uri()
    mgr = BucketLogManager(uri)
    mgr.create_topic("t", 1, CONFIG)
    for i in range(n_appends):
        mgr.append("t", 0, batches(40, 40 * i))
    return uri, mgr


def test_a_bucket_segment_is_a_log_segment_assembled_from_object_parts():
    uri, mgr = _bucket()
    log = mgr.get_log("t", 0)
    seg = log.segments[0]
    assert isinstance(seg, BucketSegment) and isinstance(seg, LogSegment)
    entry = mgr.state.partition("t", 0).segments[0]
    assert isinstance(seg.records, ObjectRecords) and seg.records.entry == entry
    # The indexes are the plain index classes over the object's (or inline) bytes.
    assert type(seg.offset_index) is OffsetIndex and type(seg.time_index) is TimeIndex
    assert seg.offset_index.entries > 0
    assert isinstance(seg.log_path, PurePath) and not isinstance(seg.log_path, Path)
    assert str(seg.log_path) == f"{uri}/{entry.key}.log"
    assert str(seg.offset_index.path) == f"{uri}/{entry.key}.index"
    assert seg.size == entry.size and seg.max_timestamp_so_far == entry.max_timestamp
    assert seg.txn_index.entries() == []  # a bucket holds no transactions
    assert seg.file_identity() == (str(seg.log_path), entry.size)
    found = seg.translate_offset(entry.next_offset - 3)
    assert found is not None and found.base_offset <= entry.next_offset - 3 <= found.last_offset
    with pytest.raises(Exception, match="not in a filesystem"):
        seg.delete()


def test_a_bucket_index_that_is_no_whole_number_of_entries_is_corrupt_metadata():
    uri, mgr = _bucket(1)
    entry = mgr.state.partition("t", 0).segments[0]
    assert entry.inline_index
    bad = BucketSegment(
        mgr.storage,
        entry.__class__(
            entry.key,
            entry.base_offset,
            entry.next_offset,
            entry.size,
            entry.max_timestamp,
            inline_index=entry.inline_index + b"\0",
            inline_timeindex=entry.inline_timeindex,
        ),
    )
    with pytest.raises(CorruptMetadataError, match=r"\.index has .* not a multiple of 8"):
        _ = bad.offset_index.entries


def test_a_local_segment_is_assembled_from_file_parts(tmp_path):
    parts = file_parts(LOCAL, tmp_path, 0, max_index_size=4096)
    seg = LogSegment(tmp_path, 0, parts=parts, index_interval_bytes=100)
    assert seg.records is parts.file and isinstance(parts.file, FileRecords)
    seg.append(batches(40, 0))
    seg.flush()
    again = LogSegment.open(tmp_path, 0, read_only=True)
    assert again.read(0, 1 << 20).records == seg.read(0, 1 << 20).records
    assert again.offset_index.all_entries() == seg.offset_index.all_entries()
    seg.close()
    again.close()


def test_reads_of_a_bucket_and_a_local_log_dir_are_identical(tmp_path):
    uri, bucket = _bucket()
    local = LogManager(tmp_path / "logs")
    local.create_topic("t", 1, CONFIG)
    for i in range(4):
        local.append("t", 0, batches(40, 40 * i))
    local.flush()
    local_log = local.get_log("t", 0)
    local_log.update_high_watermark(local_log.log_end_offset)
    bucket_log = bucket.get_log("t", 0)
    assert bucket_log.log_end_offset == local_log.log_end_offset == 160
    for start in (0, 1, 39, 40, 77, 120, 159):
        want = local_log.read(start, max_bytes=1 << 20)
        got = bucket_log.read(start, max_bytes=1 << 20)
        assert (got.records, got.first_offset, got.next_offset) == (
            want.records,
            want.first_offset,
            want.next_offset,
        )
        assert b"".join(bucket_log.read_chunks(start, 160, 700)) == b"".join(
            local_log.read_chunks(start, 160, 700)
        )
    for ts in (TS - 5, TS, TS + 5, TS + 395, TS + 1200, TS + 1595, TS + 1600):
        assert bucket_log.offset_for_timestamp(ts) == local_log.offset_for_timestamp(ts)
    local.close()
