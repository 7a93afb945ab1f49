"""What every segment offers over any ``Storage``: its files opened on use, its sizes and
timestamps, and the read path (``SegmentReads``, the base of ``log_segment.LogSegment``).

A segment is ``<base>.log`` + ``<base>.index`` + ``<base>.timeindex`` (+ ``<base>.txnindex``
once it holds an aborted transaction). Reading translates an offset to a file position
(index lookup, then a forward scan over batch headers), reads whole batches and finds an
offset by timestamp; none of it writes. The writer's half (append, roll, truncate,
recover, flush, rename, delete) is ``log_segment.LogSegment``.

Parts: a segment is handed its records (``segment_records``: a local file, a range
reader, a bucket object) and its indexes, each made for its medium by ``segment_parts``
(or ``bucket_segment``); nothing here asks which medium it is on. A local ``.log`` is read
with ``pread``, never memory-mapped, so a reader survives the writer truncating the file.
Read-only segments (readers in other processes) open every file read-only and count the
entries of a preallocated index by its leading non-zero entries (see ``abstract_index``).
``SegmentReads.open_read_only`` opens a segment of any ``Storage`` whose files never
change.

Thread-safety: reads (``read``, ``translate_offset``, ``iter_batches``...) may run
concurrently from any thread and never block the segment's one writer thread.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import TypeVar

from ..errors import CorruptRecordError
from ..index.index_check import entry_usable_for_lookup
from ..index.offset_index import OffsetIndex
from ..index.time_index import TimeIndex
from ..index.txn_index import TransactionIndex
from ..records.record_format import (
    MAGIC_OFFSET,
    V2_HEADER_SIZE,
    BatchHeader,
    iter_batch_headers,
    read_batch_header,
)
from ..storage.storage import LOCAL, Storage, StoragePath
from .offset_continuity import ContinuityCheck
from .segment_parts import SegmentParts, immutable_parts, segment_parts
from .segment_records import SegmentRecords

logger = logging.getLogger(__name__)

_SCAN_CHUNK = 64 * 1024

_Segment = TypeVar("_Segment", bound="SegmentReads")

Reader = Callable[[int, int], bytes | memoryview]
"""Reads up to ``length`` bytes at a position of a segment's ``.log``."""


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
    ``LogSegment(...)``, ``LogSegment.open`` or ``LogSegment.open_read_only``.

    It is built from its parts (``segment_parts.SegmentParts``: the records, the offset,
    time and transaction indexes), each already made for its medium; given none, the
    parts of ``<dir_>/<base_offset>.log`` in ``storage`` (``segment_parts.segment_parts``).
    ``max_timestamp``: the largest timestamp and its offset when known;
    ``known_max_timestamp``: the largest timestamp alone (a bucket's commit entry)."""

    def __init__(self, dir_: PurePath, base_offset: int, *, index_interval_bytes: int = 4096,
                 max_index_size: int = 10 * 1024 * 1024, rolling_jitter_ms: int = 0,
                 created_ms: int = 0, file_suffix: str = "", read_only: bool = False,
                 lazy: bool = False, storage: Storage = LOCAL,
                 parts: SegmentParts | None = None,
                 max_timestamp: tuple[int, int] | None = None,
                 known_max_timestamp: int | None = None) -> None:
        if parts is None:
            # ``lazy``: an existing inactive segment opens its ``.log`` (and learns its
            # size) on first use, so loading a long partition costs no file opens; a sink
            # commit that loads a partition only to append stays as cheap late in a log
            # as early.
            local_dir = dir_ if isinstance(dir_, Path) else Path(dir_)
            parts = segment_parts(storage, local_dir, base_offset, file_suffix=file_suffix,
                                  read_only=read_only, max_index_size=max_index_size)
        self.dir = dir_
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.rolling_jitter_ms = rolling_jitter_ms
        self.created_ms = created_ms
        self.read_only = read_only
        self.file_suffix = file_suffix
        self._records = parts.records
        if not lazy:
            self._records.open()
        self._local = parts.file  # None: not in a filesystem (no writes, renames, deletes)
        self._offset_index = parts.offset_index
        self._time_index = parts.time_index
        self._txn_factory = parts.txn_index
        self._txn: TransactionIndex | None = None  # built on first use (no Path on open)
        self._bytes_since_last_index_entry = 0
        self._index_warned = False  # a corrupt offset index was reported once
        # The largest timestamp and its offset: given, or lazily from the time index.
        self._max_ts_and_offset: tuple[int, int] | None = max_timestamp
        # The largest timestamp alone, when its offset is not known (a commit entry's).
        self._known_max_timestamp = known_max_timestamp
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
        parts = immutable_parts(storage, stem, base_offset, size=size,
                                offset_index=offset_index, time_index=time_index,
                                txn_index=txn_index)
        return cls(PurePath(stem).parent, base_offset,
                   index_interval_bytes=index_interval_bytes, read_only=True, lazy=True,
                   parts=parts, max_timestamp=max_timestamp)

    @property
    def log_path(self) -> PurePath:
        """The ``.log``'s name (a local path, or an object's URI)."""
        return self._records.path

    @property
    def records(self) -> SegmentRecords:
        """The ``.log``'s bytes (``segment_records``)."""
        return self._records

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
            txn = self._txn = self._txn_factory(self.file_suffix)
        return txn

    # -- sizes and timestamps ------------------------------------------------------------

    @property
    def size(self) -> int:
        """Bytes in the ``.log`` (a read-only segment's file is asked: it grows)."""
        return self._records.size

    def is_file_at_path(self) -> bool:
        """True while the open ``.log`` file is still the one named by ``log_path`` (a
        compaction swap or retention may have put another file there, or none). An
        immutable segment's object is never replaced: always True."""
        return self._records.is_file_at_path()

    def file_identity(self) -> tuple[int | str, int] | None:
        """What tells this version of the ``.log`` from another at the same name (a
        file's inode and size; an immutable object's name and size), None when unknown
        (the file is closed)."""
        return self._records.identity()

    @property
    def closed(self) -> bool:
        return self._records.closed

    def _max_timestamp_and_offset(self) -> tuple[int, int]:
        if self._max_ts_and_offset is None:
            last = self.time_index.last()
            found = (last.timestamp, last.offset)
            if self._records.immutable and self.time_index.entries == 0:
                # Given no time index: the batch headers say (once; the file never changes).
                for h in self.iter_batches(0):
                    if h.max_timestamp > found[0]:
                        found = (h.max_timestamp, h.last_offset)
            self._max_ts_and_offset = found
        return self._max_ts_and_offset

    @property
    def max_timestamp_so_far(self) -> int:
        known = self._known_max_timestamp
        return self._max_timestamp_and_offset()[0] if known is None else known

    @property
    def offset_of_max_timestamp_so_far(self) -> int:
        return self._max_timestamp_and_offset()[1]

    @property
    def largest_timestamp(self) -> int:
        """The largest record timestamp, or the file's mtime when no batch has one
        (Kafka's rule, so retention still ages timestamp-less segments)."""
        ts = self.max_timestamp_so_far
        if ts >= 0:
            return ts
        mtime = self._records.mtime_ms()
        return ts if mtime is None else mtime

    def rolling_based_timestamp(self) -> int | None:
        """The first batch's max timestamp (read once, lazily: never on open)."""
        if self._rolling_based_timestamp is None and self.size > 0:
            first = next(self.iter_batches(0), None)
            if first is not None:
                self._rolling_based_timestamp = first.max_timestamp
        return self._rolling_based_timestamp

    # -- reading --------------------------------------------------------------------------

    def pread(self, position: int, size: int) -> bytes:
        return self._records.pread(position, size)

    def readinto(self, buf: bytearray | memoryview, position: int) -> int:
        """Fill ``buf`` from ``position``; returns the bytes read (short at the end)."""
        return self._records.readinto(buf, position)

    def read_chunk(self, position: int, max_bytes: int
                   ) -> tuple[bytes | bytearray | memoryview, int]:
        """A fresh buffer of up to ``max_bytes`` from ``position`` and how many bytes it
        holds (fewer at the end). A bucket segment returns its GET's bytes instead of
        copying them into a zero-filled buffer."""
        return self._records.read_chunk(position, max_bytes)

    def iter_batches(self, start_position: int = 0, end_position: int | None = None, *,
                     pread: Reader | None = None,
                     scan_bytes: int = _SCAN_CHUNK) -> Iterator[BatchHeader]:
        """Headers of the whole batches from ``start_position`` on (positions are file
        positions); reads ``scan_bytes`` (64 KiB) at a time and never reads a large
        batch's body. ``pread`` reads instead of the segment (a bucket read's window,
        which holds the bytes already: it asks for one header at a time)."""
        end = self.size if end_position is None else end_position
        read = pread or self.pread
        pos = start_position
        while end - pos > MAGIC_OFFSET:
            want = min(scan_bytes, end - pos)
            buf = read(pos, want)
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
                yield h.at_position(pos + p)
                p += h.size
            if p == 0:
                return
            pos += p

    def index_position(self, offset: int, pread: Reader | None = None) -> int:
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

    def find_batch(self, offset: int, starting_position: int = 0, *,
                   pread: Reader | None = None, scan_bytes: int = _SCAN_CHUNK
                   ) -> tuple[BatchHeader | None, int]:
        """``translate_offset``, and when it finds nothing, the position where the whole
        batches end (a partial batch may follow). ``pread`` reads instead of the segment
        (a bucket read's window: the index entry's header and the batch headers after it
        cost no request of their own)."""
        position = max(self.index_position(offset, pread), starting_position)
        for h in self.iter_batches(position, pread=pread, scan_bytes=scan_bytes):
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
        last = self.last_batch()
        return self.base_offset if last is None else last.next_offset

    def last_batch(self, known: BatchHeader | None = None) -> BatchHeader | None:
        """The segment's last whole batch (None: it has none), from the tail past the
        last index entry.

        ``known``: its last batch as an earlier call found it, for a reader of a segment
        another process appends to. If that batch still reads the same at its position
        (base offset, size and CRC, which covers the rest of it), a batch starts there,
        so the scan resumes from it exactly and parses only the batches appended since,
        not everything past the last index entry; anything else (a truncated tail, a
        file rewritten there) scans from the index as without it."""
        if known is not None:
            headers = self.iter_batches(known.position)
            try:
                first = next(headers, None)
            except CorruptRecordError:
                first = None  # no batch starts there now: rewritten since
            if first is not None and (first.base_offset, first.size, first.crc) \
                    == (known.base_offset, known.size, known.crc):
                return _last_of(first, headers)
        return _last_of(None, self.iter_batches(self.index_position(2**62)))

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


def _last_of(last: BatchHeader | None, headers: Iterator[BatchHeader]) -> BatchHeader | None:
    """The last of ``headers`` (``last`` when there are none)."""
    for h in headers:
        last = h
    return last
