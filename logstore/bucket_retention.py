"""Retention of a bucket partition, decided as ``Log.delete_old_segments`` decides it.

Pure: it plans on a committed ``PartitionState``; ``bucket_maintenance`` commits the plan
(``"operation": "retention"``), re-planning on the new state when it loses a race.

Kafka's rules, in Kafka's order, each taking the oldest segments while it holds:

1. **log start offset** (always): a segment whose offsets all lie below it (the next
   segment starts at or below the log start offset; ``delete_records`` moves it).
2. **retention.bytes** (``cleanup.policy`` with delete, ``>= 0``): while the partition
   stays at or above the limit without the segment.
3. **retention.ms** (with delete, ``>= 0``): a segment whose largest timestamp is more
   than ``retention.ms`` old.

Every committed segment lies below the high watermark (a commit makes what it adds
visible), so every segment may go; when all go, the log start offset moves to the log
end, as Kafka's roll-then-delete leaves it. Otherwise the log start offset moves up to
the first remaining segment's base offset.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .bucket_state import PartitionState, SegmentEntry
from .config import LogConfig


@dataclass(frozen=True, slots=True)
class RetentionPlan:
    """The oldest ``remove``d segments and the log start offset after them."""

    remove: tuple[SegmentEntry, ...]
    log_start_offset: int
    reasons: tuple[str, ...]


def plan_retention(ps: PartitionState, config: LogConfig, now_ms: int) -> RetentionPlan | None:
    """What retention removes from ``ps`` now (see the module docstring); None: nothing."""
    segs = ps.segments
    doomed = 0
    reasons: list[str] = []

    def take(breached: Callable[[SegmentEntry, int], bool], reason: str) -> None:
        nonlocal doomed
        start = doomed
        while doomed < len(segs):
            seg = segs[doomed]
            upper = segs[doomed + 1].base_offset if doomed + 1 < len(segs) else seg.next_offset
            if not breached(seg, upper):
                break
            doomed += 1
        if doomed > start:
            reasons.append(f"{reason}: {doomed - start} segment(s)")

    lso = ps.log_start_offset
    take(lambda _seg, upper: upper <= lso, f"log start offset {lso}")
    if config.delete and config.retention_bytes >= 0:
        limit = config.retention_bytes
        diff = sum(s.size for s in segs[doomed:]) - limit

        def over_size(seg: SegmentEntry, _upper: int) -> bool:
            nonlocal diff
            if diff >= 0 and diff - seg.size >= 0:
                diff -= seg.size
                return True
            return False

        take(over_size, f"retention.bytes={limit}")
    if config.delete and config.retention_ms >= 0:
        limit_ms = config.retention_ms
        take(lambda seg, _u: now_ms - seg.max_timestamp > limit_ms, f"retention.ms={limit_ms}")
    new_lso = ps.high_watermark if doomed == len(segs) else max(lso, segs[doomed].base_offset)
    if doomed == 0 and new_lso == lso:
        return None
    return RetentionPlan(segs[:doomed], max(lso, new_lso), tuple(reasons))
