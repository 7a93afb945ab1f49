"""numba kernels behind ``LogSegment.recover``: check a chunk of v2 batches fast.

Recovery must check every batch's size, offsets and CRC-32C at a good fraction of the
speed of merely reading the file. Per-batch Python costs ~3 µs, which for 1 KiB batches
is 10x slower than reading, so the work runs in kernels over a whole chunk per call.
The header walk is ``record_format_kernels.header_table`` (sizes, ``max.message.bytes``,
increasing offsets that fit the segment; it stops at legacy messages, which go through
``record_format.verify``); its table (``H_*`` columns) feeds the two kernels here:

* ``batch_crcs`` computes CRC-32C of many batches with the SSE4.2 ``crc32`` instruction,
  four batches interleaved (one stream is latency-bound at a third of the throughput).
  ``first_crc_mismatch`` (recovery's and the cleaner's check) runs it, or without
  SSE4.2 (``hardware_crc()`` false) the ``crc32c`` package per batch.
* ``index_entries`` replays Kafka's indexing rule (an entry when more than
  ``index.interval.bytes`` were appended since the last one, checked before the batch)
  over the valid batches, carrying its state across chunks.

Kernels are compiled lazily on first use and cached on disk. Thread-safety: pure
functions (they release the GIL).
"""

from __future__ import annotations

import logging
import platform
from collections.abc import Callable
from typing import cast

import numpy as np
import numpy.typing as npt
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from ..storage.storage import LOCAL
from .record_format import (
    CRC_START,
    H_CRC,
    H_LAST_OFFSET,
    H_MAX_TIMESTAMP,
    H_POSITION,
    H_SIZE,
    crc32c,
)

logger = logging.getLogger(__name__)


def _sse42_crc32(data_bits: int):
    """The SSE4.2 ``crc32`` instruction folding ``data_bits`` of data into a CRC-32C
    (LLVM's ``llvm.x86.sse42.crc32.<crc bits>.<data bits>``; the CRC is 64-bit wide
    only with 64-bit data)."""
    crc_bits = 64 if data_bits == 64 else 32
    crc_type = getattr(types, f"uint{crc_bits}")
    data_type = getattr(types, f"uint{data_bits}")
    name = f"llvm.x86.sse42.crc32.{crc_bits}.{data_bits}"

    def crc32(typingctx, crc, data):
        def codegen(context, builder, signature, args):
            fn_type = ir.FunctionType(
                ir.IntType(crc_bits), [ir.IntType(crc_bits), ir.IntType(data_bits)]
            )
            return builder.call(cgutils.get_or_insert_function(builder.module, fn_type, name), args)

        return crc_type(crc_type, data_type), codegen

    crc32.__name__ = crc32.__qualname__ = f"_crc_u{data_bits}"
    return intrinsic(crc32)


_crc_u64 = _sse42_crc32(64)
_crc_u8 = _sse42_crc32(8)


def _load_u64_typing(typingctx, arr, idx):
    """An unaligned native (little-endian) 8-byte load from a uint8 array: the typing of
    the ``_load_u64`` intrinsic."""
    sig = types.uint64(arr, types.intp)

    def codegen(context, builder, signature, args):
        a = context.make_array(signature.args[0])(context, builder, args[0])
        ptr = builder.gep(a.data, [args[1]])
        return builder.load(builder.bitcast(ptr, ir.IntType(64).as_pointer()), align=1)

    return sig, codegen


# Jitted code calls an intrinsic with its operands only (numba supplies the typing
# context), while numba's stubs type the call as the definition, typing context first:
# the cast states the signature kernels call.
_load_u64 = cast("Callable[[npt.NDArray[np.uint8], int], np.uint64]", intrinsic(_load_u64_typing))


@njit(cache=True, nogil=True)
def _crc_finish(buf, c, j, e):
    # (The CRC intrinsics come from a factory, so the checker sees them untyped.)
    while j + 8 <= e:
        c = _crc_u64(c, _load_u64(buf, j))
        j += 8
    c32 = np.uint32(c)
    while j < e:
        c32 = _crc_u8(c32, buf[j])
        j += 1
    return c32 ^ np.uint32(0xFFFFFFFF)


@njit(cache=True, nogil=True)
def _crc_one(buf, start, end):
    return _crc_finish(buf, np.uint64(0xFFFFFFFF), start, end)


