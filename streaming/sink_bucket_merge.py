"""Merging a bucket sink's small fragments: after the commit, by the driver, by count and
age; or (``mergeSmallSegments=true``) in task 0 of every micro-batch.

Every (task, partition, micro-batch) is its own segment object, so a long-lived query
would leave a partition of tiny segments, and a reader one GET per upstream task and
micro-batch. A merge reads those bytes back and writes them again, so it runs where it
pays and off the micro-batch's critical path:

- **After the commit** (``merge_after_commit``, the default): once the batch is
  published (and its ledger entry written), the driver's background merger
  (``sink_bucket_merger``, asked only when ``merges_due``) merges the partitions the batch
  wrote whose stretch of adjacent segments under ``mergeSmallSegmentBytes`` holds
  ``mergeMinSegments`` or more (``bucket_merge.plan_deferred_merges``: a reader's cost is
  a request per segment, so the count is the trigger; segments of that size or more cost
  a reader little more merged than not, and are never rewritten). When the sink's
  maintenance is due (``maintenanceIntervalMs``), every partition of the topics it wrote
  is merged from 2 small segments on: no small segment waits much longer than that
  interval (the age bound). At most ``MERGE_BYTES_PER_TASK`` source bytes pass through
  the driver per commit.
- **In task 0** (``merge_small_segments``, opt-in with ``mergeSmallSegments=true``, the
  default before): once its own rows are uploaded, task 0 merges runs of at least
  ``MERGE_MIN_SEGMENTS`` adjacent segments under half of ``MERGE_TARGET_BYTES``
  (``bucket_merge.plan_small_merges``) of the topics it wrote, at most
  ``MERGE_BYTES_PER_TASK`` source bytes. Every micro-batch waits for it.

Each run is committed as a ``merge`` (remove + add; the offsets never move), and the
merged-away fragments are deleted by the collector after ``file.delete.delay.ms``.
Several writers may merge one partition at once (another query, a speculative attempt
of task 0, ``seglog maintain``): the commits are optimistic, and a merge whose sources
left the log meanwhile (retention, another merge) is abandoned (``bucket_merge``); an
append committed meanwhile stays after the merged segment. A merge is best effort: its
failure is logged and never fails the batch, whose rows are already staged or published.

Not thread-safe: called by one task, or by the driver's background merger (one thread
per bucket, its own manager).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from seglog.logstore.bucket.bucket_collect import orphan_grace_ms
from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.bucket.bucket_merge import (
    merge_partition,
    plan_deferred_merges,
    plan_small_merges,
)
from seglog.logstore.bucket.bucket_state import PartitionState, SegmentEntry
from seglog.logstore.config.config import LogConfig
from seglog.logstore.errors import SeglogError
from seglog.logstore.util.clock import Clock

from .sink_options import SinkOptions

logger = logging.getLogger(__name__)

__all__ = [
    "merge_small_segments",
    "merge_after_commit",
    "merge_written",
    "merges_due",
    "MERGE_MIN_SEGMENTS",
    "MERGE_TARGET_BYTES",
    "MERGE_BYTES_PER_TASK",
    "MERGING_TASK",
]

MERGE_MIN_SEGMENTS = 8
"""In-task merge: a partition is merged once this many small segments lie side by side."""
MERGE_TARGET_BYTES = 64 << 20
"""The largest segment a merge writes (the topic's ``segment.bytes`` if smaller)."""
MERGE_BYTES_PER_TASK = 256 << 20
"""The most source bytes one task (or one commit's merge) rewrites: a bound on what
merging adds to a batch, and on the bytes through the driver."""
MERGING_TASK = 0
"""The Spark partition id of the task that merges (every non-empty batch has one)."""

_Plan = Callable[[PartitionState, LogConfig], list[tuple[SegmentEntry, ...]]]


def merge_small_segments(mgr: BucketLogManager, topics: Iterable[str], clock: Clock) -> int:
    """In task 0: merge runs of small committed segments of ``topics``; returns segments
    merged away. ``mgr``'s state is the one the task refreshed when it started."""
    state = mgr.state
    pairs = [
        (t, p)
        for t in sorted(set(topics))
        if (spec := state.topics.get(t)) is not None
        for p in range(spec.partitions)
    ]
    return _merge(
        mgr,
        pairs,
        clock,
        lambda ps, config: plan_small_merges(
            ps, config, target_bytes=MERGE_TARGET_BYTES, min_segments=MERGE_MIN_SEGMENTS
        ),
    )


def merge_after_commit(
    mgr: BucketLogManager,
    written: Iterable[tuple[str, int]],
    clock: Clock,
    *,
    min_segments: int,
    small_bytes: int,
    age_pass: bool,
) -> int:
    """In the driver, after a commit: merge the small segments of the ``written``
    partitions that reached ``min_segments`` side by side; with ``age_pass`` (the sink's
    maintenance is due), of every partition of their topics from 2 on. Returns segments
    merged away. ``mgr``'s state is the one the commit left."""
    pairs, plan = _deferred(mgr, written, min_segments, small_bytes, age_pass)
    return _merge(mgr, pairs, clock, plan)


def merges_due(
    mgr: BucketLogManager,
    options: SinkOptions,
    written: Iterable[tuple[str, int]],
    *,
    age_pass: bool,
) -> bool:
    """Whether ``merge_written`` would merge anything on ``mgr``'s state (no request):
    the commit asks its background merger only then, so a micro-batch with nothing due
    costs the store no request for merging."""
    pairs, plan = _deferred(
        mgr, written, options.merge_min_segments, options.merge_small_segment_bytes, age_pass
    )
    state = mgr.state
    return any(
        (ps := state.partition(t, p)) is not None and plan(ps, mgr.topic_config(t))
        for t, p in pairs
    )


def _deferred(
    mgr: BucketLogManager,
    written: Iterable[tuple[str, int]],
    min_segments: int,
    small_bytes: int,
    age_pass: bool,
) -> tuple[list[tuple[str, int]], _Plan]:
    """The partitions a merge after the commit looks at, and its plan for each."""
    state = mgr.state
    pairs = set(written)
    if age_pass:
        min_segments = 2
        pairs |= {
            (t, p)
            for t, _ in pairs
            if (spec := state.topics.get(t)) is not None
            for p in range(spec.partitions)
        }

    def plan(ps: PartitionState, config: LogConfig) -> list[tuple[SegmentEntry, ...]]:
        return plan_deferred_merges(
            ps,
            config,
            small_bytes=small_bytes,
            target_bytes=MERGE_TARGET_BYTES,
            min_segments=min_segments,
        )

    return sorted(pairs), plan


def merge_written(
    mgr: BucketLogManager,
    options: SinkOptions,
    sink_id: str,
    batch_id: int,
    written: Iterable[tuple[str, int]],
    clock: Clock,
    *,
    age_pass: bool,
) -> int:
    """``merge_after_commit`` with the sink's options, best effort: the batch is published,
    so a failure is logged and the next commit tries again."""
    try:
        return merge_after_commit(
            mgr,
            written,
            clock,
            min_segments=options.merge_min_segments,
            small_bytes=options.merge_small_segment_bytes,
            age_pass=age_pass,
        )
    except (SeglogError, OSError) as e:
        # OSError too, as the sink's maintenance: an object another maintainer's collector
        # deleted meanwhile must not fail a query whose batch is already published.
        logger.warning(
            "sink %s published batch %d to %s, but merging its small segments "
            "failed (the next commit retries): %s",
            sink_id,
            batch_id,
            mgr.uri,
            e,
        )
        return 0


def _merge(
    mgr: BucketLogManager, pairs: Iterable[tuple[str, int]], clock: Clock, plan: _Plan
) -> int:
    """Plan each partition of ``pairs`` on ``mgr``'s state and merge what fits the budget
    (one commit per partition)."""
    budget = MERGE_BYTES_PER_TASK
    merged = 0
    state = mgr.state
    for topic, partition in pairs:
        ps = state.partition(topic, partition)
        if ps is None or budget <= 0:
            continue
        config = mgr.topic_config(topic)
        runs = []
        for run in plan(ps, config):
            size = sum(s.size for s in run)
            if size <= budget:
                runs.append(run)
                budget -= size
        if not runs:
            continue
        # Half the grace the collector gives an upload no commit references (this topic's
        # delay: never more than the collector's, which takes the largest).
        max_age = orphan_grace_ms(config.file_delete_delay_ms) // 2
        result = merge_partition(mgr.commits, topic, partition, config, clock, max_age, runs=runs)
        merged += result.merged
    return merged
