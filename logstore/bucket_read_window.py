"""One bucket segment's bytes for one sequential read, fetched in large ranged GETs.

The read path decodes ``chunk_bytes`` (8 MiB) of whole batches at a time, so a task's
decode memory stays bounded. On a bucket, one ranged GET per chunk made a task's read of
a 16 MB segment three requests, plus one for the header an index entry points at and
64 KiB ones for the batch headers ``find_batch`` walks. An object store's cost is per
request: S3 bills requests, and its guidance is ranged GETs of 8-16 MiB; moto (the tests'
and benchmarks' server) reads the whole object for every GET, ranged or not. A
``SegmentWindow`` therefore GETs up to ``FETCH_BYTES`` at once, ending where the read's
last batch can end (the offset index bounds it: ``OffsetIndex.position_past``), and
serves the header reads, the batch walk and the chunks from that buffer.

Memory: one window of at most ``max(FETCH_BYTES, chunk_bytes)`` bytes per reading walk
(the chunks handed out are views of it: no copy), dropped when the walk moves to the
next segment or ends. A batch larger than a chunk is read on its own, as before.

Correctness stays the segment's: every fetch is ``BucketSegment.read_chunk`` (a short
object is ``CorruptRecordError``, a missing one ``MissingSegmentError``, a fragment's
base offsets are patched, which needs a batch start: every window starts at one). The
bound only sizes requests; a read that needs bytes past it fetches them.

Not thread-safe: one walk owns it.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from .errors import CorruptRecordError
from .record_format import V2_HEADER_SIZE, BatchHeader, read_batch_header

if TYPE_CHECKING:
    from .bucket_segment import BucketSegment

FETCH_BYTES = 16 << 20
"""Bytes a read asks a bucket for at once at most (AWS's guidance for ranged GETs is
8-16 MiB): a 16 MB segment is one request."""


class SegmentWindow:
    """``read_chunk``/``find_batch`` of a ``BucketSegment`` for a read of offsets below
    ``end_offset``, served from one large ranged GET at a time."""

    def __init__(self, seg: BucketSegment, end_offset: int, *,
                 fetch_bytes: int | None = None) -> None:
        self.seg = seg
        self.log_path = seg.log_path
        self._fetch_bytes = FETCH_BYTES if fetch_bytes is None else fetch_bytes
        self._end_offset = end_offset
        self._limit: int | None = None  # bytes the read needs at most; found on first fetch
        self._start = 0
        self._buf = memoryview(b"")

    @property
    def size(self) -> int:
        return self.seg.size

    def _read_limit(self) -> int:
        if self._limit is None:
            seg = self.seg
            if self._end_offset >= seg.entry.next_offset:
                self._limit = seg.size
            else:
                past = seg.offset_index.position_past(self._end_offset)
                self._limit = seg.size if past is None else min(past, seg.size)
        return self._limit

    def read_chunk(self, position: int, max_bytes: int) -> tuple[memoryview, int]:
        """Up to ``max_bytes`` from ``position`` (a batch start), and how many bytes."""
        size = self.seg.size
        want_end = min(position + max_bytes, size)
        window_end = self._start + len(self._buf)
        # The window serves what it holds up to the read's bound: past it the walk needs
        # nothing (its last batch ends there), unless the bound was wrong.
        reach = size if self._limit is None or position >= self._limit else self._limit
        if not (self._start <= position and window_end >= min(want_end, reach)):
            limit = self._read_limit()
            stop = limit if position < limit else size
            self._buf, n = self.seg.read_chunk(
                position, min(max(max_bytes, self._fetch_bytes), stop - position) or max_bytes)
            self._buf = self._buf[:n]
            self._start = position
            window_end = position + n
        view = self._buf[position - self._start:min(want_end, window_end) - self._start]
        return view, len(view)

    def pread(self, position: int, size: int) -> memoryview:
        return self.read_chunk(position, size)[0]

    def find_batch(self, offset: int) -> tuple[BatchHeader | None, int]:
        """``LogSegment.find_batch`` on the window's bytes: the index entry's header and
        the batch headers after it cost no request of their own."""
        position = self.seg.index_position(offset, pread=self.pread)
        while True:
            buf, n = self.read_chunk(position, V2_HEADER_SIZE)
            try:
                h = read_batch_header(buf, 0, n if n < V2_HEADER_SIZE else 1 << 62)
            except CorruptRecordError as e:
                raise CorruptRecordError(f"{self.log_path}: {e} (position {position})") from None
            if h is None or position + h.size > self.seg.size:
                return None, position
            if h.last_offset >= offset:
                return dataclasses.replace(h, position=position), position
            position += h.size
