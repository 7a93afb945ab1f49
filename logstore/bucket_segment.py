"""A segment in a bucket: building its three objects, and reading it through the shared
read path.

**Writing.** ``build_segments`` cuts validated batches (offsets assigned) into segments of
at most ``segment.bytes`` (at least one batch each; relative offsets within 32 bits) and
computes each one's ``.index`` and ``.timeindex`` bytes exactly as ``LogSegment.append``
followed by the roll's final time-index entry would leave them (Kafka's rules: an entry
once more than ``index.interval.bytes`` were appended since the last one, checked
before a batch; the time index only when the max timestamp grows). The objects are
immutable, so an empty index is no object at all (its size 0 in the commit). Indexes of
at most ``INLINE_INDEX_BYTES`` together travel inline in the segment's commit entry
instead of as objects (``SegmentEntry.inline_index``/``inline_timeindex``): an append is
then the ``.log`` PUT and the commit, two sequential requests.

**Reading.** ``BucketSegment`` is a read-only ``LogSegment`` whose ``.log`` is read with
ranged GETs and whose indexes are the entry's inline bytes or the index objects' bytes
(fetched on first use, kept: objects never change), so ``LogSegment``'s lookups, batch
walks and checks serve bucket partitions unchanged. Thread-safety: safe for concurrent
readers (``_lock`` guards the lazily fetched indexes).
"""

from __future__ import annotations

import logging
import secrets
import threading
from dataclasses import dataclass
from pathlib import PurePosixPath

from .abstract_index import AbstractIndex
from .bucket_state import SegmentEntry, segment_key
from .errors import (
    CorruptMetadataError,
    CorruptRecordError,
    KafkaStorageError,
    MissingSegmentError,
)
from .log_segment import LogSegment
from .offset_index import OffsetIndex
from .record_format import INT32_MAX, LOG_OVERHEAD, BatchHeader, set_base_offset
from .storage import Storage
from .time_index import TimeIndex

logger = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIMEINDEX_SUFFIX = ".timeindex"
INLINE_INDEX_BYTES = 16 << 10
"""A new segment whose ``.index`` and ``.timeindex`` together hold at most this many bytes
carries them inline in its commit entry (base64: a third more) instead of as two more
objects to PUT before the commit. 16 KiB covers segments up to about 3 MB at the default
``index.interval.bytes`` (4096); commits and snapshots grow by what they carry, until a
merge replaces the segment by one whose indexes are objects."""


def new_segment_id() -> str:
    """16 random hex digits (KIP-405 names remote segments with a unique id too): a dead
    writer's orphan upload can never take a later writer's name."""
    return secrets.token_hex(8)


@dataclass(frozen=True, slots=True)
class SegmentObjects:
    """One segment ready to upload: its commit entry and the bytes of its objects."""

    entry: SegmentEntry
    log: memoryview
    index: bytes
    timeindex: bytes

    def uploads(self) -> list[tuple[str, memoryview | bytes]]:
        """(key, bytes) of each object to put; an empty or inline index has none."""
        out: list[tuple[str, memoryview | bytes]] = [(self.entry.key + LOG_SUFFIX, self.log)]
        if self.index and not self.entry.inline_index:
            out.append((self.entry.key + INDEX_SUFFIX, self.index))
        if self.timeindex and not self.entry.inline_timeindex:
            out.append((self.entry.key + TIMEINDEX_SUFFIX, self.timeindex))
        return out


def build_segments(buf: bytearray | memoryview, headers: list[BatchHeader], *, topic: str,
                   partition: int, segment_bytes: int, index_interval_bytes: int,
                   base_offset: int | None = None, inline_index_bytes: int = 0
                   ) -> list[SegmentObjects]:
    """The segments holding ``headers``' batches of ``buf`` (consecutive, offsets
    assigned, ``headers[i].position`` their positions in ``buf``). ``base_offset``: the
    first segment's, when below its first batch's (a rewritten segment keeps the base of
    what it replaces, as Kafka's cleaner names its output; index entries are relative
    to it). ``inline_index_bytes``: indexes of at most this many bytes together go inline
    in the entry (appends pass ``INLINE_INDEX_BYTES``; 0, for rewrites: always objects,
    so a merge leaves snapshots without them)."""
    view = memoryview(buf)
    out: list[SegmentObjects] = []
    i = 0
    while i < len(headers):
        first = headers[i]
        base = base_offset if i == 0 and base_offset is not None else first.base_offset
        j = i + 1
        while j < len(headers):
            h = headers[j]
            if h.end_position - first.position > segment_bytes \
                    or h.last_offset - base > INT32_MAX:
                break
            j += 1
        out.append(_segment(view, headers[i:j], topic, partition, index_interval_bytes, base,
                            inline_max=inline_index_bytes))
        i = j
    return out


