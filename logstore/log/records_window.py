"""One immutable segment's records for one sequential read, fetched in large reads: the
byte source a bucket read's window hands ``SegmentReads.find_batch`` (as its ``pread``)
and slices into the walk's chunks, so the segment's header walk reads bytes from a part
beneath it, never calling back into the window that called it.

``RecordsWindow`` reads its ``SegmentRecords`` (``read_chunk``) up to ``fetch_bytes`` at
once, ending where the read's last batch can end (``OffsetIndex.position_past`` of the
read's end offset: its ``WindowBound``), and serves header reads, the batch walk and the
chunks from that buffer. ``ReadAhead`` fetches what follows on threads of the walk's own
while the walk decodes the current window: the rest of this segment (from an index
entry), or, at its end, the first windows of the next segments, several at once (small
segments: a walk waits about one round trip per group of them, not one per segment).

Why and what it costs are ``bucket_read_window``'s (it chooses the sizes and hands in
the parts); correctness stays the records' (a short object, a missing one, a fragment's
base offsets patched from a batch start: every window starts at one).

Not thread-safe: one walk owns its windows (the read-ahead thread only runs a read).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from ..errors import CorruptRecordError
from ..index.offset_index import OffsetIndex
from ..records.record_format import read_batch_header
from .segment_records import ReadBuffer, SegmentRecords


@dataclass(frozen=True, slots=True)
class WindowBound:
    """What a window needs to know of its segment: its records, its offset index
    (fetched on first use: ``LazyIndex.get``), the offset after its last batch, and
    whether the read ahead of it may start only where the window's own fetches do
    (``batch_starts_only``: a fragment, whose base offsets are patched from a batch
    start, and an index entry's position is not checked to be one)."""

    records: SegmentRecords
    offset_index: Callable[[], OffsetIndex]
    next_offset: int
    batch_starts_only: bool

    def read_limit(self, end_offset: int) -> int:
        """The bytes a read of offsets below ``end_offset`` needs at most."""
        size = self.records.size
        if end_offset >= self.next_offset:
            return size
        past = self.offset_index().position_past(end_offset)
        return size if past is None else min(past, size)


class ReadAhead:
    """One reading walk's read-ahead: at most ``max_reads`` reads in flight at once (one
    per segment: the rest of the current one, or the first windows of the next ones), on
    threads of this walk's own (created on first use, joined by ``close``: never a
    process-wide pool, which a forked worker would inherit without its threads). A
    prefetch's error (a missing or cut-short object) is raised when the walk takes it,
    where a plain fetch would have raised it; one the walk never needs is dropped with
    its bytes."""

    def __init__(self, max_reads: int = 1) -> None:
        self.max_reads = max(1, max_reads)
        self._pool: ThreadPoolExecutor | None = None
        # (records, position, length, read) per prefetch in flight or done, untaken;
        # records are told apart by identity (one walk's segments are distinct objects)
        self._pending: list[tuple[SegmentRecords, int, int, Future[tuple[ReadBuffer, int]]]]
        self._pending = []

    def prefetch(self, records: SegmentRecords, position: int, length: int) -> None:
        """Start a read of ``records`` unless one of them is pending already or
        ``max_reads`` are."""
        if length <= 0 or len(self._pending) >= self.max_reads:
            return
        if any(p[0] is records for p in self._pending):
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.max_reads, thread_name_prefix="seglog-read-ahead")
        get = self._pool.submit(records.read_chunk, position, length)
        self._pending.append((records, position, length, get))

    def take(
        self, records: SegmentRecords, position: int, need_end: int
    ) -> tuple[int, ReadBuffer, int] | None:
        """The prefetched window of ``records`` as (position, bytes, length) when it
        was asked to cover [``position``, ``need_end``), or at least bytes from
        ``position`` (the window serves them if they hold a whole batch), else None (and
        it is dropped: the walk fetches what it needs itself, and meets any error of
        those bytes then). The prefetches of other segments wait for the walk to reach
        them (it opens segments in order: nothing read ahead is skipped)."""
        found = next((i for i, p in enumerate(self._pending) if p[0] is records), None)
        if found is None:
            return None
        _, start, length, get = self._pending.pop(found)
        if not start <= position < start + length:
            return None
        buf, n = get.result()
        return start, buf, n

    def close(self) -> None:
        self._pending = []
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


