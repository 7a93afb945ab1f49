"""``LogManager``: every partition log of one or more log dirs, embedded in one process.

Kafka's LogManager without a broker, for the process that writes. Opening (lock each
dir, the clean-shutdown marker, listing, the offset checkpoints, recovery of unclean
dirs) is ``log_manager_loading``'s.

The manager is a ``partition_table.PartitionTable`` (the partitions and topic configs it
shares with the reader); its other concepts are components it owns and delegates its
public methods to, one module each, each handed the table and what else it needs:
``log_manager_loading.LogDirsLoader`` (opening the dirs and each partition's ``Log``),
``log_manager_maintenance.ManagerMaintenance`` (flushing, the offset checkpoints,
retention, compaction, the scheduled tasks; it holds the visibility contract below),
``log_manager_topics.TopicAdmin`` (create, alter, add partitions, delete),
``log_manager_pause.PauseController`` (``pause``/``resume`` of a reused writer) and
``log_manager_check.CheckHooks`` (the repairs ``log_check`` makes through the writer).

The high watermark is the visibility contract with other processes:
``checkpoint_high_watermarks()`` flushes every log up to its high watermark *before*
writing ``replication-offset-checkpoint``, so what another process can see has been
fsynced. Another process reads through a ``log_dirs_reader.LogDirsReader`` (no lock, no
write); ``LogManager(dirs, read_only=True)`` returns one, so callers written against the
manager keep working.

Thread-safety: the public methods are thread-safe. ``_lock`` guards the partition table,
the checkpoint values of unloaded partitions and the deletion queue; the maintenance lock
(``ManagerMaintenance.lock``) keeps retention and compaction of a log apart; each
partition's own ``lock`` serializes the operations that write its log (a ``Log`` has one
writer thread): append, flush, retention, deletion. Reads through ``get_log(...)`` take no lock.

Lock order, on every path: ``_lock``, then the maintenance lock, then a partition's
``lock``, then the ``Log``'s own. Loading a log (``load``) takes ``_lock`` (the topic
config) and then the partition's lock, so it is never called while holding a partition
lock or the maintenance lock: ``append``, retention and compaction load first.
(``tests/logstore/test_lock_order.py`` checks the order.)

Over 500 lines: ``LogManager`` is the facade of the writer's ``LogDirs`` API, 33
public methods each with its documented contract and a few lines delegating to a
component; beside it stay ``open_log_dirs``, the one backend factory, and the close path
every method's writability check shares.

>>> with LogManager([path]) as mgr:                              # doctest: +SKIP
...     mgr.create_topic("events", partitions=3, config={"retention.ms": 86_400_000})
...     mgr.append("events", 0, encode_batches(values))
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, overload

from ..config.config import ConfigValues, LogConfig, ManagerConfig
from ..errors import (
    ConfigError,
    KafkaStorageError,
    LogDirError,
    OffsetOutOfRangeError,
    SeglogError,
    UnknownTopicOrPartitionError,
)
from ..log.clean_shutdown import marker_content, new_token
from ..log.offset_checkpoints import (
    OFFSET_CHECKPOINTS,
)
from ..log_dirs_api import LogDirs, LogDirsView, TaskRun
from ..records.record_format import TopicPartition
from ..storage.checkpoint_file import write_atomically
from ..storage.file_names import (
    CLEAN_SHUTDOWN_FILE,
)
from ..storage.object_store_config import StorageOptions
from ..util.clock import SYSTEM_CLOCK, Clock
from .log_dirs import LogDir, Partition
from .log_dirs_reader import LogDirsReader
from .log_manager_check import CheckHooks
from .log_manager_loading import LogDirsLoader
from .log_manager_maintenance import CLEANER_TASK as CLEANER_TASK
from .log_manager_maintenance import ManagerMaintenance
from .log_manager_pause import PauseController
from .log_manager_topics import TopicAdmin
from .partition_table import PartitionTable
from .scheduler import read_shared_last_runs

if TYPE_CHECKING:  # log_check loads with check(): a reader that only lists starts faster
    from typing_extensions import deprecated

    from ..cleaner.cleaner import CleanerStats
    from ..log.log import AppendInfo, Log
    from .log_check import Problem

logger = logging.getLogger(__name__)


def _bucket_uri(log_dirs: Any) -> str | None:
    """The bucket URI of ``log_dirs`` (``bucket_manager.bucket_uri``), loading the bucket
    engine only when a location looks like a URI: local managers never import it."""
    dirs = [log_dirs] if isinstance(log_dirs, (str, os.PathLike)) else log_dirs
    if not isinstance(dirs, (list, tuple, set, frozenset)):
        return None  # a one-shot iterable must reach __init__ unconsumed: local paths
    if not any(isinstance(d, str) and "://" in d for d in dirs):
        return None
    from ..bucket.bucket_manager import bucket_uri

    return bucket_uri(dirs)


@overload
def open_log_dirs(log_dirs: Iterable[str | os.PathLike[str]] | str | os.PathLike[str], *,
                  read_only: Literal[False] = False, repair: bool = False,
                  background: bool = False,
                  storage_options: Mapping[str, object] | StorageOptions | None = None,
                  config: ManagerConfig | ConfigValues | None = None,
                  default_topic_config: LogConfig | ConfigValues | None = None,
                  clock: Clock = SYSTEM_CLOCK) -> LogDirs: ...


@overload
def open_log_dirs(log_dirs: Iterable[str | os.PathLike[str]] | str | os.PathLike[str], *,
                  read_only: bool, repair: bool = False, background: bool = False,
                  storage_options: Mapping[str, object] | StorageOptions | None = None,
                  config: ManagerConfig | ConfigValues | None = None,
                  default_topic_config: LogConfig | ConfigValues | None = None,
                  clock: Clock = SYSTEM_CLOCK) -> LogDirsView: ...


def open_log_dirs(log_dirs: Iterable[str | os.PathLike[str]] | str | os.PathLike[str], *,
                  read_only: bool = False, repair: bool = False, background: bool = False,
                  storage_options: Mapping[str, object] | StorageOptions | None = None,
                  config: ManagerConfig | ConfigValues | None = None,
                  default_topic_config: LogConfig | ConfigValues | None = None,
                  clock: Clock = SYSTEM_CLOCK) -> LogDirsView:
    """The log dirs ``log_dirs`` through the backend their location names: one
    object-store URI (``s3://``, ``gs://``, ``az://``, ``memory://``) opens a
    ``BucketLogManager`` (``storage_options``: its endpoint, credentials...), local paths
    a writer ``LogManager`` or, with ``read_only``, a ``LogDirsReader``. What
    ``LogManager(...)`` returns for the same arguments. ``repair`` (``seglog check
    --fix``) needs a local writer; ``background`` runs a local writer's scheduled
    maintenance on a thread (a bucket keeps no schedule: ``run_maintenance``).

    >>> with open_log_dirs("s3://bucket/logs", read_only=True) as dirs:  # doctest: +SKIP
    ...     dirs.high_watermarks()
    """
    uri = _bucket_uri(log_dirs)
    if uri is not None:
        from ..bucket.bucket_manager import BucketLogManager

        if repair:
            raise ConfigError(f"repair=True is for local log dirs, not {uri}")
        return BucketLogManager(uri, read_only=read_only, storage_options=storage_options,
                                config=config, default_topic_config=default_topic_config,
                                clock=clock)
    if storage_options:
        # Endpoint and credentials mean nothing to a directory; taking them silently
        # would hide a path that was meant to be a bucket URI.
        raise ConfigError(
            f"storage_options ({', '.join(StorageOptions.of(storage_options).as_dict())}) "
            f"are for an "
            f"object-store URI (s3://, gs://, az://...), not the local log dir(s) "
            f"{_describe_dirs(log_dirs)}")
    if not read_only:
        return LogManager(log_dirs, config=config, default_topic_config=default_topic_config,
                          clock=clock, background=background, repair=repair)
    if repair:
        raise ConfigError("repair=True needs a writer LogManager, not a read-only one")
    return LogDirsReader(log_dirs, config=config, default_topic_config=default_topic_config,
                         clock=clock)


def _describe_dirs(log_dirs: Iterable[str | os.PathLike[str]] | str | os.PathLike[str]) -> str:
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

    def __new__(cls, log_dirs: Iterable[str | os.PathLike[str]] | str | os.PathLike[str], *,
                read_only: bool = False,
                config: ManagerConfig | ConfigValues | None = None,
                default_topic_config: LogConfig | ConfigValues | None = None,
                clock: Clock = SYSTEM_CLOCK, background: bool = False, repair: bool = False,
                storage_options: Mapping[str, object] | StorageOptions | None = None) -> Any:
        # ``LogManager(dirs, read_only=True)`` and ``LogManager("s3://...")`` are how
        # users ask for a reader and a bucket manager: both go to ``open_log_dirs``, the
        # one place the backend is picked. Python skips __init__ when the result is no
        # LogManager. (Callers see __init__'s overloads, below; this ``Any`` is what it
        # returns, a LogManager or not, which no __new__ return type can say to mypy.)
        if read_only or storage_options or _bucket_uri(log_dirs) is not None:
            return open_log_dirs(log_dirs, read_only=read_only, repair=repair,
                                 storage_options=storage_options, config=config,
                                 default_topic_config=default_topic_config, clock=clock)
        return super().__new__(cls)

    # What the checker sees of ``LogManager(...)`` (mypy types a class call by __init__,
    # and by __new__ only where it returns a LogManager; a metaclass __call__ returning
    # anything else is ignored too). The calls that return another backend are flagged:
    # ``read_only=True`` (a ``LogDirsReader``) and ``storage_options`` (a
    # ``BucketLogManager``) are deprecated for typed code, which calls ``open_log_dirs``
    # (``-> LogDirs``/``LogDirsView``) or the backend class. A bucket URI without options
    # is a string like a path: the one case the signature cannot tell apart.
    if TYPE_CHECKING:

        @overload
        def __init__(self, log_dirs: Iterable[str | os.PathLike[str]] | str | os.PathLike[str],
                     *, read_only: Literal[False] = False,
                     config: ManagerConfig | ConfigValues | None = None,
                     default_topic_config: LogConfig | ConfigValues | None = None,
                     clock: Clock = SYSTEM_CLOCK, background: bool = False,
                     repair: bool = False, storage_options: None = None) -> None: ...

        @overload
        @deprecated("LogManager(..., read_only=True) returns a LogDirsReader, not a "
                    "LogManager: call open_log_dirs(..., read_only=True) (a LogDirsView) "
                    "or LogDirsReader(...)")
        def __init__(self, log_dirs: Iterable[str | os.PathLike[str]] | str | os.PathLike[str],
                     *, read_only: bool,
                     config: ManagerConfig | ConfigValues | None = None,
                     default_topic_config: LogConfig | ConfigValues | None = None,
                     clock: Clock = SYSTEM_CLOCK, background: bool = False,
                     repair: bool = False,
                     storage_options: Mapping[str, object] | StorageOptions | None = None
                     ) -> None: ...

        @overload
        @deprecated("LogManager(uri, storage_options=...) returns a BucketLogManager, not "
                    "a LogManager: call open_log_dirs(uri, storage_options=...) (a LogDirs) "
                    "or BucketLogManager(...)")
        def __init__(self, log_dirs: Iterable[str | os.PathLike[str]] | str | os.PathLike[str],
                     *, read_only: bool = False,
                     config: ManagerConfig | ConfigValues | None = None,
                     default_topic_config: LogConfig | ConfigValues | None = None,
                     clock: Clock = SYSTEM_CLOCK, background: bool = False,
                     repair: bool = False,
                     storage_options: Mapping[str, object] | StorageOptions) -> None: ...

    def __init__(self, log_dirs: Iterable[str | os.PathLike[str]] | str | os.PathLike[str], *,
                 read_only: bool = False,
                 config: ManagerConfig | ConfigValues | None = None,
                 default_topic_config: LogConfig | ConfigValues | None = None,
                 clock: Clock = SYSTEM_CLOCK, background: bool = False,
                 repair: bool = False,
                 storage_options: Mapping[str, object] | StorageOptions | None = None) -> None:
        # storage_options: for a bucket URI only (__new__ refuses them for local dirs)
        super().__init__(config, default_topic_config, clock)
        self.repair = repair
        self._closed = False
        self._pid = os.getpid()  # the dir locks belong to this process, not to a fork
        self._maintenance = ManagerMaintenance(self, self.check_writable)
        self.scheduler = self._maintenance.scheduler
        self.deleter = self._maintenance.deleter
        self.publisher = self._maintenance.publisher
        self._topics = TopicAdmin(self, self._maintenance, self.check_writable)
        self._repairs = CheckHooks(self, self._maintenance, self.check_writable)
        self._pause = PauseController(self, self._maintenance,
                                      check_writable=self.check_writable, pid=self._pid,
                                      close_unclean=self._close_unclean,
                                      mark_closed=self._mark_closed)
        self._loading = LogDirsLoader(self, self._maintenance, repair=repair,
                                      add_listed=self._add_listed)
        if isinstance(log_dirs, (str, os.PathLike)):
            log_dirs = [log_dirs]
        try:
            self._loading.open(list(log_dirs))
        except BaseException:
            self._abandon()
            raise
        for task in self._maintenance.tasks():
            self.scheduler.add_task(task)
        self.scheduler.restore(read_shared_last_runs(d.path for d in self.log_dirs))
        if background:
            self.scheduler.start()

    # -- opening ---------------------------------------------------------------------

    def _open_log(self, p: Partition[Log], config: LogConfig) -> Log:
        return self._loading.open_log(p, config)

    # -- logs ------------------------------------------------------------------------

    def append(self, topic: str, partition: int, records: bytes | bytearray | memoryview, *,
               in_place: bool = False, publish: bool = True) -> AppendInfo:
        """Append record batches to a partition; returns the Log's AppendInfo.

        ``publish``: other processes see the records within ``linger.ms`` (default 5;
        fsynced first, then the high-watermark checkpoint; one publish for a burst of
        appends; ``linger.ms=0``: before this call returns). ``publish=False`` leaves
        them to the caller's ``checkpoint_high_watermarks()`` (a caller that may still
        take them back, as the sink's commit). ``in_place``: see ``Log.append`` (a
        writable buffer the caller gives up)."""
        self.check_writable()
        p = self.partition(topic, partition)
        self.load(p)  # not under p.lock: loading takes the manager lock first
        with p.lock:
            if p.log is None:  # deleted since
                raise UnknownTopicOrPartitionError(
                    f"partition {topic}-{partition} was deleted")
            info = p.log.append(records, in_place=in_place)
        if publish:
            self.publisher.request()
        return info

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
            self.partition(topic, partition)
        out = {(topic, partition): self.append(topic, partition, data, publish=False)
               for (topic, partition), data in records.items()}
        if publish and out:
            self.checkpoint_high_watermarks()
        return out

    def append_async(self, topic: str, partition: int,
                     records: bytes | bytearray | memoryview) -> Future[AppendInfo]:
        """``append``, as a future that is already complete (its result, or the
        ``SeglogError`` it raised): the bucket manager's pipelined call, so code written
        for one runs on the other. A local append is a write to the page cache: there is
        no request to overlap."""
        future: Future[AppendInfo] = Future()
        try:
            future.set_result(self.append(topic, partition, records))
        except SeglogError as e:
            future.set_exception(e)
        return future

    def flush(self) -> None:
        """Publish now what ``append`` left to ``linger.ms`` (Kafka's
        ``producer.flush()``): on return other processes see every such append, fsynced.
        Raises the error of a failed background publish. (Every ``append_async``
        completed in its call: a local append has no request to wait for.)"""
        self.check_writable()
        self.publisher.flush()

    def truncate_unpublished(self, topic: str, partition: int, offset: int) -> bool:
        """Cut the partition's log at ``offset``: the caller's ``publish=False`` appends
        since are taken back before any reader saw them (``seglog produce`` on failure).
        True."""
        self.truncate_log(topic, partition, offset)
        return True

    def next_maintenance_ms(self) -> int:
        """Milliseconds until the scheduler's next task is due (1 s with none)."""
        next_due = self.scheduler.next_due_ms()
        return 1000 if next_due is None else next_due - self.clock.monotonic_ms()

    def files_awaiting_deletion(self, runs: list[TaskRun]) -> int:
        """Files renamed ``.deleted`` and waiting for ``file.delete.delay.ms``."""
        return self.deleter.pending

    def reload_partition(self, topic: str, partition: int) -> None:
        """Nothing to look at again: the writer holds the dirs' lock, so no other process
        deletes or re-creates its partitions (a reader's call: ``LogDirsReader``)."""

    def delete_records(self, topic: str, partition: int, offset: int) -> int:
        """Kafka's DeleteRecords: raise the partition's log start offset to ``offset`` (at
        most its high watermark) and checkpoint it, so readers see it on return; returns
        the new log start offset. The segments wholly below it go at the next retention
        run. (The bucket manager's call: one commit.)"""
        self.check_writable()
        if offset < 0:
            raise OffsetOutOfRangeError(
                f"cannot delete records of {topic}-{partition} below offset {offset}: "
                f"offsets start at 0")
        p = self._partition(topic, partition)
        self.load(p)  # not under p.lock: loading takes the manager lock first
        with p.lock:
            if p.log is None:  # deleted since
                raise UnknownTopicOrPartitionError(
                    f"partition {topic}-{partition} was deleted")
            p.log.maybe_increment_log_start_offset(offset)
            start = p.log.log_start_offset
        self.checkpoint_log_start_offsets()
        return start

    def high_watermarks(self) -> dict[TopicPartition, int]:
        """Per partition, the end of what readers may see: a loaded log's own, else the
        checkpoint value read at open under the rules of ``partition_table``."""
        parts = self.listed()
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
        parts = self.listed()
        return {p.tp: (p.log.log_start_offset if p.log is not None
                       else self._stored_start_offset(p)) for p in parts}

    def check(self, *, fix: bool = False, deep: bool = False) -> list[Problem]:
        """Inconsistencies between the checkpoints, topic configs and files (with
        ``deep``, every batch and index entry too), repaired with ``fix`` (writer only).
        Returns ``log_check.Problem``s; see ``log_check``."""
        from .log_check import check_manager

        return check_manager(self, fix=fix, deep=deep)

    # -- topics (TopicAdmin) --------------------------------------------------------

    def create_topic(self, name: str, partitions: int = 1,
                     config: ConfigValues | None = None) -> None:
        """Create ``name`` with ``partitions`` partitions and config overrides
        (``TopicAdmin.create_topic``). Raises InvalidTopicError, TopicExistsError,
        ConfigError, ReadOnlyError."""
        self._topics.create_topic(name, partitions, config)

    def alter_topic_config(self, name: str, set_configs: ConfigValues | None = None,
                           delete: Iterable[str] = ()) -> dict[str, str]:
        """Set and delete persisted config overrides of ``name``; returns the new
        overrides (``TopicAdmin.alter_topic_config``: logs loaded keep their config)."""
        return self._topics.alter_topic_config(name, set_configs, delete)

    def add_partitions(self, name: str, total: int) -> None:
        """Grow ``name`` to ``total`` partitions (Kafka never shrinks a topic)."""
        self._topics.add_partitions(name, total)

    def delete_topic(self, name: str) -> None:
        """Rename every partition dir of ``name`` for deletion; they are removed after
        ``file.delete.delay.ms`` (``TopicAdmin.delete_topic``)."""
        self._topics.delete_topic(name)

    # -- maintenance (ManagerMaintenance) ---------------------------------------------

    def flush_all(self) -> None:
        """fsync every loaded log (unloaded ones have nothing unflushed)."""
        self._maintenance.flush_all()

    def checkpoint_high_watermarks(self) -> None:
        """Flush each log up to its high watermark, then write every dir's
        ``replication-offset-checkpoint``: what other processes can see is fsynced
        (``ManagerMaintenance.checkpoint_high_watermarks``)."""
        self._maintenance.checkpoint_high_watermarks()

    def checkpoint_recovery_points(self) -> None:
        self._maintenance.checkpoint_recovery_points()

    def checkpoint_log_start_offsets(self) -> None:
        self._maintenance.checkpoint_log_start_offsets()

    def run_maintenance(self, *, force: bool = False,
                        before_task: Callable[[str, int, int], None] | None = None
                        ) -> list[TaskRun]:
        """Run the maintenance tasks that are due now (``force``: all of them);
        ``before_task(name, index, count)`` is called before each task (progress)."""
        return self._maintenance.run_maintenance(force=force, before_task=before_task)

    def clean(self, now_ms: int | None = None) -> CleanerStats | None:
        """One compaction pass over the dirtiest compacted log; its ``CleanerStats`` or
        None."""
        return self._maintenance.clean(now_ms)

    def delete_old_segments(self) -> int:
        """Retention over every partition; returns the number of segments deleted."""
        return self._maintenance.delete_old_segments()

    def delete_logs(self, now_ms: int) -> int:
        """Unlink the due ``.deleted`` segment files and remove the due ``-delete``
        directories; returns how many went."""
        return self._maintenance.delete_logs(now_ms)

    # -- pause and resume (PauseController) -------------------------------------------

    def pause(self) -> None:
        """Writer: leave the log dirs as ``close()`` does and release the locks
        and every file, but keep what was loaded for ``resume()``
        (``PauseController.pause``). Not with ``background=True``."""
        self._pause.pause()

    @property
    def paused(self) -> bool:
        return self._pause.paused

    def resume(self) -> bool:
        """Take the locks of a paused writer again; True: it goes on with what it had
        loaded, False: the dirs changed, the manager is closed and the caller opens a new
        one (``PauseController.resume``)."""
        return self._pause.resume()

    # -- the repairs of check --fix (CheckHooks) --------------------------------------

    def write_checkpoints(self, log_dir: LogDir,
                          names: Iterable[str] = OFFSET_CHECKPOINTS) -> None:
        """Write ``log_dir``'s offset checkpoints from the logs' state (writer only)."""
        self._repairs.write_checkpoints(log_dir, names)

    def truncate_log(self, topic: str, partition: int, offset: int) -> None:
        """Cut the partition's log at ``offset`` (``check --fix`` after a bad batch)."""
        self._repairs.truncate_log(topic, partition, offset)

    def rewrite_last_runs(self, log_dir: LogDir) -> None:
        """Write ``log_dir``'s ``seglog-maintenance-checkpoint`` from this writer's
        scheduler (writer only)."""
        self._repairs.rewrite_last_runs(log_dir)

    def reset_cleaner_checkpoint(self, log_dir: LogDir) -> None:
        """Empty ``log_dir``'s ``cleaner-offset-checkpoint`` and make the cleaner forget
        what it read."""
        self._repairs.reset_cleaner_checkpoint(log_dir)

    # -- closing ---------------------------------------------------------------------

    def close(self) -> None:
        """Writer: flush every log, write the checkpoints, close the logs, write
        ``.kafka_cleanshutdown`` and release the locks. Idempotent. A paused writer has
        done all of that already: closing it only forgets its state."""
        if self._closed:
            return
        if self._pause.paused:
            self._pause.drop()
            return
        self._closed = True
        if os.getpid() != self._pid:
            return  # a forked child: the logs, files and locks are the parent's business
        self.scheduler.stop()
        self.publisher.stop()  # the checkpoints below publish what it had pending
        try:
            self.flush_all()
            self._maintenance.save_last_runs()
            for ld in self.log_dirs:
                self._maintenance.write_checkpoints(ld)
            self._close_logs()
            for ld in self.log_dirs:
                write_atomically(ld.path / CLEAN_SHUTDOWN_FILE, marker_content(new_token()))
        finally:
            self._abandon()

    def _close_logs(self) -> None:
        for p in self.loaded():
            with p.lock:
                if p.log is not None:
                    p.log.close()
                    p.log = None

    def _abandon(self) -> None:
        """Close what is open and release the locks, without flushing (error paths)."""
        self.scheduler.stop()
        self.publisher.stop()
        for p in self.loaded():
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
        if exc_type is None or self._pause.paused:
            self.close()
        else:
            self._close_unclean()

    def _mark_closed(self) -> None:
        self._closed = True

    def _close_unclean(self) -> None:
        # The process failed mid-way: do not claim a clean shutdown.
        self._closed = True
        if os.getpid() == self._pid:
            self._abandon()

    # -- helpers ---------------------------------------------------------------------

    def check_writable(self) -> None:
        if os.getpid() != self._pid:
            raise LogDirError(
                f"this writer LogManager of {self.dirs_text()} was opened by process "
                f"{self._pid}; a forked child does not hold its .lock: open a new one")
        if self._closed:
            raise KafkaStorageError(f"this LogManager of {self.dirs_text()} is closed")
        if self._pause.paused:
            raise KafkaStorageError(f"this LogManager of {self.dirs_text()} is paused: "
                                    "resume() it first")

    def __repr__(self) -> str:
        return f"LogManager([{self.dirs_text()}], writer)"


class _CheckingReader(LogDirsReader):
    """A reader that opens despite damaged checkpoints, for ``check`` to report them
    (their offsets are unknown to it; nothing else should use it)."""

    _tolerate_damaged_checkpoints = True


def check_log_dirs(log_dirs: Iterable[str | os.PathLike[str]], *, fix: bool = False,
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
