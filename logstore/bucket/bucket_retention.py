"""Retention of a bucket partition: Kafka's rules (``retention.deletable_segments``,
the same function ``Log.delete_old_segments`` runs) over a committed ``PartitionState``.

Pure: it plans; ``bucket_maintenance`` commits the plan (``"operation": "retention"``),
re-planning on the new state when it loses a race. Every committed segment lies below the
high watermark (a commit makes what it adds visible) and none is active, so every segment
may go; when all go, the log start offset moves to the log end, as Kafka's
roll-then-delete leaves it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config.config import LogConfig
from ..log.retention import SegmentDescriptor, deletable_segments
from .bucket_state import PartitionState, SegmentEntry


@dataclass(frozen=True, slots=True)
class RetentionPlan:
    """The oldest ``remove``d segments and the log start offset after them."""

    remove: tuple[SegmentEntry, ...]
    log_start_offset: int
    reasons: tuple[str, ...]


def plan_retention(ps: PartitionState, config: LogConfig, now_ms: int) -> RetentionPlan | None:
    """What retention removes from ``ps`` now; None: nothing, not even a log start move."""
    segs = ps.segments
    view = [
        SegmentDescriptor(
            seg.base_offset,
            segs[i + 1].base_offset if i + 1 < len(segs) else seg.next_offset,
            seg.size,
            seg.max_timestamp,
        )
        for i, seg in enumerate(segs)
    ]
    decision = deletable_segments(
        view,
        config,
        log_start_offset=ps.log_start_offset,
        high_watermark=ps.high_watermark,
        now_ms=now_ms,
    )
    if decision.count == 0 and decision.log_start_offset == ps.log_start_offset:
        return None
    return RetentionPlan(
        segs[: decision.count],
        decision.log_start_offset,
        tuple(f"{reason}: {n} segment(s)" for reason, n in decision.breaches),
    )
