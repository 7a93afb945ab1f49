"""Kafka's record format, known in one place: byte layouts, the rules a batch must
satisfy, and the few rewrites a log may make (Kafka's ``DefaultRecordBatch``,
``LegacyRecord``, ``DefaultRecord`` and ``ControlRecordType`` in one module).

Every parser of batch bytes in seglog takes its offsets, sizes, bits and rules from
here: the header walk of recovery, the cleaner's batch table, the transaction scans
and the codec's kernels read these module-level ints (numba compiles module globals
as constants) through ``record_format_kernels``; the Python paths (append
validation, ``check``, ``dump-log``, the sink's replay) use ``BatchHeader`` and
``verify``. This module imports neither numba nor the compression codecs: driver-side
processes may import it without loading the JIT, and ``compression`` (which takes its
codec ids from here) and ``control_records`` (which reads control batches through both)
sit above it.

Byte layout of a RecordBatch v2 header (big-endian, 61 bytes)::

    0 baseOffset int64 | 8 length int32 (= size - 12) | 12 partitionLeaderEpoch int32
    16 magic int8 (2)  | 17 crc uint32 (CRC-32C of [21, end)) | 21 attributes int16
    23 lastOffsetDelta int32 | 27 baseTimestamp int64 | 35 maxTimestamp int64
    43 producerId int64 | 51 producerEpoch int16 | 53 baseSequence int32
    57 recordsCount int32 | 61 records...

Legacy message sets (magic 0/1) are one "batch" per shallow message::

    0 offset int64 | 8 size int32 | 12 crc uint32 (CRC-32 of [16, end)) | 16 magic int8
    | 17 attributes int8 | [18 timestamp int64 (v1)] | keyLen int32 key | valueLen int32 value

For a compressed wrapper the header knows only the last offset (the wrapper's), so
``base_offset == last_offset`` and ``records_count == -1`` there.

A v2 record (inside the records section; every integer a zigzag LEB128 varint)::

    length | attributes int8 | timestampDelta (varlong) | offsetDelta | keyLen key
    | valueLen value | headerCount | (headerKeyLen headerKey headerValueLen headerValue)*

Thread-safety: pure functions and constants.
"""

from __future__ import annotations

import mmap
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypeAlias

import crc32c as _crc32c

from ..errors import CorruptRecordError

TopicPartition = tuple[str, int]
"""A partition of a topic, as every module keys partitions."""

INT32_MAX = 2**31 - 1
INT64_MAX = LONG_MAX = 2**63 - 1
NO_TIMESTAMP = -1
TIMESTAMP_RULE = ("a timestamp is milliseconds at or after the epoch (>= 0), or -1 for none "
                  "(Kafka's rule)")

# -- RecordBatch v2 header: field offsets (from the batch start) and sizes -----------------
BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16  # the same byte in every magic: read it there to choose the parser
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORDS_COUNT_OFFSET = 57
RECORDS_OFFSET = 61
V2_HEADER_SIZE = RECORDS_OFFSET
LOG_OVERHEAD = 12  # offset + length: the part of every batch not counted in `length`
CRC_START = ATTRIBUTES_OFFSET  # the v2 CRC covers [21, end): not offset, length, epoch, magic
MIN_MAGIC_BYTES = MAGIC_OFFSET + 1  # bytes needed before a batch's format is known

V2_HEADER = struct.Struct(">qiibIhiqqqhii")
assert V2_HEADER.size == V2_HEADER_SIZE

# -- legacy message (magic 0/1) header ----------------------------------------------------
LEGACY_CRC_OFFSET = 12
LEGACY_ATTRIBUTES_OFFSET = 17
LEGACY_TIMESTAMP_OFFSET = 18  # v1 only
LEGACY_KEY_LENGTH_OFFSET_V0 = 18
LEGACY_KEY_LENGTH_OFFSET_V1 = 26
LEGACY_CRC_START = MAGIC_OFFSET  # CRC-32 (IEEE) of [magic, end)
LEGACY_HEADER_SIZE = 18  # offset, size, crc, magic, attributes: enough to read it
LEGACY_MIN_SIZE_V0 = 14  # the `size` field of an empty v0 message (crc..value length)
LEGACY_MIN_SIZE_V1 = 22
LEGACY_MIN_MESSAGE = LOG_OVERHEAD + LEGACY_MIN_SIZE_V0  # the smallest message of any magic

