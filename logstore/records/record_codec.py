"""Arrow ⇄ Kafka record batches: the public surface of seglog's codec.

``encode_batches`` turns Arrow columns (values, keys, timestamps, headers) into
consecutive RecordBatch v2 batches laid out exactly as Kafka's producer lays them out;
``decode_batches`` turns a buffer of batches of any magic (0, 1, 2) back into one Arrow
``RecordBatch`` with ``RECORD_SCHEMA``. The per-record work runs in numba kernels
(``codec_kernels``); Python here only walks batch headers, compresses, and checks CRCs.

Example::

    >>> import pyarrow as pa
    >>> buf = encode_batches(pa.array([b"v1", None]), keys=pa.array([b"k", None]),
    ...                      timestamps=pa.array([1000, 1001]), base_offset=5)
    >>> decode_batches(buf).column("offset").to_pylist()
    [5, 6]

Thread-safe: functions are pure (no shared state besides numba's compiled kernels).

Over 500 lines: the codec's public surface, encode and decode side by side, because
their column conventions (the schema, nulls, the header layout, timestamp types) must
stay the mirror of each other; the per-record loops already live in ``codec_kernels``.
"""

from __future__ import annotations

import enum
import logging
import struct
import time
from itertools import pairwise
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import CorruptRecordError, InvalidRecordError
from ..util.pooled_arrays import pooled_empty
from . import codec_kernels as _k
from . import legacy_records
from .compression import compress, decompress
from .kernel_cache import first_call
from .record_format import (
    ATTRIBUTES_OFFSET,
    BASE_SEQUENCE_OFFSET,
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    COMPRESSION_MASK,
    CONTROL_ABORT,
    CONTROL_COMMIT,
    CONTROL_KEY,
    CONTROL_MASK,
    END_TXN_MARKER_VALUE,
    INT32_MAX,
    INT64_MAX,
    MIN_RECORD_SIZE,
    NO_TIMESTAMP,
    TIMESTAMP_RULE,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    V2_HEADER_SIZE,
    BatchHeader,
    read_batch_header,
    restamp_crc,
    set_length,
)
from .record_format import verify_crc as _verify_batch_crc
from .record_format_kernels import readonly, readonly_bytes

logger = logging.getLogger(__name__)

__all__ = [
    "CompressionType",
    "ControlType",
    "HEADERS_TYPE",
    "RECORD_SCHEMA",
    "TimestampType",
    "decode_batches",
    "encode_batches",
    "encode_control_batch",
    "record_schema",
]

MAX_OFFSET = INT64_MAX
_GROUP_BYTES = 1 << 20  # records decoded per kernel call: about what stays in cache
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


class CompressionType(enum.IntEnum):
    """Kafka's codec ids (bits 0-2 of a batch's attributes)."""

    NONE = CODEC_NONE
    GZIP = CODEC_GZIP
    SNAPPY = CODEC_SNAPPY
    LZ4 = CODEC_LZ4
    ZSTD = CODEC_ZSTD

    @classmethod
    def from_name(cls, name: str | int | CompressionType) -> CompressionType:
        """Parse Kafka's ``compression.type`` names (``none``/``uncompressed``, ``gzip``,
        ``snappy``, ``lz4``, ``zstd``; any case). Ids and members pass through."""
        if isinstance(name, int):
            return cls(name)
        key = str(name).strip().lower()
        if key in ("none", "uncompressed", ""):
            return cls.NONE
        try:
            return cls[key.upper()]
        except KeyError:
            raise ValueError(
                f"unknown compression type {name!r}; expected one of "
                "none, uncompressed, gzip, snappy, lz4, zstd") from None


class TimestampType(enum.IntEnum):
    """Kafka's timestamp types; ``NO_TIMESTAMP`` is what magic-0 records have."""

    NO_TIMESTAMP = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class ControlType(enum.IntEnum):
    """Types of control records (the key's second int16)."""

    ABORT = CONTROL_ABORT
    COMMIT = CONTROL_COMMIT


