"""``BucketLog``: one partition of a bucket log dir, read through the shared read path
(``log_read.LogReads``: ``read``, ``read_chunks``, ``offset_for_timestamp``,
read_committed).

Its segments are the committed ``SegmentEntry``s of the partition (``BucketSegment``,
opened on first use); its high watermark is the committed log end of the state it was
last given. What it reads never changes under it: committed objects are immutable and
are deleted only ``file.delete.delay.ms`` after a commit removed them. A read that meets
a vanished object (a reader older than that) refreshes the state once and tries again
before it reports what is missing.

Transactions: the bucket writer takes no transactional or control batches yet, so the
last stable offset is the high watermark and no transaction is ever aborted.

Thread-safety: safe for concurrent readers (``_lock`` guards the view and the opened
segments).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import NoReturn

from .bucket_segment import BucketSegment, ObjectPath
from .bucket_state import PartitionState
from .config import LogConfig
from .errors import ReadOnlyError
from .log_read import LogReads
from .log_segment import LogSegment
from .storage import Storage
from .txn_index import AbortedTxn

_WRITER_OPERATIONS = frozenset({
    "append", "roll", "flush", "truncate_to", "truncate_fully_and_start_at",
    "maybe_increment_log_start_offset", "delete_old_segments", "replace_segments",
    "new_segment", "take_producer_snapshot", "rename_for_deletion"})


class BucketLog(LogReads):
    """A partition of a bucket; see the module docstring. ``source(refresh)`` returns the
    partition's current committed state (``refresh``: ask the bucket first), or None when
    the partition is gone."""

    _ATTEMPTS = 2
    _READ_END_NAME = "high watermark"
    read_only = True

    def __init__(self, storage: Storage, topic: str, partition: int, config: LogConfig,
                 source: Callable[[bool], PartitionState | None]) -> None:
        self.storage = storage
        self.topic = topic
        self.partition = partition
        self.config = config
        self.dir = ObjectPath(f"{storage.uri}/{topic}-{partition}")  # type: ignore[assignment]
        self._source = source
        self._contiguous = not config.compact
        self._lock = threading.Lock()  # guards _state, _open
        self._open: dict[str, BucketSegment] = {}
        self._state = PartitionState()
        self._high_watermark = 0
        self._log_start_offset = 0
        self._sync(False)

    def _sync(self, refresh: bool) -> bool:
        state = self._source(refresh)
        if state is None:
            state = PartitionState()
        with self._lock:
            if state == self._state and self._high_watermark == state.high_watermark:
                return False
            keys = {s.key for s in state.segments}
            for key in [k for k in self._open if k not in keys]:
                self._open.pop(key).close_handlers()
            self._state = state
            self._log_start_offset = state.log_start_offset
            self._high_watermark = state.high_watermark
            return True

    def sync(self) -> bool:
        """Take the state the manager holds now (no request); True if it changed."""
        return self._sync(False)

    def refresh(self, *, force: bool = False) -> bool:
        """Ask the bucket for newer commits (one LIST) and take the partition's state;
        True if it changed. (``force`` is accepted for the ``LogReader`` interface: every
        refresh asks.) Reads themselves ask only when an object they need is gone."""
        return self._sync(True)

    def _relist(self, *, force: bool = False) -> None:
        self._sync(force)

    def _view(self) -> tuple[tuple[int, ...], Callable[[int], LogSegment]]:
        segments = self._state.segments
        bases = tuple(s.base_offset for s in segments)

        def get(i: int) -> LogSegment:
            entry = segments[i]
            with self._lock:
                seg = self._open.get(entry.key)
                if seg is None:
                    seg = self._open[entry.key] = BucketSegment(self.storage, entry)
                return seg

        return bases, get

    def _read_end(self) -> int:
        return self._high_watermark

    def _segment_path(self, base: int) -> ObjectPath:  # type: ignore[override]
        for s in self._state.segments:
            if s.base_offset == base:
                return ObjectPath(f"{self.storage.uri}/{s.key}.log")
        return ObjectPath(f"{self.dir}/{base:020d}.log")

    # -- offsets and sizes ----------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        return self._state.high_watermark

    @property
    def last_stable_offset(self) -> int:
        return self._high_watermark

    def aborted_transactions(self, start_offset: int, upper_offset: int) -> list[AbortedTxn]:
        return []

    def update_high_watermark(self, offset: int) -> int:
        """The committed log end is the high watermark; a caller's value is only a
        bound (kept for the ``LogReader`` interface)."""
        self._high_watermark = max(min(offset, self._state.high_watermark),
                                   self._log_start_offset)
        return self._high_watermark

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        bases, get = self._view()
        return tuple(get(i) for i in range(len(bases)))

    @property
    def num_segments(self) -> int:
        return len(self._state.segments)

    @property
    def size_in_bytes(self) -> int:
        return self._state.size_in_bytes

    # -- lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            for seg in self._open.values():
                seg.close_handlers()
            self._open.clear()

    def __getattr__(self, name: str) -> NoReturn:
        if name in _WRITER_OPERATIONS:
            raise ReadOnlyError(f"log {self.dir} is a bucket partition: {name} goes through "
                                f"the bucket's LogManager (commits), not the log")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __enter__(self) -> BucketLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"BucketLog({self.dir}, start={self._log_start_offset}, "
                f"high watermark={self._high_watermark}, segments={self.num_segments})")
