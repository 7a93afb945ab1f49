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

Read-ahead (``WindowedReads``): while the walk decodes a window, the next one is fetched
on the walk's own thread; on S3 this hides a request's latency behind the decoding.
Small segments (a producer's appends of a few records each) are fetched several at a
time: with the last window of a segment (a small one's only window) the first windows
of the next ones are read ahead together, up to ``READ_AHEAD_SEGMENTS`` GETs and
``FETCH_BYTES`` in all, so a task reading many of them waits about one round trip per
group, not one per segment (a micro-batch of up to 9 small segments: one).

Memory: per reading walk, the current window and what is read ahead, each at most
``max(FETCH_BYTES, chunk_bytes)`` bytes (the chunks handed out are views: no copy),
dropped when the walk moves on or ends. A batch larger than a chunk is read on its own,
as before.

The bytes come from a part beneath the read path (``log.records_window``: the
``RecordsWindow`` over the segment's ``ObjectRecords``, and the walk's ``ReadAhead``);
this module chooses the sizes and hands each window its segment's parts as values (its
records, its offset index, its committed next offset, whether it is a fragment), so
``SegmentReads.find_batch`` reads the window's bytes without calling back up here.

Correctness stays the segment's: every fetch is ``ObjectRecords.read_chunk`` (a short
object is ``CorruptRecordError``, a missing one ``MissingSegmentError``, a fragment's
base offsets are patched, which needs a batch start: every window starts at one). The
bound only sizes requests; a read that needs bytes past it fetches them.

Not thread-safe: one walk owns its windows (the read-ahead thread only runs a GET).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..log.log_segment import LogSegment
from ..log.records_window import ReadAhead, RecordsWindow, WindowBound
from ..records.record_format import V2_HEADER_SIZE, BatchHeader
from .bucket_segment import BucketSegment

FETCH_BYTES = 16 << 20
"""Bytes a read asks a bucket for at once at most (AWS's guidance for ranged GETs is
8-16 MiB): a 16 MB segment is one request."""
READ_AHEAD = True
"""Whether a walk GETs its next window while it decodes the current one."""
READ_AHEAD_SEGMENTS = 8
"""The most following segments whose first windows a walk reads ahead at once (their
sizes together within ``FETCH_BYTES``)."""


def window_bound(seg: BucketSegment) -> WindowBound:
    """The parts and values of ``seg`` a window reads it by."""
    entry = seg.entry
    return WindowBound(seg.records, seg.offset_index_part.get, entry.next_offset,
                       bool(entry.offset_delta))


class SegmentWindow:
    """``read_chunk``/``find_batch`` of a ``BucketSegment`` for a read of offsets below
    ``end_offset``, served from one large ranged GET at a time (a ``RecordsWindow``)."""

    def __init__(self, seg: BucketSegment, end_offset: int, *,
                 fetch_bytes: int | None = None, read_ahead: ReadAhead | None = None,
                 next_segs: Sequence[BucketSegment] = ()) -> None:
        self.seg = seg
        self.log_path = seg.log_path
        self._window = RecordsWindow(
            window_bound(seg), end_offset, FETCH_BYTES if fetch_bytes is None else fetch_bytes,
            read_ahead=read_ahead if READ_AHEAD else None,
            next_bounds=[window_bound(s) for s in next_segs])

    @property
    def size(self) -> int:
        return self.seg.size

    def read_chunk(self, position: int, max_bytes: int) -> tuple[memoryview, int]:
        """Up to ``max_bytes`` from ``position`` (a batch start), and how many bytes."""
        return self._window.read_chunk(position, max_bytes)

    def pread(self, position: int, size: int) -> memoryview:
        return self._window.pread(position, size)

    def find_batch(self, offset: int) -> tuple[BatchHeader | None, int]:
        """``LogSegment.find_batch`` reading the window's bytes, a header at a time (the
        index entry's header and the batch headers after it cost no request of their
        own, and no read grows past the window's bound)."""
        return self.seg.find_batch(offset, pread=self._window.pread, scan_bytes=V2_HEADER_SIZE)


class WindowedReads:
    """One reading walk's windows (``LogReads._chunk_sources`` on a bucket log) and its
    read-ahead (``records_window.ReadAhead``: while the walk decodes a window, GETs of
    what follows run on threads of this walk's own, joined by ``close``: the rest of the
    segment, one GET; or the first windows of the next segments, up to
    ``READ_AHEAD_SEGMENTS`` of them within ``FETCH_BYTES``). Memory: the current window
    and what is read ahead, ``FETCH_BYTES`` each at most. Not thread-safe: one walk owns
    it."""

    lookahead = READ_AHEAD_SEGMENTS
    """The segments after the one opened that ``open`` is told of (their first windows
    are the read-ahead when this segment's end is reached)."""

    def __init__(self, end_offset: int) -> None:
        self._end_offset = end_offset
        self._read_ahead = ReadAhead(READ_AHEAD_SEGMENTS)

    def open(self, seg: LogSegment, next_segs: Sequence[LogSegment]) -> SegmentWindow:
        assert isinstance(seg, BucketSegment)
        following = [s for s in next_segs if isinstance(s, BucketSegment)]
        assert len(following) == len(next_segs)
        return SegmentWindow(seg, self._end_offset, read_ahead=self._read_ahead,
                             next_segs=following)

    def close(self) -> None:
        self._read_ahead.close()
