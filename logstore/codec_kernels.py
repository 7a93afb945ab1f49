"""numba kernels behind ``record_codec``: the per-record work of RecordBatch v2.

Five kernels, one signature each (callers normalise dtypes, and pass data they do
not own read-only, so numba compiles each kernel once and caches it on disk). Every
kernel works on arrays the caller allocated: numpy puts big arrays on huge pages,
numba's own allocator does not, and page faults then cost more than the work.

- ``plan_v2`` then ``fill_v2`` lay out records from Arrow-style offset/data buffers
  into consecutive v2 batches (headers written, CRC left at zero for the caller),
  splitting batches so that no batch exceeds ``max_batch_bytes`` uncompressed.
- ``scan_v2`` then ``fill_v2_records`` / ``fill_v2_headers`` parse the records
  sections of many batches into Arrow buffers (int32 offsets, contiguous data, packed
  validity bitmaps). The scan validates every varint and length against the bounds of
  its record and batch, so corrupt input yields an error code, never an
  out-of-bounds access; the fills trust what the scan validated.

No kernel raises: errors come back as codes so the caller can name the batch.

Record layout (every integer a zigzag LEB128 varint; see KAFKA-FORMAT.md)::

    length | attributes int8 | timestampDelta | offsetDelta | keyLen key | valueLen value
    | headerCount | (headerKeyLen headerKey headerValueLen headerValue)*

Thread-safe: kernels are pure functions of their arguments (numba releases nothing
global; the GIL is held, so they do not run in parallel either).
"""

from __future__ import annotations

import numpy as np
from numba import njit

# Error codes returned by scan_v2 (the caller maps them to messages).
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

# Columns of the `segs` table given to scan_v2, one row per batch.
SEG_START, SEG_END, SEG_COUNT, SEG_BASE_OFFSET, SEG_BASE_TS, SEG_MAX_TS, SEG_TS_TYPE = range(7)
SEG_COLUMNS = 7
TS_FROM_MAX = 1  # SEG_TS_TYPE value of a LogAppendTime batch: every record gets maxTimestamp

_INT32_MAX = 2147483647
_V2_HEADER_SIZE = 61
_LOW63 = 0x7FFFFFFFFFFFFFFF
_LOW57 = 0x01FFFFFFFFFFFFFF


@njit(cache=True, inline="always")
def _zigzag(v):
    return (v << 1) ^ (v >> 63)


@njit(cache=True, inline="always")
def _varint_size(v):
    """Bytes taken by the zigzag varint of int64 ``v``."""
    z = (v << 1) ^ (v >> 63)
    n = 1
    while z < 0 or z >= 128:  # z < 0: the unsigned value has its top bit set
        z = (z >> 7) & _LOW57
        n += 1
    return n


@njit(cache=True, inline="always")
def _write_varint(out, pos, v):
    z = (v << 1) ^ (v >> 63)
    while z < 0 or z >= 128:
        out[pos] = np.uint8((z & 0x7F) | 0x80)
        pos += 1
        z = (z >> 7) & _LOW57
    out[pos] = np.uint8(z)
    return pos + 1


@njit(cache=True, inline="always")
def _read_varint(buf, pos, end, max_bytes):
    """(value, next position); next position -1 past ``end``, -2 if too long."""
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


@njit(cache=True, inline="always")
def _put_be(out, pos, v, nbytes):
    for i in range(nbytes):
        out[pos + i] = np.uint8((v >> (8 * (nbytes - 1 - i))) & 0xFF)


@njit(cache=True, inline="always")
def _copy(dst, dpos, src, spos, n):
    # Unsigned indices: numba then skips its negative-index wraparound, which would
    # otherwise stop LLVM from vectorising the copy (3x slower).
    d = np.uintp(dpos)
    s = np.uintp(spos)
    for i in range(np.uintp(n)):
        dst[d + i] = src[s + i]


