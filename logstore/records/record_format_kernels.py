"""numba half of ``record_format``: byte readers and writers, record varints, and the
one header-table kernel every fast walk over batches uses.

``header_table`` walks a buffer of consecutive batches (any magic) into an int64 table,
one row per batch in ``record_format``'s ``H_*`` columns (position, size, base and last
offset, magic, attributes, base and max timestamp, producer id/epoch, base sequence,
record count, stored CRC, leader epoch), applying the same rules as
``record_format.verify`` (size, magic, count, last offset within int64,
``max.message.bytes``, and optionally offsets increasing within 32 bits of a segment
base). It stops with a status (``WALK_*``) and a reason (``REASON_*``) at the first
invalid or partial batch. Recovery (``SegmentIndexer``), the cleaner's chunks and the
transaction scans (``transactions``, ``txn_scan``) all read batches through it.

Record primitives (zigzag LEB128 varints with Kafka's byte caps, big-endian stores, an
unsigned-index copy) are shared by the codec and the cleaner.

Kernels are compiled lazily on first use (importing this module compiles nothing) and
cached on disk. Thread-safety: pure functions (they release the GIL).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .record_format import (
    ATTRIBUTES_OFFSET,
    BASE_SEQUENCE_OFFSET,
    BASE_TIMESTAMP_OFFSET,
    COMPRESSION_MASK,
    CRC_OFFSET,
    H_ATTRIBUTES,
    H_BASE_OFFSET,
    H_BASE_SEQUENCE,
    H_BASE_TIMESTAMP,
    H_CRC,
    H_LAST_OFFSET,
    H_LEADER_EPOCH,
    H_MAGIC,
    H_MAX_TIMESTAMP,
    H_POSITION,
    H_PRODUCER_EPOCH,
    H_PRODUCER_ID,
    H_RECORDS_COUNT,
    H_SIZE,
    INT32_MAX,
    INT64_MAX,
    LAST_OFFSET_DELTA_OFFSET,
    LEGACY_ATTRIBUTES_OFFSET,
    LEGACY_CRC_OFFSET,
    LEGACY_HEADER_SIZE,
    LEGACY_MIN_SIZE_V0,
    LEGACY_MIN_SIZE_V1,
    LEGACY_TIMESTAMP_OFFSET,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V0,
    MAGIC_V1,
    MAGIC_V2,
    MAX_TIMESTAMP_OFFSET,
    MIN_MAGIC_BYTES,
    NO_TIMESTAMP,
    OK,
    PARTIAL,
    PARTITION_LEADER_EPOCH_OFFSET,
    PRODUCER_EPOCH_OFFSET,
    PRODUCER_ID_OFFSET,
    REASON_COUNT,
    REASON_MAGIC,
    REASON_OFFSETS,
    REASON_SIZE,
    REASON_TOO_LARGE,
    RECORDS_COUNT_OFFSET,
    V2_HEADER_SIZE,
    WALK_END,
    WALK_FULL,
    WALK_INVALID,
    WALK_LEGACY,
    Bytes,
)

_LOW63 = 0x7FFFFFFFFFFFFFFF
_LOW57 = 0x01FFFFFFFFFFFFFF


# -- arguments ------------------------------------------------------------------------------

def readonly(a: np.ndarray) -> np.ndarray:
    """``a`` as a read-only array: every kernel gets the arrays it does not write
    read-only, so numba compiles (and caches) one signature per kernel, not one per
    caller's flags."""
    if a.flags.writeable:
        a = a.view()
        a.flags.writeable = False
    return a


def readonly_bytes(buf: Bytes) -> np.ndarray:
    """Any buffer (bytes, bytearray, memoryview, mmap) as a read-only uint8 array,
    without copying."""
    return readonly(np.frombuffer(buf, np.uint8))


# -- big-endian fields -----------------------------------------------------------------------

