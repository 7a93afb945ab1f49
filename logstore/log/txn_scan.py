"""numba kernel for read_committed reads: drop the batches of aborted transactions.

``drop_aborted`` takes a header table (``record_format_kernels.header_table``) of a
buffer of whole batches and copies them to ``out`` except transactional data batches
of aborted transactions: a batch of producer ``p`` starting at offset ``o`` is aborted
when an aborted transaction ``(p, first, last)`` has ``first <= o <= last`` (a
transaction's batches lie between its first offset and its abort marker; this is what
Kafka's consumer decides from the same entries and the markers).

Thread-safety: pure functions (they release the GIL).
"""

from __future__ import annotations

from numba import njit

from ..records.record_format import (
    CONTROL_MASK,
    H_ATTRIBUTES,
    H_BASE_OFFSET,
    H_MAGIC,
    H_POSITION,
    H_PRODUCER_ID,
    H_SIZE,
    MAGIC_V2,
    TRANSACTIONAL_MASK,
)
from ..records.record_format_kernels import copy_bytes


@njit(cache=True, nogil=True)
def drop_aborted(buf, table, count, pids, firsts, lasts, out, w):
    """Copy the batches of ``table[:count]`` (rows over ``buf``) to ``out`` from
    position ``w`` on, but aborted transactional data batches. ``pids``/``firsts``/
    ``lasts``: aborted transactions sorted by (pid, first). Returns the new ``w``."""
    m = pids.shape[0]
    for b in range(count):
        p = table[b, H_POSITION]
        size = table[b, H_SIZE]
        keep = True
        attrs = table[b, H_ATTRIBUTES]
        if (table[b, H_MAGIC] == MAGIC_V2
                and (attrs & (TRANSACTIONAL_MASK | CONTROL_MASK)) == TRANSACTIONAL_MASK):
            pid = table[b, H_PRODUCER_ID]
            base = table[b, H_BASE_OFFSET]
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
            copy_bytes(out, w, buf, p, size)
            w += size
    return w