def build_fragment(buf: bytearray | memoryview, headers: list[BatchHeader], key: str, *,
                   index_interval_bytes: int, inline_index_bytes: int) -> SegmentObjects:
    """One segment's objects under ``key`` (the Spark sink's fragments: uploaded to
    ``_seglog/staging/...`` before their offsets are known, with base offsets relative to
    the fragment, first batch 0). Kafka's index entries hold offsets relative to the
    segment base, so the indexes built here stay valid once a commit gives the fragment
    its real base (``SegmentEntry.offset_delta``). Indexes of at most
    ``inline_index_bytes`` together are inline in the entry (they travel to the driver
    in the task's commit message), larger ones are objects."""
    return _segment(memoryview(buf), headers, "", 0, index_interval_bytes, key=key,
                    inline_max=inline_index_bytes)


def _segment(view: memoryview, headers: list[BatchHeader], topic: str, partition: int,
             interval: int, base: int | None = None, *, key: str | None = None,
             inline_max: int) -> SegmentObjects:
    if base is None:
        base = headers[0].base_offset
    start = headers[0].position
    offsets = bytearray()
    times = bytearray()
    last_ts = -1
    max_ts, max_ts_offset = -1, base
    since = 0
    for h in headers:  # LogSegment.append's indexing, from an empty segment
        if h.max_timestamp > max_ts:
            max_ts, max_ts_offset = h.max_timestamp, h.last_offset
        if since > interval:
            offsets += OffsetIndex.ENTRY.pack(h.last_offset - base, h.position - start)
            if max_ts > last_ts:
                times += TimeIndex.ENTRY.pack(max_ts, max_ts_offset - base)
                last_ts = max_ts
            since = 0
        since += h.size
    if max_ts > last_ts:  # the final entry of a segment that becomes inactive
        times += TimeIndex.ENTRY.pack(max_ts, max_ts_offset - base)
    end = headers[-1].end_position
    name = key or segment_key(topic, partition, base, new_segment_id())
    if len(offsets) + len(times) <= inline_max:
        entry = SegmentEntry(name, base, headers[-1].last_offset + 1, end - start, max_ts,
                             inline_index=bytes(offsets), inline_timeindex=bytes(times))
    else:
        entry = SegmentEntry(name, base, headers[-1].last_offset + 1, end - start, max_ts,
                             len(offsets), len(times))
    return SegmentObjects(entry, view[start:end], bytes(offsets), bytes(times))


# ------------------------------------------------------------------------------ reading

class ObjectPath(PurePosixPath):
    """An object's URI where the read path expects a file path (messages, ``.name``):
    ``PurePosixPath`` would print ``s3://b/k`` as ``s3:/b/k``."""

    def __str__(self) -> str:
        text = super().__str__()
        scheme, sep, rest = text.partition(":/")
        return f"{scheme}://{rest}" if sep and "/" not in scheme else text


class _BytesIndexMixin:
    """A read-only index over an index object's bytes (``AbstractIndex`` reads entries
    only through ``_raw``)."""

    def _init_bytes(self, name: PurePosixPath, base_offset: int, data: bytes) -> None:
        index: AbstractIndex = self  # type: ignore[assignment]
        index.path = name  # type: ignore[assignment]  # for messages only
        index.base_offset = base_offset
        index.writable = False
        index._count_leading_nonzero = False
        index._lock = threading.RLock()
        index._mmap = None
        index._allocated = 0
        size = index.ENTRY.size
        if len(data) % size:
            raise CorruptMetadataError(f"index object {name} has {len(data)} bytes, not a "
                                       f"multiple of {size}")
        self._data = data
        index._length = len(data)
        index._max_entries = index._max_index_size = len(data) // size
        index._entries = len(data) // size

    def _raw(self, n: int) -> bytes:
        size = self.ENTRY.size  # type: ignore[attr-defined]
        return self._data[n * size:(n + 1) * size]

    def close(self) -> None:
        return None

    def close_handler(self) -> None:
        return None


