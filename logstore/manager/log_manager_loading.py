"""Opening a writer ``LogManager``'s log dirs (Kafka's ``LogManager.loadLogs``) and one
partition's ``Log`` in them (``loadLog``). Opening, in order:

1. Each log dir is canonicalized (duplicates refused), created if missing, and checked
   for access; the manager takes its ``.lock``.
2. ``.kafka_cleanshutdown`` says whether the previous writer closed cleanly; the manager
   removes it once the open succeeded (anything it writes may be unflushed until close).
3. Entries are listed: ``<topic>-<partition>`` directories (the partition follows the last
   ``-``), ``-delete`` directories (finished: removed by a writer during open), anything
   else is skipped with a warning; one partition in two dirs is a ``LogDirError``.
4. The three offset checkpoints are read under the rules of ``offset_checkpoints``: a
   damaged recovery-point checkpoint makes the dir recover from offset 0; a damaged
   log-start-offset or high-watermark checkpoint (including one missing from a dir that
   holds partitions) raises ``CorruptCheckpointError``, unless the writer was opened with
   ``repair=True`` (``seglog check --fix``): its partitions are then all recovered from
   offset 0 and the lost values rebuilt from them (high watermark = recovered log end,
   log start = first segment). A writer writes the files into a dir with no partition.
5. A clean dir's partitions load lazily, on first use, reading no segment data. An
   unclean dir's partitions are all recovered now (``Log.open(had_clean_shutdown=False)``
   from their recovery points), ``num.recovery.threads.per.data.dir`` at a time per dir,
   all dirs at once; their checkpoints are then rewritten.

``LogDirsLoader`` is a component of ``log_manager.LogManager``, handed the manager's
partition table, its maintenance (pending removals, the offset checkpoints, the deleter),
the ``repair`` flag and how to add listed partitions to the table. Thread-safety: ``open``
runs once, in the manager's constructor, before any other call; ``open_log`` runs under
the partition's lock (``PartitionTable.load``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from ..config.config import LogConfig
from ..errors import (
    CorruptCheckpointError,
    KafkaStorageError,
    LogDirError,
    SeglogError,
    UnknownTopicOrPartitionError,
)
from ..log.offset_checkpoints import (
    OFFSET_CHECKPOINTS,
    PUBLISHING_CHECKPOINTS,
    fix_hint,
    read_dir_checkpoints,
    set_aside,
    warn_beyond_log_end,
)
from ..storage.file_names import (
    CLEAN_SHUTDOWN_FILE,
    HIGH_WATERMARK_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
)
from ..storage.storage import LOCAL
from .dir_lock import DirLock
from .log_dirs import LogDir, Partition, canonical_dirs, list_log_dir
from .log_manager_maintenance import ManagerMaintenance
from .partition_table import PartitionTable, warn_start_beyond_log_end

if TYPE_CHECKING:
    from ..log.log import Log

# The LogManager's messages keep the one logger name users configure, whichever of its
# modules logs them.
logger = logging.getLogger("seglog.logstore.manager.log_manager")


def _log_class() -> type[Log]:
    # Imported late: the Log is the other half of the storage engine and imports nothing
    # from here, but keeping the import out of module load lets the manager's
    # dir/lock/checkpoint logic load without it.
    from ..log.log import Log

    return Log


class LogDirsLoader:
    """Opening the writer's log dirs and its partitions' logs; a component of
    ``LogManager``. ``repair``: rebuild damaged publishing checkpoints instead of
    refusing (``seglog check --fix``); ``add_listed``: put the partitions a listing found
    into the table."""

    def __init__(
        self,
        table: PartitionTable[Log],
        maintenance: ManagerMaintenance,
        *,
        repair: bool,
        add_listed: Callable[[list[Partition[Log]]], None],
    ) -> None:
        self._table = table
        self._maintenance = maintenance
        self._repair = repair
        self._add_listed = add_listed

    def open(self, raw_dirs: list[str | os.PathLike[str]]) -> None:
        """Steps 1 to 5 of the module docstring over ``raw_dirs``."""
        if not raw_dirs:
            raise LogDirError("no log dir given")
        for path in canonical_dirs(raw_dirs, False):
            lock = DirLock(path).acquire()
            marker = path / CLEAN_SHUTDOWN_FILE
            self._table.log_dirs.append(LogDir(path, lock, LOCAL.exists(marker)))
        recover: list[Partition[Log]] = []
        empty_dirs = []
        for log_dir in self._table.log_dirs:
            found, to_delete = list_log_dir(log_dir, read_only=False)
            for d in to_delete:
                self._maintenance.schedule_removal(d, 0)
            self._add_listed(found)
            # After the listing: whether a missing file is damage depends on it.
            self._read_checkpoints(log_dir, has_partitions=bool(found))
            if not log_dir.had_clean_shutdown:
                recover.extend(found)
            if not found:
                empty_dirs.append(log_dir)
        if recover:
            self._recover(recover)
        for ld in empty_dirs:
            # From now on a dir with partitions always has its checkpoints, so a
            # missing one is known to be lost (see offset_checkpoints).
            if ld.repairing or not all(LOCAL.lexists(ld.path / n) for n in OFFSET_CHECKPOINTS):
                self._maintenance.write_checkpoints(ld)
        # Only now: an open that failed above leaves a clean dir clean. From here on
        # this writer may leave unflushed data behind.
        for ld in self._table.log_dirs:
            marker = ld.path / CLEAN_SHUTDOWN_FILE
            if LOCAL.exists(marker):
                LOCAL.unlink(marker)
                LOCAL.fsync_dir(ld.path)
        self._maintenance.delete_logs(self._table.clock.milliseconds())

    def _read_checkpoints(self, log_dir: LogDir, *, has_partitions: bool) -> None:
        """Load the offset checkpoints of ``log_dir`` (rules: ``offset_checkpoints``)."""
        values, damaged = read_dir_checkpoints(log_dir.path, has_partitions=has_partitions)
        for name, e in damaged.items():
            log_dir.damaged[name] = str(e)
            if name in PUBLISHING_CHECKPOINTS:
                if not self._repair:
                    raise CorruptCheckpointError(f"{e}; {fix_hint(log_dir.path)}") from e
                logger.error(
                    "%s; repairing: recovering every partition of %s from "
                    "offset 0 and rebuilding it from the logs",
                    e,
                    log_dir.path,
                )
                log_dir.repairing.add(name)
                set_aside(log_dir.path / name, self._table.clock.milliseconds())
            else:
                # Recovering everything from offset 0 needs no recovery point.
                logger.error("%s; recovering every partition of %s from offset 0", e, log_dir.path)
                if self._repair:
                    set_aside(log_dir.path / name, self._table.clock.milliseconds())
            log_dir.had_clean_shutdown = False
        log_dir.recovery_points = values.get(RECOVERY_POINT_CHECKPOINT, {})
        log_dir.log_start_offsets = values.get(LOG_START_OFFSET_CHECKPOINT, {})
        log_dir.high_watermarks = values.get(HIGH_WATERMARK_CHECKPOINT, {})
        if not log_dir.had_clean_shutdown and log_dir.damaged:
            log_dir.recovery_points = {}

    def _recover(self, partitions: list[Partition[Log]]) -> None:
        """Recover every partition of the unclean dirs: one pool per dir, all at once."""
        threads = self._table.config.num_recovery_threads_per_data_dir
        by_dir: dict[int, list[Partition[Log]]] = {}
        for p in partitions:
            by_dir.setdefault(id(p.log_dir), []).append(p)
        pools = [ThreadPoolExecutor(threads, thread_name_prefix="seglog-recovery") for _ in by_dir]
        try:
            futures = [
                (p, pool.submit(self._table.load, p))
                for pool, group in zip(pools, by_dir.values(), strict=True)
                for p in group
            ]
            errors = []
            for p, fut in futures:
                try:
                    fut.result()
                except SeglogError as e:
                    errors.append(e)
                except OSError as e:
                    errors.append(KafkaStorageError(f"cannot recover {p.dir}: {e}"))
            if errors:
                for other in errors[1:]:
                    logger.error("recovery failed: %s", other)
                raise errors[0]
        finally:
            for pool in pools:
                pool.shutdown(wait=True)
        for p in partitions:
            # The recovery point may lag the published high watermark (their checkpoints
            # run at different intervals); data below the HW was fsynced before the
            # crash, so this is cheap, and the HW checkpoint below cannot go backwards.
            log = self._table.load(p)  # loaded by the pool above: returns it
            log.flush(log.high_watermark)
            if p.log_dir.repairing:
                logger.warning(
                    "repair of %s: %s-%d gets high watermark %d and log start "
                    "offset %d (recovered log end %d)",
                    p.log_dir.path,
                    p.topic,
                    p.partition,
                    log.high_watermark,
                    log.log_start_offset,
                    log.log_end_offset,
                )
        for log_dir in {id(p.log_dir): p.log_dir for p in partitions}.values():
            logger.info(
                "recovered %d partitions of %s",
                sum(1 for p in partitions if p.log_dir is log_dir),
                log_dir.path,
            )
            self._maintenance.write_checkpoints(log_dir)
            log_dir.recovered = True

    def open_log(self, p: Partition[Log], config: LogConfig) -> Log:
        """``p``'s Log, recovered when its dir is unclean (the manager's ``load`` calls
        this under ``p.lock``)."""
        if p.deleted:
            raise UnknownTopicOrPartitionError(f"partition {p.topic}-{p.partition} was deleted")
        ld = p.log_dir
        recovering = not (ld.had_clean_shutdown or ld.recovered)
        stored_hw = ld.high_watermarks.get(p.tp)
        if HIGH_WATERMARK_CHECKPOINT in ld.repairing and not ld.recovered:
            hw = None  # the Log's default: its recovered end (what --fix publishes)
        else:
            # Not listed: nothing published, so the log start offset (Log.open
            # clamps 0 up to it), whichever reader asks and in whatever order.
            hw = stored_hw if stored_hw is not None else 0
        stored_lso = ld.log_start_offsets.get(p.tp, 0)

        def open_log(log_start_offset: int, had_clean_shutdown: bool) -> Log:
            return _log_class().open(
                p.dir,
                config,
                clock=self._table.clock,
                recovery_point=ld.recovery_points.get(p.tp, 0),
                log_start_offset=log_start_offset,
                high_watermark=hw,
                had_clean_shutdown=had_clean_shutdown,
                deleter=self._maintenance.deleter,
            )

        log = open_log(stored_lso, not recovering)
        if stored_lso > log.log_end_offset:
            end = log.log_end_offset
            log.close()
            log = open_log(0, True)  # the first open recovered it if needed
            warn_start_beyond_log_end(p, stored_lso, end, log.log_start_offset)
        if hw is not None and log.high_watermark < hw:
            # Log.open clamped it to the log end; a writer's next high-watermark
            # checkpoint writes the clamped value back.
            warn_beyond_log_end(ld.path / HIGH_WATERMARK_CHECKPOINT, p.tp, hw, log.high_watermark)
        return log