@njit(cache=True, nogil=True, inline="always")
def be_u(buf, p, nbytes):
    """The unsigned big-endian integer of ``nbytes`` bytes at ``p``, as uint64."""
    # Unsigned indices: without numba's negative-index wraparound LLVM turns the loop
    # into one load and a byte swap.
    q = np.uintp(p)
    v = np.uint64(0)
    for i in range(nbytes):
        v = (v << np.uint64(8)) | np.uint64(buf[q + np.uintp(i)])
    return v


@njit(cache=True, nogil=True, inline="always")
def be16(buf, p):
    return np.int64(np.int16(np.uint16(be_u(buf, p, 2))))


@njit(cache=True, nogil=True, inline="always")
def be32(buf, p):
    return np.int64(np.int32(np.uint32(be_u(buf, p, 4))))


@njit(cache=True, nogil=True, inline="always")
def beu32(buf, p):
    return np.int64(be_u(buf, p, 4))


@njit(cache=True, nogil=True, inline="always")
def be64(buf, p):
    return np.int64(be_u(buf, p, 8))


@njit(cache=True, nogil=True)
def put_be(out, pos, v, nbytes):
    for i in range(nbytes):
        out[pos + i] = np.uint8((v >> (8 * (nbytes - 1 - i))) & 0xFF)


# -- one batch's extent: the header rules of every magic -------------------------------------

@njit(cache=True, nogil=True, inline="always")
def batch_extent(buf, p, n, max_bytes):
    """Kafka's header rules for the batch at ``buf[p:n]``, any magic: ``(code, magic,
    size, base offset, last offset, records count)``. ``code`` is ``OK`` (a whole batch
    fits), ``PARTIAL`` (it does not fit in ``buf[:n]``; magic -1 when fewer than
    ``MIN_MAGIC_BYTES`` remain) or the ``REASON_*`` it breaks (magic known). The magic
    decides the format before any size rule: a legacy message can be shorter than a v2
    header and is not partial for being so. A legacy message is one "batch" whose base
    and last offset are its offset, with 1 record (-1 for a compressed wrapper). The
    rules of ``record_format._parse_header``, which must agree."""
    if n - p < MIN_MAGIC_BYTES:
        return PARTIAL, np.int64(-1), np.int64(0), np.int64(0), np.int64(0), np.int64(0)
    magic = np.int64(buf[p + MAGIC_OFFSET])
    code = OK
    size = base = last = records = np.int64(0)
    if magic == MAGIC_V2:
        if n - p < V2_HEADER_SIZE:
            return PARTIAL, magic, size, base, last, records
        size = be32(buf, p + LENGTH_OFFSET) + LOG_OVERHEAD
        last_delta = be32(buf, p + LAST_OFFSET_DELTA_OFFSET)
        records = be32(buf, p + RECORDS_COUNT_OFFSET)
        base = be64(buf, p)
        if size < V2_HEADER_SIZE:
            code = REASON_SIZE
        elif records < 0 or last_delta < 0:
            code = REASON_COUNT
        # base + last_delta must not pass int64 (checked without computing it: LLVM
        # may assume a signed add never wraps and drop a "last < base" test)
        elif base > INT64_MAX - last_delta:
            code = REASON_OFFSETS
        else:
            last = base + last_delta
    elif magic < MAGIC_V2:  # 0 or 1: a legacy message
        if n - p < LEGACY_HEADER_SIZE:
            return PARTIAL, magic, size, base, last, records
        size = be32(buf, p + LENGTH_OFFSET)
        if size < (LEGACY_MIN_SIZE_V0 if magic == MAGIC_V0 else LEGACY_MIN_SIZE_V1):
            code = REASON_SIZE
        size += LOG_OVERHEAD
        base = last = be64(buf, p)
        records = np.int64(1 if buf[p + LEGACY_ATTRIBUTES_OFFSET] & COMPRESSION_MASK == 0 else -1)
    else:
        code = REASON_MAGIC
    if code == OK and size > max_bytes:
        code = REASON_TOO_LARGE
    if code == OK and size > n - p:
        code = PARTIAL
    return code, magic, size, base, last, records


