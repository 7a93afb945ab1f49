"""What a log's reading walk (``log_read.LogReads._walk_chunks``) reads one segment's
bytes through: ``ChunkSource`` (a segment's ``find_batch`` and ``read_chunk``) and
``ChunkSources`` (one walk's way to them: a local log reads its segments themselves, a
bucket log windows of large GETs with read-ahead, ``bucket_read_window.WindowedReads``,
told the next ``lookahead`` segments so it can fetch them before the walk gets there)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ..records.record_format import BatchHeader
from .log_segment import LogSegment


class ChunkSource(Protocol):
    """The reads ``LogReads._walk_chunks`` makes of one segment."""

    def find_batch(self, offset: int) -> tuple[BatchHeader | None, int]: ...

    def read_chunk(
        self, position: int, max_bytes: int
    ) -> tuple[bytes | bytearray | memoryview, int]: ...


class ChunkSources(Protocol):
    """One walk's way to its segments' bytes (see ``LogReads._chunk_sources``)."""

    lookahead: int
    """How many of the segments after the one opened ``open`` wants to know of."""

    def open(self, seg: LogSegment, next_segs: Sequence[LogSegment]) -> ChunkSource: ...

    def close(self) -> None: ...