@njit(cache=True)
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
        if key_valid[i]:
            k = key_offs[i + 1] - key_offs[i]
            s += _varint_size(k) + k
        else:
            s += 1
        if val_valid[i]:
            v = val_offs[i + 1] - val_offs[i]
            s += _varint_size(v) + v
        else:
            s += 1
        h0 = hdr_offs[i]
        h1 = hdr_offs[i + 1] if hdr_valid[i] else h0
        s += _varint_size(h1 - h0)
        for h in range(h0, h1):
            hk = hk_offs[h + 1] - hk_offs[h]
            s += _varint_size(hk) + hk
            if hv_valid[h]:
                hv = hv_offs[h + 1] - hv_offs[h]
                s += _varint_size(hv) + hv
            else:
                s += 1
        if i == 0:
            base_ts = timestamps[0]
            cur_bytes = _V2_HEADER_SIZE
        b = s + _varint_size(timestamps[i] - base_ts) + _varint_size(i - cur_start)
        size = b + _varint_size(b)
        if i > cur_start and cur_bytes + size > max_batch_bytes:
            batch_first[nb] = cur_start
            batch_pos[nb + 1] = batch_pos[nb] + cur_bytes
            nb += 1
            cur_start = i
            cur_bytes = _V2_HEADER_SIZE
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


@njit(cache=True)
def fill_v2(out, nb, body, batch_first, batch_pos, key_offs, key_data, key_valid, val_offs,
            val_data, val_valid, timestamps, hdr_offs, hdr_valid, hk_offs, hk_data, hv_offs,
            hv_data, hv_valid, base_offset, partition_leader_epoch, attributes,
            producer_id, producer_epoch, base_sequence, log_append_time):
    """Pass 2 of encoding: write the batches planned by ``plan_v2`` into ``out`` (of
    size ``batch_pos[-1]``), CRC fields left zero for the caller. ``log_append_time``
    >= 0 replaces maxTimestamp."""
    header = _V2_HEADER_SIZE
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
                k0 = key_offs[i]
                k = key_offs[i + 1] - k0
                p = _write_varint(out, p, k)
                _copy(out, p, key_data, k0, k)
                p += k
            else:
                out[p] = 1  # zigzag(-1)
                p += 1
            if val_valid[i]:
                v0 = val_offs[i]
                v = val_offs[i + 1] - v0
                p = _write_varint(out, p, v)
                _copy(out, p, val_data, v0, v)
                p += v
            else:
                out[p] = 1
                p += 1
            h0 = hdr_offs[i]
            h1 = hdr_offs[i + 1] if hdr_valid[i] else h0
            p = _write_varint(out, p, h1 - h0)
            for h in range(h0, h1):
                a = hk_offs[h]
                hk = hk_offs[h + 1] - a
                p = _write_varint(out, p, hk)
                _copy(out, p, hk_data, a, hk)
                p += hk
                if hv_valid[h]:
                    a = hv_offs[h]
                    hv = hv_offs[h + 1] - a
                    p = _write_varint(out, p, hv)
                    _copy(out, p, hv_data, a, hv)
                    p += hv
                else:
                    out[p] = 1
                    p += 1
        if log_append_time >= 0:
            max_ts = log_append_time
        _put_be(out, start, base_offset + first, 8)
        _put_be(out, start + 8, batch_pos[j + 1] - start - 12, 4)
        _put_be(out, start + 12, partition_leader_epoch, 4)
        out[start + 16] = 2
        _put_be(out, start + 17, 0, 4)  # CRC: the caller computes it
        _put_be(out, start + 21, attributes, 2)
        _put_be(out, start + 23, last - first - 1, 4)
        _put_be(out, start + 27, base_ts, 8)
        _put_be(out, start + 35, max_ts, 8)
        _put_be(out, start + 43, producer_id, 8)
        _put_be(out, start + 51, producer_epoch, 2)
        # Like Kafka's producer, each batch's sequence continues the previous one and
        # wraps to 0 after Int32.MAX.
        seq = base_sequence
        if base_sequence >= 0:
            seq = (base_sequence + first) % 2147483648
        _put_be(out, start + 53, seq, 4)
        _put_be(out, start + 57, last - first, 4)