# -- the header table -----------------------------------------------------------------------

@njit(cache=True, nogil=True)
def header_table(buf, start, n, out, max_bytes, check_offsets, seg_base, next_offset,
                 stop_at_legacy):
    """Walk the batches of ``buf[start:n]`` into rows of ``out`` (int64, (cap,
    ``HEADER_COLUMNS``)). ``max_bytes``: the largest batch allowed (``INT64_MAX``: any).
    With ``check_offsets``, each batch must start at or above ``next_offset`` (then the
    previous batch's last offset + 1) and end within ``INT32_MAX`` of ``seg_base``.
    With ``stop_at_legacy``, a magic 0/1 message stops the walk (``WALK_LEGACY``);
    otherwise it gets a row (base offset = last offset = its offset, count 1, or -1
    for a compressed wrapper). Returns (rows, position after the last row's batch,
    status ``WALK_*``, reason ``REASON_*`` when ``WALK_INVALID``)."""
    p = start
    count = 0
    cap = out.shape[0]
    status = WALK_END
    reason = OK
    while True:
        code, magic, size, base, last, records = batch_extent(buf, p, n, max_bytes)
        # The magic decides before any size rule: a legacy message the caller leaves to
        # others stops the walk whatever its sizes say.
        if stop_at_legacy and 0 <= magic < MAGIC_V2:
            status = WALK_LEGACY
            break
        if code == PARTIAL:
            break
        if code != OK:
            status, reason = WALK_INVALID, code
            break
        if check_offsets and (base < next_offset or last - seg_base > INT32_MAX):
            status, reason = WALK_INVALID, REASON_OFFSETS
            break
        if count == cap:
            status = WALK_FULL
            break
        out[count, H_POSITION] = p
        out[count, H_SIZE] = size
        out[count, H_BASE_OFFSET] = base
        out[count, H_LAST_OFFSET] = last
        out[count, H_MAGIC] = magic
        out[count, H_RECORDS_COUNT] = records
        if magic == MAGIC_V2:
            out[count, H_ATTRIBUTES] = np.int64(be_u(buf, p + ATTRIBUTES_OFFSET, 2))
            out[count, H_BASE_TIMESTAMP] = be64(buf, p + BASE_TIMESTAMP_OFFSET)
            out[count, H_MAX_TIMESTAMP] = be64(buf, p + MAX_TIMESTAMP_OFFSET)
            out[count, H_PRODUCER_ID] = be64(buf, p + PRODUCER_ID_OFFSET)
            out[count, H_PRODUCER_EPOCH] = be16(buf, p + PRODUCER_EPOCH_OFFSET)
            out[count, H_BASE_SEQUENCE] = be32(buf, p + BASE_SEQUENCE_OFFSET)
            out[count, H_CRC] = beu32(buf, p + CRC_OFFSET)
            out[count, H_LEADER_EPOCH] = be32(buf, p + PARTITION_LEADER_EPOCH_OFFSET)
        else:
            attrs = np.int64(buf[p + LEGACY_ATTRIBUTES_OFFSET])
            ts = NO_TIMESTAMP
            if magic == MAGIC_V1:
                ts = be64(buf, p + LEGACY_TIMESTAMP_OFFSET)
            out[count, H_ATTRIBUTES] = attrs
            out[count, H_BASE_TIMESTAMP] = ts
            out[count, H_MAX_TIMESTAMP] = ts
            out[count, H_PRODUCER_ID] = -1
            out[count, H_PRODUCER_EPOCH] = -1
            out[count, H_BASE_SEQUENCE] = -1
            out[count, H_CRC] = beu32(buf, p + LEGACY_CRC_OFFSET)
            out[count, H_LEADER_EPOCH] = -1
        count += 1
        next_offset = last + 1
        p += size
    return count, p, status, reason


# -- record varints and copies --------------------------------------------------------------

