from __future__ import annotations

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from seglog.logstore.errors import CorruptRecordError
from seglog.logstore.records.record_format import (
    compute_crc,
    iter_batch_headers,
    read_batch_header,
    set_base_offset,
    stamp_log_append_time,
    verify_crc,
)


def _kafka_python_batch(n: int, base_ts: int = 1000) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                  producer_id=7, producer_epoch=1, base_sequence=5,
                                  batch_size=1 << 20)
    for i in range(n):
        b.append(i, timestamp=base_ts + i, key=b"k%d" % i, value=b"v" * i, headers=[])
    return bytes(b.build())


def test_v2_header_fields_match_kafka_python():
    buf = _kafka_python_batch(3)
    h = read_batch_header(buf)
    assert (h.base_offset, h.last_offset, h.records_count, h.size) == (0, 2, 3, len(buf))
    assert (h.base_timestamp, h.max_timestamp) == (1000, 1002)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (7, 1, 5)
    verify_crc(buf, h)


def test_iteration_stops_at_a_partial_tail():
    one = _kafka_python_batch(2)
    buf = one + one + one[:30]
    assert [h.position for h in iter_batch_headers(buf)] == [0, len(one)]


@pytest.mark.parametrize("magic", [0, 1])
def test_a_tail_holding_a_legacy_magic_but_not_its_header_is_partial(magic):
    one = _kafka_python_batch(2)
    tail = bytes(16) + bytes([magic])  # 17 bytes: the magic, one byte short of a header
    assert read_batch_header(tail) is None
    assert [h.position for h in iter_batch_headers(one + tail)] == [0]


def test_base_offset_rewrite_keeps_crc_valid():
    buf = bytearray(_kafka_python_batch(4))
    set_base_offset(buf, 0, 1000)
    h = read_batch_header(buf)
    assert (h.base_offset, h.last_offset) == (1000, 1003)
    verify_crc(buf, h)


def test_log_append_time_stamp_recomputes_crc():
    buf = bytearray(_kafka_python_batch(2))
    stamp_log_append_time(buf, read_batch_header(buf), 5555)
    h = read_batch_header(buf)
    assert h.is_log_append_time and h.max_timestamp == 5555
    verify_crc(buf, h)


def test_bit_flip_is_caught_by_crc():
    buf = bytearray(_kafka_python_batch(3))
    buf[-2] ^= 0x10
    with pytest.raises(CorruptRecordError, match="CRC"):
        verify_crc(buf, read_batch_header(buf))


def test_impossible_headers_raise():
    buf = bytearray(_kafka_python_batch(1))
    buf[16] = 9
    with pytest.raises(CorruptRecordError, match="magic 9"):
        read_batch_header(buf)
    buf = bytearray(_kafka_python_batch(1))
    buf[8:12] = (10).to_bytes(4, "big")
    with pytest.raises(CorruptRecordError, match="below the minimum"):
        read_batch_header(buf)


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_message_headers(magic):
    b = LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=1 << 20)
    for i in range(3):
        b.append(i, timestamp=2000 + i if magic else None, key=None, value=b"x%d" % i)
    buf = bytes(b.build())
    headers = list(iter_batch_headers(buf))
    assert [h.last_offset for h in headers] == [0, 1, 2]
    assert all(h.magic == magic for h in headers)
    for h in headers:
        assert compute_crc(buf, h) == h.crc
    if magic == 1:
        assert [h.max_timestamp for h in headers] == [2000, 2001, 2002]


def test_a_last_offset_past_int64_is_refused_by_every_reader():
    """The Python header reader refuses it as the recovery kernel does (it used to hand
    out a last offset above int64, which no offset column can hold)."""
    import struct

    from seglog.logstore.records.record_format import INT64_MAX, REASON_OFFSETS, verify

    buf = bytearray(_kafka_python_batch(3))
    struct.pack_into(">q", buf, 0, INT64_MAX - 1)  # last offset delta 2: one past int64
    with pytest.raises(CorruptRecordError, match="passes int64"):
        read_batch_header(buf)
    assert verify(buf).code == REASON_OFFSETS
