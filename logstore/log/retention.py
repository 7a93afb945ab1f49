"""Kafka's retention rules, written once for both engines (``Log.delete_old_segments``
and ``bucket_retention.plan_retention``).

Pure: it decides over a sequence of ``SegmentDescriptor`` (oldest first), the topic's
``LogConfig``, the log start offset, the high watermark and the time now; each engine
then removes the segments its own way (a local log renames files ``.deleted`` and rolls
when every segment goes; a bucket commits a change).

Kafka's rules (``UnifiedLog.deleteOldSegments``), in Kafka's order, each taking the
oldest remaining segments while it holds:

1. **log start offset** (always): a segment whose offsets all lie below it (the next
   segment starts at or below the log start offset; ``delete_records`` moves it). An
   active segment never goes by this rule: it has no next segment.
2. **retention.bytes** (``cleanup.policy`` with delete, ``>= 0``): while the partition
   stays at or above the limit without the segment (the size counted after rule 1).
3. **retention.ms** (with delete, ``>= 0``): a segment whose largest timestamp is more
   than ``retention.ms`` old.

Under every rule a segment goes only when it lies wholly below the high watermark, and
an empty active segment never goes (nothing to delete; Kafka keeps it as the log end).
When every segment goes the log start offset moves to the log end (Kafka rolls first,
leaving an empty active segment there); otherwise up to the first remaining segment's
base offset.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..config.config import LogConfig

__all__ = ["SegmentDescriptor", "RetentionDecision", "deletable_segments"]


@dataclass(frozen=True, slots=True)
class SegmentDescriptor:
    """What retention needs to know of a segment. ``next_offset``: one past its offsets
    (the next segment's base offset, or the log end for the newest)."""

    base_offset: int
    next_offset: int
    size: int
    largest_timestamp: int
    is_active: bool = False


@dataclass(frozen=True, slots=True)
class RetentionDecision:
    """The oldest ``count`` segments go, in ``breaches`` (reason, segments) order;
    ``log_start_offset``: the log start offset after them."""

    count: int
    breaches: tuple[tuple[str, int], ...]
    log_start_offset: int


def deletable_segments(
    segments: Sequence[SegmentDescriptor],
    config: LogConfig,
    *,
    log_start_offset: int,
    high_watermark: int,
    now_ms: int,
) -> RetentionDecision:
    """Which of ``segments`` (oldest first) retention deletes now (module docstring)."""
    doomed = 0
    breaches: list[tuple[str, int]] = []

    def take(breached: Callable[[SegmentDescriptor], bool], reason: str) -> None:
        nonlocal doomed
        start = doomed
        while doomed < len(segments):
            seg = segments[doomed]
            if seg.is_active and seg.size == 0:
                break
            if seg.next_offset > high_watermark or not breached(seg):
                break
            doomed += 1
        if doomed > start:
            breaches.append((reason, doomed - start))

    lso = log_start_offset
    take(lambda seg: not seg.is_active and seg.next_offset <= lso, f"log start offset {lso}")
    if config.delete and config.retention_bytes >= 0:
        limit = config.retention_bytes
        diff = sum(s.size for s in segments[doomed:]) - limit

        def over_size(seg: SegmentDescriptor) -> bool:
            nonlocal diff
            if diff >= 0 and diff - seg.size >= 0:
                diff -= seg.size
                return True
            return False

        take(over_size, f"retention.bytes={limit}")
    if config.delete and config.retention_ms >= 0:
        limit_ms = config.retention_ms
        take(lambda seg: now_ms - seg.largest_timestamp > limit_ms, f"retention.ms={limit_ms}")
    if not segments:
        new_lso = lso
    elif doomed == len(segments):
        new_lso = max(lso, segments[-1].next_offset)
    else:
        new_lso = max(lso, segments[doomed].base_offset)
    return RetentionDecision(doomed, tuple(breaches), new_lso)
