"""The cleaner's key → latest-offset map, in a fixed memory budget (Kafka's SkimpyOffsetMap).

A key is never stored, only a 128-bit hash of its bytes (MurmurHash3 x64-128, computed by a
numba kernel over a whole Arrow binary array: no per-record Python). Each slot of one
open-addressing table (linear probing) holds ``hash_hi, hash_lo, offset`` as three int64,
24 bytes, like Kafka's 16-byte MD5 + 8-byte offset. The table never grows: its capacity is
``load_factor`` of the slots that fit in ``log.cleaner.dedupe.buffer.size``, and ``put`` stops
at the first *new* key that would exceed it, so the map always covers a prefix of the records
offered. The cleaner then cleans up to the last offset it holds and continues in a later
pass (a log larger than the budget is cleaned in several passes).

Two different keys with the same 128-bit hash would make the older record of one of them be
dropped; at 2**-128 per pair this is ignored, as Kafka does with MD5.

Not thread-safe: one cleaner pass owns one map.

>>> import pyarrow as pa, numpy as np
>>> m = OffsetMap(1024)
>>> m.put(pa.array([b"a", b"b", b"a"]), np.array([0, 1, 2]))
3
>>> m.get(pa.array([b"a", b"b", b"c"])).tolist()
[2, 1, -1]
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, cast

import numba
import numpy as np
import numpy.typing as npt
import pyarrow as pa
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

logger = logging.getLogger(__name__)

ENTRY_BYTES = 24
"""One slot: two int64 halves of the key hash and the int64 offset."""

DEFAULT_LOAD_FACTOR = 0.9
"""Kafka's ``log.cleaner.io.buffer.load.factor`` default."""

_EMPTY = -1

_C1 = np.uint64(0x87C37B91114253D5)
_C2 = np.uint64(0x4CF5AD432745937F)
_F1 = np.uint64(0xFF51AFD7ED558CCD)
_F2 = np.uint64(0xC4CEB9FE1A85EC53)
_M5 = np.uint64(5)
_N1 = np.uint64(0x52DCE729)
_N2 = np.uint64(0x38495AB5)


@numba.njit(inline="always")
def _rotl(x, r):
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


@numba.njit(inline="always")
def _fmix(k):
    k ^= k >> np.uint64(33)
    k *= _F1
    k ^= k >> np.uint64(33)
    k *= _F2
    k ^= k >> np.uint64(33)
    return k


@numba.njit(inline="always")
def murmur3_128(data, start, length):
    """MurmurHash3 x64-128 (seed 0) of ``data[start:start + length]`` as two int64.
    A numba function, for other kernels that hash keys in place.

    Bytes are loaded here, not through a helper taking the array, and with unsigned
    indices: a nested array helper costs numba a refcount call per use and signed
    indices a wraparound check per byte (together 2.7x slower on 12-byte keys)."""
    h1 = np.uint64(0)
    h2 = np.uint64(0)
    p = np.uintp(start)
    for _ in range(length >> 4):
        k1 = np.uint64(0)
        k2 = np.uint64(0)
        for j in range(8):
            k1 |= np.uint64(data[p + np.uintp(j)]) << np.uint64(8 * j)
            k2 |= np.uint64(data[p + np.uintp(8 + j)]) << np.uint64(8 * j)
        p += np.uintp(16)
        k1 *= _C1
        k1 = _rotl(k1, 31)
        k1 *= _C2
        h1 ^= k1
        h1 = _rotl(h1, 27)
        h1 += h2
        h1 = h1 * _M5 + _N1
        k2 *= _C2
        k2 = _rotl(k2, 33)
        k2 *= _C1
        h2 ^= k2
        h2 = _rotl(h2, 31)
        h2 += h1
        h2 = h2 * _M5 + _N2
    rem = length & 15
    k1 = np.uint64(0)
    k2 = np.uint64(0)
    for j in range(rem):
        v = np.uint64(data[p + np.uintp(j)])
        if j < 8:
            k1 |= v << np.uint64(8 * j)
        else:
            k2 |= v << np.uint64(8 * (j - 8))
    if rem > 8:
        k2 *= _C2
        k2 = _rotl(k2, 33)
        k2 *= _C1
        h2 ^= k2
    if rem > 0:
        k1 *= _C1
        k1 = _rotl(k1, 31)
        k1 *= _C2
        h1 ^= k1
    h1 ^= np.uint64(length)
    h2 ^= np.uint64(length)
    h1 += h2
    h2 += h1
    h1 = _fmix(h1)
    h2 = _fmix(h2)
    h1 += h2
    h2 += h1
    return np.int64(h1), np.int64(h2)


