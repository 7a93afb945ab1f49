"""legacy_records: magic 0/1 message sets built by kafka-python, decoded like Kafka does."""

from __future__ import annotations

import struct
import zlib

import pyarrow as pa
import pytest
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from seglog.logstore.errors import CorruptRecordError
from seglog.logstore.records.compression import compress
from seglog.logstore.records.record_codec import decode_batches, encode_batches
from seglog.logstore.records.record_format import read_batch_header

KEYS = [b"k0", None, b"", b"key-3"]
VALUES = [b"v0", b"", None, b"x" * 500]
TIMESTAMPS = [1_000, 3_000, 2_000, 4_000]


def _messages(magic: int, offsets, codec: int = 0) -> bytearray:
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 20)
    for off, k, v, ts in zip(offsets, KEYS, VALUES, TIMESTAMPS, strict=True):
        assert builder.append(off, timestamp=ts, key=k, value=v) is not None
    return bytearray(builder.build())


def _set_wrapper(buf: bytearray, offset: int, log_append_time: int | None = None) -> bytearray:
    """What a broker does to a compressed wrapper: absolute offset and, for
    LogAppendTime, the timestamp-type bit and the broker's time (CRC recomputed)."""
    struct.pack_into(">q", buf, 0, offset)
    if log_append_time is not None:
        buf[17] |= 0x08
        struct.pack_into(">q", buf, 18, log_append_time)
        struct.pack_into(">I", buf, 12, zlib.crc32(buf[16:]))
    return buf


def _kafka_python_rows(buf: bytes):
    rows = []
    records = MemoryRecords(bytes(buf))
    while (batch := records.next_batch()) is not None:
        for r in batch:
            ts = r.timestamp if r.timestamp is not None and batch.magic > 0 else None
            rows.append((r.offset, ts, r.timestamp_type if batch.magic > 0 else -1,
                         r.key, r.value))
    return rows


def _rows(batch: pa.RecordBatch):
    cols = [batch.column(c).to_pylist()
            for c in ("offset", "timestamp", "timestampType", "key", "value")]
    return list(zip(*cols, strict=True))


def test_v0_uncompressed_has_no_timestamps():
    buf = _messages(0, [10, 11, 12, 13])
    batch = decode_batches(buf)
    assert batch.column("offset").to_pylist() == [10, 11, 12, 13]
    assert batch.column("timestamp").to_pylist() == [None] * 4
    assert batch.column("timestampType").to_pylist() == [-1] * 4
    assert batch.column("key").to_pylist() == KEYS
    assert batch.column("value").to_pylist() == VALUES
    assert batch.column("headers").to_pylist() == [None] * 4
    assert _rows(batch) == _kafka_python_rows(buf)


def test_v1_uncompressed_create_time():
    buf = _messages(1, [0, 1, 2, 3])
    batch = decode_batches(buf)
    assert batch.column("timestamp").to_pylist() == TIMESTAMPS
    assert batch.column("timestampType").to_pylist() == [0] * 4
    assert _rows(batch) == _kafka_python_rows(buf)


@pytest.mark.parametrize("codec", [1, 2, 3])
def test_v1_compressed_wrapper_relative_offsets(codec):
    buf = _set_wrapper(_messages(1, [0, 1, 2, 3], codec), offset=103)
    header = read_batch_header(buf)
    assert header.compression == codec and header.last_offset == 103
    batch = decode_batches(buf)
    assert batch.column("offset").to_pylist() == [100, 101, 102, 103]
    assert batch.column("timestamp").to_pylist() == TIMESTAMPS
    assert batch.column("key").to_pylist() == KEYS
    assert batch.column("value").to_pylist() == VALUES
    assert _rows(batch) == _kafka_python_rows(buf)


@pytest.mark.parametrize("codec", [1, 2])
def test_v0_compressed_wrapper_absolute_offsets(codec):
    buf = _set_wrapper(_messages(0, [50, 51, 52, 53], codec), offset=53)
    batch = decode_batches(buf)
    assert batch.column("offset").to_pylist() == [50, 51, 52, 53]
    assert batch.column("timestamp").to_pylist() == [None] * 4
    assert _rows(batch) == _kafka_python_rows(buf)


def test_v0_lz4_wrapper_with_pre_kip57_header_checksum():
    # kafka-python needs xxhash for 0.8-era lz4, so the wrapper is built here by hand.
    inner = bytes(_messages(0, [7, 8, 9, 10]))
    frame = bytearray(compress(3, inner))
    frame[6] ^= 0x33  # the header checksum an old broker computed over the wrong bytes
    body = struct.pack(">bb", 0, 3) + struct.pack(">i", -1) + struct.pack(">i", len(frame)) \
        + bytes(frame)
    wrapper = struct.pack(">qiI", 10, len(body) + 4, zlib.crc32(body)) + body
    batch = decode_batches(wrapper)
    assert batch.column("offset").to_pylist() == [7, 8, 9, 10]
    assert batch.column("value").to_pylist() == VALUES


