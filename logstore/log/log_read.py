"""The read path every partition log shares (Kafka's ``LocalLog.read`` and
``fetchOffsetByTimestamp``): whole batches from the segment holding an offset, chunked
reads, timestamp lookups and read_committed reads, each batch header checked against
``offset_continuity``'s rules as it is walked.

``LogReads`` is the base of the writer ``log.Log``, of ``log_reader.LogReader``
(another process's log, from its directory listing) and of a bucket's log. They differ
only in the hooks: ``_view`` (the segment list to read), ``_read_end`` (the log end for
the writer, the high watermark for a reader), ``_relist`` (nothing for the writer; a
reader lists again when its directory changed) and ``_ATTEMPTS`` (a reader retries a
read that met a roll, retention or a compaction swap after listing again). A log that
holds its segment list as state hands it down instead (``_read_view``, a
``read_view.ReadView`` set each time the state changes; ``_chunk_source``), so its reads
never call back into it.

Reads take no lock and work on a snapshot of the segment list: they never block the
writer, and concurrent readers are safe.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePath

from ..config.config import LogConfig
from ..errors import (
    CorruptRecordError,
    KafkaStorageError,
    OffsetBelowLogStartError,
    OffsetOutOfRangeError,
)
from ..index.txn_index import AbortedTxn
from ..records.record_format import V2_HEADER_SIZE, BatchHeader, read_batch_header
from ..storage.file_names import LOG_SUFFIX, offset_file_name
from .chunk_sources import ChunkSource, ChunkSources
from .log_segment import LogSegment
from .offset_continuity import ContinuityCheck, offsets_contiguous
from .partition_metadata import read_topic_id
from .read_view import ReadView
from .transactions import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    Transactions,
    check_isolation_level,
    committed_chunks,
)


@dataclass(frozen=True, slots=True)
class FetchData:
    """Whole batches from a read. ``records`` may begin before the requested offset
    (the batch holding it) and holds only batches whose last offset is below the
    read's upper bound (the high watermark or ``max_offset``)."""

    records: bytes
    first_offset: int  # base offset of the first batch (== the start offset when empty)
    next_offset: int  # offset after the last batch (where the next read starts)
    high_watermark: int
    log_start_offset: int
    # read_committed: the aborted transactions overlapping the batches (the reader drops
    # their data batches, as Kafka's consumer does: ``transactions.drop_aborted_batches``)
    aborted_transactions: tuple[AbortedTxn, ...] = ()
    last_stable_offset: int | None = None

    @property
    def empty(self) -> bool:
        return not self.records