@njit(cache=True)
def scan_v2(src, segs, start_offset, end_offset, include_headers, offsets, timestamps,
            ts_types, key_pos, key_len, val_pos, val_len, hdr_pos, hdr_cnt, counts):
    """Pass 1 of decoding: validate every record of the records sections
    ``src[segs[j, SEG_START]:segs[j, SEG_END]]``, keep those with ``start_offset <=
    offset < end_offset``: their offset, timestamp and timestamp type go to the output
    columns, where their key, value and headers are to the scratch arrays (all of the
    batches' total record count long; header arrays empty unless
    ``include_headers``). ``counts`` receives: records kept, key bytes, value bytes,
    null keys, null values, headers, header key bytes, header value bytes, null header
    values, records without headers. Returns (error code, batch index, record index).
    """
    n = 0
    key_bytes = 0
    val_bytes = 0
    key_nulls = 0
    val_nulls = 0
    n_headers = 0
    hk_bytes = 0
    hv_bytes = 0
    hv_nulls = 0
    hdr_nulls = 0
    for j in range(segs.shape[0]):
        pos = segs[j, SEG_START]
        end = segs[j, SEG_END]
        base_offset = segs[j, SEG_BASE_OFFSET]
        base_ts = segs[j, SEG_BASE_TS]
        ts_type = segs[j, SEG_TS_TYPE]
        max_ts = segs[j, SEG_MAX_TS]
        for r in range(segs[j, SEG_COUNT]):
            length, pos = _read_varint(src, pos, end, 5)
            if pos < 0:
                return (ERR_TRUNCATED if pos == -1 else ERR_BAD_VARINT), j, r
            if length < 0:
                return ERR_BAD_LENGTH, j, r
            if pos + length > end:
                return ERR_TRUNCATED, j, r
            rend = pos + length
            pos += 1  # attributes (unused in v2)
            ts_delta, pos = _read_varint(src, pos, rend, 10)
            if pos < 0:
                return (ERR_TRUNCATED if pos == -1 else ERR_BAD_VARINT), j, r
            off_delta, pos = _read_varint(src, pos, rend, 5)
            if pos < 0:
                return (ERR_TRUNCATED if pos == -1 else ERR_BAD_VARINT), j, r
            klen, pos = _read_varint(src, pos, rend, 5)
            if pos < 0:
                return (ERR_TRUNCATED if pos == -1 else ERR_BAD_VARINT), j, r
            if klen < -1:
                return ERR_BAD_LENGTH, j, r
            kpos = pos
            if klen > 0:
                pos += klen
                if pos > rend:
                    return ERR_TRUNCATED, j, r
            vlen, pos = _read_varint(src, pos, rend, 5)
            if pos < 0:
                return (ERR_TRUNCATED if pos == -1 else ERR_BAD_VARINT), j, r
            if vlen < -1:
                return ERR_BAD_LENGTH, j, r
            vpos = pos
            if vlen > 0:
                pos += vlen
                if pos > rend:
                    return ERR_TRUNCATED, j, r
            hcount, pos = _read_varint(src, pos, rend, 5)
            if pos < 0:
                return (ERR_TRUNCATED if pos == -1 else ERR_BAD_VARINT), j, r
            if hcount < 0:
                return ERR_BAD_LENGTH, j, r
            hstart = pos
            rec_hk = 0
            rec_hv = 0
            rec_hv_nulls = 0
            for _ in range(hcount):
                hk, pos = _read_varint(src, pos, rend, 5)
                if pos < 0:
                    return (ERR_TRUNCATED if pos == -1 else ERR_BAD_VARINT), j, r
                if hk < 0:
                    return ERR_BAD_LENGTH, j, r
                pos += hk
                if pos > rend:
                    return ERR_TRUNCATED, j, r
                hv, pos = _read_varint(src, pos, rend, 5)
                if pos < 0:
                    return (ERR_TRUNCATED if pos == -1 else ERR_BAD_VARINT), j, r
                if hv < -1:
                    return ERR_BAD_LENGTH, j, r
                if hv > 0:
                    pos += hv
                    if pos > rend:
                        return ERR_TRUNCATED, j, r
                rec_hk += hk
                if hv < 0:
                    rec_hv_nulls += 1
                else:
                    rec_hv += hv
            if pos != rend:
                return ERR_RECORD_SIZE, j, r
            offset = base_offset + off_delta
            if offset < start_offset or offset >= end_offset:
                continue
            offsets[n] = offset
            if ts_type == TS_FROM_MAX:
                timestamps[n] = max_ts
            else:
                timestamps[n] = base_ts + ts_delta
            ts_types[n] = ts_type
            key_pos[n] = kpos
            key_len[n] = klen
            val_pos[n] = vpos
            val_len[n] = vlen
            if klen < 0:
                key_nulls += 1
            else:
                key_bytes += klen
            if vlen < 0:
                val_nulls += 1
            else:
                val_bytes += vlen
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
        if pos != end:
            return ERR_TRAILING, j, segs[j, SEG_COUNT]
    if key_bytes > _INT32_MAX or val_bytes > _INT32_MAX or hk_bytes > _INT32_MAX \
            or hv_bytes > _INT32_MAX:
        return ERR_TOO_LARGE, 0, 0
    counts[0] = n
    counts[1] = key_bytes
    counts[2] = val_bytes
    counts[3] = key_nulls
    counts[4] = val_nulls
    counts[5] = n_headers
    counts[6] = hk_bytes
    counts[7] = hv_bytes
    counts[8] = hv_nulls
    counts[9] = hdr_nulls
    return OK, 0, 0