# -- magic values, attribute bits, codecs -------------------------------------------------
MAGIC_V0 = 0
MAGIC_V1 = 1
MAGIC_V2 = 2

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

CODEC_NONE = 0
CODEC_GZIP = 1
CODEC_SNAPPY = 2
CODEC_LZ4 = 3
CODEC_ZSTD = 4
CODEC_NAMES = {CODEC_NONE: "none", CODEC_GZIP: "gzip", CODEC_SNAPPY: "snappy",
               CODEC_LZ4: "lz4", CODEC_ZSTD: "zstd"}

# -- control records (key: version int16 + type int16) -------------------------------------
CONTROL_ABORT = 0
CONTROL_COMMIT = 1
CONTROL_TYPE_NAMES = {0: "ABORT", 1: "COMMIT", 2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER",
                      4: "SNAPSHOT_FOOTER", 5: "KRAFT_VERSION", 6: "KRAFT_VOTERS"}
CONTROL_KEY = struct.Struct(">hh")  # version, type
END_TXN_MARKER_VALUE = struct.Struct(">hi")  # version, coordinatorEpoch

# -- records -------------------------------------------------------------------------------
MIN_RECORD_SIZE = 7  # length, attributes, deltas, key/value lengths, header count
VARINT_MAX_BYTES = 5  # int32 varints (Kafka refuses a sixth byte)
VARLONG_MAX_BYTES = 10

# -- the header table (``record_format_kernels.header_table``): one int64 row per batch --
(H_POSITION, H_SIZE, H_BASE_OFFSET, H_LAST_OFFSET, H_MAGIC, H_ATTRIBUTES, H_BASE_TIMESTAMP,
 H_MAX_TIMESTAMP, H_PRODUCER_ID, H_PRODUCER_EPOCH, H_BASE_SEQUENCE, H_RECORDS_COUNT, H_CRC,
 H_LEADER_EPOCH) = range(14)
HEADER_COLUMNS = 14

# Where a walk over a buffer of batches stopped (the kernel's status).
WALK_END = 0  # the buffer ended, or a partial batch follows (it may continue in the file)
WALK_INVALID = 1  # the batch at the stop position breaks a rule (a reason code says which)
WALK_LEGACY = 2  # a magic 0/1 message at the stop position and the caller asked to stop there
WALK_FULL = 3  # the table is full: call again from the stop position

# Why a batch is invalid (``verify`` and the kernel give the same codes).
OK = 0
PARTIAL = -1  # not a reason: the batch does not fit (yet) in the bytes given
REASON_SIZE = 1
REASON_TOO_LARGE = 2
REASON_OFFSETS = 3
REASON_MAGIC = 4
REASON_COUNT = 5
REASON_CRC = 6
REASONS = {REASON_SIZE: "an impossible batch size",
           REASON_TOO_LARGE: "a batch above max.message.bytes",
           REASON_OFFSETS: "offsets not above the previous batch or outside the segment",
           REASON_MAGIC: "an unknown magic",
           REASON_COUNT: "a negative record count or last offset delta",
           REASON_CRC: "a CRC mismatch"}

_LEGACY_HEAD = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_LEGACY_MIN_SIZE = {MAGIC_V0: LEGACY_MIN_SIZE_V0, MAGIC_V1: LEGACY_MIN_SIZE_V1}
Bytes: TypeAlias = bytes | bytearray | memoryview | mmap.mmap
"""What the byte-level functions read: a file's bytes or a view of them (a numpy array
is passed as its ``.data``)."""

_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")


