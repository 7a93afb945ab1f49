"""The cleaner's numba kernels over a chunk of v2 batches (the scan and the rewrite);
their Python drivers, chunk reading and legacy-batch rebuilding are ``cleaner_batches``.

A chunk of v2 batches takes one kernel call per pass after
``record_format_kernels.header_table`` (the batch table): ``map_batches`` puts its
records' keys (128-bit hashes computed in place) into the offset map;
``filter_batches`` looks them up and copies, drops or rewrites each batch (kept
records' bytes copied, timestamp deltas re-based when a delete horizon is stamped, the
header patched; CRCs are left to the caller). ``rewrite_records`` copies the kept records
of one decompressed batch (``cleaner_batches.rebuilt_batch``, the legacy path).

Columns of a batch table: ``record_format``'s ``H_*``.

Thread-safety: the kernels are pure.
"""

from __future__ import annotations

import numba
import numpy as np

from ..records.record_format import (
    ATTRIBUTES_OFFSET,
    BASE_TIMESTAMP_OFFSET,
    CONTROL_MASK,
    DELETE_HORIZON_MASK,
    H_ATTRIBUTES,
    H_BASE_OFFSET,
    H_BASE_TIMESTAMP,
    H_LAST_OFFSET,
    H_MAX_TIMESTAMP,
    H_POSITION,
    H_RECORDS_COUNT,
    H_SIZE,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAX_TIMESTAMP_OFFSET,
    RECORDS_COUNT_OFFSET,
    RECORDS_OFFSET,
    TIMESTAMP_TYPE_MASK,
)
from ..records.record_format_kernels import copy_bytes as _copy
from ..records.record_format_kernels import put_be as _put_be
from ..records.record_format_kernels import read_varint as _read_varint
from ..records.record_format_kernels import varint_size as _varint_size
from ..records.record_format_kernels import write_varint as _write_varint
from .offset_map import map_get, map_put, map_slot, murmur3_128, prefetch_row

COPY, DROP, REWRITE = 0, 1, 2


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
            out[o : o + rest] = src[r:rec_end]
            o += rest
            kept += 1
            if ts > max_ts:
                max_ts = ts
        p = rec_end
    if p != end:
        return -1, n, np.int64(0)
    return o, kept, max_ts


@numba.njit(inline="always")
def _record_fields(buf, p, end):
    """Parse the record at ``p`` (its bytes end by ``end``) up to its value length:
    (record end, timestamp delta, offset delta, key position, key length, value length);
    record end is -1 when the record is malformed.

    One loop over the varints rather than ``_read_varint`` calls: numba pays a refcount
    call per nested helper taking an array (this is 1.6x faster)."""
    rec_end = end
    ts_delta = np.int64(0)
    od = np.int64(0)
    key_at = np.int64(0)
    kl = np.int64(0)
    vl = np.int64(0)
    ok = True
    pos = np.uintp(p)
    # length, [attributes byte], timestamp delta, offset delta, key length, value length:
    # a varlong (up to 10 bytes) for the timestamp delta, int32 varints (up to 5 bytes, in
    # int32 range) for the others, as Kafka reads them. The caps also keep every position
    # computed here from overflowing, and ``_rebased_record`` re-reads with the same caps.
    for field in range(5):
        z = np.uint64(0)
        shift = np.uint64(0)
        done = False
        for _ in range(10 if field == 1 else 5):
            if pos >= np.uintp(rec_end):
                break
            c = buf[pos]
            pos += np.uintp(1)
            z |= np.uint64(c & 0x7F) << shift
            if c < 128:
                done = True
                break
            shift += np.uint64(7)
        v = np.int64(z >> np.uint64(1)) ^ -np.int64(z & np.uint64(1))
        if not done or (field != 1 and (v > 2147483647 or v < -2147483648)):
            ok = False
            break
        if field == 0:
            if v < 3 or np.int64(pos) + v > end:
                ok = False
                break
            rec_end = np.int64(pos) + v
            pos += np.uintp(1)  # the attributes byte
        elif field == 1:
            ts_delta = v
        elif field == 2:
            od = v
        elif field >= 3:  # key length, then value length: -1 (null) or the bytes
            if v < -1 or np.int64(pos) + v > rec_end:
                ok = False
                break
            if field == 3:
                kl = v
                key_at = np.int64(pos)
                pos += np.uintp(max(v, 0))
            else:
                vl = v
    return (rec_end if ok else -1), ts_delta, od, key_at, kl, vl


