"""Checking whole batches and indexing them as Kafka's ``LogSegment`` does, for a segment
whose indexes are rebuilt from its batches rather than appended to one at a time.

Two users feed it buffers of consecutive batches with their file position:
``LogSegment.recover`` (chunks read back from the ``.log``) and the cleaner (its output,
before it is written, so the cleaned segment is never read back). Per buffer, three
``segment_scan`` kernels run: the header walk (sizes, ``max.message.bytes``, offsets
increasing and within 32 bits of the base), the CRCs, and the index rule. Legacy magic
0/1 messages are checked by the caller and added one by one (``add_batch``).

Not thread-safe: one indexer belongs to one rebuild.

>>> ix = SegmentIndexer(base_offset=0, index_interval_bytes=4096,  # doctest: +SKIP
...                     max_message_bytes=1 << 20, max_entries=(1 << 17, 1 << 17))
>>> end, status, reason = ix.scan(chunk, n, chunk_pos=0)  # doctest: +SKIP
>>> segment.adopt_indexes(ix)  # doctest: +SKIP
"""

from __future__ import annotations

import crc32c as _crc32c
import numpy as np

from . import segment_scan
from .time_index import NO_TIMESTAMP

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
        self._batches = np.empty((scan_capacity, 6), np.int64)
        # Grown on demand: a segment's entries are usually a small part of its index
        # file's capacity (10 MiB by default, 20 MiB here as int64 pairs).
        self._oidx = np.empty((0, 2), np.int64)
        self._tidx = np.empty((0, 2), np.int64)
        # since last entry, max ts, its offset, offset entries, time entries, last entry ts
        self._state = np.array([0, NO_TIMESTAMP, base_offset, 0, 0, NO_TIMESTAMP], np.int64)

    def scan(self, buf: np.ndarray, n: int, chunk_pos: int) -> tuple[int, int, str]:
        """Check and index the whole v2 batches at the start of ``buf[:n]`` (a uint8
        array read at file position ``chunk_pos``). Returns ``(end, status, reason)``:
        ``end`` the position in ``buf`` after the last valid batch; ``status`` one of
        ``segment_scan.NEED_MORE`` (a partial batch or the end of ``buf`` follows),
        ``INVALID`` (``reason`` says why) or ``LEGACY`` (a magic 0/1 message at ``end``)."""
        p = 0
        while True:
            count, used, status, code = segment_scan.scan_headers(
                buf[p:], n - p, self.base_offset, self.next_offset, self.max_message_bytes,
                self._batches)
            reason = segment_scan.REASONS[code] if status == segment_scan.INVALID else ""
            if count:
                batches = self._batches
                good = first_crc_mismatch(buf[p:], batches, count)
                if good < count:
                    reason, status = "a CRC mismatch", segment_scan.INVALID
                    used = int(batches[good, 0])
                if good:
                    self._index(batches, good, chunk_pos + p)
                    self.valid_end = chunk_pos + p + int(batches[good - 1, 0]
                                                         + batches[good - 1, 1])
            p += used
            if status != segment_scan.NEED_MORE or count < len(self._batches) or p >= n:
                return p, status, reason

    def add_batch(self, position: int, size: int, base_offset: int, last_offset: int,
                  max_timestamp: int, crc: int) -> None:
        """Index one batch checked by the caller (a legacy message) at file ``position``."""
        one = np.array([[0, size, base_offset, last_offset, max_timestamp, crc]], np.int64)
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
            self.first_timestamp = int(batches[0, 4])
        segment_scan.index_entries(batches, count, chunk_pos, self.base_offset,
                                   self.index_interval_bytes, st, self._oidx, self._tidx)
        self.next_offset = int(batches[count - 1, 3]) + 1

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


def first_crc_mismatch(buf: np.ndarray, batches: np.ndarray, count: int) -> int:
    """Index of the first of ``batches[:count]`` (rows of position in ``buf``, size, ...,
    stored CRC in column 5, as ``segment_scan.scan_headers`` writes them) whose CRC-32C
    does not match, or ``count``. The SSE4.2 kernel when there is one, else the crc32c
    package per batch."""
    if segment_scan.hardware_crc():
        return segment_scan.batch_crcs(buf, batches, count)
    view = memoryview(buf)
    for k in range(count):
        start, size = int(batches[k, 0]), int(batches[k, 1])
        if _crc32c.crc32c(view[start + 21:start + size]) != batches[k, 5]:
            return k
    return count