def crc32c(data: Bytes) -> int:
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

    def with_base_offset(self, base_offset: int) -> BatchHeader:
        """This header with its offsets moved to start at ``base_offset`` (what
        ``set_base_offset`` wrote). Built directly: ``dataclasses.replace`` costs more
        than the rewrite itself, once per batch of every append."""
        return BatchHeader(self.position, base_offset,
                           base_offset + self.last_offset - self.base_offset, self.size,
                           self.magic, self.attributes, self.crc, self.base_timestamp,
                           self.max_timestamp, self.producer_id, self.producer_epoch,
                           self.base_sequence, self.records_count,
                           self.partition_leader_epoch)

    def at_position(self, position: int) -> BatchHeader:
        """This header placed at ``position`` (a file position instead of a buffer's).
        Built directly, as ``with_base_offset``: a scan places every header it reads."""
        return BatchHeader(position, self.base_offset, self.last_offset, self.size,
                           self.magic, self.attributes, self.crc, self.base_timestamp,
                           self.max_timestamp, self.producer_id, self.producer_epoch,
                           self.base_sequence, self.records_count,
                           self.partition_leader_epoch)

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_log_append_time(self) -> bool:
        return self.magic > MAGIC_V0 and bool(self.attributes & TIMESTAMP_TYPE_MASK)

    @property
    def is_transactional(self) -> bool:
        return self.magic == MAGIC_V2 and bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return self.magic == MAGIC_V2 and bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return self.magic == MAGIC_V2 and bool(self.attributes & DELETE_HORIZON_MASK)

    @classmethod
    def from_row(cls, row: list[int]) -> BatchHeader:
        """The header of one row of a header table (``H_*`` columns, as a list)."""
        return cls(row[H_POSITION], row[H_BASE_OFFSET], row[H_LAST_OFFSET], row[H_SIZE],
                   row[H_MAGIC], row[H_ATTRIBUTES], row[H_CRC], row[H_BASE_TIMESTAMP],
                   row[H_MAX_TIMESTAMP], row[H_PRODUCER_ID], row[H_PRODUCER_EPOCH],
                   row[H_BASE_SEQUENCE], row[H_RECORDS_COUNT], row[H_LEADER_EPOCH])


def read_batch_header(buf: Bytes, position: int = 0, limit: int | None = None,
                      file_position: int = 0) -> BatchHeader | None:
    """The header of the batch at ``position``, or None if the batch does not fit in
    ``buf[:limit]`` (a partial tail). Raises CorruptRecordError for impossible headers
    (the rules of ``record_format_kernels.header_table``, which must agree), naming
    positions in the file ``buf`` was read from at ``file_position``."""
    header, code, reason = _parse_header(buf, position, len(buf) if limit is None else limit,
                                         INT64_MAX, file_position)
    if code != OK:
        raise CorruptRecordError(reason)
    return header


def _parse_header(buf: Bytes, position: int, end: int, max_size: int, file_position: int = 0
                  ) -> tuple[BatchHeader | None, int, str]:
    """(header or None when partial, OK or a ``REASON_*``, why). A size above
    ``max_size`` is refused before a partial batch is waited for (a corrupt length
    must not make a reader fetch gigabytes). ``file_position``: where ``buf`` was read
    from, so that a reason names positions in the file."""
    if end - position < MIN_MAGIC_BYTES:
        return None, OK, ""
    magic = buf[position + MAGIC_OFFSET]
    if magic == MAGIC_V2:
        if end - position < V2_HEADER_SIZE:
            return None, OK, ""
        (base, length, epoch, _m, crc, attrs, last_delta, base_ts, max_ts,
         pid, pepoch, seq, count) = V2_HEADER.unpack_from(buf, position)
        size = length + LOG_OVERHEAD
        if size < V2_HEADER_SIZE:
            return None, REASON_SIZE, (f"record batch at position {file_position + position} "
                                       f"has size {size}, below the minimum {V2_HEADER_SIZE}")
        if count < 0 or last_delta < 0:
            return None, REASON_COUNT, (
                f"record batch at position {file_position + position} has a negative record "
                f"count ({count}) or last offset delta ({last_delta})")
        if base > INT64_MAX - last_delta:  # checked without computing the sum
            return None, REASON_OFFSETS, (
                f"record batch at position {file_position + position} has base offset {base} "
                f"and last offset delta {last_delta}: its last offset passes int64")
        if size > max_size:
            return None, REASON_TOO_LARGE, _too_large("record batch", file_position + position,
                                                      size, max_size, end - position)
        if end - position < size:
            return None, OK, ""
        return BatchHeader(position, base, base + last_delta, size, MAGIC_V2, attrs & 0xFFFF,
                           crc, base_ts, max_ts, pid, pepoch, seq, count, epoch), OK, ""
    if magic in (MAGIC_V0, MAGIC_V1):
        if end - position < LEGACY_HEADER_SIZE:
            return None, OK, ""
        offset, length, crc, _m, attrs = _LEGACY_HEAD.unpack_from(buf, position)
        if length < _LEGACY_MIN_SIZE[magic]:
            return None, REASON_SIZE, (
                f"message at position {file_position + position} has size {length}, below the "
                f"minimum {_LEGACY_MIN_SIZE[magic]} for magic {magic}")
        size = length + LOG_OVERHEAD
        if size > max_size:
            return None, REASON_TOO_LARGE, _too_large("message", file_position + position,
                                                      size, max_size, end - position)
        if end - position < size:
            return None, OK, ""
        ts = NO_TIMESTAMP
        if magic == MAGIC_V1:
            (ts,) = _INT64.unpack_from(buf, position + LEGACY_TIMESTAMP_OFFSET)
        count = 1 if attrs & COMPRESSION_MASK == 0 else -1
        return BatchHeader(position, offset, offset, size, magic, attrs & 0xFF, crc,
                           ts, ts, records_count=count), OK, ""
    return None, REASON_MAGIC, f"unknown magic {magic} at position {file_position + position}"


