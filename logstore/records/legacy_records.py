"""Legacy message sets (magic 0 and 1) → the same Arrow columns as RecordBatch v2.

Read only: seglog never writes magic 0/1, but a log copied from an old cluster may
hold them. Byte layout of one message (big-endian)::

    offset int64 | size int32 | crc uint32 (CRC-32 of [magic, end)) | magic int8
    | attributes int8 (bits 0-2 codec; v1 bit 3 LogAppendTime) | timestamp int64 (v1)
    | keyLen int32 (-1 null) key | valueLen int32 (-1 null) value

A compressed wrapper has a null key and, as value, a compressed inner message set:
v0 inner offsets are absolute; v1 inner offsets are relative and the wrapper's offset
is the absolute offset of the LAST inner message. A LogAppendTime wrapper gives its
timestamp to every inner message. Magic-0 messages have no timestamp: null, type -1.

numba kernels walk the top-level messages (sizes and magics by
``record_format_kernels.batch_extent``, the header rules every walk shares; CRCs) and parse each
message set, bounds-checking every field, so corrupt input raises CorruptRecordError
and never reads out of bounds; Python only decompresses, once per wrapper.

Thread-safe: pure functions; the kernel releases the GIL.
"""

from __future__ import annotations

import logging
import struct

import numpy as np
import pyarrow as pa
from numba import njit

from ..errors import CorruptRecordError
from .compression import decompress
from .record_format import (
    INT32_MAX,
    INT64_MAX,
    LEGACY_ATTRIBUTES_OFFSET,
    LEGACY_CRC_OFFSET,
    LEGACY_CRC_START,
    LEGACY_KEY_LENGTH_OFFSET_V0,
    LEGACY_KEY_LENGTH_OFFSET_V1,
    LEGACY_MIN_MESSAGE,
    LEGACY_TIMESTAMP_OFFSET,
    MAGIC_V0,
    MAGIC_V1,
    MAGIC_V2,
    OK,
    PARTIAL,
    REASON_MAGIC,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    Bytes,
    read_batch_header,
)
from .record_format_kernels import (
    append_binary,
    batch_extent,
    be32,
    be64,
    beu32,
    readonly_bytes,
)

logger = logging.getLogger(__name__)

_MIN_MESSAGE = LEGACY_MIN_MESSAGE  # a v0 message with null key and value
_WRAPPER_VALUE = struct.Struct(">i")

# Error codes of _parse_message_set.
_OK, _ERR_TRUNCATED, _ERR_MAGIC, _ERR_SIZE, _ERR_LENGTH, _ERR_NESTED, _ERR_CRC = range(7)
_ERRORS = {
    _ERR_TRUNCATED: "truncated message",
    _ERR_MAGIC: "unknown magic",
    _ERR_SIZE: "message size does not match its key and value",
    _ERR_LENGTH: "invalid key or value length",
    _ERR_NESTED: "inner message is itself compressed (double compression)",
    _ERR_CRC: "inner message CRC mismatch",
}
# Slots of the `state` array carried across kernel calls.
_ST_N, _ST_KEY_BYTES, _ST_VALUE_BYTES, _ST_KEY_NULLS, _ST_VALUE_NULLS, _ST_TS_NULLS, \
    _ST_ERR_POS = range(7)


def _crc32_table() -> np.ndarray:
    table = np.zeros(256, np.uint32)
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0xEDB88320 if c & 1 else c >> 1
        table[i] = c
    table.flags.writeable = False
    return table


_CRC32_TABLE = _crc32_table()


@njit(cache=True)
def _crc32(table, buf, start, end):
    c = np.uint32(0xFFFFFFFF)
    for i in range(start, end):
        c = table[(c ^ np.uint32(buf[i])) & np.uint32(0xFF)] ^ (c >> np.uint32(8))
    return c ^ np.uint32(0xFFFFFFFF)


@njit(cache=True)
def _crc_ok(table, src, pos, msg_end):
    """Whether the message at ``pos`` holds the CRC-32 of its bytes from the magic on."""
    crc = np.uint32(beu32(src, pos + LEGACY_CRC_OFFSET))
    return _crc32(table, src, pos + LEGACY_CRC_START, msg_end) == crc


