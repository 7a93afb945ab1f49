"""One segment of a partition: ``<base>.log`` + ``<base>.index`` + ``<base>.timeindex``
(+ ``<base>.txnindex`` once it holds an aborted transaction) (Kafka's ``LogSegment``).

The ``.log`` holds consecutive record batches exactly as Kafka writes them (see
``record_format``); the two indexes are sparse caches of it. This class appends validated
batches (the ``Log`` validates), translates an offset to a file position (index lookup,
then a forward scan over batch headers), reads whole batches, finds an offset by
timestamp, truncates, recovers (walks and checks every batch, rebuilding the indexes),
flushes with a real fsync, renames its files with a temporary suffix and deletes them.

File access: the ``.log`` is written with ``write`` and read with ``pread``, never
memory-mapped, so a reader survives the writer truncating the file. Read-only segments
(readers in other processes) open every file read-only and count the entries of a
preallocated index by its leading non-zero entries (see ``abstract_index``).

Crash policy: the ``.log`` is the truth; the indexes are rebuilt by ``recover`` (the
transaction index by the loader, which knows the producer state at the segment's base). Bytes
past the last complete valid batch are cut by recovery.

Thread-safety: one writer thread calls the mutating methods (append, truncate_to,
recover, flush, close, rename, delete); reads (``read``, ``translate_offset``,
``iter_batches``...) may run concurrently from other threads and never block on it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np

from .errors import CorruptRecordError, InvalidOffsetError, KafkaStorageError
from .file_names import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    index_file,
    log_file,
    time_index_file,
    txn_index_file,
)
from .index_check import entry_usable_for_lookup
from .offset_continuity import ContinuityCheck
from .offset_index import OffsetIndex
from .record_format import (
    INT32_MAX,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    V2_HEADER_SIZE,
    WALK_INVALID,
    WALK_LEGACY,
    BatchHeader,
    Bytes,
    iter_batch_headers,
    read_batch_header,
    verify,
)
from .storage import LOCAL, FileHandle, PosixStorage, RangeReader, Storage, StoragePath
from .time_index import TimeIndex
from .txn_index import TransactionIndex

if TYPE_CHECKING:
    from .segment_indexer import SegmentIndexer

logger = logging.getLogger(__name__)

_SCAN_CHUNK = 64 * 1024
_RECOVERY_CHUNK = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class SegmentSlice:
    """Whole batches read from one segment."""

    records: bytes
    position: int  # file position of the first batch
    first_offset: int  # base offset of the first batch
    next_offset: int  # last offset of the last batch + 1
    batch_count: int


IndexT = TypeVar("IndexT", OffsetIndex, TimeIndex)


class LazyIndex(Generic[IndexT]):
    """An index opened on first use (Kafka's ``LazyIndex``): a loaded log holds one open
    file per untouched segment instead of three. Thread-safe: ``_lock`` guards
    ``_index`` and ``path``."""

    def __init__(self, factory: Callable[[Path], IndexT],
                 path: Path | Callable[[], Path]) -> None:
        self._factory: Callable[[Path], IndexT] = factory
        # A function defers building the Path until the index is used (loading a long
        # partition then builds none for its untouched segments).
        self._path = path
        self._index: IndexT | None = None
        self._lock = threading.Lock()

    @property
    def path(self) -> Path:
        if callable(self._path):
            self._path = self._path()
        return self._path

    @path.setter
    def path(self, value: Path) -> None:
        self._path = value

    @property
    def is_loaded(self) -> bool:
        return self._index is not None

    def get(self) -> IndexT:
        index = self._index
        if index is None:
            with self._lock:
                if self._index is None:
                    self._index = self._factory(self.path)
                index = self._index
        return index

    def rename_to(self, path: Path, fs: PosixStorage) -> None:
        with self._lock:
            if self._index is not None:
                self._index.rename_to(path)
            elif fs.exists(self.path):
                fs.rename(self.path, path)
            self.path = path

    def update_path(self, path: Path) -> None:
        with self._lock:
            self.path = path
            if self._index is not None:
                self._index.path = path

    def flush(self) -> None:
        if self._index is not None:
            self._index.flush()

    def close(self) -> None:
        if self._index is not None:
            self._index.close()

    def close_handler(self) -> None:
        if self._index is not None:
            self._index.close_handler()

    def release(self) -> None:
        """Release the file as it is (the writer trimmed it); reopened on next use."""
        with self._lock:
            if self._index is not None:
                self._index.close_handler()
                self._index = None


class LogSegment:
    """A ``.log`` with its offset and time indexes. See the module docstring.

    >>> seg = LogSegment.open(dir_, 0, index_interval_bytes=4096,
    ...                       max_index_size=10 << 20)              # doctest: +SKIP
    >>> seg.append(records)                                          # doctest: +SKIP
    """

    def __init__(self, dir_: Path, base_offset: int, *, index_interval_bytes: int = 4096,
                 max_index_size: int = 10 * 1024 * 1024, rolling_jitter_ms: int = 0,
                 created_ms: int = 0, file_suffix: str = "", read_only: bool = False,
                 lazy: bool = False, storage: Storage = LOCAL) -> None:
        self.dir = dir_ if isinstance(dir_, Path) else Path(dir_)
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.rolling_jitter_ms = rolling_jitter_ms
        self.created_ms = created_ms
        self.read_only = read_only
        self.file_suffix = file_suffix
        self.log_path = log_file(self.dir, base_offset, file_suffix)
        # Reads need only ``Storage``; writing (and the mtime of retention) needs a
        # filesystem, ``_fs`` (None for a read-only segment elsewhere, e.g. in a bucket).
        self._storage = storage
        self._fs = storage if isinstance(storage, PosixStorage) else None
        if self._fs is None and not read_only:
            raise KafkaStorageError(f"segment {self.log_path} is not in a filesystem: it can "
                                    "only be opened read-only")
        # The ``.log`` never changes (a bucket's object): its size is known, not asked.
        self._immutable = False
        # ``lazy``: an existing inactive segment opens its ``.log`` (and learns its size)
        # on first use, so loading a long partition costs no file opens; a sink commit
        # that loads a partition only to append stays as cheap late in a log as early.
        # ``_open_lock`` guards ``_handle`` while it is opened.
        self._open_lock = threading.Lock()
        # The writer's ``FileHandle``, or a reader's ``RangeReader``.
        self._handle: FileHandle | RangeReader | None = None
        self._closed = False
        self._known_size: int | None = None
        creating = not lazy and not read_only and not storage.exists(self.log_path)
        if not lazy:
            self._handle = self._open_file()
            self._known_size = self._handle.size
        count_nonzero = read_only
        self._offset_index = LazyIndex(
            lambda path: OffsetIndex(path, base_offset, max_index_size, writable=not read_only,
                                     count_leading_nonzero=count_nonzero, storage=storage),
            lambda: index_file(self.dir, base_offset, file_suffix))
        self._time_index = LazyIndex(
            lambda path: TimeIndex(path, base_offset, max_index_size, writable=not read_only,
                                   count_leading_nonzero=count_nonzero, storage=storage),
            lambda: time_index_file(self.dir, base_offset, file_suffix))
        if not lazy and not read_only and self._size == 0:
            # A new segment gets its index files now, preallocated, as Kafka's do.
            try:
                self._offset_index.get()
                self._time_index.get()
            except (OSError, KafkaStorageError) as e:
                self._closed = True
                if creating:
                    self.delete()  # a half-made segment must not be found at the next open
                else:
                    self.close_handlers()
                raise KafkaStorageError(f"cannot create the indexes of {self.log_path}: {e}") \
                    from e
        self._txn: TransactionIndex | None = None  # built on first use (no Path on open)
        self._bytes_since_last_index_entry = 0
        self._index_warned = False  # a corrupt offset index was reported once
        self._max_ts_and_offset: tuple[int, int] | None = None  # lazily from the time index
        self._rolling_based_timestamp: int | None = None  # first batch's max timestamp

    @classmethod
    def open_read_only(cls, storage: Storage, stem: StoragePath, base_offset: int, *,
                       size: int, offset_index: bytes | None = None,
                       time_index: bytes | None = None, txn_index: bytes | None = None,
                       max_timestamp: tuple[int, int] | None = None,
                       index_interval_bytes: int = 4096) -> LogSegment:
        """A read-only segment of any ``Storage`` whose files never change (a bucket's
        objects): the ``.log`` is ``<stem>.log``, read through one ``RangeReader`` opened
        on first use; ``size`` is its length (no request asks for it); the indexes are
        their files' bytes, ``None`` when absent (read as empty: lookups scan from the
        segment's first batch, slower but exact). ``max_timestamp``: the largest record
        timestamp and its offset when known (a timestamp lookup skips segments by it);
        None: the time index's last entry, or without one the batch headers, read once.
        Only ``Storage`` operations are used, so ``log_read.LogReads`` reads it as it
        reads a local segment.

        >>> seg = LogSegment.open_read_only(storage, "events-0/00000000000000000000-1f2e",
        ...                                 0, size=4096, offset_index=idx)  # doctest: +SKIP
        >>> seg.read(0, 1 << 20)                                            # doctest: +SKIP
        """
        stem = os.fspath(stem)
        seg = cls(Path(stem).parent, base_offset, index_interval_bytes=index_interval_bytes,
                  read_only=True, lazy=True, storage=storage)
        seg.log_path = Path(stem + LOG_SUFFIX)
        seg._immutable = True
        seg._known_size = size
        seg._max_ts_and_offset = max_timestamp
        seg._offset_index = LazyIndex(
            lambda path: OffsetIndex.from_bytes(path, base_offset, offset_index),
            Path(stem + INDEX_SUFFIX))
        seg._time_index = LazyIndex(
            lambda path: TimeIndex.from_bytes(path, base_offset, time_index),
            Path(stem + TIME_INDEX_SUFFIX))
        seg._txn = TransactionIndex.from_bytes(Path(stem + TXN_INDEX_SUFFIX), base_offset,
                                               txn_index)
        return seg

    def _open_file(self) -> FileHandle | RangeReader:
        try:
            if self.read_only:
                return self._storage.open_range_reader(self.log_path)
            assert self._fs is not None
            return self._fs.open_file(self.log_path, "append_read")
        except OSError as e:
            raise KafkaStorageError(f"cannot open segment file {self.log_path}: {e}") from e

    @property
    def _file(self) -> FileHandle | RangeReader:
        """The open ``.log`` file (opened now if the segment was loaded lazily)."""
        handle = self._handle
        if handle is None:
            with self._open_lock:
                if self._handle is None:
                    if self._closed:
                        raise KafkaStorageError(f"segment {self.log_path} is closed")
                    self._handle = self._open_file()
                handle = self._handle
        return handle

    @property
    def _writer(self) -> FileHandle:
        """The writer's ``.log`` (a read-only segment has none)."""
        handle = self._file
        if not isinstance(handle, FileHandle) or self.read_only:
            raise InvalidOffsetError(f"segment {self.log_path} is open read-only")
        return handle

    def _filesystem(self) -> PosixStorage:
        if self._fs is None:
            raise KafkaStorageError(f"segment {self.log_path} is not in a filesystem: it "
                                    "cannot be renamed or deleted through the segment")
        return self._fs

    @property
    def _size(self) -> int:
        if self._known_size is None:
            try:
                self._known_size = self._storage.size(self.log_path)
            except OSError as e:
                raise KafkaStorageError(f"cannot stat segment file {self.log_path}: {e}") from e
        return self._known_size

    @_size.setter
    def _size(self, value: int) -> None:
        self._known_size = value

    @property
    def offset_index(self) -> OffsetIndex:
        """The offset index, opened on first use."""
        return self._offset_index.get()

    @property
    def time_index(self) -> TimeIndex:
        """The time index, opened on first use."""
        return self._time_index.get()

    @property
    def txn_index(self) -> TransactionIndex:
        """The transaction index (its file exists only once it holds an entry)."""
        txn = self._txn
        if txn is None:
            txn = self._txn = TransactionIndex(
                txn_index_file(self.dir, self.base_offset, self.file_suffix), self.base_offset,
                writable=not self.read_only, storage=self._storage)
        return txn

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

    # -- sizes and timestamps ------------------------------------------------------------

    @property
    def size(self) -> int:
        """Bytes in the ``.log`` (a read-only segment asks the file system: it grows)."""
        if self.read_only and not self._immutable:
            try:
                return self._file.size
            except OSError as e:
                raise KafkaStorageError(f"cannot stat segment file {self.log_path}: {e}") \
                    from e
        return self._size

    def is_file_at_path(self) -> bool:
        """True while the open ``.log`` file is still the one named by ``log_path`` (a
        compaction swap or retention may have put another file there, or none). An
        immutable segment's object is never replaced: always True."""
        if self._immutable:
            return True
        handle = self._file
        return isinstance(handle, FileHandle) and handle.is_file_at(self.log_path)

    def file_identity(self) -> tuple[int | str, int] | None:
        """What tells this version of the ``.log`` from another at the same name (a
        file's inode and size; an immutable object's name and size), None when unknown
        (the file is closed)."""
        if self._immutable:
            return (str(self.log_path), self._size)
        handle = self._file
        if not isinstance(handle, FileHandle):
            return None
        try:
            st = handle.fstat()
        except OSError:
            return None
        return (st.st_ino, st.st_size)

    @property
    def closed(self) -> bool:
        return self._closed

    def _max_timestamp_and_offset(self) -> tuple[int, int]:
        if self._max_ts_and_offset is None:
            last = self.time_index.last()
            found = (last.timestamp, last.offset)
            if self._immutable and self.time_index.entries == 0:
                # Given no time index: the batch headers say (once; the file never changes).
                for h in self.iter_batches(0):
                    if h.max_timestamp > found[0]:
                        found = (h.max_timestamp, h.last_offset)
            self._max_ts_and_offset = found
        return self._max_ts_and_offset

    @property
    def max_timestamp_so_far(self) -> int:
        return self._max_timestamp_and_offset()[0]

    @property
    def offset_of_max_timestamp_so_far(self) -> int:
        return self._max_timestamp_and_offset()[1]

    @property
    def largest_timestamp(self) -> int:
        """The largest record timestamp, or the file's mtime when no batch has one
        (Kafka's rule, so retention still ages timestamp-less segments)."""
        ts = self.max_timestamp_so_far
        if ts >= 0 or self._fs is None:
            return ts
        try:
            return int(self._fs.stat(self.log_path).st_mtime * 1000)
        except FileNotFoundError:
            return 0

    def rolling_based_timestamp(self) -> int | None:
        """The first batch's max timestamp (read once, lazily: never on open)."""
        if self._rolling_based_timestamp is None and self.size > 0:
            first = next(self.iter_batches(0), None)
            if first is not None:
                self._rolling_based_timestamp = first.max_timestamp
        return self._rolling_based_timestamp

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

    # -- reading --------------------------------------------------------------------------

    def pread(self, position: int, size: int) -> bytes:
        try:
            return self._file.pread(position, size)
        except OSError as e:
            raise KafkaStorageError(f"cannot read {self.log_path} at {position}: {e}") from e

    def readinto(self, buf: bytearray | memoryview, position: int) -> int:
        """Fill ``buf`` from ``position``; returns the bytes read (short at the end).
        A file fills it with one ``preadv``; any other ``RangeReader`` copies once."""
        handle = self._file
        try:
            if isinstance(handle, FileHandle):
                return handle.readinto(buf, position)
            data = handle.pread(position, len(buf))
        except OSError as e:
            raise KafkaStorageError(f"cannot read {self.log_path} at {position}: {e}") from e
        memoryview(buf).cast("B")[:len(data)] = data
        return len(data)

    def read_chunk(self, position: int, max_bytes: int
                   ) -> tuple[bytes | bytearray | memoryview, int]:
        """A fresh buffer of up to ``max_bytes`` from ``position`` and how many bytes it
        holds (fewer at the end). A bucket segment returns its GET's bytes instead of
        copying them into a zero-filled buffer."""
        buf = bytearray(max_bytes)
        return buf, self.readinto(buf, position)

    def update_dir(self, dir_: Path) -> None:
        """The partition directory was renamed: point the paths at the new one."""
        self.dir = Path(dir_)
        self.log_path = log_file(self.dir, self.base_offset, self.file_suffix)
        self._offset_index.update_path(index_file(self.dir, self.base_offset, self.file_suffix))
        self._time_index.update_path(time_index_file(self.dir, self.base_offset,
                                                     self.file_suffix))
        if self._txn is not None:
            self._txn.path = txn_index_file(self.dir, self.base_offset, self.file_suffix)

    def iter_batches(self, start_position: int = 0,
                     end_position: int | None = None) -> Iterator[BatchHeader]:
        """Headers of the whole batches from ``start_position`` on (positions are file
        positions); reads in 64 KiB chunks and never reads a large batch's body."""
        end = self.size if end_position is None else end_position
        pos = start_position
        while end - pos > MAGIC_OFFSET:
            want = min(_SCAN_CHUNK, end - pos)
            buf = self.pread(pos, want)
            if len(buf) < want:  # the file shrank under us (a truncation)
                end = pos + len(buf)
            p = 0
            while p < len(buf):
                if len(buf) - p < V2_HEADER_SIZE and pos + len(buf) < end:
                    break  # the next header straddles the chunk: refill from it
                # The limit is the end of the file, so a batch whose body lies past the
                # chunk still yields its header and is skipped without being read.
                try:
                    h = read_batch_header(buf, p, end - pos)
                except CorruptRecordError as e:
                    raise CorruptRecordError(f"{self.log_path}: {e} (file position "
                                             f"{pos + p})") from None
                if h is None:
                    return  # a partial batch at the end
                yield dataclasses.replace(h, position=pos + p)
                p += h.size
            if p == 0:
                return
            pos += p

    def index_position(self, offset: int) -> int:
        """Where a scan for ``offset`` may start: the position of the offset index's
        largest entry <= ``offset`` when ``index_check.entry_usable_for_lookup`` accepts
        it, else 0. A garbled index (a reader's view of an active index is never
        recovered) then costs a longer scan, never skipped rows."""
        if offset <= self.base_offset:
            return 0  # no index needed (nor fetched, for a bucket segment)
        entry = self.offset_index.lookup(offset)
        if entry.position == 0:
            return 0  # no entry (a segment's first batch never gets one)
        buf = self.pread(entry.position, V2_HEADER_SIZE)
        try:
            h = read_batch_header(buf, 0, len(buf) if len(buf) < V2_HEADER_SIZE else 1 << 62)
        except CorruptRecordError:
            h = None
        if entry_usable_for_lookup(entry.offset, h):
            return entry.position
        if not self._index_warned:
            self._index_warned = True
            found = "no batch" if h is None else f"a batch starting at offset {h.base_offset}"
            logger.warning("offset index %s is corrupt: its entry for offset %d points at "
                           "position %d of %s, where there is %s; scanning the segment from "
                           "its start instead (recovery or `seglog check --fix` rebuilds "
                           "the index)", self.offset_index.path, entry.offset, entry.position,
                           self.log_path, found)
        return 0

    def translate_offset(self, offset: int, starting_position: int = 0) -> BatchHeader | None:
        """The first batch whose last offset is >= ``offset`` (index lookup, then a
        forward scan), or None when there is none in this segment."""
        return self.find_batch(offset, starting_position)[0]

    def find_batch(self, offset: int, starting_position: int = 0
                   ) -> tuple[BatchHeader | None, int]:
        """``translate_offset``, and when it finds nothing, the position where the whole
        batches end (a partial batch may follow)."""
        position = max(self.index_position(offset), starting_position)
        for h in self.iter_batches(position):
            if h.last_offset >= offset:
                return h, h.position
            position = h.end_position
        return None, position

    def read(self, start_offset: int, max_size: int, *, max_offset: int | None = None,
             min_one_batch: bool = True, from_start: bool = False,
             check: ContinuityCheck | None = None) -> SegmentSlice | None:
        """Whole batches from the one holding ``start_offset`` (``from_start``: from the
        segment's first batch): at most ``max_size`` bytes (but at least one batch when
        ``min_one_batch``), only batches whose last offset is below ``max_offset``. None
        when there is nothing to read. ``check`` sees every batch read, and the one that
        stopped the read."""
        first, end = self.find_batch(-1 if from_start else start_offset)
        if first is None:
            if check is not None:
                check.segment_end(end, self.size)
            return None
        if check is not None:
            check.batch(first)
        if max_offset is not None and first.last_offset >= max_offset:
            return None
        want = max(max_size, first.size) if min_one_batch else max_size
        buf = self.pread(first.position, want)
        end = 0
        count = 0
        next_offset = first.base_offset
        for h in iter_batch_headers(buf):
            if count and check is not None:
                check.batch(h, first.position)
            if (max_offset is not None and h.last_offset >= max_offset) \
                    or (count and h.end_position > max_size) or h.end_position > want:
                break
            end = h.end_position
            next_offset = h.next_offset
            count += 1
        else:
            if check is not None and len(buf) < want:  # whole batches ran out before EOF
                check.segment_end(first.position + end, self.size)
        if count == 0:
            return None
        return SegmentSlice(buf[:end] if end < len(buf) else buf, first.position,
                            first.base_offset, next_offset, count)

    def read_next_offset(self) -> int:
        """The offset after the last batch (reads only the tail past the last index
        entry, as Kafka does), or the base offset when the segment is empty."""
        next_offset = self.base_offset
        for h in self.iter_batches(self.index_position(2**62)):
            next_offset = h.next_offset
        return next_offset

    def find_offset_by_timestamp(self, timestamp: int,
                                 starting_offset: int = 0) -> BatchHeader | None:
        """The first batch with a max timestamp >= ``timestamp`` and a last offset >=
        ``starting_offset`` (time index, offset index, then a scan)."""
        ts_entry = self.time_index.lookup(timestamp)
        position = self.index_position(max(ts_entry.offset, starting_offset))
        for h in self.iter_batches(position):
            if h.max_timestamp >= timestamp and h.last_offset >= starting_offset:
                return h
        return None

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

    def recover(self, max_message_bytes: int) -> int:
        """Check every batch (size, CRC, increasing offsets, ``max_message_bytes``),
        rebuild both indexes, cut at the first invalid or partial batch. Returns the
        number of bytes cut.

        Reads 16 MiB chunks; the header walk, the CRCs and the index rule run in numba
        kernels over a whole chunk (``SegmentIndexer``), Python only per chunk (and per
        legacy magic 0/1 message).
        """
        self.offset_index.reset()
        self.time_index.reset()
        handle = self._writer
        file_size = handle.size
        ix = self.indexer(max_message_bytes)
        chunk = np.empty(min(_RECOVERY_CHUNK, max(file_size, 1)), np.uint8)
        reason = ""
        chunk_pos = 0
        while chunk_pos < file_size:
            n = handle.readinto(chunk.data, chunk_pos)
            p, status, reason = ix.scan(chunk, n, chunk_pos)
            if status == WALK_INVALID:
                break
            if status == WALK_LEGACY:
                check = verify(chunk.data, p, n, next_offset=ix.next_offset,
                               segment_base=self.base_offset,
                               max_message_bytes=max_message_bytes)
                h = check.header
                if not check.valid:
                    if not check.partial:
                        reason = check.reason
                        break
                    if chunk_pos + n >= file_size:
                        reason = "a partial message at the end of the file"
                        break
                    chunk = np.empty(len(chunk) * 2, np.uint8)  # larger than a chunk
                    chunk_pos += p
                    continue
                assert h is not None
                ix.add_batch(chunk_pos + p, h.size, h.base_offset, h.last_offset,
                             h.max_timestamp, h.crc)
                chunk_pos += p + h.size
                continue
            if p == 0:
                if chunk_pos + n >= file_size:
                    reason = "a partial batch at the end of the file"
                    break
                need = int.from_bytes(chunk[LENGTH_OFFSET:LENGTH_OFFSET + 4].tobytes(), "big",
                                      signed=True) + LOG_OVERHEAD
                chunk = np.empty(max(need, 2 * len(chunk)), np.uint8)  # one huge batch
                continue
            chunk_pos += p
        truncated = file_size - ix.valid_end
        if truncated:
            logger.warning("recovery of %s: %s at position %d (offset %d); cutting %d bytes",
                           self.log_path, reason or "trailing bytes", ix.valid_end,
                           ix.next_offset, truncated)
            handle.truncate(ix.valid_end)
        self.adopt_indexes(ix)
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
        self._size = ix.valid_end

    def on_become_inactive(self) -> None:
        """The segment stops being active: final time-index entry, trimmed indexes."""
        self.time_index.maybe_append(self.max_timestamp_so_far,
                                     self.offset_of_max_timestamp_so_far, skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()

    def resize_indexes(self, size: int) -> None:
        self.offset_index.resize(size)
        self.time_index.resize(size)

    def sanity_check(self) -> None:
        """Kafka's check of a segment's indexes (reads only the index files)."""
        self.offset_index.sanity_check()
        self.time_index.sanity_check()
        last = self.offset_index.last_entry()
        if last is not None and last.position >= self.size:
            from .errors import CorruptIndexError

            raise CorruptIndexError(
                f"index {self.offset_index.path} points at position {last.position}, past "
                f"the end of {self.log_path} ({self.size} bytes)")

    def flush(self) -> None:
        """fsync the ``.log`` and both indexes (a lazily loaded segment never opened
        has written nothing through this process: nothing to flush)."""
        if self.read_only or self.closed or self._handle is None:
            return
        try:
            self._writer.fsync()
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
        fs = self._filesystem()
        new_log = log_file(self.dir, self.base_offset, new_suffix)
        fs.rename(self.log_path, new_log)
        self.log_path = new_log
        self._offset_index.rename_to(index_file(self.dir, self.base_offset, new_suffix), fs)
        self._time_index.rename_to(time_index_file(self.dir, self.base_offset, new_suffix), fs)
        self.txn_index.rename_to(txn_index_file(self.dir, self.base_offset, new_suffix))
        self.file_suffix = new_suffix

    def paths(self) -> list[Path]:
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
            self.time_index.maybe_append(self.max_timestamp_so_far,
                                         self.offset_of_max_timestamp_so_far,
                                         skip_full_check=True)
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
        self._close_handle()

    @property
    def holds_files(self) -> bool:
        """Whether a file of the segment is open (a lazily loaded one opens on use)."""
        return (self._handle is not None or self._offset_index.is_loaded
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
                self.time_index.maybe_append(self.max_timestamp_so_far,
                                             self.offset_of_max_timestamp_so_far,
                                             skip_full_check=True)
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
        with self._open_lock:
            if self._handle is not None:
                self._handle.close()
                self._handle = None

    def _close_handle(self) -> None:
        with self._open_lock:
            self._closed = True
            if self._handle is not None:
                self._handle.close()

    def close_handlers(self) -> None:
        """Release the files without touching them (before deletion)."""
        self._offset_index.close_handler()
        self._time_index.close_handler()
        if self._txn is not None:
            self._txn.close()
        self._close_handle()

    def delete(self) -> None:
        """Close and unlink the three files now."""
        self.close_handlers()
        fs = self._filesystem()
        for path in self.paths():
            fs.delete(path)

    def __enter__(self) -> LogSegment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        size = "?" if self._known_size is None else self._known_size
        return f"LogSegment({self.log_path.name}, size={size})"