def _too_large(what: str, position: int, size: int, max_size: int, left: int) -> str:
    if size > left:
        # More than there is: not a batch at all (garbage, or a damaged length field).
        return (f"the {left} bytes at position {position} are not a record batch: their "
                f"length field says {size} bytes, more than follow them (and above "
                f"max.message.bytes={max_size})")
    return f"{what} at position {position} is {size} bytes, above max.message.bytes={max_size}"


def iter_batch_headers(buf: Bytes, position: int = 0,
                       limit: int | None = None) -> Iterator[BatchHeader]:
    """Every whole batch from ``position`` on; stops silently at a partial tail."""
    while True:
        header = read_batch_header(buf, position, limit)
        if header is None:
            return
        yield header
        position = header.end_position


def compute_crc(buf: Bytes, header: BatchHeader) -> int:
    """The CRC the header should hold: CRC-32C of [21, end) for v2, CRC-32 of [16, end)
    for a legacy message."""
    if header.magic == MAGIC_V2:
        return crc32c(memoryview(buf)[header.position + CRC_START:header.end_position])
    return zlib.crc32(memoryview(buf)[header.position + LEGACY_CRC_START:header.end_position])


def verify_crc(buf: Bytes, header: BatchHeader) -> None:
    actual = compute_crc(buf, header)
    if actual != header.crc:
        raise CorruptRecordError(
            f"batch at position {header.position} (offsets {header.base_offset}.."
            f"{header.last_offset}) has CRC {actual:#010x}, header says {header.crc:#010x}")


@dataclass(frozen=True, slots=True)
class BatchCheck:
    """What ``verify`` found at a position: ``header`` (None when no header could be
    read), ``code`` (``OK`` or a ``REASON_*``; partial batches are ``OK`` with
    ``partial``) and a ``reason`` naming the position and offsets."""

    header: BatchHeader | None
    code: int = OK
    reason: str = ""
    partial: bool = False

    @property
    def valid(self) -> bool:
        return self.code == OK and not self.partial


def verify(buf: Bytes, position: int = 0, limit: int | None = None, *,
           next_offset: int | None = None, segment_base: int | None = None,
           max_message_bytes: int | None = None, check_crc: bool = True,
           file_position: int = 0) -> BatchCheck:
    """Kafka's rules for the batch at ``position`` of ``buf[:limit]``, any magic: a
    possible header (size, magic, count, last offset within int64), a whole batch
    (else ``partial``), at most ``max_message_bytes``, a base offset at or above
    ``next_offset``, a last offset within 32 bits of ``segment_base``, the CRC.
    Recovery (per legacy message; the kernel applies the same rules to v2 batches),
    ``Log.append``, ``LogManager.check`` and the CLI's ``check`` and ``dump-log`` all
    decide through this function. ``file_position``: where ``buf`` was read from (the
    reasons name positions in the file)."""
    end = len(buf) if limit is None else limit
    h, code, reason = _parse_header(buf, position, end,
                                    INT64_MAX if max_message_bytes is None else max_message_bytes,
                                    file_position)
    if code != OK:
        return BatchCheck(None, code, reason)
    if h is None:
        return BatchCheck(None, OK, _partial(buf, position, end, file_position), partial=True)
    if next_offset is not None and h.base_offset < next_offset:
        return BatchCheck(h, REASON_OFFSETS, f"{_where(h, file_position)} starts at offset "
                          f"{h.base_offset}, below {next_offset}")
    if segment_base is not None and h.last_offset - segment_base > INT32_MAX:
        return BatchCheck(h, REASON_OFFSETS, f"{_where(h, file_position)} ends more than "
                          f"{INT32_MAX} offsets above the segment's base {segment_base}")
    if check_crc:
        actual = compute_crc(buf, h)
        if actual != h.crc:
            return BatchCheck(h, REASON_CRC, f"{_where(h, file_position)} has a bad CRC: "
                              f"{actual:#010x}, its header says {h.crc:#010x}")
    return BatchCheck(h)


