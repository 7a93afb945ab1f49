"""``BucketLog``: one partition of a bucket log dir, read through the shared read path
(``log_read.LogReads``: ``read``, ``read_chunks``, ``offset_for_timestamp``,
read_committed).

Its segments are the committed ``SegmentEntry``s of the partition (``BucketSegment``,
opened on first use); its high watermark is the committed log end of the state it was
last given. What it reads never changes under it: committed objects are immutable and
are deleted only ``file.delete.delay.ms`` after a commit removed them. It takes the
newest state its manager's committer folded (no request) itself, through the
``PartitionSource`` it is handed, before every read and every answer from its state: no
one pushes a state into it, so nothing beneath it calls back up. A read that meets
a vanished object (a reader older than that) refreshes the state once and tries again
before it reports what is missing.

Transactions: the bucket writer takes no transactional or control batches yet, so the
last stable offset is the high watermark and no transaction is ever aborted.

It hands the read path its state as values, never to be called back for it: a
``read_view.ReadView`` of its segments made each time it takes a state (opened on first
use as ``BucketSegment``s, kept in its ``SegmentCache``), its high watermark as the read
end, and ``bucket_read_window.WindowedReads`` as the walks' chunk sources.

Thread-safety: safe for concurrent readers (``_lock`` guards the state it takes; the
cache's own lock the opened segments).
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Callable, Generator, Iterator
from contextlib import closing
from functools import partial
from operator import attrgetter
from typing import NoReturn, cast

import numpy as np

from ..config.config import LogConfig
from ..errors import (
    CorruptRecordError,
    ReadOnlyError,
    TopicIdChangedError,
    UnknownTopicOrPartitionError,
)
from ..index.txn_index import AbortedTxn
from ..log.log_read import FetchData, LogReads
from ..log.log_segment import LogSegment
from ..log.read_view import ReadView, SegmentCache
from ..log.transactions import READ_COMMITTED, READ_UNCOMMITTED
from ..records.record_format import (
    H_POSITION,
    HEADER_COLUMNS,
    INT64_MAX,
    V2_HEADER_SIZE,
    WALK_END,
    WALK_FULL,
    compute_crc,
    read_batch_header,
)
from ..storage.storage import Storage
from .bucket_read_window import WindowedReads
from .bucket_segment import LOG_SUFFIX, BucketSegment, ObjectPath
from .bucket_state import NO_VERSION, PartitionState, SegmentEntry

logger = logging.getLogger(__name__)

_CRC_TABLE_ROWS = 4096
"""Header-table rows per kernel call when checking a chunk's CRCs."""

_WRITER_OPERATIONS = frozenset({
    "append", "roll", "flush", "truncate_to", "truncate_fully_and_start_at",
    "maybe_increment_log_start_offset", "delete_old_segments", "replace_segments",
    "new_segment", "take_producer_snapshot", "rename_for_deletion"})


