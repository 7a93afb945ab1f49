"""``LogManager``: every partition log of one or more log dirs, embedded in one process.

Kafka's LogManager without a broker, for the process that writes. Opening, in order:

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

The high watermark is the visibility contract with other processes:
``checkpoint_high_watermarks()`` flushes every log up to its high watermark *before*
writing ``replication-offset-checkpoint``, so what another process can see has been
fsynced. Another process reads through a ``log_dirs_reader.LogDirsReader`` (no lock, no
write); ``LogManager(dirs, read_only=True)`` returns one, so callers written against the
manager keep working.

Thread-safety: the public methods are thread-safe. ``_lock`` guards the partition table,
the checkpoint values of unloaded partitions and the deletion queue; ``_maintenance_lock``
keeps retention and compaction of a log apart; each partition's own ``lock`` serializes
the operations that write its log (a ``Log`` has one writer thread): append, flush,
retention, deletion. Reads through ``get_log(...)`` take no lock.

Lock order, on every path: ``_lock``, then ``_maintenance_lock``, then a partition's
``lock``, then the ``Log``'s own. Loading a log (``_load``) takes ``_lock`` (the topic
config) and then the partition's lock, so it is never called while holding a partition
lock or ``_maintenance_lock``: ``append``, retention and compaction load first.
(``tests/logstore/test_lock_order.py`` checks the order.)

>>> with LogManager([path]) as mgr:                              # doctest: +SKIP
...     mgr.create_topic("events", partitions=3, config={"retention.ms": 86_400_000})
...     mgr.append("events", 0, encode_batches(values))
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from .checkpoint_file import OffsetCheckpointFile, write_atomically
from .clean_shutdown import Fingerprint, fingerprint, holds_token, marker_content, new_token
from .clock import SYSTEM_CLOCK, Clock
from .config import LogConfig, ManagerConfig
from .delayed_deletion import DelayedDeleter
from .dir_lock import DirLock
from .errors import (
    ConfigError,
    CorruptCheckpointError,
    KafkaStorageError,
    LogDirError,
    SeglogError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from .file_names import (
    CLEAN_SHUTDOWN_FILE,
    CLEANER_OFFSET_CHECKPOINT,
    HIGH_WATERMARK_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    LOG_SUFFIX,
    RECOVERY_POINT_CHECKPOINT,
    delete_dir_name,
    partition_dir_name,
)
from .log_check import Problem, check_manager
from .log_dirs import (
    STAGING_PREFIX,
    LogDir,
    Partition,
    TopicPartition,
    canonical_dirs,
    list_log_dir,
)
from .log_dirs_reader import LogDirsReader
from .object_store_config import StorageOptions
from .offset_checkpoints import (
    OFFSET_CHECKPOINTS,
    PUBLISHING_CHECKPOINTS,
    fix_hint,
    read_dir_checkpoints,
    set_aside,
    warn_beyond_log_end,
)
from .partition_table import PartitionTable, warn_start_beyond_log_end
from .scheduler import (
    MaintenanceTask,
    Scheduler,
    TaskRun,
    read_shared_last_runs,
    standard_tasks,
    write_shared_last_runs,
)
from .storage import LOCAL
from .topics import (
    altered_overrides,
    parse_overrides,
    read_topic_config,
    validate_topic_name,
    warn_on_collision,
    write_topic_config,
)

if TYPE_CHECKING:
    from .cleaner import CleanerStats, LogCleaner
    from .log import AppendInfo, Log

logger = logging.getLogger(__name__)

CLEANER_TASK = "log-cleaner"
_T = TypeVar("_T")


def _log_class() -> type[Log]:
    # Imported late: the Log is the other half of the storage engine and imports nothing
    # from here, but keeping the import out of module load lets the manager's
    # dir/lock/checkpoint logic load without it.
    from .log import Log

    return Log


def _bucket_uri(log_dirs: Any) -> str | None:
    """The bucket URI of ``log_dirs`` (``bucket_manager.bucket_uri``), loading the bucket
    engine only when a location looks like a URI: local managers never import it."""
    dirs = [log_dirs] if isinstance(log_dirs, (str, os.PathLike)) else log_dirs
    if not isinstance(dirs, (list, tuple, set, frozenset)):
        return None  # a one-shot iterable must reach __init__ unconsumed: local paths
    if not any(isinstance(d, str) and "://" in d for d in dirs):
        return None
    from .bucket_manager import bucket_uri

    return bucket_uri(dirs)


def _describe_dirs(log_dirs: Iterable[str | os.PathLike] | str | os.PathLike) -> str:
    dirs = [log_dirs] if isinstance(log_dirs, (str, os.PathLike)) else list(log_dirs)
    return ", ".join(os.fspath(d) for d in dirs)


class LogManager(PartitionTable["Log"]):
    """Every partition log of ``log_dirs``, for the one process that writes them.
    Thread-safe (see the module docstring).

    ``config``: a ``ManagerConfig`` or a mapping of broker-level keys;
    ``default_topic_config``: a mapping of topic-level keys that topics override;
    ``background``: run the maintenance tasks on a daemon thread;
    ``repair``: a damaged high-watermark or log-start-offset checkpoint is rebuilt from
    the recovered logs instead of refusing to open (``seglog check --fix``);
    ``read_only=True``: returns a ``LogDirsReader`` instead (see ``__new__``);
    ``storage_options``: endpoint, credentials... of a bucket URI (``object_store_config``),
    refused for local dirs.
    """

    read_only = False

    def __new__(cls, log_dirs: Iterable[str | os.PathLike] | str | os.PathLike, *,
                read_only: bool = False, repair: bool = False, background: bool = False,
                storage_options: Mapping[str, object] | StorageOptions | None = None,
                **kwargs: Any) -> Any:
        # ``LogManager(dirs, read_only=True)`` is how every caller asked for a reader
        # before the reader was its own class: returning one here keeps that spelling
        # working without a second, mode-switching code path. A factory function would
        # need every such call changed at once, and a subclass would be a writer that
        # cannot write. Python skips __init__ since the result is no LogManager. (Any:
        # mypy types every call LogManager; typed code constructs the class it needs.)
        uri = _bucket_uri(log_dirs)
        if uri is not None:
            from .bucket_manager import BucketLogManager

            if repair:
                raise ConfigError(f"repair=True is for local log dirs, not {uri}")
            return BucketLogManager(uri, read_only=read_only, storage_options=storage_options,
                                    **kwargs)
        if storage_options:
            # Endpoint and credentials mean nothing to a directory; taking them silently
            # would hide a path that was meant to be a bucket URI.
            raise ConfigError(
                f"storage_options ({', '.join(StorageOptions.of(storage_options).as_dict())}) "
                f"are for an "
                f"object-store URI (s3://, gs://, az://...), not the local log dir(s) "
                f"{_describe_dirs(log_dirs)}")
        if not read_only:
            return super().__new__(cls)
        if repair:
            raise ConfigError("repair=True needs a writer LogManager, not a read-only one")
        return LogDirsReader(log_dirs, **kwargs)

    def __init__(self, log_dirs: Iterable[str | os.PathLike] | str | os.PathLike, *,
                 read_only: bool = False,
                 config: ManagerConfig | Mapping[str, Any] | None = None,
                 default_topic_config: LogConfig | Mapping[str, Any] | None = None,
                 clock: Clock = SYSTEM_CLOCK, background: bool = False,
                 repair: bool = False,
                 storage_options: Mapping[str, object] | StorageOptions | None = None) -> None:
        # storage_options: for a bucket URI only (__new__ refuses them for local dirs)
        super().__init__(config, default_topic_config, clock)
        self.repair = repair
        # _lock (PartitionTable's) also guards _pending_deletes
        self._pending_deletes: list[tuple[Path, int]] = []  # (dir, due wall-clock ms)
        self._closed = False
        # Set while paused (pause/resume): the token of the markers written and what
        # the files looked like then.
        self._paused: tuple[str, Fingerprint] | None = None
        self._pid = os.getpid()  # the dir locks belong to this process, not to a fork
        self.scheduler = Scheduler(clock)
        # retention and compaction of one log must not overlap (the cleaner reads
        # inactive segments without the Log's lock)
        self._maintenance_lock = threading.RLock()
        self._cleaner: LogCleaner | None = None  # created on first use (large map)
        # `.deleted` segment files of every log, unlinked after file.delete.delay.ms
        self.deleter = DelayedDeleter(clock)
        if isinstance(log_dirs, (str, os.PathLike)):
            log_dirs = [log_dirs]
        try:
            self._open(list(log_dirs))
        except BaseException:
            self._abandon()
            raise
        for task in self._maintenance_tasks():
            self.scheduler.add_task(task)
        self.scheduler.restore(read_shared_last_runs(d.path for d in self.log_dirs))
        if background:
            self.scheduler.start()

    # -- opening ---------------------------------------------------------------------

    def _open(self, raw_dirs: list[str | os.PathLike]) -> None:
        if not raw_dirs:
            raise LogDirError("no log dir given")
        for path in canonical_dirs(raw_dirs, False):
            lock = DirLock(path).acquire()
            marker = path / CLEAN_SHUTDOWN_FILE
            self.log_dirs.append(LogDir(path, lock, LOCAL.exists(marker)))
        recover: list[Partition[Log]] = []
        empty_dirs = []
        for log_dir in self.log_dirs:
            found, to_delete = list_log_dir(log_dir, read_only=False)
            with self._lock:
                self._pending_deletes.extend((d, 0) for d in to_delete)
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
            if ld.repairing or not all(LOCAL.lexists(ld.path / n)
                                       for n in OFFSET_CHECKPOINTS):
                self._write_checkpoints(ld)
        # Only now: an open that failed above leaves a clean dir clean. From here on
        # this writer may leave unflushed data behind.
        for ld in self.log_dirs:
            marker = ld.path / CLEAN_SHUTDOWN_FILE
            if LOCAL.exists(marker):
                LOCAL.unlink(marker)
                LOCAL.fsync_dir(ld.path)
        self.delete_logs(self.clock.milliseconds())

    def _read_checkpoints(self, log_dir: LogDir, *, has_partitions: bool) -> None:
        """Load the offset checkpoints of ``log_dir`` (rules: ``offset_checkpoints``)."""
        values, damaged = read_dir_checkpoints(log_dir.path, has_partitions=has_partitions)
        for name, e in damaged.items():
            log_dir.damaged[name] = str(e)
            if name in PUBLISHING_CHECKPOINTS:
                if not self.repair:
                    raise CorruptCheckpointError(f"{e}; {fix_hint(log_dir.path)}") from e
                logger.error("%s; repairing: recovering every partition of %s from "
                             "offset 0 and rebuilding it from the logs", e, log_dir.path)
                log_dir.repairing.add(name)
                set_aside(log_dir.path / name, self.clock.milliseconds())
            else:
                # Recovering everything from offset 0 needs no recovery point.
                logger.error("%s; recovering every partition of %s from offset 0", e,
                             log_dir.path)
                if self.repair:
                    set_aside(log_dir.path / name, self.clock.milliseconds())
            log_dir.had_clean_shutdown = False
        log_dir.recovery_points = values.get(RECOVERY_POINT_CHECKPOINT, {})
        log_dir.log_start_offsets = values.get(LOG_START_OFFSET_CHECKPOINT, {})
        log_dir.high_watermarks = values.get(HIGH_WATERMARK_CHECKPOINT, {})
        if not log_dir.had_clean_shutdown and log_dir.damaged:
            log_dir.recovery_points = {}

    def _recover(self, partitions: list[Partition[Log]]) -> None:
        """Recover every partition of the unclean dirs: one pool per dir, all at once."""
        threads = self.config.num_recovery_threads_per_data_dir
        by_dir: dict[int, list[Partition[Log]]] = {}
        for p in partitions:
            by_dir.setdefault(id(p.log_dir), []).append(p)
        pools = [ThreadPoolExecutor(threads, thread_name_prefix="seglog-recovery")
                 for _ in by_dir]
        try:
            futures = [(p, pool.submit(self._load, p))
                       for pool, group in zip(pools, by_dir.values(), strict=True) for p in group]
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
            log = self._load(p)  # loaded by the pool above: returns it
            log.flush(log.high_watermark)
            if p.log_dir.repairing:
                logger.warning("repair of %s: %s-%d gets high watermark %d and log start "
                               "offset %d (recovered log end %d)", p.log_dir.path, p.topic,
                               p.partition, log.high_watermark, log.log_start_offset,
                               log.log_end_offset)
        for log_dir in {id(p.log_dir): p.log_dir for p in partitions}.values():
            logger.info("recovered %d partitions of %s",
                        sum(1 for p in partitions if p.log_dir is log_dir), log_dir.path)
            self._write_checkpoints(log_dir)
            log_dir.recovered = True

    def _open_log(self, p: Partition[Log], config: LogConfig) -> Log:
        """``p``'s Log, recovered when its dir is unclean (``_load`` calls this under
        ``p.lock``)."""
        if p.deleted:
            raise UnknownTopicOrPartitionError(
                f"partition {p.topic}-{p.partition} was deleted")
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
                p.dir, config, clock=self.clock,
                recovery_point=ld.recovery_points.get(p.tp, 0),
                log_start_offset=log_start_offset, high_watermark=hw,
                had_clean_shutdown=had_clean_shutdown, deleter=self.deleter)

        log = open_log(stored_lso, not recovering)
        if stored_lso > log.log_end_offset:
            end = log.log_end_offset
            log.close()
            log = open_log(0, True)  # the first open recovered it if needed
            warn_start_beyond_log_end(p, stored_lso, end, log.log_start_offset)
        if hw is not None and log.high_watermark < hw:
            # Log.open clamped it to the log end; a writer's next high-watermark
            # checkpoint writes the clamped value back.
            warn_beyond_log_end(ld.path / HIGH_WATERMARK_CHECKPOINT, p.tp, hw,
                                log.high_watermark)
        return log

    # -- topics ----------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int = 1,
                     config: Mapping[str, Any] | None = None) -> None:
        """Create ``name`` with ``partitions`` partitions and config overrides.

        Raises InvalidTopicError (bad name), TopicExistsError, ConfigError (bad config or
        partition count), ReadOnlyError.
        """
        self.check_writable()
        validate_topic_name(name)
        if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
            raise ConfigError(f"partitions must be an integer of at least 1, got {partitions!r}")
        overrides = parse_overrides(config, base=self.default_topic_config)
        with self._lock:
            existing = {t for t, _ in self._partitions}
            if name in existing:
                raise TopicExistsError(f"topic {name!r} already exists in {self._dirs_text()}")
            warn_on_collision(name, existing)
            self._topic_configs.pop(name, None)
            self._create_partitions(name, range(partitions), overrides)
        created = LogConfig.from_properties(overrides, base=self.default_topic_config)
        # Said at creation because retention deletes silently later (Kafka's 7-day default).
        logger.info("created topic %s with %d partition(s) in %s; retention.ms=%d%s, "
                    "cleanup.policy=%s", name, partitions, self._dirs_text(),
                    created.retention_ms, "" if created.retention_ms < 0 else
                    f" ({created.retention_ms / 86_400_000:.3g} days: older records are deleted)",
                    ",".join(sorted(created.cleanup_policy)))

    def alter_topic_config(self, name: str, set_configs: Mapping[str, Any] | None = None,
                           delete: Iterable[str] = ()) -> dict[str, str]:
        """Set and delete persisted config overrides of ``name`` (``kafka-configs.sh
        --alter --add-config/--delete-config``); returns the new overrides.

        The change takes effect for logs opened afterwards (the next writer or reader
        that opens the log dir); logs this manager has loaded keep their config. Every
        partition directory's file is replaced atomically, the lowest partition last:
        readers and ``check --fix`` take the lowest partition's file as the topic's, so a
        crash part-way leaves the old config in force (``check`` reports the partitions
        that disagree; running the alter again completes it).

        Raises ConfigError naming the key, UnknownTopicOrPartitionError, ReadOnlyError.
        """
        self.check_writable()
        with self._lock:
            numbers = self.partitions(name)
            current = self.topic_overrides(name)
            new = altered_overrides(current, set_configs, delete, base=self.default_topic_config)
            for n in sorted(numbers, reverse=True):
                write_topic_config(self._partition(name, n).dir, name, new)
            self._topic_configs.pop(name, None)
        logger.info("altered the config of topic %s: %s", name, new)
        return new

    def add_partitions(self, name: str, total: int) -> None:
        """Grow ``name`` to ``total`` partitions (Kafka never shrinks a topic)."""
        self.check_writable()
        with self._lock:
            current = self.partitions(name)
            if isinstance(total, bool) or not isinstance(total, int) or total <= len(current):
                raise ConfigError(f"topic {name!r} has {len(current)} partitions; the new "
                                  f"total must be higher, got {total!r}")
            first = self._partition(name, current[0])
            overrides = read_topic_config(first.dir) or {}
            self._create_partitions(name, range(len(current), total), overrides)

    def _create_partitions(self, topic: str, numbers: Iterable[int],
                           overrides: Mapping[str, str]) -> None:
        placed: dict[Path, int] = {}
        for n in numbers:
            log_dir = self._place(placed)
            placed[log_dir.path] = placed.get(log_dir.path, 0) + 1
            final = log_dir.path / partition_dir_name(topic, n)
            staging = log_dir.path / f"{STAGING_PREFIX}{uuid.uuid4().hex}"
            try:
                LOCAL.mkdir(staging)
                write_topic_config(staging, topic, overrides)
                LOCAL.rename(staging, final)
                LOCAL.fsync_dir(log_dir.path)
            except (OSError, KafkaStorageError) as e:
                # best effort: the next writer's open removes staging leftovers anyway
                LOCAL.rmtree(staging, ignore_errors=True)
                raise KafkaStorageError(f"cannot create partition directory {final}: {e}") from e
            p: Partition[Log] = Partition(topic, n, final, log_dir)
            self._partitions[p.tp] = p
            self._load(p)
            logger.info("created partition %s", final)

    def _place(self, placed: Mapping[Path, int]) -> LogDir:
        """The log dir holding the fewest bytes; ties: fewest partitions (Kafka picks by
        partition count alone, which piles data on one dir when partitions differ)."""
        if len(self.log_dirs) == 1:
            return self.log_dirs[0]
        counts = {id(d): placed.get(d.path, 0) for d in self.log_dirs}
        sizes = {id(d): 0 for d in self.log_dirs}
        for p in self._partitions.values():
            counts[id(p.log_dir)] += 1
            sizes[id(p.log_dir)] += self._size_of(p)
        return min(self.log_dirs, key=lambda d: (sizes[id(d)], counts[id(d)]))

    @staticmethod
    def _size_of(p: Partition[Log]) -> int:
        if p.log is not None:
            return p.log.size_in_bytes
        total = 0
        try:
            for e in LOCAL.scan_dir(p.dir):  # metadata only: no segment data is read
                if e.name.endswith(LOG_SUFFIX):
                    total += LOCAL.size(e.path)
        except OSError as err:
            logger.warning("cannot size %s: %s", p.dir, err)
        return total

    def delete_topic(self, name: str) -> None:
        """Rename every partition dir of ``name`` to ``<tp>.<id>-delete``; the directories
        are removed asynchronously after ``file.delete.delay.ms`` (a crash in between:
        by the next writer that opens the dir)."""
        self.check_writable()
        with self._lock:
            numbers = self.partitions(name)
            delay = self._config_of(self._partition(name, numbers[0])).file_delete_delay_ms
            touched = {}
            for n in numbers:
                p = self._partitions[(name, n)]
                with p.lock:
                    # A partition leaves the manager only once its directory is renamed:
                    # a failed rename keeps the topic (the error says so; retrying works).
                    try:
                        if p.log is not None:
                            target = p.log.rename_for_deletion()
                            p.log = None
                        else:
                            target = p.dir.with_name(delete_dir_name(name, n))
                            LOCAL.rename(p.dir, target)
                            LOCAL.fsync_dir(p.log_dir.path)
                    except OSError as e:
                        raise KafkaStorageError(
                            f"cannot delete topic {name!r}: renaming {p.dir} for deletion "
                            f"failed: {e}; the partition is unchanged") from e
                    p.deleted = True
                del self._partitions[(name, n)]
                touched[id(p.log_dir)] = p.log_dir
                for m in (p.log_dir.recovery_points, p.log_dir.log_start_offsets,
                          p.log_dir.high_watermarks):
                    m.pop(p.tp, None)
                if LOCAL.exists(p.log_dir.path / CLEANER_OFFSET_CHECKPOINT):
                    # a later topic of this name must not inherit the cleaner's progress
                    with self._maintenance_lock:
                        self._log_cleaner().forget(p.log_dir.path, name, n)
                self._pending_deletes.append((target, self.clock.milliseconds() + delay))
            self._topic_configs.pop(name, None)
            for log_dir in touched.values():
                self._write_checkpoints(log_dir)
        self.scheduler.wake()
        logger.info("deleted topic %s (%d partitions), removal pending", name, len(numbers))

    # -- logs ------------------------------------------------------------------------

    def append(self, topic: str, partition: int, records: bytes | bytearray | memoryview, *,
               in_place: bool = False) -> AppendInfo:
        """Append record batches to a partition; returns the Log's AppendInfo.
        ``in_place``: see ``Log.append`` (a writable buffer the caller gives up)."""
        self.check_writable()
        p = self._partition(topic, partition)
        self._load(p)  # not under p.lock: loading takes the manager lock first
        with p.lock:
            if p.log is None:  # deleted since
                raise UnknownTopicOrPartitionError(
                    f"partition {topic}-{partition} was deleted")
            return p.log.append(records, in_place=in_place)

    def append_many(self, records: Mapping[TopicPartition, bytes | bytearray | memoryview],
                    *, publish: bool = True) -> dict[TopicPartition, AppendInfo]:
        """Append to several partitions, one after another, then (``publish``) write the
        high-watermark checkpoint once: other processes see them all at the same time.
        Every partition is looked up first (an unknown one fails the call before any
        append); a bad batch fails its partition's append, the earlier ones stay
        appended, unpublished. ``publish=False`` leaves publishing to a later
        ``checkpoint_high_watermarks()`` (a caller that may still take them back). The
        same call as the bucket manager's, which makes them visible in one commit."""
        self.check_writable()
        for topic, partition in records:
            self._partition(topic, partition)
        out = {(topic, partition): self.append(topic, partition, data)
               for (topic, partition), data in records.items()}
        if publish and out:
            self.checkpoint_high_watermarks()
        return out

    def high_watermarks(self) -> dict[TopicPartition, int]:
        """Per partition, the end of what readers may see: a loaded log's own, else the
        checkpoint value read at open under the rules of ``partition_table``."""
        with self._lock:
            parts = list(self._partitions.values())
        out = {}
        listed = []
        for p in parts:
            log = p.log
            stored = p.log_dir.high_watermarks.get(p.tp)
            if log is not None:
                out[p.tp] = log.high_watermark
            elif stored is None:
                out[p.tp] = self._stored_start_offset(p)
            else:
                listed.append((p, stored))
        for (p, _), value in zip(listed, self._clamped_high_watermarks(listed), strict=True):
            out[p.tp] = value
        return out

    def log_start_offsets(self) -> dict[TopicPartition, int]:
        """Per partition, the first offset still in the log (a loaded log's own, else the
        checkpoint value read at open, else the first segment's base offset)."""
        with self._lock:
            parts = list(self._partitions.values())
        return {p.tp: (p.log.log_start_offset if p.log is not None
                       else self._stored_start_offset(p)) for p in parts}

    # -- flushing, checkpoints, maintenance -----------------------------------------

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
                    self._load(p)
            except (SeglogError, OSError) as e:
                logger.error("%s of %s failed: %s", what, p.dir, e)
                errors.append(e)
        return errors

    def flush_all(self) -> None:
        """fsync every loaded log (unloaded ones have nothing unflushed)."""
        def flush(p: Partition[Log]) -> None:
            if p.log is not None:
                p.log.flush()

        self._each(self._loaded(), flush, "flush")

    def checkpoint_high_watermarks(self) -> None:
        """Flush each log up to its high watermark, then write every dir's
        ``replication-offset-checkpoint``: what other processes can see is fsynced.
        A log whose flush fails keeps its old published value (the file says
        ``min(HW, recovery point)``), and its error is raised after the write."""
        self.check_writable()

        def flush_to_hw(p: Partition[Log]) -> None:
            if p.log is not None:
                p.log.flush(p.log.high_watermark)

        try:
            self._each(self._loaded(), flush_to_hw, "flush to the high watermark")
        finally:
            for ld in self.log_dirs:
                self._write_checkpoint(ld, HIGH_WATERMARK_CHECKPOINT)

    def checkpoint_recovery_points(self) -> None:
        self.check_writable()
        for ld in self.log_dirs:
            self._write_checkpoint(ld, RECOVERY_POINT_CHECKPOINT)

    def checkpoint_log_start_offsets(self) -> None:
        self.check_writable()
        for ld in self.log_dirs:
            self._write_checkpoint(ld, LOG_START_OFFSET_CHECKPOINT)

    def _write_checkpoints(self, log_dir: LogDir) -> None:
        for name in (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT,
                     HIGH_WATERMARK_CHECKPOINT):
            self._write_checkpoint(log_dir, name)

    def _write_checkpoint(self, log_dir: LogDir, name: str) -> None:
        with self._lock:
            parts = [p for p in self._partitions.values() if p.log_dir is log_dir]
            offsets: dict[TopicPartition, int] = {}
            for p in parts:
                log = p.log
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
            log_dir.checkpoint(name).write(offsets)

    def run_maintenance(self, *, force: bool = False,
                        before_task: Callable[[str, int, int], None] | None = None
                        ) -> list[TaskRun]:
        """Run the maintenance tasks that are due now (for short-lived processes): due
        means the task's interval has passed since any writer of these dirs ran it.
        ``force``: run every task now, due or not (``seglog maintain``).
        ``before_task(name, index, count)`` is called before each task (progress)."""
        self.check_writable()
        runs = (self.scheduler.run_all(before_task=before_task) if force
                else self.scheduler.run_due(before_task=before_task))
        if runs:
            self._save_last_runs()
        return runs

    def _save_last_runs(self) -> None:
        write_shared_last_runs([d.path for d in self.log_dirs], self.scheduler.last_runs())

    def _maintenance_tasks(self) -> list[MaintenanceTask]:
        """Every periodic task of this manager: THE place to add one."""
        tasks = standard_tasks(
            self.config,
            retention=lambda now: self.delete_old_segments(),
            flush=self._flush_dirty,
            checkpoint_recovery_points=lambda now: self.checkpoint_recovery_points(),
            checkpoint_log_start_offsets=lambda now: self.checkpoint_log_start_offsets(),
            checkpoint_high_watermarks=lambda now: self.checkpoint_high_watermarks(),
            delete_logs=self.delete_logs,
            now_ms=self.clock.monotonic_ms())
        if self.config.log_cleaner_enable:
            tasks.append(MaintenanceTask(CLEANER_TASK, self.config.log_cleaner_backoff_ms or 1,
                                         self.clean, self.clock.monotonic_ms()))
        return tasks

    def clean(self, now_ms: int | None = None) -> CleanerStats | None:
        """One compaction pass over the dirtiest log with ``cleanup.policy`` compact
        (Kafka's cleaner thread, one pass per run); returns its ``CleanerStats`` or None.
        Loads the compacted partitions."""
        self.check_writable()
        with self._lock:
            parts = [p for p in self._partitions.values()
                     if not p.deleted and self._config_of(p).compact]
        if not parts:
            return None
        errors = self._load_each(parts, "loading for compaction")
        if errors:
            raise errors[0]
        logs = [p.log for p in parts if p.log is not None]
        with self._maintenance_lock:
            return self._log_cleaner().clean_dirtiest(logs)

    def _log_cleaner(self) -> LogCleaner:
        if self._cleaner is None:
            from .cleaner import LogCleaner

            self._cleaner = LogCleaner(self.config, self.clock)
        return self._cleaner

    def delete_old_segments(self) -> int:
        """Retention over every partition: by log start offset always, by time and size
        with ``cleanup.policy`` delete (the Log decides). Returns the number of segments
        deleted. Loads unloaded partitions."""
        self.check_writable()
        with self._lock:
            parts = list(self._partitions.values())
        errors = self._load_each(parts, "loading for retention")
        # None: deleted by a concurrent delete_topic, or its load failed (raised after)
        with self._maintenance_lock:
            return sum(self._each(parts, lambda p: 0 if p.log is None
                                  else p.log.delete_old_segments(), "retention", errors))

    def _flush_dirty(self, now_ms: int) -> int:
        """Kafka's flusher: each log whose ``flush.ms`` has elapsed since its last flush
        (unloaded logs have nothing unflushed)."""
        return sum(self._each(self._loaded(),
                              lambda p: bool(p.log is not None and p.log.flush_if_due()),
                              "scheduled flush"))

    def delete_logs(self, now_ms: int) -> int:
        """Unlink the due ``.deleted`` segment files and remove the ``-delete`` directories
        whose delay has passed; returns how many files and directories went."""
        removed = self.deleter.run_due()
        with self._lock:
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
                with self._lock:
                    self._pending_deletes.append((d, t))
        return removed

    def check(self, *, fix: bool = False, deep: bool = False) -> list[Problem]:
        """Inconsistencies between the checkpoints, topic configs and files (with
        ``deep``, every batch and index entry too), repaired with ``fix`` (writer only).
        Returns ``log_check.Problem``s; see ``log_check``."""
        return check_manager(self, fix=fix, deep=deep)

    # -- what log_check uses ----------------------------------------------------------

    def write_checkpoints(self, log_dir: LogDir,
                          names: Iterable[str] = OFFSET_CHECKPOINTS) -> None:
        """Write ``log_dir``'s offset checkpoints from the logs' state (writer only)."""
        self.check_writable()
        for name in names:
            self._write_checkpoint(log_dir, name)

    def truncate_log(self, topic: str, partition: int, offset: int) -> None:
        """Cut the partition's log at ``offset`` (``check --fix`` after a bad batch)."""
        self.check_writable()
        log = self.get_log(topic, partition)
        with self._partition(topic, partition).lock:
            log.truncate_to(offset)

    def rewrite_last_runs(self, log_dir: LogDir) -> None:
        """Write ``log_dir``'s ``seglog-maintenance-checkpoint`` from this writer's
        scheduler (writer only)."""
        self.check_writable()
        write_shared_last_runs([log_dir.path], self.scheduler.last_runs())

    def reset_cleaner_checkpoint(self, log_dir: LogDir) -> None:
        """Empty ``log_dir``'s ``cleaner-offset-checkpoint`` (the cleaner re-cleans its
        partitions from their log start) and make the cleaner forget what it read."""
        self.check_writable()
        with self._maintenance_lock:
            OffsetCheckpointFile(log_dir.path / CLEANER_OFFSET_CHECKPOINT).write({})
            if self._cleaner is not None:
                self._cleaner.reload_checkpoints(log_dir.path)

    # -- closing ---------------------------------------------------------------------

    def pause(self) -> None:
        """Writer: leave the log dirs exactly as ``close()`` does (logs flushed,
        checkpoints, producer snapshots, trimmed indexes, ``.kafka_cleanshutdown``) and
        release the locks and every file, but keep what was loaded for ``resume()``.

        For a process that writes the same dirs again and again (the sink's commits): a
        resumed writer skips the listing, checkpoint parsing and per-segment loading a new
        ``LogManager`` pays. While paused, other writers may open the dirs. On failure
        the manager is closed as by an exception (no clean-shutdown claim), and it raises.
        Not with ``background=True`` (the maintenance thread would need the lock)."""
        self.check_writable()
        if self.scheduler.running:
            raise ConfigError(f"the LogManager of {self._dirs_text()} runs background "
                              "maintenance: it cannot pause")
        try:
            self.flush_all()
            self._save_last_runs()
            for ld in self.log_dirs:
                self._write_checkpoints(ld)
            for p in self._loaded():
                with p.lock:
                    if p.log is not None:
                        p.log.pause()
            token = new_token()
            for ld in self.log_dirs:
                write_atomically(ld.path / CLEAN_SHUTDOWN_FILE, marker_content(token))
            self._paused = (token, self._fingerprint())
        except BaseException:
            self.__exit__(SeglogError, None, None)
            raise
        for ld in self.log_dirs:
            if ld.lock is not None:
                ld.lock.release()

    @property
    def paused(self) -> bool:
        return self._paused is not None

    def resume(self) -> bool:
        """Take the locks of a paused writer again. True: no writer opened the dirs since
        ``pause()`` (each marker still holds this pause's token) and no file the manager
        relies on changed (``clean_shutdown``): the manager goes on with what it had
        loaded, and removes the markers as an open does. False: the manager is closed,
        without writing anything, and the caller opens a new one.

        Raises ``LogDirLockedError`` while another writer holds a dir (still paused: try
        again later)."""
        if self._paused is None:
            raise KafkaStorageError(f"this LogManager of {self._dirs_text()} is not paused")
        if os.getpid() != self._pid:
            raise LogDirError(f"this writer LogManager of {self._dirs_text()} was paused by "
                              f"process {self._pid}; a forked child must open its own")
        token, seen = self._paused
        taken: list[DirLock] = []
        try:
            for ld in self.log_dirs:
                # A writer's dirs keep their DirLock (released, not dropped, by pause).
                lock = ld.lock if ld.lock is not None else DirLock(ld.path)
                taken.append(lock.acquire())
                ld.lock = lock
        except BaseException:
            for lock in taken:
                lock.release()
            raise
        if (not all(holds_token(ld.path, token) for ld in self.log_dirs)
                or self._fingerprint() != seen):
            logger.info("%s changed since this writer paused: it opens afresh",
                        self._dirs_text())
            self._drop_paused()
            return False
        self._paused = None
        try:
            for ld in self.log_dirs:
                LOCAL.unlink(ld.path / CLEAN_SHUTDOWN_FILE)
                LOCAL.fsync_dir(ld.path)
            for p in self._loaded():
                with p.lock:
                    if p.log is not None:
                        p.log.resume()
        except BaseException:
            self.__exit__(SeglogError, None, None)
            raise
        return True

    def _fingerprint(self) -> Fingerprint:
        """The files a paused writer's state depends on (``clean_shutdown``)."""
        paths = []
        for ld in self.log_dirs:
            paths.append(ld.path / CLEAN_SHUTDOWN_FILE)
            paths.extend(ld.path / name for name in (*OFFSET_CHECKPOINTS,
                                                     CLEANER_OFFSET_CHECKPOINT))
        for p in sorted(self._loaded(), key=lambda p: p.tp):
            log = p.log
            if log is not None:
                paths.append(log.dir)
                paths.append(log.segments[-1].log_path)
        return fingerprint(paths)

    def _drop_paused(self) -> None:
        """Forget a paused writer whose files changed: its logs hold no open file, and
        nothing may be written (the dirs are someone else's state now)."""
        self._paused = None
        self._closed = True
        for p in self._loaded():
            p.log = None
        for ld in self.log_dirs:
            if ld.lock is not None:
                ld.lock.release()

    def close(self) -> None:
        """Writer: flush every log, write the checkpoints, close the logs, write
        ``.kafka_cleanshutdown`` and release the locks. Idempotent. A paused writer has
        done all of that already: closing it only forgets its state."""
        if self._closed:
            return
        if self._paused is not None:
            self._drop_paused()
            return
        self._closed = True
        if os.getpid() != self._pid:
            return  # a forked child: the logs, files and locks are the parent's business
        self.scheduler.stop()
        try:
            self.flush_all()
            self._save_last_runs()
            for ld in self.log_dirs:
                self._write_checkpoints(ld)
            self._close_logs()
            for ld in self.log_dirs:
                write_atomically(ld.path / CLEAN_SHUTDOWN_FILE, marker_content(new_token()))
        finally:
            self._abandon()

    def _close_logs(self) -> None:
        for p in self._loaded():
            with p.lock:
                if p.log is not None:
                    p.log.close()
                    p.log = None

    def _abandon(self) -> None:
        """Close what is open and release the locks, without flushing (error paths)."""
        self.scheduler.stop()
        for p in self._loaded():
            try:
                if p.log is not None:
                    p.log.close()
            except Exception:
                logger.exception("cannot close the log of %s", p.dir)
            p.log = None
        for ld in self.log_dirs:
            if ld.lock is not None:
                ld.lock.release()

    def __enter__(self) -> LogManager:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None or self._paused is not None:
            self.close()
        else:
            # The process failed mid-way: do not claim a clean shutdown.
            self._closed = True
            if os.getpid() == self._pid:
                self._abandon()

    # -- helpers ---------------------------------------------------------------------

    def check_writable(self) -> None:
        if os.getpid() != self._pid:
            raise LogDirError(
                f"this writer LogManager of {self._dirs_text()} was opened by process "
                f"{self._pid}; a forked child does not hold its .lock: open a new one")
        if self._closed:
            raise KafkaStorageError(f"this LogManager of {self._dirs_text()} is closed")
        if self._paused is not None:
            raise KafkaStorageError(f"this LogManager of {self._dirs_text()} is paused: "
                                    "resume() it first")

    def __repr__(self) -> str:
        return f"LogManager([{self._dirs_text()}], writer)"


class _CheckingReader(LogDirsReader):
    """A reader that opens despite damaged checkpoints, for ``check`` to report them
    (their offsets are unknown to it; nothing else should use it)."""

    _tolerate_damaged_checkpoints = True


def check_log_dirs(log_dirs: Iterable[str | os.PathLike], *, fix: bool = False,
                   deep: bool = False) -> list[Problem]:
    """``seglog check``: every problem of ``log_dirs``, even a checkpoint so damaged that
    a LogManager refuses to open. With ``fix`` (no other writer may run): a writer opened
    with ``repair=True`` rebuilds damaged checkpoints from the recovered logs, then the
    rest is fixed as ``check(fix=True)`` does.

    >>> for p in check_log_dirs(["/data/logs"]): print(p.message)   # doctest: +SKIP
    """
    dirs = list(log_dirs)
    if fix:
        with LogManager(dirs, repair=True) as mgr:
            return mgr.check(fix=True, deep=deep)
    with _CheckingReader(dirs) as reader:
        return reader.check(deep=deep)