class BytesOffsetIndex(_BytesIndexMixin, OffsetIndex):
    def __init__(self, name: PurePosixPath, base_offset: int, data: bytes) -> None:
        self._init_bytes(name, base_offset, data)


class BytesTimeIndex(_BytesIndexMixin, TimeIndex):
    def __init__(self, name: PurePosixPath, base_offset: int, data: bytes) -> None:
        self._init_bytes(name, base_offset, data)


class BucketSegment(LogSegment):
    """A committed segment of a bucket, read-only; see the module docstring.

    ``log_path`` is ``<uri>/<key>.log`` (as a ``PurePosixPath``, for messages)."""

    def __init__(self, storage: Storage, entry: SegmentEntry, version: int | None = None
                 ) -> None:
        self.storage = storage
        self.entry = entry
        self.version = version  # of the state the segment was found in (for messages)
        self.base_offset = entry.base_offset
        self.read_only = True
        self.file_suffix = ""
        self.dir = ObjectPath(storage.uri) / entry.key.rpartition("/")[0]  # type: ignore
        self.log_path = ObjectPath(f"{storage.uri}/{entry.key}{LOG_SUFFIX}")  # type: ignore
        self._lock = threading.Lock()  # guards _oidx, _tidx
        self._oidx: BytesOffsetIndex | None = None
        self._tidx: BytesTimeIndex | None = None
        self._index_warned = False
        self._closed = False
        self._max_ts_and_offset = None
        self._rolling_based_timestamp = None
        self._known_size = entry.size

    def _object(self, suffix: str) -> str:
        return self.entry.key + suffix

    def _what(self) -> str:
        e = self.entry
        return f"offsets [{e.base_offset}, {e.next_offset}) of {e.key.rpartition('/')[0]}"

    def _size_error(self, actual: int) -> CorruptRecordError:
        """The object is not the one committed (its size is in the commit). Shorter or
        longer alike: objects are immutable and written whole, so either is damage or a
        replacement, never data retention took. Corruption, which ``failOnDataLoss``
        never skips (skipping a cut-short object's tail would pass damage off as data
        loss); only an object that is gone is ``MissingSegmentError``."""
        expected = self.entry.size
        how = "cut short" if actual < expected else "longer"
        return CorruptRecordError(
            f"{self.log_path} (key {self.entry.key}{LOG_SUFFIX} of {self.storage.uri}) has "
            f"{actual} bytes, but the commit that added it says {expected}: the object "
            f"holding {self._what()} is not the one committed ({how}: replaced or "
            f"damaged); the read stops at it")

    def _index_bytes(self, suffix: str, expected: int, inline: bytes) -> bytes:
        """The entry's inline index, an index object's bytes, or ``b""`` (no index: reads
        scan the segment from its start, as a local reader does past a corrupt index)
        when the object is missing or not the size the commit says. The data itself is
        checked as it is read."""
        if inline:
            return inline
        if expected == 0:
            return b""
        where = f"{self.storage.uri}/{self._object(suffix)}"
        try:
            data = self.storage.read(self._object(suffix))
        except FileNotFoundError:
            problem = "is missing"
        else:
            if len(data) == expected:
                return data
            problem = f"has {len(data)} bytes, but the commit that added it says {expected}"
        logger.warning("index object %s %s; reading %s without it (scanning the segment "
                       "from its start)", where, problem, self._what())
        return b""

    @property
    def offset_index(self) -> OffsetIndex:
        with self._lock:
            if self._oidx is None:
                name = ObjectPath(f"{self.storage.uri}/{self._object(INDEX_SUFFIX)}")
                self._oidx = BytesOffsetIndex(name, self.base_offset, self._index_bytes(
                    INDEX_SUFFIX, self.entry.index_bytes, self.entry.inline_index))
            return self._oidx

    @property
    def time_index(self) -> TimeIndex:
        with self._lock:
            if self._tidx is None:
                name = ObjectPath(f"{self.storage.uri}/{self._object(TIMEINDEX_SUFFIX)}")
                self._tidx = BytesTimeIndex(name, self.base_offset, self._index_bytes(
                    TIMEINDEX_SUFFIX, self.entry.timeindex_bytes,
                    self.entry.inline_timeindex))
            return self._tidx

    @property
    def size(self) -> int:
        return self.entry.size

    @property
    def max_timestamp_so_far(self) -> int:
        return self.entry.max_timestamp

    @property
    def largest_timestamp(self) -> int:
        return self.entry.max_timestamp

    def is_file_at_path(self) -> bool:
        return True  # objects are never replaced

    @property
    def closed(self) -> bool:
        return self._closed

    def _get(self, position: int, size: int) -> memoryview:
        """Ranged GETs, no HEAD: the commit gives the size. A read that reaches the
        segment's end asks for one byte more, so an object longer than committed shows
        (an object is never rewritten: no ETag to pin); a shorter one gives fewer bytes."""
        expected = self.entry.size
        end = min(position + size, expected)
        if end <= position:
            return memoryview(b"")
        if self._closed:
            raise KafkaStorageError(f"segment {self.log_path} is closed")
        want = end - position
        # A fragment (offset_delta): 8 more bytes, so a batch starting before ``end`` has
        # its whole baseOffset field here to patch.
        fetch_end = min(end + 8, expected) if self.entry.offset_delta else end
        fetch = fetch_end - position
        try:
            data = self.storage.read_range_view(self._object(LOG_SUFFIX), position,
                                                fetch + (fetch_end == expected))
        except FileNotFoundError:
            at = f"version {self.version} of " if self.version is not None else ""
            raise MissingSegmentError(
                f"{self.log_path} is missing, though {at}the bucket's state references it "
                f"(segment {self.entry.key}): {self._what()} cannot be read; the bucket is "
                f"damaged", self.entry.base_offset, self.entry.next_offset) from None
        if len(data) != fetch:
            raise self._size_error(position + len(data) if len(data) < fetch
                                   else self.storage.size(self._object(LOG_SUFFIX)))
        if not self.entry.offset_delta:
            return data
        patched = bytearray(data)
        self._patch_base_offsets(patched, position)
        return memoryview(patched)[:want]

    def pread(self, position: int, size: int) -> bytes:
        return bytes(self._get(position, size))

    def _patch_base_offsets(self, data: bytearray, position: int) -> None:
        """Add ``offset_delta`` to the baseOffset of every batch starting in ``data``
        (read from ``position``, a batch start: the read path only reads from batch
        starts, found by the index or by walking headers). The CRC does not cover the
        field, so the patched batches are exactly what Kafka would store. A stored offset
        outside the fragment's range means ``position`` was no batch start or the object
        is not what its commit says: corruption, never data."""
        entry = self.entry
        low = entry.base_offset - entry.offset_delta
        high = entry.next_offset - entry.offset_delta
        pos = 0
        while pos + 8 <= len(data):
            stored = int.from_bytes(data[pos:pos + 8], "big", signed=True)
            if not low <= stored < high:
                raise CorruptRecordError(
                    f"{self.log_path} at position {position + pos}: stored base offset "
                    f"{stored} is outside the fragment's [{low}, {high}) (the commit gives "
                    f"it offset_delta {entry.offset_delta})")
            set_base_offset(data, pos, stored + entry.offset_delta)
            if pos + LOG_OVERHEAD > len(data):
                return
            pos += LOG_OVERHEAD + int.from_bytes(data[pos + 8:pos + 12], "big", signed=True)

    def readinto(self, buf: bytearray | memoryview, position: int) -> int:
        data = self._get(position, len(buf))
        buf[:len(data)] = data
        return len(data)

    def read_chunk(self, position: int, max_bytes: int) -> tuple[memoryview, int]:
        data = self._get(position, max_bytes)  # the buffer the answer came in: no copy
        return data, len(data)

    def close(self, *, flush: bool = False) -> None:
        self.close_handlers()

    def close_handlers(self) -> None:
        self._closed = True  # no handle to release: each read is its own GET

    def __repr__(self) -> str:
        return f"BucketSegment({self.log_path}, size={self.entry.size})"


def object_keys(entry: SegmentEntry) -> list[str]:
    """The keys of a committed segment's objects."""
    keys = [entry.key + LOG_SUFFIX]
    if entry.index_bytes:
        keys.append(entry.key + INDEX_SUFFIX)
    if entry.timeindex_bytes:
        keys.append(entry.key + TIMEINDEX_SUFFIX)
    return keys


