"""One segment of a partition, the writer's half: ``<base>.log`` + ``<base>.index`` +
``<base>.timeindex`` (+ ``<base>.txnindex`` once it holds an aborted transaction) (Kafka's
``LogSegment``).

The ``.log`` holds consecutive record batches exactly as Kafka writes them (see
``record_format``); the two indexes are sparse caches of it. ``LogSegment`` adds to the
read path of ``segment_reads.SegmentReads`` what only a writer does: it appends validated
batches (the ``Log`` validates), decides when to roll, truncates, recovers (walks and
checks every batch, rebuilding the indexes), flushes with a real fsync, renames its files
with a temporary suffix and deletes them. A read-only segment is a ``LogSegment`` too
(``read_only=True`` or ``LogSegment.open_read_only``): its writer operations raise.

Parts: a segment is built from ``segment_parts.SegmentParts`` (``LogSegment(dir, base)``
assembles a local one's); the writer's operations go through the parts' ``FileRecords``
(``write``, and ``pread`` reads, never memory-mapped, so a reader survives the writer
truncating the file) and raise "not in a filesystem" on a segment that has none.

Crash policy: the ``.log`` is the truth; the indexes are rebuilt by ``recover`` (the
transaction index by the loader, which knows the producer state at the segment's base). Bytes
past the last complete valid batch are cut by recovery.

Thread-safety: one writer thread calls the mutating methods (append, truncate_to,
recover, flush, close, rename, delete); reads (``read``, ``translate_offset``,
``iter_batches``...) may run concurrently from other threads and never block on it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

from ..errors import CorruptIndexError, InvalidOffsetError, KafkaStorageError
from ..records.record_format import (
    INT32_MAX,
    BatchHeader,
    Bytes,
    iter_batch_headers,
)
from ..storage.file_handle import FileHandle
from ..storage.file_names import index_file, log_file, time_index_file, txn_index_file
from ..storage.storage import LOCAL, Storage
from .segment_parts import SegmentParts, segment_parts
from .segment_reads import SegmentReads
from .segment_records import FileRecords
from .segment_recovery import scan_log_file

if TYPE_CHECKING:
    from .offset_continuity import ContinuityCheck
    from .recovered_batches import ProducerBatchCollector
    from .segment_indexer import SegmentIndexer

logger = logging.getLogger(__name__)


class LogSegment(SegmentReads):
    """A ``.log`` with its offset and time indexes. See the module docstring.

    >>> seg = LogSegment.open(dir_, 0, index_interval_bytes=4096,
    ...                       max_index_size=10 << 20)              # doctest: +SKIP
    >>> seg.append(records)                                          # doctest: +SKIP
    """

    def __init__(self, dir_: PurePath, base_offset: int, *, index_interval_bytes: int = 4096,
                 max_index_size: int = 10 * 1024 * 1024, rolling_jitter_ms: int = 0,
                 created_ms: int = 0, file_suffix: str = "", read_only: bool = False,
                 lazy: bool = False, storage: Storage = LOCAL,
                 parts: SegmentParts | None = None,
                 max_timestamp: tuple[int, int] | None = None,
                 known_max_timestamp: int | None = None) -> None:
        if parts is None:
            local_dir = dir_ if isinstance(dir_, Path) else Path(dir_)
            parts = segment_parts(storage, local_dir, base_offset, file_suffix=file_suffix,
                                  read_only=read_only, max_index_size=max_index_size)
        # Asked before the ``.log`` is opened: a segment this call creates is removed
        # again when its indexes cannot be made.
        local = parts.file
        # The ``.log``'s size at its last fsync (None: unknown, or cut since): a flush with
        # nothing written since skips the fsync (a commit's publish flushes the log, then
        # its pause releases the segment with a flush of the indexes only).
        self._log_synced_size: int | None = None
        creating = (not lazy and not read_only and local is not None
                    and not local.fs.exists(local.path))
        super().__init__(dir_, base_offset, index_interval_bytes=index_interval_bytes,
                         max_index_size=max_index_size, rolling_jitter_ms=rolling_jitter_ms,
                         created_ms=created_ms, file_suffix=file_suffix,
                         read_only=read_only, lazy=lazy, storage=storage, parts=parts,
                         max_timestamp=max_timestamp,
                         known_max_timestamp=known_max_timestamp)
        if not lazy and not read_only and self._size == 0:
            # A new segment gets its index files now, preallocated, as Kafka's do.
            try:
                self._offset_index.get()
                self._time_index.get()
            except (OSError, KafkaStorageError) as e:
                if creating:
                    self.delete()  # a half-made segment must not be found at the next open
                else:
                    self.close_handlers()
                raise KafkaStorageError(f"cannot create the indexes of {self.log_path}: {e}") \
                    from e

    @property
    def _file(self) -> FileRecords:
        """The ``.log`` as a file of a filesystem (a segment elsewhere has none)."""
        if self._local is None:
            raise KafkaStorageError(f"segment {self.log_path} is not in a filesystem: it "
                                    "cannot be renamed or deleted through the segment")
        return self._local

    @property
    def _writer(self) -> FileHandle:
        """The writer's ``.log`` (a read-only segment has none)."""
        if self.read_only:
            raise InvalidOffsetError(f"segment {self.log_path} is open read-only")
        return self._file.writer

    @property
    def _size(self) -> int:
        """The writer's size of the ``.log``."""
        return self._file.written_size

    @_size.setter
    def _size(self, value: int) -> None:
        if self._log_synced_size is not None and value < self._log_synced_size:
            # Cut below what was fsynced: bytes written again up to the same size would
            # look synced by size alone.
            self._log_synced_size = None
        self._file.written_size = value

    @classmethod
    def open(cls, dir_: Path, base_offset: int, **kwargs: Any) -> LogSegment:
        """Open (creating when missing) the segment's three files; keyword arguments as
        the constructor."""
        return cls(dir_, base_offset, **kwargs)

    @staticmethod
    def file_paths(dir_: Path, base_offset: int, file_suffix: str = "") -> list[Path]:
        """The ``.log``, ``.index`` and ``.timeindex`` paths of a segment."""
        return [log_file(dir_, base_offset, file_suffix),
                index_file(dir_, base_offset, file_suffix),
                time_index_file(dir_, base_offset, file_suffix)]

    # -- rolling --------------------------------------------------------------------------

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        first = self.rolling_based_timestamp()
        if first is not None and first >= 0:
            return message_timestamp - first
        return now_ms - self.created_ms

    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT32_MAX

    def should_roll(self, *, segment_bytes: int, segment_ms: int, max_timestamp: int,
                    max_offset: int, messages_size: int, now_ms: int) -> str | None:
        """Why this (active) segment must roll before taking ``messages_size`` more bytes
        with these offsets and timestamps, or None (Kafka's ``shouldRoll``)."""
        size = self.size
        if size > 0 and size > segment_bytes - messages_size:
            return "segment.bytes"
        if size > 0 and (self.time_waited_for_roll(now_ms, max_timestamp)
                         > segment_ms - self.rolling_jitter_ms):
            return "segment.ms"
        if self.offset_index.is_full:
            return "offset index full"
        if self.time_index.is_full:
            return "time index full"
        if not self.can_convert_to_relative_offset(max_offset):
            return "relative offset overflow"
        return None

    # -- append ---------------------------------------------------------------------------

    def append(self, records: Bytes, headers: Sequence[BatchHeader] | None = None) -> None:
        """Append whole, already validated batches (``headers`` are their headers within
        ``records``; parsed when None). Offsets must fit this segment."""
        if self.read_only:
            raise InvalidOffsetError(f"segment {self.log_path} is open read-only")
        if headers is None:
            headers = list(iter_batch_headers(records))
        if not headers:
            return
        last = headers[-1].last_offset
        if not self.can_convert_to_relative_offset(last):
            raise InvalidOffsetError(
                f"offset {last} does not fit segment {self.log_path} (base {self.base_offset})")
        start = physical = self._size
        view = memoryview(records)[:headers[-1].end_position]
        max_ts, max_ts_offset = self._max_timestamp_and_offset()
        index_counts = (self.offset_index.entries, self.time_index.entries)
        self._write_all(view)
        interval = self.index_interval_bytes
        since = self._bytes_since_last_index_entry
        try:
            for h in headers:
                if h.max_timestamp > max_ts:
                    max_ts, max_ts_offset = h.max_timestamp, h.last_offset
                if since > interval:
                    self.offset_index.append(h.last_offset, physical)
                    self.time_index.maybe_append(max_ts, max_ts_offset)
                    since = 0
                physical += h.size
                since += h.size
        except KafkaStorageError:
            # An index could not get space (ENOSPC): take the batches back out of the
            # .log, or the Log (which keeps its end offset) would give their offsets again.
            self._undo_append(start, index_counts)
            raise
        if start == 0:
            self._rolling_based_timestamp = headers[0].max_timestamp
        self._bytes_since_last_index_entry = since
        self._max_ts_and_offset = (max_ts, max_ts_offset)

    def _undo_append(self, size: int, index_counts: tuple[int, int]) -> None:
        self.offset_index.truncate_to_entries(index_counts[0])
        self.time_index.truncate_to_entries(index_counts[1])
        try:
            self._writer.truncate(size)
        except OSError as e:
            raise KafkaStorageError(
                f"cannot cut {self.log_path} back to {size} bytes after a failed append: "
                f"{e.strerror}; recovery at the next open will") from e
        self._size = size

    def _write_all(self, view: memoryview) -> None:
        handle = self._writer
        try:
            written = 0
            while written < len(view):
                n = handle.write(view[written:])
                if not n:
                    raise OSError(f"short write to {self.log_path}")
                written += n
        except OSError as e:
            # Leave the file as long as what we know we wrote: a partial batch would
            # otherwise sit before the next append.
            try:
                handle.truncate(self._size)
            except OSError as cut:
                raise KafkaStorageError(
                    f"failed to append to {self.log_path}: {e}; cutting it back to "
                    f"{self._size} bytes failed too ({cut.strerror}): the next open recovers "
                    "it") from e
            raise KafkaStorageError(f"failed to append to {self.log_path}: {e}") from e
        self._size += len(view)

    def update_dir(self, dir_: Path) -> None:
        """The partition directory was renamed: point the paths at the new one."""
        dir_ = Path(dir_)
        self.dir = dir_
        self._file.update_path(log_file(dir_, self.base_offset, self.file_suffix))
        self._offset_index.update_path(index_file(dir_, self.base_offset, self.file_suffix))
        self._time_index.update_path(time_index_file(dir_, self.base_offset, self.file_suffix))
        if self._txn is not None:
            self._txn.path = txn_index_file(dir_, self.base_offset, self.file_suffix)

    # -- mutation -------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is >= ``offset``; returns bytes removed."""
        mapping = self.translate_offset(offset)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        self._max_ts_and_offset = None
        if mapping is None:
            return 0
        removed = self._size - mapping.position
        self._writer.truncate(mapping.position)
        self._size = mapping.position
        self._bytes_since_last_index_entry = 0
        if self._size == 0:
            self._rolling_based_timestamp = None
        # Indexes may have lost their preallocation when they were trimmed.
        self.offset_index.resize(self.offset_index._max_index_size)
        self.time_index.resize(self.time_index._max_index_size)
        return removed

    def recover(self, max_message_bytes: int,
                producers: ProducerBatchCollector | None = None,
                continuity: ContinuityCheck | None = None) -> int:
        """Check every batch (size, CRC, increasing offsets, ``max_message_bytes``),
        rebuild both indexes, cut at the first invalid or partial batch. Returns the
        number of bytes cut. ``producers`` hears of every valid batch, so producer state
        is rebuilt without reading the segment again (``recovered_batches``).
        ``continuity`` (entered on this segment): the offset rules readers apply judge
        every batch's offsets, so recovery keeps exactly the batches a reader accepts.

        The walk over the ``.log`` is ``segment_recovery.scan_log_file``'s.
        """
        self.offset_index.reset()
        self.time_index.reset()
        handle = self._writer
        file_size = handle.size
        ix = self.indexer(max_message_bytes)
        ix.producers = producers
        ix.continuity = continuity
        reason = scan_log_file(handle, file_size, ix, base_offset=self.base_offset,
                               max_message_bytes=max_message_bytes, continuity=continuity)
        truncated = file_size - ix.valid_end
        if truncated:
            logger.warning("recovery of %s: cutting its last %d bytes, from position %d "
                           "(offset %d): %s", self.log_path, truncated, ix.valid_end,
                           ix.next_offset, reason or "a partial batch at the end of the file")
            handle.truncate(ix.valid_end)
        self.adopt_indexes(ix)
        if producers is not None:
            producers.finish(ix.next_offset)
        return truncated

    def indexer(self, max_message_bytes: int,
                scan_capacity: int | None = None) -> SegmentIndexer:
        """A ``SegmentIndexer`` for this segment's batches (its indexes must be empty);
        ``scan_capacity`` defaults to ``segment_indexer.SCAN_CAPACITY``."""
        # The kernels live in numba modules that only recovery and the cleaner load: a
        # process that merely appends or reads (a Spark commit or planner) never does.
        from .segment_indexer import SCAN_CAPACITY, SegmentIndexer

        if scan_capacity is None:
            scan_capacity = SCAN_CAPACITY
        return SegmentIndexer(self.base_offset, self.index_interval_bytes, max_message_bytes,
                              (self.offset_index.max_entries,
                               max(self.time_index.max_entries - 1, 0)), scan_capacity)

    def adopt_indexes(self, ix: SegmentIndexer) -> None:
        """Take the index entries and state ``ix`` gathered over this segment's whole
        ``.log`` (its indexes reset): what appending its batches would have left. The
        cleaner writes a ``.cleaned`` segment's file itself and ends with this."""
        self.offset_index.load_entries(ix.offset_entries)
        self.time_index.load_entries(ix.time_entries)
        self._bytes_since_last_index_entry = ix.bytes_since_last_entry
        self._max_ts_and_offset = ix.max_timestamp
        self._rolling_based_timestamp = ix.first_timestamp
        self._log_synced_size = None  # written through another handle
        self._size = ix.valid_end

    def on_become_inactive(self) -> None:
        """The segment stops being active: final time-index entry, trimmed indexes."""
        self._final_time_index_entry()
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()

    def _final_time_index_entry(self) -> None:
        """Kafka's last time-index entry of a segment that stops taking appends: its
        largest timestamp, written even into a full index."""
        self.time_index.maybe_append(self.max_timestamp_so_far,
                                     self.offset_of_max_timestamp_so_far, skip_full_check=True)

    def resize_indexes(self, size: int) -> None:
        self.offset_index.resize(size)
        self.time_index.resize(size)

    def sanity_check(self) -> None:
        """Kafka's check of a segment's indexes (reads only the index files)."""
        self.offset_index.sanity_check()
        self.time_index.sanity_check()
        last = self.offset_index.last_entry()
        if last is not None and last.position >= self.size:
            raise CorruptIndexError(
                f"index {self.offset_index.path} points at position {last.position}, past "
                f"the end of {self.log_path} ({self.size} bytes)")

    def flush(self, *, indexes: bool = True) -> None:
        """fsync the ``.log`` and (``indexes``) the offset and time indexes (a lazily
        loaded segment never opened has written nothing through this process: nothing to
        flush). ``indexes=False`` is for the segment that will hold the log's recovery
        point (``Log.flush``): recovery after a crash rebuilds that segment's indexes
        from its ``.log`` anyway."""
        if self.read_only or self.closed or not self._records.is_open:
            return
        try:
            size = self._size
            if size != self._log_synced_size:
                self._writer.fsync()
                self._log_synced_size = size
            if indexes:
                self._offset_index.flush()
                self._time_index.flush()
            if self._txn is not None:
                self._txn.flush()
        except OSError as e:
            raise KafkaStorageError(f"failed to fsync {self.log_path}: {e}") from e

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Rename the three files from ``old_suffix`` to ``new_suffix`` (open handles
        keep working)."""
        if self.file_suffix != old_suffix:
            raise ValueError(f"segment {self.log_path} has suffix {self.file_suffix!r}, "
                             f"not {old_suffix!r}")
        file = self._file
        dir_ = file.path.parent
        file.move_to(log_file(dir_, self.base_offset, new_suffix))
        self._offset_index.rename_to(index_file(dir_, self.base_offset, new_suffix), file.fs)
        self._time_index.rename_to(time_index_file(dir_, self.base_offset, new_suffix),
                                   file.fs)
        self.txn_index.rename_to(txn_index_file(dir_, self.base_offset, new_suffix))
        self.file_suffix = new_suffix

    def paths(self) -> list[PurePath]:
        """The segment's files (the ``.txnindex`` only when it exists)."""
        paths = [self.log_path, self._offset_index.path, self._time_index.path]
        if self.txn_index.has_file():
            paths.append(self.txn_index.path)
        return paths

    def close(self, *, flush: bool = False) -> None:
        """Writer: final time-index entry and trimmed indexes (fsynced with ``flush``);
        then release the files. Indexes never opened are left as they are."""
        if self.closed:
            return
        if not self.read_only and self._time_index.is_loaded:
            self._final_time_index_entry()
            if flush:
                self.offset_index.trim_to_valid_size()
                self.time_index.trim_to_valid_size()
                self.flush()
        elif flush:
            self.flush()
        self._offset_index.close()
        self._time_index.close()
        if self._txn is not None:
            self._txn.close()
        self._records.close()

    @property
    def holds_files(self) -> bool:
        """Whether a file of the segment is open (a lazily loaded one opens on use)."""
        return (self._records.is_open or self._offset_index.is_loaded
                or self._time_index.is_loaded or self._txn is not None)

    def release(self, *, flush: bool = False) -> None:
        """Writer: leave the files as ``close(flush=...)`` does (final time-index entry;
        trimmed indexes, fsynced with ``flush``), then release them, but stay usable: the
        next use reopens them. The active segment's indexes need ``resize_indexes``
        before its next append (as after ``LogLoader`` opened them)."""
        if self.closed:
            return
        if not self.read_only:
            if self._time_index.is_loaded:
                self._final_time_index_entry()
            for lazy in (self._offset_index, self._time_index):
                if lazy.is_loaded:
                    lazy.get().trim_to_valid_size()
        if flush:
            self.flush()
        self._offset_index.release()
        self._time_index.release()
        if self._txn is not None:
            self._txn.close()
            self._txn = None
        self._records.release()

    def close_handlers(self) -> None:
        """Release the files without touching them (before deletion)."""
        self._offset_index.close_handler()
        self._time_index.close_handler()
        if self._txn is not None:
            self._txn.close()
        self._records.close()

    def delete(self) -> None:
        """Close and unlink the three files now."""
        self.close_handlers()
        fs = self._file.fs
        for path in self.paths():
            fs.delete(path)

    def __enter__(self) -> LogSegment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        known = self._records.known_size
        size = "?" if known is None else known
        return f"LogSegment({self.log_path.name}, size={size})"
