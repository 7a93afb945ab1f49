"""record_codec: Arrow ⇄ RecordBatch v2, checked byte for byte against kafka-python."""

from __future__ import annotations

import struct

import pyarrow as pa
import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from seglog.logstore.errors import CorruptRecordError, InvalidRecordError
from seglog.logstore.records.record_codec import (
    HEADERS_TYPE,
    RECORD_SCHEMA,
    CompressionType,
    ControlType,
    TimestampType,
    decode_batches,
    encode_batches,
    encode_control_batch,
    record_schema,
)
from seglog.logstore.records.record_format import (
    V2_HEADER_SIZE,
    iter_batch_headers,
    read_batch_header,
    set_base_offset,
    stamp_log_append_time,
)

KEYS = [b"k0", None, b"", b"key-3", b"\x00\xff" * 40]
VALUES = [b"v0", b"", None, b"x" * 300, b"\x01" * 5]
TIMESTAMPS = [1_700_000_000_000, 1_699_999_999_000, 1_700_000_000_500, 0, 1_700_000_100_000]
HEADERS = [
    [("a", b"1"), ("b", None)],
    None,
    [],
    [("é-ü", b""), ("dup", b"1"), ("dup", b"2")],
    [("x", b"y" * 200)],
]


def _headers_array(headers):
    return pa.array([None if h is None else [{"key": k, "value": v} for k, v in h]
                     for h in headers], type=HEADERS_TYPE)


def _kafka_python_batch(keys, values, timestamps, headers, *, base_offset=0):
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 30)
    for i, (k, v, ts, h) in enumerate(zip(keys, values, timestamps, headers, strict=True)):
        assert builder.append(i, ts, k, v, list(h or [])) is not None
    out = bytearray(builder.build())
    set_base_offset(out, 0, base_offset)
    return bytes(out)


def test_uncompressed_output_is_byte_identical_to_kafka_python():
    ours = encode_batches(pa.array(VALUES), keys=pa.array(KEYS),
                          timestamps=pa.array(TIMESTAMPS), headers=_headers_array(HEADERS),
                          partition_leader_epoch=0)  # kafka-python leaves the epoch at 0
    assert bytes(ours) == _kafka_python_batch(KEYS, VALUES, TIMESTAMPS, HEADERS)


def test_base_timestamp_is_the_first_record_and_deltas_may_be_negative():
    buf = encode_batches(pa.array(VALUES), timestamps=pa.array(TIMESTAMPS))
    header = read_batch_header(buf)
    assert header.base_timestamp == TIMESTAMPS[0]
    assert header.max_timestamp == max(TIMESTAMPS)
    assert decode_batches(buf).column("timestamp").to_pylist() == TIMESTAMPS


def test_batch_splitting_matches_kafka_python_batch_size_rule():
    n = 200
    keys = [f"key-{i}".encode() for i in range(n)]
    values = [bytes([i % 251]) * (i % 97) for i in range(n)]
    timestamps = [1_000_000 + (i * 37) % 1000 for i in range(n)]
    headers = [[("h", b"v")] if i % 3 == 0 else None for i in range(n)]
    max_bytes = 2000
    ours = encode_batches(pa.array(values), keys=pa.array(keys), timestamps=pa.array(timestamps),
                          headers=_headers_array(headers), max_batch_bytes=max_bytes,
                          base_offset=100, partition_leader_epoch=0)
    # kafka-python's builder: a record is refused when the batch would exceed batch_size
    expected = bytearray()
    i = 0
    while i < n:
        builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, max_bytes)
        start = i
        while i < n and builder.append(i - start, timestamps[i], keys[i], values[i],
                                       list(headers[i] or [])) is not None:
            i += 1
        batch = bytearray(builder.build())
        set_base_offset(batch, 0, 100 + start)
        expected += batch
    assert bytes(ours) == bytes(expected)
    sizes = [h.size for h in iter_batch_headers(ours)]
    assert len(sizes) > 5
    assert all(size <= max_bytes for size in sizes)


def test_a_record_larger_than_max_batch_bytes_gets_its_own_batch():
    values = pa.array([b"a", b"b" * 5000, b"c"])
    buf = encode_batches(values, max_batch_bytes=1000)
    headers = list(iter_batch_headers(buf))
    assert [h.records_count for h in headers] == [1, 1, 1]
    assert [h.base_offset for h in headers] == [0, 1, 2]
    assert decode_batches(buf).column("value").to_pylist() == values.to_pylist()


