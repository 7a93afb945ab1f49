"""Checking whole batches and indexing them as Kafka's ``LogSegment`` does, for a segment
whose indexes are rebuilt from its batches rather than appended to one at a time.

Two users feed it buffers of consecutive batches with their file position:
``LogSegment.recover`` (chunks read back from the ``.log``) and the cleaner (its output,
before it is written, so the cleaned segment is never read back). Per buffer, three
kernels run: the header walk (``record_format_kernels.header_table``: sizes,
``max.message.bytes``, offsets increasing and within 32 bits of the base), the CRCs
(``segment_scan``), and the index rule. Recovery's offsets are judged instead by the
rules readers apply (``offset_continuity.ContinuityCheck.table``). Legacy magic 0/1
messages are checked by the caller (``record_format.verify``) and added one by one (``add_batch``).

Not thread-safe: one indexer belongs to one rebuild.

>>> ix = SegmentIndexer(base_offset=0, index_interval_bytes=4096,  # doctest: +SKIP
...                     max_message_bytes=1 << 20, max_entries=(1 << 17, 1 << 17))
>>> end, status, reason = ix.scan(chunk, n, chunk_pos=0)  # doctest: +SKIP
>>> segment.adopt_indexes(ix)  # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..records import segment_scan
from ..records.record_format import (
    H_CRC,
    H_LAST_OFFSET,
    H_MAX_TIMESTAMP,
    H_POSITION,
    H_SIZE,
    HEADER_COLUMNS,
    NO_TIMESTAMP,
    REASON_CRC,
    REASONS,
    WALK_FULL,
    WALK_INVALID,
)
from ..records.record_format_kernels import header_table

if TYPE_CHECKING:
    from .offset_continuity import ContinuityCheck
    from .recovered_batches import ProducerBatchCollector

SCAN_CAPACITY = 65_536
"""Batches per header-walk kernel call."""


class SegmentIndexer:
    """Validates batches in file order and gathers the segment's index entries.

    ``next_offset`` is the offset the next batch must reach above, ``valid_end`` the file
    position after the last valid batch, ``first_timestamp`` the first batch's max
    timestamp (the segment's rolling timestamp). ``max_entries`` caps the offset and
    time index entries (their files' capacity)."""

    def __init__(self, base_offset: int, index_interval_bytes: int, max_message_bytes: int,
                 max_entries: tuple[int, int], scan_capacity: int = SCAN_CAPACITY) -> None:
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.max_message_bytes = max_message_bytes
        self.next_offset = base_offset
        self.valid_end = 0
        self.first_timestamp: int | None = None
        self._max_entries = max_entries
        self._batches = np.empty((scan_capacity, HEADER_COLUMNS), np.int64)
        # Grown on demand: a segment's entries are usually a small part of its index
        # file's capacity (10 MiB by default, 20 MiB here as int64 pairs).
        self._oidx = np.empty((0, 2), np.int64)
        self._tidx = np.empty((0, 2), np.int64)
        # since last entry, max ts, its offset, offset entries, time entries, last entry ts
        self._state = np.array([0, NO_TIMESTAMP, base_offset, 0, 0, NO_TIMESTAMP], np.int64)
        # Recovery sets it: the valid batches' rows also feed producer state
        self.producers: ProducerBatchCollector | None = None
        # Recovery sets it: the offset rules readers apply (offset_continuity) judge the
        # batches' offsets, instead of the header walk's own weaker check
        self.continuity: ContinuityCheck | None = None

    def scan(self, buf: np.ndarray, n: int, chunk_pos: int) -> tuple[int, int, str]:
        """Check and index the whole v2 batches at the start of ``buf[:n]`` (a uint8
        array read at file position ``chunk_pos``). Returns ``(end, status, reason)``:
        ``end`` the position in ``buf`` after the last valid batch; ``status`` one of
        ``record_format.WALK_END`` (a partial batch or the end of ``buf`` follows),
        ``WALK_INVALID`` (``reason`` says why) or ``WALK_LEGACY`` (a magic 0/1 message
        at ``end``)."""
        p = 0
        batches = self._batches
        while True:
            continuity = self.continuity
            count, end, status, code = header_table(
                buf, p, n, batches, self.max_message_bytes, continuity is None,
                self.base_offset, self.next_offset, True)
            reason = REASONS[code] if status == WALK_INVALID else ""
            if count:
                good = segment_scan.first_crc_mismatch(buf, batches, count)
                if good < count:
                    reason, status = REASONS[REASON_CRC], WALK_INVALID
                    end = int(batches[good, H_POSITION])
                if continuity is not None and good:
                    kept, why = continuity.table(batches, good, chunk_pos)
                    if kept < good:
                        good, reason, status = kept, why, WALK_INVALID
                        end = int(batches[kept, H_POSITION])
                if good:
                    self._index(batches, good, chunk_pos)
                    if self.producers is not None:
                        self.producers.add(buf, batches[:good], chunk_pos)
                    self.valid_end = chunk_pos + int(batches[good - 1, H_POSITION]
                                                     + batches[good - 1, H_SIZE])
            p = end
            if status != WALK_FULL:
                return p, status, reason

    def add_batch(self, position: int, size: int, base_offset: int, last_offset: int,
                  max_timestamp: int, crc: int) -> None:
        """Index one batch checked by the caller (a legacy message) at file ``position``."""
        one = np.zeros((1, HEADER_COLUMNS), np.int64)
        one[0, [H_SIZE, H_LAST_OFFSET, H_MAX_TIMESTAMP, H_CRC]] = (size, last_offset,
                                                                   max_timestamp, crc)
        self._index(one, 1, position)
        self.valid_end = position + size

    def _index(self, batches: np.ndarray, count: int, chunk_pos: int) -> None:
        st = self._state
        need_o = min(int(st[3]) + count, self._max_entries[0])
        need_t = min(int(st[4]) + count, self._max_entries[1])
        if need_o > len(self._oidx):
            self._oidx = _grown(self._oidx, need_o, self._max_entries[0])
        if need_t > len(self._tidx):
            self._tidx = _grown(self._tidx, need_t, self._max_entries[1])
        if self.first_timestamp is None:
            self.first_timestamp = int(batches[0, H_MAX_TIMESTAMP])
        segment_scan.index_entries(batches, count, chunk_pos, self.base_offset,
                                   self.index_interval_bytes, st, self._oidx, self._tidx)
        self.next_offset = int(batches[count - 1, H_LAST_OFFSET]) + 1

    @property
    def offset_entries(self) -> np.ndarray:
        """(relative offset, position) rows of the offset index."""
        return self._oidx[:self._state[3]]

    @property
    def time_entries(self) -> np.ndarray:
        """(timestamp, relative offset) rows of the time index."""
        return self._tidx[:self._state[4]]

    @property
    def bytes_since_last_entry(self) -> int:
        return int(self._state[0])

    @property
    def max_timestamp(self) -> tuple[int, int]:
        """The largest timestamp seen and the last offset of its batch."""
        return int(self._state[1]), int(self._state[2])


def _grown(entries: np.ndarray, need: int, cap: int) -> np.ndarray:
    bigger = np.empty((min(max(need, 2 * len(entries), 1024), cap), 2), np.int64)
    bigger[:len(entries)] = entries
    return bigger
