"""A bucket partition's read plan (``log_dirs_api.ReadPlan``) and the log that reads it.

A source task used to look at its partition's commit log (a LIST, and GETs of the
commits it had not read) before it GETs the segments of its offset range: two round
trips, one after the other. The driver's planner already holds what that look finds: its
read-only manager refreshed the state when it computed the micro-batch's offsets. So
``plan_read`` takes from the state held now (no request) the committed segments a range
is in, and ``planned_log`` is a read-only ``BucketLog`` over exactly those, with no
commit log behind it: the task's read is its segments' GETs, made at once
(``bucket_read_window``), one round trip.

What a plan names of a segment: what the read path opens it by (key, offsets, size,
``offset_delta``, max timestamp) and its offset index only where the read uses one: the
first segment's (the range starts inside it) and the last one's (it bounds the last GET).
An index inline in the commit entry costs nothing; an index object is kept only for a
segment larger than ``WHOLE_OBJECT_BYTES`` (a smaller one is read whole from its start,
at once, rather than after a GET of its index). The segments between are read whole from
their start: no index. No time index: a range with a timestamp seek is not planned.

What a planned log does not do: look again. Objects are immutable and their keys never
reused, so what a plan names reads the bytes the state it was made from holds, until the
object is gone (retention, compaction, a merge past its grace, a deleted topic's objects
collected): ``MissingSegmentError`` at once (no second attempt: there is no newer state
to take), and the caller reads the rest as it would have without a plan, looking at the
log first (``streaming.source_read``).
"""

from __future__ import annotations

import bisect

from ..config.config import LogConfig
from ..log_dirs_api import PlannedSegment, ReadPlan
from ..storage.storage import Storage
from .bucket_log import BucketLog
from .bucket_state import PartitionState, SegmentEntry

MAX_PLANNED_SEGMENTS = 64
"""The most segments one plan names (a range over more is not planned: it reads for many
round trips anyway, and its plan would grow the task's input partition)."""
WHOLE_OBJECT_BYTES = 1 << 20
"""A first or last segment up to this size whose index is an object is read whole from
its start (one GET) instead of GETting its index first (two, one after the other)."""

_GAPS = LogConfig.from_properties({"cleanup.policy": "compact"})
"""The config a planned log of a topic with offset gaps reads with (only ``compact``, the
offset-continuity rule, matters to a read)."""
_NO_GAPS = LogConfig.from_properties()


def plan_read(
    state: PartitionState,
    config: LogConfig,
    version: int,
    topic_id: str | None,
    start: int,
    end: int,
) -> ReadPlan | None:
    """The plan of reading ``[start, end)`` from ``state`` (of the bucket's state
    ``version``, the topic's ``config`` and ``topic_id``); None when the state does not
    hold the whole range in at most ``MAX_PLANNED_SEGMENTS`` segments (a range beyond
    the log end or below its start, or at a gap's edge: the reader looks at the log, and
    says what happened, as without a plan)."""
    segments = state.segments
    if not segments or start >= end or state.log_start_offset > start or state.high_watermark < end:
        return None
    bases = [s.base_offset for s in segments]
    first = max(bisect.bisect_right(bases, start) - 1, 0)
    last = bisect.bisect_left(bases, end) - 1
    if (
        last < first
        or last - first + 1 > MAX_PLANNED_SEGMENTS
        or segments[first].base_offset > start
        or segments[last].next_offset < end
    ):
        return None
    planned = tuple(
        _planned(s, keep_index=i in (first, last))
        for i, s in enumerate(segments[first : last + 1], first)
    )
    return ReadPlan(
        version,
        topic_id,
        state.log_start_offset,
        state.high_watermark,
        config.compact or state.cleaner_offset is not None,
        planned,
    )


def _planned(entry: SegmentEntry, *, keep_index: bool) -> PlannedSegment:
    index_bytes = entry.index_bytes if entry.size > WHOLE_OBJECT_BYTES else 0
    return PlannedSegment(
        entry.key,
        entry.base_offset,
        entry.next_offset,
        entry.size,
        entry.max_timestamp,
        index_bytes=index_bytes if keep_index else 0,
        offset_delta=entry.offset_delta,
        inline_index=entry.inline_index if keep_index else b"",
    )


class PlannedLog(BucketLog):
    """A ``BucketLog`` over a plan's segments only: a missing object is raised at once
    (``MissingSegmentError``), never retried against a newer state (it has none)."""

    _ATTEMPTS = 1


def planned_log(
    storage: Storage, topic: str, partition: int, plan: ReadPlan, *, fail_on_data_loss: bool = True
) -> BucketLog:
    """A read-only log of ``topic``-``partition`` in ``storage`` holding exactly the
    segments of ``plan`` (opened without a request; each read GETs only segments)."""
    entries = tuple(
        SegmentEntry(
            s.key,
            s.base_offset,
            s.next_offset,
            s.size,
            s.max_timestamp,
            index_bytes=s.index_bytes,
            offset_delta=s.offset_delta,
            inline_index=s.inline_index,
        )
        for s in plan.segments
    )
    state = PartitionState(entries, plan.log_start_offset)
    config = _GAPS if plan.gaps_allowed else _NO_GAPS

    def source(refresh: bool) -> tuple[int, PartitionState, LogConfig, str | None]:
        return plan.version, state, config, plan.topic_id

    return PlannedLog(
        storage, topic, partition, config, source, fail_on_data_loss=fail_on_data_loss
    )