@njit(cache=True)
def fill_v2_records(src, n, key_pos, key_len, val_pos, val_len, key_offs, key_data,
                    key_bitmap, val_offs, val_data, val_bitmap):
    """Pass 2 of decoding: copy the ``n`` keys and values found by ``scan_v2`` into
    Arrow buffers (int32 offsets, contiguous data). A bitmap of size 0 means the
    column has no nulls; otherwise it must be zeroed and (n + 7) // 8 long."""
    kp = 0
    vp = 0
    key_offs[0] = 0
    val_offs[0] = 0
    key_has_nulls = key_bitmap.shape[0] > 0
    val_has_nulls = val_bitmap.shape[0] > 0
    for i in range(n):
        k = key_len[i]
        if k > 0:
            _copy(key_data, kp, src, key_pos[i], k)
            kp += k
        if key_has_nulls and k >= 0:
            key_bitmap[i >> 3] |= np.uint8(1 << (i & 7))
        key_offs[i + 1] = kp
        v = val_len[i]
        if v > 0:
            _copy(val_data, vp, src, val_pos[i], v)
            vp += v
        if val_has_nulls and v >= 0:
            val_bitmap[i >> 3] |= np.uint8(1 << (i & 7))
        val_offs[i + 1] = vp


@njit(cache=True)
def fill_v2_headers(src, n, hdr_pos, hdr_cnt, hdr_offs, hdr_bitmap, hk_offs, hk_data,
                    hv_offs, hv_data, hv_bitmap):
    """Pass 2 of decoding, headers: re-read the (already validated) headers of the
    ``n`` records into list offsets, struct children and validity bitmaps (size 0 =
    no nulls). A record without headers gets a null list, as Spark's Kafka source
    gives."""
    hdr_offs[0] = 0
    hk_offs[0] = 0
    hv_offs[0] = 0
    h = 0
    hkp = 0
    hvp = 0
    end = src.shape[0]
    list_has_nulls = hdr_bitmap.shape[0] > 0
    hv_has_nulls = hv_bitmap.shape[0] > 0
    for i in range(n):
        c = hdr_cnt[i]
        if list_has_nulls and c > 0:
            hdr_bitmap[i >> 3] |= np.uint8(1 << (i & 7))
        pos = hdr_pos[i]
        for _ in range(c):
            hk, pos = _read_varint(src, pos, end, 5)
            _copy(hk_data, hkp, src, pos, hk)
            hkp += hk
            pos += hk
            hk_offs[h + 1] = hkp
            hv, pos = _read_varint(src, pos, end, 5)
            if hv >= 0:
                _copy(hv_data, hvp, src, pos, hv)
                hvp += hv
                pos += hv
                if hv_has_nulls:
                    hv_bitmap[h >> 3] |= np.uint8(1 << (h & 7))
            hv_offs[h + 1] = hvp
            h += 1
        hdr_offs[i + 1] = h
