"""Legacy message sets (magic 0 and 1) → the same Arrow columns as RecordBatch v2.

Read only: seglog never writes magic 0/1, but a log copied from an old cluster may
hold them. Byte layout of one message (big-endian)::

    offset int64 | size int32 | crc uint32 (CRC-32 of [magic, end)) | magic int8
    | attributes int8 (bits 0-2 codec; v1 bit 3 LogAppendTime) | timestamp int64 (v1)
    | keyLen int32 (-1 null) key | valueLen int32 (-1 null) value

A compressed wrapper has a null key and, as value, a compressed inner message set:
v0 inner offsets are absolute; v1 inner offsets are relative and the wrapper's offset
is the absolute offset of the LAST inner message. A LogAppendTime wrapper gives its
timestamp to every inner message.

Legacy data is rare and bounded (what an old producer wrote), so this module parses
message by message in Python; the hot v2 path is in ``codec_kernels``.

Thread-safe: pure functions.
"""

from __future__ import annotations

import logging
import struct
import zlib
from collections.abc import Sequence

import pyarrow as pa

from .batch_header import COMPRESSION_MASK, LOG_OVERHEAD, MAGIC_OFFSET, BatchHeader
from .compression import decompress
from .errors import CorruptRecordError

logger = logging.getLogger(__name__)

_HEAD_V0 = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_HEAD_V1 = struct.Struct(">qiIbbq")  # ... + timestamp
_INT32 = struct.Struct(">i")
_KEY_OFFSET = {0: _HEAD_V0.size, 1: _HEAD_V1.size}  # 18, 26
_TIMESTAMP_TYPE_BIT = 0x08


class _Columns:
    """Column builders for the decoded records."""

    def __init__(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.timestamps: list[int | None] = []
        self.ts_types: list[int] = []

    def add(self, offset: int, timestamp: int | None, ts_type: int,
            key: bytes | None, value: bytes | None) -> None:
        self.offsets.append(offset)
        self.timestamps.append(timestamp)
        self.ts_types.append(ts_type)
        self.keys.append(key)
        self.values.append(value)


def _read_message(buf, pos: int, end: int, where: str):
    """Parse the message at ``pos``; returns (offset, magic, attrs, timestamp, key,
    value, next position)."""
    if end - pos < LOG_OVERHEAD + 2:
        raise CorruptRecordError(f"{where}: truncated message at byte {pos}")
    offset, size = struct.unpack_from(">qi", buf, pos)
    msg_end = pos + LOG_OVERHEAD + size
    magic = buf[pos + MAGIC_OFFSET]
    if magic not in (0, 1):
        raise CorruptRecordError(f"{where}: message at byte {pos} has magic {magic}")
    key_pos = pos + _KEY_OFFSET[magic]
    if size < 0 or msg_end > end or key_pos + 4 > msg_end:
        raise CorruptRecordError(f"{where}: message at byte {pos} has invalid size {size}")
    if magic == 0:
        _o, _s, _crc, _m, attrs = _HEAD_V0.unpack_from(buf, pos)
        timestamp = None
    else:
        _o, _s, _crc, _m, attrs, timestamp = _HEAD_V1.unpack_from(buf, pos)
    p = key_pos
    (klen,) = _INT32.unpack_from(buf, p)
    p += 4
    key = None
    if klen >= 0:
        if p + klen + 4 > msg_end:
            raise CorruptRecordError(f"{where}: key of message at byte {pos} overruns it")
        key = bytes(buf[p:p + klen])
        p += klen
    elif klen != -1:
        raise CorruptRecordError(f"{where}: message at byte {pos} has key length {klen}")
    if p + 4 > msg_end:
        raise CorruptRecordError(f"{where}: message at byte {pos} is truncated")
    (vlen,) = _INT32.unpack_from(buf, p)
    p += 4
    value = None
    if vlen >= 0:
        if p + vlen > msg_end:
            raise CorruptRecordError(f"{where}: value of message at byte {pos} overruns it")
        value = bytes(buf[p:p + vlen])
        p += vlen
    elif vlen != -1:
        raise CorruptRecordError(f"{where}: message at byte {pos} has value length {vlen}")
    if p != msg_end:
        raise CorruptRecordError(
            f"{where}: message at byte {pos} has {msg_end - p} bytes after its value")
    return offset, magic, attrs & 0xFF, timestamp, key, value, msg_end


def _add_wrapper(cols: _Columns, buf, header: BatchHeader, start_offset: int,
                 end_offset: int, verify_crc: bool) -> None:
    where = (f"message set at position {header.position} (offset {header.last_offset}, "
             f"magic {header.magic})")
    offset, magic, attrs, timestamp, key, value, _ = _read_message(
        buf, header.position, header.end_position, where)
    codec = attrs & COMPRESSION_MASK
    log_append = magic == 1 and bool(attrs & _TIMESTAMP_TYPE_BIT)
    if codec == 0:
        if start_offset <= offset < end_offset:
            ts_type = -1 if magic == 0 else (1 if log_append else 0)
            cols.add(offset, timestamp, ts_type, key, value)
        return
    if value is None:
        raise CorruptRecordError(f"{where}: compressed wrapper has a null value")
    inner = decompress(codec, value, magic=magic)
    where += " after decompression"
    messages = []
    pos = 0
    while pos < len(inner):
        msg = _read_message(inner, pos, len(inner), where)
        if msg[2] & COMPRESSION_MASK:
            raise CorruptRecordError(f"{where}: inner message at byte {pos} is itself "
                                     "compressed (double compression)")
        if verify_crc:
            (crc,) = struct.unpack_from(">I", inner, pos + LOG_OVERHEAD)
            actual = zlib.crc32(memoryview(inner)[pos + MAGIC_OFFSET:msg[6]])
            if actual != crc:
                raise CorruptRecordError(
                    f"{where}: inner message at byte {pos} has CRC {actual:#010x}, "
                    f"header says {crc:#010x}")
        messages.append(msg)
        pos = msg[6]
    if not messages:
        return
    # v1 inner offsets are relative to the first, and the wrapper holds the last one.
    shift = offset - messages[-1][0] if magic > 0 else 0
    for inner_offset, inner_magic, _attrs, inner_ts, k, v, _ in messages:
        absolute = inner_offset + shift
        if not start_offset <= absolute < end_offset:
            continue
        if magic == 0 or inner_magic == 0:
            cols.add(absolute, None, -1, k, v)
        elif log_append:
            cols.add(absolute, timestamp, 1, k, v)
        else:
            cols.add(absolute, inner_ts, 0, k, v)


def decode_message_sets(buf, headers: Sequence[BatchHeader], *, start_offset: int = 0,
                        end_offset: int = 2**63 - 1, include_headers: bool = True,
                        verify_crc: bool = True) -> pa.RecordBatch:
    """Decode the legacy messages whose shallow headers are ``headers`` (already
    CRC-checked by the caller) into ``record_codec.RECORD_SCHEMA`` columns. Inner
    messages of compressed wrappers are CRC-checked here when ``verify_crc``."""
    from .record_codec import record_schema  # the schema lives with the codec

    cols = _Columns()
    for header in headers:
        _add_wrapper(cols, buf, header, start_offset, end_offset, verify_crc)
    arrays = [
        pa.array(cols.keys, pa.binary()),
        pa.array(cols.values, pa.binary()),
        pa.array(cols.offsets, pa.int64()),
        pa.array(cols.timestamps, pa.int64()),
        pa.array(cols.ts_types, pa.int32()),
    ]
    schema = record_schema(include_headers)
    if include_headers:
        arrays.append(pa.nulls(len(cols.offsets), schema.field("headers").type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
