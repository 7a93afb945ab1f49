"""The local backend's half of staging: one staging file per task and topic-partition,
and its removal (``abort_staging``, ``sweep_staging``).

Layout: see ``sink_staging``'s module docstring (the files sit in the log dir that holds
the partition, for a new topic the first log dir). They are written and closed, not
fsynced, before the task reports them: durability starts at the commit (``finish``).

Not thread-safe: one ``LocalStagingArea`` per task.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from seglog.logstore.errors import KafkaStorageError
from seglog.logstore.storage.file_handle import FileHandle
from seglog.logstore.storage.file_names import fitted_name
from seglog.logstore.storage.storage import LOCAL, DirItem
from seglog.logstore.util.clock import SYSTEM_CLOCK, Clock

from .sink_options import SinkColumns, SinkOptions
from .sink_stager import PartitionStager
from .sink_staging import (
    STAGING_SUFFIX,
    Fragment,
    StagedBatches,
    StagedFragment,
    StagedOutput,
    StagedTask,
    StagingAttempt,
    StagingTopic,
    new_attempt_uid,
    remove_files,
    remove_tree,
    staging_root,
)
from .sink_topics import LocalTopics

if TYPE_CHECKING:
    import pyarrow as pa

logger = logging.getLogger(__name__)

__all__ = ["LocalStagingArea", "stage_rows", "abort_staging", "sweep_staging", "STAGING_TTL_MS"]

STAGING_TTL_MS = 24 * 3600 * 1000
"""Staging of *other* sinks untouched for this long belongs to dead jobs and is swept."""


@dataclass(slots=True)
class _Open:
    path: Path
    handle: FileHandle
    file: io.BufferedWriter  # over ``handle``
    size: int = 0
    records: int = 0


class LocalStagingArea:
    """Staging files in the log dir that holds each partition (see the module docstring)."""

    def __init__(self, attempt: StagingAttempt) -> None:
        self.attempt = attempt
        self._files: dict[tuple[str, int], _Open] = {}

    def write(self, batches: StagedBatches) -> None:
        f = self._file(batches.topic, batches.partition)
        try:
            f.file.write(batches.data)
        except OSError as e:
            raise KafkaStorageError(f"cannot write staging file {f.path}: {e}") from e
        f.size += len(batches.data)
        f.records += batches.records

    def _file(self, topic: StagingTopic, partition: int) -> _Open:
        key = (topic.name, partition)
        f = self._files.get(key)
        if f is None:
            a = self.attempt
            log_dir = topic.dirs.get(partition, Path(a.options.log_dirs[0]))
            d = staging_root(log_dir, a.sink_id) / str(a.batch_id)
            try:
                LOCAL.makedirs(d)
            except OSError as e:
                raise KafkaStorageError(f"cannot create staging directory {d}: {e}") from e
            # The name is for people; the commit message carries the path. A long
            # topic's name is cut (with a hash) to fit a file name.
            name = fitted_name(
                f"{topic.name}-{partition}",
                f".t{a.task}.a{a.attempt}.{a.attempt_uid}{STAGING_SUFFIX}",
            )
            path = d / name
            try:
                handle = LOCAL.open_file(path, "exclusive")  # closed in finish/discard
            except OSError as e:
                raise KafkaStorageError(f"cannot create staging file {path}: {e}") from e
            f = _Open(path, handle, handle.buffered_writer())
            self._files[key] = f
        return f

    def finish(self) -> StagedOutput:
        """Write out and close every staging file; describe them. Not fsynced: the commit
        copies them into the logs and fsyncs those before its commit point, and it checks
        each file whole (its size, batch framing and CRCs) as it reads it. A file a power
        cut lost or damaged before that fails the commit, nothing published, and Spark
        runs the micro-batch again; a killed process leaves the page cache intact."""
        fragments: list[Fragment] = []
        try:
            for (topic, partition), f in sorted(self._files.items()):
                f.file.flush()
                f.file.close()
                f.handle.close()
                fragments.append(StagedFragment(topic, partition, str(f.path), f.size, f.records))
        except OSError as e:
            self.discard()
            raise KafkaStorageError(f"cannot write the staging files: {e}") from e
        return StagedOutput(tuple(fragments))

    def discard(self) -> None:
        for f in self._files.values():
            try:
                f.file.close()
            except OSError as e:
                logger.warning("cannot close staging file %s: %s", f.path, e)
            finally:
                f.handle.close()
            remove_files([f.path])
        self._files.clear()


def stage_rows(
    options: SinkOptions,
    columns: SinkColumns,
    batches: Iterable[pa.RecordBatch],
    sink_id: str,
    batch_id: int,
    task: int,
    attempt: int,
    clock: Clock = SYSTEM_CLOCK,
) -> StagedTask:
    """Stage every batch of ``batches`` in the log dirs; on any error, remove what was
    staged."""
    who = StagingAttempt(options, sink_id, batch_id, task, attempt, new_attempt_uid(), clock)
    stager = PartitionStager(columns, who, LocalTopics(options))
    area = LocalStagingArea(who)
    try:
        for rb in batches:
            for staged in stager.add(rb):
                area.write(staged)
        return stager.finish(area.finish())
    except BaseException:
        area.discard()
        raise


def abort_staging(
    tasks: Sequence[StagedTask], batch_id: int, options: SinkOptions, sink_ids: Iterable[str]
) -> int:
    """Remove the staging of a failed batch (no lock needed: staging is private), for the
    sinks named by the tasks and ``sink_ids``. Returns the number of files removed.

    Commit intents stay: Spark also aborts when the commit's own worker died after
    appending, and the intent is what lets the next writer remove that tail."""
    removed = 0
    sinks = set(sink_ids)
    for m in tasks:
        sinks.add(m.sink_id)
        removed += remove_files(f.path for f in m.fragments)
    for sink_id in sinks:
        for d in options.log_dirs:
            batch_dir = staging_root(d, sink_id) / str(batch_id)
            removed += _count_files(batch_dir)
            remove_tree(batch_dir)
    logger.info("aborted batch %d: removed %d staging file(s)", batch_id, removed)
    return removed


def sweep_staging(
    log_dirs: Iterable[str],
    sink_id: str,
    up_to_batch: int,
    *,
    clock: Clock = SYSTEM_CLOCK,
    ttl_ms: int = STAGING_TTL_MS,
) -> int:
    """Remove the sink's staging of batches ``<= up_to_batch`` (dead attempts, crashed
    runs) and other sinks' staging untouched for ``ttl_ms``. Returns files removed.
    Commit intents are not staging: only a commit, under the lock, removes them."""
    removed = 0
    now_s = clock.milliseconds() / 1000
    for d in log_dirs:
        own = staging_root(d, sink_id)
        for child in _children(own):
            if child.name.isdigit() and int(child.name) <= up_to_batch:
                removed += _count_files(child.path)
                remove_tree(Path(child.path))
        for other in _children(own.parent):
            if other.name == own.name:
                continue
            for child in _children(other.path):
                try:
                    age_s = now_s - LOCAL.stat(child.path).st_mtime
                except FileNotFoundError:  # swept by its own sink meanwhile
                    continue
                if age_s * 1000 > ttl_ms:
                    removed += _count_files(child.path)
                    remove_tree(Path(child.path))
            if not _children(other.path):
                try:
                    LOCAL.rmdir(other.path)
                except OSError as e:  # a task of that sink may be staging right now
                    logger.debug("keeping %s: %s", other.path, e)
    return removed


def _children(d: Path | str) -> list[DirItem]:
    try:
        return LOCAL.scan_dir(d)
    except (FileNotFoundError, NotADirectoryError):
        return []


def _count_files(d: Path | str) -> int:
    return sum(1 for c in _children(d) if c.is_file)
