"""Producer state of one partition (Kafka's ``ProducerStateManager``), and its snapshots.

What it tracks, from batch headers only: per producer id the last data batch (epoch,
last sequence, last offset, offset delta, max timestamp), the coordinator epoch of the
last transaction marker, and the first offset of the producer's ongoing transaction.
From that follow the two things reads need: the **first unstable offset** (the first
offset of the earliest ongoing transaction, which bounds the last stable offset) and, when
a control batch ends a transaction, a ``CompletedTxn`` whose aborted form is a
``.txnindex`` entry.

Kafka's rules, kept exactly:

- A transactional data batch starts a transaction at its base offset if its producer has
  none ongoing; later batches of the producer join it.
- A COMMIT/ABORT control batch completes the producer's ongoing transaction at the
  marker's offset (``last_offset``); a marker without an ongoing transaction completes
  nothing. The ``.txnindex`` entry of an aborted transaction stores the *last stable
  offset* at that moment: the first offset of the earliest other ongoing transaction, or
  the marker's offset + 1 when there is none. ``Log.append`` computes it after all
  batches of one append started their transactions (Kafka updates the state for the
  whole append first), completing transactions in marker order.
- Producers never expire here (Kafka's ``producer.id.expiration.ms`` matters to
  idempotent deduplication, which seglog does not do).

Snapshot file ``<20-digit offset>.snapshot`` (Kafka's format, version 1, big-endian)::

    version int16 (1) | crc uint32 (CRC-32C of everything after it)
    entry count int32 | entries, 46 bytes each:
      producerId int64 | epoch int16 | lastSequence int32 | lastOffset int64
      offsetDelta int32 | timestamp int64 | coordinatorEpoch int32
      currentTxnFirstOffset int64 (-1: none)

A snapshot holds the state of every offset below its name's offset. Crash policy:
written to a temporary file, fsynced and renamed, so a snapshot is whole or absent; one
that fails its CRC or layout is evidence of damage (``CorruptSnapshotError``): loaders
skip it and rebuild the state from an older snapshot or the log start, never from
"nothing". Not thread-safe: the ``Log`` that owns an instance serialises its use.
"""

from __future__ import annotations

import bisect
import logging
import struct
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import CorruptRecordError, SeglogError
from ..records.control_records import ControlRecord, control_records
from ..records.record_format import CONTROL_ABORT, CONTROL_COMMIT, BatchHeader, Bytes, crc32c
from ..storage.checkpoint_file import write_atomically
from ..storage.file_names import SNAPSHOT_SUFFIX, offset_file_name, parse_segment_file_name
from ..storage.storage import LOCAL, Storage

logger = logging.getLogger(__name__)

SNAPSHOT_VERSION = 1
_SNAPSHOT_HEAD = struct.Struct(">hIi")  # version, crc, entry count
_SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")


class CorruptSnapshotError(SeglogError):
    """A producer snapshot file fails its CRC or layout check."""


@dataclass(frozen=True, slots=True)
class ProducerEntry:
    """What a snapshot keeps per producer (Kafka's ``ProducerStateEntry``)."""

    producer_id: int
    epoch: int = -1
    last_sequence: int = -1
    last_offset: int = -1  # last offset of the producer's last data batch
    offset_delta: int = 0
    timestamp: int = -1
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1  # -1: no ongoing transaction


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction ended by a marker at ``last_offset``; it began at ``first_offset``."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


def read_control_marker(buf: Bytes, h: BatchHeader) -> ControlRecord:
    """The first record of the control batch ``h`` within ``buf``: its type and, for
    ABORT/COMMIT, the coordinator epoch. Raises CorruptRecordError naming the batch when
    the record is malformed or missing."""
    for record in control_records(buf, h):
        return record
    raise CorruptRecordError(f"control batch at position {h.position} (offset "
                             f"{h.base_offset}) holds no control record")


