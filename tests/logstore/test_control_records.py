"""Control records read in Python (``control_records``): transaction markers as a
coordinator writes them, a compressed control batch, and damage named by its batch."""

from __future__ import annotations

import pyarrow as pa
import pytest

from seglog.logstore.errors import CorruptRecordError
from seglog.logstore.records.control_records import control_records
from seglog.logstore.records.record_codec import (
    CompressionType,
    ControlType,
    encode_batches,
    encode_control_batch,
)
from seglog.logstore.records.record_format import (
    CONTROL_KEY,
    END_TXN_MARKER_VALUE,
    RECORDS_OFFSET,
    read_batch_header,
    restamp_crc,
)


def test_a_marker_gives_its_type_offset_and_coordinator_epoch():
    buf = encode_control_batch(ControlType.ABORT, producer_id=7, producer_epoch=1,
                               base_offset=41, timestamp_ms=1_000, coordinator_epoch=9)
    (record,) = control_records(buf, read_batch_header(buf))
    assert (record.offset, record.timestamp, record.control_type,
            record.coordinator_epoch) == (41, 1_000, ControlType.ABORT, 9)


def test_a_compressed_control_batch_is_decompressed():
    keys = pa.array([CONTROL_KEY.pack(0, 2), CONTROL_KEY.pack(0, 1)], pa.binary())
    values = pa.array([b"leader", END_TXN_MARKER_VALUE.pack(0, 3)], pa.binary())
    buf = encode_batches(values, keys=keys, timestamps=pa.array([5, 6]), base_offset=10,
                         compression=CompressionType.ZSTD, is_control=True)
    h = read_batch_header(buf)
    assert h.compression == CompressionType.ZSTD
    got = [(r.offset, r.control_type, r.value, r.coordinator_epoch)
           for r in control_records(buf, h)]
    assert got == [(10, 2, b"leader", -1), (11, 1, END_TXN_MARKER_VALUE.pack(0, 3), 3)]


def test_a_record_running_past_its_batch_is_named():
    buf = encode_control_batch(ControlType.COMMIT, producer_id=7, producer_epoch=1,
                               base_offset=3)
    buf[RECORDS_OFFSET] = 0x7E  # the record's length varint: 63 bytes, past the batch
    restamp_crc(buf, 0, len(buf))
    with pytest.raises(CorruptRecordError, match=r"control batch at position 0 \(offsets "
                       r"3\.\.3\): malformed control record: a record of 63 bytes"):
        list(control_records(buf, read_batch_header(buf)))
