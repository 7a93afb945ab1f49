"""``cleanable_log.CleanableLog``: the cleaner's one view of a log, implemented by a local
``Log`` (its last segment active, never cleaned) and a bucket's ``CompactedPartition``
(no active segment: cleanable up to the log end). The same appends give both the same
cleanable segments and the same cleanable range."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from bucket_helpers import memory_uri

from seglog.logstore.bucket.bucket_compact import CompactedPartition
from seglog.logstore.cleaner.cleanable_log import cleanable_segments
from seglog.logstore.cleaner.cleaner_manager import LogCleanerManager
from seglog.logstore.config.config import LogConfig
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches
from seglog.logstore.util.clock import MockClock

TS = 1_700_000_000_000
COMPACT = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01}


def keyed(i: int) -> bytes:
    keys = ["a", "b", "a", "c"]
    return bytes(
        encode_batches(
            pa.array([f"{k}@{i}".encode() for k in keys]),
            keys=pa.array([k.encode() for k in keys]),
            timestamps=pa.array([TS + i] * len(keys), pa.int64()),
        )
    )


def test_a_local_log_and_a_bucket_partition_offer_the_cleaner_the_same_range(tmp_path: Path):
    clock = MockClock(TS + 10_000)
    with LogManager([tmp_path / "local"], clock=clock) as local:
        local.create_topic("c", 1, COMPACT)
        log = local.get_log("c", 0)
        for i in range(3):
            local.append("c", 0, keyed(i))
            log.roll()  # each batch its own inactive segment; an empty active one at 12
        segs, uncleaned = cleanable_segments(log)
        assert ([s.base_offset for s in segs], uncleaned) == ([0, 4, 8], 12)
        local_range = LogCleanerManager(clock).cleanable_range(log)

    bucket = LogManager(memory_uri(), clock=clock)
    bucket.create_topic("c", 1, COMPACT)
    for i in range(3):
        bucket.append("c", 0, keyed(i))
    bucket.refresh()
    ps = bucket.state.partition("c", 0)
    assert ps is not None
    partition = CompactedPartition(
        bucket.storage, tmp_path / "work", "c", 0, LogConfig.from_properties(COMPACT), ps, clock
    )
    try:
        assert partition.active_segment is None
        segs, uncleaned = cleanable_segments(partition)
        assert ([s.base_offset for s in segs], uncleaned) == ([0, 4, 8], 12)
        (work_dir,) = (tmp_path / "work").iterdir()
        assert list(work_dir.iterdir()) == []  # no stand-in "active" segment written
        bucket_range = LogCleanerManager(clock).cleanable_range(partition)
    finally:
        partition.close()
    assert bucket_range == local_range
    assert (bucket_range.first_dirty_offset, bucket_range.first_uncleanable_offset) == (0, 12)
