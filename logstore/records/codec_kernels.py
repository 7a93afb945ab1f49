"""numba kernels behind ``record_codec``: the per-record work of RecordBatch v2.

Four kernels, one signature each (callers normalise dtypes, and pass data they do
not own read-only, so numba compiles each kernel once and caches it on disk). Every
kernel works on arrays the caller allocated: numpy puts big arrays on huge pages,
numba's own allocator does not, and page faults then cost more than the work.

- ``plan_v2`` then ``fill_v2`` lay out records from Arrow-style offset/data buffers
  into consecutive v2 batches (headers written, CRC left at zero for the caller),
  splitting batches so that no batch exceeds ``max_batch_bytes`` uncompressed.
- ``decode_v2`` parses the records sections of batches into Arrow buffers (int32
  offsets, contiguous data) in one pass, validating every varint and length against
  the bounds of its record and batch first, so corrupt input yields an error code,
  never an out-of-bounds access. ``fill_v2_headers`` then copies the (validated)
  headers, when asked, into exactly sized buffers.

No kernel raises: errors come back as codes so the caller can name the batch.

The record layout, the header layout and the varint primitives are
``record_format``'s and ``record_format_kernels``'.

Thread-safe: kernels touch only their arguments and release the GIL (``nogil``), so
callers on different threads with different arrays run in parallel.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .record_format import INT32_MAX, V2_HEADER_SIZE, VARINT_MAX_BYTES, VARLONG_MAX_BYTES
from .record_format_kernels import append_binary as _append
from .record_format_kernels import copy_bytes as _copy
from .record_format_kernels import put_v2_header
from .record_format_kernels import read_varint as _read_varint
from .record_format_kernels import varint_size as _varint_size
from .record_format_kernels import write_varint as _write_varint

# Error codes returned by decode_v2 (the caller maps them to messages).
OK = 0
ERR_TRUNCATED = 1  # a varint or a field runs past the end of its record or batch
ERR_BAD_VARINT = 2  # more bytes than the type allows
ERR_BAD_LENGTH = 3  # a negative length where none is allowed (or below -1)
ERR_RECORD_SIZE = 4  # the record body does not use exactly `length` bytes
ERR_TRAILING = 5  # bytes left in the batch after `count` records
ERR_TOO_LARGE = 6  # more than 2 GiB of keys, values or headers in one call
ERROR_NAMES = {
    ERR_TRUNCATED: "truncated record",
    ERR_BAD_VARINT: "malformed varint",
    ERR_BAD_LENGTH: "invalid length",
    ERR_RECORD_SIZE: "record body does not match its length",
    ERR_TRAILING: "bytes left after the last record (record count mismatch)",
    ERR_TOO_LARGE: "more than 2 GiB of record data in one decode call",
}

# Columns of the `segs` table given to decode_v2, one row per batch.
SEG_START, SEG_END, SEG_COUNT, SEG_BASE_OFFSET, SEG_BASE_TS, SEG_MAX_TS, SEG_TS_TYPE = range(7)
SEG_COLUMNS = 7
TS_FROM_MAX = 1  # SEG_TS_TYPE value of a LogAppendTime batch: every record gets maxTimestamp

# Slots of the `state` array decode_v2 carries from one call to the next.
(ST_N, ST_KEY_BYTES, ST_VALUE_BYTES, ST_KEY_NULLS, ST_VALUE_NULLS, ST_HEADERS,
 ST_HEADER_KEY_BYTES, ST_HEADER_VALUE_BYTES, ST_HEADER_VALUE_NULLS, ST_NO_HEADERS,
 ST_ERR_SEG, ST_ERR_RECORD) = range(12)
STATE_SIZE = 12



# A record's length-prefixed fields (key, value, header key and value), written once: entry
# i of an Arrow-style column (int64 offsets, data, 0/1 validity); null is length -1, one
# byte (NULL_LENGTH), which the kernel stores itself: an inlined helper that writes an
# array on either side of a branch costs numba a refcount pair per record (encoding and
# decoding ran at a third of their speed), so writers here have a single path.
NULL_LENGTH = 1  # zigzag(-1)

@njit(cache=True, nogil=True, inline="always")
def _bytes_size(offs, i):
    n = offs[i + 1] - offs[i]
    return _varint_size(n) + n


@njit(cache=True, nogil=True, inline="always")
def _nullable_size(offs, valid, i):
    return _bytes_size(offs, i) if valid[i] else 1


@njit(cache=True, nogil=True, inline="always")
def _put_bytes(out, p, offs, data, i):
    a = offs[i]
    n = offs[i + 1] - a
    p = _write_varint(out, p, n)
    _copy(out, p, data, a, n)
    return p + n


# The record rules of decode_v2, once: a varint within its record, within Kafka's byte
# cap, not below what the field allows; a length-prefixed field within its record.
_ANY = -(2**63)  # a field with no lower bound (the deltas)


@njit(cache=True, nogil=True, inline="always")
def _record_int(src, pos, end, max_bytes, least):
    """(value, next position, OK or the error code) of the varint field at ``pos``."""
    v, pos = _read_varint(src, pos, end, max_bytes)
    if pos < 0:
        return v, pos, ERR_TRUNCATED if pos == -1 else ERR_BAD_VARINT
    if v < least:
        return v, pos, ERR_BAD_LENGTH
    return v, pos, OK


@njit(cache=True, nogil=True, inline="always")
def _record_bytes(src, pos, end, least):
    """(length, where its bytes start, next position, OK or the error code) of the
    length-prefixed field at ``pos`` (``least`` -1: may be null)."""
    n, pos, err = _record_int(src, pos, end, VARINT_MAX_BYTES, least)
    at = pos
    if err == OK and n > 0:
        pos += n
        if pos > end:
            err = ERR_TRUNCATED
    return n, at, pos, err


@njit(cache=True, nogil=True)
def plan_v2(key_offs, key_valid, val_offs, val_valid, timestamps, hdr_offs, hdr_valid,
            hk_offs, hv_offs, hv_valid, max_batch_bytes, body, batch_first, batch_pos):
    """Pass 1 of encoding: where each batch starts and how long each record body is.

    Offsets arrays are int64 positions into their data arrays (entries i and i+1
    bound record i); ``*_valid`` are uint8 0/1; ``hdr_offs`` indexes header entries.
    Fills ``body`` (n: each record's body length), ``batch_first`` and ``batch_pos``
    (n + 1 each: each batch's first record index and start position in the output,
    then a final n and total size). Outputs are allocated by the caller: numpy's
    allocator uses huge pages for big arrays, numba's does not. Returns the number
    of batches.
    """
    n = timestamps.shape[0]
    batch_pos[0] = 0
    nb = 0
    cur_start = 0
    cur_bytes = 0
    base_ts = np.int64(0)
    for i in range(n):
        s = 1  # attributes
        s += _nullable_size(key_offs, key_valid, i) + _nullable_size(val_offs, val_valid, i)
        h0 = hdr_offs[i]
        h1 = hdr_offs[i + 1] if hdr_valid[i] else h0
        s += _varint_size(h1 - h0)
        for h in range(h0, h1):
            s += _bytes_size(hk_offs, h) + _nullable_size(hv_offs, hv_valid, h)
        if i == 0:
            base_ts = timestamps[0]
            cur_bytes = V2_HEADER_SIZE
        b = s + _varint_size(timestamps[i] - base_ts) + _varint_size(i - cur_start)
        size = b + _varint_size(b)
        if i > cur_start and cur_bytes + size > max_batch_bytes:
            batch_first[nb] = cur_start
            batch_pos[nb + 1] = batch_pos[nb] + cur_bytes
            nb += 1
            cur_start = i
            cur_bytes = V2_HEADER_SIZE
            base_ts = timestamps[i]
            b = s + 2  # both deltas are 0: one byte each
            size = b + _varint_size(b)
        body[i] = b
        cur_bytes += size
    if n > 0:
        batch_first[nb] = cur_start
        batch_pos[nb + 1] = batch_pos[nb] + cur_bytes
        nb += 1
    batch_first[nb] = n
    return nb


@njit(cache=True, nogil=True)
def fill_v2(out, nb, body, batch_first, batch_pos, key_offs, key_data, key_valid, val_offs,
            val_data, val_valid, timestamps, hdr_offs, hdr_valid, hk_offs, hk_data, hv_offs,
            hv_data, hv_valid, base_offset, partition_leader_epoch, attributes,
            producer_id, producer_epoch, base_sequence, log_append_time):
    """Pass 2 of encoding: write the batches planned by ``plan_v2`` into ``out`` (of
    size ``batch_pos[-1]``), CRC fields left zero for the caller. ``log_append_time``
    >= 0 replaces maxTimestamp."""
    header = V2_HEADER_SIZE
    for j in range(nb):
        first = batch_first[j]
        last = batch_first[j + 1]
        start = batch_pos[j]
        base_ts = timestamps[first]
        max_ts = base_ts
        p = start + header
        for i in range(first, last):
            ts = timestamps[i]
            if ts > max_ts:
                max_ts = ts
            p = _write_varint(out, p, body[i])
            out[p] = 0
            p += 1
            p = _write_varint(out, p, ts - base_ts)
            p = _write_varint(out, p, i - first)
            if key_valid[i]:
                p = _put_bytes(out, p, key_offs, key_data, i)
            else:
                out[p] = NULL_LENGTH
                p += 1
            if val_valid[i]:
                p = _put_bytes(out, p, val_offs, val_data, i)
            else:
                out[p] = NULL_LENGTH
                p += 1
            h0 = hdr_offs[i]
            h1 = hdr_offs[i + 1] if hdr_valid[i] else h0
            p = _write_varint(out, p, h1 - h0)
            for h in range(h0, h1):
                p = _put_bytes(out, p, hk_offs, hk_data, h)  # a header key is never null
                if hv_valid[h]:
                    p = _put_bytes(out, p, hv_offs, hv_data, h)
                else:
                    out[p] = NULL_LENGTH
                    p += 1
        if log_append_time >= 0:
            max_ts = log_append_time
        # Like Kafka's producer, each batch's sequence continues the previous one and
        # wraps to 0 after Int32.MAX.
        seq = base_sequence
        if base_sequence >= 0:
            seq = (base_sequence + first) % (INT32_MAX + 1)
        put_v2_header(out, start, base_offset + first, batch_pos[j + 1] - start,
                      partition_leader_epoch, attributes, last - first - 1, base_ts, max_ts,
                      producer_id, producer_epoch, seq, last - first)


@njit(cache=True, nogil=True)
def decode_v2(src, segs, start_offset, end_offset, include_headers, offsets, timestamps,
              ts_types, key_offs, key_data, key_valid, val_offs, val_data, val_valid,
              hdr_pos, hdr_cnt, state):
    """Parse and copy, in one pass, the records sections
    ``src[segs[j, SEG_START]:segs[j, SEG_END]]`` of consecutive batches.

    Every varint and length is checked against the bounds of its record and batch
    before use. Records with ``start_offset <= offset < end_offset`` are appended at
    ``state[ST_N]``: offset, timestamp and type to the output columns, key and value
    to Arrow offsets/data (data arrays sized for the worst case by the caller), a 0/1
    validity byte each, and where their headers are (``hdr_pos``/``hdr_cnt``, only when
    ``include_headers``) for ``fill_v2_headers``. ``state`` carries the running
    counts across calls, so the caller can feed batches a cache-sized group at a time
    (just after checking their CRC, while they are still in cache). Returns an error
    code; on error ``state[ST_ERR_SEG]`` / ``state[ST_ERR_RECORD]`` locate it.
    """
    n = state[ST_N]
    kp = state[ST_KEY_BYTES]
    vp = state[ST_VALUE_BYTES]
    key_nulls = state[ST_KEY_NULLS]
    val_nulls = state[ST_VALUE_NULLS]
    n_headers = state[ST_HEADERS]
    hk_bytes = state[ST_HEADER_KEY_BYTES]
    hv_bytes = state[ST_HEADER_VALUE_BYTES]
    hv_nulls = state[ST_HEADER_VALUE_NULLS]
    hdr_nulls = state[ST_NO_HEADERS]
    err = OK
    j = 0
    r = 0
    for j in range(segs.shape[0]):
        pos = segs[j, SEG_START]
        end = segs[j, SEG_END]
        base_offset = segs[j, SEG_BASE_OFFSET]
        base_ts = segs[j, SEG_BASE_TS]
        ts_type = segs[j, SEG_TS_TYPE]
        max_ts = segs[j, SEG_MAX_TS]
        for r in range(segs[j, SEG_COUNT]):  # noqa: B007 (r locates an error)
            length, pos, err = _record_int(src, pos, end, VARINT_MAX_BYTES, 0)
            if err != OK:
                break
            if pos + length > end:
                err = ERR_TRUNCATED
                break
            rend = pos + length
            pos += 1  # attributes (unused in v2)
            ts_delta, pos, err = _record_int(src, pos, rend, VARLONG_MAX_BYTES, _ANY)
            if err != OK:
                break
            off_delta, pos, err = _record_int(src, pos, rend, VARINT_MAX_BYTES, _ANY)
            if err != OK:
                break
            klen, kpos, pos, err = _record_bytes(src, pos, rend, -1)
            if err != OK:
                break
            vlen, vpos, pos, err = _record_bytes(src, pos, rend, -1)
            if err != OK:
                break
            hcount, pos, err = _record_int(src, pos, rend, VARINT_MAX_BYTES, 0)
            if err != OK:
                break
            hstart = pos
            rec_hk = 0
            rec_hv = 0
            rec_hv_nulls = 0
            for _ in range(hcount):
                hk, _at, pos, err = _record_bytes(src, pos, rend, 0)  # a key is never null
                if err != OK:
                    break
                hv, _at, pos, err = _record_bytes(src, pos, rend, -1)
                if err != OK:
                    break
                rec_hk += hk
                if hv < 0:
                    rec_hv_nulls += 1
                else:
                    rec_hv += hv
            if err != OK:
                break
            if pos != rend:
                err = ERR_RECORD_SIZE
                break
            offset = base_offset + off_delta
            if offset < start_offset or offset >= end_offset:
                continue
            offsets[n] = offset
            if ts_type == TS_FROM_MAX:
                timestamps[n] = max_ts
            else:
                timestamps[n] = base_ts + ts_delta
            ts_types[n] = ts_type
            kp = _append(key_data, key_offs, key_valid, n, kp, src, kpos, klen)
            key_nulls += klen < 0
            vp = _append(val_data, val_offs, val_valid, n, vp, src, vpos, vlen)
            val_nulls += vlen < 0
            if include_headers:
                hdr_pos[n] = hstart
                hdr_cnt[n] = hcount
                if hcount == 0:
                    hdr_nulls += 1
                n_headers += hcount
                hk_bytes += rec_hk
                hv_bytes += rec_hv
                hv_nulls += rec_hv_nulls
            n += 1
        if err != OK:
            break
        if pos != end:
            err = ERR_TRAILING
            r = segs[j, SEG_COUNT]
            break
    if err == OK and (kp > INT32_MAX or vp > INT32_MAX or hk_bytes > INT32_MAX
                      or hv_bytes > INT32_MAX):
        err = ERR_TOO_LARGE
    for slot, value in enumerate((n, kp, vp, key_nulls, val_nulls, n_headers, hk_bytes,
                                  hv_bytes, hv_nulls, hdr_nulls, j, r)):  # the ST_* order
        state[slot] = value
    return err


@njit(cache=True, nogil=True)
def fill_v2_headers(src, first, last, hdr_pos, hdr_cnt, hdr_offs, hdr_bitmap, hk_offs,
                    hk_data, hv_offs, hv_data, hv_bitmap, hstate):
    """Headers of decoded records ``first..last-1`` (whose ``hdr_pos`` point into
    ``src``): re-read them (``decode_v2`` validated them) into list offsets, struct
    children and validity bitmaps (size 0 = no nulls). ``hstate`` = [headers so far,
    key bytes so far, value bytes so far] carries over between calls, one per source
    buffer. A record without headers gets a null list, as Spark's Kafka source gives.
    """
    h = hstate[0]
    hkp = hstate[1]
    hvp = hstate[2]
    end = src.shape[0]
    list_has_nulls = hdr_bitmap.shape[0] > 0
    hv_has_nulls = hv_bitmap.shape[0] > 0
    for i in range(first, last):
        c = hdr_cnt[i]
        if list_has_nulls and c > 0:
            hdr_bitmap[i >> 3] |= np.uint8(1 << (i & 7))
        pos = hdr_pos[i]
        for _ in range(c):
            hk, pos = _read_varint(src, pos, end, VARINT_MAX_BYTES)
            _copy(hk_data, hkp, src, pos, hk)
            hkp += hk
            pos += hk
            hk_offs[h + 1] = hkp
            hv, pos = _read_varint(src, pos, end, VARINT_MAX_BYTES)
            if hv >= 0:
                _copy(hv_data, hvp, src, pos, hv)
                hvp += hv
                pos += hv
                if hv_has_nulls:
                    hv_bitmap[h >> 3] |= np.uint8(1 << (h & 7))
            hv_offs[h + 1] = hvp
            h += 1
        hdr_offs[i + 1] = h
    hstate[0] = h
    hstate[1] = hkp
    hstate[2] = hvp