class LogReads:
    """The read methods of a partition log; see the module docstring. Subclasses set
    the attributes below and implement the hooks."""

    _ATTEMPTS = 1
    _READ_END_NAME = "log end offset"
    dir: PurePath
    topic: str
    partition: int
    config: LogConfig
    topic_id: str | None = None
    """The id of the topic the log was opened for (None: unknown, or a writer's log)."""
    _high_watermark: int
    _log_start_offset: int
    _contiguous: bool | None
    _txns: Transactions
    _read_view: ReadView[object] | None = None
    """The segments to read, handed down by a log that holds them as state (set each time
    its state changes); None: the log's ``_view`` gives them."""
    _chunk_source: Callable[[int], ChunkSources] | None = None
    """What a walk reads its segments through (``_chunk_sources``), given the end offset;
    None: the segments themselves."""
    _RELIST_BEFORE_READ = True
    """Whether ``read_chunks`` and ``offset_for_timestamp`` bring the segment list up to
    date first (``_relist``); False for a log that takes its state before it calls them."""

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def high_watermark(self) -> int:
        """The end of what readers may see."""
        return self._high_watermark

    @property
    def last_stable_offset(self) -> int:
        raise NotImplementedError

    def _tp(self) -> str:
        return f"{self.topic}-{self.partition}"

    # -- what the backends differ in (``log_dirs_api.PartitionLogView``) -----------------

    def sync(self) -> bool:
        """Take the state the manager holds now, without a request; a log read from
        local files has none to take (a bucket log's commits: ``BucketLog``)."""
        return False

    def refresh(self, *, force: bool = False) -> bool:
        """See what other processes changed since; True if the segments changed. A
        writer's own log is never changed by another process: nothing to see."""
        return False

    def current_topic_id(self) -> str | None:
        """The id of the topic whose directory this is now (its ``partition.metadata``,
        read again: the topic may have been deleted and re-created under the name)."""
        return read_topic_id(Path(self.dir))

    def aborted_transactions(self, start_offset: int, upper_offset: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping ``[start_offset, upper_offset)``, from the
        ``.txnindex`` files (computed from the log where one is missing or damaged)."""
        self._relist()
        return self._txns.aborted_txns(start_offset, upper_offset)

    def _check_start(self, start_offset: int) -> None:
        lso = self._log_start_offset
        end = self._read_end()
        if start_offset < lso:
            # Checked first: a read-only Log learns a new log start from the listing,
            # before a newer high watermark reaches it, so lso may exceed ``end``.
            raise OffsetBelowLogStartError(
                f"offsets [{start_offset}, {lso}) of {self._tp()} were removed (the log "
                f"start offset is now {lso})", start_offset, lso)
        if start_offset > end:
            raise OffsetOutOfRangeError(
                f"offset {start_offset} is out of range for {self._tp()}: above the "
                f"{self._READ_END_NAME} {end} "
                f"(the log holds [{lso}, {end}))")

    @property
    def offsets_contiguous(self) -> bool:
        """True when every offset has a batch (``offset_continuity`` rule 3)."""
        known = self._contiguous
        if known is None:
            known = offsets_contiguous(self.dir, compact=self.config.compact)
            self._contiguous = known
        return known

    def _continuity(self, start_offset: int) -> ContinuityCheck:
        return ContinuityCheck(self._tp(), contiguous=self.offsets_contiguous,
                               expected=start_offset)

    def _view(self) -> tuple[tuple[int, ...], Callable[[int], LogSegment]]:
        """(base offsets, i -> segment) over a consistent snapshot: the view handed down."""
        view = self._read_view
        if view is None:
            raise NotImplementedError(f"{type(self).__name__} has no read view")
        return view.bases, view.segment

    def _read_end(self) -> int:
        """The offset reads may not start past (a reader's: the high watermark)."""
        return self._high_watermark

    def _relist(self, *, force: bool = False) -> None:
        """Bring the segment list up to date (a reader of another process's log)."""

    @staticmethod
    def _floor_index(bases: tuple[int, ...], offset: int) -> int:
        import bisect

        return max(bisect.bisect_right(bases, offset) - 1, 0)

    def read(self, start_offset: int, *, max_offset: int | None = None,
             max_bytes: int = 1 << 20, isolation_level: str = READ_UNCOMMITTED) -> FetchData:
        """Whole batches from the one holding ``start_offset``, at most ``max_bytes``
        (at least one batch), below ``min(max_offset, high watermark)``.

        ``isolation_level="read_committed"`` (Kafka's fetch isolation): below the last
        stable offset instead of the high watermark, and ``aborted_transactions`` lists
        the aborted transactions overlapping the batches (their data batches are to be
        dropped by the reader: ``transactions.drop_aborted_batches``).

        Raises OffsetOutOfRangeError past the end, ``OffsetBelowLogStartError`` (an
        OffsetOutOfRangeError and a MissingDataError) below the log start;
        CorruptRecordError or MissingDataError when the batches break
        ``offset_continuity``'s rules.
        """
        if check_isolation_level(isolation_level) == READ_COMMITTED:
            return self._read_committed(start_offset, max_offset, max_bytes)
        hw = self._high_watermark
        self._check_start(start_offset)
        limit = hw if max_offset is None else min(max_offset, hw)
        lso = self._log_start_offset
        empty = FetchData(b"", start_offset, start_offset, hw, lso)
        if start_offset >= limit:
            return empty
        for attempt in range(self._ATTEMPTS):
            last_attempt = attempt == self._ATTEMPTS - 1
            try:
                fetched = self._read_segments(start_offset, limit, max_bytes, hw, lso,
                                              last_attempt)
            except (FileNotFoundError, KafkaStorageError):
                if last_attempt:
                    raise
            else:
                if fetched is not None:
                    return fetched
            # A reader: a roll, retention or a compaction swap changed the directory
            # (possibly more than once while we read). If retention took the segment we
            # wanted, the start offset is now below the log start: say so rather than
            # silently skipping to the next segment.
            self._relist(force=True)
            self._check_start(start_offset)
            lso = self._log_start_offset
        return empty

    def _read_committed(self, start_offset: int, max_offset: int | None,
                        max_bytes: int) -> FetchData:
        lso = self.last_stable_offset
        limit = lso if max_offset is None else min(max_offset, lso)
        fetched = self.read(start_offset, max_offset=limit, max_bytes=max_bytes)
        aborted: tuple[AbortedTxn, ...] = ()
        if not fetched.empty:
            aborted = tuple(self.aborted_transactions(start_offset, fetched.next_offset))
        return dataclasses.replace(fetched, aborted_transactions=aborted,
                                   last_stable_offset=lso)

    def _read_segments(self, start_offset: int, limit: int, max_bytes: int, hw: int,
                       lso: int, last_attempt: bool) -> FetchData | None:
        """Batches from the segment holding ``start_offset`` on, continuing into the
        next segments while one is exhausted and ``max_bytes`` is not reached. None when
        the segments listed end before ``limit`` and another listing may hold more."""
        bases, get = self._view()
        check = self._continuity(start_offset)
        self._check_first_base(bases, start_offset)
        parts: list[bytes] = []
        total = 0
        first_offset = next_offset = start_offset
        first_i = self._floor_index(bases, start_offset)
        for i in range(first_i, len(bases)):
            if parts and (total >= max_bytes or next_offset >= limit):
                break
            if bases[i] >= limit:
                check.enter(self._segment_path(bases[i]), bases[i], None)
                break
            seg = get(i)
            check.enter(seg.log_path, bases[i], bases[i + 1] if i + 1 < len(bases) else None)
            sl = seg.read(check.expected, max_bytes - total, max_offset=limit,
                          min_one_batch=not parts, from_start=i > first_i, check=check)
            if sl is None:
                if parts or check.expected >= limit:
                    break
                continue
            if not parts:
                first_offset = sl.first_offset
            parts.append(sl.records)
            total += len(sl.records)
            next_offset = sl.next_offset
            if sl.position + len(sl.records) < seg.size:
                break  # stopped inside this segment (size or upper bound)
        else:
            if check.expected < limit:
                if not last_attempt:
                    return None  # the listing may be stale: list again first
                check.finish(limit, hw)
        if not parts:
            return FetchData(b"", start_offset, start_offset, hw, lso)
        records = parts[0] if len(parts) == 1 else b"".join(parts)
        return FetchData(records, first_offset, next_offset, hw, lso)

    def _check_first_base(self, bases: tuple[int, ...], offset: int) -> None:
        """Retention moved the start past ``offset`` since it was checked (the segment
        list changes before the log start offset does): data removed, not a gap."""
        if bases and bases[0] > offset:
            raise OffsetBelowLogStartError(
                f"offsets [{offset}, {bases[0]}) of {self._tp()} were removed while it was "
                f"read (its first segment now starts at {bases[0]})", offset, bases[0])

    def _segment_path(self, base: int) -> PurePath:
        view = self._read_view
        path = None if view is None else view.log_path(base)
        return self.dir / offset_file_name(base, LOG_SUFFIX) if path is None else path

    def read_chunks(self, start_offset: int, end_offset: int,
                    chunk_bytes: int = 8 << 20, *, isolation_level: str = READ_UNCOMMITTED,
                    check_crcs: bool = True) -> Iterator[memoryview]:
        """Whole batches covering [``start_offset``, ``end_offset``) (capped at the high
        watermark), as memoryviews of at most ``chunk_bytes`` each (a larger batch comes
        alone). Only one chunk is in memory at a time; each chunk is a fresh buffer.

        ``isolation_level="read_committed"``: capped at the last stable offset, and
        without the data batches of aborted transactions (control batches stay).

        Every batch header is checked against ``offset_continuity``'s rules as it is
        walked: CorruptRecordError for a batch that breaks them, MissingDataError for
        offsets missing from the range (a segment file deleted or cut short, retention
        under the reader: ``OffsetBelowLogStartError``); the caller may go on from the
        error's ``end``. Never a silent jump.

        ``check_crcs``: whether a log whose bytes crossed a network (a bucket's) checks
        every batch's CRC before giving it; False when the caller checks them itself as
        it decodes (``decode_batches``' ``verify_crc``), so each CRC is computed once. A
        local log leaves CRCs to its reader either way."""
        if check_isolation_level(isolation_level) == READ_COMMITTED:
            end_offset = min(end_offset, self.last_stable_offset)
            if start_offset < end_offset:
                aborted = self.aborted_transactions(start_offset, end_offset)
                yield from committed_chunks(self.read_chunks(start_offset, end_offset,
                                                             chunk_bytes,
                                                             check_crcs=check_crcs),
                                            aborted)
            else:
                self._check_start(start_offset)
            return
        self._check_start(start_offset)
        end_offset = min(end_offset, self._high_watermark)
        if start_offset >= end_offset:
            return
        check = self._continuity(start_offset)
        for attempt in range(self._ATTEMPTS):
            last_attempt = attempt == self._ATTEMPTS - 1
            if attempt or self._RELIST_BEFORE_READ:
                self._relist(force=attempt > 0)
            self._check_start(check.expected)
            try:
                done = yield from self._walk_chunks(check, end_offset, chunk_bytes)
            except (FileNotFoundError, KafkaStorageError):
                # Retention took a segment (out of range when listed again; its files or
                # objects may be gone) or a compaction swap replaced it (same base
                # offset, new file).
                if last_attempt:
                    raise
                continue
            if done:
                return
            if last_attempt:
                check.finish(end_offset, self._high_watermark)
                return
            # The segments listed end before ``end_offset``: a roll since the listing?

    def _walk_chunks(self, check: ContinuityCheck, end_offset: int,
                     chunk_bytes: int) -> Generator[memoryview, None, bool]:
        """One pass over the listed segments from ``check.expected``; returns True when
        the range is covered, False when the segments ran out first."""
        sources = self._chunk_sources(end_offset)
        try:
            return (yield from self._walk_segments(check, end_offset, chunk_bytes, sources))
        finally:
            if sources is not None:
                sources.close()

    def _walk_segments(self, check: ContinuityCheck, end_offset: int, chunk_bytes: int,
                       sources: ChunkSources | None) -> Generator[memoryview, None, bool]:
        bases, get = self._view()
        self._check_first_base(bases, check.expected)
        first_i = self._floor_index(bases, check.expected)
        for i in range(first_i, len(bases)):
            if bases[i] >= end_offset:
                check.enter(self._segment_path(bases[i]), bases[i], None)
                return True
            seg = get(i)
            last_segment = i == len(bases) - 1
            check.enter(seg.log_path, bases[i], None if last_segment else bases[i + 1])
            if check.expected >= end_offset:
                return True
            if sources is None:
                src: ChunkSource = seg
            else:
                later = range(i + 1, min(i + 1 + sources.lookahead, len(bases)))
                src = sources.open(seg, [get(j) for j in later if bases[j] < end_offset])
            if i == first_i:
                first, position = src.find_batch(check.expected)
                if first is None:
                    check.segment_end(position, seg.size)
                    continue
            else:
                position = 0
            # A local range ending in this segment reads only up to where its last batch
            # can end (the offset index bounds it), not a whole 8 MiB chunk past it.
            limit = None  # (a bucket's windows bound themselves)
            if sources is None and (last_segment or bases[i + 1] > end_offset):
                limit = seg.offset_index.position_past(end_offset)
            while True:
                want = chunk_bytes if limit is None or limit <= position else min(
                    chunk_bytes, limit - position)
                buf, n = src.read_chunk(position, want)
                p = 0
                stop = False
                while True:
                    try:
                        h = read_batch_header(buf, p, n)
                    except CorruptRecordError as e:
                        raise CorruptRecordError(f"{self._tp()}: {seg.log_path}: {e} (file "
                                                 f"position {position + p})") from None
                    if h is None:
                        break
                    check.batch(h, position)
                    if h.base_offset >= end_offset:
                        stop = True
                        break
                    p = h.end_position
                if p:
                    position += p
                    yield memoryview(buf)[:p]
                if stop or check.expected >= end_offset:
                    return True
                if p:
                    continue
                if want < chunk_bytes:
                    # The index's bound held no whole batch (an index behind its log):
                    # read on as without it, so it never decides what is returned.
                    limit = None
                    continue
                # Nothing whole in the chunk: the end of the segment, or one batch larger
                # than a chunk (read alone).
                head = read_batch_header(buf, 0, 1 << 62) if n >= V2_HEADER_SIZE else None
                big = seg.pread(position, head.size) if head is not None and head.size > n \
                    else b""
                if head is None or len(big) < head.size:
                    check.segment_end(position, seg.size)
                    break
                check.batch(head, position)
                if head.base_offset >= end_offset:
                    return True
                position += head.size
                yield memoryview(big)
                if check.expected >= end_offset:
                    return True
        return False

    def _chunk_sources(self, end_offset: int) -> ChunkSources | None:
        """What one ``_walk_chunks`` reads its segments through, or None for the
        segments themselves (local files); a bucket log's walk reads windows of large
        GETs with read-ahead (``bucket_read_window.WindowedReads``)."""
        make = self._chunk_source
        return None if make is None else make(end_offset)

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        """The first offset whose record timestamp is >= ``timestamp_ms`` (and at or
        above the log start), or None when every visible record is older."""
        hw = self._high_watermark
        lso = self._log_start_offset
        for attempt in range(self._ATTEMPTS):
            if attempt or self._RELIST_BEFORE_READ:
                self._relist(force=attempt > 0)
            if attempt:
                hw, lso = self._high_watermark, self._log_start_offset
            try:
                return self._offset_for_timestamp(timestamp_ms, hw, lso)
            except (FileNotFoundError, KafkaStorageError):
                # Retention took a segment under the lookup (its files or objects may be
                # gone): list again, as read does.
                if attempt == self._ATTEMPTS - 1:
                    raise
        return None

    def _offset_for_timestamp(self, timestamp_ms: int, hw: int, lso: int) -> int | None:
        bases, get = self._view()
        for i in range(len(bases)):
            seg = get(i)
            last = i == len(bases) - 1
            if not last and seg.max_timestamp_so_far < timestamp_ms:
                continue
            h = seg.find_offset_by_timestamp(timestamp_ms, lso)
            if h is None or h.base_offset >= hw:
                if last:
                    return None
                continue
            offset = self._first_record_at_or_after(seg, h, timestamp_ms, lso)
            if offset is not None and offset < hw:
                return offset
        return None

    def _first_record_at_or_after(self, seg: LogSegment, h: BatchHeader, timestamp_ms: int,
                                  lso: int) -> int | None:
        """Within a batch: the first record with timestamp >= the target (decodes it)."""
        if h.is_log_append_time or h.records_count == 1:
            return max(h.base_offset, lso)
        import pyarrow.compute as pc

        from ..records.record_codec import decode_batches

        table = decode_batches(seg.pread(h.position, h.size), start_offset=lso,
                               include_headers=False)
        mask = pc.greater_equal(table.column("timestamp"), timestamp_ms)
        hits = pc.filter(table.column("offset"), mask)
        return hits[0].as_py() if len(hits) else None