def _partial(buf: Bytes, position: int, end: int, file_position: int) -> str:
    """Why the bytes at ``position`` are no whole batch: what their length field claims,
    when there is one, against what follows."""
    left = end - position
    at = file_position + position
    if left < LOG_OVERHEAD:
        return f"{left} trailing bytes at position {at} (too few for a batch header)"
    (length,) = _INT32.unpack_from(buf, position + LENGTH_OFFSET)
    return (f"{left} trailing bytes at position {at} are no whole batch: their length field "
            f"says {length + LOG_OVERHEAD} bytes (a batch cut short, or bytes that are no "
            f"batch)")


def _where(h: BatchHeader, file_position: int = 0) -> str:
    # Built only for a batch that breaks a rule: a valid one (every batch of every
    # append) need not pay for the words.
    return (f"batch at position {file_position + h.position} (offsets "
            f"{h.base_offset}..{h.last_offset})")


def verify_all(buf: Bytes, position: int = 0, limit: int | None = None, *,
               next_offset: int | None = None, segment_base: int | None = None,
               check_crc: bool = True) -> Iterator[BatchCheck]:
    """``verify`` for every batch of ``buf[position:limit]`` in turn, each expected above
    the previous one's last offset. A batch with a readable header moves on past it
    even when it breaks a rule (a report names every bad batch); an unreadable header
    or a partial batch is the last check yielded."""
    end = len(buf) if limit is None else limit
    while position < end:
        check = verify(buf, position, end, next_offset=next_offset,
                       segment_base=segment_base, check_crc=check_crc)
        yield check
        h = check.header
        if h is None:
            return
        position = h.end_position
        next_offset = None if next_offset is None else max(next_offset, h.next_offset)


# -- the rewrites a log may make ------------------------------------------------------------

def restamp_crc(buf: bytearray | memoryview, position: int, end: int) -> None:
    """Store the CRC-32C of ``buf[position + 21:end]`` in the v2 batch at ``position``:
    after any change to the bytes it covers (attributes onwards)."""
    _UINT32.pack_into(buf, position + CRC_OFFSET,
                      crc32c(memoryview(buf)[position + CRC_START:end]))


def set_base_offset(buf: bytearray | memoryview, position: int, base_offset: int) -> None:
    """Rewrite a v2 batch's base offset in place; the CRC does not cover it."""
    _INT64.pack_into(buf, position + BASE_OFFSET_OFFSET, base_offset)


def set_length(buf: bytearray | memoryview, position: int, size: int) -> None:
    """Store a batch's ``length`` field for a batch of ``size`` bytes in all."""
    _INT32.pack_into(buf, position + LENGTH_OFFSET, size - LOG_OVERHEAD)


def stamp_log_append_time(buf: bytearray | memoryview, header: BatchHeader, now_ms: int) -> None:
    """Make a v2 batch LogAppendTime with ``maxTimestamp = now_ms`` and recompute its CRC
    (attributes and maxTimestamp are covered by it)."""
    pos = header.position
    _INT16.pack_into(buf, pos + ATTRIBUTES_OFFSET, header.attributes | TIMESTAMP_TYPE_MASK)
    _INT64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, now_ms)
    restamp_crc(buf, pos, header.end_position)


# -- record varints read in Python (``control_records``: a few records per transaction) --

def read_varint(buf: Bytes, pos: int, end: int,
                max_bytes: int = VARINT_MAX_BYTES) -> tuple[int, int]:
    """The zigzag LEB128 varint at ``pos`` (at most ``max_bytes`` bytes, ending by
    ``end``) and the position after it. Raises ValueError past ``end`` or too long."""
    shift = result = 0
    for _ in range(max_bytes):
        if pos >= end:
            raise ValueError(f"a varint runs past byte {end}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
    raise ValueError(f"a varint longer than {max_bytes} bytes ends at byte {pos}")
