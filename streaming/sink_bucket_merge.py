"""Merging a bucket sink's fragments while the query runs, in its write tasks.

Every (task, partition, micro-batch) is its own segment object, so a long-lived query
would leave a partition of tiny segments, and a reader one GET per upstream task. The
driver must not carry data, and a separate ``seglog maintain`` process is not there
for a running query. So task 0 of each micro-batch, once its own rows are uploaded,
merges committed runs of small segments of the topics it writes
(``bucket_merge.plan_small_merges``: at least ``MERGE_MIN_SEGMENTS`` adjacent segments
under half of ``MERGE_TARGET_BYTES``, into at most that), rewriting at most
``MERGE_BYTES_PER_TASK`` source bytes per task, each run committed as a ``merge``
(remove + add; the offsets never move). The driver's maintenance (retention, collection)
then deletes the merged-away fragments after ``file.delete.delay.ms``.

Several writers may merge one partition at once (another query, a speculative attempt
of task 0, ``seglog maintain``): the commits are optimistic, and a merge whose sources
left the log meanwhile is abandoned (``bucket_merge``). A merge is best effort: its
failure is logged and never fails the task, whose rows are already staged.

Not thread-safe: called by one task.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from seglog.logstore.bucket.bucket_collect import orphan_grace_ms
from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.bucket.bucket_merge import merge_partition, plan_small_merges
from seglog.logstore.util.clock import Clock

logger = logging.getLogger(__name__)

__all__ = ["merge_small_segments", "MERGE_MIN_SEGMENTS", "MERGE_TARGET_BYTES",
           "MERGE_BYTES_PER_TASK", "MERGING_TASK"]

MERGE_MIN_SEGMENTS = 8
"""A partition is merged once this many small segments lie next to each other."""
MERGE_TARGET_BYTES = 64 << 20
"""The largest segment a task's merge writes (the topic's ``segment.bytes`` if smaller)."""
MERGE_BYTES_PER_TASK = 256 << 20
"""The most source bytes one task rewrites: a bound on what merging adds to a batch."""
MERGING_TASK = 0
"""The Spark partition id of the task that merges (every non-empty batch has one)."""


def merge_small_segments(mgr: BucketLogManager, topics: Iterable[str], clock: Clock) -> int:
    """Merge runs of small committed segments of ``topics``; returns segments merged
    away. ``mgr``'s state is the one the task refreshed when it started."""
    budget = MERGE_BYTES_PER_TASK
    merged = 0
    state = mgr.state
    for topic in sorted(set(topics)):
        spec = state.topics.get(topic)
        if spec is None:
            continue
        config = mgr.topic_config(topic)
        for partition in range(spec.partitions):
            ps = state.partition(topic, partition)
            if ps is None or budget <= 0:
                continue
            runs = []
            for run in plan_small_merges(ps, config, target_bytes=MERGE_TARGET_BYTES,
                                         min_segments=MERGE_MIN_SEGMENTS):
                size = sum(s.size for s in run)
                if size <= budget:
                    runs.append(run)
                    budget -= size
            if not runs:
                continue
            # Half the grace the collector gives an upload no commit references (this
            # topic's delay: never more than the collector's, which takes the largest).
            max_age = orphan_grace_ms(config.file_delete_delay_ms) // 2
            result = merge_partition(mgr.commits, topic, partition, config, clock, max_age,
                                     mgr.sync_logs, runs=runs)
            merged += result.merged
    return merged