@njit(cache=True, nogil=True, inline="always")
def _length_prefixed(src, p, msg_end):
    """The key or value at ``p`` of a message ending at ``msg_end``: int32 length (-1
    null), then its bytes. Returns (length, where its bytes start, the position after
    them, ``_OK`` or an error code)."""
    if p + 4 > msg_end:
        return np.int64(0), p, p, _ERR_TRUNCATED
    n = be32(src, p)
    p += 4
    if n < -1:
        return n, p, p, _ERR_LENGTH
    return n, p, p + max(n, 0), _OK


@njit(cache=True, nogil=True)
def _walk_top_level(src, pos, verify_crc, crc_table, wrappers):
    """Walk top-level legacy messages from ``pos``: check sizes and magics (and CRCs
    when ``verify_crc``), note compressed wrappers' positions in ``wrappers``. Stops at
    the end, at a partial message, or at a batch of magic 2. Returns (error code,
    stop position, wrapper count, position of the error)."""
    end = src.shape[0]
    nw = 0
    while True:
        code, magic, size, _, _, records = batch_extent(src, pos, end, INT64_MAX)
        # A v2 batch ends the legacy run whatever it holds, as does a partial tail.
        if magic == MAGIC_V2 or code == PARTIAL:
            return _OK, pos, nw, pos
        if code != OK:
            return _ERR_MAGIC if code == REASON_MAGIC else _ERR_TRUNCATED, pos, nw, pos
        msg_end = pos + size
        if verify_crc and not _crc_ok(crc_table, src, pos, msg_end):
            return _ERR_CRC, pos, nw, pos
        if records < 0:  # a compressed wrapper
            wrappers[nw] = pos
            nw += 1
        pos = msg_end


@njit(cache=True, nogil=True)
def _parse_message_set(src, start, end, inner, wrapper_offset, wrapper_magic, wrapper_ts,
                       log_append, start_offset, end_offset, verify_crc, crc_table, scratch,
                       offsets, timestamps, ts_valid, ts_types, key_offs, key_data, key_valid,
                       val_offs, val_data, val_valid, state):
    """Parse the messages in ``src[start:end]`` and append those with
    ``start_offset <= offset < end_offset`` at ``state[_ST_N]``.

    ``inner``: the region is the decompressed value of a wrapper (offsets relative to
    its last one for a v1 wrapper, timestamps from a LogAppendTime wrapper, no nested
    compression, CRCs checked when ``verify_crc``); otherwise it is a run of
    uncompressed top-level messages (CRCs already checked by the caller).
    ``scratch`` (int64, rows >= messages) holds fields between the parse and the copy.
    Returns an error code; ``state[_ST_ERR_POS]`` is then the message position.
    """
    m = 0
    pos = start
    while pos < end:
        state[_ST_ERR_POS] = pos
        # The region is whole: a message that does not fit in it is truncated.
        code, magic, size, offset, _, records = batch_extent(src, pos, end, INT64_MAX)
        if magic > MAGIC_V1:
            return _ERR_MAGIC
        if code != OK:
            return _ERR_TRUNCATED
        msg_end = pos + size
        if inner and records < 0:
            return _ERR_NESTED
        if inner and verify_crc and not _crc_ok(crc_table, src, pos, msg_end):
            return _ERR_CRC
        klen, kpos, p, err = _length_prefixed(src, pos + (
            LEGACY_KEY_LENGTH_OFFSET_V0 if magic == MAGIC_V0 else LEGACY_KEY_LENGTH_OFFSET_V1),
            msg_end)
        if err != _OK:
            return err
        vlen, vpos, p, err = _length_prefixed(src, p, msg_end)
        if err != _OK:
            return err
        if p != msg_end:
            return _ERR_SIZE
        scratch[m, 0] = offset
        scratch[m, 1] = magic
        scratch[m, 2] = be64(src, pos + LEGACY_TIMESTAMP_OFFSET) if magic == MAGIC_V1 else 0
        scratch[m, 3] = src[pos + LEGACY_ATTRIBUTES_OFFSET]
        scratch[m, 4] = kpos
        scratch[m, 5] = klen
        scratch[m, 6] = vpos
        scratch[m, 7] = vlen
        m += 1
        pos = msg_end

    shift = 0
    if inner and wrapper_magic > 0 and m > 0:
        shift = wrapper_offset - scratch[m - 1, 0]
    n = state[_ST_N]
    kp = state[_ST_KEY_BYTES]
    vp = state[_ST_VALUE_BYTES]
    for i in range(m):
        offset = scratch[i, 0] + shift
        if offset < start_offset or offset >= end_offset:
            continue
        magic = scratch[i, 1]
        offsets[n] = offset
        if magic == 0 or (inner and wrapper_magic == 0):
            timestamps[n] = 0
            ts_valid[n] = 0
            ts_types[n] = -1
            state[_ST_TS_NULLS] += 1
        elif inner:
            ts_valid[n] = 1
            timestamps[n] = wrapper_ts if log_append else scratch[i, 2]
            ts_types[n] = 1 if log_append else 0
        else:
            ts_valid[n] = 1
            timestamps[n] = scratch[i, 2]
            ts_types[n] = 1 if scratch[i, 3] & TIMESTAMP_TYPE_MASK else 0
        kp = append_binary(key_data, key_offs, key_valid, n, kp, src, scratch[i, 4],
                           scratch[i, 5])
        state[_ST_KEY_NULLS] += scratch[i, 5] < 0
        vp = append_binary(val_data, val_offs, val_valid, n, vp, src, scratch[i, 6],
                           scratch[i, 7])
        state[_ST_VALUE_NULLS] += scratch[i, 7] < 0
        n += 1
    state[_ST_N] = n
    state[_ST_KEY_BYTES] = kp
    state[_ST_VALUE_BYTES] = vp
    return _OK


