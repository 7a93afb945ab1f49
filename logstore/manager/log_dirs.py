"""A ``LogManager``'s log dirs on disk: their canonical paths, their listing into
partitions, and the rule that lets readers skip re-listing an unchanged directory.

A log dir holds ``<topic>-<partition>`` directories (the partition follows the last
``-``), ``-delete`` directories waiting for removal, the manager's checkpoint files, the
sink's state dir and, after a crashed ``create_topic``, a hidden staging directory.
Files and directories a Kafka broker leaves (``meta.properties``, KRaft's
``bootstrap.checkpoint`` and ``__cluster_metadata-0`` metadata log, ``-future`` and
``-stray`` partition directories) are skipped quietly: the metadata log is no topic.
Anything else is skipped with a warning.

Thread-safety: the functions are pure or touch only the filesystem; ``LogDir`` and
``Partition`` are guarded by the manager (see ``log_manager``).
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from ..errors import LogDirError
from ..records.record_format import BatchHeader, TopicPartition
from ..storage.checkpoint_file import OffsetCheckpointFile
from ..storage.file_names import (
    CLEAN_SHUTDOWN_FILE,
    CLEANER_OFFSET_CHECKPOINT,
    CLUSTER_METADATA_TOPIC,
    DELETE_DIR_SUFFIX,
    FUTURE_DIR_SUFFIX,
    HIGH_WATERMARK_CHECKPOINT,
    KRAFT_BOOTSTRAP_FILE,
    LOCK_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    LOG_SUFFIX,
    MAINTENANCE_CHECKPOINT,
    META_PROPERTIES_FILE,
    RECOVERY_POINT_CHECKPOINT,
    SINK_STATE_DIR,
    STRAY_DIR_SUFFIX,
    is_delete_dir_name,
    parse_partition_dir_name,
)
from ..storage.storage import LOCAL
from .dir_lock import DirLock

logger = logging.getLogger(__name__)


class PartitionLog(Protocol):
    """What the shared partition table needs of a loaded log, a writer's ``Log`` or a
    reader's ``LogReader``."""

    @property
    def log_end_offset(self) -> int: ...

    def close(self) -> None: ...


LogT = TypeVar("LogT", bound=PartitionLog)


STAGING_PREFIX = ".seglog-new-"
"""A new partition directory is prepared under this hidden name (config file included),
then renamed into place, so no process ever sees a partition without its config."""

_KNOWN_FILES = frozenset(
    {
        LOCK_FILE,
        CLEAN_SHUTDOWN_FILE,
        RECOVERY_POINT_CHECKPOINT,
        LOG_START_OFFSET_CHECKPOINT,
        HIGH_WATERMARK_CHECKPOINT,
        MAINTENANCE_CHECKPOINT,
        CLEANER_OFFSET_CHECKPOINT,
        META_PROPERTIES_FILE,
        KRAFT_BOOTSTRAP_FILE,
    }
)

_TMP_NAME = re.compile(r"(?P<target>.+?)(?:\.[0-9a-f]{32})?\.tmp")
"""``<file>.tmp`` (``write_atomic``; Kafka's checkpoint files too) or ``<file>.<uuid>.tmp``
(``create``): an interrupted write of ``<file>``."""


def is_interrupted_write(name: str, is_dir: bool) -> bool:
    """True for a log dir's top-level entry that an interrupted write of seglog's (or
    Kafka's) own left: an unfinished partition directory (``STAGING_PREFIX``), or the
    temporary file of one of the state files seglog and Kafka keep there. Another
    ``*.tmp`` (an operator's ``backup.tmp``) is not seglog's to delete."""
    if name.startswith(STAGING_PREFIX):
        return True
    match = _TMP_NAME.fullmatch(name)
    return not is_dir and match is not None and match.group("target") in _KNOWN_FILES


# A directory's mtime moves when an entry is added, removed or renamed. A listing taken
# within this long of the mtime may have missed a change made in the same timestamp tick
# (coarse filesystem clocks), so it is not trusted (git's "racy" rule).
_RACY_NS = 2_000_000_000


@dataclass(eq=False)
class LogDir:
    path: Path
    lock: DirLock | None
    had_clean_shutdown: bool
    # Checkpoint values read at open; kept for partitions that were never loaded.
    recovery_points: dict[TopicPartition, int] = field(default_factory=dict)
    log_start_offsets: dict[TopicPartition, int] = field(default_factory=dict)
    high_watermarks: dict[TopicPartition, int] = field(default_factory=dict)
    # Offset checkpoints found damaged at open: file name -> what is wrong (``check``
    # reports them once).
    damaged: dict[str, str] = field(default_factory=dict)
    # Offset checkpoints a repairing writer rebuilds from the recovered logs.
    repairing: set[str] = field(default_factory=set)
    listed_mtime_ns: int | None = None  # the dir's mtime at the last listing (readers)
    recovered: bool = False  # an unclean dir whose partitions were all recovered at open
    # Writer: each offset checkpoint as this manager last wrote it (fsynced). Writing the
    # same offsets again is skipped: the file already holds them durably, and no one else
    # writes it while the lock is held (a resumed writer finds every checkpoint as it
    # left it, or is dropped). A file only read at open is not in here: its rename may not
    # be durable yet if its writer died before fsyncing the directory.
    written: dict[str, dict[TopicPartition, int]] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """The dir's path as a string: a cheap, stable dictionary key across managers."""
        return str(self.path)

    def checkpoint(self, name: str) -> OffsetCheckpointFile:
        return OffsetCheckpointFile(self.path / name)


