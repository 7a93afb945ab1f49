"""What a cleaning pass reports (``CleanerStats``) and how it groups segments
(``group_segments``, Kafka's ``groupSegmentsBySize``): values the local cleaner
(``cleaner``), the bucket's compactor (``bucket_compact``) and its merger
(``bucket_merge``) share.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..records.record_format import INT32_MAX

__all__ = ["CleanerStats", "SegmentSizes", "group_segments"]


@dataclass(slots=True)
class CleanerStats:
    """What one cleaning pass did."""

    topic: str
    partition: int
    first_dirty_offset: int
    end_offset: int  # the new cleaner checkpoint: the map covered [first_dirty, end)
    first_uncleanable_offset: int
    segments_cleaned: int = 0
    groups: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_retained: int = 0
    tombstones_removed: int = 0
    batches_copied: int = 0
    batches_rewritten: int = 0
    batches_dropped: int = 0
    map_records: int = 0
    map_entries: int = 0
    map_capacity: int = 0
    map_memory_bytes: int = 0
    elapsed_s: float = 0.0
    pending_delete_horizon: int | None = None  # earliest horizon of tombstones kept

    @property
    def more_dirty(self) -> bool:
        """The map filled before the uncleanable bound: another pass has work."""
        return self.end_offset < self.first_uncleanable_offset

    @property
    def mb_per_s(self) -> float:
        return self.bytes_read / 1e6 / self.elapsed_s if self.elapsed_s > 0 else 0.0


@dataclass(frozen=True, slots=True)
class SegmentSizes:
    """What ``group_segments`` needs of a segment (a local one, or a bucket's entry)."""

    base_offset: int
    next_offset: int  # the next segment's base: an upper bound of this one's last + 1
    size: int
    index_bytes: int
    time_index_bytes: int


def group_segments(
    segments: Sequence[SegmentSizes], max_size: int, max_index_size: int
) -> list[list[int]]:
    """Kafka's ``groupSegmentsBySize``: consecutive runs (as index lists) whose summed
    log size fits ``max_size``, summed index sizes fit ``max_index_size`` and whose
    offsets fit 32 bits relative to the run's first base offset. A run has at least one
    segment; an empty segment never breaks the offset check."""
    groups: list[list[int]] = []
    i = 0
    while i < len(segments):
        first = segments[i]
        group = [i]
        size, idx, tidx = first.size, first.index_bytes, first.time_index_bytes
        i += 1
        while i < len(segments):
            s = segments[i]
            if (
                size + s.size > max_size
                or idx + s.index_bytes > max_index_size
                or tidx + s.time_index_bytes > max_index_size
            ):
                break
            if s.size > 0 and s.next_offset - 1 - first.base_offset > INT32_MAX:
                break
            group.append(i)
            size, idx, tidx = size + s.size, idx + s.index_bytes, tidx + s.time_index_bytes
            i += 1
        groups.append(group)
    return groups
