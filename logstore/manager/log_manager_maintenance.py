"""The writer ``LogManager``'s upkeep: flushing, the offset checkpoints and the periodic
maintenance tasks (retention, compaction, the flusher, removal of deleted files).

``ManagerMaintenance`` is a component of ``log_manager.LogManager``, handed the manager's
partition table and its writability check; it owns the state these need: the
``scheduler`` of the tasks (its last runs shared through each log dir), the ``deleter``
of ``.deleted`` segment files, the ``-delete`` directories pending removal, the cleaner
(created on first use: its offset map is large) and ``lock`` (the maintenance lock).

The high watermark is the visibility contract with other processes:
``checkpoint_high_watermarks()`` flushes every log up to its high watermark *before*
writing ``replication-offset-checkpoint``, so what another process can see has been
fsynced. ``publisher`` runs it within ``linger.ms`` of an ``append(publish=True)``
(``publisher``), so a producer's records reach other processes without asking.

Thread-safety: as ``LogManager`` (the lock order is in ``log_manager``'s docstring).
``lock`` keeps retention and compaction of a log apart: the cleaner reads inactive
segments without the ``Log``'s lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from ..errors import SeglogError
from ..log_dirs_api import TaskRun
from ..records.record_format import TopicPartition
from ..storage.file_names import (
    HIGH_WATERMARK_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
)
from ..storage.storage import LOCAL
from ..util.delayed_deletion import DelayedDeleter
from .log_dirs import LogDir, Partition
from .partition_table import PartitionTable
from .publisher import LingerPublisher
from .scheduler import (
    MaintenanceTask,
    Scheduler,
    standard_tasks,
    write_shared_last_runs,
)

if TYPE_CHECKING:
    from ..cleaner.cleaner import CleanerStats, LogCleaner
    from ..log.log import Log

# The LogManager's messages keep the one logger name users configure, whichever of its
# modules logs them.
logger = logging.getLogger("seglog.logstore.manager.log_manager")

CLEANER_TASK = "log-cleaner"
_T = TypeVar("_T")


class ManagerMaintenance:
    """Flushing, checkpoints and maintenance of the writer's logs, a component of
    ``LogManager``: ``table`` is the manager's partition table, ``check_writable`` raises
    unless the writer may write now."""

    def __init__(self, table: PartitionTable[Log], check_writable: Callable[[], None]) -> None:
        self._table = table
        self._check_writable = check_writable
        clock = table.clock
        # table.lock also guards _pending_deletes
        self._pending_deletes: list[tuple[Path, int]] = []  # (dir, due wall-clock ms)
        self.scheduler = Scheduler(clock)
        # retention and compaction of one log must not overlap (the cleaner reads
        # inactive segments without the Log's lock)
        self.lock = threading.RLock()
        self._cleaner: LogCleaner | None = None  # created on first use (large map)
        # `.deleted` segment files of every log, unlinked after file.delete.delay.ms
        self.deleter = DelayedDeleter(clock)
        # appends published within linger.ms (the visibility contract, module doc)
        self.publisher = LingerPublisher(table.config.linger_ms,
                                         self.checkpoint_high_watermarks,
                                         name="seglog-publisher")
        # The maintenance last-runs this writer last wrote to its dirs (``save_last_runs``).
        self._saved_runs: dict[str, int] | None = None

    def _each(self, parts: Iterable[Partition[Log]], action: Callable[[Partition[Log]], _T],
              what: str, errors: list[Exception] | None = None) -> list[_T]:
        """``action(p)`` under each partition's lock. One partition's failure is logged
        and does not stop the others; the first one (of ``errors`` too) is raised at the
        end. ``action`` must not take the manager lock (lock order)."""
        results: list[_T] = []
        errors = list(errors or ())
        for p in parts:
            try:
                with p.lock:
                    results.append(action(p))
            except (SeglogError, OSError) as e:
                logger.error("%s of %s failed: %s", what, p.dir, e)
                errors.append(e)
        if errors:
            raise errors[0]
        return results

    def _load_each(self, parts: Iterable[Partition[Log]], what: str) -> list[Exception]:
        """Load the logs of ``parts`` holding no lock (``_load`` takes the manager lock,
        then the partition's); returns the failures, each logged."""
        errors: list[Exception] = []
        for p in parts:
            try:
                if not p.deleted:
                    self._table.load(p)
            except (SeglogError, OSError) as e:
                logger.error("%s of %s failed: %s", what, p.dir, e)
                errors.append(e)
        return errors

    def flush_all(self) -> None:
        """fsync every loaded log (unloaded ones have nothing unflushed)."""
        def flush(p: Partition[Log]) -> None:
            if p.log is not None:
                p.log.flush()

        self._each(self._table.loaded(), flush, "flush")

    def checkpoint_high_watermarks(self) -> None:
        """Flush each log up to its high watermark, then write every dir's
        ``replication-offset-checkpoint``: what other processes can see is fsynced.
        A log whose flush fails keeps its old published value (the file says
        ``min(HW, recovery point)``), and its error is raised after the write."""
        self._check_writable()
        self.publisher.publishing()

        def flush_to_hw(p: Partition[Log]) -> None:
            if p.log is not None:
                p.log.flush(p.log.high_watermark)

        try:
            self._each(self._table.loaded(), flush_to_hw, "flush to the high watermark")
        finally:
            for ld in self._table.log_dirs:
                self.write_checkpoint(ld, HIGH_WATERMARK_CHECKPOINT)

    def checkpoint_recovery_points(self) -> None:
        self._check_writable()
        for ld in self._table.log_dirs:
            self.write_checkpoint(ld, RECOVERY_POINT_CHECKPOINT)

    def checkpoint_log_start_offsets(self) -> None:
        self._check_writable()
        for ld in self._table.log_dirs:
            self.write_checkpoint(ld, LOG_START_OFFSET_CHECKPOINT)

    def write_checkpoints(self, log_dir: LogDir) -> None:
        for name in (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT,
                     HIGH_WATERMARK_CHECKPOINT):
            self.write_checkpoint(log_dir, name)

    def write_checkpoint(self, log_dir: LogDir, name: str) -> None:
        with self._table.lock:
            parts = [p for p in self._table.listed() if p.log_dir is log_dir]
            offsets: dict[TopicPartition, int] = {}
            logs: dict[TopicPartition, Log] = {}
            for p in parts:
                log = p.log
                if log is not None:
                    logs[p.tp] = log
                if name == RECOVERY_POINT_CHECKPOINT:
                    offsets[p.tp] = (log.recovery_point if log is not None
                                     else log_dir.recovery_points.get(p.tp, 0))
                elif name == HIGH_WATERMARK_CHECKPOINT:
                    # HW <= recovery point: publish only flushed data (see module doc)
                    offsets[p.tp] = (min(log.high_watermark, log.recovery_point)
                                     if log is not None
                                     else log_dir.high_watermarks.get(p.tp, 0))
                elif log is None:
                    if p.tp in log_dir.log_start_offsets:
                        offsets[p.tp] = log_dir.log_start_offsets[p.tp]
                else:
                    segments = log.segments
                    if segments and log.log_start_offset > segments[0].base_offset:
                        offsets[p.tp] = log.log_start_offset
            written = log_dir.written.get(name)
            if written == offsets:
                return  # durable already: a commit and the pause after it write it alike
            if (name == RECOVERY_POINT_CHECKPOINT and written is not None
                    and _same_recovery(written, offsets, logs)):
                return
            log_dir.checkpoint(name).write(offsets)
            log_dir.written[name] = offsets

    def run_maintenance(self, *, force: bool = False,
                        before_task: Callable[[str, int, int], None] | None = None
                        ) -> list[TaskRun]:
        """Run the maintenance tasks that are due now (for short-lived processes): due
        means the task's interval has passed since any writer of these dirs ran it.
        ``force``: run every task now, due or not (``seglog maintain``).
        ``before_task(name, index, count)`` is called before each task (progress)."""
        self._check_writable()
        runs = (self.scheduler.run_all(before_task=before_task) if force
                else self.scheduler.run_due(before_task=before_task))
        if runs:
            self.save_last_runs()
        return runs

    def save_last_runs(self) -> None:
        runs = self.scheduler.last_runs()
        if runs == self._saved_runs:
            return  # as this writer last wrote them (see ``LogDir.written``)
        if write_shared_last_runs([d.path for d in self._table.log_dirs], runs):
            self._saved_runs = dict(runs)

    def tasks(self) -> list[MaintenanceTask]:
        """Every periodic task of this manager: THE place to add one."""
        tasks = standard_tasks(
            self._table.config,
            retention=lambda now: self.delete_old_segments(),
            flush=self._flush_dirty,
            checkpoint_recovery_points=lambda now: self.checkpoint_recovery_points(),
            checkpoint_log_start_offsets=lambda now: self.checkpoint_log_start_offsets(),
            checkpoint_high_watermarks=lambda now: self.checkpoint_high_watermarks(),
            delete_logs=self.delete_logs,
            now_ms=self._table.clock.monotonic_ms())
        if self._table.config.log_cleaner_enable:
            tasks.append(MaintenanceTask(CLEANER_TASK,
                                         self._table.config.log_cleaner_backoff_ms or 1,
                                         self.clean, self._table.clock.monotonic_ms()))
        return tasks

    def clean(self, now_ms: int | None = None) -> CleanerStats | None:
        """One compaction pass over the dirtiest log with ``cleanup.policy`` compact
        (Kafka's cleaner thread, one pass per run); returns its ``CleanerStats`` or None.
        Loads the compacted partitions."""
        self._check_writable()
        with self._table.lock:
            parts = [p for p in self._table.listed()
                     if not p.deleted and self._table.config_of(p).compact]
        if not parts:
            return None
        errors = self._load_each(parts, "loading for compaction")
        if errors:
            raise errors[0]
        logs = [p.log for p in parts if p.log is not None]
        with self.lock:
            return self.log_cleaner().clean_dirtiest(logs)

    def log_cleaner(self) -> LogCleaner:
        if self._cleaner is None:
            from ..cleaner.cleaner import LogCleaner

            self._cleaner = LogCleaner(self._table.config, self._table.clock)
        return self._cleaner

    def delete_old_segments(self) -> int:
        """Retention over every partition: by log start offset always, by time and size
        with ``cleanup.policy`` delete (the Log decides). Returns the number of segments
        deleted. Loads unloaded partitions."""
        self._check_writable()
        with self._table.lock:
            parts = list(self._table.listed())
        errors = self._load_each(parts, "loading for retention")
        # None: deleted by a concurrent delete_topic, or its load failed (raised after)
        with self.lock:
            return sum(self._each(parts, lambda p: 0 if p.log is None
                                  else p.log.delete_old_segments(), "retention", errors))

    def _flush_dirty(self, now_ms: int) -> int:
        """Kafka's flusher: each log whose ``flush.ms`` has elapsed since its last flush
        (unloaded logs have nothing unflushed)."""
        return sum(self._each(self._table.loaded(),
                              lambda p: bool(p.log is not None and p.log.flush_if_due()),
                              "scheduled flush"))

    def schedule_removal(self, target: Path, due_ms: int) -> None:
        """Remove the ``-delete`` directory ``target`` once the wall clock passes
        ``due_ms`` (``delete_logs``); the caller holds the table lock or not."""
        with self._table.lock:
            self._pending_deletes.append((target, due_ms))

    def reload_cleaner_checkpoints(self, log_dir: Path) -> None:
        """Make the cleaner, if one was created, forget what it read of ``log_dir``'s
        ``cleaner-offset-checkpoint`` (rewritten by a repair); under ``lock``."""
        if self._cleaner is not None:
            self._cleaner.reload_checkpoints(log_dir)

    def delete_logs(self, now_ms: int) -> int:
        """Unlink the due ``.deleted`` segment files and remove the ``-delete`` directories
        whose delay has passed; returns how many files and directories went."""
        removed = self.deleter.run_due()
        with self._table.lock:
            due = [(d, t) for d, t in self._pending_deletes if t <= now_ms]
            self._pending_deletes = [(d, t) for d, t in self._pending_deletes if t > now_ms]
        for d, t in due:
            try:
                LOCAL.rmtree(d)
                LOCAL.fsync_dir(d.parent)
                removed += 1
                logger.info("removed %s", d)
            except FileNotFoundError:
                removed += 1
            except OSError as e:
                logger.error("cannot remove %s (will retry): %s", d, e)
                with self._table.lock:
                    self._pending_deletes.append((d, t))
        return removed


def _same_recovery(written: dict[TopicPartition, int], offsets: dict[TopicPartition, int],
                   logs: dict[TopicPartition, Log]) -> bool:
    """Whether the recovery points ``written`` (the file's content, fsynced) make an
    unclean open recover exactly what ``offsets`` would: each one equal, or behind it
    but in the same segment of the log, not below its log start. Recovery starts at the
    segment holding the recovery point (``LogLoader``, as Kafka's) and a clean open
    ignores the file (the recovery point is the log end then), so rewriting it with a
    point that moved within its segment (every micro-batch of the sink) costs two fsyncs
    and changes nothing after any crash. A roll, a truncation or a deleted segment
    moves it to another segment, or back: then it is written."""
    if written.keys() != offsets.keys():
        return False
    for tp, new in offsets.items():
        old = written[tp]
        if old == new:
            continue
        log = logs.get(tp)
        if (log is None or not log.log_start_offset <= old <= new
                or log.segment_base_of(old) != log.segment_base_of(new)):
            return False
    return True