def _roundtrip_table(**kwargs):
    buf = encode_batches(pa.array(VALUES), keys=pa.array(KEYS), timestamps=pa.array(TIMESTAMPS),
                         headers=_headers_array(HEADERS), base_offset=42, **kwargs)
    return buf, decode_batches(buf)


@pytest.mark.parametrize("codec", list(CompressionType))
def test_roundtrip_every_codec(codec):
    buf, batch = _roundtrip_table(compression=codec)
    assert batch.schema == RECORD_SCHEMA
    assert read_batch_header(buf).compression == codec
    assert batch.column("key").to_pylist() == KEYS
    assert batch.column("value").to_pylist() == VALUES
    assert batch.column("offset").to_pylist() == [42, 43, 44, 45, 46]
    assert batch.column("timestamp").to_pylist() == TIMESTAMPS
    assert batch.column("timestampType").to_pylist() == [0] * 5
    # records without headers come back with a null list, as Spark's Kafka source has it
    expected = [None if not h else [{"key": k, "value": v} for k, v in h] for h in HEADERS]
    assert batch.column("headers").to_pylist() == expected


def test_header_fields_of_encoded_batch():
    buf = encode_batches(pa.array([b"a", b"b"]), base_offset=7, producer_id=9,
                         producer_epoch=3, base_sequence=11, partition_leader_epoch=5,
                         is_transactional=True, timestamps=pa.array([5, 6]))
    h = read_batch_header(buf)
    assert (h.base_offset, h.last_offset, h.records_count) == (7, 8, 2)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (9, 3, 11)
    assert h.partition_leader_epoch == 5
    assert h.is_transactional and not h.is_control and not h.is_log_append_time


def test_log_append_time_batches_give_max_timestamp_to_every_record():
    buf = encode_batches(pa.array([b"a", b"b"]), timestamps=pa.array([5, 6]),
                         timestamp_type=TimestampType.LOG_APPEND_TIME, now_ms=99)
    h = read_batch_header(buf)
    assert h.is_log_append_time and h.max_timestamp == 99
    batch = decode_batches(buf)
    assert batch.column("timestamp").to_pylist() == [99, 99]
    assert batch.column("timestampType").to_pylist() == [1, 1]
    # the broker path: stamping an existing batch in place
    buf2 = bytearray(encode_batches(pa.array([b"c"]), timestamps=pa.array([1])))
    stamp_log_append_time(buf2, read_batch_header(buf2), 1234)
    assert decode_batches(buf2).column("timestamp").to_pylist() == [1234]


def test_input_types_string_large_binary_sliced_and_chunked():
    values = pa.array(["zero", None, "two", "three", "four"])
    expected = [b"zero", None, b"two", b"three", b"four"]
    for col in (values, values.cast(pa.large_binary()), values.cast(pa.large_string()),
                pa.chunked_array([values[:2], values[2:]])):
        assert decode_batches(encode_batches(col)).column("value").to_pylist() == expected
    sliced = values[2:]
    keys = pa.array([b"a", b"b", b"c", b"d", b"e", b"f"])[3:]
    batch = decode_batches(encode_batches(sliced, keys=keys,
                                          timestamps=pa.array([1, 2, 3, 4, 5, 6])[1:4],
                                          headers=_headers_array(HEADERS)[2:]))
    assert batch.column("value").to_pylist() == expected[2:]
    assert batch.column("key").to_pylist() == [b"d", b"e", b"f"]
    assert batch.column("timestamp").to_pylist() == [2, 3, 4]
    assert batch.column("headers").to_pylist()[1] == [
        {"key": k, "value": v} for k, v in HEADERS[3]]


def test_null_timestamps_become_now_ms():
    batch = decode_batches(encode_batches(pa.array([b"a", b"b"]),
                                          timestamps=pa.array([None, 5], pa.int64()),
                                          now_ms=77))
    assert batch.column("timestamp").to_pylist() == [77, 5]
    batch = decode_batches(encode_batches(pa.array([b"a"]), now_ms=78))
    assert batch.column("timestamp").to_pylist() == [78]


