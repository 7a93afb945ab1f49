"""What every segment offers over any ``Storage``: its files opened on use, its sizes and
timestamps, and the read path (``SegmentReads``, the base of ``log_segment.LogSegment``).

A segment is ``<base>.log`` + ``<base>.index`` + ``<base>.timeindex`` (+ ``<base>.txnindex``
once it holds an aborted transaction). Reading translates an offset to a file position
(index lookup, then a forward scan over batch headers), reads whole batches and finds an
offset by timestamp; none of it writes. The writer's half (append, roll, truncate,
recover, flush, rename, delete) is ``log_segment.LogSegment``.

File access: the ``.log`` is read with ``pread``, never memory-mapped, so a reader
survives the writer truncating the file. Read-only segments (readers in other processes)
open every file read-only and count the entries of a preallocated index by its leading
non-zero entries (see ``abstract_index``). ``SegmentReads.open_read_only`` opens a segment
of any ``Storage`` whose files never change (a bucket's objects).

Thread-safety: reads (``read``, ``translate_offset``, ``iter_batches``...) may run
concurrently from any thread and never block the segment's one writer thread.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np

from .errors import CorruptRecordError, KafkaStorageError
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
from .lazy_index import LazyIndex
from .offset_continuity import ContinuityCheck
from .offset_index import OffsetIndex
from .record_format import (
    MAGIC_OFFSET,
    V2_HEADER_SIZE,
    BatchHeader,
    iter_batch_headers,
    read_batch_header,
)
from .storage import LOCAL, FileHandle, PosixStorage, RangeReader, Storage, StoragePath
from .time_index import TimeIndex
from .txn_index import TransactionIndex

logger = logging.getLogger(__name__)

_SCAN_CHUNK = 64 * 1024

_Segment = TypeVar("_Segment", bound="SegmentReads")


@dataclass(frozen=True, slots=True)
class SegmentSlice:
    """Whole batches read from one segment."""

    records: bytes
    position: int  # file position of the first batch
    first_offset: int  # base offset of the first batch
    next_offset: int  # last offset of the last batch + 1
    batch_count: int


class SegmentReads:
    """A segment's files and its read path. A base class: a segment is a
    ``log_segment.LogSegment`` (which adds the writer's operations), opened by
    ``LogSegment(...)``, ``LogSegment.open`` or ``LogSegment.open_read_only``."""

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
        self._txn: TransactionIndex | None = None  # built on first use (no Path on open)
        self._bytes_since_last_index_entry = 0
        self._index_warned = False  # a corrupt offset index was reported once
        self._max_ts_and_offset: tuple[int, int] | None = None  # lazily from the time index
        self._rolling_based_timestamp: int | None = None  # first batch's max timestamp

    @classmethod
    def open_read_only(cls: type[_Segment], storage: Storage, stem: StoragePath,
                       base_offset: int, *, size: int, offset_index: bytes | None = None,
                       time_index: bytes | None = None, txn_index: bytes | None = None,
                       max_timestamp: tuple[int, int] | None = None,
                       index_interval_bytes: int = 4096) -> _Segment:
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
        # Not zero-filled (np.empty, not bytearray): the read overwrites what is used,
        # and zeroing 8 MiB first cost a tenth of a source task's read.
        buf = np.empty(max_bytes, np.uint8).data
        return buf, self.readinto(buf, position)


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
                    h = read_batch_header(buf, p, end - pos, pos)
                except CorruptRecordError as e:
                    raise CorruptRecordError(f"{self.log_path}: {e}") from None
                if h is None:
                    return  # a partial batch at the end
                yield dataclasses.replace(h, position=pos + p)
                p += h.size
            if p == 0:
                return
            pos += p

    def index_position(self, offset: int,
                       pread: Callable[[int, int], bytes | memoryview] | None = None
                       ) -> int:
        """Where a scan for ``offset`` may start: the position of the offset index's
        largest entry <= ``offset`` when ``index_check.entry_usable_for_lookup`` accepts
        it, else 0. A garbled index (a reader's view of an active index is never
        recovered) then costs a longer scan, never skipped rows. ``pread`` reads the
        entry's batch header (a bucket read's window: no request of its own)."""
        if offset <= self.base_offset:
            return 0  # no index needed (nor fetched, for a bucket segment)
        entry = self.offset_index.lookup(offset)
        if entry.position == 0:
            return 0  # no entry (a segment's first batch never gets one)
        buf = (pread or self.pread)(entry.position, V2_HEADER_SIZE)
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
