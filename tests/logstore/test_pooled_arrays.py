"""The read path's buffers come from Arrow's memory pool (``util.pooled_arrays``): the
chunk a segment read fills and the decoded columns, so that a source task's memory is
recycled rather than faulted in fresh from the kernel for every chunk."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from kafka_batches import BASE_TS

from seglog.logstore.config.config import LogConfig
from seglog.logstore.log.log import Log
from seglog.logstore.records.record_codec import decode_batches, encode_batches
from seglog.logstore.util.clock import MockClock
from seglog.logstore.util.pooled_arrays import pooled_empty

VALUE = b"v" * 1000
ROWS = 2000  # 2 MB of values


def _pool_bytes() -> int:
    return pa.default_memory_pool().bytes_allocated()


def test_pooled_empty_is_a_writable_array_held_by_the_pool():
    before = _pool_bytes()
    a = pooled_empty(1 << 20, np.int64)
    assert a.shape == (1 << 20,) and a.dtype == np.int64
    assert a.flags.writeable and a.flags.c_contiguous
    a[:] = 7  # writable, and as long as asked for
    assert int(a.sum()) == 7 << 20
    assert _pool_bytes() - before >= 8 << 20
    del a
    assert _pool_bytes() - before < 8 << 20  # back to the pool with the array
    assert pooled_empty(0, np.uint8).shape == (0,)


def test_decoded_columns_live_in_the_pool_until_the_batch_is_dropped():
    buf = encode_batches(pa.array([VALUE] * ROWS), keys=pa.array([b"k"] * ROWS))
    before = _pool_bytes()
    records = decode_batches(buf, include_headers=False)
    assert records.column("value").to_pylist() == [VALUE] * ROWS
    # the values' data buffer (worst-case sized) is the pool's, not numpy's
    assert _pool_bytes() - before >= ROWS * len(VALUE)
    del records
    assert _pool_bytes() - before < ROWS * len(VALUE)


def test_a_segment_read_fills_a_chunk_from_the_pool(tmp_path):
    cfg = LogConfig.from_properties({"message.timestamp.after.max.ms": str(2**62)})
    log = Log.open(tmp_path / "events-0", cfg, clock=MockClock(BASE_TS))
    try:
        log.append(
            encode_batches(
                pa.array([VALUE] * ROWS), timestamps=pa.array([BASE_TS] * ROWS, pa.int64())
            )
        )
        log.flush()
        chunk_bytes = 4 << 20
        before = _pool_bytes()
        chunks = list(log.read_chunks(0, ROWS, chunk_bytes))
        assert sum(len(c) for c in chunks) > ROWS * len(VALUE)
        assert _pool_bytes() - before >= chunk_bytes
        assert decode_batches(chunks[0]).column("value").to_pylist()[:2] == [VALUE] * 2
        del chunks
        assert _pool_bytes() - before < chunk_bytes
    finally:
        log.close()
