"""Batch-level work of the cleaner: reading a segment in chunks of whole batches, and
the numba kernels that scan them (record offsets, key hashes, tombstones) and write the
retained batches (copied, dropped, or rewritten with their kept records).

A chunk of v2 batches is handled in three kernel calls: ``scan_batches`` (the batch
table), ``scan_records`` (one row per record: offset, 128-bit key hash computed in place,
key present, null value, batch index) and ``write_batches`` (each batch copied, dropped
or rewritten: kept records' bytes copied with their timestamp deltas re-based, the header
patched; CRCs are left to the caller). Compressed batches are first decompressed into a
reused "shadow" chunk (``decompressed``). Legacy magic 0/1 messages take a Python path
(``cleaner.LogCleaner._filter_chunk`` with ``rebuilt_batch``).

Columns of a batch table: position, size, base offset, last offset, attributes, base
timestamp, max timestamp, records count (``B_*``).

Thread-safety: the kernels are pure; ``ChunkBuffers`` belongs to one cleaner (one thread).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

import numba
import numpy as np

from .batch_header import (
    COMPRESSION_MASK,
    CONTROL_MASK,
    DELETE_HORIZON_MASK,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    V2_ATTRIBUTES_OFFSET,
    V2_HEADER_SIZE,
    BatchHeader,
    crc32c,
    iter_batch_headers,
    read_batch_header,
)
from .codec_kernels import _put_be, _read_varint, _varint_size, _write_varint
from .compression import compress, decompress
from .errors import CorruptRecordError
from .log_segment import LogSegment
from .offset_map import murmur3_128

COPY, DROP, REWRITE = 0, 1, 2
_HEADER_TAIL = struct.Struct(">hiqqqhii")  # attributes .. recordsCount (offset 21)
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")


@numba.njit(cache=True, nogil=True)
def rewrite_records(src, n, keep, old_base_ts, new_base_ts, out):
    """Copy the kept records of one batch's (uncompressed) records section into ``out``,
    re-basing each timestamp delta from ``old_base_ts`` to ``new_base_ts`` (offset deltas
    and everything after them are copied as they are). Returns (bytes written, records
    kept, max timestamp of the kept records), or (-1, i, 0) if record ``i`` is malformed
    or bytes remain after the ``n``-th."""
    p = 0
    end = src.shape[0]
    o = 0
    kept = 0
    max_ts = np.int64(-1)
    for i in range(n):
        length, q = _read_varint(src, p, end, 5)
        if q < 0 or length < 3 or q + length > end:
            return -1, i, np.int64(0)
        rec_end = q + length
        attrs = src[q]
        ts_delta, r = _read_varint(src, q + 1, rec_end, 10)
        if r < 0:
            return -1, i, np.int64(0)
        off_delta, r = _read_varint(src, r, rec_end, 5)
        if r < 0:
            return -1, i, np.int64(0)
        if keep[i]:
            ts = old_base_ts + ts_delta
            nd = ts - new_base_ts
            rest = rec_end - r
            o = _write_varint(out, o, 1 + _varint_size(nd) + _varint_size(off_delta) + rest)
            out[o] = attrs
            o = _write_varint(out, o + 1, nd)
            o = _write_varint(out, o, off_delta)
            out[o:o + rest] = src[r:rec_end]
            o += rest
            kept += 1
            if ts > max_ts:
                max_ts = ts
        p = rec_end
    if p != end:
        return -1, n, np.int64(0)
    return o, kept, max_ts


# Fast path: a chunk of uncompressed v2 batches is scanned, decided and rewritten in three
# kernel calls, with no per-batch Python except one CRC per rewritten batch.
# Columns of the batch table: position, size, base offset, last offset, attributes,
# base timestamp, max timestamp, records count.
B_POS, B_SIZE, B_BASE, B_LAST, B_ATTRS, B_BASE_TS, B_MAX_TS, B_COUNT = range(8)


@numba.njit(inline="always")
def _be_u(buf, p, nbytes):
    v = np.uint64(0)
    for i in range(nbytes):
        v = (v << np.uint64(8)) | np.uint64(buf[p + i])
    return v


@numba.njit(inline="always")
def _be_i64(buf, p):
    return np.int64(_be_u(buf, p, 8))


@numba.njit(inline="always")
def _be_i32(buf, p):
    v = np.int64(_be_u(buf, p, 4))
    return v - 4294967296 if v >= 2147483648 else v


@numba.njit(cache=True, nogil=True)
def scan_batches(buf, n, table):
    """The whole v2 batches at the start of ``buf[:n]`` into ``table``; stops at a partial
    batch or a magic other than 2. Returns (batches, end position)."""
    p = 0
    count = 0
    while count < table.shape[0] and n - p >= 61:
        if buf[p + 16] != 2:
            break
        size = _be_i32(buf, p + 8) + 12
        if size < 61 or size > n - p:
            break
        base = _be_i64(buf, p)
        table[count, 0] = p
        table[count, 1] = size
        table[count, 2] = base
        table[count, 3] = base + _be_i32(buf, p + 23)
        table[count, 4] = np.int64(_be_u(buf, p + 21, 2))
        table[count, 5] = _be_i64(buf, p + 27)
        table[count, 6] = _be_i64(buf, p + 35)
        table[count, 7] = _be_i32(buf, p + 57)
        count += 1
        p += size
    return count, p


@numba.njit(cache=True, nogil=True)
def scan_records(buf, table, nb, offsets, hashes, key_valid, tombstone, batch_of):
    """Walk the records of the uncompressed, non-control batches: offset, key hash, key
    present, null value, batch index. Returns the record count, or -(b + 1) when batch
    ``b`` is malformed."""
    r = 0
    for b in range(nb):
        if table[b, 4] & 0x20:  # control batch: no data records
            continue
        p = table[b, 0] + 61
        end = table[b, 0] + table[b, 1]
        base = table[b, 2]
        for _ in range(table[b, 7]):
            length, q = _read_varint(buf, p, end, 5)
            if q < 0 or length < 3 or q + length > end:
                return -(b + 1)
            rec_end = q + length
            _, t = _read_varint(buf, q + 1, rec_end, 10)
            if t < 0:
                return -(b + 1)
            od, t = _read_varint(buf, t, rec_end, 5)
            if t < 0:
                return -(b + 1)
            kl, t = _read_varint(buf, t, rec_end, 5)
            if t < 0 or t + max(kl, 0) > rec_end:
                return -(b + 1)
            if kl >= 0:
                h1, h2 = murmur3_128(buf, t, kl)
                hashes[r, 0] = h1
                hashes[r, 1] = h2
                key_valid[r] = True
                t += kl
            else:
                hashes[r, 0] = 0
                hashes[r, 1] = 0
                key_valid[r] = False
            vl, t = _read_varint(buf, t, rec_end, 5)
            if t < 0:
                return -(b + 1)
            tombstone[r] = vl < 0
            offsets[r] = base + od
            batch_of[r] = b
            r += 1
            p = rec_end
        if p != end:
            return -(b + 1)
    return r


@numba.njit(cache=True, nogil=True)
def write_batches(buf, table, nb, action, new_base_ts, horizon_bit, keep, first_record,
                   out, out_pos, out_end):
    """Copy, drop or rewrite (kept records only, timestamps re-based, header patched, CRC
    left to the caller) every batch of a scanned chunk into ``out``. Returns its length."""
    o = 0
    for b in range(nb):
        a = action[b]
        pos = table[b, 0]
        size = table[b, 1]
        if a == 1:
            out_pos[b] = -1
            out_end[b] = -1
            continue
        out_pos[b] = o
        if a == 0:
            out[o:o + size] = buf[pos:pos + size]
            o += size
            out_end[b] = o
            continue
        out[o:o + 61] = buf[pos:pos + 61]
        w = o + 61
        p = pos + 61
        end = pos + size
        old_base = table[b, 5]
        nbts = new_base_ts[b]
        kept = 0
        max_ts = np.int64(-1)
        f = first_record[b]
        for i in range(table[b, 7]):
            length, q = _read_varint(buf, p, end, 5)
            rec_end = q + length
            ts_delta, r = _read_varint(buf, q + 1, rec_end, 10)
            od, r = _read_varint(buf, r, rec_end, 5)
            if keep[f + i]:
                ts = old_base + ts_delta
                nd = ts - nbts
                rest = rec_end - r
                w = _write_varint(out, w, 1 + _varint_size(nd) + _varint_size(od) + rest)
                out[w] = buf[q]
                w = _write_varint(out, w + 1, nd)
                w = _write_varint(out, w, od)
                out[w:w + rest] = buf[r:rec_end]
                w += rest
                kept += 1
                if ts > max_ts:
                    max_ts = ts
            p = rec_end
        attrs = table[b, 4] | (0x40 if horizon_bit[b] else 0)
        if table[b, 4] & 0x08:
            max_ts = table[b, 6]  # LogAppendTime: the append time stays the batch's
        _put_be(out, o + 8, w - o - 12, 4)
        _put_be(out, o + 21, attrs, 2)
        _put_be(out, o + 27, nbts, 8)
        _put_be(out, o + 35, max_ts, 8)
        _put_be(out, o + 57, kept, 4)
        out_end[b] = w
        o = w
    return o


@dataclass(slots=True)
class ScannedChunk:
    """A chunk of uncompressed v2 batches, scanned by the kernels."""

    table: np.ndarray  # (batches, 8), see B_*
    offsets: np.ndarray
    hashes: np.ndarray
    key_valid: np.ndarray
    tombstone: np.ndarray
    batch_of: np.ndarray


def decompressed(chunk: memoryview, table: np.ndarray, bufs: ChunkBuffers
                  ) -> tuple[memoryview, np.ndarray] | None:
    """The chunk with every compressed batch's records section decompressed and its codec
    bits cleared (CRCs are then stale: nothing written comes from here unchanged), and
    the matching batch table; None when no batch is compressed."""
    codecs = table[:, B_ATTRS] & COMPRESSION_MASK
    if not codecs.any():
        return None
    pieces: list = []
    shadow = table.copy()
    pos = 0
    for b in range(len(table)):
        start, size = int(table[b, B_POS]), int(table[b, B_SIZE])
        codec = int(codecs[b])
        if codec:
            raw = decompress(codec, chunk[start + V2_HEADER_SIZE:start + size])
            header = bytearray(chunk[start:start + V2_HEADER_SIZE])
            size = V2_HEADER_SIZE + len(raw)
            _INT32.pack_into(header, 8, size - LOG_OVERHEAD)
            header[V2_ATTRIBUTES_OFFSET + 1] &= ~COMPRESSION_MASK & 0xFF
            pieces += (header, raw)
        else:
            pieces.append(chunk[start:start + size])
        shadow[b, B_POS] = pos
        shadow[b, B_SIZE] = size
        pos += size
    shadow[:, B_ATTRS] &= ~COMPRESSION_MASK
    out = bufs.shadow_buffer(pos)
    at = 0
    for piece in pieces:
        out[at:at + len(piece)] = piece
        at += len(piece)
    return memoryview(out)[:pos], shadow


def scan_chunk(u8: np.ndarray, table: np.ndarray) -> ScannedChunk:
    """The records of a chunk of whole, uncompressed v2 batches (``table`` from
    ``scan_batches``)."""
    data = (table[:, B_ATTRS] & CONTROL_MASK) == 0
    n = int(table[data, B_COUNT].sum())
    offsets = np.empty(n, np.int64)
    hashes = np.empty((n, 2), np.int64)
    key_valid = np.empty(n, np.bool_)
    tombstone = np.empty(n, np.bool_)
    batch_of = np.empty(n, np.int64)
    got = scan_records(u8, table, len(table), offsets, hashes, key_valid, tombstone, batch_of)
    if got < 0:
        b = -got - 1
        raise CorruptRecordError(
            f"the batch at offsets {table[b, B_BASE]}..{table[b, B_LAST]} has a malformed "
            "record or a wrong record count")
    return ScannedChunk(table, offsets, hashes, key_valid, tombstone, batch_of)


def _readonly_u8(buf) -> np.ndarray:
    a = np.frombuffer(buf, np.uint8)
    if a.flags.writeable:  # one kernel signature: always read-only input
        a = a.view()
        a.flags.writeable = False
    return a


def rebuilt_batch(chunk: memoryview, h: BatchHeader, keep: np.ndarray,
                   horizon: int | None) -> bytes:
    """The batch ``h`` with only the ``keep`` records (see the module docstring)."""
    body = chunk[h.position + V2_HEADER_SIZE:h.end_position]
    codec = h.attributes & COMPRESSION_MASK
    raw = decompress(codec, body) if codec else body
    src = _readonly_u8(raw)
    new_base_ts = horizon if horizon is not None else h.base_timestamp
    out = np.empty(len(src) + 16 * len(keep) + 16, np.uint8)
    size, kept, max_ts = rewrite_records(src, len(keep), keep.view(np.uint8), h.base_timestamp,
                                          new_base_ts, out)
    if size < 0:
        raise CorruptRecordError(
            f"record {kept} of the batch at offsets {h.base_offset}..{h.last_offset} is "
            f"malformed (or the batch has trailing bytes)")
    records = memoryview(out)[:size]
    if codec:
        records = compress(codec, records)
    attributes = h.attributes | (DELETE_HORIZON_MASK if horizon is not None else 0)
    if h.attributes & TIMESTAMP_TYPE_MASK:
        max_ts = h.max_timestamp  # LogAppendTime: the append time stays the batch's
    batch = bytearray(V2_HEADER_SIZE + len(records))
    batch[:V2_HEADER_SIZE] = chunk[h.position:h.position + V2_HEADER_SIZE]
    batch[V2_HEADER_SIZE:] = records
    _INT32.pack_into(batch, 8, len(batch) - LOG_OVERHEAD)
    _HEADER_TAIL.pack_into(batch, V2_ATTRIBUTES_OFFSET, _signed16(attributes),
                           h.last_offset - h.base_offset, new_base_ts, max_ts, h.producer_id,
                           h.producer_epoch, h.base_sequence, kept)
    _UINT32.pack_into(batch, 17, crc32c(memoryview(batch)[V2_ATTRIBUTES_OFFSET:]))
    return bytes(batch)


def empty_batch(chunk: memoryview, h: BatchHeader) -> bytes:
    """Kafka's ``writeEmptyHeader``: no records, the batch's offsets and producer fields."""
    batch = bytearray(chunk[h.position:h.position + V2_HEADER_SIZE])
    attributes = h.attributes & (TIMESTAMP_TYPE_MASK | TRANSACTIONAL_MASK)
    _INT32.pack_into(batch, 8, V2_HEADER_SIZE - LOG_OVERHEAD)
    _HEADER_TAIL.pack_into(batch, V2_ATTRIBUTES_OFFSET, attributes,
                           h.last_offset - h.base_offset, h.base_timestamp, h.max_timestamp,
                           h.producer_id, h.producer_epoch, h.base_sequence, 0)
    _UINT32.pack_into(batch, 17, crc32c(memoryview(batch)[V2_ATTRIBUTES_OFFSET:]))
    return bytes(batch)


def _signed16(v: int) -> int:
    return v - 0x10000 if v >= 0x8000 else v


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
            h = read_batch_header(self.view, int(self.table[-1, B_POS]))
            assert h is not None
            return h
        return self.headers[-1]

    @property
    def last_offset(self) -> int:
        if self.table is not None:
            return int(self.table[-1, B_LAST])
        return self.headers[-1].last_offset


class ChunkBuffers:
    """Scratch memory reused from chunk to chunk (fresh multi-MiB allocations cost page
    faults every time). A chunk's buffers are valid until the next chunk is read."""

    def __init__(self, chunk_bytes: int) -> None:
        self.read = bytearray(chunk_bytes)
        self.table = np.empty((chunk_bytes // V2_HEADER_SIZE + 1, 8), np.int64)
        self.out = np.empty(0, np.uint8)
        self.shadow = bytearray()

    def shadow_buffer(self, size: int) -> bytearray:
        """The decompressed copy of a chunk (see ``decompressed``)."""
        if len(self.shadow) < size:
            self.shadow = bytearray(size + (size >> 2))
        return self.shadow

    def out_buffer(self, size: int) -> np.ndarray:
        if len(self.out) < size:
            self.out = np.empty(size, np.uint8)
        return self.out


def segment_chunks(seg: LogSegment, bufs: ChunkBuffers) -> Iterator[Chunk]:
    """Whole batches of an inactive segment, a read buffer at a time (a larger batch
    alone)."""
    pos, end = 0, seg.size
    while pos < end:
        buf = bufs.read
        n = seg.readinto(memoryview(buf)[:min(len(buf), end - pos)], pos)
        u8 = np.frombuffer(buf, np.uint8)
        nb, used = scan_batches(u8, n, bufs.table)
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
