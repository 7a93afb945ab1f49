"""``LogDirsReader``: another process's log dirs, read without a lock and writing nothing.

What a Spark source, the sink's checks and the CLI's read commands use (the writer is
``log_manager.LogManager``; ``LogManager(dirs, read_only=True)`` returns one of these).
Its promises, per log dir, as ``LogReader``'s per partition:

* **No lock, no write.** No ``.lock``, no recovery, no checkpoint or marker written, no
  leftover removed; every writer method raises ``ReadOnlyError``.
* **What the writer published, read again on each call.** ``high_watermarks()`` and
  ``log_start_offsets()`` re-read ``replication-offset-checkpoint`` /
  ``log-start-offset-checkpoint`` every time (the writer moves them), push the high
  watermarks into the ``LogReader``s already loaded, and apply the rules of
  ``partition_table`` (unlisted → log start; beyond the log end → clamped, warned, and
  reported by ``high_watermarks_beyond_log_end()``). A damaged publishing checkpoint
  raises ``CorruptCheckpointError`` at open and at every later re-read, never "empty"
  and never "the values read before"; a damaged recovery-point file is only warned
  about (a reader does not use it).
* **Cheap "refresh if changed".** ``topics()``, ``partitions()`` and the offsets re-list
  a log dir or a partition dir only when its mtime moved (``log_dirs.unchanged_since``),
  and the clamp probes a partition's last segment only when its high watermark changed
  (``offset_checkpoints.HW_CHECK``): keep one reader per process and a trigger's cost
  does not grow with the number of segments.

Over 500 lines: one reader's cache (listings, loaded ``LogReader``s, the clamp) behind
one lock; the listing rules live in ``log_dirs`` and the clamp in ``partition_table``.

Thread-safety: the public methods are thread-safe (``_lock``, then a partition's
``lock`` while its ``LogReader`` is opened).

>>> with LogDirsReader(["/data/logs"]) as reader:                      # doctest: +SKIP
...     reader.high_watermarks()
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import TYPE_CHECKING, NoReturn

from ..config.config import ConfigValues, LogConfig, ManagerConfig
from ..errors import (
    CorruptCheckpointError,
    KafkaStorageError,
    LogDirError,
    ReadOnlyError,
    UnknownTopicOrPartitionError,
)
from ..log.log_reader import LogReader
from ..log.log_segment import LogSegment
from ..log.offset_checkpoints import (
    PUBLISHING_CHECKPOINTS,
    fix_hint,
    probe_log_end_offset,
    read_dir_checkpoints,
    read_published,
    warn_beyond_log_end,
)
from ..log.partition_metadata import read_topic_id
from ..log_dirs_api import SegmentLayout
from ..records.record_format import TopicPartition
from ..storage.file_names import (
    CLEAN_SHUTDOWN_FILE,
    HIGH_WATERMARK_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
)
from ..storage.storage import LOCAL
from ..util.clock import SYSTEM_CLOCK, Clock
from .log_dirs import (
    LogDir,
    Partition,
    canonical_dirs,
    list_log_dir,
    segment_bases,
    unchanged_since,
)
from .partition_table import (
    PartitionTable,
    SegmentSizes,
    inode_of,
    list_segment_layout,
    warn_start_beyond_log_end,
)

if TYPE_CHECKING:  # the check's modules load with it: a reader that only lists starts faster
    from .log_check import Problem

logger = logging.getLogger(__name__)

_CHECKPOINT_ATTRS = {
    RECOVERY_POINT_CHECKPOINT: "recovery_points",
    LOG_START_OFFSET_CHECKPOINT: "log_start_offsets",
    HIGH_WATERMARK_CHECKPOINT: "high_watermarks",
}


class _Block(threading.local):
    """A thread's ``one_refresh`` block: how deep it is nested, whether it listed."""

    def __init__(self) -> None:
        self.depth = 0
        self.listed = False


def _writer_only(name: str) -> Callable[..., NoReturn]:
    def refuse(self: LogDirsReader, *args: object, **kwargs: object) -> NoReturn:
        self.check_writable()
        raise AssertionError("unreachable")  # check_writable always raises here

    refuse.__name__ = name
    refuse.__doc__ = f"Writer only: raises ``ReadOnlyError`` (``LogManager.{name}``)."
    return refuse


