"""What compaction needs of a log: ``CleanableLog``, the one type ``cleaner.Cleaner`` and
``cleaner_manager.LogCleanerManager`` work on.

Two logs implement it: the local writer ``log.Log`` (its last segment is the active one,
never cleaned; cleaned segments are swapped in by ``Log.replace_segments``) and
``bucket_compact.CompactedPartition`` (a bucket partition's committed segments, none
active; "replacing" records each cleaned segment, which the compactor then uploads and
commits). Kafka's ``Cleaner`` likewise needs only segments, config and a swap.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # types only: the manager's driver-side users need no segment code
    from ..config.config import LogConfig
    from ..log.log_segment import LogSegment

__all__ = ["CleanableLog", "cleanable_segments"]


class CleanableLog(Protocol):
    """A log the cleaner can compact. ``dir``: where cleaned segments are written
    (``new_segment``) and whose parent holds the ``cleaner-offset-checkpoint``.
    ``segments``: oldest first; when ``active_segment`` is not None it is the last of
    them and is never cleaned. ``read_only`` logs are never picked."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def dir(self) -> Path: ...
    @property
    def config(self) -> LogConfig: ...
    @property
    def read_only(self) -> bool: ...
    @property
    def log_start_offset(self) -> int: ...
    @property
    def log_end_offset(self) -> int: ...
    @property
    def high_watermark(self) -> int: ...
    @property
    def segments(self) -> Sequence[LogSegment]: ...
    @property
    def active_segment(self) -> LogSegment | None: ...

    def new_segment(self, base_offset: int) -> LogSegment:
        """An empty ``.cleaned`` segment at ``base_offset`` for the cleaner to write."""
        ...

    def replace_segments(
        self, new_segments: list[LogSegment], old_segments: list[LogSegment]
    ) -> None:
        """Swap the written ``new_segments`` in for ``old_segments``."""
        ...


def cleanable_segments(log: CleanableLog) -> tuple[Sequence[LogSegment], int]:
    """(the segments the cleaner may read, oldest first; the offset where the uncleaned
    rest begins: the active segment's base, or the log end when there is none)."""
    segs = log.segments  # one snapshot: a roll meanwhile must not shift the split
    if log.active_segment is None:
        return segs, log.log_end_offset
    return segs[:-1], segs[-1].base_offset
