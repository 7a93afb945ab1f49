"""Property tests of the codec: decode(encode(x)) == x for any records and any codec,
and batch splitting keeps every batch within max_batch_bytes."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.memory_records import MemoryRecords

from seglog.logstore.errors import CorruptRecordError
from seglog.logstore.records.record_codec import (
    HEADERS_TYPE,
    RECORD_SCHEMA,
    CompressionType,
    decode_batches,
    encode_batches,
)
from seglog.logstore.records.record_format import iter_batch_headers, verify_crc

NOW_MS = 1_700_000_000_000

binaries = st.one_of(st.none(), st.just(b""), st.binary(max_size=64))
header_lists = st.one_of(
    st.none(),
    st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=16))),
             max_size=3))
# -1 is "none"; below it the encoder refuses (Kafka's rule: test_negative_timestamps)
timestamps = st.one_of(st.none(), st.integers(min_value=0, max_value=2**42),
                       st.integers(min_value=-1, max_value=2**62))
records = st.lists(st.tuples(binaries, binaries, timestamps, header_lists), max_size=40)

SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def _encode(recs, **kwargs):
    keys = pa.array([r[0] for r in recs], pa.binary())
    values = pa.array([r[1] for r in recs], pa.binary())
    ts = pa.array([r[2] for r in recs], pa.int64())
    headers = pa.array([None if r[3] is None else [{"key": k, "value": v} for k, v in r[3]]
                        for r in recs], type=HEADERS_TYPE)
    return encode_batches(values, keys=keys, timestamps=ts, headers=headers, now_ms=NOW_MS,
                          **kwargs)


def _expected(recs, base_offset):
    return {
        "key": [r[0] for r in recs],
        "value": [r[1] for r in recs],
        "offset": [base_offset + i for i in range(len(recs))],
        "timestamp": [NOW_MS if r[2] is None else r[2] for r in recs],
        "timestampType": [0] * len(recs),
        # no headers (null or empty list) decodes to null, as in Spark's Kafka source
        "headers": [[{"key": k, "value": v} for k, v in r[3]] if r[3] else None
                    for r in recs],
    }


@SETTINGS
@given(recs=records, codec=st.sampled_from(list(CompressionType)),
       base_offset=st.integers(min_value=0, max_value=2**40))
def test_decode_of_encode_is_identity(recs, codec, base_offset):
    buf = _encode(recs, compression=codec, base_offset=base_offset)
    assert decode_batches(buf).to_pydict() == _expected(recs, base_offset)
    assert decode_batches(buf, include_headers=False).num_columns == 5


@SETTINGS
@given(recs=records, max_batch_bytes=st.integers(min_value=1, max_value=3000),
       codec=st.sampled_from([CompressionType.NONE, CompressionType.LZ4]))
def test_batch_splitting(recs, max_batch_bytes, codec):
    buf = _encode(recs, compression=codec, max_batch_bytes=max_batch_bytes)
    uncompressed = _encode(recs, max_batch_bytes=max_batch_bytes)
    headers = list(iter_batch_headers(buf))
    assert sum(h.records_count for h in headers) == len(recs)
    assert all(h.records_count >= 1 for h in headers)
    next_offset = 0
    for h, u in zip(headers, iter_batch_headers(uncompressed), strict=True):
        verify_crc(buf, h)
        assert h.base_offset == next_offset and u.records_count == h.records_count
        next_offset = h.last_offset + 1
        # a batch exceeds the limit only when it holds a single record
        assert u.size <= max_batch_bytes or u.records_count == 1
    assert decode_batches(buf).to_pydict() == _expected(recs, 0)


@settings(max_examples=60, deadline=None)
@given(recs=records)
def test_kafka_python_reads_what_seglog_writes(recs):
    buf = _encode(recs, max_batch_bytes=500)
    got = []
    mr = MemoryRecords(bytes(buf))
    while (batch := mr.next_batch()) is not None:
        got.extend((r.key, r.value, r.timestamp, [tuple(h) for h in r.headers]) for r in batch)
    assert got == [(r[0], r[1], NOW_MS if r[2] is None else r[2], list(r[3] or []))
                   for r in recs]


@settings(max_examples=200, deadline=None)
@given(recs=st.lists(st.tuples(binaries, binaries, timestamps, header_lists), min_size=1,
                     max_size=10),
       mutations=st.lists(st.tuples(st.floats(min_value=0, max_value=1, exclude_max=True),
                                    st.integers(min_value=0, max_value=255)),
                          min_size=1, max_size=4),
       codec=st.sampled_from(list(CompressionType)))
def test_corrupted_input_raises_corrupt_record_error_or_decodes(recs, mutations, codec):
    buf = bytearray(_encode(recs, compression=codec, max_batch_bytes=200))
    for where, value in mutations:
        buf[int(where * len(buf))] = value
    try:
        batch = decode_batches(bytes(buf), verify_crc=False)
    except CorruptRecordError:
        return
    # mutated bytes may still parse (a value byte changed): then the result is whole
    assert batch.schema == RECORD_SCHEMA
    assert batch.validate(full=True) is None
