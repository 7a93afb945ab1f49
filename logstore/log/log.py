"""One partition's log (Kafka's ``UnifiedLog``/``LocalLog``): a directory of segments.

``Log.open`` loads (and, after a crash, recovers) the directory through ``LogLoader``.
A writer ``Log`` appends validated v2 batches, assigning offsets by rewriting each
batch's base offset (the CRC does not cover it); rolls a new segment when the active one
is full, old or its index is full; flushes per ``flush.messages``/``flush.ms``; reads
whole batches; looks offsets up by timestamp; truncates; applies retention by time, size
and log start offset; and swaps in compacted segments for the cleaner.

The read path (``read``, ``read_chunks``, ``offset_for_timestamp``) is ``log_read``'s,
shared with ``log_reader.LogReader``: what other processes open the same directory with
(``Log.open(..., read_only=True)`` returns one). Appended batches are checked by
``log_validator``.

Components, one module each: ``segment_files.SegmentFiles`` (creating, deleting and
swapping segment files) and ``log_producers.LogProducers`` (producer state, the LSO's
pending transactions, ``.snapshot`` files).

Over 500 lines: the writer's state machine (append, roll, flush, pause, truncate,
retention) over one lock and one recovery point; what could leave without that state
already lives in the component modules above.

Thread-safety: one writer thread calls the mutating methods; they take ``_lock``. Reads
take no lock and work on a snapshot of the segment list, so they never block the writer.

>>> log = Log.open(Path("/data/logs/events-0"), LogConfig.from_properties({}),
...                clock=SYSTEM_CLOCK)                                  # doctest: +SKIP
>>> info = log.append(batches); log.read(info.first_offset).records   # doctest: +SKIP
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, overload

from ..config.config import LogConfig
from ..errors import (
    InvalidOffsetError,
    InvalidRecordError,
    KafkaStorageError,
    LogDirError,
    OffsetOutOfRangeError,
)
from ..records.record_format import LONG_MAX
from ..storage.file_names import CLEANED_SUFFIX, delete_dir_name, parse_partition_dir_name
from ..storage.storage import LOCAL
from ..util.clock import SYSTEM_CLOCK, Clock
from ..util.delayed_deletion import DelayedDeleter
from .log_loader import LogLoader
from .log_producers import LogProducers
from .log_read import LogReads
from .log_reader import LogReader
from .log_segment import LogSegment
from .log_segments import LogSegments
from .log_validator import assign_offsets_from, validate_batches
from .producer_state import ProducerStateManager
from .retention import SegmentDescriptor, deletable_segments
from .segment_files import SegmentFiles
from .transactions import Transactions

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AppendInfo:
    """What an append wrote: offsets ``first_offset..last_offset``, ``size`` bytes."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    num_records: int
    size: int



def _writable(records: bytes | bytearray | memoryview, tp: str) -> memoryview:
    view = memoryview(records)
    if view.readonly or view.format != "B" or not view.c_contiguous:
        raise InvalidRecordError(f"append to {tp} in place needs a writable, contiguous "
                                 f"byte buffer, got a {type(records).__name__}")
    return view


