"""One partition's log (Kafka's ``UnifiedLog``/``LocalLog``): a directory of segments.

``Log.open`` loads (and, after a crash, recovers) the directory through ``LogLoader``.
A writer ``Log`` appends validated v2 batches, assigning offsets by rewriting each
batch's base offset (the CRC does not cover it); rolls a new segment when the active one
is full, old or its index is full; flushes per ``flush.messages``/``flush.ms``; reads
whole batches; looks offsets up by timestamp; truncates; applies retention by time, size
and log start offset; and swaps in compacted segments for the cleaner.

Readers in other processes open the same directory with ``read_only=True``: the segment
list comes from the directory listing, segments are opened lazily, nothing is written
or recovered, and a segment that retention renamed ``.deleted`` under them makes them
list the directory again.

Thread-safety: one writer thread calls the mutating methods; they take ``_lock``. Reads
(``read``, ``read_chunks``, ``offset_for_timestamp`` and the properties) take no lock and
work on a snapshot of the segment list, so they never block the writer. A read-only Log
is safe for concurrent readers.

>>> log = Log.open(Path("/data/logs/events-0"), LogConfig.from_properties({}),
...                clock=SYSTEM_CLOCK)                                  # doctest: +SKIP
>>> info = log.append(batches); log.read(info.first_offset).records   # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

from . import log_loader
from .clock import SYSTEM_CLOCK, Clock
from .config import LogConfig
from .delayed_deletion import DelayedDeleter
from .errors import (
    CorruptRecordError,
    InvalidOffsetError,
    InvalidRecordError,
    KafkaStorageError,
    LogDirError,
    OffsetBelowLogStartError,
    OffsetOutOfRangeError,
    ReadOnlyError,
    RecordTooLargeError,
)
from .file_names import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    SWAP_SUFFIX,
    delete_dir_name,
    parse_partition_dir_name,
)
from .log_loader import LogLoader
from .log_segment import LogSegment
from .log_segments import LogSegments
from .offset_continuity import ContinuityCheck, offsets_contiguous
from .producer_state import ProducerStateManager, list_snapshot_offsets, snapshot_file
from .record_format import (
    LONG_MAX,
    MAGIC_V2,
    REASON_TOO_LARGE,
    V2_HEADER_SIZE,
    BatchHeader,
    read_batch_header,
    set_base_offset,
    stamp_log_append_time,
    verify,
)
from .transactions import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    Transactions,
    append_completions,
    check_isolation_level,
    committed_chunks,
)
from .txn_index import AbortedTxn

logger = logging.getLogger(__name__)

_RACY_NS = 2_000_000_000  # directory mtimes younger than this are not trusted


_READ_ONLY_ATTEMPTS = 5
"""How often a read-only reader lists the directory again when files vanish under
it (each retry follows a real change: a roll, retention or a compaction swap)."""


@dataclass(frozen=True, slots=True)
class AppendInfo:
    """What an append wrote: offsets ``first_offset..last_offset``, ``size`` bytes."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    num_records: int
    size: int


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


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Log:
    """One partition. Build it with ``Log.open``; see the module docstring."""

    def __init__(self, dir_: Path, config: LogConfig, *, clock: Clock, segments: list[LogSegment],
                 log_start_offset: int, recovery_point: int, log_end_offset: int,
                 high_watermark: int, deleter: DelayedDeleter, read_only: bool,
                 producer_state: ProducerStateManager | None = None) -> None:
        self.dir = Path(dir_)
        parsed = parse_partition_dir_name(self.dir.name)
        if parsed is None:
            raise LogDirError(f"{self.dir} is not a partition directory (<topic>-<partition>)")
        self.topic, self.partition = parsed
        self.config = config
        self.clock = clock
        self.read_only = read_only
        self._deleter = deleter
        # Guards every mutation: the segment list, the offsets below, file renames.
        # Readers never take it.
        self._lock = threading.RLock()
        self._segments = LogSegments(segments)
        self._log_start_offset = log_start_offset
        self._recovery_point = recovery_point
        self._log_end_offset = log_end_offset
        self._high_watermark = high_watermark
        self._last_flush_ms = clock.monotonic_ms()
        self._dir_dirty = False  # a segment file was created since the last dir fsync
        self._contiguous: bool | None = None  # offsets_contiguous, decided on first read
        # Read-only: base offsets from the last listing; segments opened on demand.
        self._ro_lock = threading.Lock()  # guards _ro_bases and _ro_open
        self._ro_bases: tuple[int, ...] = ()
        self._ro_open: dict[int, LogSegment] = {}
        self._ro_listed_mtime = -2  # the directory mtime of the last listing
        # Writer: producers and ongoing transactions up to the log end (changed under
        # _lock), and completed transactions whose markers are not yet below the high
        # watermark (they keep the LSO down, as Kafka's unreplicated transactions).
        self._producer_state = producer_state or ProducerStateManager(log_end_offset)
        self._unstable_completed: list[tuple[int, int]] = []  # (first, marker offset)
        self._txns = Transactions(lambda: self.dir, self._view, lambda: self._log_start_offset,
                                  read_only=read_only)
        if read_only:
            self._ro_open = {s.base_offset: s for s in segments}
            self._relist()

    @classmethod
    def open(cls, dir_: Path, config: LogConfig, *, clock: Clock = SYSTEM_CLOCK,
             recovery_point: int = 0, log_start_offset: int = 0,
             high_watermark: int | None = None, had_clean_shutdown: bool = True,
             read_only: bool = False, deleter: DelayedDeleter | None = None) -> Log:
        """Load (and after a crash recover) the partition directory ``dir_``."""
        deleter = deleter if deleter is not None else DelayedDeleter(clock)
        loaded = LogLoader(Path(dir_), config, clock=clock, recovery_point=recovery_point,
                           log_start_offset=log_start_offset,
                           had_clean_shutdown=had_clean_shutdown, read_only=read_only,
                           deleter=deleter).load()
        leo = loaded.log_end_offset
        if high_watermark is None:
            hw = leo
        elif read_only:
            # Not clamped to the files' end: the published high watermark says what
            # must be readable, and a read finding less reports it (MissingDataError).
            hw = max(high_watermark, loaded.log_start_offset)
        else:
            hw = max(min(high_watermark, leo), loaded.log_start_offset)
        return cls(dir_, config, clock=clock, segments=loaded.segments,
                   log_start_offset=loaded.log_start_offset,
                   recovery_point=loaded.recovery_point, log_end_offset=leo,
                   high_watermark=hw, deleter=deleter, read_only=read_only,
                   producer_state=loaded.producer_state)

    # -- offsets and sizes ----------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        """The offset the next append gets. Read-only: from the last segment's tail."""
        if self.read_only:
            self._relist()
            bases = self._ro_bases
            return self._ro_segment(bases[-1]).read_next_offset() if bases else 0
        return self._log_end_offset

    @property
    def recovery_point(self) -> int:
        """Every offset below it is fsynced."""
        return self._recovery_point

    @property
    def high_watermark(self) -> int:
        """The end of what readers may see."""
        return self._high_watermark

    @property
    def last_flush_ms(self) -> int:
        return self._last_flush_ms

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        """A snapshot of the segments, oldest first (read-only: opens every segment)."""
        if self.read_only:
            self._relist()
            return tuple(self._ro_segment(b) for b in self._ro_bases)
        return self._segments.snapshot()

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def num_segments(self) -> int:
        return len(self._ro_bases) if self.read_only else len(self._segments)

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark (clamped to [log start, log end]); returns it. A
        read-only Log only changes its in-memory view (from the checkpoint file)."""
        with self._lock:
            if self.read_only:
                self._high_watermark = max(offset, self._log_start_offset)
            else:
                self._high_watermark = max(min(offset, self._log_end_offset),
                                           self._log_start_offset)
            return self._high_watermark

    def _check_writable(self) -> None:
        if self.read_only:
            raise ReadOnlyError(f"log {self.dir} is open read-only")

    # -- append ---------------------------------------------------------------------------

    def append(self, records: bytes | bytearray | memoryview, *,
               assign_offsets: bool = True) -> AppendInfo:
        """Validate and append consecutive v2 batches; see the module docstring.

        With ``assign_offsets=False`` (the cleaner, replication-like copies) the batches
        keep their offsets, which must increase and start at or above the log end.
        """
        self._check_writable()
        buf = bytearray(records)
        headers = self._validate(buf, assign_offsets)
        if not headers:
            leo = self._log_end_offset
            return AppendInfo(leo, leo - 1, -1, -1, 0, 0)
        with self._lock:
            headers = self._assign(buf, headers, assign_offsets)
            max_ts, max_ts_offset = -1, headers[0].last_offset
            for h in headers:
                if h.max_timestamp > max_ts:
                    max_ts, max_ts_offset = h.max_timestamp, h.last_offset
            first, last = headers[0].base_offset, headers[-1].last_offset
            segment = self._maybe_roll(len(buf), max_ts, first, last)
            segment.append(buf, headers)
            self._update_producer_state(buf, headers, segment)
            self._log_end_offset = last + 1
            self._high_watermark = self._log_end_offset
            if self._log_end_offset - self._recovery_point >= self.config.flush_messages:
                self.flush()
        return AppendInfo(first, last, max_ts, max_ts_offset,
                          sum(max(h.records_count, 0) for h in headers), len(buf))

    def _tp(self) -> str:
        return f"{self.topic}-{self.partition}"

    def _update_producer_state(self, buf: bytearray, headers: list[BatchHeader],
                               segment: LogSegment) -> None:
        """Kafka's step after a log append: batches with a producer id update the
        producer state; an abort marker appends its entry to ``segment``'s
        ``.txnindex``. Batch by batch, as Kafka's recovery replays them, so a rebuilt
        index equals the appended one."""
        state = self._producer_state
        if all(h.producer_id < 0 for h in headers):
            state.map_end_offset = headers[-1].last_offset + 1
            return
        before = dict(state.ongoing_txns())
        append_completions(state, headers, buf, segment)
        after = {f for f, _p in state.ongoing_txns()}
        ends = {h.producer_id: h.base_offset for h in headers if h.is_control}
        hw = self._high_watermark
        # Completed transactions whose markers are not yet below the high watermark
        # (a new list each time: readers iterate it without the lock).
        self._unstable_completed = [(f, m) for f, m in self._unstable_completed if m >= hw] + [
            (first, ends[pid]) for first, pid in before.items()
            if first not in after and pid in ends]

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: the high watermark, or the first offset of the earliest
        transaction not yet decided below it, if lower. Read-only: computed from the
        producer snapshots and the batches after the newest one (see ``transactions``)."""
        hw = self._high_watermark
        if self.read_only:
            self._relist()
            first = self._txns.first_unstable_offset(hw)
        else:
            # No lock, as every read: a racing append can only make the answer one
            # append old, never past what is stable.
            first = self._producer_state.first_unstable_offset()
            for f, m in self._unstable_completed:
                if m >= hw:
                    first = f if first is None else min(first, f)
        if first is None:
            return hw
        return max(min(hw, first), self._log_start_offset)

    def aborted_transactions(self, start_offset: int, upper_offset: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping ``[start_offset, upper_offset)``, from the
        ``.txnindex`` files (computed from the log where one is missing or damaged)."""
        if self.read_only:
            self._relist()
        return self._txns.aborted_txns(start_offset, upper_offset)

    def take_producer_snapshot(self) -> None:
        """Write the producer state at the log end (``<offset>.snapshot``), if newer
        than the newest snapshot (Kafka's ``takeSnapshot``)."""
        self._check_writable()
        with self._lock:
            state = self._producer_state
            state.map_end_offset = self._log_end_offset
            snaps = list_snapshot_offsets(self.dir)
            if not snaps or snaps[-1] < state.map_end_offset:
                state.take_snapshot(self.dir)

    def _validate(self, buf: bytearray, assign_offsets: bool) -> list[BatchHeader]:
        cfg = self.config
        headers: list[BatchHeader] = []
        pos = 0
        now = self.clock.milliseconds()
        while pos < len(buf):
            check = verify(buf, pos, max_message_bytes=cfg.max_message_bytes)
            h = check.header
            if check.code == REASON_TOO_LARGE:
                raise RecordTooLargeError(f"append to {self._tp()}: {check.reason}")
            if h is None or not check.valid:
                what = " is not a whole record batch" if check.partial else ""
                raise CorruptRecordError(f"append to {self._tp()}: {check.reason}{what}")
            if h.magic != MAGIC_V2:
                raise CorruptRecordError(
                    f"append to {self._tp()}: batch at position {pos} has magic {h.magic}; "
                    f"only v2 record batches are written")
            if h.records_count < 1 or (assign_offsets and
                                       h.records_count != h.last_offset - h.base_offset + 1):
                raise CorruptRecordError(
                    f"append to {self._tp()}: batch at position {pos} has {h.records_count} "
                    f"records but last offset delta {h.last_offset - h.base_offset}")
            if cfg.message_timestamp_type == "LogAppendTime":
                stamp_log_append_time(buf, h, now)
                h = read_batch_header(buf, pos)
                assert h is not None
            elif not h.is_log_append_time:
                self._check_create_time(h, now)
            headers.append(h)
            pos = h.end_position
        if headers and (cfg.compact or cfg.message_timestamp_before_max_ms < LONG_MAX):
            self._check_records(buf, now)
        return headers

    def _check_create_time(self, h: BatchHeader, now: int) -> None:
        cfg = self.config
        if h.max_timestamp - now > cfg.message_timestamp_after_max_ms:
            raise InvalidRecordError(
                f"append to {self._tp()}: batch at position {h.position} has timestamp "
                f"{h.max_timestamp}, more than message.timestamp.after.max.ms="
                f"{cfg.message_timestamp_after_max_ms} ahead of now ({now})")
        if h.base_timestamp >= 0 and now - h.base_timestamp > cfg.message_timestamp_before_max_ms:
            raise InvalidRecordError(
                f"append to {self._tp()}: batch at position {h.position} has timestamp "
                f"{h.base_timestamp}, more than message.timestamp.before.max.ms="
                f"{cfg.message_timestamp_before_max_ms} before now ({now})")

    def _check_records(self, buf: bytearray, now: int) -> None:
        """Record-level checks (decodes the batches, vectorised): null keys on a
        compacted topic, CreateTime timestamps older than allowed."""
        import pyarrow.compute as pc

        from .record_codec import decode_batches

        table = decode_batches(bytes(buf), include_headers=False)
        if self.config.compact and table.column("key").null_count:
            raise InvalidRecordError(
                f"append to compacted topic-partition {self._tp()}: records with a null "
                f"key are not allowed (cleanup.policy=compact)")
        limit = self.config.message_timestamp_before_max_ms
        if limit < LONG_MAX and table.num_rows:
            create = pc.equal(table.column("timestampType"), 0)
            ts = pc.filter(table.column("timestamp"), create)
            oldest = pc.min(ts).as_py() if len(ts) else None
            if oldest is not None and now - oldest > limit:
                raise InvalidRecordError(
                    f"append to {self._tp()}: a record has timestamp {oldest}, more than "
                    f"message.timestamp.before.max.ms={limit} before now ({now})")

    def _assign(self, buf: bytearray, headers: list[BatchHeader],
                assign_offsets: bool) -> list[BatchHeader]:
        next_offset = self._log_end_offset
        out = []
        for h in headers:
            delta = h.last_offset - h.base_offset
            if assign_offsets:
                set_base_offset(buf, h.position, next_offset)
                h = dataclasses.replace(h, base_offset=next_offset,
                                        last_offset=next_offset + delta)
            elif h.base_offset < next_offset:
                raise InvalidOffsetError(
                    f"append to {self._tp()}: batch at position {h.position} starts at offset "
                    f"{h.base_offset}, below the next expected offset {next_offset}")
            out.append(h)
            next_offset = h.last_offset + 1
        return out

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
        self._check_writable()
        with self._lock:
            new_base = max(expected_next_offset or 0, self._log_end_offset)
            active = self._segments.last
            if active is not None and active.size == 0 and active.base_offset == new_base:
                return active
            # The new segment first: if its files cannot be made (a full filesystem, no
            # inodes), the active segment stays active with its indexes untrimmed.
            segment = self._new_segment(new_base)
            try:
                if active is not None and active.size == 0:
                    self._segments.remove(active.base_offset)
                    active.delete()
                elif active is not None:
                    active.on_become_inactive()  # its final time-index entry needs space
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
            self.flush(new_base)
            return segment

    def _new_segment(self, base_offset: int, file_suffix: str = "") -> LogSegment:
        cfg = self.config
        jitter = cfg.random_segment_jitter()
        paths = LogSegment.file_paths(self.dir, base_offset, file_suffix)
        for path in paths:
            if path.exists() and path.stat().st_size > 0 and path.suffix == ".log":
                raise KafkaStorageError(f"cannot create segment {path}: it already exists")
        for path in paths:
            # Left by an attempt that failed (a full filesystem): an index of an empty
            # segment opened as existing would count its whole length as entries.
            if path.exists():
                logger.warning("new segment file %s already exists; deleting it first", path)
                path.unlink()
        self._dir_dirty = True
        return LogSegment.open(self.dir, base_offset, index_interval_bytes=cfg.index_interval_bytes,
                               max_index_size=cfg.segment_index_bytes, rolling_jitter_ms=jitter,
                               created_ms=self.clock.milliseconds(), file_suffix=file_suffix)

    def new_segment(self, base_offset: int) -> LogSegment:
        """A new, empty ``.cleaned`` segment for the cleaner to fill and then hand to
        ``replace_segments``."""
        self._check_writable()
        return self._new_segment(base_offset, CLEANED_SUFFIX)

    def flush(self, offset: int | None = None) -> None:
        """fsync every segment holding offsets in [recovery point, ``offset``) (default:
        the log end) and move the recovery point there."""
        if self.read_only:
            return
        with self._lock:
            target = self._log_end_offset if offset is None else min(offset, self._log_end_offset)
            if target > self._recovery_point:
                for seg in self._segments.values_from(self._recovery_point):
                    if seg.base_offset >= target:
                        break
                    seg.flush()
                if self._dir_dirty:
                    _fsync_dir(self.dir)
                    self._dir_dirty = False
                self._recovery_point = target
            self._last_flush_ms = self.clock.monotonic_ms()

    def flush_if_due(self, now_ms: int | None = None) -> bool:
        """Flush when ``flush.ms`` has passed since the last flush; True if it did."""
        if self.read_only or self.config.flush_ms >= LONG_MAX:
            return False
        now = self.clock.monotonic_ms() if now_ms is None else now_ms
        if now - self._last_flush_ms < self.config.flush_ms:
            return False
        self.flush()
        return True

    # -- reading --------------------------------------------------------------------------

    def _check_start(self, start_offset: int) -> None:
        lso = self._log_start_offset
        end = self._high_watermark if self.read_only else self._log_end_offset
        if start_offset < lso:
            # Checked first: a read-only Log learns a new log start from the listing,
            # before a newer high watermark reaches it, so lso may exceed ``end``.
            raise OffsetBelowLogStartError(
                f"offsets [{start_offset}, {lso}) of {self._tp()} were removed (the log "
                f"start offset is now {lso})", start_offset, lso)
        if start_offset > end:
            raise OffsetOutOfRangeError(
                f"offset {start_offset} is out of range for {self._tp()}: above the "
                f"{'high watermark' if self.read_only else 'log end offset'} {end} "
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
        """(base offsets, i -> segment) over a consistent snapshot."""
        if self.read_only:
            bases = self._ro_bases
            return bases, lambda i: self._ro_segment(bases[i])
        snap = self._segments.snapshot()
        return tuple(s.base_offset for s in snap), snap.__getitem__

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
        for attempt in range(_READ_ONLY_ATTEMPTS):
            last_attempt = not self.read_only or attempt == _READ_ONLY_ATTEMPTS - 1
            try:
                fetched = self._read_segments(start_offset, limit, max_bytes, hw, lso,
                                              last_attempt)
            except (FileNotFoundError, KafkaStorageError):
                if last_attempt:
                    raise
            else:
                if fetched is not None:
                    return fetched
            # Read-only: a roll, retention or a compaction swap changed the directory
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

    def _segment_path(self, base: int) -> Path:
        return LogSegment.file_paths(self.dir, base)[0]

    def read_chunks(self, start_offset: int, end_offset: int,
                    chunk_bytes: int = 8 << 20, *,
                    isolation_level: str = READ_UNCOMMITTED) -> Iterator[memoryview]:
        """Whole batches covering [``start_offset``, ``end_offset``) (capped at the high
        watermark), as memoryviews of at most ``chunk_bytes`` each (a larger batch comes
        alone). Only one chunk is in memory at a time; each chunk is a fresh buffer.

        ``isolation_level="read_committed"``: capped at the last stable offset, and
        without the data batches of aborted transactions (control batches stay).

        Every batch header is checked against ``offset_continuity``'s rules as it is
        walked: CorruptRecordError for a batch that breaks them, MissingDataError for
        offsets missing from the range (a segment file deleted or cut short, retention
        under the reader: ``OffsetBelowLogStartError``); the caller may go on from the
        error's ``end``. Never a silent jump."""
        if check_isolation_level(isolation_level) == READ_COMMITTED:
            end_offset = min(end_offset, self.last_stable_offset)
            if start_offset < end_offset:
                aborted = self.aborted_transactions(start_offset, end_offset)
                yield from committed_chunks(self.read_chunks(start_offset, end_offset,
                                                             chunk_bytes), aborted)
            else:
                self._check_start(start_offset)
            return
        self._check_start(start_offset)
        end_offset = min(end_offset, self._high_watermark)
        if start_offset >= end_offset:
            return
        check = self._continuity(start_offset)
        for attempt in range(_READ_ONLY_ATTEMPTS):
            last_attempt = not self.read_only or attempt == _READ_ONLY_ATTEMPTS - 1
            if self.read_only:
                self._relist(force=attempt > 0)
                self._check_start(check.expected)
            try:
                done = yield from self._walk_chunks(check, end_offset, chunk_bytes)
            except KafkaStorageError:
                # Retention took a segment (out of range when listed again) or a
                # compaction swap replaced it (same base offset, new file).
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
            if i == first_i:
                first, position = seg.find_batch(check.expected)
                if first is None:
                    check.segment_end(position, seg.size)
                    continue
            else:
                position = 0
            while True:
                buf = bytearray(chunk_bytes)
                n = seg.readinto(buf, position)
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

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        """The first offset whose record timestamp is >= ``timestamp_ms`` (and at or
        above the log start), or None when every visible record is older."""
        hw = self._high_watermark
        lso = self._log_start_offset
        if self.read_only:
            self._relist()
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

        from .record_codec import decode_batches

        table = decode_batches(seg.pread(h.position, h.size), start_offset=lso,
                               include_headers=False)
        mask = pc.greater_equal(table.column("timestamp"), timestamp_ms)
        hits = pc.filter(table.column("offset"), mask)
        return hits[0].as_py() if len(hits) else None

    # -- truncation and retention ---------------------------------------------------------

    def truncate_to(self, offset: int) -> bool:
        """Remove every record at or above ``offset`` (whole batches: a batch holding
        ``offset`` goes entirely). True if anything was removed."""
        self._check_writable()
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
            self._reload_producer_state()
            self._recovery_point = min(self._recovery_point, self._log_end_offset)
            self._high_watermark = min(self._high_watermark, self._log_end_offset)
            self._log_start_offset = min(self._log_start_offset, self._log_end_offset)
            return True

    def _delete_snapshots(self, doomed: Callable[[int], bool]) -> None:
        for snap in list_snapshot_offsets(self.dir):
            if doomed(snap):
                try:
                    os.unlink(snapshot_file(self.dir, snap))
                except FileNotFoundError:
                    logger.debug("snapshot %d of %s was already gone", snap, self._tp())

    def _reload_producer_state(self) -> None:
        """After a truncation: drop snapshots past the log end, rebuild the state from
        the newest remaining one (Kafka's ``truncateAndReload``)."""
        leo = self._log_end_offset
        self._delete_snapshots(lambda o: o > leo)
        self._producer_state = self._txns.state_at(leo)
        self._unstable_completed = [(f, m) for f, m in self._unstable_completed if m < leo]

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start an empty log at ``offset``."""
        self._check_writable()
        with self._lock:
            self._delete_segments(list(self._segments), "full truncation")
            self._delete_snapshots(lambda o: True)
            self._segments.add(self._new_segment(offset))
            self._producer_state = ProducerStateManager(offset)
            self._unstable_completed = []
            self._log_end_offset = self._log_start_offset = offset
            self._recovery_point = self._high_watermark = offset
            self.flush()

    def maybe_increment_log_start_offset(self, offset: int) -> bool:
        """DeleteRecords: move the log start up to ``offset`` (<= the high watermark).
        Segments wholly below it go at the next ``delete_old_segments``."""
        self._check_writable()
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
        """Retention: by log start offset always; by size and time with
        ``cleanup.policy`` containing delete. Returns the number of segments deleted.
        Also unlinks ``.deleted`` files that are due."""
        self._check_writable()
        cfg = self.config
        with self._lock:
            deleted = self._delete_where(
                lambda seg, nxt: nxt is not None and nxt.base_offset <= self._log_start_offset,
                "log start offset")
            if cfg.delete:
                deleted += self._delete_retention_size()
                deleted += self._delete_retention_ms()
        self._deleter.run_due()
        return deleted

    def _delete_retention_size(self) -> int:
        limit = self.config.retention_bytes
        size = self._segments.size_in_bytes()
        if limit < 0 or size < limit:
            return 0
        diff = size - limit

        def breached(seg: LogSegment, _next: LogSegment | None) -> bool:
            nonlocal diff
            if diff - seg.size >= 0:
                diff -= seg.size
                return True
            return False

        return self._delete_where(breached, f"retention.bytes={limit}")

    def _delete_retention_ms(self) -> int:
        limit = self.config.retention_ms
        if limit < 0:
            return 0
        now = self.clock.milliseconds()
        return self._delete_where(lambda seg, _n: now - seg.largest_timestamp > limit,
                                  f"retention.ms={limit}")

    def _delete_where(self, predicate: Callable[[LogSegment, LogSegment | None], bool],
                      reason: str) -> int:
        """Delete the oldest segments while ``predicate`` holds and they lie wholly below
        the high watermark; roll first when every segment would go."""
        snap = self._segments.snapshot()
        doomed = []
        for i, seg in enumerate(snap):
            nxt = snap[i + 1] if i + 1 < len(snap) else None
            upper = nxt.base_offset if nxt is not None else self._log_end_offset
            if nxt is None and seg.size == 0:
                break
            if not (self._high_watermark >= upper and predicate(seg, nxt)):
                break
            doomed.append(seg)
        if not doomed:
            return 0
        if len(doomed) == len(snap):
            self.roll()
        self._delete_segments(doomed, reason)
        first = self._segments.first
        if first is not None and first.base_offset > self._log_start_offset:
            self._log_start_offset = first.base_offset
        return len(doomed)

    def _delete_segments(self, segments: list[LogSegment], reason: str) -> None:
        """Take segments out of the list, rename them ``.deleted``, unlink them after
        ``file.delete.delay.ms`` (readers holding them keep reading meanwhile)."""
        for seg in segments:
            self._segments.remove(seg.base_offset)
            logger.info("deleting segment %s of %s (%s)", seg.log_path.name, self._tp(), reason)
            try:
                seg.change_file_suffixes(seg.file_suffix, DELETED_SUFFIX)
            except FileNotFoundError:
                logger.warning("segment %s vanished before deletion", seg.log_path)
            self._deleter.schedule(seg.paths(), self.config.file_delete_delay_ms,
                                   before_delete=seg.close_handlers)
        first = self._segments.first
        if first is not None:
            # Snapshots below the first segment describe nothing left (Kafka deletes a
            # segment's snapshot with it).
            self._delete_snapshots(lambda o: o < first.base_offset)

    # -- compaction support ---------------------------------------------------------------

    def replace_segments(self, new_segments: list[LogSegment],
                         old_segments: list[LogSegment]) -> None:
        """Swap the cleaner's ``.cleaned`` segments in for ``old_segments`` (Kafka's
        ``replaceSegments``), crash-safely: new files become ``.swap`` (a crash from here
        on is completed by the loader), the list changes atomically for readers, old files
        become ``.deleted``, and the ``.swap`` files take their final names."""
        self._check_writable()
        with self._lock:
            new_sorted = sorted(new_segments, key=lambda s: s.base_offset)
            existing = {s.base_offset: s for s in self._segments}
            old_sorted = [s for s in sorted(old_segments, key=lambda s: s.base_offset)
                          if existing.get(s.base_offset) is s]
            for seg in new_sorted:
                seg.flush()
                seg.on_become_inactive()
            for seg in reversed(new_sorted):
                if seg.file_suffix == CLEANED_SUFFIX:
                    seg.change_file_suffixes(CLEANED_SUFFIX, SWAP_SUFFIX)
            _fsync_dir(self.dir)
            old_bases = {s.base_offset for s in old_sorted}
            kept = [s for s in self._segments if s.base_offset not in old_bases]
            new_bases = {s.base_offset for s in new_sorted}
            kept = [s for s in kept if s.base_offset not in new_bases] + new_sorted
            self._segments.replace_all(kept)
            for seg in old_sorted:
                self._segments_deleted_files(seg)
            for seg in new_sorted:
                if seg.file_suffix == SWAP_SUFFIX:
                    seg.change_file_suffixes(SWAP_SUFFIX, "")
            _fsync_dir(self.dir)

    def _segments_deleted_files(self, seg: LogSegment) -> None:
        seg.change_file_suffixes(seg.file_suffix, DELETED_SUFFIX)
        self._deleter.schedule(seg.paths(), self.config.file_delete_delay_ms,
                               before_delete=seg.close_handlers)

    # -- read-only listing ----------------------------------------------------------------

    def _relist(self, *, force: bool = False) -> None:
        """Read-only: list the directory again if it changed (a roll or retention).

        A listing costs one ``listdir`` (O(segments)), so it is skipped while the
        directory's mtime is the one already listed, unless that mtime was too recent to
        trust (a change within the file system's timestamp granularity would not move
        it). File mtimes are wall-clock times, hence ``time.time_ns`` here and not the
        injected clock.
        """
        try:
            mtime = os.stat(self.dir).st_mtime_ns
        except FileNotFoundError:
            mtime = -1
        now = time.time_ns()
        if not force and mtime == self._ro_listed_mtime and now - mtime > _RACY_NS:
            return
        bases = tuple(log_loader.list_segment_bases(self.dir))
        with self._ro_lock:
            self._ro_listed_mtime = mtime
            # A compaction swap keeps the base offset of a group's first segment but
            # puts a new file there: an open segment whose file is no longer the one at
            # its path is stale and must be opened again.
            for b in [b for b, seg in self._ro_open.items() if not seg.is_file_at_path()]:
                self._ro_open.pop(b).close_handlers()
            if bases == self._ro_bases:
                return
            gone = [b for b in self._ro_open if b not in bases]
            for b in gone:
                self._ro_open.pop(b).close_handlers()
            # The old last segment may have been trimmed and reopened as inactive: its
            # read-only index counts leading non-zero entries either way.
            self._ro_bases = bases
            if bases and self._log_start_offset < bases[0]:
                self._log_start_offset = bases[0]

    def _ro_segment(self, base: int) -> LogSegment:
        with self._ro_lock:
            seg = self._ro_open.get(base)
            if seg is None:
                cfg = self.config
                seg = LogSegment.open(self.dir, base, index_interval_bytes=cfg.index_interval_bytes,
                                      max_index_size=cfg.segment_index_bytes, read_only=True)
                self._ro_open[base] = seg
            return seg

    # -- lifecycle ------------------------------------------------------------------------

    def rename_for_deletion(self) -> Path:
        """Close the log and rename its directory ``<topic>-<p>.<uuid>-delete``; returns
        the new path (the LogManager deletes it later)."""
        self._check_writable()
        with self._lock:
            # Rename first, close after (open files follow a renamed directory): a rename
            # that fails leaves the log open and whole, still the partition's.
            new_dir = self.dir.parent / delete_dir_name(self.topic, self.partition)
            try:
                os.rename(self.dir, new_dir)
            except OSError as e:
                raise KafkaStorageError(
                    f"cannot rename {self.dir} to {new_dir.name} for deletion: "
                    f"{e.strerror}; the partition is unchanged") from e
            self.close(flush=False)
            _fsync_dir(self.dir.parent)
            self.dir = new_dir
            for seg in self._segments:
                seg.update_dir(new_dir)
            return new_dir

    def close(self, *, flush: bool = True) -> None:
        """Flush (writer), trim the active indexes and release every file."""
        with self._lock:
            if self.read_only:
                with self._ro_lock:
                    for seg in self._ro_open.values():
                        seg.close_handlers()
                    self._ro_open.clear()
                return
            if flush:
                self.flush()
                self.take_producer_snapshot()
            segments = self._segments.snapshot()
            for seg in segments:
                # The active segment's final time-index entry is written at close: fsync
                # it with the trimmed indexes, so a clean shutdown leaves them durable.
                seg.close(flush=flush and seg is segments[-1])

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Log({self.dir}, start={self._log_start_offset}, end={self._log_end_offset}, "
                f"segments={self.num_segments})")