class RecordsWindow:
    """``read_chunk`` and ``pread`` of one segment's records for a read of offsets below
    ``end_offset``, served from one large read at a time; see the module docstring.
    ``read_ahead``: the walk's, and ``next_bounds`` the segments it reads next, in order
    (their first windows are read ahead together at this one's end, the first always,
    the others while they fit in ``fetch_bytes`` in all)."""

    def __init__(
        self,
        bound: WindowBound,
        end_offset: int,
        fetch_bytes: int,
        *,
        read_ahead: ReadAhead | None = None,
        next_bounds: Sequence[WindowBound] = (),
    ) -> None:
        self._bound = bound
        self._records = bound.records
        self._fetch_bytes = fetch_bytes
        self._end_offset = end_offset
        self._limit: int | None = None  # bytes the read needs at most; found on first fetch
        self._start = 0
        self._buf = memoryview(b"")
        self._read_ahead = read_ahead
        self._next = next_bounds

    def _read_limit(self) -> int:
        if self._limit is None:
            self._limit = self._bound.read_limit(self._end_offset)
        return self._limit

    def read_chunk(self, position: int, max_bytes: int) -> tuple[memoryview, int]:
        """Up to ``max_bytes`` from ``position`` (a batch start), and how many bytes."""
        size = self._records.size
        want_end = min(position + max_bytes, size)
        view = self._window_at(position, want_end, max_bytes)
        if (
            len(view) < want_end - position
            and self._limit != size
            and not self._whole_batch_at(position)
        ):
            # The window ends at the read's bound inside the batch at ``position``: the
            # offset index that gave the bound is wrong (the data may well be right, as
            # a read without the bound finds). Read past it.
            self._limit = size
            view = self._window_at(position, want_end, max_bytes)
        return view, len(view)

    def pread(self, position: int, size: int) -> memoryview:
        return self.read_chunk(position, size)[0]

    def _window_at(self, position: int, want_end: int, max_bytes: int) -> memoryview:
        """The window's bytes from ``position`` up to ``want_end`` (fewer where the
        window ends after a whole batch or at the read's bound), fetching when needed."""
        size = self._records.size
        window_end = self._start + len(self._buf)
        # The window serves what it holds up to the read's bound: past it the walk needs
        # nothing (its last batch ends there), unless the bound was wrong.
        reach = size if self._limit is None or position >= self._limit else self._limit
        if not (
            self._start <= position and window_end >= min(want_end, reach)
        ) and not self._whole_batch_at(position):
            limit = self._read_limit()
            stop = limit if position < limit else size
            need_end = min(want_end, max(stop, position))
            ahead = (
                self._read_ahead.take(self._records, position, need_end)
                if self._read_ahead is not None
                else None
            )
            if ahead is not None:
                self._start, buf, n = ahead
                self._buf = memoryview(buf)[:n]
                # A window shorter than the chunk (chunk_bytes above fetch_bytes, or an
                # index entry far below its end) serves the whole batches it holds.
                if self._start + n < need_end and not self._whole_batch_at(position):
                    ahead = None
            if ahead is None:
                length = min(max(max_bytes, self._fetch_bytes), stop - position) or max_bytes
                if position + length >= limit:
                    # This window ends the walk's use of the segment: the next segments'
                    # first windows go out beside it, not after it (a walk over a few
                    # small segments waits one round trip, not two).
                    self._prefetch_after(limit, limit)
                buf, n = self._records.read_chunk(position, length)
                self._start = position
            self._buf = memoryview(buf)[:n]
            window_end = self._start + n
            self._prefetch_after(window_end, limit)
        return self._buf[position - self._start : min(want_end, window_end) - self._start]

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

    def _prefetch_after(self, window_end: int, limit: int) -> None:
        """Start the read of what the walk needs after this window, if any: the rest of
        this segment from the last index entry at or below the window's end (a batch
        start, as a fragment's patching needs), or the next segment's first window."""
        read_ahead = self._read_ahead
        if read_ahead is None:
            return
        if window_end < limit:
            if self._bound.batch_starts_only:
                return  # a fragment's patching needs a batch start: the index's is unchecked
            start = self._bound.offset_index().position_at_or_below(window_end)
            if start is not None and start > self._start:
                read_ahead.prefetch(self._records, start, min(self._fetch_bytes, limit - start))
        else:
            budget = self._fetch_bytes
            for i, bound in enumerate(self._next):
                length = min(self._fetch_bytes, bound.read_limit(self._end_offset))
                if i and length > budget:
                    break  # the first always; the others while they fit in one window
                read_ahead.prefetch(bound.records, 0, length)  # no-op when pending or full
                budget -= length
