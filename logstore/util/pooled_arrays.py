"""Uninitialised numpy arrays backed by Arrow's default memory pool.

The read path allocates a few megabytes per chunk (the chunk read from a segment, and
the decoded columns handed on as Arrow arrays) and drops them a moment later. numpy's
large allocations are fresh ``mmap`` pages each time: the kernel zeroes and faults in
every page again, which cost a source task about a fifth of its CPU (``perf``: page
clearing and faults). Arrow's pool (mimalloc or jemalloc) keeps freed memory and hands
it back without a fault, and an Arrow array built over such an array holds the pool
buffer, so it returns to the pool when Spark drops the batch.

pyarrow is imported on the first call: the segment code imports this module, and
commands and appends that never read a chunk must start without pyarrow
(``tests/test_startup_imports.py``).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


def pooled_empty(n: int, dtype: npt.DTypeLike) -> np.ndarray:
    """A writable, uninitialised, C-contiguous array of ``n`` items of ``dtype`` from
    Arrow's default memory pool (64-byte aligned), as ``np.empty`` would give."""
    import pyarrow as pa  # see the module docstring

    dt = np.dtype(dtype)
    return np.frombuffer(pa.allocate_buffer(n * dt.itemsize), dt)
