"""numba kernels behind ``LogSegment.recover``: validate a chunk of v2 batches fast.

Recovery must check every batch's size, offsets and CRC-32C at a good fraction of the
speed of merely reading the file. Per-batch Python costs ~3 µs, which for 1 KiB batches
is 10x slower than reading, so the walk runs here, over a whole chunk per call:

* ``scan_headers`` walks the batch headers of a chunk (sizes, ``max.message.bytes``,
  increasing offsets that fit the segment) and records each batch's position, size,
  offsets, max timestamp and stored CRC; it stops at the first problem, at a partial
  batch, or at a magic other than 2 (legacy messages go through Python).
* ``batch_crcs`` computes CRC-32C of many batches with the SSE4.2 ``crc32`` instruction,
  four batches interleaved (one stream is latency-bound at a third of the throughput).
  Without SSE4.2 (``HARDWARE_CRC`` false) callers use the ``crc32c`` package per batch.
* ``index_entries`` replays Kafka's indexing rule (an entry when more than
  ``index.interval.bytes`` were appended since the last one, checked before the batch)
  over the valid batches, carrying its state across chunks.

Kernels are compiled lazily on first use and cached on disk. Thread-safety: pure
functions (they release the GIL).
"""

from __future__ import annotations

import logging
import platform

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

logger = logging.getLogger(__name__)

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

# Status codes returned by scan_headers.
NEED_MORE = 0  # the chunk ended (a partial batch or header may continue in the file)
INVALID = 1  # the batch at the returned position is invalid (reason code set)
LEGACY = 2  # a magic 0/1 message at the returned position: validate it in Python

REASON_SIZE = 1
REASON_TOO_LARGE = 2
REASON_OFFSETS = 3
REASONS = {REASON_SIZE: "an impossible batch size",
           REASON_TOO_LARGE: "a batch above max.message.bytes",
           REASON_OFFSETS: "offsets not above the previous batch or outside the segment"}


@intrinsic
def _crc_u64(typingctx, crc, data):
    sig = types.uint64(types.uint64, types.uint64)

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i64, [i64, i64]),
                                            "llvm.x86.sse42.crc32.64.64")
        return builder.call(fn, args)

    return sig, codegen


@intrinsic
def _crc_u8(typingctx, crc, data):
    sig = types.uint32(types.uint32, types.uint8)

    def codegen(context, builder, signature, args):
        i32, i8 = ir.IntType(32), ir.IntType(8)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i32, [i32, i8]),
                                            "llvm.x86.sse42.crc32.32.8")
        return builder.call(fn, args)

    return sig, codegen


@intrinsic
def _load_u64(typingctx, arr, idx):
    """An unaligned native (little-endian) 8-byte load from a uint8 array."""
    sig = types.uint64(arr, types.intp)

    def codegen(context, builder, signature, args):
        a = context.make_array(signature.args[0])(context, builder, args[0])
        ptr = builder.gep(a.data, [args[1]])
        return builder.load(builder.bitcast(ptr, ir.IntType(64).as_pointer()), align=1)

    return sig, codegen


@njit(cache=True, nogil=True)
def _be32(buf, p):
    return np.int32((np.uint32(buf[p]) << 24) | (np.uint32(buf[p + 1]) << 16)
                    | (np.uint32(buf[p + 2]) << 8) | np.uint32(buf[p + 3]))


@njit(cache=True, nogil=True)
def _beu32(buf, p):
    return np.int64((np.uint32(buf[p]) << 24) | (np.uint32(buf[p + 1]) << 16)
                    | (np.uint32(buf[p + 2]) << 8) | np.uint32(buf[p + 3]))


@njit(cache=True, nogil=True)
def _be64(buf, p):
    v = np.uint64(0)
    for i in range(8):
        v = (v << np.uint64(8)) | np.uint64(buf[p + i])
    return np.int64(v)


@njit(cache=True, nogil=True)
def scan_headers(buf, n, seg_base, next_offset, max_bytes, out):
    """Walk v2 headers in ``buf[:n]``. ``out`` is an int64 array (capacity, 6): per batch
    position, size, base offset, last offset, max timestamp, stored CRC.
    Returns (batches, end position, status, reason)."""
    p = 0
    count = 0
    cap = out.shape[0]
    while True:
        # The magic decides the format before any size rule: a legacy message can be
        # shorter than a v2 header, and is not a partial batch for being so.
        if count == cap or n - p < 17:
            return count, p, NEED_MORE, 0
        if buf[p + 16] != 2:
            return count, p, LEGACY, 0
        if n - p < 61:
            return count, p, NEED_MORE, 0
        size = np.int64(_be32(buf, p + 8)) + 12
        last_delta = np.int64(_be32(buf, p + 23))
        if size < 61 or last_delta < 0:
            return count, p, INVALID, REASON_SIZE
        if size > max_bytes:
            return count, p, INVALID, REASON_TOO_LARGE
        if size > n - p:
            return count, p, NEED_MORE, 0
        base = _be64(buf, p)
        # base + last_delta must not pass int64 (checked without computing it: LLVM may
        # assume a signed add never wraps and drop a "last < base" test)
        if base < next_offset or base > INT64_MAX - last_delta:
            return count, p, INVALID, REASON_OFFSETS
        last = base + last_delta
        if last - seg_base > INT32_MAX:
            return count, p, INVALID, REASON_OFFSETS
        out[count, 0] = p
        out[count, 1] = size
        out[count, 2] = base
        out[count, 3] = last
        out[count, 4] = _be64(buf, p + 35)
        out[count, 5] = _beu32(buf, p + 17)
        count += 1
        next_offset = last + 1
        p += size