# The kernels below leave their loops through a status variable, not an early return:
# a return from inside the loop costs numba a refcount call per record (1.7x slower).
# Both work a batch at a time in two steps: parse and hash its records into the scratch
# rows ``recs`` (columns R_*), asking the CPU to fetch each key's map slot; then probe
# the map in order. The slots' cache misses then overlap instead of each stalling the
# parse (1.6x faster with 200,000 keys).
R_AT, R_TS, R_OFFSET, R_H1, R_H2, R_FLAGS = range(6)
F_KEY, F_TOMBSTONE, F_KEEP = 1, 2, 4


@numba.njit(inline="always")
def _parse_batch(buf, table, b, map_table, recs):
    """Step one for batch ``b``: its records' rows in ``recs``; ``recs[count, R_AT]`` is
    the batch end. Returns the batch's record count, or -1 when it is malformed (a bad
    record, or a count its bytes do not match)."""
    pos = table[b, H_POSITION]
    end = pos + table[b, H_SIZE]
    base = table[b, H_BASE_OFFSET]
    count = table[b, H_RECORDS_COUNT]
    slots = map_table.shape[0]
    rows = recs.shape[0] - 1  # the last row is for the batch end
    p = pos + RECORDS_OFFSET
    i = 0
    while i < count and i < rows:
        rec_end, ts_delta, od, k, kl, vl = _record_fields(buf, p, end)
        if rec_end < 0:
            break
        flags = 0
        if kl >= 0:
            h1, h2 = murmur3_128(buf, k, kl)
            prefetch_row(map_table, map_slot(h1, slots))
            recs[i, R_H1] = h1
            recs[i, R_H2] = h2
            flags = F_KEY
        if vl < 0:
            flags |= F_TOMBSTONE
        recs[i, R_AT] = p
        recs[i, R_TS] = ts_delta
        recs[i, R_OFFSET] = base + od
        recs[i, R_FLAGS] = flags
        p = rec_end
        i += 1
    recs[i, R_AT] = p
    return i if i == count and p == end else -1


@numba.njit(cache=True, nogil=True)
def map_batches(buf, table, nb, start, bound, map_table, size, max_size, recs):
    """Put the key of every record with an offset in ``[start, bound)`` into the offset
    map ``map_table`` (null keys skipped), in offset order, stopping at the first new key
    the map has no room for. ``recs`` is scratch (see ``ChunkBuffers.records``).
    Returns (status, new size, records consumed, stop offset, last offset put): status 0
    when every record was taken, 1 when the map filled at ``stop offset``, ``-(b + 1)``
    when batch ``b`` is malformed."""
    consumed = 0
    last = -1
    stop = -1
    status = 0
    b = 0
    while b < nb and status == 0:
        if table[b, H_ATTRIBUTES] & CONTROL_MASK:  # control batches hold no data records
            b += 1
            continue
        n = _parse_batch(buf, table, b, map_table, recs)
        if n < 0:
            status = -(b + 1)
            break
        for i in range(n):
            offset = recs[i, R_OFFSET]
            if offset < start or offset >= bound:
                continue
            if recs[i, R_FLAGS] & F_KEY:
                grown = map_put(map_table, recs[i, R_H1], recs[i, R_H2], offset, size, max_size)
                if grown < 0:
                    status = 1
                    stop = offset
                    break
                size = grown
                last = offset
            consumed += 1
        b += 1
    return status, size, consumed, stop, last


# Totals filled by filter_batches.
(
    C_RECORDS,
    C_RETAINED,
    C_TOMBSTONES_REMOVED,
    C_COPIED,
    C_REWRITTEN,
    C_DROPPED,
    C_PENDING_HORIZON,
    C_NEXT_OFFSET,
) = range(8)
NO_HORIZON = np.iinfo(np.int64).max


