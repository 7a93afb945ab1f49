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
time: at the end of a segment the first windows of the next ones are read ahead
together, up to ``READ_AHEAD_SEGMENTS`` GETs and ``FETCH_BYTES`` in all, so a task
reading many of them waits about one round trip per group, not one per segment.

Memory: per reading walk, the current window and what is read ahead, each at most
``max(FETCH_BYTES, chunk_bytes)`` bytes (the chunks handed out are views: no copy),
dropped when the walk moves on or ends. A batch larger than a chunk is read on its own,
as before.

Correctness stays the segment's: every fetch is ``BucketSegment.read_chunk`` (a short
object is ``CorruptRecordError``, a missing one ``MissingSegmentError``, a fragment's
base offsets are patched, which needs a batch start: every window starts at one). The
bound only sizes requests; a read that needs bytes past it fetches them.

Not thread-safe: one walk owns its windows (the read-ahead thread only runs a GET).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from ..errors import CorruptRecordError
from ..log.log_segment import LogSegment
from ..log.segment_records import ReadBuffer
from ..records.record_format import V2_HEADER_SIZE, BatchHeader, read_batch_header
from .bucket_segment import BucketSegment

FETCH_BYTES = 16 << 20
"""Bytes a read asks a bucket for at once at most (AWS's guidance for ranged GETs is
8-16 MiB): a 16 MB segment is one request."""
READ_AHEAD = True
"""Whether a walk GETs its next window while it decodes the current one."""
READ_AHEAD_SEGMENTS = 8
"""The most following segments whose first windows a walk reads ahead at once (their
sizes together within ``FETCH_BYTES``)."""


class SegmentWindow:
    """``read_chunk``/``find_batch`` of a ``BucketSegment`` for a read of offsets below
    ``end_offset``, served from one large ranged GET at a time."""

    def __init__(self, seg: BucketSegment, end_offset: int, *,
                 fetch_bytes: int | None = None, reads: WindowedReads | None = None,
                 next_segs: Sequence[BucketSegment] = ()) -> None:
        self.seg = seg
        self.log_path = seg.log_path
        self._fetch_bytes = FETCH_BYTES if fetch_bytes is None else fetch_bytes
        self._end_offset = end_offset
        self._limit: int | None = None  # bytes the read needs at most; found on first fetch
        self._start = 0
        self._buf = memoryview(b"")
        self._reads = reads
        self._next_segs = next_segs

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
        view = self._window_at(position, want_end, max_bytes)
        if len(view) < want_end - position and self._limit != size \
                and not self._whole_batch_at(position):
            # The window ends at the read's bound inside the batch at ``position``: the
            # offset index that gave the bound is wrong (the data may well be right, as
            # a read without the bound finds). Read past it.
            self._limit = size
            view = self._window_at(position, want_end, max_bytes)
        return view, len(view)

    def _window_at(self, position: int, want_end: int, max_bytes: int) -> memoryview:
        """The window's bytes from ``position`` up to ``want_end`` (fewer where the
        window ends after a whole batch or at the read's bound), fetching when needed."""
        size = self.seg.size
        window_end = self._start + len(self._buf)
        # The window serves what it holds up to the read's bound: past it the walk needs
        # nothing (its last batch ends there), unless the bound was wrong.
        reach = size if self._limit is None or position >= self._limit else self._limit
        if not (self._start <= position and window_end >= min(want_end, reach)) \
                and not self._whole_batch_at(position):
            limit = self._read_limit()
            stop = limit if position < limit else size
            need_end = min(want_end, max(stop, position))
            ahead = self._reads.take(self.seg, position, need_end) \
                if self._reads is not None else None
            if ahead is not None:
                self._start, buf, n = ahead
                self._buf = memoryview(buf)[:n]
                # A window shorter than the chunk (chunk_bytes above FETCH_BYTES, or
                # an index entry far below its end) serves the whole batches it holds.
                if self._start + n < need_end and not self._whole_batch_at(position):
                    ahead = None
            if ahead is None:
                buf, n = self.seg.read_chunk(position, min(max(max_bytes, self._fetch_bytes),
                                                           stop - position) or max_bytes)
                self._start = position
            self._buf = memoryview(buf)[:n]
            window_end = self._start + n
            self._read_ahead(window_end, limit)
        return self._buf[position - self._start:min(want_end, window_end) - self._start]

    def _whole_batch_at(self, position: int) -> bool:
        """Whether the window holds a whole batch at ``position``: the walk then takes
        the window's rest as a shorter chunk and asks for the next window from the batch
        that straddles its end (where the read-ahead starts, at an index entry)."""
        if not self._start <= position < self._start + len(self._buf):
            return False
        try:
            return read_batch_header(self._buf, position - self._start) is not None
        except CorruptRecordError:
            return False  # the walk reads the header again and names the damage
    def _read_ahead(self, window_end: int, limit: int) -> None:
        """Start the GET of what the walk needs after this window, if any: the rest of
        this segment from the last index entry at or below the window's end (a batch
        start, as a fragment's patching needs), or the next segment's first window."""
        if self._reads is None or not READ_AHEAD:
            return
        if window_end < limit:
            if self.seg.entry.offset_delta:
                return  # a fragment's patching needs a batch start: the index's is unchecked
            start = self.seg.offset_index.position_at_or_below(window_end)
            if start is not None and start > self._start:
                self._reads.prefetch(self.seg, start, min(self._fetch_bytes, limit - start))
        else:
            budget = self._fetch_bytes
            for i, seg in enumerate(self._next_segs):
                nxt = SegmentWindow(seg, self._end_offset, fetch_bytes=self._fetch_bytes)
                length = min(self._fetch_bytes, nxt._read_limit())
                if i and length > budget:
                    break  # the first always; the others while they fit in one window
                self._reads.prefetch(seg, 0, length)
                budget -= length

    def pread(self, position: int, size: int) -> memoryview:
        return self.read_chunk(position, size)[0]

    def find_batch(self, offset: int) -> tuple[BatchHeader | None, int]:
        """``LogSegment.find_batch`` reading the window's bytes, a header at a time (the
        index entry's header and the batch headers after it cost no request of their
        own, and no read grows past the window's bound)."""
        return self.seg.find_batch(offset, pread=self.pread, scan_bytes=V2_HEADER_SIZE)


