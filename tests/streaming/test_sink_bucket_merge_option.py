"""The bucket sink's ``mergeSmallSegments`` option: task 0 merges committed runs of small
segments by default; ``false`` leaves them to ``seglog maintain``."""

from __future__ import annotations

import pytest
from test_sink_bucket import TOPIC, check_exactly_once, memory_uri, options, stage, values

from seglog.logstore.errors import ConfigError
from seglog.logstore.manager.log_manager import LogManager
from seglog.streaming.sink_bucket_commit import commit
from seglog.streaming.sink_bucket_merge import MERGE_MIN_SEGMENTS

TASKS = 3
BATCHES = MERGE_MIN_SEGMENTS + 2


def write_batches(**extra: str) -> tuple[str, list[bytes]]:
    """``BATCHES`` micro-batches of ``TASKS`` tasks into 2 partitions: each partition gets
    ``TASKS`` small fragments per batch."""
    uri = memory_uri()
    opts = options(uri, numPartitions="2", **extra)
    expected: list[bytes] = []
    for b in range(BATCHES):
        commit([stage(opts, b, task=t, n=30, tag=f"t{t}") for t in range(TASKS)], b, opts)
        expected += [v for t in range(TASKS) for v in values(b, 30, f"t{t}")]
    return uri, expected


def segment_counts(uri: str) -> list[int]:
    with LogManager(uri, read_only=True) as mgr:
        return [len(mgr.state.partition(TOPIC, p).segments) for p in (0, 1)]


def test_by_default_task_0_merges_small_segments():
    uri, expected = write_batches()
    assert all(n < MERGE_MIN_SEGMENTS for n in segment_counts(uri))
    check_exactly_once(uri, expected)


def test_merge_small_segments_false_leaves_every_fragment_to_seglog_maintain():
    uri, expected = write_batches(mergeSmallSegments="false")
    assert segment_counts(uri) == [TASKS * BATCHES] * 2  # one segment per fragment
    check_exactly_once(uri, expected)
    with LogManager(uri) as mgr:  # what `seglog maintain` runs
        mgr.run_maintenance()
    assert segment_counts(uri) == [1, 1]
    check_exactly_once(uri, expected)


def test_merge_small_segments_takes_true_or_false_only():
    with pytest.raises(ConfigError, match="'mergeSmallSegments'.*true or false"):
        options(memory_uri(), mergeSmallSegments="sometimes")
