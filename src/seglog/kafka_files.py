"""The Kafka files ``seglog dump-log`` prints besides segments, read as Kafka's
``kafka-dump-log`` reads them (small parsers: the engine never needs these files).

* ``<offset>.snapshot``: producer state (Kafka's ``ProducerStateManager``): version int16
  (1), crc uint32 (CRC-32C of every byte after it), an int32 count, then per producer
  producerId int64, epoch int16, lastSequence int32, lastOffset int64, offsetDelta int32,
  timestamp int64, coordinatorEpoch int32, currentTxnFirstOffset int64 (-1: none).
* ``<offset>.txnindex``: aborted transactions, 34-byte entries: version int16,
  producerId, firstOffset, lastOffset, lastStableOffset int64.
* KRaft snapshots ``<20-digit end offset>-<10-digit epoch>.checkpoint`` and
  ``bootstrap.checkpoint``: record batches, dumped as a ``.log`` is.
* Control records (key: version int16 + type int16); ABORT/COMMIT values are version
  int16 + coordinatorEpoch int32 (Kafka's ``EndTransactionMarker``).

Every parser raises ``CorruptRecordError`` naming the file or batch when the bytes do not
fit the format: a damaged file is reported, never read as empty.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from seglog.logstore.compression import decompress
from seglog.logstore.errors import CorruptRecordError
from seglog.logstore.file_names import KRAFT_BOOTSTRAP_FILE
from seglog.logstore.record_format import V2_HEADER_SIZE, BatchHeader, crc32c

BOOTSTRAP_SNAPSHOT = KRAFT_BOOTSTRAP_FILE
KRAFT_SNAPSHOT_SUFFIX = ".checkpoint"
_KRAFT_SNAPSHOT_RE = re.compile(r"^(?P<offset>\d{20})-(?P<epoch>\d{10})\.checkpoint$")

CONTROL_TYPES = {0: "ABORT", 1: "COMMIT", 2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER",
                 4: "SNAPSHOT_FOOTER", 5: "KRAFT_VERSION", 6: "KRAFT_VOTERS"}

_SNAPSHOT_HEAD = struct.Struct(">hIi")
_SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")
_TXN_ENTRY = struct.Struct(">hqqqq")


def parse_kraft_snapshot_name(name: str) -> tuple[int, int] | None:
    """``"00000000000000000100-0000000003.checkpoint"`` → ``(100, 3)`` (end offset,
    epoch); None for other names."""
    m = _KRAFT_SNAPSHOT_RE.match(name)
    return (int(m["offset"]), int(m["epoch"])) if m else None


@dataclass(frozen=True, slots=True)
class ProducerSnapshotEntry:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int


def read_producer_snapshot(path: Path) -> list[ProducerSnapshotEntry]:
    """The entries of a producer-state ``.snapshot`` file (CRC and length checked)."""
    raw = path.read_bytes()
    if len(raw) < _SNAPSHOT_HEAD.size:
        raise CorruptRecordError(f"producer snapshot {path} has {len(raw)} bytes, fewer "
                                 f"than its {_SNAPSHOT_HEAD.size}-byte header")
    version, crc, count = _SNAPSHOT_HEAD.unpack_from(raw)
    if version != 1:
        raise CorruptRecordError(f"producer snapshot {path} has unknown version {version}")
    actual = crc32c(raw[6:])
    if actual != crc:
        raise CorruptRecordError(f"producer snapshot {path} is corrupt: stored CRC {crc}, "
                                 f"computed {actual}")
    if count < 0 or len(raw) != _SNAPSHOT_HEAD.size + count * _SNAPSHOT_ENTRY.size:
        raise CorruptRecordError(f"producer snapshot {path} declares {count} entries but "
                                 f"holds {len(raw) - _SNAPSHOT_HEAD.size} bytes of them")
    return [ProducerSnapshotEntry(*_SNAPSHOT_ENTRY.unpack_from(raw, _SNAPSHOT_HEAD.size + i *
                                                               _SNAPSHOT_ENTRY.size))
            for i in range(count)]


def format_producer_snapshot_entry(e: ProducerSnapshotEntry) -> str:
    """One line as ``kafka-dump-log`` prints it (batch metadata only when the producer
    has a last offset)."""
    line = (f"producerId: {e.producer_id} producerEpoch: {e.producer_epoch} "
            f"coordinatorEpoch: {e.coordinator_epoch} "
            f"currentTxnFirstOffset: {e.current_txn_first_offset} "
            f"lastTimestamp: {e.timestamp}")
    if e.last_offset >= 0:
        first_seq = e.last_sequence - e.offset_delta
        if first_seq < 0:  # sequences wrap at int32 max, as Kafka's decrementSequence does
            first_seq += 2**31
        line += (f" firstSequence: {first_seq} lastSequence: {e.last_sequence} "
                 f"lastOffset: {e.last_offset} offsetDelta: {e.offset_delta} "
                 f"timestamp: {e.timestamp}")
    return line


def read_txn_index(path: Path) -> list[tuple[int, int, int, int, int]]:
    """(version, producerId, firstOffset, lastOffset, lastStableOffset) per entry."""
    raw = path.read_bytes()
    if len(raw) % _TXN_ENTRY.size:
        raise CorruptRecordError(f"transaction index {path} has length {len(raw)}, not a "
                                 f"multiple of {_TXN_ENTRY.size}")
    return [_TXN_ENTRY.unpack_from(raw, i) for i in range(0, len(raw), _TXN_ENTRY.size)]


def _varint(buf: bytes, pos: int, where: str) -> tuple[int, int]:
    shift = value = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise CorruptRecordError(f"{where}: a varint runs past its record")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return (value >> 1) ^ -(value & 1), pos


@dataclass(frozen=True, slots=True)
class ControlRecord:
    offset: int
    timestamp: int
    control_type: int
    key: bytes
    value: bytes | None


def control_records(buf, h: BatchHeader) -> Iterator[ControlRecord]:
    """The records of control batch ``h`` in ``buf`` (a v2 batch with the control bit)."""
    where = f"control batch at position {h.position} (offsets {h.base_offset}..{h.last_offset})"
    body = bytes(buf[h.position + V2_HEADER_SIZE:h.end_position])
    if h.compression:
        body = decompress(h.compression, body)
    pos = 0
    for _ in range(h.records_count):
        length, pos = _varint(body, pos, where)
        end = pos + length
        if length < 0 or end > len(body):
            raise CorruptRecordError(f"{where}: a record of {length} bytes runs past the batch")
        pos += 1  # attributes
        ts_delta, pos = _varint(body, pos, where)
        offset_delta, pos = _varint(body, pos, where)
        key_len, pos = _varint(body, pos, where)
        key = body[pos:pos + max(key_len, 0)]
        pos += max(key_len, 0)
        value_len, pos = _varint(body, pos, where)
        value = body[pos:pos + value_len] if value_len >= 0 else None
        if len(key) < 4 or pos + max(value_len, 0) > end:
            raise CorruptRecordError(f"{where}: record at offset delta {offset_delta} has no "
                                     "4-byte control key or runs past its length")
        yield ControlRecord(h.base_offset + offset_delta, h.base_timestamp + ts_delta,
                            struct.unpack_from(">h", key, 2)[0], key, value)
        pos = end


def format_control_record(r: ControlRecord) -> str:
    """What ``kafka-dump-log`` adds to a control record's line."""
    name = CONTROL_TYPES.get(r.control_type, "UNKNOWN")
    if r.control_type in (0, 1) and r.value is not None and len(r.value) >= 6:
        return f"endTxnMarker: {name} coordinatorEpoch: {struct.unpack_from('>i', r.value, 2)[0]}"
    return f"controlType: {name}({r.control_type})"