class BucketLog(LogReads):
    """A partition of a bucket; see the module docstring. ``source(refresh)``
    (``bucket_committer.PartitionSource``) returns the version of the bucket state it
    read, the partition's committed state in it, the topic's config and topic id in it
    (``refresh``: ask the bucket first); the state is None when the partition is gone."""

    _ATTEMPTS = 2
    _READ_END_NAME = "high watermark"
    _RELIST_BEFORE_READ = False  # it takes the manager's state before it reads
    read_only = True

    def __init__(self, storage: Storage, topic: str, partition: int, config: LogConfig,
                 source: Callable[[bool], tuple[int, PartitionState | None,
                                                LogConfig | None, str | None]],
                 *, fail_on_data_loss: bool = True) -> None:
        self.storage = storage
        self.fail_on_data_loss = fail_on_data_loss
        self.topic = topic
        self.partition = partition
        self.config = config
        self.dir = ObjectPath(f"{storage.uri}/{topic}-{partition}")
        self._source = source
        self._contiguous = not config.compact  # set again by every _sync that changes
        self._lock = threading.Lock()  # guards _version, _state
        self._opened = SegmentCache()
        self._version = NO_VERSION
        self._state = PartitionState()
        self._read_view = self._view_of(self._state, NO_VERSION)
        self._chunk_source = WindowedReads
        self._high_watermark = 0
        self._log_start_offset = 0
        self.topic_id: str | None = None
        """The topic id of the state it was last given (None: a topic without one)."""
        self._sync(False)

    def _sync(self, refresh: bool) -> bool:
        version, state, config, topic_id = self._source(refresh)
        if state is None:
            # Never read as an empty partition (high watermark 0): its topic is gone.
            raise UnknownTopicOrPartitionError(
                f"partition {self._tp()} of {self.storage.uri} no longer exists (its topic "
                f"was deleted; the bucket is at version {version})")
        with self._lock:
            # The source is asked outside the lock, so a thread may come back with a
            # state older than one another thread stored meanwhile: only newer ones count
            # (a high watermark never goes back).
            if version <= self._version:
                return False
            if (self._version != NO_VERSION and self.topic_id is not None
                    and topic_id is not None and topic_id != self.topic_id):
                # A re-created topic's partition under the same name: its offsets are
                # another topic's. Never served under the old ones without a word.
                self._topic_replaced(topic_id, version)
            self._version = version
            self.topic_id = topic_id
            # A cached log outlives alter_topic_config: take the config of this state.
            # Offsets are contiguous only in a topic that is not compacted AND was never
            # cleaned (compaction's gaps stay after the policy goes back to delete: the
            # local rule, offset_continuity.offsets_contiguous).
            if config is not None:
                self.config = config
            self._contiguous = not self.config.compact and state.cleaner_offset is None
            if state == self._state and self._high_watermark == state.high_watermark:
                # The same segments, opened from now on as segments of this version (a
                # missing object's error names the version that references it).
                view = self._read_view
                self._read_view = self._view_of(state, version,
                                                None if view is None else view.bases)
                return False
            self._opened.retain({s.key for s in state.segments})
            self._state = state
            self._read_view = self._view_of(state, version)
            self._log_start_offset = state.log_start_offset
            self._high_watermark = state.high_watermark
            return True

    def _topic_replaced(self, new_id: str, version: int) -> None:
        """Raise ``TopicIdChangedError`` (``fail_on_data_loss``), or warn: the state
        taken next is the new topic's, read from its log start (a reset)."""
        what = (f"{self._tp()} of {self.storage.uri}: the topic was deleted and re-created "
                f"while it was read (this log holds topic id {self.topic_id}, the bucket "
                f"now {new_id} at version {version})")
        if self.fail_on_data_loss:
            raise TopicIdChangedError(
                f"{what}: its offsets now name another topic's records, so nothing more is "
                f"read from it; get the log again (get_log) to read the new topic "
                f"(fail.on.data.loss=false warns and follows it instead)",
                self.topic, self.partition, self.topic_id, new_id)
        logger.warning("%s: reading the new topic from its log start "
                       "(fail.on.data.loss=false); what was not read of the old one is lost",
                       what)

    def sync(self) -> bool:
        """Take the state the manager holds now (no request); True if it changed."""
        return self._sync(False)

    def _follow(self) -> None:
        """Take the newest state before an answer from it (no request). A partition
        gone since keeps the state it last had here: a property answers from that, and
        the log's next read, ``sync`` or ``refresh`` raises what happened to it."""
        try:
            self._sync(False)
        except UnknownTopicOrPartitionError as e:
            logger.debug("%s: answering from the last state taken: %s", self._tp(), e)

    def refresh(self, *, force: bool = False) -> bool:
        """Ask the bucket for newer commits (one LIST) and take the partition's state;
        True if it changed. (``force`` is accepted for the ``LogReader`` interface: every
        refresh asks.) Reads themselves ask only when an object they need is gone."""
        # Compared here, not taken from _sync: a property read since may have taken the
        # state already, so _sync would find this one taken.
        before = (self._state, self._high_watermark, self.topic_id)
        self._sync(True)
        return (self._state, self._high_watermark, self.topic_id) != before

    def current_topic_id(self) -> str | None:
        """The topic id of the newest state (no request): a bucket has no directory to
        read it from again."""
        self._follow()
        return self.topic_id

    def _relist(self, *, force: bool = False) -> None:
        # Called back by the read path only to retry a read that met a vanished object
        # (``_RELIST_BEFORE_READ`` is False: every read takes the state first, here).
        self._sync(force)

    def _view_of(self, state: PartitionState, version: int,
                 bases: tuple[int, ...] | None = None) -> ReadView[SegmentEntry]:
        """The read path's view of ``state``'s segments (``bases``: their base offsets,
        when known), opened as segments of ``version``."""
        segments = state.segments
        if bases is None:
            bases = tuple(s.base_offset for s in segments)
        return ReadView(segments, bases, attrgetter("key"),
                        partial(BucketSegment, self.storage, version=version),
                        self._opened)

    # -- reads: batches are CRC-checked before they are returned ------------------------

    def read(self, start_offset: int, *, max_offset: int | None = None,
             max_bytes: int = 1 << 20, isolation_level: str = READ_UNCOMMITTED) -> FetchData:
        """``LogReads.read``; a batch whose CRC does not match is a CorruptRecordError
        naming the object and the offsets, never returned (the bytes crossed a network
        and were written by any process: checked here, not only when decoded)."""
        self._sync(False)
        fetched = super().read(start_offset, max_offset=max_offset, max_bytes=max_bytes,
                               isolation_level=isolation_level)
        if isolation_level != READ_COMMITTED:  # the committed read checked it already
            self._check_crcs(fetched.records)
        return fetched

    def read_chunks(self, start_offset: int, end_offset: int, chunk_bytes: int = 8 << 20, *,
                    isolation_level: str = READ_UNCOMMITTED,
                    check_crcs: bool = True) -> Iterator[memoryview]:
        """``LogReads.read_chunks``, every batch CRC-checked as ``read`` does, unless
        the caller checks them as it decodes (``check_crcs=False``: the source's tasks)."""
        self._sync(False)
        chunks = super().read_chunks(start_offset, end_offset, chunk_bytes,
                                     isolation_level=isolation_level, check_crcs=check_crcs)
        # Closed here, not when the garbage collector gets to it: an error raised below
        # (a CRC) would otherwise keep the walk, and its read-ahead thread and windows,
        # alive for as long as the error's traceback is.
        with closing(cast(Generator[memoryview, None, None], chunks)):
            if isolation_level == READ_COMMITTED or not check_crcs:  # checked below, or
                yield from chunks  # by the caller
                return
            for chunk in chunks:
                self._check_crcs(chunk)
                yield chunk

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        """``LogReads.offset_for_timestamp`` over the state the manager holds now."""
        self._sync(False)
        return super().offset_for_timestamp(timestamp_ms)

    def _check_crcs(self, buf: bytes | memoryview) -> None:
        """Every batch's CRC, v2 batches by the header-table and CRC kernels (one call
        per chunk, not a Python step per batch); a legacy message, or a header the
        kernel refuses, is checked (and reported) by the per-batch path."""
        # numba is loaded by reading, never by the driver's planning and commits that
        # import this module
        from ..records.record_format_kernels import header_table, readonly_bytes
        from ..records.segment_scan import first_crc_mismatch

        arr = readonly_bytes(buf)
        n = len(arr)
        table = np.empty((min(_CRC_TABLE_ROWS, n // V2_HEADER_SIZE + 1), HEADER_COLUMNS),
                         np.int64)
        position = 0
        while position < n:
            count, end, status, _ = header_table(arr, position, n, table, INT64_MAX,
                                                 False, 0, 0, True)
            good = first_crc_mismatch(arr, table, count)
            if good < count:
                self._check_crcs_from(buf, int(table[good, H_POSITION]))
                return
            if status == WALK_FULL:
                position = end
                continue
            if status != WALK_END:
                self._check_crcs_from(buf, end)
            return

    def _check_crcs_from(self, buf: bytes | memoryview, position: int) -> None:
        while (h := read_batch_header(buf, position)) is not None:
            actual = compute_crc(buf, h)
            if actual != h.crc:
                raise CorruptRecordError(
                    f"{self._tp()}: {self._object_of(h.base_offset)}: the batch of offsets "
                    f"{h.base_offset}..{h.last_offset} has CRC {actual:#010x}, its header "
                    f"says {h.crc:#010x}: the object is damaged; nothing of it is returned")
            position = h.end_position

    def _object_of(self, offset: int) -> str:
        segments = self._state.segments
        i = bisect.bisect_right([s.base_offset for s in segments], offset) - 1
        if i < 0:
            return f"a segment of {self.dir}"
        return f"{self.storage.uri}/{segments[i].key}{LOG_SUFFIX}"

    # -- offsets and sizes ----------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        self._follow()
        return self._log_start_offset

    @property
    def high_watermark(self) -> int:
        """The committed log end of the newest state."""
        self._follow()
        return self._high_watermark

    @property
    def log_end_offset(self) -> int:
        self._follow()
        return self._state.high_watermark

    @property
    def last_stable_offset(self) -> int:
        self._follow()
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
        self._follow()
        bases, get = self._view()
        return tuple(get(i) for i in range(len(bases)))

    @property
    def num_segments(self) -> int:
        self._follow()
        return len(self._state.segments)

    @property
    def size_in_bytes(self) -> int:
        self._follow()
        return self._state.size_in_bytes

    # -- lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        self._opened.close()

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
