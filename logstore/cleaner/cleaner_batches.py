"""Batch-level work of the cleaner in Python: reading a segment in chunks of whole
batches (``segment_chunks``, ``Chunk``), the scratch memory reused across chunks
(``ChunkBuffers``), and rebuilding single batches; the numba kernels that scan and
rewrite a chunk (``map_batches``, ``filter_batches``, ``rewrite_records``) are
``cleaner_kernels``.

Compressed batches are first decompressed into a reused "shadow" chunk
(``decompressed``) for the kernels. Legacy magic 0/1 messages take a Python path
(``cleaner.LogCleaner._filter_chunk`` with ``rebuilt_batch``); ``empty_batch`` is Kafka's
``writeEmptyHeader``.

Columns of a batch table: ``record_format``'s ``H_*``.

Thread-safety: ``ChunkBuffers`` belongs to one cleaner (one thread).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ..errors import CorruptRecordError
from ..log.log_segment import LogSegment
from ..records.compression import compress, decompress
from ..records.record_format import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    DELETE_HORIZON_MASK,
    H_ATTRIBUTES,
    H_LAST_OFFSET,
    H_POSITION,
    H_RECORDS_COUNT,
    H_SIZE,
    HEADER_COLUMNS,
    INT64_MAX,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    V2_HEADER_SIZE,
    BatchHeader,
    iter_batch_headers,
    read_batch_header,
    restamp_crc,
    set_length,
)
from ..records.record_format_kernels import header_table, readonly_bytes
from .cleaner_kernels import rewrite_records

# attributes (unsigned here) .. recordsCount: the fields from offset 21 a cleaner rewrites
_HEADER_TAIL = struct.Struct(">Hiqqqhii")


def decompressed(chunk: memoryview, table: np.ndarray, bufs: ChunkBuffers
                 ) -> tuple[memoryview, np.ndarray] | None:
    """The chunk with every compressed batch's records section decompressed, and the
    matching batch table (positions, sizes, codec bits cleared); None when no batch is
    compressed. Headers in the bytes are left as they were (stale sizes, codec bits and
    CRCs): the kernels take those fields from the table, and nothing written comes from
    here unchanged."""
    codecs = table[:, H_ATTRIBUTES] & COMPRESSION_MASK
    if not codecs.any():
        return None
    pieces: list[bytes | memoryview] = []
    sizes: list[int] = []
    for start, size, codec in zip(table[:, H_POSITION].tolist(), table[:, H_SIZE].tolist(),
                                  codecs.tolist(), strict=True):
        if codec:
            raw = decompress(codec, chunk[start + V2_HEADER_SIZE:start + size])
            pieces += (chunk[start:start + V2_HEADER_SIZE], raw)
            sizes.append(V2_HEADER_SIZE + len(raw))
        else:
            pieces.append(chunk[start:start + size])
            sizes.append(size)
    shadow = table.copy()
    shadow[:, H_SIZE] = sizes
    shadow[0, H_POSITION] = 0
    np.cumsum(shadow[:-1, H_SIZE], out=shadow[1:, H_POSITION])
    shadow[:, H_ATTRIBUTES] &= ~COMPRESSION_MASK
    total = int(shadow[-1, H_POSITION] + shadow[-1, H_SIZE])
    # Into a reused buffer, not b"".join: a fresh multi-MiB allocation per chunk costs
    # more in page faults than these copies.
    out = bufs.shadow_buffer(total)
    at = 0
    for piece in pieces:
        n = len(piece)
        out[at:at + n] = piece
        at += n
    return out[:total], shadow


def rebuilt_batch(chunk: memoryview, h: BatchHeader, keep: np.ndarray,
                   horizon: int | None) -> bytes:
    """The batch ``h`` with only the ``keep`` records (see the module docstring)."""
    body = chunk[h.position + V2_HEADER_SIZE:h.end_position]
    codec = h.attributes & COMPRESSION_MASK
    raw = decompress(codec, body) if codec else body
    src = readonly_bytes(raw)
    new_base_ts = horizon if horizon is not None else h.base_timestamp
    out = np.empty(len(src) + 16 * len(keep) + 16, np.uint8)
    size, kept, max_ts = rewrite_records(src, len(keep), keep.view(np.uint8), h.base_timestamp,
                                          new_base_ts, out)
    if size < 0:
        raise CorruptRecordError(
            f"record {kept} of the batch at offsets {h.base_offset}..{h.last_offset} is "
            f"malformed (or the batch has trailing bytes)")
    records: bytes | memoryview = out.data[:size]
    if codec:
        records = compress(codec, records)
    attributes = h.attributes | (DELETE_HORIZON_MASK if horizon is not None else 0)
    if h.attributes & TIMESTAMP_TYPE_MASK:
        max_ts = h.max_timestamp  # LogAppendTime: the append time stays the batch's
    batch = bytearray(V2_HEADER_SIZE + len(records))
    batch[:V2_HEADER_SIZE] = chunk[h.position:h.position + V2_HEADER_SIZE]
    batch[V2_HEADER_SIZE:] = records
    _rewrite_header(batch, h, attributes, new_base_ts, max_ts, kept)
    return bytes(batch)


def empty_batch(chunk: memoryview, h: BatchHeader) -> bytes:
    """Kafka's ``writeEmptyHeader``: no records, the batch's offsets and producer fields."""
    batch = bytearray(chunk[h.position:h.position + V2_HEADER_SIZE])
    attributes = h.attributes & (TIMESTAMP_TYPE_MASK | TRANSACTIONAL_MASK)
    _rewrite_header(batch, h, attributes, h.base_timestamp, h.max_timestamp, 0)
    return bytes(batch)


def _rewrite_header(batch: bytearray, h: BatchHeader, attributes: int, base_ts: int,
                    max_ts: int, count: int) -> None:
    """The header fields a cleaned batch changes (its offsets and producer fields stay
    ``h``'s), its length, then its CRC."""
    set_length(batch, 0, len(batch))
    _HEADER_TAIL.pack_into(batch, ATTRIBUTES_OFFSET, attributes & 0xFFFF,
                           h.last_offset - h.base_offset, base_ts, max_ts, h.producer_id,
                           h.producer_epoch, h.base_sequence, count)
    restamp_crc(batch, 0, len(batch))


@dataclass(slots=True)
class Chunk:
    """Whole batches read from a segment. ``table`` is set when they are all v2 (the
    kernels scanned them); ``headers`` is parsed in Python only when needed."""

    view: memoryview
    table: np.ndarray | None
    _headers: list[BatchHeader] | None = None

    @property
    def headers(self) -> list[BatchHeader]:
        if self._headers is None:
            self._headers = list(iter_batch_headers(self.view))
        return self._headers

    def last_header(self) -> BatchHeader:
        if self._headers is None and self.table is not None:
            h = read_batch_header(self.view, int(self.table[-1, H_POSITION]))
            assert h is not None
            return h
        return self.headers[-1]

    @property
    def last_offset(self) -> int:
        if self.table is not None:
            return int(self.table[-1, H_LAST_OFFSET])
        return self.headers[-1].last_offset


MAX_CHUNK_BATCHES = 8192
"""Rows of a chunk's batch table: a chunk of many small batches ends early instead
(at under 1 MiB of table rather than one row per 61 bytes of read buffer)."""


class ChunkBuffers:
    """Scratch memory reused from chunk to chunk (fresh multi-MiB allocations cost page
    faults every time). A chunk's buffers are valid until the next chunk is read."""

    def __init__(self, chunk_bytes: int) -> None:
        self.read = bytearray(chunk_bytes)
        rows = min(MAX_CHUNK_BATCHES, chunk_bytes // V2_HEADER_SIZE + 1)
        self.table = np.empty((rows, HEADER_COLUMNS), np.int64)
        self.action = np.empty(rows, np.int64)
        self.out_pos = np.empty(rows, np.int64)
        self.out_end = np.empty(rows, np.int64)
        self.counters = np.empty(8, np.int64)
        self.recs = np.empty((0, 6), np.int64)
        self.out = np.empty(0, np.uint8)
        self.shadow = memoryview(bytearray())

    def shadow_buffer(self, size: int) -> memoryview:
        """The decompressed copy of a chunk (see ``decompressed``)."""
        if len(self.shadow) < size:
            self.shadow = memoryview(bytearray(size + (size >> 2)))
        return self.shadow

    def out_buffer(self, size: int) -> np.ndarray:
        if len(self.out) < size:
            self.out = np.empty(size + (size >> 3), np.uint8)
        return self.out

    def records(self, table: np.ndarray) -> np.ndarray:
        """Scratch rows for the records of the chunk's largest batch (``R_*`` columns,
        one extra row for the batch end). A corrupt count is bounded by what the batch's
        bytes can hold (a record takes at least 7); ``_parse_batch`` never writes past the
        rows in any case."""
        fits = (table[:, H_SIZE] - V2_HEADER_SIZE) // 7
        n = max(int(np.minimum(table[:, H_RECORDS_COUNT], fits).max()) + 1
                if len(table) else 1, 1)
        if len(self.recs) < n:
            self.recs = np.empty((max(n, 1024), 6), np.int64)
        return self.recs


def segment_chunks(seg: LogSegment, bufs: ChunkBuffers) -> Iterator[Chunk]:
    """Whole batches of an inactive segment, a read buffer at a time (a larger batch
    alone)."""
    pos, end = 0, seg.size
    while pos < end:
        buf = bufs.read
        n = seg.readinto(memoryview(buf)[:min(len(buf), end - pos)], pos)
        u8 = np.frombuffer(buf, np.uint8)
        nb, used, _, _ = header_table(u8, 0, n, bufs.table, INT64_MAX, False, 0, 0, True)
        table = bufs.table
        if nb:
            yield Chunk(memoryview(buf)[:used], table[:nb])
            pos += used
            continue
        headers = list(iter_batch_headers(buf, 0, n))  # legacy messages: Python
        if not headers:
            head = read_batch_header(buf, 0, 1 << 62) if n > 16 else None
            if head is None or head.size <= n:
                raise CorruptRecordError(
                    f"{seg.log_path}: no whole batch at position {pos} ({end - pos} bytes "
                    f"left)")
            buf = bytearray(seg.pread(pos, head.size))
            headers = list(iter_batch_headers(buf))
            if not headers:
                raise CorruptRecordError(
                    f"{seg.log_path}: the batch at position {pos} is cut short")
        view = memoryview(buf)[:headers[-1].end_position]
        yield Chunk(view, None, headers)
        pos += len(view)
