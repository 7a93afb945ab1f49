"""A log's segments for the shared read path (``log_read.LogReads``), handed down as a
value by a log that holds its segment list as state (a bucket log: the committed state
it was last given), instead of computed by a hook the read path calls back into.

``ReadView`` is one snapshot: the segments' base offsets and their entries, each segment
opened on first use by the opener the log handed in (a ``BucketSegment`` of the entry)
and kept in the log's ``SegmentCache``, so a segment is opened once however many views
and reads use it. A view never changes; the log makes a new one when its state does.

Thread-safety: safe for concurrent readers (the cache's lock guards its segments).
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Collection, Sequence
from pathlib import PurePath
from typing import Generic, TypeVar

from .log_segment import LogSegment

E = TypeVar("E", covariant=True)


class SegmentCache:
    """The segments a log opened so far, by key (a bucket segment's object key), shared
    by its views; ``retain`` closes those a new state no longer holds."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards _open
        self._open: dict[str, LogSegment] = {}

    def get(self, key: str, open_segment: Callable[[], LogSegment]) -> LogSegment:
        with self._lock:
            seg = self._open.get(key)
            if seg is None:
                seg = self._open[key] = open_segment()
            return seg

    def retain(self, keys: Collection[str]) -> None:
        """Close and forget every segment whose key is not in ``keys``."""
        with self._lock:
            for key in [k for k in self._open if k not in keys]:
                self._open.pop(key).close_handlers()

    def close(self) -> None:
        with self._lock:
            for seg in self._open.values():
                seg.close_handlers()
            self._open.clear()


class ReadView(Generic[E]):
    """One snapshot of a log's segments, ascending by base offset; see the module
    docstring. ``entries[i]`` describes segment ``i``, ``key(entry)`` names it in
    ``cache`` and ``open_segment(entry)`` opens it (no request: segments read lazily)."""

    __slots__ = ("bases", "_entries", "_key", "_open_segment", "_cache")

    def __init__(
        self,
        entries: Sequence[E],
        bases: tuple[int, ...],
        key: Callable[[E], str],
        open_segment: Callable[[E], LogSegment],
        cache: SegmentCache,
    ) -> None:
        self.bases = bases
        self._entries = entries
        self._key = key
        self._open_segment = open_segment
        self._cache = cache

    def segment(self, i: int) -> LogSegment:
        """Segment ``i`` of the view, opened on first use."""
        entry = self._entries[i]
        return self._cache.get(self._key(entry), lambda: self._open_segment(entry))

    def log_path(self, base_offset: int) -> PurePath | None:
        """The ``.log`` name of the segment based at ``base_offset``; None when the view
        holds none."""
        i = bisect.bisect_left(self.bases, base_offset)
        if i == len(self.bases) or self.bases[i] != base_offset:
            return None
        return self.segment(i).log_path