@njit(cache=True)
def varint_size(v):
    """Bytes taken by the zigzag varint of int64 ``v``."""
    z = (v << 1) ^ (v >> 63)
    n = 1
    while z < 0 or z >= 128:  # z < 0: the unsigned value has its top bit set
        z = (z >> 7) & _LOW57
        n += 1
    return n


@njit(cache=True)
def write_varint(out, pos, v):
    z = (v << 1) ^ (v >> 63)
    while z < 0 or z >= 128:
        out[pos] = np.uint8((z & 0x7F) | 0x80)
        pos += 1
        z = (z >> 7) & _LOW57
    out[pos] = np.uint8(z)
    return pos + 1


@njit(cache=True, inline="always")  # the hot path of decoding: measurably faster inlined
def read_varint(buf, pos, end, max_bytes):
    """(value, next position); next position -1 past ``end``, -2 if longer than
    ``max_bytes`` (``VARINT_MAX_BYTES`` for int32 fields, ``VARLONG_MAX_BYTES`` for the
    timestamp delta)."""
    if pos < end:
        b = np.int64(buf[pos])
        if b < 128:  # the common one-byte case
            return (b >> 1) ^ -(b & 1), pos + 1
    result = np.int64(0)
    shift = 0
    for _ in range(max_bytes):
        if pos >= end:
            return np.int64(0), -1
        b = np.int64(buf[pos])
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 128:
            return ((result >> 1) & _LOW63) ^ -(result & 1), pos
        shift += 7
    return np.int64(0), -2


@njit(cache=True)
def copy_bytes(dst, dpos, src, spos, n):
    # Unsigned indices: numba then skips its negative-index wraparound, which would
    # otherwise stop LLVM from vectorising the copy (3x slower).
    d = np.uintp(dpos)
    s = np.uintp(spos)
    for i in range(np.uintp(n)):
        dst[d + i] = src[s + i]


@njit(cache=True, nogil=True, inline="always")
def append_binary(data, offs, valid, n, written, src, at, length):
    """Append ``src[at:at + length]`` (``length`` -1: null) as row ``n`` of an Arrow
    binary column being built (``data`` after ``written`` bytes, int32 ``offs``, 0/1
    ``valid``). Returns the bytes written after it."""
    # No branch: an inlined helper that writes arrays on two paths costs numba a
    # refcount pair per call (the decoder ran at a third of its speed).
    size = max(length, 0)
    copy_bytes(data, written, src, at, size)
    valid[n] = length >= 0
    offs[n + 1] = written + size
    return written + size


@njit(cache=True, nogil=True)
def put_v2_header(out, start, base_offset, size, partition_leader_epoch, attributes,
                  last_offset_delta, base_ts, max_ts, producer_id, producer_epoch,
                  base_sequence, records):
    """Write a whole v2 header at ``out[start]`` (CRC left zero for the caller)."""
    put_be(out, start, base_offset, 8)
    put_be(out, start + LENGTH_OFFSET, size - LOG_OVERHEAD, 4)
    put_be(out, start + PARTITION_LEADER_EPOCH_OFFSET, partition_leader_epoch, 4)
    out[start + MAGIC_OFFSET] = MAGIC_V2
    put_be(out, start + CRC_OFFSET, 0, 4)
    put_be(out, start + ATTRIBUTES_OFFSET, attributes, 2)
    put_be(out, start + LAST_OFFSET_DELTA_OFFSET, last_offset_delta, 4)
    put_be(out, start + BASE_TIMESTAMP_OFFSET, base_ts, 8)
    put_be(out, start + MAX_TIMESTAMP_OFFSET, max_ts, 8)
    put_be(out, start + PRODUCER_ID_OFFSET, producer_id, 8)
    put_be(out, start + PRODUCER_EPOCH_OFFSET, producer_epoch, 2)
    put_be(out, start + BASE_SEQUENCE_OFFSET, base_sequence, 4)
    put_be(out, start + RECORDS_COUNT_OFFSET, records, 4)
