"""Kafka's default partitioner, vectorised over Arrow arrays.

A keyed record goes to ``toPositive(murmur2(keyBytes)) % numPartitions``, exactly as
Kafka's ``BuiltInPartitioner.partitionForKey`` (Java ``Utils.murmur2``, seed
``0x9747b28c``, ``toPositive(h) = h & 0x7fffffff``), so seglog and Kafka agree on where a
key lives.

Keyless records: Kafka's producer uses a "sticky" partition that depends on timing,
which exactly-once replay cannot afford. seglog places a keyless record by the murmur2
hash of its *value* instead: the placement depends only on the record's content, not on
how Spark split or ordered the rows, so a replayed micro-batch puts every record on the
same partition as the first attempt did, whatever the task layout (records with equal
values share a partition, which keeps multisets per partition identical).

>>> import pyarrow as pa
>>> murmur2(b"21")
-973932308
>>> partitions_for_keys(pa.array([b"21", None]), 3).tolist()
[0, -1]

Thread-safe: pure functions. The numba kernel is compiled once (argument dtypes are
normalised) and cached on disk.
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np
import pyarrow as pa
from numba import njit

from seglog.logstore.records.kernel_cache import first_call

SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK32 = 0xFFFFFFFF

__all__ = ["murmur2", "murmur2_array", "partitions_for_keys", "assign_partitions", "to_positive"]


@njit(cache=True)
def _murmur2_kernel(offsets, data, out):
    """``out[i]`` = Kafka's murmur2 of ``data[offsets[i]:offsets[i+1]]`` as an unsigned
    32-bit value held in int64 (arithmetic in uint64, masked, to mimic Java's int32)."""
    m = np.uint64(_M)
    mask = np.uint64(_MASK32)
    for i in range(out.shape[0]):
        start = offsets[i]
        length = offsets[i + 1] - start
        h = (np.uint64(SEED) ^ np.uint64(length)) & mask
        n4 = length // 4
        for j in range(n4):
            p = start + 4 * j
            k = (np.uint64(data[p]) | (np.uint64(data[p + 1]) << np.uint64(8))
                 | (np.uint64(data[p + 2]) << np.uint64(16))
                 | (np.uint64(data[p + 3]) << np.uint64(24)))
            k = (k * m) & mask
            k ^= k >> np.uint64(24)
            k = (k * m) & mask
            h = (h * m) & mask
            h ^= k
        tail = start + (length & ~3)
        rem = length % 4
        if rem == 3:
            h ^= np.uint64(data[tail + 2]) << np.uint64(16)
        if rem >= 2:
            h ^= np.uint64(data[tail + 1]) << np.uint64(8)
        if rem >= 1:
            h ^= np.uint64(data[tail])
            h = (h * m) & mask
        h ^= h >> np.uint64(13)
        h = (h * m) & mask
        h ^= h >> np.uint64(15)
        out[i] = np.int64(h)


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` of one byte string, as a signed 32-bit int (like Java)."""
    h = murmur2_array(pa.array([bytes(data)], pa.binary()))[0]
    return int(h)


def _buffers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(int64 offsets of length n+1 relative to ``data``, uint8 data) of a binary-like array."""
    if (pa.types.is_binary_view(arr.type) or pa.types.is_string_view(arr.type)
            or pa.types.is_fixed_size_binary(arr.type)):
        arr = arr.cast(pa.large_binary())
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        arr = arr.cast(pa.large_binary() if pa.types.is_large_string(arr.type) else pa.binary())
    if not (pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type)):
        raise TypeError(f"expected a binary or string array, got {arr.type}")
    offsets_dtype = np.int64 if pa.types.is_large_binary(arr.type) else np.int32
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=offsets_dtype)[arr.offset:arr.offset + len(arr) + 1]
    data = (np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None
            else np.zeros(0, dtype=np.uint8))
    offsets = offsets.astype(np.int64)  # one kernel signature; n+1 words is cheap
    offsets.flags.writeable = False
    if data.flags.writeable:
        data = data.view()
        data.flags.writeable = False
    return offsets, data


def murmur2_array(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """murmur2 of every element (signed int32 values, as Java returns them); a null
    element hashes as the empty byte string."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if len(arr) == 0:
        return np.zeros(0, dtype=np.int32)
    offsets, data = _buffers(arr)
    out = np.empty(len(arr), dtype=np.int64)
    first_call("partitioner._murmur2_kernel", _murmur2_kernel, offsets, data, out)
    if arr.null_count:
        # A null slot's offsets may span bytes in Arrow; hash it as empty instead.
        empty = np.int64(murmur2_empty())
        out[arr.is_null().to_numpy(zero_copy_only=False)] = empty
    return out.astype(np.uint32).view(np.int32)


_EMPTY_HASH: list[int] = []


def murmur2_empty() -> int:
    """murmur2 of b"" as an unsigned 32-bit value (cached)."""
    if not _EMPTY_HASH:
        out = np.empty(1, dtype=np.int64)
        offsets = np.zeros(2, dtype=np.int64)
        offsets.flags.writeable = False
        data = np.zeros(0, dtype=np.uint8)
        data.flags.writeable = False
        _murmur2_kernel(offsets, data, out)
        _EMPTY_HASH.append(int(out[0]))
    return _EMPTY_HASH[0]


_H = TypeVar("_H", np.ndarray, int)


def to_positive(h: _H) -> _H:
    """Kafka's ``Utils.toPositive``: clear the sign bit."""
    return h & 0x7FFFFFFF


def partitions_for_keys(keys: pa.Array | pa.ChunkedArray,
                        num_partitions: int | np.ndarray) -> np.ndarray:
    """Kafka's partition for each key (int32); -1 where the key is null.

    ``num_partitions`` is one count for all rows or one per row (rows bound for
    different topics)."""
    h = to_positive(murmur2_array(keys).astype(np.int64))
    out = (h % np.asarray(num_partitions, dtype=np.int64)).astype(np.int32)
    if keys.null_count:
        out[_nulls(keys)] = -1
    return out


def assign_partitions(keys: pa.Array | pa.ChunkedArray | None,
                      values: pa.Array | pa.ChunkedArray,
                      num_partitions: int | np.ndarray) -> np.ndarray:
    """The partition of every row: murmur2 of the key when there is one (Kafka's
    placement), else murmur2 of the value (a deterministic, content-only spread)."""
    counts = np.asarray(num_partitions, dtype=np.int64)
    if keys is None:
        return _by_value(values, counts)
    out = partitions_for_keys(keys, counts)
    keyless = np.flatnonzero(out < 0)
    if len(keyless):
        # Hash only the keyless rows' values: keyed rows never need theirs.
        idx = pa.array(keyless)
        sub_counts = counts if counts.ndim == 0 else counts[keyless]
        out[keyless] = _by_value(values.take(idx), sub_counts)
    return out


def _by_value(values: pa.Array | pa.ChunkedArray, counts: np.ndarray) -> np.ndarray:
    partitions: np.ndarray = to_positive(murmur2_array(values).astype(np.int64)) % counts
    return partitions.astype(np.int32)


def _nulls(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    nulls: np.ndarray = arr.is_null().to_numpy(zero_copy_only=False)
    return nulls
