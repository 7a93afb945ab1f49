"""Record batches seen from their headers only: what the log layer needs.

Segments, the Log, recovery and ``dump-log`` never decode records; they walk batch
headers, check sizes and CRCs, and rewrite the base offset. Decoding records into Arrow
is the codec's job (``record_codec``).

Byte layout of a RecordBatch v2 header (big-endian, 61 bytes)::

    0 baseOffset int64 | 8 length int32 (= size - 12) | 12 partitionLeaderEpoch int32
    16 magic int8 (2)  | 17 crc uint32 (CRC-32C of [21, end)) | 21 attributes int16
    23 lastOffsetDelta int32 | 27 baseTimestamp int64 | 35 maxTimestamp int64
    43 producerId int64 | 51 producerEpoch int16 | 53 baseSequence int32
    57 recordsCount int32 | 61 records...

Legacy message sets (magic 0/1) are one "batch" per shallow message: offset int64,
size int32, crc uint32 (CRC-32 of [16, end)), magic, attributes, [timestamp int64 (v1)],
key, value. For a compressed wrapper the header knows only the last offset (the
wrapper's), so ``base_offset == last_offset`` and ``records_count == -1`` there.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

import crc32c as _crc32c

from .errors import CorruptRecordError

V2_HEADER = struct.Struct(">qiibIhiqqqhii")
V2_HEADER_SIZE = V2_HEADER.size  # 61
LOG_OVERHEAD = 12  # offset + length: the part of every batch not counted in `length`
MAGIC_OFFSET = 16
V2_CRC_OFFSET = 17
V2_ATTRIBUTES_OFFSET = 21
V2_MAX_TIMESTAMP_OFFSET = 35
_LEGACY_HEAD = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_LEGACY_MIN_SIZE = {0: 14, 1: 22}  # crc..value-length for an empty message
_INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40
NO_TIMESTAMP = -1


def crc32c(data) -> int:
    return _crc32c.crc32c(data)


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """Where a batch sits in a buffer and what its header says."""

    position: int
    base_offset: int
    last_offset: int
    size: int  # whole batch, including the 12-byte log overhead
    magic: int
    attributes: int
    crc: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    records_count: int = -1
    partition_leader_epoch: int = -1

    @property
    def end_position(self) -> int:
        return self.position + self.size

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_log_append_time(self) -> bool:
        return self.magic > 0 and bool(self.attributes & TIMESTAMP_TYPE_MASK)

    @property
    def is_transactional(self) -> bool:
        return self.magic == 2 and bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return self.magic == 2 and bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return self.magic == 2 and bool(self.attributes & DELETE_HORIZON_MASK)


def read_batch_header(buf, position: int = 0, limit: int | None = None) -> BatchHeader | None:
    """The header of the batch at ``position``, or None if the batch does not fit in
    ``buf[:limit]`` (a partial tail). Raises CorruptRecordError for impossible headers."""
    end = len(buf) if limit is None else limit
    if end - position < MAGIC_OFFSET + 1:
        return None
    magic = buf[position + MAGIC_OFFSET]
    if magic == 2:
        if end - position < V2_HEADER_SIZE:
            return None
        (base, length, epoch, _m, crc, attrs, last_delta, base_ts, max_ts,
         pid, pepoch, seq, count) = V2_HEADER.unpack_from(buf, position)
        size = length + LOG_OVERHEAD
        if size < V2_HEADER_SIZE:
            raise CorruptRecordError(
                f"record batch at position {position} has size {size}, "
                f"below the minimum {V2_HEADER_SIZE}")
        if count < 0 or last_delta < 0:
            raise CorruptRecordError(
                f"record batch at position {position} has a negative record count "
                f"({count}) or last offset delta ({last_delta})")
        if end - position < size:
            return None
        return BatchHeader(position, base, base + last_delta, size, 2, attrs & 0xFFFF, crc,
                           base_ts, max_ts, pid, pepoch, seq, count, epoch)
    if magic in (0, 1):
        if end - position < _LEGACY_HEAD.size:
            return None
        offset, length, crc, _m, attrs = _LEGACY_HEAD.unpack_from(buf, position)
        if length < _LEGACY_MIN_SIZE[magic]:
            raise CorruptRecordError(
                f"message at position {position} has size {length}, below the minimum "
                f"{_LEGACY_MIN_SIZE[magic]} for magic {magic}")
        size = length + LOG_OVERHEAD
        if end - position < size:
            return None
        ts = NO_TIMESTAMP
        if magic == 1:
            (ts,) = _INT64.unpack_from(buf, position + 18)
        count = 1 if attrs & COMPRESSION_MASK == 0 else -1
        return BatchHeader(position, offset, offset, size, magic, attrs & 0xFF, crc,
                           ts, ts, records_count=count)
    raise CorruptRecordError(f"unknown magic {magic} at position {position}")


def iter_batch_headers(buf, position: int = 0, limit: int | None = None) -> Iterator[BatchHeader]:
    """Every whole batch from ``position`` on; stops silently at a partial tail."""
    while True:
        header = read_batch_header(buf, position, limit)
        if header is None:
            return
        yield header
        position = header.end_position


def compute_crc(buf, header: BatchHeader) -> int:
    if header.magic == 2:
        return crc32c(memoryview(buf)[header.position + V2_ATTRIBUTES_OFFSET:header.end_position])
    return zlib.crc32(memoryview(buf)[header.position + MAGIC_OFFSET:header.end_position])


def verify_crc(buf, header: BatchHeader) -> None:
    actual = compute_crc(buf, header)
    if actual != header.crc:
        raise CorruptRecordError(
            f"batch at position {header.position} (offsets {header.base_offset}.."
            f"{header.last_offset}) has CRC {actual:#010x}, header says {header.crc:#010x}")


def set_base_offset(buf: bytearray | memoryview, position: int, base_offset: int) -> None:
    """Rewrite a v2 batch's base offset in place; the CRC does not cover it."""
    _INT64.pack_into(buf, position, base_offset)


def stamp_log_append_time(buf: bytearray | memoryview, header: BatchHeader, now_ms: int) -> None:
    """Make a v2 batch LogAppendTime with ``maxTimestamp = now_ms`` and recompute its CRC
    (attributes and maxTimestamp are covered by it)."""
    pos = header.position
    _INT16.pack_into(buf, pos + V2_ATTRIBUTES_OFFSET, (header.attributes | TIMESTAMP_TYPE_MASK))
    _INT64.pack_into(buf, pos + V2_MAX_TIMESTAMP_OFFSET, now_ms)
    crc = crc32c(memoryview(buf)[pos + V2_ATTRIBUTES_OFFSET:header.end_position])
    _UINT32.pack_into(buf, pos + V2_CRC_OFFSET, crc)