@pytest.mark.parametrize("codec", [0, 1])
def test_v1_log_append_time_wrapper_stamps_inner_records(codec):
    if codec == 0:  # an uncompressed v1 message stamped by the broker
        buf = _set_wrapper(_messages(1, [0, 1, 2, 3])[:26 + 4 + 2 + 4 + 2],
                           offset=5, log_append_time=777)
        expected_offsets = [5]
    else:
        buf = _set_wrapper(_messages(1, [0, 1, 2, 3], codec), offset=8, log_append_time=777)
        expected_offsets = [5, 6, 7, 8]
    batch = decode_batches(buf)
    n = len(expected_offsets)
    assert batch.column("offset").to_pylist() == expected_offsets
    assert batch.column("timestamp").to_pylist() == [777] * n
    assert batch.column("timestampType").to_pylist() == [1] * n
    assert _rows(batch) == _kafka_python_rows(buf)


def test_mixed_magics_in_one_buffer_keep_their_order_and_filtering():
    buf = bytearray(_messages(0, [0, 1, 2, 3]))
    buf += _set_wrapper(_messages(1, [0, 1, 2, 3], 1), offset=7)
    buf += encode_batches(pa.array([b"a", b"b"]), timestamps=pa.array([9, 10]), base_offset=8)
    buf += _messages(1, [10, 11, 12, 13])
    batch = decode_batches(buf)
    assert batch.column("offset").to_pylist() == list(range(14))
    assert batch.column("timestampType").to_pylist() == [-1] * 4 + [0] * 10
    assert batch.column("value").to_pylist()[8:10] == [b"a", b"b"]
    part = decode_batches(buf, start_offset=3, end_offset=11)
    assert part.column("offset").to_pylist() == list(range(3, 11))
    assert decode_batches(buf, include_headers=False).num_columns == 5


def test_bad_inner_crc_and_double_compression_are_corrupt():
    inner = bytearray(_messages(1, [0, 1, 2, 3]))
    inner[-1] ^= 0x01  # the last inner message's value, under its CRC

    def wrap(payload: bytes, codec: int = 1) -> bytes:
        value = compress(codec, payload)
        body = struct.pack(">bbq", 1, codec, 0) + struct.pack(">i", -1) \
            + struct.pack(">i", len(value)) + value
        return struct.pack(">qiI", 3, len(body) + 4, zlib.crc32(body)) + body

    with pytest.raises(CorruptRecordError, match="inner message .* CRC"):
        decode_batches(wrap(bytes(inner)))
    assert decode_batches(wrap(bytes(inner)), verify_crc=False).num_rows == 4
    nested = wrap(bytes(_set_wrapper(_messages(1, [0, 1, 2, 3], 1), offset=3)))
    with pytest.raises(CorruptRecordError, match="double compression"):
        decode_batches(nested)


def test_truncated_inner_message_is_corrupt():
    inner = bytes(_messages(1, [0, 1, 2, 3]))[:-3]
    value = compress(1, inner)
    body = struct.pack(">bbq", 1, 1, 0) + struct.pack(">ii", -1, len(value)) + value
    buf = struct.pack(">qiI", 3, len(body) + 4, zlib.crc32(body)) + body
    with pytest.raises(CorruptRecordError, match="position 0"):
        decode_batches(buf)


@pytest.mark.parametrize("magic,codec", [(0, 0), (1, 0), (0, 1), (1, 1), (1, 2), (1, 3)])
def test_random_corruption_never_crashes(magic, codec):
    import random

    rng = random.Random(magic * 10 + codec)
    good = bytes(_set_wrapper(_messages(magic, [0, 1, 2, 3], codec), offset=3)
                 if codec else _messages(magic, [0, 1, 2, 3]))
    for _ in range(300):
        buf = bytearray(good)
        for _ in range(rng.randint(1, 3)):
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        try:
            batch = decode_batches(bytes(buf), verify_crc=False)
        except CorruptRecordError:
            continue
        batch.validate(full=True)
        assert batch.num_rows <= 4 * 8  # never more than the bytes could hold


def test_many_uncompressed_messages_decode_in_one_pass():
    n = 20_000
    builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 30)
    for i in range(n):
        builder.append(i, timestamp=i, key=None if i % 3 else b"k%d" % i, value=b"v%d" % i)
    batch = decode_batches(bytes(builder.build()), start_offset=5, end_offset=n - 5)
    assert batch.column("offset").to_pylist() == list(range(5, n - 5))
    assert batch.column("value").to_pylist()[-1] == b"v%d" % (n - 6)
    assert batch.column("key").null_count == sum(1 for i in range(5, n - 5) if i % 3)