@njit(cache=True, nogil=True)
def _crc_one(buf, start, end):
    c = np.uint64(0xFFFFFFFF)
    i = start
    while i + 8 <= end:
        c = _crc_u64(c, _load_u64(buf, i))
        i += 8
    c32 = np.uint32(c)
    while i < end:
        c32 = _crc_u8(c32, buf[i])
        i += 1
    return c32 ^ np.uint32(0xFFFFFFFF)


@njit(cache=True, nogil=True)
def _crc_finish(buf, c, j, e):
    while j + 8 <= e:
        c = _crc_u64(c, _load_u64(buf, j))
        j += 8
    c32 = np.uint32(c)
    while j < e:
        c32 = _crc_u8(c32, buf[j])
        j += 1
    return c32 ^ np.uint32(0xFFFFFFFF)


@njit(cache=True, nogil=True)
def batch_crcs(buf, batches, count):
    """Index of the first batch whose CRC-32C (of bytes [21, size)) differs from its
    header, or ``count`` when all match. Four batches are hashed in lockstep."""
    g = 0
    while g + 4 <= count:
        s0 = batches[g, 0] + 21
        s1 = batches[g + 1, 0] + 21
        s2 = batches[g + 2, 0] + 21
        s3 = batches[g + 3, 0] + 21
        length = min(batches[g, 1], batches[g + 1, 1], batches[g + 2, 1], batches[g + 3, 1]) - 21
        c0 = c1 = c2 = c3 = np.uint64(0xFFFFFFFF)
        i = 0
        while i + 8 <= length:
            c0 = _crc_u64(c0, _load_u64(buf, s0 + i))
            c1 = _crc_u64(c1, _load_u64(buf, s1 + i))
            c2 = _crc_u64(c2, _load_u64(buf, s2 + i))
            c3 = _crc_u64(c3, _load_u64(buf, s3 + i))
            i += 8
        r0 = _crc_finish(buf, c0, s0 + i, batches[g, 0] + batches[g, 1])
        r1 = _crc_finish(buf, c1, s1 + i, batches[g + 1, 0] + batches[g + 1, 1])
        r2 = _crc_finish(buf, c2, s2 + i, batches[g + 2, 0] + batches[g + 2, 1])
        r3 = _crc_finish(buf, c3, s3 + i, batches[g + 3, 0] + batches[g + 3, 1])
        if np.int64(r0) != batches[g, 5]:
            return g
        if np.int64(r1) != batches[g + 1, 5]:
            return g + 1
        if np.int64(r2) != batches[g + 2, 5]:
            return g + 2
        if np.int64(r3) != batches[g + 3, 5]:
            return g + 3
        g += 4
    while g < count:
        start = batches[g, 0]
        if np.int64(_crc_one(buf, start + 21, start + batches[g, 1])) != batches[g, 5]:
            return g
        g += 1
    return count


@njit(cache=True, nogil=True)
def index_entries(batches, count, chunk_pos, seg_base, interval, state, oidx, tidx):
    """Kafka's indexing rule over ``batches[:count]`` (positions relative to the chunk at
    file position ``chunk_pos``). ``state`` (int64[6]): bytes since the last entry, max
    timestamp so far, its offset, offset entries, time entries, last time-entry timestamp.
    New entries go to ``oidx`` (rel offset, position) and ``tidx`` (timestamp, rel
    offset) while they have room."""
    since, max_ts, max_off = state[0], state[1], state[2]
    n_o, n_t, last_t = state[3], state[4], state[5]
    for k in range(count):
        last = batches[k, 3]
        if batches[k, 4] > max_ts:
            max_ts = batches[k, 4]
            max_off = last
        if since > interval:
            if n_o < oidx.shape[0]:
                oidx[n_o, 0] = last - seg_base
                oidx[n_o, 1] = chunk_pos + batches[k, 0]
                n_o += 1
            if max_ts > last_t and n_t < tidx.shape[0]:
                tidx[n_t, 0] = max_ts
                tidx[n_t, 1] = max_off - seg_base
                n_t += 1
                last_t = max_ts
            since = 0
        since += batches[k, 1]
    state[0], state[1], state[2] = since, max_ts, max_off
    state[3], state[4], state[5] = n_o, n_t, last_t


def _probe_hardware_crc() -> bool:
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        with open("/proc/cpuinfo") as f:
            if "sse4_2" not in f.read():
                return False
        probe = np.frombuffer(b"\x00" * 21 + b"123456789", np.uint8)
        return int(_crc_one(probe, 21, 30)) == 0xE3069283  # the CRC-32C check value
    except Exception:  # noqa: BLE001 - any compile/CPU failure means "use the fallback"
        logger.info("hardware CRC-32C kernel unavailable; recovery uses crc32c per batch",
                    exc_info=True)
        return False


_HARDWARE_CRC: bool | None = None


def hardware_crc() -> bool:
    """Whether ``batch_crcs`` can run here (probed, and compiled, once)."""
    global _HARDWARE_CRC
    if _HARDWARE_CRC is None:
        _HARDWARE_CRC = _probe_hardware_crc()
    return _HARDWARE_CRC
