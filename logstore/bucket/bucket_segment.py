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

**Reading.** ``BucketSegment`` is a read-only ``LogSegment`` assembled from object-backed
parts (``bucket_segment_parts``, as ``segment_parts`` assembles a local segment's): its
records are ``ObjectRecords`` (the ``.log`` read with ranged GETs), its indexes the
entry's inline bytes or the index objects' bytes over ``AbstractIndex.from_bytes``
(fetched on first use, kept: objects never change), so ``LogSegment``'s lookups, batch
walks and checks serve bucket partitions unchanged. Thread-safety: safe for concurrent
readers (each ``LazyIndex``'s lock guards its fetch).
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass
from pathlib import PurePath, PurePosixPath

from ..errors import (
    CorruptMetadataError,
    CorruptRecordError,
    KafkaStorageError,
    MissingSegmentError,
)
from ..index.lazy_index import LazyIndex
from ..index.offset_index import OffsetIndex
from ..index.time_index import TimeIndex
from ..index.txn_index import TransactionIndex
from ..log.log_segment import LogSegment
from ..log.segment_parts import SegmentParts
from ..records.record_format import INT32_MAX, LOG_OVERHEAD, BatchHeader, set_base_offset
from ..storage.file_names import TXN_INDEX_SUFFIX
from ..storage.storage import Storage
from .bucket_state import SegmentEntry, segment_key

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
    """An object's URI as a ``PurePath`` (what a segment's ``log_path`` and ``dir`` are
    typed as, for messages and ``.name``): ``PurePosixPath`` alone would print
    ``s3://b/k`` as ``s3:/b/k``."""

    def __str__(self) -> str:
        text = super().__str__()
        scheme, sep, rest = text.partition(":/")
        return f"{scheme}://{rest}" if sep and "/" not in scheme else text


class ObjectRecords:
    """A committed segment's ``.log`` object, read with ranged GETs (the records part of
    a ``BucketSegment``; ``segment_records.SegmentRecords``). Its size is the commit's,
    never asked; each read is its own GET, so there is no handle to hold."""

    def __init__(self, storage: Storage, entry: SegmentEntry, version: int | None) -> None:
        self.storage = storage
        self.entry = entry
        self.version = version  # of the state the segment was found in (for messages)
        self._path = ObjectPath(f"{storage.uri}/{entry.key}{LOG_SUFFIX}")
        self._closed = False

    @property
    def path(self) -> ObjectPath:
        return self._path

    @property
    def size(self) -> int:
        return self.entry.size

    @property
    def known_size(self) -> int:
        return self.entry.size

    @property
    def immutable(self) -> bool:
        return True

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def is_open(self) -> bool:
        return False

    def what(self) -> str:
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
            f"{self._path} (key {self.entry.key}{LOG_SUFFIX} of {self.storage.uri}) has "
            f"{actual} bytes, but the commit that added it says {expected}: the object "
            f"holding {self.what()} is not the one committed ({how}: replaced or "
            f"damaged); the read stops at it")

    def _get(self, position: int, size: int) -> memoryview:
        """Ranged GETs, no HEAD: the commit gives the size. A read that reaches the
        segment's end asks for one byte more, so an object longer than committed shows
        (an object is never rewritten: no ETag to pin); a shorter one gives fewer bytes."""
        expected = self.entry.size
        end = min(position + size, expected)
        if end <= position:
            return memoryview(b"")
        if self._closed:
            raise KafkaStorageError(f"segment {self._path} is closed")
        want = end - position
        # A fragment (offset_delta): 8 more bytes, so a batch starting before ``end`` has
        # its whole baseOffset field here to patch.
        fetch_end = min(end + 8, expected) if self.entry.offset_delta else end
        fetch = fetch_end - position
        key = self.entry.key + LOG_SUFFIX
        try:
            data = self.storage.read_range_view(key, position, fetch + (fetch_end == expected))
        except FileNotFoundError:
            at = f"version {self.version} of " if self.version is not None else ""
            raise MissingSegmentError(
                f"{self._path} is missing, though {at}the bucket's state references it "
                f"(segment {self.entry.key}): {self.what()} cannot be read; the bucket is "
                f"damaged", self.entry.base_offset, self.entry.next_offset) from None
        if len(data) != fetch:
            raise self._size_error(position + len(data) if len(data) < fetch
                                   else self.storage.size(key))
        if not self.entry.offset_delta:
            return data
        patched = bytearray(data)
        self._patch_base_offsets(patched, position)
        return memoryview(patched)[:want]

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
                    f"{self._path} at position {position + pos}: stored base offset "
                    f"{stored} is outside the fragment's [{low}, {high}) (the commit gives "
                    f"it offset_delta {entry.offset_delta})")
            set_base_offset(data, pos, stored + entry.offset_delta)
            if pos + LOG_OVERHEAD > len(data):
                return
            pos += LOG_OVERHEAD + int.from_bytes(data[pos + 8:pos + 12], "big", signed=True)

    def pread(self, position: int, size: int) -> bytes:
        return bytes(self._get(position, size))

    def readinto(self, buf: bytearray | memoryview, position: int) -> int:
        data = self._get(position, len(buf))
        buf[:len(data)] = data
        return len(data)

    def read_chunk(self, position: int, max_bytes: int) -> tuple[memoryview, int]:
        data = self._get(position, max_bytes)  # the buffer the answer came in: no copy
        return data, len(data)

    def is_file_at_path(self) -> bool:
        return True  # objects are never replaced

    def identity(self) -> tuple[int | str, int]:
        return (str(self._path), self.entry.size)

    def mtime_ms(self) -> None:
        return None  # the commit's max timestamp is all there is

    def open(self) -> None:
        return None  # nothing to open: each read is its own GET

    def release(self) -> None:
        return None

    def close(self) -> None:
        self._closed = True