class LogDirsReader(PartitionTable[LogReader]):
    """The partitions of ``log_dirs`` as another process published them (module doc).

    ``config``/``default_topic_config``/``clock`` as ``LogManager``'s."""

    read_only = True
    # ``log_check`` sets it on a subclass: damaged checkpoints are recorded for the report
    # instead of raised (their offsets are then unknown).
    _tolerate_damaged_checkpoints = False

    def __init__(
        self,
        log_dirs: Iterable[str | os.PathLike[str]] | str | os.PathLike[str],
        *,
        config: ManagerConfig | ConfigValues | None = None,
        default_topic_config: LogConfig | ConfigValues | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__(config, default_topic_config, clock)
        self._block = _Block()  # this thread's ``one_refresh`` block
        raw = [log_dirs] if isinstance(log_dirs, (str, os.PathLike)) else list(log_dirs)
        if not raw:
            raise LogDirError("no log dir given")
        try:
            for path in canonical_dirs(raw, True):
                ld = LogDir(path, None, LOCAL.exists(path / CLEAN_SHUTDOWN_FILE))
                self.log_dirs.append(ld)
                # taken before listing: a change during it shows next time
                ld.listed_mtime_ns = unchanged_since(path, None)[1]
                found, _ = list_log_dir(ld, read_only=True)
                self._add_listed(found)
                # After the listing: whether a missing file is damage depends on it.
                self._read_checkpoints(ld, has_partitions=bool(found))
        except BaseException:
            self.close()
            raise

    def _read_checkpoints(self, log_dir: LogDir, *, has_partitions: bool) -> None:
        values, damaged = read_dir_checkpoints(log_dir.path, has_partitions=has_partitions)
        for name, e in damaged.items():
            log_dir.damaged[name] = str(e)
            if name in PUBLISHING_CHECKPOINTS and not self._tolerate_damaged_checkpoints:
                raise CorruptCheckpointError(f"{e}; {fix_hint(log_dir.path)}") from e
            logger.warning("%s; a reader does not need it", e)
        for name, entries in values.items():
            setattr(log_dir, _CHECKPOINT_ATTRS[name], entries)

    # -- refresh if changed --------------------------------------------------------------

    @contextmanager
    def one_refresh(self, refresh: bool = True) -> Iterator[None]:
        """Look at the log dirs' listings once for the whole block (this thread's calls):
        a writer's every publish renames its checkpoint into the log dir, so while a
        producer runs the dir's mtime always moved, and each call of a trigger's snapshot
        (topics, high watermarks, topic ids) listed it again. The checkpoints are still
        read on each call: only the listing is shared, as if the calls were one."""
        block = self._block
        outer = block.depth > 0
        block.depth += 1
        try:
            yield
        finally:
            block.depth -= 1
            if not outer:
                block.listed = False

    def _refresh(self) -> None:
        """Pick up partitions created or deleted by the writer since the last listing
        (once per ``one_refresh`` block)."""
        block = self._block
        if block.depth > 0:
            if block.listed:
                return
            self._refresh_listing()
            block.listed = True  # not on failure: the block's next call looks again
            return
        self._refresh_listing()

    def _refresh_listing(self) -> None:
        with self._lock:
            seen: set[TopicPartition] = set()
            changed = False
            for ld in self.log_dirs:
                unchanged, mtime = unchanged_since(ld.path, ld.listed_mtime_ns)
                if unchanged:
                    seen.update(p.tp for p in self._partitions.values() if p.log_dir is ld)
                    continue
                changed = True
                ld.listed_mtime_ns = mtime
                for p in list_log_dir(ld, read_only=True, warn=False)[0]:
                    seen.add(p.tp)
                    known = self._partitions.setdefault(p.tp, p)
                    if known is not p and (
                        known.inode != p.inode or self._replaced_in_place(known)
                    ):
                        # Another directory under the same name: the topic was deleted
                        # and re-created. Its entry (log, topic id, config) is the old
                        # topic's and must not answer for the new one.
                        self._replace(known, p)
            if not changed:
                return
            for tp in [tp for tp in self._partitions if tp not in seen]:
                gone = self._partitions.pop(tp)
                if gone.log is not None:
                    gone.log.close()

    def _replace(self, old: Partition[LogReader], new: Partition[LogReader] | None) -> None:
        """Drop ``old``'s entry (its log closed, its topic's config forgotten) for
        ``new`` (None: the directory is gone). Called under ``_lock``."""
        if new is None:
            self._partitions.pop(old.tp, None)
        else:
            self._partitions[old.tp] = new
        self._topic_configs.pop(old.topic, None)
        with old.lock:
            old.deleted = True
            if old.log is not None:
                old.log.close()
                old.log = None

    @staticmethod
    def _replaced_in_place(p: Partition[LogReader]) -> bool:
        """Whether ``p``'s directory now holds another topic id than the one its entry
        read, under the same inode number: deleted, collected and re-created between two
        listings, the new directory got the old one's inode back (ext4 reuses them at
        once). The id is read again only when the directory's mtime is not the one it
        had when the id was last read or confirmed, so an unchanged partition costs one
        stat per listing. Limit: a re-created directory whose mtime is exactly the old
        one's (all within one tick of the kernel clock) is left to ``reload_partition``
        (a task whose plan names another id)."""
        if not p.topic_id_read or p.topic_id is None:
            return False  # no id to compare: ``reload_partition`` looks for an added one
        try:
            mtime = LOCAL.stat(p.dir).st_mtime_ns
        except FileNotFoundError:
            return False  # gone since the listing: the next one drops it
        if mtime == p.id_confirmed_mtime_ns:
            return False
        on_disk = read_topic_id(p.dir)
        if on_disk is not None and on_disk != p.topic_id:
            return True
        p.id_confirmed_mtime_ns = mtime
        return False

    def reload_partition(self, topic: str, partition: int) -> None:
        """Look at the partition's directory again whatever its log dir's mtime says: a
        directory other than the one its entry was read from (deleted and re-created)
        replaces the entry, a missing one removes it; the same directory, read without
        an id before, is read again for one added since; a directory of the same inode
        number holding another id replaces the entry too (the inode was reused). What a
        task does when its plan names another topic id than the log it has cached."""
        with self._lock:
            p = self._partitions.get((topic, partition))
        if p is None:
            self._refresh()
            return
        try:
            inode = LOCAL.stat(p.dir).st_ino
        except FileNotFoundError:
            inode = None
        if inode == p.inode:
            if not p.topic_id_read:
                return  # its id is read with its log, from this directory
            if p.topic_id is None:
                self._look_for_added_id(p)
                return
            on_disk = read_topic_id(p.dir)
            if on_disk is None or on_disk == p.topic_id:
                return
            # Another topic's directory under the old inode number: a re-created
            # directory that got the deleted one's inode back (ext4 reuses them at once).
        with self._lock:
            if self._partitions.get(p.tp) is p:
                fresh: Partition[LogReader] | None = (
                    None
                    if inode is None
                    else Partition(topic, partition, p.dir, p.log_dir, inode=inode)
                )
                self._replace(p, fresh)

    @staticmethod
    def _look_for_added_id(p: Partition[LogReader]) -> None:
        """Read the id of a directory that had none when its entry was made: a Kafka
        broker writes ``partition.metadata`` into an existing directory (an upgrade to
        topic ids; a new partition's file is flushed after the directory is made). Kept
        only if the directory is still the entry's."""
        with p.lock:
            topic_id = read_topic_id(p.dir)
            if topic_id is not None and inode_of(p) == p.inode:
                p.topic_id = topic_id
                if p.log is not None:
                    p.log.topic_id = topic_id

    def _cached_segment_bases(self, p: Partition[LogReader]) -> tuple[int, ...]:
        """Re-list a partition only when its directory changed, so a trigger's cost does
        not grow with the number of segments."""
        cached = p.listed_bases
        unchanged, mtime = unchanged_since(p.dir, cached[1] if cached else None)
        if unchanged and cached is not None:
            return cached[0]
        bases = segment_bases(p.dir)
        p.listed_bases = (bases, mtime)
        return bases

    def _probe_log_end(self, p: Partition[LogReader]) -> int:
        """The log end of ``p`` (no log loaded: a source's planner), cheap enough for
        every trigger: the last segment of the cached listing (listed again only when the
        directory changed), its ``.log`` opened for the look only (a trigger over many
        partitions holds no file open after it), the scan resuming at the batch the
        previous probe found last. A segment gone since the listing: the full probe."""
        bases = self._cached_segment_bases(p)
        if not bases:
            return probe_log_end_offset(p.dir)
        base = bases[-1]
        known = p.last_batch
        try:
            segment = LogSegment.open(p.dir, base, read_only=True)
        except KafkaStorageError:
            return probe_log_end_offset(p.dir)  # retention or a swap since the listing
        try:
            last = segment.last_batch(known[1] if known is not None and known[0] == base else None)
        finally:
            segment.close_handlers()
        p.last_batch = None if last is None else (base, last)
        return base if last is None else last.next_offset

    def _cached_first_segment_base(self, p: Partition[LogReader]) -> int:
        bases = self._cached_segment_bases(p)
        return bases[0] if bases else 0

    def segment_layout(self, topic: str, partition: int) -> SegmentLayout | None:
        """``log_dirs_api.LogDirsView.segment_layout``: the listing the log start offset
        came from (listed again only when the directory changed: a new query's first
        trigger lists each partition once, not twice); each ``.log`` is stat'ed when its size
        is asked (``SegmentSizes``)."""
        try:
            p = self._partition(topic, partition)
        except UnknownTopicOrPartitionError:
            return None
        cached = p.listed_bases
        unchanged, mtime = unchanged_since(p.dir, cached[1] if cached else None)
        if unchanged and cached is not None:
            return cached[0], SegmentSizes(str(p.dir), cached[0])
        layout = list_segment_layout(str(p.dir))  # None: the directory is gone
        if layout is not None:
            p.listed_bases = (layout[0], mtime)
        return layout

    # -- logs ------------------------------------------------------------------------------

    def _open_log(self, p: Partition[LogReader], config: LogConfig) -> LogReader:
        """``p``'s ``LogReader`` (``load`` calls this under ``p.lock``)."""
        ld = p.log_dir
        # The directory its topic id is read from (now, or again if it was replaced
        # since the id was read): the log and the id the entry reports are one topic's.
        if not p.topic_id_read or inode_of(p) != p.inode:
            self._identify(p)
        stored_hw = ld.high_watermarks.get(p.tp)
        # Not listed: nothing published, so the log start offset (the reader raises
        # 0 to it), whichever reader asks and in whatever order.
        hw = stored_hw if stored_hw is not None else 0
        stored_lso = ld.log_start_offsets.get(p.tp, 0)
        fail = self.config.fail_on_data_loss
        log = LogReader.open(
            p.dir, config, log_start_offset=stored_lso, high_watermark=hw, fail_on_data_loss=fail
        )
        if stored_lso > log.log_end_offset:
            end = log.log_end_offset
            log.close()
            log = LogReader.open(p.dir, config, high_watermark=hw, fail_on_data_loss=fail)
            warn_start_beyond_log_end(p, stored_lso, end, log.log_start_offset)
        # Kafka's rule, as a writer's load and ``high_watermarks()`` apply it: the
        # published high watermark is clamped to the files' end, so a log's answer does
        # not depend on which of the two was asked first.
        end = log.log_end_offset
        if log.high_watermark > end:
            warn_beyond_log_end(ld.path / HIGH_WATERMARK_CHECKPOINT, p.tp, hw, end)
            log.update_high_watermark(end)
        log.topic_id = p.topic_id
        return log

    # -- the published offsets -----------------------------------------------------------

    def high_watermarks(self) -> dict[TopicPartition, int]:
        """Per partition, the end of what readers may see: straight from each dir's
        ``replication-offset-checkpoint`` and its listing (no segment is read)."""
        parts, stored = self._reread(HIGH_WATERMARK_CHECKPOINT)
        out = {}
        listed = []
        for p in parts:
            value = stored[id(p.log_dir)].get(p.tp)
            if value is None:  # nothing published: the log start offset
                out[p.tp] = max(
                    p.log_dir.log_start_offsets.get(p.tp, 0), self._cached_first_segment_base(p)
                )
            else:
                listed.append((p, value))
        for (p, _), value in zip(listed, self._clamped_high_watermarks(listed), strict=True):
            out[p.tp] = value
        for p in parts:
            if p.log is not None:
                # a LogReader reads up to the high watermark it was last told
                p.log.update_high_watermark(out[p.tp])
        return out

    def log_start_offsets(self) -> dict[TopicPartition, int]:
        """Per partition, the first offset still in the log: the checkpoint, else the
        first segment's base offset from the listing."""
        parts, stored = self._reread(LOG_START_OFFSET_CHECKPOINT)
        out = {}
        for p in parts:
            first = self._cached_first_segment_base(p)
            value = max(stored[id(p.log_dir)].get(p.tp) or 0, first)
            if value > first:  # DeleteRecords only: rare, so checked every time
                value = self._checked_start_offset(p, value, first)
            out[p.tp] = value
        return out

    def _reread(
        self, name: str
    ) -> tuple[list[Partition[LogReader]], dict[int, dict[TopicPartition, int]]]:
        """The partitions now listed and each dir's ``name`` checkpoint, read again."""
        self._refresh()
        with self._lock:
            parts = list(self._partitions.values())
        stored: dict[int, dict[TopicPartition, int]] = {}
        for ld in self.log_dirs:
            stored[id(ld)] = values = read_published(
                ld.path, name, has_partitions=any(p.log_dir is ld for p in parts)
            )
            setattr(ld, _CHECKPOINT_ATTRS[name], values)
        return parts, stored

    # -- checking --------------------------------------------------------------------------

    def check(self, *, fix: bool = False, deep: bool = False) -> list[Problem]:
        """Inconsistencies between the checkpoints, topic configs and files (with
        ``deep``, every batch and index entry too); ``fix`` needs a writer."""
        from .log_check import check_manager

        return check_manager(self, fix=fix, deep=deep)

    def check_writable(self) -> NoReturn:
        raise ReadOnlyError(
            f"this reader of {self.dirs_text()} is read-only (a "
            "LogDirsReader, or LogManager(read_only=True)); open a writer "
            "LogManager to change it"
        )

    # Writer methods, kept so code written against LogManager fails clearly.
    create_topic = _writer_only("create_topic")
    add_partitions = _writer_only("add_partitions")
    delete_topic = _writer_only("delete_topic")
    alter_topic_config = _writer_only("alter_topic_config")
    append = _writer_only("append")
    append_many = _writer_only("append_many")
    append_async = _writer_only("append_async")
    flush = _writer_only("flush")
    delete_records = _writer_only("delete_records")
    truncate_unpublished = _writer_only("truncate_unpublished")
    next_maintenance_ms = _writer_only("next_maintenance_ms")
    files_awaiting_deletion = _writer_only("files_awaiting_deletion")
    checkpoint_high_watermarks = _writer_only("checkpoint_high_watermarks")
    checkpoint_recovery_points = _writer_only("checkpoint_recovery_points")
    checkpoint_log_start_offsets = _writer_only("checkpoint_log_start_offsets")
    write_checkpoints = _writer_only("write_checkpoints")
    reset_cleaner_checkpoint = _writer_only("reset_cleaner_checkpoint")
    rewrite_last_runs = _writer_only("rewrite_last_runs")
    truncate_log = _writer_only("truncate_log")
    run_maintenance = _writer_only("run_maintenance")
    delete_old_segments = _writer_only("delete_old_segments")
    clean = _writer_only("clean")

    def flush_all(self) -> None:
        """Nothing to flush: a reader writes nothing."""

    def delete_logs(self, now_ms: int) -> int:
        """Nothing to delete: a reader never deletes (the writer removes its leftovers)."""
        return 0

    # -- closing ---------------------------------------------------------------------------

    def close(self) -> None:
        """Close the ``LogReader``s opened so far (the reader stays usable: the next call
        opens them again). Idempotent."""
        for p in self.loaded():
            with p.lock:
                if p.log is not None:
                    p.log.close()
                    p.log = None

    def __enter__(self) -> LogDirsReader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LogDirsReader([{self.dirs_text()}])"