class ProducerStateManager:
    """Producers and ongoing transactions of one partition; see the module docstring.

    ``map_end_offset`` is the offset up to which batches were applied."""

    def __init__(self, map_end_offset: int = 0,
                 entries: Iterable[ProducerEntry] = ()) -> None:
        self.map_end_offset = map_end_offset
        self._producers: dict[int, ProducerEntry] = {}
        # first offset -> producer id of every ongoing transaction, kept sortable
        self._ongoing: dict[int, int] = {}
        self._ongoing_firsts: list[int] = []  # sorted keys of _ongoing
        for e in entries:
            self._producers[e.producer_id] = e
            if e.current_txn_first_offset >= 0:
                self._start(e.current_txn_first_offset, e.producer_id)

    # -- queries --------------------------------------------------------------------------

    @property
    def producers(self) -> dict[int, ProducerEntry]:
        return dict(self._producers)

    def ongoing_txns(self) -> list[tuple[int, int]]:
        """(first offset, producer id) of every ongoing transaction, earliest first."""
        return [(f, self._ongoing[f]) for f in self._ongoing_firsts]

    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest ongoing transaction, or None. Safe against
        a concurrent update (it reads the list once through an iterator)."""
        return next(iter(self._ongoing_firsts), None)

    def last_stable_offset(self, txn: CompletedTxn) -> int:
        """What Kafka stores in the ``.txnindex`` entry of ``txn`` (not yet completed)."""
        for first in self._ongoing_firsts:
            if self._ongoing[first] != txn.producer_id:
                return first
        return txn.last_offset + 1

    def copy(self) -> ProducerStateManager:
        return ProducerStateManager(self.map_end_offset, self._producers.values())

    # -- updates --------------------------------------------------------------------------

    def _start(self, first: int, producer_id: int) -> None:
        if first not in self._ongoing:
            bisect.insort(self._ongoing_firsts, first)
        self._ongoing[first] = producer_id

    def append_batch(self, h: BatchHeader, marker: ControlRecord | None = None
                     ) -> CompletedTxn | None:
        """Apply one v2 batch with a producer id (``marker`` for a control batch).

        Returns the transaction a COMMIT/ABORT marker completes (still counted as ongoing
        until ``complete_txn``, as in Kafka), else None."""
        self.map_end_offset = max(self.map_end_offset, h.last_offset + 1)
        pid = h.producer_id
        if pid < 0 or h.magic != 2:
            return None
        entry = self._producers.get(pid) or ProducerEntry(pid)
        if h.is_control:
            if marker is None or marker.control_type not in (CONTROL_ABORT, CONTROL_COMMIT):
                self._producers[pid] = replace(entry, epoch=h.producer_epoch)
                return None
            completed = None
            if entry.current_txn_first_offset >= 0:
                completed = CompletedTxn(pid, entry.current_txn_first_offset, h.base_offset,
                                         marker.control_type == CONTROL_ABORT)
            self._producers[pid] = replace(
                entry, epoch=h.producer_epoch, coordinator_epoch=marker.coordinator_epoch,
                timestamp=h.max_timestamp, current_txn_first_offset=-1)
            return completed
        first = entry.current_txn_first_offset
        if h.is_transactional and first < 0:
            first = h.base_offset
            self._start(first, pid)
        last_seq = (h.base_sequence + h.last_offset - h.base_offset
                    if h.base_sequence >= 0 else -1)
        if last_seq > 2**31 - 1:
            last_seq -= 2**31  # sequences wrap at Int32.MAX, as Kafka's do
        self._producers[pid] = replace(
            entry, epoch=h.producer_epoch, last_sequence=last_seq, last_offset=h.last_offset,
            offset_delta=h.last_offset - h.base_offset, timestamp=h.max_timestamp,
            current_txn_first_offset=first)
        return None

    def complete_txn(self, txn: CompletedTxn) -> None:
        """Forget the ongoing transaction ``txn`` ended (after its index entry is written)."""
        if self._ongoing.get(txn.first_offset) == txn.producer_id:
            del self._ongoing[txn.first_offset]
            self._ongoing_firsts.remove(txn.first_offset)

    # -- snapshots ------------------------------------------------------------------------

    def snapshot_bytes(self) -> bytes:
        entries = sorted(self._producers.values(), key=lambda e: e.producer_id)
        body = bytearray(_SNAPSHOT_ENTRY.size * len(entries) + 4)
        struct.pack_into(">i", body, 0, len(entries))
        for i, e in enumerate(entries):
            _SNAPSHOT_ENTRY.pack_into(body, 4 + i * _SNAPSHOT_ENTRY.size, e.producer_id, e.epoch,
                                      e.last_sequence, e.last_offset, e.offset_delta,
                                      e.timestamp, e.coordinator_epoch,
                                      e.current_txn_first_offset)
        return struct.pack(">hI", SNAPSHOT_VERSION, crc32c(body)) + bytes(body)

    def take_snapshot(self, dir_: Path) -> Path:
        """Write ``<map end offset>.snapshot`` (atomically, fsynced); returns its path."""
        path = snapshot_file(dir_, self.map_end_offset)
        write_atomically(path, self.snapshot_bytes())
        return path


def snapshot_file(dir_: Path, offset: int) -> Path:
    return Path(dir_) / offset_file_name(offset, SNAPSHOT_SUFFIX)


def list_snapshot_offsets(dir_: Path, names: Iterable[str] | None = None) -> list[int]:
    """Offsets of the ``.snapshot`` files in ``dir_`` (no temporary suffix), sorted."""
    if names is None:
        try:
            names = LOCAL.list_names(dir_)
        except FileNotFoundError:
            return []
    out = []
    for name in names:
        parsed = parse_segment_file_name(name)
        if parsed is not None and parsed[1] == SNAPSHOT_SUFFIX and not parsed[2]:
            out.append(parsed[0])
    return sorted(out)


def parse_snapshot(data: bytes, path: Path) -> list[ProducerEntry]:
    """The entries of a snapshot file's bytes; CorruptSnapshotError names ``path``."""
    if len(data) < _SNAPSHOT_HEAD.size:
        raise CorruptSnapshotError(f"producer snapshot {path} has {len(data)} bytes, fewer "
                                   f"than its {_SNAPSHOT_HEAD.size}-byte header")
    version, crc, count = _SNAPSHOT_HEAD.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"producer snapshot {path} has unknown version {version}")
    actual = crc32c(memoryview(data)[6:])
    if actual != crc:
        raise CorruptSnapshotError(f"producer snapshot {path} has CRC {actual:#010x}, its "
                                   f"header says {crc:#010x}")
    if count < 0 or len(data) != _SNAPSHOT_HEAD.size + count * _SNAPSHOT_ENTRY.size:
        raise CorruptSnapshotError(f"producer snapshot {path} claims {count} entries in "
                                   f"{len(data)} bytes")
    return [ProducerEntry(*entry) for entry in
            _SNAPSHOT_ENTRY.iter_unpack(memoryview(data)[_SNAPSHOT_HEAD.size:])]


def read_snapshot(path: Path, offset: int, storage: Storage = LOCAL) -> ProducerStateManager:
    """The state a snapshot file holds (``map_end_offset`` = ``offset``)."""
    try:
        data = storage.read(path)
    except OSError as e:
        raise CorruptSnapshotError(f"cannot read producer snapshot {path}: {e}") from e
    return ProducerStateManager(offset, parse_snapshot(data, path))
