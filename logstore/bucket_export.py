"""``export_log_dir``: a bucket log dir as a plain Kafka log dir (``seglog export URI DIR``).

What it writes under ``DIR`` (which must not exist, or be empty):

- ``<topic>-<p>/<20-digit base offset>.log`` per committed segment: the object's bytes
  with real offsets (``bucket_objects.read_segment`` patches ``offset_delta`` entries and
  checks every batch, so a damaged object stops the export naming it), with its
  ``.index`` and ``.timeindex`` (the objects, or rebuilt for a patched segment; an empty
  file where the bucket has none). A partition without segments gets an empty segment at
  its log start offset, as Kafka leaves a log whose segments all expired.
- each topic's config overrides (``topics.write_topic_config``, in every partition
  directory, as a local seglog keeps them);
- ``recovery-point-offset-checkpoint`` and ``replication-offset-checkpoint`` (the log
  end: everything committed is flushed and visible), ``log-start-offset-checkpoint``;
- ``.kafka_cleanshutdown`` last, so a dir cut short by a crash is recovered, not
  trusted, by whoever opens it.

It reads one consistent version (the state at the start) and writes files with the
local engine's atomic write (temp file, fsync, rename). The bucket is not changed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .bucket_objects import read_segment, stored_indexes
from .bucket_segment import build_segments
from .bucket_state import SegmentEntry
from .checkpoint_file import OffsetCheckpointFile
from .clean_shutdown import marker_content
from .errors import LogDirError
from .file_names import (
    CLEAN_SHUTDOWN_FILE,
    HIGH_WATERMARK_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    index_file,
    log_file,
    time_index_file,
)
from .partition_metadata import write_partition_metadata
from .storage import LOCAL, Storage
from .topics import write_topic_config

if TYPE_CHECKING:
    from .bucket_manager import BucketLogManager

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ExportStats:
    partitions: int
    segments: int
    bytes: int


def export_log_dir(manager: BucketLogManager, target: str | os.PathLike[str],
                   progress: Callable[[int, int], object] | None = None) -> ExportStats:
    """Write the committed state of ``manager``'s bucket as a Kafka log dir at
    ``target``; see the module docstring. Raises LogDirError when ``target`` is a file or
    a non-empty directory. ``progress(n, total)``: n more bytes of the ``total`` the
    commit names were written."""
    target = Path(target)
    manager.refresh()
    storage, state = manager.storage, manager.state
    if LOCAL.exists(target) and (not LOCAL.is_dir(target) or LOCAL.list_names(target)):
        raise LogDirError(f"export target {target} exists and is not an empty directory")
    LOCAL.makedirs(target)
    segments = size = 0
    total = sum(e.size for ps in state.partitions.values() for e in ps.segments)
    hw: dict[tuple[str, int], int] = {}
    lso: dict[tuple[str, int], int] = {}
    for topic, spec in sorted(state.topics.items()):
        for n in range(spec.partitions):
            ps = state.partition(topic, n)
            if ps is None:
                continue
            pdir = target / f"{topic}-{n}"
            LOCAL.makedirs(pdir)
            write_topic_config(pdir, topic, spec.config)
            if spec.topic_id is not None:  # Kafka's partition.metadata, the same id
                write_partition_metadata(pdir, spec.topic_id)
            interval = manager.topic_config(topic).index_interval_bytes
            for entry in ps.segments:
                written = _export_segment(storage, entry, pdir, topic, n, interval)
                size += written
                segments += 1
                if progress is not None:
                    progress(written, total)
            if not ps.segments:
                for name in (log_file, index_file, time_index_file):
                    LOCAL.write_atomic(name(pdir, ps.log_start_offset), b"")
            hw[(topic, n)] = ps.high_watermark
            lso[(topic, n)] = ps.log_start_offset
            LOCAL.fsync_dir(pdir)
    OffsetCheckpointFile(target / RECOVERY_POINT_CHECKPOINT).write(hw)
    OffsetCheckpointFile(target / HIGH_WATERMARK_CHECKPOINT).write(hw)
    OffsetCheckpointFile(target / LOG_START_OFFSET_CHECKPOINT).write(lso)
    LOCAL.write_atomic(target / CLEAN_SHUTDOWN_FILE, marker_content())
    LOCAL.fsync_dir(target)
    logger.info("exported version %d of %s to %s: %d partition(s), %d segment(s), %d bytes",
                state.version, storage.uri, target, len(hw), segments, size)
    return ExportStats(len(hw), segments, size)


def _export_segment(storage: Storage, entry: SegmentEntry, pdir: Path, topic: str, n: int,
                    index_interval_bytes: int) -> int:
    seg = read_segment(storage, entry)
    if entry.offset_delta:
        (rebuilt,) = build_segments(seg.data, list(seg.headers), topic=topic, partition=n,
                                    segment_bytes=max(len(seg.data), 1),
                                    index_interval_bytes=index_interval_bytes)
        index, timeindex = rebuilt.index, rebuilt.timeindex
    else:
        index, timeindex = stored_indexes(storage, entry)
    LOCAL.write_atomic(log_file(pdir, entry.base_offset), seg.data)
    LOCAL.write_atomic(index_file(pdir, entry.base_offset), index)
    LOCAL.write_atomic(time_index_file(pdir, entry.base_offset), timeindex)
    return len(seg.data)
