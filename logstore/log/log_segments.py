"""The sorted collection of a partition's segments (Kafka's ``LogSegments``).

Copy-on-write: every change builds a new tuple and swaps one reference, so a reader
takes a snapshot (``snapshot()``, a tuple sorted by base offset) and searches it with
``bisect`` without ever blocking the writer or seeing a half-made change.

Thread-safety: mutations come from the Log's writer (under its lock); any thread may read.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator

from .log_segment import LogSegment


class LogSegments:
    """Segments sorted by base offset; see the module docstring.

    >>> segs = LogSegments(); segs.add(seg0); segs.floor(42)     # doctest: +SKIP
    """

    def __init__(self, segments: Iterable[LogSegment] = ()) -> None:
        ordered = sorted(segments, key=lambda s: s.base_offset)
        # (segments, their base offsets): replaced as one reference, read as one.
        self._state: tuple[tuple[LogSegment, ...], tuple[int, ...]] = (
            tuple(ordered), tuple(s.base_offset for s in ordered))

    def _set(self, segments: list[LogSegment]) -> None:
        segments.sort(key=lambda s: s.base_offset)
        bases = tuple(s.base_offset for s in segments)
        # One assignment readers can see: both tuples travel together.
        self._state = (tuple(segments), bases)

    @property
    def _segments(self) -> tuple[LogSegment, ...]:
        return self._state[0]

    def snapshot(self) -> tuple[LogSegment, ...]:
        return self._segments

    def add(self, segment: LogSegment) -> None:
        """Add, replacing any segment with the same base offset."""
        kept = [s for s in self._segments if s.base_offset != segment.base_offset]
        kept.append(segment)
        self._set(kept)

    def remove(self, base_offset: int) -> LogSegment | None:
        found = self.get(base_offset)
        if found is not None:
            self._set([s for s in self._segments if s.base_offset != base_offset])
        return found

    def replace_all(self, segments: Iterable[LogSegment]) -> None:
        self._set(list(segments))

    def clear(self) -> list[LogSegment]:
        old = list(self._segments)
        self._set([])
        return old

    def get(self, base_offset: int) -> LogSegment | None:
        segs, bases = self._state
        i = bisect.bisect_left(bases, base_offset)
        return segs[i] if i < len(bases) and bases[i] == base_offset else None

    def floor(self, offset: int, snapshot: tuple[LogSegment, ...] | None = None
              ) -> LogSegment | None:
        """The segment with the largest base offset <= ``offset`` (the one that would
        hold it), or None."""
        if snapshot is None:
            segs, bases = self._state
            i = bisect.bisect_right(bases, offset)
            return segs[i - 1] if i else None
        i = self.floor_index(offset, snapshot)
        return snapshot[i] if i >= 0 else None

    def floor_index(self, offset: int, snapshot: tuple[LogSegment, ...]) -> int:
        """Index in ``snapshot`` of the segment that would hold ``offset`` (-1 if none)."""
        lo, hi = 0, len(snapshot)
        while lo < hi:
            mid = (lo + hi) // 2
            if snapshot[mid].base_offset <= offset:
                lo = mid + 1
            else:
                hi = mid
        return lo - 1

    def higher(self, base_offset: int) -> LogSegment | None:
        segs, bases = self._state
        i = bisect.bisect_right(bases, base_offset)
        return segs[i] if i < len(segs) else None

    def values_from(self, offset: int) -> tuple[LogSegment, ...]:
        """Segments that may hold offsets >= ``offset`` (from the floor segment on)."""
        segs, bases = self._state
        i = max(bisect.bisect_right(bases, offset) - 1, 0)
        return segs[i:]

    @property
    def first(self) -> LogSegment | None:
        segs = self._segments
        return segs[0] if segs else None

    @property
    def last(self) -> LogSegment | None:
        segs = self._segments
        return segs[-1] if segs else None

    @property
    def base_offsets(self) -> tuple[int, ...]:
        return self._state[1]

    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    def __len__(self) -> int:
        return len(self._segments)

    def __iter__(self) -> Iterator[LogSegment]:
        return iter(self._segments)

    def __contains__(self, base_offset: int) -> bool:
        return self.get(base_offset) is not None
