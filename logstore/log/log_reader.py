"""``LogReader``: one partition of another process's log, read from its directory
listing (what the Spark source and the ``seglog`` commands read through).

The contract (docs/internals.md, "Reader contract"):

* no lock, no write: it never recovers, creates, renames or deletes a file; a writer
  operation raises ``ReadOnlyError``;
* never past the published high watermark (``update_high_watermark`` sets it, from the
  ``replication-offset-checkpoint``). ``LogDirsReader`` clamps that to the log end offset
  (Kafka's rule; warned, and listed by ``high_watermarks_beyond_log_end``), so a last
  segment cut short reads as a shorter log; a segment missing or cut short *below* the
  log end is reported (``MissingDataError``), never skipped;
* survives a concurrent roll, retention, compaction swap or deletion: the segment list
  comes from listing the directory, segments open lazily, and a read that finds a file
  gone or replaced lists again (a few times, each after a real change) before it
  reports what is missing;
* the cost of a call does not grow with the number of segments: the directory is
  listed again only when its mtime moved (``refresh``, git's "racy" rule for mtimes too
  recent to trust), and only the segments a read touches are opened;
* never another topic's records under its offsets: a directory of the same name that is
  not the one it was opened on (another inode, or another topic id in
  ``partition.metadata``: the topic was deleted and re-created) is found by every
  listing and before a segment is opened, and raises ``TopicIdChangedError``
  (``fail_on_data_loss``, the default) or is warned about and followed from its log
  start (a reset, as Kafka's consumer does).

The read methods are ``log_read.LogReads``', shared with the writer ``Log``.
Thread-safety: safe for concurrent readers.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from ..config.config import LogConfig
from ..errors import (
    CorruptPartitionMetadataError,
    KafkaStorageError,
    LogDirError,
    ReadOnlyError,
    TopicIdChangedError,
)
from ..records.record_format import BatchHeader
from ..storage.checkpoint_file import OffsetCheckpointFile
from ..storage.file_names import HIGH_WATERMARK_CHECKPOINT, parse_partition_dir_name
from ..storage.storage import LOCAL
from .log_loader import list_segment_bases
from .log_read import LogReads
from .log_segment import LogSegment
from .partition_metadata import read_topic_id
from .transactions import Transactions

logger = logging.getLogger(__name__)

_RACY_NS = 2_000_000_000  # directory mtimes younger than this are not trusted

_WRITER_OPERATIONS = frozenset(
    {
        "append",
        "roll",
        "flush",
        "flush_if_due",
        "truncate_to",
        "truncate_fully_and_start_at",
        "maybe_increment_log_start_offset",
        "delete_old_segments",
        "replace_segments",
        "new_segment",
        "take_producer_snapshot",
        "rename_for_deletion",
    }
)


class LogReader(LogReads):
    """One partition directory written by another process; see the module docstring."""

    _ATTEMPTS = 5
    """How often a read lists the directory again when files vanish under it (each
    retry follows a real change: a roll, retention or a compaction swap)."""
    _READ_END_NAME = "high watermark"
    read_only = True
    topic_id: str | None = None
    """The topic id of the directory it was opened from (``LogDirsReader`` sets it; None:
    unknown, or a directory without ``partition.metadata``)."""

    def __init__(
        self,
        dir_: Path,
        config: LogConfig,
        *,
        log_start_offset: int = 0,
        high_watermark: int | None = None,
        fail_on_data_loss: bool = True,
    ) -> None:
        self.dir: Path = Path(dir_)
        parsed = parse_partition_dir_name(self.dir.name)
        if parsed is None:
            raise LogDirError(f"{self.dir} is not a partition directory (<topic>-<partition>)")
        if not LOCAL.is_dir(self.dir):
            raise KafkaStorageError(f"partition directory {self.dir} does not exist")
        self.topic, self.partition = parsed
        self.config = config
        self.fail_on_data_loss = fail_on_data_loss
        # The directory it reads (a re-created topic's has another inode, or, where the
        # inode was reused, another topic id); the id is set by whoever knows it.
        self._inode = LOCAL.stat(self.dir).st_ino
        self._log_start_offset = max(log_start_offset, 0)
        self._contiguous: bool | None = None
        self._lock = threading.Lock()  # guards _bases and _open
        self._bases: tuple[int, ...] = ()  # from the last listing
        self._open: dict[int, LogSegment] = {}  # opened on demand
        self._listed_mtime = -2  # the directory mtime of the last listing
        # (base offset, header) of the last segment's last batch as last found: the next
        # look at the log end resumes there (``SegmentReads.last_batch``)
        self._tail: tuple[int, BatchHeader] | None = None
        self._txns = Transactions(
            lambda: self.dir, self._view, lambda: self._log_start_offset, read_only=True
        )
        self.refresh()
        bases = self._bases
        leo = self._read_log_end(bases)
        self._log_start_offset = min(self._log_start_offset, leo)
        # Not clamped here: LogDirsReader clamps what it publishes to this log's end
        # (and warns); a read finding less than it is told reports it (MissingDataError).
        self._high_watermark = (
            leo if high_watermark is None else max(high_watermark, self._log_start_offset)
        )

    @classmethod
    def open(
        cls,
        dir_: Path,
        config: LogConfig,
        *,
        log_start_offset: int = 0,
        high_watermark: int | None = None,
        fail_on_data_loss: bool = True,
    ) -> LogReader:
        """A reader of the partition directory ``dir_`` (lists it, opens the last
        segment); ``high_watermark`` None: the log end of the files."""
        return cls(
            dir_,
            config,
            log_start_offset=log_start_offset,
            high_watermark=high_watermark,
            fail_on_data_loss=fail_on_data_loss,
        )

    # -- offsets and sizes ----------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        """The offset after the last batch of the files (from the last segment's tail)."""
        self.refresh()
        return self._read_log_end(self._bases)

    def _read_log_end(self, bases: tuple[int, ...]) -> int:
        """The log end from the last of ``bases``, resuming at the batch the previous
        look found last (a source asks every trigger: the new batches are parsed, not
        the whole tail past the last index entry)."""
        if not bases:
            return self._log_start_offset
        base = bases[-1]
        tail = self._tail
        last = self._segment(base).last_batch(
            tail[1] if tail is not None and tail[0] == base else None
        )
        self._tail = None if last is None else (base, last)
        return base if last is None else last.next_offset

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        """The segments, oldest first (opens every one: O(segments))."""
        self.refresh()
        return tuple(self._segment(b) for b in self._bases)

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def num_segments(self) -> int:
        return len(self._bases)

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def update_high_watermark(self, offset: int) -> int:
        """The high watermark the writer published (not clamped to the files' end);
        returns it."""
        self._high_watermark = max(offset, self._log_start_offset)
        return self._high_watermark

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO, computed from the producer snapshots and the batches after the
        newest one (see ``transactions``)."""
        hw = self._high_watermark
        self.refresh()
        first = self._txns.first_unstable_offset(hw)
        if first is None:
            return hw
        return max(min(hw, first), self._log_start_offset)

    # -- listing --------------------------------------------------------------------------

    def refresh(self, *, force: bool = False) -> bool:
        """List the directory again if it changed (a roll, retention, a swap); True if
        the segment list changed.

        A listing costs one ``listdir`` (O(segments)), so it is skipped while the
        directory's mtime is the one already listed, unless that mtime was too recent to
        trust (a change within the file system's timestamp granularity would not move
        it). File mtimes are wall-clock times, hence ``time.time_ns`` here and not an
        injected clock.
        """
        try:
            st = LOCAL.stat(self.dir)
            mtime, inode = st.st_mtime_ns, st.st_ino
        except FileNotFoundError:
            mtime, inode = -1, None
        replaced = inode is not None and inode != self._inode
        if (
            not replaced
            and not force
            and mtime == self._listed_mtime
            and time.time_ns() - mtime > _RACY_NS
        ):
            return False
        if replaced or (inode is not None and self._other_topic_id() is not None):
            self._replaced(inode)
            replaced = True
        bases = tuple(list_segment_bases(self.dir))
        with self._lock:
            self._listed_mtime = mtime
            # A compaction swap keeps the base offset of a group's first segment but
            # puts a new file there: an open segment whose file is no longer the one at
            # its path is stale and must be opened again.
            for b in [b for b, seg in self._open.items() if not seg.is_file_at_path()]:
                self._open.pop(b).close_handlers()
            if bases == self._bases:
                return False
            for b in [b for b in self._open if b not in bases]:
                self._open.pop(b).close_handlers()
            # The old last segment may have been trimmed and reopened as inactive: its
            # read-only index counts leading non-zero entries either way.
            self._bases = bases
            if bases and self._log_start_offset < bases[0]:
                self._log_start_offset = bases[0]
            if replaced:
                self._high_watermark = max(self._high_watermark, self._log_start_offset)
            return True

    def _other_topic_id(self) -> str | None:
        """The id in the directory's ``partition.metadata`` if it differs from the one
        this log was opened with (both known): a re-created topic's directory that got
        the deleted one's inode back (ext4 reuses them at once)."""
        if self.topic_id is None:
            return None
        try:
            on_disk = read_topic_id(self.dir)
        except (CorruptPartitionMetadataError, KafkaStorageError):
            return None  # a damaged file says nothing of the topic; check reports it
        return on_disk if on_disk is not None and on_disk != self.topic_id else None

    def _check_directory(self) -> None:
        """Before a segment is opened from the path: the directory is still the one
        this log reads (a re-created topic's files must not answer its offsets)."""
        try:
            inode: int | None = LOCAL.stat(self.dir).st_ino
        except FileNotFoundError:
            return  # gone: the open fails and the read path reports what is missing
        if inode != self._inode or self._other_topic_id() is not None:
            self._replaced(inode)
            # followed (fail.on.data.loss=false): the read in progress walked the old
            # listing, so it starts over on the new one (the read path lists again)
            raise KafkaStorageError(
                f"{self.dir} was replaced by a re-created topic's directory while it was read"
            )

    def _replaced(self, inode: int | None) -> None:
        """The directory under this log's name is another topic's (deleted and
        re-created since it was opened): raise, or warn and start over on it."""
        try:
            new_id = read_topic_id(self.dir)
        except (CorruptPartitionMetadataError, KafkaStorageError):
            new_id = None
        old_id = self.topic_id
        what = (
            f"{self._tp()}: the topic was deleted and re-created while it was read "
            f"(this log holds topic id {old_id or 'unknown'}, the directory now "
            f"{new_id or 'unknown'}: {self.dir})"
        )
        if self.fail_on_data_loss:
            raise TopicIdChangedError(
                f"{what}: its offsets now name another topic's records, so nothing more is "
                f"read from it; get the log again (get_log) to read the new topic "
                f"(fail.on.data.loss=false warns and follows it instead)",
                self.topic,
                self.partition,
                old_id,
                new_id,
            )
        logger.warning(
            "%s: reading the new topic from its log start "
            "(fail.on.data.loss=false); what was not read of the old one is lost",
            what,
        )
        published = self._published_high_watermark()
        with self._lock:
            for seg in self._open.values():
                seg.close_handlers()
            self._open.clear()
            self._bases = ()
            self._inode = inode if inode is not None else self._inode
            self.topic_id = new_id
            self._contiguous = None
            self._log_start_offset = 0
            self._high_watermark = published
            self._txns = Transactions(
                lambda: self.dir, self._view, lambda: self._log_start_offset, read_only=True
            )

    def _published_high_watermark(self) -> int:
        """The new directory's high watermark in its log dir's checkpoint (0: none yet,
        raised to the log start by the listing)."""
        path = self.dir.parent / HIGH_WATERMARK_CHECKPOINT
        return OffsetCheckpointFile(path).read().get((self.topic, self.partition), 0)

    def _relist(self, *, force: bool = False) -> None:
        self.refresh(force=force)

    def _segment(self, base: int) -> LogSegment:
        if base not in self._open:
            self._check_directory()
        with self._lock:
            seg = self._open.get(base)
            if seg is None:
                cfg = self.config
                seg = LogSegment.open(
                    self.dir,
                    base,
                    index_interval_bytes=cfg.index_interval_bytes,
                    max_index_size=cfg.segment_index_bytes,
                    read_only=True,
                )
                self._open[base] = seg
            return seg

    def _view(self) -> tuple[tuple[int, ...], Callable[[int], LogSegment]]:
        bases = self._bases
        return bases, lambda i: self._segment(bases[i])

    def _read_end(self) -> int:
        return self._high_watermark

    # -- lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        """Release every open file."""
        with self._lock:
            for seg in self._open.values():
                seg.close_handlers()
            self._open.clear()

    if not TYPE_CHECKING:
        # Hidden from the checker: to it, a __getattr__ would make every attribute of a
        # LogReader exist, so a writer call on a reader would type-check.
        def __getattr__(self, name: str) -> NoReturn:
            if name in _WRITER_OPERATIONS:
                raise ReadOnlyError(
                    f"log {self.dir} is open read-only (a LogReader): {name} is a writer operation"
                )
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __enter__(self) -> LogReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"LogReader({self.dir}, start={self._log_start_offset}, "
            f"high watermark={self._high_watermark}, segments={self.num_segments})"
        )