@numba.njit(cache=True, nogil=True)
def filter_batches(
    buf,
    table,
    nb,
    map_table,
    end_offset,
    now,
    delete_retention_ms,
    recs,
    out,
    action,
    out_pos,
    out_end,
    counters,
):
    """The cleaner's retain/discard decision and rewrite for a chunk of uncompressed v2
    batches (``cleaner`` step 3): each record's key is looked up in ``map_table``; each
    batch is then copied, dropped or rewritten (kept records, header patched; CRC left
    to the caller) into ``out``. ``recs`` is scratch (see ``ChunkBuffers.records``);
    ``action``, ``out_pos`` and ``out_end`` get each batch's fate and place in ``out``;
    ``counters`` the ``C_*`` totals. Returns the length of ``out`` used, or ``-(b + 1)``
    when batch ``b`` is malformed (a bad record, or a record count that does not match
    its bytes)."""
    counters[:] = 0
    counters[C_PENDING_HORIZON] = NO_HORIZON
    counters[C_NEXT_OFFSET] = -1
    o = 0
    status = 0
    b = 0
    while b < nb and status == 0:
        pos = table[b, H_POSITION]
        size = table[b, H_SIZE]
        attrs = table[b, H_ATTRIBUTES]
        count = table[b, H_RECORDS_COUNT]
        old_base_ts = table[b, H_BASE_TIMESTAMP]
        new_base_ts = old_base_ts
        a = COPY
        stamp = False
        kept = 0
        if not attrs & CONTROL_MASK:  # a data batch (control batches are copied)
            if _parse_batch(buf, table, b, map_table, recs) < 0:
                status = -(b + 1)
                break
            has_horizon = (attrs & DELETE_HORIZON_MASK) != 0
            retain_deletes = not has_horizon or now < old_base_ts
            tombs_kept = 0
            for i in range(count):
                flags = recs[i, R_FLAGS]
                offset = recs[i, R_OFFSET]
                if offset >= end_offset:
                    keep_it = True
                elif not flags & F_KEY:
                    keep_it = False
                else:
                    keep_it = offset >= map_get(map_table, recs[i, R_H1], recs[i, R_H2]) and (
                        not flags & F_TOMBSTONE or retain_deletes
                    )
                if keep_it:
                    recs[i, R_FLAGS] = flags | F_KEEP
                    kept += 1
                    if flags & F_TOMBSTONE:
                        tombs_kept += 1
                elif flags & F_TOMBSTONE:
                    counters[C_TOMBSTONES_REMOVED] += 1
            counters[C_RECORDS] += count
            counters[C_RETAINED] += kept
            if tombs_kept > 0:
                if not has_horizon:
                    stamp = True
                    new_base_ts = now + delete_retention_ms
                counters[C_PENDING_HORIZON] = min(counters[C_PENDING_HORIZON], new_base_ts)
            if kept == 0 and count > 0:
                a = DROP
            elif kept < count or stamp:
                a = REWRITE
        action[b] = a
        out_pos[b] = -1 if a == DROP else o
        if a == COPY:
            counters[C_COPIED] += 1
            _copy(out, o, buf, pos, size)
            o += size
        elif a == REWRITE:
            counters[C_REWRITTEN] += 1
            _copy(out, o, buf, pos, RECORDS_OFFSET)
            w = o + RECORDS_OFFSET
            max_ts = np.int64(-1)
            i = 0
            while i < count:
                if not recs[i, R_FLAGS] & F_KEEP:
                    i += 1
                    continue
                if stamp:  # timestamp deltas re-based on the delete horizon
                    w = _rebased_record(
                        buf,
                        recs[i, R_AT],
                        recs[i + 1, R_AT],
                        old_base_ts + recs[i, R_TS] - new_base_ts,
                        out,
                        w,
                    )
                    max_ts = max(max_ts, old_base_ts + recs[i, R_TS])
                    i += 1
                    continue
                j = i  # a run of kept records is copied as it is
                while j < count and recs[j, R_FLAGS] & F_KEEP:
                    max_ts = max(max_ts, old_base_ts + recs[j, R_TS])
                    j += 1
                _copy(out, w, buf, recs[i, R_AT], recs[j, R_AT] - recs[i, R_AT])
                w += recs[j, R_AT] - recs[i, R_AT]
                i = j
            if attrs & TIMESTAMP_TYPE_MASK:
                # LogAppendTime: the append time stays the batch's
                max_ts = table[b, H_MAX_TIMESTAMP]
            _put_be(out, o + LENGTH_OFFSET, w - o - LOG_OVERHEAD, 4)
            _put_be(out, o + ATTRIBUTES_OFFSET, attrs | (DELETE_HORIZON_MASK if stamp else 0), 2)
            _put_be(out, o + BASE_TIMESTAMP_OFFSET, new_base_ts, 8)
            _put_be(out, o + MAX_TIMESTAMP_OFFSET, max_ts, 8)
            _put_be(out, o + RECORDS_COUNT_OFFSET, kept, 4)
            o = w
        else:
            counters[C_DROPPED] += 1
        out_end[b] = -1 if a == DROP else o
        if a != DROP:
            counters[C_NEXT_OFFSET] = table[b, H_LAST_OFFSET] + 1
        b += 1
    return o if status == 0 else status


@numba.njit(cache=True, nogil=True)
def _rebased_record(buf, start, end, ts_delta, out, w):
    """Write the record ``buf[start:end]`` at ``out[w]`` with timestamp delta
    ``ts_delta``; returns the position after it."""
    _, q = _read_varint(buf, start, end, 5)
    _, r = _read_varint(buf, q + 1, end, 10)  # the old timestamp delta
    od, r = _read_varint(buf, r, end, 5)
    rest = end - r
    w = _write_varint(out, w, 1 + _varint_size(ts_delta) + _varint_size(od) + rest)
    out[w] = buf[q]
    w = _write_varint(out, w + 1, ts_delta)
    w = _write_varint(out, w, od)
    _copy(out, w, buf, r, rest)
    return w + rest