HEADERS_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()),
                                   pa.field("value", pa.binary())]))


def record_schema(include_headers: bool = True) -> pa.Schema:
    """The schema of ``decode_batches``' result (every field nullable)."""
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.int64()),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADERS_TYPE))
    return pa.schema(fields)


RECORD_SCHEMA = record_schema(True)
_SCHEMA_NO_HEADERS = record_schema(False)

_EMPTY_U8 = np.zeros(0, np.uint8)


# --------------------------------------------------------------------------- encode

def _to_array(col: Any, name: str) -> pa.Array:
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if not isinstance(col, pa.Array):
        try:
            col = pa.array(col)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as exc:
            raise TypeError(f"{name}: cannot convert to an Arrow array: {exc}") from exc
    return col


def _binary_parts(col: Any, name: str, n: int | None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(int64 offsets with n+1 entries, uint8 data, uint8 validity) of a binary-like
    column, without copying the data; slices and chunked arrays are handled."""
    arr = _to_array(col, name)
    if n is not None and len(arr) != n:
        raise ValueError(f"{name} has {len(arr)} entries, values has {n}")
    t = arr.type
    if pa.types.is_null(t):
        m = len(arr)
        return (np.zeros(m + 1, np.int64), _EMPTY_U8, np.zeros(m, np.uint8))
    if not (pa.types.is_binary(t) or pa.types.is_string(t)
            or pa.types.is_large_binary(t) or pa.types.is_large_string(t)):
        if (pa.types.is_binary_view(t) or pa.types.is_string_view(t)
                or pa.types.is_fixed_size_binary(t)):
            arr = arr.cast(pa.large_binary())
            t = arr.type
        else:
            raise TypeError(f"{name} must be Arrow binary, large_binary or string, not {t}")
    m = len(arr)
    bufs = arr.buffers()
    off_dtype = np.int64 if (pa.types.is_large_binary(t) or pa.types.is_large_string(t)) \
        else np.int32
    if bufs[1] is None:  # an empty array may carry no offsets buffer at all
        offs = np.zeros(m + 1, np.int64)
    else:
        offs = np.frombuffer(bufs[1], dtype=off_dtype)[arr.offset:arr.offset + m + 1].astype(
            np.int64)
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None and bufs[2].size \
        else _EMPTY_U8
    if arr.null_count == 0:
        valid = np.ones(m, np.uint8)
    else:
        valid = pc.is_valid(arr).to_numpy(zero_copy_only=False).astype(np.uint8)
    return offs, data, valid


def _timestamps(timestamps: Any, n: int, now_ms: int) -> np.ndarray:
    if timestamps is None:
        return np.full(n, now_ms, np.int64)
    arr = _to_array(timestamps, "timestamps")
    if len(arr) != n:
        raise ValueError(f"timestamps has {len(arr)} entries, values has {n}")
    if pa.types.is_timestamp(arr.type):
        # sub-millisecond precision is dropped, as Kafka timestamps are milliseconds
        arr = pc.cast(arr, pa.timestamp("ms", arr.type.tz), safe=False).cast(pa.int64())
    elif not pa.types.is_int64(arr.type):
        if not pa.types.is_integer(arr.type) and not pa.types.is_null(arr.type):
            raise TypeError(f"timestamps must be int64 milliseconds, not {arr.type}")
        arr = arr.cast(pa.int64())
    if arr.null_count:
        arr = arr.fill_null(now_ms)
    out: np.ndarray = arr.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    bad = np.flatnonzero(out < NO_TIMESTAMP)
    if len(bad):
        i = int(bad[0])
        raise ValueError(f"timestamps[{i}] is {int(out[i])}: {TIMESTAMP_RULE}")
    return out


def _header_parts(headers: Any, n: int) -> tuple[np.ndarray, ...]:
    if headers is None:
        return (np.zeros(n + 1, np.int64), np.zeros(n, np.uint8),
                np.zeros(1, np.int64), _EMPTY_U8, np.zeros(1, np.int64), _EMPTY_U8,
                _EMPTY_U8)
    if isinstance(headers, pa.ChunkedArray):
        headers = headers.combine_chunks() if headers.num_chunks != 1 else headers.chunk(0)
    if not isinstance(headers, pa.Array):
        try:
            headers = pa.array(headers, type=HEADERS_TYPE)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as exc:
            raise TypeError(f"headers: cannot convert to {HEADERS_TYPE}: {exc}") from exc
    if len(headers) != n:
        raise ValueError(f"headers has {len(headers)} entries, values has {n}")
    if pa.types.is_large_list(headers.type):
        headers = headers.cast(pa.list_(headers.type.value_type))
    t = headers.type
    if not (pa.types.is_list(t) and pa.types.is_struct(t.value_type)
            and t.value_type.get_field_index("key") >= 0
            and t.value_type.get_field_index("value") >= 0):
        raise TypeError(f"headers must be {HEADERS_TYPE}, not {t}")
    list_offs = np.frombuffer(headers.buffers()[1], np.int32)[
        headers.offset:headers.offset + n + 1].astype(np.int64)
    if headers.null_count == 0:
        list_valid = np.ones(n, np.uint8)
    else:
        list_valid = pc.is_valid(headers).to_numpy(zero_copy_only=False).astype(np.uint8)
    entries = headers.values
    if entries.null_count:
        raise InvalidRecordError("headers: a header entry is null (only values may be)")
    hkeys = entries.field("key")
    if hkeys.null_count:
        raise InvalidRecordError("headers: a header key is null; Kafka header keys are "
                                 "non-null strings")
    hk_offs, hk_data, _ = _binary_parts(hkeys, "header keys", None)
    hv_offs, hv_data, hv_valid = _binary_parts(entries.field("value"), "header values", None)
    return list_offs, list_valid, hk_offs, hk_data, hv_offs, hv_data, hv_valid


def encode_batches(values: Any, keys: Any = None, timestamps: Any = None,
                   headers: Any = None, *,
                   compression: CompressionType | int | str = CompressionType.NONE,
                   timestamp_type: TimestampType | int = TimestampType.CREATE_TIME,
                   base_offset: int = 0, now_ms: int | None = None,
                   max_batch_bytes: int = 1 << 20,
                   producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                   partition_leader_epoch: int = -1, is_transactional: bool = False,
                   is_control: bool = False, same_base_sequence: bool = False) -> bytearray:
    """Encode records into consecutive RecordBatch v2 batches (a Kafka MemoryRecords).

    ``values``/``keys``: Arrow binary, large_binary or string (nulls allowed); ``keys``
    None means every key is null. ``timestamps``: int64 ms (nulls, or None, mean
    ``now_ms``, itself defaulting to the wall clock as a producer's would).
    ``headers``: ``list<struct<key: string, value: binary>>`` (null list = no headers).

    Batches follow Kafka's producer: baseTimestamp is the first record's timestamp
    (later deltas may be negative), maxTimestamp the largest, offsets are consecutive
    from ``base_offset``. A batch is closed when the next record would make its
    uncompressed size (61-byte header + records) exceed ``max_batch_bytes``; every
    batch holds at least one record. Each batch's records section is then compressed
    on its own. With ``LOG_APPEND_TIME`` the timestamp-type bit is set and maxTimestamp
    is ``now_ms`` (what a broker stamps). Zero records encode to an empty buffer.
    Returns a bytearray (bytes-like; the kernel writes into it, so no final copy).

    A producer's batches number their records from ``base_sequence`` on (each batch's
    baseSequence is that of its first record); with ``same_base_sequence`` every batch
    carries ``base_sequence`` itself (the Spark sink's micro-batch id, which must read
    the same in every batch of the micro-batch).
    """
    codec = CompressionType.from_name(compression)
    ts_type = TimestampType(timestamp_type)
    if ts_type == TimestampType.NO_TIMESTAMP:
        raise ValueError("timestamp_type NO_TIMESTAMP exists only in magic 0; "
                         "use CREATE_TIME or LOG_APPEND_TIME")
    if max_batch_bytes <= 0:
        raise ValueError(f"max_batch_bytes must be positive, got {max_batch_bytes}")
    if now_ms is None:
        now_ms = int(time.time() * 1000)

    val_offs, val_data, val_valid = _binary_parts(values, "values", None)
    n = len(val_valid)
    if n == 0:
        return bytearray()
    if keys is None:
        key_offs, key_data, key_valid = np.zeros(n + 1, np.int64), _EMPTY_U8, \
            np.zeros(n, np.uint8)
    else:
        key_offs, key_data, key_valid = _binary_parts(keys, "keys", n)
    ts = _timestamps(timestamps, n, now_ms)
    hdr_offs, hdr_valid, hk_offs, hk_data, hv_offs, hv_data, hv_valid = \
        _header_parts(headers, n)

    attributes = 0
    if ts_type == TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_MASK
    if is_control:
        attributes |= CONTROL_MASK
    log_append_time = now_ms if ts_type == TimestampType.LOG_APPEND_TIME else -1

    r = readonly
    key_offs, key_valid, val_offs, val_valid, ts, hdr_offs, hdr_valid, hk_offs, hv_offs, \
        hv_valid = (r(a) for a in (key_offs, key_valid, val_offs, val_valid, ts, hdr_offs,
                                   hdr_valid, hk_offs, hv_offs, hv_valid))
    body = np.empty(n, np.int64)
    batch_first = np.empty(n + 1, np.int64)
    batch_pos = np.empty(n + 1, np.int64)
    nb = first_call("codec_kernels.plan_v2", _k.plan_v2, key_offs, key_valid, val_offs,
                    val_valid, ts, hdr_offs, hdr_valid, hk_offs, hv_offs, hv_valid,
                    int(max_batch_bytes), body, batch_first, batch_pos)
    out = bytearray(int(batch_pos[nb]))
    first_call("codec_kernels.fill_v2", _k.fill_v2, np.frombuffer(out, np.uint8), nb, body,
               batch_first, batch_pos, key_offs, r(key_data), key_valid, val_offs,
               r(val_data), val_valid, ts, hdr_offs, hdr_valid, hk_offs, r(hk_data), hv_offs,
               r(hv_data), hv_valid,
               int(base_offset), int(partition_leader_epoch), int(attributes),
               int(producer_id), int(producer_epoch), int(base_sequence),
               int(log_append_time))

    positions = batch_pos[:nb + 1].tolist()
    if same_base_sequence and nb > 1:
        for start in positions[1:-1]:  # under the CRC, restamped below
            _INT32.pack_into(out, start + BASE_SEQUENCE_OFFSET, base_sequence)
    if codec == CompressionType.NONE:
        for start, end in pairwise(positions):
            restamp_crc(out, start, end)
        return out

    view = memoryview(out)
    parts = []
    for start, end in pairwise(positions):
        compressed = compress(codec, view[start + V2_HEADER_SIZE:end])
        batch = bytearray(V2_HEADER_SIZE + len(compressed))
        batch[:V2_HEADER_SIZE] = view[start:start + V2_HEADER_SIZE]
        batch[V2_HEADER_SIZE:] = compressed
        set_length(batch, 0, len(batch))
        _INT16.pack_into(batch, ATTRIBUTES_OFFSET, attributes | int(codec))
        restamp_crc(batch, 0, len(batch))
        parts.append(batch)
    return bytearray().join(parts)


def encode_control_batch(control_type: ControlType | int, *, producer_id: int,
                         producer_epoch: int, base_offset: int = 0,
                         timestamp_ms: int | None = None, coordinator_epoch: int = 0,
                         partition_leader_epoch: int = -1) -> bytearray:
    """One control batch holding a transaction marker (COMMIT or ABORT), as a
    transaction coordinator writes it: control and transactional bits set, key =
    version 0 + type, value = version 0 + coordinator epoch."""
    key = CONTROL_KEY.pack(0, int(control_type))
    value = END_TXN_MARKER_VALUE.pack(0, coordinator_epoch)
    ts = None if timestamp_ms is None else pa.array([timestamp_ms], pa.int64())
    return encode_batches(pa.array([value], pa.binary()), keys=pa.array([key], pa.binary()),
                          timestamps=ts, now_ms=timestamp_ms, base_offset=base_offset,
                          producer_id=producer_id, producer_epoch=producer_epoch,
                          partition_leader_epoch=partition_leader_epoch,
                          is_transactional=True, is_control=True)


# --------------------------------------------------------------------------- decode

def _buffer(a: np.ndarray) -> pa.Buffer:
    return pa.py_buffer(a)


def _binary_column(typ: pa.DataType, n: int, offs: np.ndarray, data: np.ndarray,
                   bitmap: np.ndarray, nulls: int) -> pa.Array:
    validity = _buffer(bitmap) if nulls else None
    return pa.Array.from_buffers(typ, n, [validity, _buffer(offs), _buffer(data)],
                                 null_count=int(nulls))


def _describe(header: BatchHeader) -> str:
    return (f"record batch at position {header.position} (offsets "
            f"{header.base_offset}..{header.last_offset}, magic {header.magic})")


def _decode_v2_run(main: np.ndarray, view: memoryview,
                   run: list[tuple[BatchHeader, np.ndarray | None]], start_offset: int,
                   end_offset: int, include_headers: bool, verify_crc: bool
                   ) -> pa.RecordBatch:
    """Decode consecutive v2 batches. ``run`` holds each batch's header and its
    decompressed records section (None when uncompressed: then its CRC is checked
    here, just before its records are parsed, while its bytes are in cache).

    Uncompressed batches are parsed straight from ``main`` a cache-sized group at a
    time; a compressed batch is parsed from its own decompressed buffer."""
    segs = np.empty((len(run), _k.SEG_COLUMNS), np.int64)
    for j, (h, data) in enumerate(run):
        start, end = (h.position + V2_HEADER_SIZE, h.end_position) if data is None \
            else (0, len(data))
        # A record takes at least 7 bytes; checking first keeps a corrupt count from
        # making us allocate gigabytes.
        if h.records_count > (end - start) // MIN_RECORD_SIZE:
            where = " (after decompression)" if data is not None else ""
            raise CorruptRecordError(
                f"{_describe(h)}: record count {h.records_count} does not fit in "
                f"{end - start} bytes of records{where}")
        segs[j] = (start, end, h.records_count, h.base_offset, h.base_timestamp,
                   h.max_timestamp, 1 if h.is_log_append_time else 0)
    capacity = int(segs[:, _k.SEG_COUNT].sum())
    sizes = (segs[:, _k.SEG_END] - segs[:, _k.SEG_START]).tolist()
    total = sum(sizes)
    if total > INT32_MAX:
        raise ValueError(f"cannot decode {total} bytes of records at once (Arrow binary "
                         "columns hold at most 2 GiB): decode in smaller chunks")
    # The columns handed on come from Arrow's pool: recycled without page faults when
    # the batch is dropped (``pooled_arrays``).
    offsets = pooled_empty(capacity, np.int64)
    timestamps = pooled_empty(capacity, np.int64)
    ts_types = pooled_empty(capacity, np.int32)
    key_offs = pooled_empty(capacity + 1, np.int32)
    val_offs = pooled_empty(capacity + 1, np.int32)
    key_offs[0] = 0
    val_offs[0] = 0
    # Worst-case sized; only the pages actually written are ever backed by memory.
    key_data = pooled_empty(total, np.uint8)
    val_data = pooled_empty(total, np.uint8)
    key_valid = pooled_empty(capacity, np.uint8)
    val_valid = pooled_empty(capacity, np.uint8)
    hdr_pos = np.empty(capacity if include_headers else 0, np.int64)
    hdr_cnt = np.empty(capacity if include_headers else 0, np.int64)
    state = np.zeros(_k.STATE_SIZE, np.int64)
    segs = readonly(segs)

    groups = []  # (source, first record, end record) for the headers pass
    j = 0
    while j < len(run):
        if run[j][1] is not None:
            src = run[j][1]
            g = j + 1
        else:  # about _GROUP_BYTES of uncompressed batches: CRCs, then their records
            src = main
            g = j
            group_bytes = 0
            while g < len(run) and run[g][1] is None and (
                    g == j or group_bytes + sizes[g] <= _GROUP_BYTES):
                group_bytes += sizes[g]
                if verify_crc:
                    _verify_batch_crc(view, run[g][0])
                g += 1
        first = int(state[_k.ST_N])
        err = first_call("codec_kernels.decode_v2", _k.decode_v2, src, segs[j:g],
                         int(start_offset), int(end_offset), bool(include_headers), offsets,
                         timestamps, ts_types, key_offs, key_data, key_valid, val_offs,
                         val_data, val_valid, hdr_pos, hdr_cnt, state)
        if err != _k.OK:
            header, data = run[j + int(state[_k.ST_ERR_SEG])]
            where = " (after decompression)" if data is not None else ""
            raise CorruptRecordError(
                f"{_describe(header)}: {_k.ERROR_NAMES[err]} at record "
                f"{int(state[_k.ST_ERR_RECORD])} of {header.records_count}{where}")
        groups.append((src, first, int(state[_k.ST_N])))
        j = g

    (n, key_bytes, val_bytes, key_nulls, val_nulls, n_headers, hk_bytes, hv_bytes,
     hv_nulls, hdr_nulls) = state[:_k.ST_ERR_SEG].tolist()
    nbits = (n + 7) // 8
    key_bitmap = np.packbits(key_valid[:n], bitorder="little") if key_nulls else _EMPTY_U8
    val_bitmap = np.packbits(val_valid[:n], bitorder="little") if val_nulls else _EMPTY_U8
    key_offs = key_offs[:n + 1]
    val_offs = val_offs[:n + 1]
    key_data = key_data[:key_bytes]
    val_data = val_data[:val_bytes]
    offsets = offsets[:n]
    timestamps = timestamps[:n]
    ts_types = ts_types[:n]
    columns = [
        _binary_column(pa.binary(), n, key_offs, key_data, key_bitmap, key_nulls),
        _binary_column(pa.binary(), n, val_offs, val_data, val_bitmap, val_nulls),
        pa.Array.from_buffers(pa.int64(), n, [None, _buffer(offsets)]),
        pa.Array.from_buffers(pa.int64(), n, [None, _buffer(timestamps)]),
        pa.Array.from_buffers(pa.int32(), n, [None, _buffer(ts_types)]),
    ]
    if include_headers and n_headers == 0:
        columns.append(pa.nulls(n, HEADERS_TYPE))
    elif include_headers:
        hdr_offs = np.empty(n + 1, np.int32)
        hdr_bitmap = np.zeros(nbits if hdr_nulls else 0, np.uint8)
        hk_offs = np.empty(n_headers + 1, np.int32)
        hk_data = np.empty(hk_bytes, np.uint8)
        hv_offs = np.empty(n_headers + 1, np.int32)
        hv_data = np.empty(hv_bytes, np.uint8)
        hv_bitmap = np.zeros((n_headers + 7) // 8 if hv_nulls else 0, np.uint8)
        hdr_offs[0] = hk_offs[0] = hv_offs[0] = 0
        hstate = np.zeros(3, np.int64)
        for src, first, last in groups:
            if last > first:
                _k.fill_v2_headers(src, first, last, hdr_pos, hdr_cnt, hdr_offs, hdr_bitmap,
                                   hk_offs, hk_data, hv_offs, hv_data, hv_bitmap, hstate)
        hkeys = pa.Array.from_buffers(pa.string(), n_headers,
                                      [None, _buffer(hk_offs), _buffer(hk_data)])
        if n_headers:
            try:
                hkeys.validate(full=True)
            except pa.ArrowInvalid as exc:
                raise CorruptRecordError(
                    f"a header key is not valid UTF-8 in the v2 batches from position "
                    f"{run[0][0].position} to {run[-1][0].end_position}: {exc}") from exc
        hvals = _binary_column(pa.binary(), n_headers, hv_offs, hv_data, hv_bitmap, hv_nulls)
        entries = pa.StructArray.from_arrays([hkeys, hvals],
                                             fields=list(HEADERS_TYPE.value_type))
        validity = _buffer(hdr_bitmap) if hdr_nulls else None
        columns.append(pa.Array.from_buffers(HEADERS_TYPE, n, [validity, _buffer(hdr_offs)],
                                             null_count=int(hdr_nulls), children=[entries]))
    schema = RECORD_SCHEMA if include_headers else _SCHEMA_NO_HEADERS
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def decode_batches(buf: Any, *, start_offset: int = 0, end_offset: int = MAX_OFFSET,
                   include_headers: bool = True, verify_crc: bool = True) -> pa.RecordBatch:
    """Decode consecutive batches of any magic into one Arrow RecordBatch.

    ``buf``: bytes, bytearray, memoryview, mmap or numpy uint8 holding whole batches,
    possibly ending in a partial batch (ignored). Control batches are skipped; only
    records with ``start_offset <= offset < end_offset`` are returned. Schema
    ``RECORD_SCHEMA`` (or without ``headers``): a LogAppendTime batch gives every record
    its maxTimestamp and timestampType 1; magic-0 records have a null timestamp and
    timestampType -1; records without headers have a null ``headers`` list (as Spark's
    Kafka source gives). ``verify_crc`` checks each batch's CRC (hardware CRC-32C, one
    pass over the bytes). Raises CorruptRecordError naming the batch position and
    offsets.
    """
    view = memoryview(buf)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    main = readonly_bytes(view)
    pieces: list[pa.RecordBatch] = []
    run: list[tuple[BatchHeader, np.ndarray | None]] = []

    def flush() -> None:
        if run:
            pieces.append(_decode_v2_run(main, view, run, start_offset, end_offset,
                                         include_headers, verify_crc))
            run.clear()

    position = 0
    while (header := read_batch_header(view, position)) is not None:
        if header.magic != 2:
            # a legacy message set runs until the next v2 batch: decoded in one go
            flush()
            columns, stop = legacy_records.decode_legacy(
                view, position, start_offset=start_offset, end_offset=end_offset,
                verify_crc=verify_crc)
            if include_headers:
                columns.append(pa.nulls(len(columns[0]), HEADERS_TYPE))
            pieces.append(pa.RecordBatch.from_arrays(
                columns, schema=RECORD_SCHEMA if include_headers else _SCHEMA_NO_HEADERS))
            if stop <= position:  # cannot happen: the header above saw a whole message
                raise CorruptRecordError(f"message at position {position} cannot be read")
            position = stop
            continue
        position = header.end_position
        if header.last_offset < start_offset or header.base_offset >= end_offset:
            continue
        codec = header.attributes & COMPRESSION_MASK
        # an uncompressed batch's CRC is checked by _decode_v2_run, just in time
        if verify_crc and (codec or header.is_control):
            _verify_batch_crc(view, header)
        if header.is_control:
            continue
        data = None
        if codec:
            try:
                raw = decompress(codec, view[header.position + V2_HEADER_SIZE:
                                             header.end_position])
            except CorruptRecordError as exc:
                raise CorruptRecordError(f"{_describe(header)}: {exc}") from exc
            data = readonly_bytes(raw)
        run.append((header, data))
    flush()
    schema = RECORD_SCHEMA if include_headers else _SCHEMA_NO_HEADERS
    if not pieces:
        return pa.RecordBatch.from_pylist([], schema=schema)
    if len(pieces) == 1:
        return pieces[0]
    table = pa.Table.from_batches(pieces, schema=schema).combine_chunks()
    batches = table.to_batches()
    return batches[0]
