"""The producer batches a recovery walk validated, kept so producer state is rebuilt
without reading the segment a second time (Kafka's ``LogSegment.recover`` feeds its
``ProducerStateManager`` from the batches it checks, in the same pass).

``LogSegment.recover`` hands every chunk's header table of valid batches (the rows the
CRC check passed, ``record_format.H_*`` columns) to a ``ProducerBatchCollector``; it
keeps the v2 rows with a producer id, with file positions, and parses the marker of each
control batch while the chunk is in memory. ``LogLoader`` then gives the resulting
``RecoveredBatches`` to ``transactions.Transactions.advance``, which applies them in
offset order instead of scanning the file (``transactions.replay_recovered``).

Memory is bounded: a plain (non-transactional) data batch whose producer's next batch in
the segment is a data batch is dropped, because that batch overwrites every field the
dropped one set (``ProducerStateManager.append_batch``), so an idempotent producer costs
a row per segment, not a row per batch. Transactional batches and markers are all kept.
Past ``max_rows`` rows kept (counted after that reduction) the collector gives up
(``result()`` is None) and the loader reads the segment again, as without a collector.

A control record that fails to parse is not raised during recovery (the batch's CRC
holds, so recovery keeps it): it is kept and raised when the batch is applied, as a scan
of the file would.

Not thread-safe: one collector belongs to one segment's recovery.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePath

import numpy as np

from ..errors import CorruptRecordError
from ..records.control_records import ControlRecord
from ..records.record_format import (
    CONTROL_MASK,
    H_ATTRIBUTES,
    H_MAGIC,
    H_POSITION,
    H_PRODUCER_ID,
    HEADER_COLUMNS,
    MAGIC_V2,
    TRANSACTIONAL_MASK,
    BatchHeader,
)
from .producer_state import read_control_marker

MAX_ROWS = 1 << 18
"""Rows a loader keeps over all the segments it recovers (~29 MB of int64 rows)."""


@dataclass(frozen=True, slots=True)
class RecoveredBatches:
    """What recovery saw of one segment: ``rows`` (header-table rows in offset order,
    positions in the file) of the v2 batches with a producer id that producer state
    needs, the marker (or the parse error) of each control batch by base offset, and
    ``next_offset``, the offset after the segment's last valid batch."""

    log_path: PurePath
    rows: np.ndarray
    markers: Mapping[int, ControlRecord | CorruptRecordError]
    next_offset: int

    def marker(self, h: BatchHeader) -> ControlRecord:
        """The marker of the control batch ``h``; raises what parsing it raised."""
        found = self.markers[h.base_offset]
        if isinstance(found, CorruptRecordError):
            raise found
        return found


class ProducerBatchCollector:
    """Gathers ``RecoveredBatches`` from the chunks of one recovery (module docstring)."""

    def __init__(self, log_path: PurePath, max_rows: int = MAX_ROWS) -> None:
        self.log_path = log_path
        self.max_rows = max_rows
        self._parts: list[np.ndarray] = []
        self._count = 0
        self._reduced = 0  # rows after the last reduction
        self._markers: dict[int, ControlRecord | CorruptRecordError] = {}
        self._next_offset: int | None = None
        self.overflowed = False

    def add(self, buf: np.ndarray, rows: np.ndarray, chunk_pos: int) -> None:
        """Keep what producer state needs of ``rows`` (valid batches of ``buf``, a chunk
        read at file position ``chunk_pos``)."""
        if self.overflowed:
            return
        found = rows[(rows[:, H_MAGIC] == MAGIC_V2) & (rows[:, H_PRODUCER_ID] >= 0)]
        if not len(found):
            return
        found = found.copy()  # the caller reuses its table
        for k in np.flatnonzero(found[:, H_ATTRIBUTES] & CONTROL_MASK).tolist():
            h = BatchHeader.from_row(found[k].tolist())
            try:
                self._markers[h.base_offset] = read_control_marker(buf.data, h)
            except CorruptRecordError as e:
                self._markers[h.base_offset] = CorruptRecordError(
                    f"{self.log_path} (batch at position {chunk_pos + h.position}): {e}")
        found[:, H_POSITION] += chunk_pos
        self._parts.append(found)
        self._count += len(found)
        # Reducing is amortised (when the rows doubled), and always done before giving up:
        # the bound is on the rows kept, and an idempotent producer's reduce to one.
        if self._count > 2 * self._reduced + 1024 or self._count > self.max_rows:
            kept = drop_overwritten(np.concatenate(self._parts))
            self._parts = [kept]
            self._count = self._reduced = len(kept)
        if self._count > self.max_rows:
            self.overflowed = True
            self._parts = []
            self._markers = {}

    def finish(self, next_offset: int) -> None:
        """Recovery ended; ``next_offset`` follows the last valid batch."""
        self._next_offset = next_offset

    def result(self) -> RecoveredBatches | None:
        """The batches, or None when the collector gave up or recovery did not finish."""
        if self.overflowed or self._next_offset is None:
            return None
        rows = (drop_overwritten(np.concatenate(self._parts)) if self._parts
                else np.empty((0, HEADER_COLUMNS), np.int64))
        return RecoveredBatches(self.log_path, rows, dict(self._markers), self._next_offset)


def drop_overwritten(rows: np.ndarray) -> np.ndarray:
    """``rows`` (offset order) without each plain data batch whose producer's next row
    is a data batch: that row sets every field the dropped one set, and a plain batch
    starts no transaction (module docstring)."""
    if len(rows) < 2:
        return rows
    pids = rows[:, H_PRODUCER_ID]
    attrs = rows[:, H_ATTRIBUTES]
    data = (attrs & CONTROL_MASK) == 0
    plain = data & ((attrs & TRANSACTIONAL_MASK) == 0)
    order = np.argsort(pids, kind="stable")  # per producer, still in offset order
    same_next = pids[order[:-1]] == pids[order[1:]]
    drop = plain[order[:-1]] & same_next & data[order[1:]]
    keep = np.ones(len(rows), bool)
    keep[order[:-1][drop]] = False
    return rows[keep]