def _index_bytes(records: ObjectRecords, suffix: str, expected: int, inline: bytes,
                 entry_size: int) -> bytes:
    """The entry's inline index, an index object's bytes, or ``b""`` (no index: reads
    scan the segment from its start, as a local reader does past a corrupt index) when
    the object is missing or not the size the commit says. The data itself is checked
    as it is read."""
    storage, key = records.storage, records.entry.key + suffix
    data = inline
    if not inline and expected:
        where = f"{storage.uri}/{key}"
        try:
            data = storage.read(key)
        except FileNotFoundError:
            problem = "is missing"
        else:
            problem = "" if len(data) == expected else (
                f"has {len(data)} bytes, but the commit that added it says {expected}")
        if problem:
            logger.warning("index object %s %s; reading %s without it (scanning the "
                           "segment from its start)", where, problem, records.what())
            return b""
    if len(data) % entry_size:
        raise CorruptMetadataError(f"index object {storage.uri}/{key} has {len(data)} "
                                   f"bytes, not a multiple of {entry_size}")
    return data


def bucket_segment_parts(records: ObjectRecords) -> SegmentParts:
    """A committed segment's parts: its ``.log`` object, its indexes over the entry's
    inline bytes or their objects' (fetched on first use, kept: objects never change),
    and an empty transaction index (a bucket holds no transactions yet)."""
    entry, uri = records.entry, records.storage.uri
    base = entry.base_offset

    def offsets(path: PurePath) -> OffsetIndex:
        return OffsetIndex.from_bytes(path, base, _index_bytes(
            records, INDEX_SUFFIX, entry.index_bytes, entry.inline_index,
            OffsetIndex.ENTRY.size))

    def times(path: PurePath) -> TimeIndex:
        return TimeIndex.from_bytes(path, base, _index_bytes(
            records, TIMEINDEX_SUFFIX, entry.timeindex_bytes, entry.inline_timeindex,
            TimeIndex.ENTRY.size))

    txn = TransactionIndex.from_bytes(ObjectPath(f"{uri}/{entry.key}{TXN_INDEX_SUFFIX}"),
                                      base, None)
    return SegmentParts(records,
                        LazyIndex(offsets, ObjectPath(f"{uri}/{entry.key}{INDEX_SUFFIX}")),
                        LazyIndex(times, ObjectPath(f"{uri}/{entry.key}{TIMEINDEX_SUFFIX}")),
                        lambda _suffix: txn)


class BucketSegment(LogSegment):
    """A committed segment of a bucket, read-only: a ``LogSegment`` assembled from
    object-backed parts (``bucket_segment_parts``), so the shared read path serves it
    unchanged; this class only names the parts' commit entry. ``log_path`` is
    ``<uri>/<key>.log`` (an ``ObjectPath``)."""

    def __init__(self, storage: Storage, entry: SegmentEntry, version: int | None = None
                 ) -> None:
        self._object = ObjectRecords(storage, entry, version)
        parts = bucket_segment_parts(self._object)
        self._offsets = parts.offset_index
        super().__init__(ObjectPath(storage.uri) / entry.key.rpartition("/")[0],
                         entry.base_offset, read_only=True, lazy=True, parts=parts,
                         known_max_timestamp=entry.max_timestamp)

    @property
    def entry(self) -> SegmentEntry:
        return self._object.entry

    @property
    def records(self) -> ObjectRecords:
        """The ``.log`` object (``ObjectRecords``)."""
        return self._object

    @property
    def offset_index_part(self) -> LazyIndex[OffsetIndex]:
        """The offset index part, fetched on first ``get`` (a read window is handed it,
        to fetch the index without asking the segment)."""
        return self._offsets

    @property
    def storage(self) -> Storage:
        return self._object.storage

    @property
    def version(self) -> int | None:
        return self._object.version

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


