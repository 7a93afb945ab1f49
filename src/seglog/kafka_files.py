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
* Control records (parsed by ``control_records.control_records``) as the tool prints them.

Every parser raises ``CorruptRecordError`` naming the file or batch when the bytes do not
fit the format: a damaged file is reported, never read as empty.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

from seglog.logstore.errors import CorruptRecordError
from seglog.logstore.log.producer_state import CorruptSnapshotError, ProducerEntry, parse_snapshot
from seglog.logstore.records.control_records import ControlRecord, control_records
from seglog.logstore.records.record_format import CONTROL_ABORT, CONTROL_COMMIT, CONTROL_TYPE_NAMES
from seglog.logstore.storage.file_names import KRAFT_BOOTSTRAP_FILE

BOOTSTRAP_SNAPSHOT = KRAFT_BOOTSTRAP_FILE
KRAFT_SNAPSHOT_SUFFIX = ".checkpoint"
_KRAFT_SNAPSHOT_RE = re.compile(r"^(?P<offset>\d{20})-(?P<epoch>\d{10})\.checkpoint$")

__all__ = ["ControlRecord", "control_record_json", "control_records", "first_sequence",
           "format_control_record", "producer_snapshot_entry_json",
           "read_producer_snapshot", "read_txn_index", "parse_kraft_snapshot_name"]

_TXN_ENTRY = struct.Struct(">hqqqq")


def parse_kraft_snapshot_name(name: str) -> tuple[int, int] | None:
    """``"00000000000000000100-0000000003.checkpoint"`` → ``(100, 3)`` (end offset,
    epoch); None for other names."""
    m = _KRAFT_SNAPSHOT_RE.match(name)
    return (int(m["offset"]), int(m["epoch"])) if m else None


def read_producer_snapshot(path: Path) -> list[ProducerEntry]:
    """The entries of a producer-state ``.snapshot`` file (CRC and length checked, as
    the engine checks them: ``producer_state.parse_snapshot``)."""
    try:
        return parse_snapshot(path.read_bytes(), path)
    except CorruptSnapshotError as e:
        raise CorruptRecordError(str(e)) from None


def format_producer_snapshot_entry(e: ProducerEntry) -> str:
    """One line as ``kafka-dump-log`` prints it (batch metadata only when the producer
    has a last offset)."""
    line = (f"producerId: {e.producer_id} producerEpoch: {e.epoch} "
            f"coordinatorEpoch: {e.coordinator_epoch} "
            f"currentTxnFirstOffset: {e.current_txn_first_offset} "
            f"lastTimestamp: {e.timestamp}")
    if e.last_offset >= 0:
        line += (f" firstSequence: {first_sequence(e)} lastSequence: {e.last_sequence} "
                 f"lastOffset: {e.last_offset} offsetDelta: {e.offset_delta} "
                 f"timestamp: {e.timestamp}")
    return line


def first_sequence(e: ProducerEntry) -> int:
    """The first sequence of the producer's last batch (wrapping at int32 max, as Kafka's
    ``decrementSequence`` does)."""
    first = e.last_sequence - e.offset_delta
    return first + 2**31 if first < 0 else first


def producer_snapshot_entry_json(e: ProducerEntry) -> dict[str, int]:
    """The fields ``format_producer_snapshot_entry`` prints, as JSON (batch metadata
    only when the producer has a last offset)."""
    doc = {"producerId": e.producer_id, "producerEpoch": e.epoch,
           "coordinatorEpoch": e.coordinator_epoch,
           "currentTxnFirstOffset": e.current_txn_first_offset, "lastTimestamp": e.timestamp}
    if e.last_offset >= 0:
        doc |= {"firstSequence": first_sequence(e), "lastSequence": e.last_sequence,
                "lastOffset": e.last_offset, "offsetDelta": e.offset_delta,
                "timestamp": e.timestamp}
    return doc


def control_record_json(r: ControlRecord) -> dict[str, int | str]:
    """What ``format_control_record`` prints, as JSON."""
    doc: dict[str, int | str] = {
        "controlType": CONTROL_TYPE_NAMES.get(r.control_type, "UNKNOWN"),
        "controlTypeId": r.control_type}
    if r.control_type in (CONTROL_ABORT, CONTROL_COMMIT) and r.coordinator_epoch >= 0:
        doc["coordinatorEpoch"] = r.coordinator_epoch
    return doc


def read_txn_index(path: Path) -> list[tuple[int, int, int, int, int]]:
    """(version, producerId, firstOffset, lastOffset, lastStableOffset) per entry."""
    raw = path.read_bytes()
    if len(raw) % _TXN_ENTRY.size:
        raise CorruptRecordError(f"transaction index {path} has length {len(raw)}, not a "
                                 f"multiple of {_TXN_ENTRY.size}")
    return [_TXN_ENTRY.unpack_from(raw, i) for i in range(0, len(raw), _TXN_ENTRY.size)]


def format_control_record(r: ControlRecord) -> str:
    """What ``kafka-dump-log`` adds to a control record's line."""
    name = CONTROL_TYPE_NAMES.get(r.control_type, "UNKNOWN")
    if r.control_type in (CONTROL_ABORT, CONTROL_COMMIT) and r.coordinator_epoch >= 0:
        return f"endTxnMarker: {name} coordinatorEpoch: {r.coordinator_epoch}"
    return f"controlType: {name}({r.control_type})"