class Log(LogReads):
    """One partition. Build it with ``Log.open``; see the module docstring."""

    def __init__(self, dir_: Path, config: LogConfig, *, clock: Clock, segments: list[LogSegment],
                 log_start_offset: int, recovery_point: int, log_end_offset: int,
                 high_watermark: int, deleter: DelayedDeleter,
                 producer_state: ProducerStateManager | None = None,
                 producer_snapshot: int | None = None) -> None:
        self.dir: Path = Path(dir_)
        parsed = parse_partition_dir_name(self.dir.name)
        if parsed is None:
            raise LogDirError(f"{self.dir} is not a partition directory (<topic>-<partition>)")
        self.topic, self.partition = parsed
        self.config = config
        self.clock = clock
        self._deleter = deleter
        # Guards every mutation: the segment list, the offsets below, file renames.
        # Readers never take it.
        self._lock = threading.RLock()
        self._segments = LogSegments(segments)
        self._files = SegmentFiles(self._segments, lambda: self.dir, config, clock, deleter)
        self._log_start_offset = log_start_offset
        self._recovery_point = recovery_point
        self._log_end_offset = log_end_offset
        self._high_watermark = high_watermark
        self._last_flush_ms = clock.monotonic_ms()
        self._contiguous: bool | None = None  # offsets_contiguous, decided on first read
        # Writer: producers and ongoing transactions up to the log end, changed under _lock.
        self._txns = Transactions(lambda: self.dir, self._view, lambda: self._log_start_offset,
                                  read_only=False)
        self._producers = LogProducers(producer_state or ProducerStateManager(log_end_offset),
                                       lambda: self.dir, self._txns,
                                       lambda offset: offset in self._segments,
                                       producer_snapshot)

    @overload
    @classmethod
    def open(cls, dir_: Path, config: LogConfig, *, clock: Clock = ...,
             recovery_point: int = ..., log_start_offset: int = ...,
             high_watermark: int | None = ..., had_clean_shutdown: bool = ...,
             read_only: Literal[False] = ..., deleter: DelayedDeleter | None = ...) -> Log: ...
    @overload
    @classmethod
    def open(cls, dir_: Path, config: LogConfig, *, clock: Clock = ...,
             recovery_point: int = ..., log_start_offset: int = ...,
             high_watermark: int | None = ..., had_clean_shutdown: bool = ...,
             read_only: Literal[True], deleter: DelayedDeleter | None = ...) -> LogReader: ...
    @classmethod
    def open(cls, dir_: Path, config: LogConfig, *, clock: Clock = SYSTEM_CLOCK,
             recovery_point: int = 0, log_start_offset: int = 0,
             high_watermark: int | None = None, had_clean_shutdown: bool = True,
             read_only: bool = False, deleter: DelayedDeleter | None = None
             ) -> Log | LogReader:
        """Load (and after a crash recover) the partition directory ``dir_``.

        ``read_only=True`` (another process's log): a ``LogReader`` instead, which
        loads nothing and only lists the directory."""
        if read_only:
            return LogReader.open(dir_, config, log_start_offset=log_start_offset,
                                  high_watermark=high_watermark)
        deleter = deleter if deleter is not None else DelayedDeleter(clock)
        loaded = LogLoader(Path(dir_), config, clock=clock, recovery_point=recovery_point,
                           log_start_offset=log_start_offset,
                           had_clean_shutdown=had_clean_shutdown,
                           deleter=deleter, high_watermark=high_watermark).load()
        leo = loaded.log_end_offset
        if high_watermark is None:
            hw = leo
        else:
            hw = max(min(high_watermark, leo), loaded.log_start_offset)
        return cls(dir_, config, clock=clock, segments=loaded.segments,
                   log_start_offset=loaded.log_start_offset,
                   recovery_point=loaded.recovery_point, log_end_offset=leo,
                   high_watermark=hw, deleter=deleter,
                   producer_state=loaded.producer_state,
                   producer_snapshot=loaded.producer_snapshot)

    # -- offsets and sizes ----------------------------------------------------------------

    read_only = False

    @property
    def log_end_offset(self) -> int:
        """The offset the next append gets."""
        return self._log_end_offset

    @property
    def recovery_point(self) -> int:
        """Every offset below it is fsynced."""
        return self._recovery_point

    def segment_base_of(self, offset: int) -> int | None:
        """Base offset of the segment that holds (or would hold) ``offset``: where an
        unclean open recovers from, given that recovery point (``LogLoader`` pass 4).
        None below the first segment."""
        seg = self._segments.floor(offset)
        return None if seg is None else seg.base_offset

    @property
    def last_flush_ms(self) -> int:
        return self._last_flush_ms

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        """A snapshot of the segments, oldest first."""
        return self._segments.snapshot()

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def num_segments(self) -> int:
        return len(self._segments)

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark (clamped to [log start, log end]); returns it."""
        with self._lock:
            self._high_watermark = max(min(offset, self._log_end_offset),
                                       self._log_start_offset)
            return self._high_watermark


    # -- append ---------------------------------------------------------------------------

    def append(self, records: bytes | bytearray | memoryview, *,
               assign_offsets: bool = True, in_place: bool = False) -> AppendInfo:
        """Validate and append consecutive v2 batches; see the module docstring.

        With ``assign_offsets=False`` (the cleaner, replication-like copies) the batches
        keep their offsets, which must increase and start at or above the log end.
        ``in_place=True``: ``records`` is a writable buffer the caller gives up (the
        sink's reusable read buffer); base offsets and LogAppendTime are stamped in it, so
        the payload is not copied. Otherwise the Log stamps a private copy.
        """
        buf = _writable(records, self._tp()) if in_place else bytearray(records)
        headers = validate_batches(buf, self.config, tp=self._tp(),
                                   now_ms=self.clock.milliseconds(),
                                   assign_offsets=assign_offsets)
        if not headers:
            leo = self._log_end_offset
            return AppendInfo(leo, leo - 1, -1, -1, 0, 0)
        with self._lock:
            headers = assign_offsets_from(buf, headers, self._log_end_offset, tp=self._tp(),
                                          assign=assign_offsets)
            max_ts, max_ts_offset = -1, headers[0].last_offset
            for h in headers:
                if h.max_timestamp > max_ts:
                    max_ts, max_ts_offset = h.max_timestamp, h.last_offset
            first, last = headers[0].base_offset, headers[-1].last_offset
            segment = self._maybe_roll(len(buf), max_ts, first, last)
            segment.append(buf, headers)
            self._producers.update(buf, headers, segment, self._high_watermark)
            self._log_end_offset = last + 1
            self._high_watermark = self._log_end_offset
            if self._log_end_offset - self._recovery_point >= self.config.flush_messages:
                self.flush()
        return AppendInfo(first, last, max_ts, max_ts_offset,
                          sum(max(h.records_count, 0) for h in headers), len(buf))

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: the high watermark, or the first offset of the earliest
        transaction not yet decided below it, if lower."""
        return self._producers.last_stable_offset(self._high_watermark, self._log_start_offset)

    def take_producer_snapshot(self) -> None:
        """Write the producer state at the log end (``<offset>.snapshot``), if newer
        than the newest snapshot (Kafka's ``takeSnapshot``)."""
        with self._lock:
            self._producers.take_snapshot(self._log_end_offset)

    # -- roll and flush -------------------------------------------------------------------

    def _maybe_roll(self, size: int, max_ts: int, first_offset: int,
                    last_offset: int) -> LogSegment:
        cfg = self.config
        active = self._segments.last
        assert active is not None
        reason = active.should_roll(segment_bytes=cfg.segment_bytes, segment_ms=cfg.segment_ms,
                                    max_timestamp=max_ts, max_offset=last_offset,
                                    messages_size=size, now_ms=self.clock.milliseconds())
        if reason is None:
            return active
        logger.debug("rolling %s at offset %d: %s", self.dir, first_offset, reason)
        return self.roll(first_offset)

    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Start a new active segment at the log end (or ``expected_next_offset`` when
        higher); the old one becomes inactive and is flushed. Returns the new segment."""
        with self._lock:
            new_base = max(expected_next_offset or 0, self._log_end_offset)
            active = self._segments.last
            if active is not None and active.size == 0 and active.base_offset == new_base:
                return active
            # The new segment first: if its files cannot be made (a full filesystem, no
            # inodes), the active segment stays active with its indexes untrimmed.
            segment = self._files.new_segment(new_base)
            inactive = None
            try:
                if active is not None and active.size == 0:
                    self._segments.remove(active.base_offset)
                    active.delete()
                elif active is not None:
                    active.on_become_inactive()  # its final time-index entry needs space
                    inactive = active
            except KafkaStorageError:
                segment.delete()
                raise
            self._segments.add(segment)
            self._log_end_offset = max(self._log_end_offset, new_base)
            # Kafka's roll: the producer state at the new base, so that loaders and
            # readers start from here instead of scanning older segments.
            self.take_producer_snapshot()
            # Kafka flushes a rolled segment right away (asynchronously there): recovery
            # then only ever has to check the active segment.
            if inactive is not None and self._recovery_point >= new_base:
                # Flushed to its end before the roll, but holding the recovery point then
                # (its indexes unsynced: ``flush``), and its final time-index entry and
                # trim are new: nothing will recover it any more.
                inactive.flush()
            self.flush(new_base)
            return segment

    def new_segment(self, base_offset: int) -> LogSegment:
        """A new, empty ``.cleaned`` segment for the cleaner to fill and then hand to
        ``replace_segments``."""
        return self._files.new_segment(base_offset, CLEANED_SUFFIX)

    def flush(self, offset: int | None = None) -> None:
        """fsync every segment holding offsets in [recovery point, ``offset``) (default:
        the log end) and move the recovery point there."""
        with self._lock:
            target = self._log_end_offset if offset is None else min(offset, self._log_end_offset)
            if target > self._recovery_point:
                segs = self._segments.values_from(self._recovery_point)
                for i, seg in enumerate(segs):
                    if seg.base_offset >= target:
                        break
                    # The segment that will hold the recovery point leaves its indexes
                    # unsynced: an unclean open recovers from that segment on, rebuilding
                    # its indexes from the .log (LogLoader pass 4, as Kafka's), and a
                    # clean close or pause fsyncs them before its marker. A segment wholly
                    # below the recovery point is never recovered: all of it is synced.
                    wholly_below = i + 1 < len(segs) and segs[i + 1].base_offset <= target
                    seg.flush(indexes=wholly_below)
                self._files.sync_dir()
                self._recovery_point = target
            self._last_flush_ms = self.clock.monotonic_ms()

    def flush_if_due(self, now_ms: int | None = None) -> bool:
        """Flush when ``flush.ms`` has passed since the last flush; True if it did."""
        if self.config.flush_ms >= LONG_MAX:
            return False
        now = self.clock.monotonic_ms() if now_ms is None else now_ms
        if now - self._last_flush_ms < self.config.flush_ms:
            return False
        self.flush()
        return True

    # -- the read path's hooks (log_read) -------------------------------------------------

    def _view(self) -> tuple[tuple[int, ...], Callable[[int], LogSegment]]:
        snap = self._segments.snapshot()
        return tuple(s.base_offset for s in snap), snap.__getitem__

    def _read_end(self) -> int:
        return self._log_end_offset

    # -- truncation and retention ---------------------------------------------------------

    def truncate_to(self, offset: int) -> bool:
        """Remove every record at or above ``offset`` (whole batches: a batch holding
        ``offset`` goes entirely). True if anything was removed."""
        with self._lock:
            if offset < 0:
                raise InvalidOffsetError(f"cannot truncate {self._tp()} to offset {offset}")
            if offset >= self._log_end_offset:
                return False
            first = self._segments.first
            if first is None or first.base_offset > offset:
                self.truncate_fully_and_start_at(offset)
                return True
            doomed = [s for s in self._segments if s.base_offset > offset]
            self._delete_segments(doomed, "truncation")
            active = self._segments.last
            assert active is not None
            active.truncate_to(offset)
            active.resize_indexes(self.config.segment_index_bytes)
            self._log_end_offset = active.read_next_offset()
            self._producers.reload(self._log_end_offset)
            self._recovery_point = min(self._recovery_point, self._log_end_offset)
            self._high_watermark = min(self._high_watermark, self._log_end_offset)
            self._log_start_offset = min(self._log_start_offset, self._log_end_offset)
            return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start an empty log at ``offset``."""
        with self._lock:
            self._delete_segments(list(self._segments), "full truncation")
            self._producers.delete_snapshots(lambda o: True)
            self._segments.add(self._files.new_segment(offset))
            self._producers.reset(offset)
            self._log_end_offset = self._log_start_offset = offset
            self._recovery_point = self._high_watermark = offset
            self.flush()

    def maybe_increment_log_start_offset(self, offset: int) -> bool:
        """DeleteRecords: move the log start up to ``offset`` (<= the high watermark).
        Segments wholly below it go at the next ``delete_old_segments``."""
        with self._lock:
            if offset > self._high_watermark:
                raise OffsetOutOfRangeError(
                    f"cannot move the log start of {self._tp()} to {offset}: above the high "
                    f"watermark {self._high_watermark}")
            if offset <= self._log_start_offset:
                return False
            self._log_start_offset = offset
            # Kafka does the same: offsets below the log start need no recovery.
            self._recovery_point = max(self._recovery_point, offset)
            return True

    def delete_old_segments(self) -> int:
        """Retention (``retention.deletable_segments``: by log start offset always; by
        size and time with ``cleanup.policy`` containing delete). Returns the number of
        segments deleted. Also unlinks ``.deleted`` files that are due."""
        with self._lock:
            snap = self._segments.snapshot()
            decision = deletable_segments(
                self._retention_view(snap), self.config,
                log_start_offset=self._log_start_offset,
                high_watermark=self._high_watermark, now_ms=self.clock.milliseconds())
            at = 0
            for reason, count in decision.breaches:
                if at + count == len(snap):
                    self.roll()  # Kafka never leaves a log without an active segment
                self._delete_segments(list(snap[at:at + count]), reason)
                at += count
            if decision.count:
                self._log_start_offset = max(self._log_start_offset,
                                             decision.log_start_offset)
        self._deleter.run_due()
        return decision.count

    def _retention_view(self, snap: Sequence[LogSegment]) -> list[SegmentDescriptor]:
        last = len(snap) - 1
        return [SegmentDescriptor(seg.base_offset,
                                  snap[i + 1].base_offset if i < last else self._log_end_offset,
                                  seg.size, seg.largest_timestamp, is_active=i == last)
                for i, seg in enumerate(snap)]

    def _delete_segments(self, segments: list[LogSegment], reason: str) -> None:
        """``SegmentFiles.delete_segments``, then the producer snapshots below the first
        segment left."""
        self._files.delete_segments(segments, reason, self._tp())
        first = self._segments.first
        if first is not None:
            # Snapshots below the first segment describe nothing left (Kafka deletes a
            # segment's snapshot with it).
            self._producers.delete_snapshots(lambda o: o < first.base_offset)

    # -- compaction support ---------------------------------------------------------------

    def replace_segments(self, new_segments: list[LogSegment],
                         old_segments: list[LogSegment]) -> None:
        """Swap the cleaner's ``.cleaned`` segments in for ``old_segments`` (Kafka's
        ``replaceSegments``), crash-safely (``SegmentFiles.replace_segments``)."""
        with self._lock:
            self._files.replace_segments(new_segments, old_segments)

    # -- lifecycle ------------------------------------------------------------------------

    def rename_for_deletion(self) -> Path:
        """Close the log and rename its directory ``<topic>-<p>.<uuid>-delete``; returns
        the new path (the LogManager deletes it later)."""
        with self._lock:
            # Rename first, close after (open files follow a renamed directory): a rename
            # that fails leaves the log open and whole, still the partition's.
            new_dir = self.dir.parent / delete_dir_name(self.topic, self.partition)
            try:
                LOCAL.rename(self.dir, new_dir)
            except OSError as e:
                raise KafkaStorageError(
                    f"cannot rename {self.dir} to {new_dir.name} for deletion: "
                    f"{e.strerror}; the partition is unchanged") from e
            self.close(flush=False)
            LOCAL.fsync_dir(self.dir.parent)
            self.dir = new_dir
            for seg in self._segments:
                seg.update_dir(new_dir)
            return new_dir

    def close(self, *, flush: bool = True) -> None:
        """Flush (writer), trim the active indexes and release every file."""
        with self._lock:
            if flush:
                self.flush()
                self.take_producer_snapshot()
            segments = self._segments.snapshot()
            for seg in segments:
                # The active segment's final time-index entry is written at close: fsync
                # it with the trimmed indexes, so a clean shutdown leaves them durable.
                seg.close(flush=flush and seg is segments[-1])
            # Segments waiting out file.delete.delay.ms hold files too (for readers).
            self._deleter.release_handles(self.dir)

    def pause(self) -> None:
        """Writer: leave on disk what ``close()`` leaves (flushed, a producer snapshot at
        the log end, the active segment's final time-index entry, trimmed indexes) and
        release every file, but stay loaded; ``resume()`` before the next write. For a
        ``LogManager`` paused between two writes of one process (``LogManager.pause``)."""
        with self._lock:
            self.flush()
            self.take_producer_snapshot()
            segments = self._segments.snapshot()
            for seg in segments:
                if seg.holds_files:  # cheap: most were never opened by this writer
                    seg.release(flush=seg is segments[-1])

    def resume(self) -> None:
        """After ``pause()``, when nothing else wrote the directory: the active segment's
        indexes get back their preallocated size, as ``LogLoader`` gives them."""
        with self._lock:
            active = self._segments.last
            assert active is not None
            active.resize_indexes(self.config.segment_index_bytes)

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Log({self.dir}, start={self._log_start_offset}, end={self._log_end_offset}, "
                f"segments={self.num_segments})")