def _column(typ: pa.DataType, n: int, valid: np.ndarray, nulls: int,
            buffers: list[np.ndarray]) -> pa.Array:
    bitmap = pa.py_buffer(np.packbits(valid[:n], bitorder="little")) if nulls else None
    return pa.Array.from_buffers(typ, n, [bitmap, *(pa.py_buffer(b) for b in buffers)],
                                 null_count=nulls)


def decode_legacy(buf: Bytes, position: int, *, start_offset: int = 0,
                  end_offset: int = INT64_MAX, verify_crc: bool = True
                  ) -> tuple[list[pa.Array], int]:
    """Decode the legacy messages starting at ``position`` in ``buf`` up to the first
    batch of magic 2, a partial tail, or the end (records with ``start_offset <= offset
    < end_offset``). Returns the columns ``key``, ``value``, ``offset``, ``timestamp``,
    ``timestampType`` of ``record_codec.RECORD_SCHEMA`` (legacy messages have no
    headers: the codec adds that column) and the position where the legacy messages
    end. CRCs of messages, and of the inner messages of compressed wrappers, are
    checked when ``verify_crc``."""
    main = readonly_bytes(buf)
    wrappers = np.empty((len(main) - position) // _MIN_MESSAGE + 1, np.int64)
    err, stop, n_wrappers, err_pos = _walk_top_level(main, position, verify_crc,
                                                     _CRC32_TABLE, wrappers)
    if err != _OK:
        raise CorruptRecordError(f"message at position {err_pos}: {_ERRORS[err]}")
    # Regions to parse: runs of uncompressed messages straight from `buf`, and the
    # decompressed value of each compressed wrapper (skipped when wholly below
    # start_offset: a wrapper's offset is its last inner offset).
    # (src, start, end, header of the wrapper or None)
    regions: list[tuple[np.ndarray, int, int, BatchHeader | None]] = []
    run_start = position
    for wpos in wrappers[:n_wrappers].tolist():
        if wpos > run_start:
            regions.append((main, run_start, wpos, None))
        wrapper = read_batch_header(buf, wpos)
        if wrapper is None:  # the walk lists only whole wrappers: the kernel disagrees
            raise CorruptRecordError(f"message at position {wpos} is cut short")
        run_start = wrapper.end_position
        if wrapper.last_offset < start_offset:
            continue
        value = _decompress_wrapper(buf, wrapper)
        regions.append((readonly_bytes(value), 0, len(value), wrapper))
    if stop > run_start:
        regions.append((main, run_start, stop, None))

    total = sum(end - start for _, start, end, _ in regions)
    if total > INT32_MAX:
        raise ValueError(f"cannot decode {total} bytes of legacy messages at once (Arrow "
                         "binary columns hold at most 2 GiB): decode in smaller chunks")
    capacity = total // _MIN_MESSAGE + 1
    offsets = np.empty(capacity, np.int64)
    timestamps = np.empty(capacity, np.int64)
    ts_valid = np.empty(capacity, np.uint8)
    ts_types = np.empty(capacity, np.int32)
    key_offs = np.zeros(capacity + 1, np.int32)
    val_offs = np.zeros(capacity + 1, np.int32)
    key_data = np.empty(total, np.uint8)
    val_data = np.empty(total, np.uint8)
    key_valid = np.empty(capacity, np.uint8)
    val_valid = np.empty(capacity, np.uint8)
    scratch = np.empty((capacity, 8), np.int64)
    state = np.zeros(7, np.int64)
    for src, start, end, wrapper in regions:
        inner = wrapper is not None
        if wrapper is not None:
            magic = wrapper.magic
            wrapper_ts = wrapper.max_timestamp if magic == 1 else -1
            log_append = wrapper.is_log_append_time
            wrapper_offset = wrapper.last_offset
        else:
            magic, wrapper_ts, log_append, wrapper_offset = 0, -1, False, 0
        err = _parse_message_set(src, start, end, inner, wrapper_offset, magic, wrapper_ts,
                                 log_append, start_offset, end_offset, verify_crc,
                                 _CRC32_TABLE, scratch, offsets, timestamps, ts_valid,
                                 ts_types, key_offs, key_data, key_valid, val_offs,
                                 val_data, val_valid, state)
        if err != _OK:
            pos = int(state[_ST_ERR_POS])
            where = (f"message set at position {wrapper.position} (offset "
                     f"{wrapper.last_offset}, magic {magic}) after decompression: inner "
                     f"message at byte {pos - start}" if wrapper is not None
                     else f"message at position {pos}")
            raise CorruptRecordError(f"{where}: {_ERRORS[err]}")

    n, key_bytes, val_bytes, key_nulls, val_nulls, ts_nulls, _ = state.tolist()
    columns = [
        _column(pa.binary(), n, key_valid, key_nulls, [key_offs[:n + 1], key_data[:key_bytes]]),
        _column(pa.binary(), n, val_valid, val_nulls, [val_offs[:n + 1], val_data[:val_bytes]]),
        pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(offsets[:n])]),
        _column(pa.int64(), n, ts_valid, ts_nulls, [timestamps[:n]]),
        pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(ts_types[:n])]),
    ]
    return columns, stop


def _decompress_wrapper(buf: Bytes, h: BatchHeader) -> bytes:
    """The inner message set of the compressed wrapper ``h``."""
    where = f"message set at position {h.position} (offset {h.last_offset}, magic {h.magic})"
    p = h.position + (LEGACY_KEY_LENGTH_OFFSET_V0 if h.magic == MAGIC_V0
                      else LEGACY_KEY_LENGTH_OFFSET_V1)
    end = h.end_position
    (klen,) = _WRAPPER_VALUE.unpack_from(buf, p)
    p += 4 + max(klen, 0)
    if klen < -1 or p + 4 > end:
        raise CorruptRecordError(f"{where}: invalid key length {klen}")
    (vlen,) = _WRAPPER_VALUE.unpack_from(buf, p)
    p += 4
    if vlen < 0:
        raise CorruptRecordError(f"{where}: compressed wrapper has a null value")
    if p + vlen != end:
        raise CorruptRecordError(f"{where}: value length {vlen} does not match the size")
    try:
        return decompress(h.compression, memoryview(buf)[p:end], magic=h.magic)
    except CorruptRecordError as exc:
        raise CorruptRecordError(f"{where}: {exc}") from exc
