"""BucketLog (logstore/bucket_log.py) over memory://: the state a partition's reader keeps
(never older than one it already had), reads that meet vanished objects, deleted topics."""

from __future__ import annotations

import threading

import pyarrow as pa
from bucket_helpers import memory_uri

from seglog.logstore.bucket_manager import BucketLogManager
from seglog.logstore.record_codec import encode_batches

TS = 1_700_000_000_000


def batches(n: int, start: int = 0) -> bytearray:
    return encode_batches(pa.array([b"v%d" % i for i in range(start, start + n)]),
                          timestamps=pa.array([TS + i for i in range(start, start + n)],
                                              pa.int64()))


def test_a_slow_sync_never_takes_the_high_watermark_back():
    """A thread that read the state before an append stores it after the append's sync."""
    mgr = BucketLogManager(memory_uri())
    mgr.create_topic("t", 1)
    mgr.append("t", 0, batches(3))
    log = mgr.get_log("t", 0)
    fetched, go = threading.Event(), threading.Event()
    real = log._source

    def slow_source(refresh: bool):
        got = real(refresh)
        if threading.current_thread().name == "slow-reader":
            fetched.set()
            go.wait()
        return got

    log._source = slow_source
    slow = threading.Thread(target=log.sync, name="slow-reader")
    slow.start()
    fetched.wait()
    mgr.append("t", 0, batches(4, 3))  # the manager syncs its logs: hw 7
    assert log.high_watermark == 7
    go.set()
    slow.join()
    assert log.high_watermark == 7
    assert log.read(3).next_offset == 7