def test_bad_inputs_name_the_argument():
    with pytest.raises(ValueError, match="keys has 1 entries"):
        encode_batches(pa.array([b"a", b"b"]), keys=pa.array([b"a"]))
    with pytest.raises(TypeError, match="values must be"):
        encode_batches(pa.array([1, 2]))
    with pytest.raises(InvalidRecordError, match="header key is null"):
        encode_batches(pa.array([b"a"]), headers=pa.array([[{"key": None, "value": b"v"}]],
                                                          type=HEADERS_TYPE))
    with pytest.raises(ValueError, match="unknown compression type"):
        encode_batches(pa.array([b"a"]), compression="brotli")


def test_compression_type_from_name():
    assert CompressionType.from_name("LZ4") is CompressionType.LZ4
    assert CompressionType.from_name("uncompressed") is CompressionType.NONE
    assert CompressionType.from_name("none") is CompressionType.NONE
    assert CompressionType.from_name(4) is CompressionType.ZSTD


def test_empty_inputs():
    assert encode_batches(pa.array([], pa.binary())) == b""
    batch = decode_batches(b"")
    assert batch.num_rows == 0 and batch.schema == RECORD_SCHEMA
    assert decode_batches(b"", include_headers=False).schema == record_schema(False)


def test_offset_filtering_and_partial_trailing_batch():
    buf = bytearray()
    for base in (0, 3, 6):
        buf += encode_batches(pa.array([b"a", b"b", b"c"]), base_offset=base)
    batch = decode_batches(buf, start_offset=2, end_offset=7)
    assert batch.column("offset").to_pylist() == [2, 3, 4, 5, 6]
    # a partial batch at the end is ignored, whatever its size
    for cut in (1, 20, V2_HEADER_SIZE, len(buf) // 3 - 1):
        partial = buf[: 2 * len(buf) // 3 + cut]
        assert decode_batches(partial).column("offset").to_pylist() == [0, 1, 2, 3, 4, 5]
    assert decode_batches(buf, include_headers=False).schema == record_schema(False)


def test_control_batches_are_skipped():
    buf = bytearray(encode_batches(pa.array([b"a", b"b"]), producer_id=5, producer_epoch=1,
                                   base_sequence=0, is_transactional=True))
    marker = encode_control_batch(ControlType.COMMIT, producer_id=5, producer_epoch=1,
                                  base_offset=2, timestamp_ms=10)
    h = read_batch_header(marker)
    assert h.is_control and h.is_transactional and h.records_count == 1
    buf += marker
    buf += encode_batches(pa.array([b"c"]), base_offset=3)
    assert decode_batches(buf).column("offset").to_pylist() == [0, 1, 3]


def test_bad_crc_raises_unless_disabled():
    buf = bytearray(encode_batches(pa.array([b"hello", b"world"])))
    buf[-2] ^= 0xFF  # a byte of the last value: still parseable
    with pytest.raises(CorruptRecordError, match="position 0 .*CRC"):
        decode_batches(buf)
    assert decode_batches(buf, verify_crc=False).column("value").to_pylist()[0] == b"hello"


def _rewrite(buf: bytearray, records: bytes, count: int | None = None) -> bytearray:
    out = bytearray(buf[:V2_HEADER_SIZE]) + records
    struct.pack_into(">i", out, 8, len(out) - 12)
    if count is not None:
        struct.pack_into(">i", out, 57, count)
    return out


def test_corrupt_records_raise_naming_the_batch():
    good = bytearray(encode_batches(pa.array([b"a", b"bb"]), base_offset=10))
    records = bytes(good[V2_HEADER_SIZE:])
    cases = {
        "count mismatch (too many)": _rewrite(good, records, count=3),
        "count mismatch (too few)": _rewrite(good, records, count=1),
        "bad varint": _rewrite(good, b"\xff" * 12),
        "huge count": _rewrite(good, records, count=2**31 - 1),
        "truncated body": _rewrite(good, records[:-1]),
        "negative key length": _rewrite(good, bytes([records[0], 0, 0, 0, 4]) + records[5:]),
    }
    for name, buf in cases.items():
        with pytest.raises(CorruptRecordError, match=r"position 0 \(offsets 10\.\.11"):
            decode_batches(bytes(buf), verify_crc=False)
        assert name


def test_record_length_must_match_its_body():
    good = bytearray(encode_batches(pa.array([b"abc"])))
    rec = bytearray(good[V2_HEADER_SIZE:])
    rec[0] += 2  # claims one more byte (zigzag) than the body uses
    with pytest.raises(CorruptRecordError):
        decode_batches(bytes(_rewrite(good, bytes(rec) + b"\x00")), verify_crc=False)


def test_random_corruption_never_crashes():
    import random

    rng = random.Random(7)
    good = bytes(encode_batches(pa.array(VALUES), keys=pa.array(KEYS),
                                headers=_headers_array(HEADERS)))
    for _ in range(1000):
        buf = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            # mostly the records, sometimes the header (counts, sizes, magic)
            low = 0 if rng.random() < 0.2 else V2_HEADER_SIZE
            pos = rng.randrange(low, len(buf))
            buf[pos] = rng.randrange(256)
        try:
            batch = decode_batches(bytes(buf), verify_crc=False)
        except CorruptRecordError:
            continue
        # a corrupt offset delta may filter a record out; never more rows than written
        assert batch.num_rows <= 5


def test_base_sequence_continues_across_split_batches_and_wraps():
    values = pa.array([b"x" * 100] * 10)
    buf = encode_batches(values, producer_id=1, producer_epoch=0, base_sequence=2**31 - 3,
                         max_batch_bytes=400)
    headers = list(iter_batch_headers(buf))
    counts = [h.records_count for h in headers]
    assert len(headers) > 2
    expected, seq = [], 2**31 - 3
    for c in counts:
        expected.append(seq)
        seq = (seq + c) % 2**31
    assert [h.base_sequence for h in headers] == expected
    assert min(expected) < 10  # it did wrap


@pytest.mark.parametrize("codec", [c for c in CompressionType if c != CompressionType.NONE])
def test_random_corruption_of_compressed_batches_raises_only_corrupt_record_error(codec):
    import random

    rng = random.Random(int(codec))
    good = bytes(encode_batches(pa.array(VALUES * 20), keys=pa.array(KEYS * 20),
                                headers=_headers_array(HEADERS * 20), compression=codec))
    for _ in range(200):
        buf = bytearray(good)
        for _ in range(rng.randint(1, 3)):
            buf[rng.randrange(V2_HEADER_SIZE, len(buf))] = rng.randrange(256)
        try:
            batch = decode_batches(bytes(buf), verify_crc=False)
        except CorruptRecordError:
            continue
        assert batch.num_rows <= 100
    buf = bytearray(good)
    buf[-1] ^= 0x01
    with pytest.raises(CorruptRecordError, match="CRC"):
        decode_batches(bytes(buf))


def test_mixed_codecs_in_one_buffer_with_headers():
    buf = bytearray()
    expected = []
    base = 0
    for codec in [*CompressionType, CompressionType.NONE, CompressionType.ZSTD]:
        part = encode_batches(pa.array(VALUES), keys=pa.array(KEYS),
                              timestamps=pa.array(TIMESTAMPS), headers=_headers_array(HEADERS),
                              compression=codec, base_offset=base, max_batch_bytes=300)
        expected.extend(decode_batches(part).to_pylist())
        buf += part
        base += len(VALUES)
    batch = decode_batches(buf)
    assert batch.to_pylist() == expected
    assert batch.column("offset").to_pylist() == list(range(base))
    middle = decode_batches(buf, start_offset=7, end_offset=base - 3)
    assert middle.to_pylist() == expected[7:base - 3]


def test_other_input_forms_python_lists_numpy_timestamps_views_large_list_headers():
    import numpy as np

    large_headers = pa.array([[("k", b"v")], None],
                             type=pa.large_list(HEADERS_TYPE.value_type))
    batch = decode_batches(encode_batches(
        [b"a", None], keys=pa.array(["x", "y"]).cast(pa.string_view()),
        timestamps=np.array([5, 6]), headers=large_headers))
    assert batch.column("value").to_pylist() == [b"a", None]
    assert batch.column("key").to_pylist() == [b"x", b"y"]
    assert batch.column("timestamp").to_pylist() == [5, 6]
    assert batch.column("headers").to_pylist() == [[{"key": "k", "value": b"v"}], None]
    # Arrow/Spark timestamps (microseconds, with a zone) become Kafka's milliseconds
    ts = pa.array([1_700_000_000_123_999, None], pa.timestamp("us", "UTC"))
    batch = decode_batches(encode_batches(pa.array([b"a", b"b"]), timestamps=ts, now_ms=9))
    assert batch.column("timestamp").to_pylist() == [1_700_000_000_123, 9]
    all_null = decode_batches(encode_batches(pa.nulls(2), keys=pa.nulls(2)))
    assert all_null.column("value").to_pylist() == [None, None]
    assert all_null.column("key").to_pylist() == [None, None]
