"""The writer ``LogManager``'s topic administration: create a topic, add partitions, alter
its persisted config overrides, delete it (Kafka's ``kafka-topics.sh``/``kafka-configs.sh``
operations, without a controller).

A partition directory is made under a staging name with its topic config and its
topic id (``partition.metadata``, a new random id per ``create_topic``), then renamed
into place and its log dir fsynced: a crash leaves no half-made partition (the next
writer's open removes staging leftovers). New partitions go to the log dir holding the
fewest bytes. A deleted topic's directories are renamed ``<tp>.<id>-delete`` at once and
removed after ``file.delete.delay.ms`` by the maintenance (``log_manager_maintenance``).

``TopicAdmin`` is a component of ``log_manager.LogManager``, handed the manager's
partition table, its maintenance (pending removals, the cleaner's checkpoint, the offset
checkpoints) and its writability check. Thread-safety: as ``LogManager`` (the lock order
is in ``log_manager``'s docstring).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config.config import LogConfig
from ..config.topics import (
    altered_overrides,
    parse_overrides,
    read_topic_config,
    validate_topic_name,
    warn_on_collision,
    write_topic_config,
)
from ..errors import ConfigError, KafkaStorageError, TopicExistsError
from ..log.partition_metadata import new_topic_id, read_topic_id, write_partition_metadata
from ..storage.file_names import (
    CLEANER_OFFSET_CHECKPOINT,
    LOG_SUFFIX,
    delete_dir_name,
    partition_dir_name,
)
from ..storage.storage import LOCAL
from .log_dirs import STAGING_PREFIX, LogDir, Partition
from .log_manager_maintenance import ManagerMaintenance
from .partition_table import PartitionTable

if TYPE_CHECKING:
    from ..log.log import Log

# The LogManager's messages keep the one logger name users configure, whichever of its
# modules logs them.
logger = logging.getLogger("seglog.logstore.manager.log_manager")


class TopicAdmin:
    """Creating, growing, reconfiguring and deleting the writer's topics; a component of
    ``LogManager``."""

    def __init__(self, table: PartitionTable[Log], maintenance: ManagerMaintenance,
                 check_writable: Callable[[], None]) -> None:
        self._table = table
        self._maintenance = maintenance
        self._check_writable = check_writable

    def create_topic(self, name: str, partitions: int = 1,
                     config: Mapping[str, Any] | None = None) -> None:
        """Create ``name`` with ``partitions`` partitions and config overrides.

        Raises InvalidTopicError (bad name), TopicExistsError, ConfigError (bad config or
        partition count), ReadOnlyError.
        """
        self._check_writable()
        validate_topic_name(name)
        if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
            raise ConfigError(f"partitions must be an integer of at least 1, got {partitions!r}")
        overrides = parse_overrides(config, base=self._table.default_topic_config)
        with self._table.lock:
            existing = {p.topic for p in self._table.listed()}
            if name in existing:
                raise TopicExistsError(
                    f"topic {name!r} already exists in {self._table.dirs_text()}")
            warn_on_collision(name, existing)
            self._table.forget_topic_config(name)
            self._create_partitions(name, range(partitions), overrides, new_topic_id())
        created = LogConfig.from_properties(overrides, base=self._table.default_topic_config)
        # Said at creation because retention deletes silently later (Kafka's 7-day default).
        logger.info("created topic %s with %d partition(s) in %s; retention.ms=%d%s, "
                    "cleanup.policy=%s", name, partitions, self._table.dirs_text(),
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
        self._check_writable()
        with self._table.lock:
            numbers = self._table.partitions(name)
            current = self._table.topic_overrides(name)
            new = altered_overrides(current, set_configs, delete,
                                    base=self._table.default_topic_config)
            for n in sorted(numbers, reverse=True):
                write_topic_config(self._table.partition(name, n).dir, name, new)
            self._table.forget_topic_config(name)
        logger.info("altered the config of topic %s: %s", name, new)
        return new

    def add_partitions(self, name: str, total: int) -> None:
        """Grow ``name`` to ``total`` partitions (Kafka never shrinks a topic)."""
        self._check_writable()
        with self._table.lock:
            current = self._table.partitions(name)
            if isinstance(total, bool) or not isinstance(total, int) or total <= len(current):
                raise ConfigError(f"topic {name!r} has {len(current)} partitions; the new "
                                  f"total must be higher, got {total!r}")
            first = self._table.partition(name, current[0])
            overrides = read_topic_config(first.dir) or {}
            # The topic's id (none for a topic an older seglog made: its new partitions
            # then have none either, so no partition of it claims another topic's id).
            self._create_partitions(name, range(len(current), total), overrides,
                                    read_topic_id(first.dir))

    def _create_partitions(self, topic: str, numbers: Iterable[int],
                           overrides: Mapping[str, str], topic_id: str | None) -> None:
        placed: dict[Path, int] = {}
        for n in numbers:
            log_dir = self._place(placed)
            placed[log_dir.path] = placed.get(log_dir.path, 0) + 1
            final = log_dir.path / partition_dir_name(topic, n)
            staging = log_dir.path / f"{STAGING_PREFIX}{uuid.uuid4().hex}"
            try:
                LOCAL.mkdir(staging)
                write_topic_config(staging, topic, overrides)
                if topic_id is not None:
                    write_partition_metadata(staging, topic_id)
                LOCAL.rename(staging, final)
                LOCAL.fsync_dir(log_dir.path)
            except (OSError, KafkaStorageError) as e:
                # best effort: the next writer's open removes staging leftovers anyway
                LOCAL.rmtree(staging, ignore_errors=True)
                raise KafkaStorageError(f"cannot create partition directory {final}: {e}") from e
            p: Partition[Log] = Partition(topic, n, final, log_dir, topic_id=topic_id,
                                          topic_id_read=True)
            self._table.add_partition(p)
            self._table.load(p)
            logger.info("created partition %s", final)

    def _place(self, placed: Mapping[Path, int]) -> LogDir:
        """The log dir holding the fewest bytes; ties: fewest partitions (Kafka picks by
        partition count alone, which piles data on one dir when partitions differ)."""
        if len(self._table.log_dirs) == 1:
            return self._table.log_dirs[0]
        counts = {id(d): placed.get(d.path, 0) for d in self._table.log_dirs}
        sizes = {id(d): 0 for d in self._table.log_dirs}
        for p in self._table.listed():
            counts[id(p.log_dir)] += 1
            sizes[id(p.log_dir)] += self._size_of(p)
        return min(self._table.log_dirs, key=lambda d: (sizes[id(d)], counts[id(d)]))

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
        self._check_writable()
        with self._table.lock:
            numbers = self._table.partitions(name)
            first = self._table.partition(name, numbers[0])
            delay = self._table.config_of(first).file_delete_delay_ms
            touched = {}
            for n in numbers:
                p = self._table.partition(name, n)
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
                self._table.remove_partition((name, n))
                touched[id(p.log_dir)] = p.log_dir
                for m in (p.log_dir.recovery_points, p.log_dir.log_start_offsets,
                          p.log_dir.high_watermarks):
                    m.pop(p.tp, None)
                if LOCAL.exists(p.log_dir.path / CLEANER_OFFSET_CHECKPOINT):
                    # a later topic of this name must not inherit the cleaner's progress
                    with self._maintenance.lock:
                        self._maintenance.log_cleaner().forget(p.log_dir.path, name, n)
                self._maintenance.schedule_removal(target,
                                                   self._table.clock.milliseconds() + delay)
            self._table.forget_topic_config(name)
            for log_dir in touched.values():
                self._maintenance.write_checkpoints(log_dir)
        self._maintenance.scheduler.wake()
        logger.info("deleted topic %s (%d partitions), removal pending", name, len(numbers))
