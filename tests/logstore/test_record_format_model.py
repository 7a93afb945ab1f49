"""The header-table kernel and ``verify`` agree with a plain-Python model of Kafka's batch
rules on random and corrupted buffers (v2 batches, legacy messages, junk)."""

from __future__ import annotations

import struct
import zlib

import crc32c
import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from seglog.logstore.records.record_codec import encode_batches
from seglog.logstore.records.record_format import (
    HEADER_COLUMNS,
    INT64_MAX,
    OK,
    REASON_COUNT,
    REASON_CRC,
    REASON_MAGIC,
    REASON_OFFSETS,
    REASON_SIZE,
    REASON_TOO_LARGE,
    WALK_END,
    WALK_FULL,
    WALK_INVALID,
    verify_all,
)
from seglog.logstore.records.record_format_kernels import header_table

I32 = 2**31 - 1


def model_walk(buf: bytes, max_bytes: int, seg_base: int | None, next_offset: int):
    """Kafka's rules, written out: (rows of (position, size, base, last, magic,
    attributes, base ts, max ts, pid, epoch, seq, count, crc, leader epoch), stop
    position, invalid reason or None)."""
    rows = []
    p = 0
    while True:
        if len(buf) - p < 17:
            return rows, p, None
        magic = buf[p + 16]
        if magic == 2:
            if len(buf) - p < 61:
                return rows, p, None
            (base, length, leader, _, crc, attrs, delta, base_ts, max_ts, pid, epoch, seq,
             count) = struct.unpack_from(">qiibIHiqqqhii", buf, p)
            size = length + 12
            if size < 61:
                return rows, p, REASON_SIZE
            if count < 0 or delta < 0:
                return rows, p, REASON_COUNT
            if base + delta > INT64_MAX:
                return rows, p, REASON_OFFSETS
            last = base + delta
        elif magic in (0, 1):
            if len(buf) - p < 18:
                return rows, p, None
            base, length, crc, _, attrs = struct.unpack_from(">qiIbB", buf, p)
            if length < (14 if magic == 0 else 22):
                return rows, p, REASON_SIZE
            size = length + 12
            last, leader, pid, epoch, seq = base, -1, -1, -1, -1
            count = 1 if attrs & 7 == 0 else -1
        else:
            return rows, p, REASON_MAGIC
        if size > max_bytes:
            return rows, p, REASON_TOO_LARGE
        if size > len(buf) - p:
            return rows, p, None
        if magic < 2:  # the v1 timestamp, once the whole message is there
            base_ts = max_ts = struct.unpack_from(">q", buf, p + 18)[0] if magic else -1
        if seg_base is not None and (base < next_offset or last - seg_base > I32):
            return rows, p, REASON_OFFSETS
        rows.append((p, size, base, last, magic, attrs, base_ts, max_ts, pid, epoch, seq,
                     count, crc, leader))
        next_offset = last + 1
        p += size


def model_crc_ok(buf: bytes, row) -> bool:
    p, size, magic, crc = row[0], row[1], row[4], row[12]
    if magic == 2:
        return crc32c.crc32c(buf[p + 21:p + size]) == crc
    return zlib.crc32(buf[p + 16:p + size]) == crc


def _v2(n: int, base: int, codec: str) -> bytes:
    return bytes(encode_batches(pa.array([b"v%d" % i for i in range(n)]),
                                keys=pa.array([b"k"] * n), timestamps=pa.array(range(n)),
                                base_offset=base, compression=codec, producer_id=base,
                                max_batch_bytes=200, now_ms=0))


def _legacy(magic: int, offset: int) -> bytes:
    b = LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=1 << 20)
    b.append(offset, timestamp=5 if magic else None, key=b"k", value=b"value")
    return bytes(b.build())


pieces = st.one_of(
    st.tuples(st.just("v2"), st.integers(1, 6), st.sampled_from(["none", "gzip"])),
    st.tuples(st.just("legacy"), st.integers(0, 1), st.just("")),
)


@st.composite
def buffers(draw):
    out = bytearray()
    offset = draw(st.integers(0, 5))
    for kind, a, codec in draw(st.lists(pieces, min_size=0, max_size=5)):
        if kind == "v2":
            out += _v2(a, offset, codec)
            offset += a
        else:
            out += _legacy(a, offset)
            offset += 1
    for _ in range(draw(st.integers(0, 3))):  # corruption: flipped bytes
        if out:
            at = draw(st.integers(0, len(out) - 1))
            out[at] = draw(st.integers(0, 255))
    if out and draw(st.booleans()):  # a torn tail
        out = out[:draw(st.integers(0, len(out)))]
    out += draw(st.binary(max_size=20))  # trailing junk
    return bytes(out)


@settings(max_examples=300, deadline=None)
@given(buf=buffers(), max_bytes=st.sampled_from([INT64_MAX, 150]),
       seg_base=st.sampled_from([None, 0, 3]), cap=st.integers(1, 8))
def test_header_table_and_verify_agree_with_the_model(buf, max_bytes, seg_base, cap):
    rows, stop, reason = model_walk(buf, max_bytes, seg_base, seg_base or 0)

    table = np.empty((cap, HEADER_COLUMNS), np.int64)
    got, p = [], 0
    u8 = np.frombuffer(buf, np.uint8)
    while True:
        count, p, status, code = header_table(u8, p, len(buf), table, max_bytes,
                                              seg_base is not None, seg_base or 0,
                                              got[-1][3] + 1 if got else seg_base or 0, False)
        got += [tuple(r) for r in table[:count].tolist()]
        if status != WALK_FULL:
            break
    assert got == rows
    assert p == stop
    assert (status, code) == ((WALK_INVALID, reason) if reason else (WALK_END, OK))

    if seg_base is not None or max_bytes != INT64_MAX:
        return
    # verify_all: the same batches, a CRC verdict per batch, the same stop and reason
    checks = list(verify_all(buf))
    whole = [c for c in checks if c.header is not None]
    assert [(c.header.position, c.header.size, c.header.base_offset, c.header.last_offset,
             c.header.records_count, c.header.crc) for c in whole] == \
        [(r[0], r[1], r[2], r[3], r[11], r[12]) for r in rows]
    for c, r in zip(whole, rows, strict=True):
        assert (c.code == REASON_CRC) == (not model_crc_ok(buf, r))
    tail = checks[-1] if checks and checks[-1].header is None else None
    if reason is not None:
        assert tail is not None and tail.code == reason and not tail.partial
    else:
        assert tail is None or tail.partial
        assert (tail is not None) == (stop < len(buf))
