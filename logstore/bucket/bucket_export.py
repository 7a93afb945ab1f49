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

Everything is written into a hidden directory beside ``DIR``
(``.<name>.seglog-export-<id>``), renamed to ``DIR`` once complete (over ``DIR`` when it
is an empty directory). A failure removes that directory and leaves ``DIR`` as it was, so
a failed export never leaves segments without checkpoints that look like a log dir; the
error names the partition, the object and its offsets (``MissingSegmentError`` for an
object that is gone, the damage's own error for one that is not what its commit says).
A crash mid-export leaves only the hidden directory (never a partition: its name is no
``<topic>-<p>``), which may be deleted.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..config.topics import write_topic_config
from ..errors import (
    CorruptMetadataError,
    CorruptRecordError,
    KafkaStorageError,
    LogDirError,
    MissingSegmentError,
    SeglogError,
)
from ..log.clean_shutdown import marker_content
from ..log.partition_metadata import write_partition_metadata
from ..storage.checkpoint_file import OffsetCheckpointFile
from ..storage.file_names import (
    CLEAN_SHUTDOWN_FILE,
    HIGH_WATERMARK_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    LOG_SUFFIX,
    RECOVERY_POINT_CHECKPOINT,
    index_file,
    log_file,
    time_index_file,
)
from ..storage.storage import LOCAL, Storage
from .bucket_committer import BucketCommitter
from .bucket_objects import object_uri, read_segment, stored_indexes
from .bucket_segment import build_segments
from .bucket_state import BucketState, SegmentEntry

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ExportStats:
    partitions: int
    segments: int
    bytes: int


def export_log_dir(committer: BucketCommitter, target: str | os.PathLike[str],
                   progress: Callable[[int, int], object] | None = None) -> ExportStats:
    """Write the committed state of ``committer``'s bucket as a Kafka log dir at
    ``target``; see the module docstring. Raises LogDirError when ``target`` is a file or
    a non-empty directory; on any failure ``target`` is left as it was. ``progress(n,
    total)``: n more bytes of the ``total`` the commit names were written."""
    target = Path(target)
    committer.refresh()
    storage, state = committer.storage, committer.state
    if LOCAL.exists(target) and (not LOCAL.is_dir(target) or LOCAL.list_names(target)):
        raise LogDirError(f"export target {target} exists and is not an empty directory")
    LOCAL.makedirs(target.parent)
    staging = target.parent / f".{target.name}.seglog-export-{uuid.uuid4().hex[:12]}"
    LOCAL.mkdir(staging)
    try:
        stats = _write_log_dir(committer, state, staging, target, progress)
        # rename(2) replaces an empty directory: the target appears whole or not at all
        LOCAL.rename(staging, target)
        LOCAL.fsync_dir(target.parent)
    except BaseException:
        # whatever stopped it (an error, Ctrl-C): no partial log dir stays behind
        LOCAL.rmtree(staging, ignore_errors=True)
        raise
    logger.info("exported version %d of %s to %s: %d partition(s), %d segment(s), %d bytes",
                state.version, storage.uri, target, stats.partitions, stats.segments,
                stats.bytes)
    return stats


def _write_log_dir(committer: BucketCommitter, state: BucketState, staging: Path,
                   target: Path, progress: Callable[[int, int], object] | None
                   ) -> ExportStats:
    """The export's files, written under ``staging``."""
    storage = committer.storage
    segments = size = 0
    total = sum(e.size for ps in state.partitions.values() for e in ps.segments)
    hw: dict[tuple[str, int], int] = {}
    lso: dict[tuple[str, int], int] = {}
    for topic, spec in sorted(state.topics.items()):
        for n in range(spec.partitions):
            ps = state.partition(topic, n)
            if ps is None:
                continue
            pdir = staging / f"{topic}-{n}"
            LOCAL.makedirs(pdir)
            write_topic_config(pdir, topic, spec.config)
            if spec.topic_id is not None:  # Kafka's partition.metadata, the same id
                write_partition_metadata(pdir, spec.topic_id)
            interval = committer.topic_config(topic).index_interval_bytes
            for entry in ps.segments:
                try:
                    written = _export_segment(storage, entry, pdir, topic, n, interval)
                except (SeglogError, OSError) as e:
                    raise _failure(e, storage, entry, f"{topic}-{n}", target) from e
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
    OffsetCheckpointFile(staging / RECOVERY_POINT_CHECKPOINT).write(hw)
    OffsetCheckpointFile(staging / HIGH_WATERMARK_CHECKPOINT).write(hw)
    OffsetCheckpointFile(staging / LOG_START_OFFSET_CHECKPOINT).write(lso)
    LOCAL.write_atomic(staging / CLEAN_SHUTDOWN_FILE, marker_content())
    LOCAL.fsync_dir(staging)
    return ExportStats(len(hw), segments, size)


def _failure(e: SeglogError | OSError, storage: Storage, entry: SegmentEntry, tp: str,
             target: Path) -> SeglogError:
    """``e`` (raised exporting ``entry``) as an error naming the partition, the object
    and the segment's offsets; its kind kept (a missing object is data loss)."""
    where = (f"export stopped at {tp}, segment [{entry.base_offset}, {entry.next_offset}) "
             f"({object_uri(storage, entry.key + LOG_SUFFIX)})")
    after = f"nothing was exported ({target} is as it was)"
    if isinstance(e, FileNotFoundError | MissingSegmentError):
        return MissingSegmentError(
            f"{where}: an object of the segment is missing ({e}); the committed state "
            f"names it, so offsets [{entry.base_offset}, {entry.next_offset}) of {tp} are "
            f"lost (`seglog check {storage.uri}` lists every missing object); {after}",
            entry.base_offset, entry.next_offset)
    if isinstance(e, CorruptRecordError | CorruptMetadataError):
        return type(e)(f"{where}: {e}; {after}")
    return KafkaStorageError(f"{where}: {e}; {after}")


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
