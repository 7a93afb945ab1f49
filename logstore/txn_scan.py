"""numba kernels for transactions: find producer batches, drop aborted ones.

Both walk batch headers over a whole buffer per call, so neither costs Python per batch:

* ``producer_batches`` records the v2 batches that carry a producer id (position, size,
  offsets, attributes, producer id/epoch, base sequence, max timestamp). Rebuilding
  producer state or a ``.txnindex`` needs only those; a log written without producer
  ids yields no rows at all.
* ``drop_aborted`` copies the batches of a buffer to ``out`` except transactional data
  batches of aborted transactions: a batch of producer ``p`` starting at offset ``o`` is
  aborted when an aborted transaction ``(p, first, last)`` has ``first <= o <= last``
  (a transaction's batches lie between its first offset and its abort marker; this is
  what Kafka's consumer decides from the same entries and the markers).

Thread-safety: pure functions (they release the GIL).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .segment_scan import _be32, _be64

OK = 0
FULL = 1  # ``out`` is full: call again from the returned position
INVALID = 2  # an impossible header at the returned position

COLUMNS = ("position", "size", "base_offset", "last_offset", "attributes", "producer_id",
           "producer_epoch", "base_sequence", "max_timestamp")


@njit(cache=True, nogil=True)
def _be16(buf, p):
    return np.int16((np.uint16(buf[p]) << 8) | np.uint16(buf[p + 1]))


@njit(cache=True, nogil=True)
def producer_batches(buf, n, start, out):
    """Walk whole batches of ``buf[start:n]``; rows of ``out`` (int64, (cap, 9)) get the
    batches with a producer id. Returns (rows, position after the last batch walked,
    status)."""
    p = start
    count = 0
    cap = out.shape[0]
    while n - p >= 17:
        magic = buf[p + 16]
        size = np.int64(_be32(buf, p + 8)) + 12
        if magic > 2 or size < 26 or (magic == 2 and size < 61):
            return count, p, INVALID
        if size > n - p:
            break
        if magic == 2:
            pid = _be64(buf, p + 43)
            if pid >= 0:
                if count == cap:
                    return count, p, FULL
                base = _be64(buf, p)
                out[count, 0] = p
                out[count, 1] = size
                out[count, 2] = base
                out[count, 3] = base + np.int64(_be32(buf, p + 23))
                out[count, 4] = np.int64(_be16(buf, p + 21)) & 0xFFFF
                out[count, 5] = pid
                out[count, 6] = np.int64(_be16(buf, p + 51))
                out[count, 7] = np.int64(_be32(buf, p + 53))
                out[count, 8] = _be64(buf, p + 35)
                count += 1
        p += size
    return count, p, OK


@njit(cache=True, nogil=True)
def drop_aborted(buf, n, pids, firsts, lasts, out):
    """Copy the batches of ``buf[:n]`` to ``out`` but aborted transactional data
    batches. ``pids``/``firsts``/``lasts``: aborted transactions sorted by (pid, first).
    Returns the bytes written, or -1 - position for an impossible header."""
    p = 0
    w = 0
    m = pids.shape[0]
    while n - p >= 17:
        magic = buf[p + 16]
        size = np.int64(_be32(buf, p + 8)) + 12
        if magic > 2 or size < 26 or (magic == 2 and size < 61) or size > n - p:
            return -1 - p
        keep = True
        if magic == 2:
            attrs = (np.int64(_be16(buf, p + 21)) & 0xFFFF)
            # transactional (0x10) and not control (0x20)
            if (attrs & 0x30) == 0x10:
                pid = _be64(buf, p + 43)
                base = _be64(buf, p)
                lo = 0
                hi = m
                while lo < hi:  # first entry with (pid, first) > (pid, base)
                    mid = (lo + hi) // 2
                    if pids[mid] < pid or (pids[mid] == pid and firsts[mid] <= base):
                        lo = mid + 1
                    else:
                        hi = mid
                if lo > 0 and pids[lo - 1] == pid and lasts[lo - 1] >= base:
                    keep = False
        if keep:
            out[w:w + size] = buf[p:p + size]
            w += size
        p += size
    return w
