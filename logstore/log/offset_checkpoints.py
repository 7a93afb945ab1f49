"""The offset checkpoints of a log dir, read under seglog's damage rules.

``docs/checkpoints.md`` explains the rules for users; in short:

* ``recovery-point-offset-checkpoint``: damaged or missing means "recover every
  partition from offset 0", which is always safe (recovery only re-checks data).
* ``log-start-offset-checkpoint`` and ``replication-offset-checkpoint`` publish what
  readers may see and what is gone. A damaged one (fails to parse, cannot be read, or is
  for the high watermark, missing while the dir holds partitions) is never read as
  "empty": that would hide every committed record, and a writer trusting it would
  truncate them as an unpublished tail. A missing ``log-start-offset-checkpoint`` is read
  as empty, as Kafka reads it: a broker writes it only once a minute and lists only
  partitions whose start is above their first segment's base, so Kafka dirs often lack it;
  the log start offsets are then the first segments' base offsets.
  Opening the dir raises ``CorruptCheckpointError`` naming the file, the line and the
  cause, and pointing at ``seglog check --fix DIR``, which rebuilds the values from the
  recovered (CRC-checked) logs (Kafka takes such a log dir offline instead of guessing).
* A partition not listed in a valid ``replication-offset-checkpoint`` has published
  nothing: its high watermark is its log start offset (the sink's commit point is that
  file's rename; Kafka loads a missing entry as 0 and clamps it to the log).
* A high watermark above the log end offset is clamped to the log end offset, with a
  warning naming the file, the partition and both values. Readers check a partition only
  when its high watermark differs from the last value they verified (``HighWatermarkCheck``),
  so a trigger's cost does not grow with the number of segments.

A writer writes all three files when it opens a dir that holds no partition yet, so a
seglog dir that holds partitions always has them: a missing high-watermark checkpoint was
lost, not never written.

Thread-safety: the functions touch only files; ``HighWatermarkCheck`` has its own lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable
from pathlib import Path

from ..config.config import LogConfig
from ..errors import CorruptCheckpointError, KafkaStorageError
from ..records.record_format import TopicPartition
from ..storage.checkpoint_file import OffsetCheckpointFile
from ..storage.file_names import (
    HIGH_WATERMARK_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
)
from ..storage.storage import LOCAL
from .log_reader import LogReader

logger = logging.getLogger(__name__)


OFFSET_CHECKPOINTS = (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT,
                      HIGH_WATERMARK_CHECKPOINT)
PUBLISHING_CHECKPOINTS = (LOG_START_OFFSET_CHECKPOINT, HIGH_WATERMARK_CHECKPOINT)
"""Checkpoints whose damage stops the dir from opening (never read as empty)."""


def fix_hint(log_dir: Path) -> str:
    return (f"nothing has been changed; stop every writer of {log_dir} and run "
            f"`seglog check --fix {log_dir}` to rebuild it from the logs")


def read_offset_checkpoint(log_dir: Path, name: str, *, has_partitions: bool
                           ) -> dict[TopicPartition, int]:
    """The entries of ``log_dir/name``; ``{}`` when it is missing from a dir without
    partitions (or, for the log start offsets, from any dir: Kafka's rule). Raises
    ``CorruptCheckpointError`` when the file fails to parse, cannot be read, or is
    another checkpoint missing while the dir holds partitions (the message names the file, the
    line where known, and the cause; callers add ``fix_hint`` where it applies)."""
    path = log_dir / name
    if not LOCAL.lexists(path):
        if has_partitions and name != LOG_START_OFFSET_CHECKPOINT:
            raise CorruptCheckpointError(
                f"checkpoint file {path} is missing, but {log_dir} holds partitions (a "
                "seglog writer always writes it)")
        return {}
    if not LOCAL.exists(path):
        raise CorruptCheckpointError(f"checkpoint file {path} is a link to nothing readable")
    try:
        return OffsetCheckpointFile(path).read()
    except KafkaStorageError as e:  # unreadable: as unusable as unparsable
        raise CorruptCheckpointError(str(e)) from e


def read_dir_checkpoints(log_dir: Path, *, has_partitions: bool
                         ) -> tuple[dict[str, dict[TopicPartition, int]],
                                    dict[str, CorruptCheckpointError]]:
    """The three offset checkpoints of ``log_dir`` (``OFFSET_CHECKPOINTS``): the values of
    each one that reads, and the error of each one that is damaged. What damage means
    (refuse, recover, repair, warn) is the caller's rule: writer and reader differ."""
    values: dict[str, dict[TopicPartition, int]] = {}
    damaged: dict[str, CorruptCheckpointError] = {}
    for name in OFFSET_CHECKPOINTS:
        try:
            values[name] = read_offset_checkpoint(log_dir, name, has_partitions=has_partitions)
        except CorruptCheckpointError as e:
            damaged[name] = e
    return values, damaged


def read_published(log_dir: Path, name: str, *, has_partitions: bool
                   ) -> dict[TopicPartition, int]:
    """A publishing checkpoint re-read by a reader: damage raises, with ``fix_hint``.
    Never the values read before: they may hide what the writer published or removed
    since."""
    try:
        return read_offset_checkpoint(log_dir, name, has_partitions=has_partitions)
    except CorruptCheckpointError as e:
        raise CorruptCheckpointError(f"{e}; {fix_hint(log_dir)}") from e


def set_aside(path: Path, now_ms: int) -> None:
    """Move a directory found in place of a state file out of the way (renamed, kept as
    evidence), so the file can be written again; a regular file is left to be replaced."""
    if LOCAL.is_dir(path) and not LOCAL.is_link(path):
        # never "<x>-<digits>": that would list as a partition
        aside = path.with_name(f"{path.name}.damaged.{now_ms}")
        try:
            LOCAL.rename(path, aside)
        except OSError as e:
            raise KafkaStorageError(f"cannot move {path} aside: {e}") from e
        logger.warning("moved the directory found in place of %s to %s", path, aside)


def probe_log_end_offset(partition_dir: Path) -> int:
    """A partition's log end offset, reading only its last segment's tail (past the last
    offset index entry), without loading the Log. Raises SeglogError."""
    with LogReader.open(partition_dir, _PROBE_CONFIG) as reader:
        return reader.log_end_offset


_PROBE_CONFIG = LogConfig.from_properties(None)  # a reader reads no key of it


class HighWatermarkCheck:
    """Clamps checkpointed high watermarks to the log end, probing a partition only when
    its high watermark changed since the last value verified for its directory.

    One instance per process (``HW_CHECK``): a reader process makes a new read-only
    LogManager per trigger, and the verified values must outlive it. Thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards _verified
        self._verified: dict[Hashable, int] = {}  # partition -> last HW seen <= log end

    def clamp_all(self, keys: list[Hashable], high_watermarks: list[int],
                  log_end: Callable[[int], int]) -> list[int | None]:
        """Per item ``i``: None when ``high_watermarks[i]`` is known not to pass its log
        end (``keys[i]`` names the partition), else the log end ``log_end(i)`` read now.
        One lock round trip when nothing changed: the cost of a steady trigger."""
        with self._lock:
            get = self._verified.get
            changed = [i for i, (k, hw) in enumerate(zip(keys, high_watermarks, strict=True))
                       if get(k) != hw]
        out: list[int | None] = [None] * len(keys)
        ok = []
        for i in changed:
            end = out[i] = log_end(i)
            if high_watermarks[i] <= end:
                ok.append((keys[i], high_watermarks[i]))
        if ok:
            with self._lock:
                self._verified.update(ok)
        return out


HW_CHECK = HighWatermarkCheck()


def warn_beyond_log_end(checkpoint: Path, tp: TopicPartition, high_watermark: int,
                        log_end: int) -> None:
    logger.warning("%s says high watermark %d for %s-%d, beyond its log end offset %d: "
                   "reading up to %d (run `seglog check %s` for details)", checkpoint,
                   high_watermark, tp[0], tp[1], log_end, log_end, checkpoint.parent)