@dataclass(eq=False)
class Partition(Generic[LogT]):
    topic: str
    partition: int
    dir: Path
    log_dir: LogDir
    log: LogT | None = None  # the writer's Log or the reader's LogReader, once loaded
    # serializes writes to `log`, its lazy loading and `deleted`
    lock: threading.RLock = field(default_factory=threading.RLock)
    deleted: bool = False  # renamed for deletion: never load it again
    # readers: the segments' base offsets and the dir mtime they were listed at
    listed_bases: tuple[tuple[int, ...], int] | None = None
    # the directory's inode number when listed: another one under the same name is
    # another directory (deleted and re-created), never the same partition
    inode: int = 0
    # the topic id in the directory's partition.metadata (None: it has none), read once
    # on first use (``partition_table.topic_id_of``), when ``topic_id_read`` is set
    topic_id: str | None = None
    topic_id_read: bool = False
    # the directory's mtime when its topic id was read or last found unchanged (a
    # reader's re-listing reads the id again only when the directory changed since)
    id_confirmed_mtime_ns: int | None = None
    # readers: (base offset, header) of the last segment's last batch as the last probe
    # of the log end found it, while no log is loaded (``LogDirsReader._probe_log_end``)
    last_batch: tuple[int, BatchHeader] | None = None

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.partition)


def canonical_dirs(raw_dirs: list[str | os.PathLike[str]], read_only: bool) -> list[Path]:
    """Resolved log dir paths, created if missing (writer only), checked for access;
    the same directory given twice (bind mounts included) is a ``LogDirError``."""
    seen: dict[Any, Path] = {}
    out = []
    for raw in raw_dirs:
        path = Path(raw).expanduser()
        if not LOCAL.exists(path):
            if read_only:
                raise LogDirError(f"log dir {path} does not exist")
            try:
                LOCAL.makedirs(path)
            except OSError as e:
                raise LogDirError(f"cannot create log dir {path}: {e}") from e
        path = LOCAL.resolve(path)
        if not LOCAL.is_dir(path):
            raise LogDirError(f"log dir {path} is not a directory")
        if not LOCAL.accessible(path, write=not read_only):
            need = "readable" if read_only else "readable and writable"
            raise LogDirError(f"log dir {path} is not {need} by this process")
        st = LOCAL.stat(path)
        key = (st.st_dev, st.st_ino)
        if key in seen:
            raise LogDirError(f"log dir {raw} is given twice (same directory as {seen[key]})")
        seen[key] = path
        out.append(path)
    return out


def list_log_dir(
    log_dir: LogDir, *, read_only: bool, warn: bool = True
) -> tuple[list[Partition[Any]], list[Path]]:
    """The partitions of ``log_dir`` and its ``-delete`` directories. A writer also
    removes the staging directory of a ``create_topic`` that crashed before its rename.
    (``Any``: no log is loaded yet; the table they enter says which kind it will hold.)"""
    found: list[Partition[Any]] = []
    to_delete: list[Path] = []
    try:
        entries = LOCAL.scan_dir(log_dir.path)
    except OSError as e:
        raise LogDirError(f"cannot list log dir {log_dir.path}: {e}") from e
    for entry in entries:
        name = entry.name
        if not entry.is_dir:
            if warn and name not in _KNOWN_FILES and not name.endswith(".tmp"):
                logger.warning("skipping unknown file %s in log dir", entry.path)
            continue
        if name.endswith(DELETE_DIR_SUFFIX) and is_delete_dir_name(name):
            to_delete.append(Path(entry.path))
            continue
        if name == SINK_STATE_DIR:  # the exactly-once sink's own state
            continue
        if name.startswith(STAGING_PREFIX):
            if not read_only:
                logger.info("removing unfinished partition directory %s", entry.path)
                try:
                    LOCAL.rmtree(entry.path)
                except OSError as e:  # harmless: skipped again by the next open
                    logger.warning("cannot remove %s: %s", entry.path, e)
            continue
        parsed = parse_partition_dir_name(name)
        if parsed is not None and parsed[0] == CLUSTER_METADATA_TOPIC:
            continue  # KRaft's metadata log: Kafka's own, never a topic
        if parsed is None and name.endswith((FUTURE_DIR_SUFFIX, STRAY_DIR_SUFFIX)):
            logger.debug("skipping Kafka's %s (not a live partition)", entry.path)
            continue
        if parsed is None:
            if warn:
                logger.warning("skipping unknown entry %s in log dir", entry.path)
            continue
        found.append(Partition(parsed[0], parsed[1], Path(entry.path), log_dir, inode=entry.inode))
    return found, to_delete


def unchanged_since(path: Path, listed_mtime_ns: int | None) -> tuple[bool, int]:
    """(whether ``path`` is surely unchanged since a listing at ``listed_mtime_ns``, its
    mtime now). Filesystem timestamps come from the OS clock, not the engine's."""
    try:
        mtime = LOCAL.stat(path).st_mtime_ns
    except OSError:
        return False, -1
    fresh = time.time_ns() - mtime < _RACY_NS
    return (listed_mtime_ns == mtime and not fresh), mtime


def segment_bases(dir_: Path) -> tuple[int, ...]:
    """The base offsets of a partition directory's segments, oldest first, from one
    listing (none when it cannot be listed)."""
    try:
        names = LOCAL.list_names(dir_)
    except OSError as e:
        logger.warning("cannot list %s: %s", dir_, e)
        return ()
    # "<20 digits>.log" only (".log.deleted" and the like do not end so); zero-padded
    # names sort like their offsets.
    logs = sorted(
        [n for n in names if n.endswith(LOG_SUFFIX) and len(n) == 24 and n[:20].isdigit()]
    )
    return tuple([int(n[:20]) for n in logs])


def first_segment_base(dir_: Path) -> int:
    """The base offset of a partition directory's first segment, from its listing (0
    when it has none or cannot be listed)."""
    bases = segment_bases(dir_)
    return bases[0] if bases else 0