class WindowedReads:
    """One reading walk's windows (``LogReads._chunk_sources`` on a bucket log) and its
    read-ahead: while the walk decodes a window, GETs of what follows run on threads of
    this walk's own (created on first use, joined by ``close``: never a process-wide
    pool, which a forked worker would inherit without its threads): the rest of the
    segment, one GET; or the first windows of the next segments, up to
    ``READ_AHEAD_SEGMENTS`` of them within ``FETCH_BYTES``. A prefetch's error (a missing
    or cut-short object) is raised when the walk takes it, where a plain fetch would
    have raised it; one the walk never needs is dropped with its bytes. Not thread-safe:
    one walk owns it."""

    lookahead = READ_AHEAD_SEGMENTS

    def __init__(self, end_offset: int) -> None:
        self._end_offset = end_offset
        self._pool: ThreadPoolExecutor | None = None
        # segment key -> (position, length, GET) of the prefetches in flight or done,
        # untaken
        self._pending: dict[str, tuple[int, int, Future[tuple[ReadBuffer, int]]]] = {}

    def open(self, seg: LogSegment, next_segs: Sequence[LogSegment]) -> SegmentWindow:
        assert isinstance(seg, BucketSegment)
        following = [s for s in next_segs if isinstance(s, BucketSegment)]
        assert len(following) == len(next_segs)
        return SegmentWindow(seg, self._end_offset, reads=self, next_segs=following)

    def prefetch(self, seg: BucketSegment, position: int, length: int) -> None:
        key = seg.entry.key
        if key in self._pending or len(self._pending) >= READ_AHEAD_SEGMENTS or length <= 0:
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(READ_AHEAD_SEGMENTS,
                                            thread_name_prefix="seglog-read-ahead")
        self._pending[key] = (position, length,
                              self._pool.submit(seg.read_chunk, position, length))

    def take(self, seg: BucketSegment, position: int, need_end: int
             ) -> tuple[int, ReadBuffer, int] | None:
        """The prefetched window of ``seg`` as (position, bytes, length) when it was asked
        to cover [``position``, ``need_end``), or at least bytes from ``position`` (the
        window serves them if they hold a whole batch), else None (and it is dropped:
        the walk fetches what it needs itself, and meets any error of those bytes
        then)."""
        # The walk takes each segment's prefetch when it opens the segment (in order:
        # nothing read ahead is skipped), so the others wait for their turn.
        pending = self._pending.pop(seg.entry.key, None)
        if pending is None:
            return None
        start, length, get = pending
        if not start <= position < start + length:
            return None
        buf, n = get.result()
        return start, buf, n

    def close(self) -> None:
        self._pending = {}
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