@numba.njit(inline="always")
def map_slot(a, slots):
    """The first slot probed for hash ``(a, _)``; for kernels.

    Lemire's multiply-shift range reduction of the hash's high 32 bits: a division costs
    more than the rest of a probe. Tables of 2**32 slots or more take the modulo."""
    if slots < 4294967296:
        return np.int64((np.uint64(a) >> np.uint64(32)) * np.uint64(slots) >> np.uint64(32))
    return (a & 0x7FFFFFFFFFFFFFFF) % slots


def _prefetch_row_typing(typingctx, table, row):
    """Ask the CPU to fetch row ``row`` of a 2-D array into cache; for kernels that
    probe many slots. Only a hint: no effect on any result. (The typing of the
    ``prefetch_row`` intrinsic.)"""
    sig = types.void(table, types.intp)

    def codegen(context, builder, signature, args):
        a = context.make_array(signature.args[0])(context, builder, args[0])
        i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        row_bytes = cgutils.unpack_tuple(builder, a.strides)[0]
        ptr = builder.gep(builder.bitcast(a.data, i8p), [builder.mul(args[1], row_bytes)])
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]), "llvm.prefetch.p0"
        )
        # read, high temporal locality, data cache
        builder.call(fn, [ptr, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen


# Jitted code calls an intrinsic with its operands only (numba supplies the typing
# context), while numba's stubs type the call as the definition, typing context first:
# the cast states the signature kernels call.
prefetch_row = cast("Callable[[npt.NDArray[np.int64], int], None]", intrinsic(_prefetch_row_typing))


@numba.njit(inline="always")
def map_put(table, a, b, offset, size, max_size):
    """Put hash ``(a, b)`` → ``offset`` (the larger offset wins) into ``table``; for kernels.
    Returns the new size, or -1 when the key is new and the map holds ``max_size``."""
    slots = table.shape[0]
    pos = map_slot(a, slots)
    while True:
        if table[pos, 2] == _EMPTY:
            if size >= max_size:
                return -1
            table[pos, 0] = a
            table[pos, 1] = b
            table[pos, 2] = offset
            return size + 1
        if table[pos, 0] == a and table[pos, 1] == b:
            if offset > table[pos, 2]:
                table[pos, 2] = offset
            return size
        pos += 1
        if pos == slots:
            pos = 0


@numba.njit(inline="always")
def map_get(table, a, b):
    """The offset stored for hash ``(a, b)``, or -1; for kernels."""
    slots = table.shape[0]
    pos = map_slot(a, slots)
    while True:
        o = table[pos, 2]
        if o == _EMPTY:
            return o
        if table[pos, 0] == a and table[pos, 1] == b:
            return o
        pos += 1
        if pos == slots:
            pos = 0


@numba.njit(cache=True, nogil=True)
def _murmur3_128(value_offsets, data, valid, out):
    """``out[i] = murmur3_128(value i)`` for every valid value, zeros for nulls."""
    for i in range(len(out)):
        if not valid[i]:
            out[i, 0] = 0
            out[i, 1] = 0
            continue
        start = np.int64(value_offsets[i])
        a, b = murmur3_128(data, start, np.int64(value_offsets[i + 1]) - start)
        out[i, 0] = a
        out[i, 1] = b


@numba.njit(cache=True, nogil=True)
def _put(table, hashes, valid, offsets, size, max_size):
    """Insert in order; stop before the first new key that would exceed ``max_size``.
    Returns (records consumed, new size)."""
    for i in range(len(offsets)):
        if valid[i]:
            grown = map_put(table, hashes[i, 0], hashes[i, 1], offsets[i], size, max_size)
            if grown < 0:
                return i, size
            size = grown
    return len(offsets), size


@numba.njit(cache=True, nogil=True)
def _get(table, hashes, valid, out):
    for i in range(len(out)):
        out[i] = map_get(table, hashes[i, 0], hashes[i, 1]) if valid[i] else _EMPTY


def _as_binary_array(keys: Any) -> pa.Array:
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if not isinstance(keys, pa.Array):
        keys = pa.array(keys, type=pa.binary())
    if pa.types.is_string(keys.type):
        keys = keys.cast(pa.binary())
    elif pa.types.is_large_string(keys.type):
        keys = keys.cast(pa.large_binary())
    if not (pa.types.is_binary(keys.type) or pa.types.is_large_binary(keys.type)):
        raise TypeError(f"keys must be an Arrow binary or string array, not {keys.type}")
    return keys


def valid_mask(arr: pa.Array) -> np.ndarray:
    """``True`` where ``arr`` is not null, as a numpy bool array."""
    if arr.null_count == 0:
        return np.ones(len(arr), dtype=np.bool_)
    valid: np.ndarray = arr.is_valid().to_numpy(zero_copy_only=False)
    return valid


def hash_keys(keys: Any) -> tuple[np.ndarray, np.ndarray]:
    """128-bit MurmurHash3 of every key: ``(hashes int64[n, 2], valid bool[n])``.

    Null keys get ``valid == False`` (and a zero hash). Accepts binary, large_binary,
    string and large_string arrays (strings hash as their UTF-8 bytes).
    """
    keys = _as_binary_array(keys)
    n = len(keys)
    valid = valid_mask(keys)
    out = np.empty((n, 2), dtype=np.int64)
    if n == 0:
        return out, valid
    _, off_buf, data_buf = keys.buffers()
    off_dtype = np.int64 if pa.types.is_large_binary(keys.type) else np.int32
    value_offsets = np.frombuffer(off_buf, dtype=off_dtype)[keys.offset : keys.offset + n + 1]
    data = (
        np.frombuffer(data_buf, dtype=np.uint8)
        if data_buf is not None
        else np.zeros(0, dtype=np.uint8)
    )
    _murmur3_128(value_offsets, data, valid, out)
    return out, valid


class OffsetMap:
    """Key hash → latest offset, in at most ``memory_bytes`` (see the module docstring).

    ``capacity`` is the number of distinct keys it can hold; ``size`` how many it holds;
    ``latest_offset`` the largest offset put (-1 when empty).
    """

    def __init__(self, memory_bytes: int, load_factor: float = DEFAULT_LOAD_FACTOR) -> None:
        if not 0.0 < load_factor <= 1.0:
            raise ValueError(f"load factor must be in (0, 1], got {load_factor}")
        slots = memory_bytes // ENTRY_BYTES
        if slots < 2:
            raise ValueError(
                f"an offset map needs at least {2 * ENTRY_BYTES} bytes, got {memory_bytes} "
                "(log.cleaner.dedupe.buffer.size)"
            )
        self.slots = slots
        # At least one slot stays empty: a probe for an absent key stops there.
        self.capacity = max(1, min(int(slots * load_factor), slots - 1))
        self._table = np.full((slots, 3), _EMPTY, dtype=np.int64)
        self.size = 0
        self.latest_offset = -1

    @property
    def memory_bytes(self) -> int:
        """Bytes held by the table (fixed at construction)."""
        return self._table.nbytes

    @property
    def utilization(self) -> float:
        return self.size / self.slots

    @property
    def full(self) -> bool:
        return self.size >= self.capacity

    def clear(self) -> None:
        self._table[:, 2] = _EMPTY
        self.size = 0
        self.latest_offset = -1

    def put_hashes(self, hashes: np.ndarray, valid: np.ndarray, offsets: np.ndarray) -> int:
        """Put records in offset order (ascending ``offsets``); invalid (null-key) records are
        skipped. Returns how many leading records were consumed: fewer than ``len(offsets)``
        only when the map is full, and then record ``[returned]`` was not put."""
        offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        consumed, self.size = _put(self._table, hashes, valid, offsets, self.size, self.capacity)
        if consumed:
            self.latest_offset = max(self.latest_offset, int(offsets[consumed - 1]))
        return int(consumed)

    @property
    def table(self) -> np.ndarray:
        """The slots, for kernels that put and look up in place with ``map_put`` and
        ``map_get``; a kernel that puts reports back through ``note_put``."""
        return self._table

    def note_put(self, size: int, latest_offset: int) -> None:
        """Record what a kernel's ``map_put`` calls did: the new size and the last
        offset put (-1 for none)."""
        self.size = size
        self.latest_offset = max(self.latest_offset, latest_offset)

    def put(self, keys: Any, offsets: np.ndarray) -> int:
        """``put_hashes`` over the hashes of an Arrow array of keys."""
        hashes, valid = hash_keys(keys)
        return self.put_hashes(hashes, valid, offsets)

    def get_hashes(self, hashes: np.ndarray, valid: np.ndarray) -> np.ndarray:
        """Latest offset of each key, ``-1`` where absent or null."""
        out = np.empty(len(valid), dtype=np.int64)
        _get(self._table, hashes, valid, out)
        return out

    def get(self, keys: Any) -> np.ndarray:
        hashes, valid = hash_keys(keys)
        return self.get_hashes(hashes, valid)

    def __repr__(self) -> str:
        return (
            f"OffsetMap(size={self.size}, capacity={self.capacity}, "
            f"memory_bytes={self.memory_bytes}, latest_offset={self.latest_offset})"
        )