@njit(cache=True, nogil=True)
def batch_crcs(buf, batches, count):
    """Index of the first batch whose CRC-32C (of bytes [21, size)) differs from its
    header, or ``count`` when all match. Four batches are hashed in lockstep."""
    g = 0
    while g + 4 <= count:
        s0 = batches[g, H_POSITION] + CRC_START
        s1 = batches[g + 1, H_POSITION] + CRC_START
        s2 = batches[g + 2, H_POSITION] + CRC_START
        s3 = batches[g + 3, H_POSITION] + CRC_START
        length = (
            min(
                batches[g, H_SIZE],
                batches[g + 1, H_SIZE],
                batches[g + 2, H_SIZE],
                batches[g + 3, H_SIZE],
            )
            - CRC_START
        )
        c0 = c1 = c2 = c3 = np.uint64(0xFFFFFFFF)
        i = 0
        while i + 8 <= length:
            c0 = _crc_u64(c0, _load_u64(buf, s0 + i))
            c1 = _crc_u64(c1, _load_u64(buf, s1 + i))
            c2 = _crc_u64(c2, _load_u64(buf, s2 + i))
            c3 = _crc_u64(c3, _load_u64(buf, s3 + i))
            i += 8
        r0 = _crc_finish(buf, c0, s0 + i, batches[g, H_POSITION] + batches[g, H_SIZE])
        r1 = _crc_finish(buf, c1, s1 + i, batches[g + 1, H_POSITION] + batches[g + 1, H_SIZE])
        r2 = _crc_finish(buf, c2, s2 + i, batches[g + 2, H_POSITION] + batches[g + 2, H_SIZE])
        r3 = _crc_finish(buf, c3, s3 + i, batches[g + 3, H_POSITION] + batches[g + 3, H_SIZE])
        if np.int64(r0) != batches[g, H_CRC]:
            return g
        if np.int64(r1) != batches[g + 1, H_CRC]:
            return g + 1
        if np.int64(r2) != batches[g + 2, H_CRC]:
            return g + 2
        if np.int64(r3) != batches[g + 3, H_CRC]:
            return g + 3
        g += 4
    while g < count:
        start = batches[g, H_POSITION]
        crc = _crc_one(buf, start + CRC_START, start + batches[g, H_SIZE])
        if np.int64(crc) != batches[g, H_CRC]:
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
        last = batches[k, H_LAST_OFFSET]
        if batches[k, H_MAX_TIMESTAMP] > max_ts:
            max_ts = batches[k, H_MAX_TIMESTAMP]
            max_off = last
        if since > interval:
            if n_o < oidx.shape[0]:
                oidx[n_o, 0] = last - seg_base
                oidx[n_o, 1] = chunk_pos + batches[k, H_POSITION]
                n_o += 1
            if max_ts > last_t and n_t < tidx.shape[0]:
                tidx[n_t, 0] = max_ts
                tidx[n_t, 1] = max_off - seg_base
                n_t += 1
                last_t = max_ts
            since = 0
        since += batches[k, H_SIZE]
    state[0], state[1], state[2] = since, max_ts, max_off
    state[3], state[4], state[5] = n_o, n_t, last_t


def _probe_hardware_crc() -> bool:
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        if b"sse4_2" not in LOCAL.read("/proc/cpuinfo"):
            return False
        probe = np.frombuffer(b"\x00" * 21 + b"123456789", np.uint8)
        return int(_crc_one(probe, 21, 30)) == 0xE3069283  # the CRC-32C check value
    except Exception:  # noqa: BLE001 - any compile/CPU failure means "use the fallback"
        logger.info(
            "hardware CRC-32C kernel unavailable; recovery uses crc32c per batch", exc_info=True
        )
        return False


_HARDWARE_CRC: bool | None = None


def hardware_crc() -> bool:
    """Whether ``batch_crcs`` can run here (probed, and compiled, once)."""
    global _HARDWARE_CRC
    if _HARDWARE_CRC is None:
        _HARDWARE_CRC = _probe_hardware_crc()
    return _HARDWARE_CRC


def first_crc_mismatch(buf: np.ndarray, batches: np.ndarray, count: int) -> int:
    """Index of the first of ``batches[:count]`` (rows of a header table over ``buf``)
    whose CRC-32C does not match, or ``count``: the SSE4.2 kernel when there is one, else
    the crc32c package per batch."""
    if hardware_crc():
        first: int = batch_crcs(buf, batches, count)
        return first
    view = buf.data
    for k in range(count):
        start, size = int(batches[k, H_POSITION]), int(batches[k, H_SIZE])
        if crc32c(view[start + CRC_START : start + size]) != batches[k, H_CRC]:
            return k
    return count
