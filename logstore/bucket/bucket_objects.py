"""The exact Kafka bytes of a committed bucket segment, checked: what merging, compaction,
``seglog export`` and ``seglog check`` read.

A segment entry names a ``.log`` object of ``size`` bytes holding batches of offsets
``[base_offset, next_offset)``. When the entry has an ``offset_delta`` (a fragment
uploaded before its offsets were known), the stored batches' 8-byte base offsets plus
the delta are the real ones: ``read_segment`` patches them (Kafka's CRC does not cover
that field), so every rewrite and every export leaves exact Kafka segments.

Every batch is checked as recovery checks it (``record_format.verify``: header, size,
CRC, offsets increasing, inside the entry's range, within 32 bits of the base): an object
that is not what its commit says is ``CorruptRecordError`` or ``CorruptMetadataError``
naming it, never data.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import CorruptMetadataError, CorruptRecordError
from ..records.record_format import BatchHeader, iter_batch_headers, set_base_offset, verify_all
from ..storage.storage import Storage
from .bucket_segment import INDEX_SUFFIX, LOG_SUFFIX, TIMEINDEX_SUFFIX, SegmentObjects
from .bucket_state import SegmentEntry


@dataclass(frozen=True, slots=True)
class SegmentData:
    """A committed segment's ``.log`` bytes (offsets real) and its batch headers."""

    entry: SegmentEntry
    data: bytearray
    headers: tuple[BatchHeader, ...]


def object_uri(storage: Storage, key: str) -> str:
    return f"{storage.uri}/{key}"


def read_segment(storage: Storage, entry: SegmentEntry) -> SegmentData:
    """The ``.log`` object of ``entry``, size-checked, offsets patched, every batch
    verified (see the module docstring)."""
    key = entry.key + LOG_SUFFIX
    where = object_uri(storage, key)
    data = bytearray(storage.read(key))
    if len(data) != entry.size:
        raise CorruptMetadataError(f"{where} has {len(data)} bytes, but the commit that "
                                   f"added it says {entry.size}")
    if entry.offset_delta:
        try:
            stored = list(iter_batch_headers(data))
        except CorruptRecordError as e:
            raise CorruptRecordError(f"{where}: {e}") from None
        for h in stored:
            set_base_offset(data, h.position, h.base_offset + entry.offset_delta)
    headers = []
    for check in verify_all(data, next_offset=entry.base_offset,
                            segment_base=entry.base_offset):
        if not check.valid or check.header is None:
            raise CorruptRecordError(f"{where}: {check.reason}")
        headers.append(check.header)
    if not headers:
        raise CorruptRecordError(f"{where} holds no batch")
    if headers[-1].next_offset > entry.next_offset:
        raise CorruptMetadataError(
            f"{where} holds offsets up to {headers[-1].last_offset}, but the commit that "
            f"added it says the segment ends before {entry.next_offset}")
    return SegmentData(entry, data, tuple(headers))


def concatenated(parts: list[SegmentData]) -> tuple[bytearray, list[BatchHeader]]:
    """The bytes of consecutive segments one after another, and their headers with
    positions in the result (what ``build_segments`` takes)."""
    buf = bytearray()
    headers: list[BatchHeader] = []
    for part in parts:
        shift = len(buf)
        buf += part.data
        headers += [replace(h, position=h.position + shift) for h in part.headers]
    return buf, headers


def stored_indexes(storage: Storage, entry: SegmentEntry) -> tuple[bytes, bytes]:
    """The ``.index`` and ``.timeindex`` bytes of ``entry``: inline in the entry, else the
    objects (``b""`` where the commit says there is none), size-checked. An offset delta
    does not change them: their entries are relative to the segment's base offset."""
    out = []
    for suffix, expected, inline in (
            (INDEX_SUFFIX, entry.index_bytes, entry.inline_index),
            (TIMEINDEX_SUFFIX, entry.timeindex_bytes, entry.inline_timeindex)):
        if inline:
            out.append(inline)
            continue
        if expected == 0:
            out.append(b"")
            continue
        data = storage.read(entry.key + suffix)
        if len(data) != expected:
            raise CorruptMetadataError(
                f"{object_uri(storage, entry.key + suffix)} has {len(data)} bytes, but the "
                f"commit that added it says {expected}")
        out.append(data)
    return out[0], out[1]


def upload(storage: Storage, segments: list[SegmentObjects]) -> None:
    """Put each segment's objects (unique names: nothing is overwritten)."""
    for seg in segments:
        for key, data in seg.uploads():
            storage.write_atomic(key, data)


def discard(storage: Storage, segments: list[SegmentObjects]) -> None:
    """Delete uploads that no commit references (an abandoned rewrite)."""
    for seg in segments:
        for key, _data in seg.uploads():
            storage.delete(key)
