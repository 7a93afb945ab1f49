"""A writer ``Log``'s segment files in its partition directory (Kafka's ``LocalLog``
half of creating, deleting and swapping segments): a new segment's files (leftovers of a
failed attempt removed first), segments taken out of the list and renamed ``.deleted``
for unlinking after ``file.delete.delay.ms``, the cleaner's ``.cleaned`` segments swapped
in crash-safely through ``.swap``, and whether the directory needs an fsync.

``SegmentFiles`` is a component of ``log.Log``, handed the Log's segment list, its
directory (a getter: ``Log.rename_for_deletion`` moves it), config, clock and deleter.
Thread-safety: every method runs under the Log's lock (its callers in ``Log`` take it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from ..config.config import LogConfig
from ..errors import KafkaStorageError
from ..storage.file_names import CLEANED_SUFFIX, DELETED_SUFFIX, SWAP_SUFFIX
from ..storage.storage import LOCAL
from ..util.clock import Clock
from ..util.delayed_deletion import DelayedDeleter
from .log_segment import LogSegment
from .log_segments import LogSegments

# The Log's messages keep the one logger name users configure, whichever of its modules
# logs them.
logger = logging.getLogger("seglog.logstore.log.log")


class SegmentFiles:
    """Creating, deleting and swapping a writer Log's segment files; a component of
    ``Log``. ``dir_`` returns the partition directory now."""

    def __init__(
        self,
        segments: LogSegments,
        dir_: Callable[[], Path],
        config: LogConfig,
        clock: Clock,
        deleter: DelayedDeleter,
    ) -> None:
        self._segments = segments
        self._dir = dir_
        self._config = config
        self._clock = clock
        self._deleter = deleter
        self.dir_dirty = False  # a segment file was created since the last dir fsync

    def new_segment(self, base_offset: int, file_suffix: str = "") -> LogSegment:
        """A new, empty segment at ``base_offset`` (``file_suffix``: ``.cleaned`` for the
        cleaner); files a failed attempt left are deleted first, a non-empty ``.log``
        refused."""
        cfg = self._config
        jitter = cfg.random_segment_jitter()
        paths = LogSegment.file_paths(self._dir(), base_offset, file_suffix)
        for path in paths:
            if path.suffix == ".log" and LOCAL.exists(path) and LOCAL.size(path) > 0:
                raise KafkaStorageError(f"cannot create segment {path}: it already exists")
        for path in paths:
            # Left by an attempt that failed (a full filesystem): an index of an empty
            # segment opened as existing would count its whole length as entries.
            if LOCAL.exists(path):
                logger.warning("new segment file %s already exists; deleting it first", path)
                LOCAL.delete(path)
        self.dir_dirty = True
        return LogSegment.open(
            self._dir(),
            base_offset,
            index_interval_bytes=cfg.index_interval_bytes,
            max_index_size=cfg.segment_index_bytes,
            rolling_jitter_ms=jitter,
            created_ms=self._clock.milliseconds(),
            file_suffix=file_suffix,
        )

    def sync_dir(self) -> None:
        """fsync the directory if a segment file was created in it since the last one."""
        if self.dir_dirty:
            LOCAL.fsync_dir(self._dir())
            self.dir_dirty = False

    def delete_segments(self, segments: list[LogSegment], reason: str, tp: str) -> None:
        """Take segments out of the list, rename them ``.deleted``, unlink them after
        ``file.delete.delay.ms`` (readers holding them keep reading meanwhile)."""
        for seg in segments:
            self._segments.remove(seg.base_offset)
            logger.info("deleting segment %s of %s (%s)", seg.log_path.name, tp, reason)
            try:
                seg.change_file_suffixes(seg.file_suffix, DELETED_SUFFIX)
            except FileNotFoundError:
                logger.warning("segment %s vanished before deletion", seg.log_path)
            self._deleter.schedule(
                seg.paths(), self._config.file_delete_delay_ms, before_delete=seg.close_handlers
            )

    def replace_segments(
        self, new_segments: list[LogSegment], old_segments: list[LogSegment]
    ) -> None:
        """Swap the cleaner's ``.cleaned`` segments in for ``old_segments`` (Kafka's
        ``replaceSegments``), crash-safely: new files become ``.swap`` (a crash from here
        on is completed by the loader), the list changes atomically for readers, old files
        become ``.deleted``, and the ``.swap`` files take their final names. Under the Log's
        lock."""
        new_sorted = sorted(new_segments, key=lambda s: s.base_offset)
        existing = {s.base_offset: s for s in self._segments}
        old_sorted = [
            s
            for s in sorted(old_segments, key=lambda s: s.base_offset)
            if existing.get(s.base_offset) is s
        ]
        for seg in new_sorted:
            seg.flush()
            seg.on_become_inactive()
        for seg in reversed(new_sorted):
            if seg.file_suffix == CLEANED_SUFFIX:
                seg.change_file_suffixes(CLEANED_SUFFIX, SWAP_SUFFIX)
        LOCAL.fsync_dir(self._dir())
        old_bases = {s.base_offset for s in old_sorted}
        kept = [s for s in self._segments if s.base_offset not in old_bases]
        new_bases = {s.base_offset for s in new_sorted}
        kept = [s for s in kept if s.base_offset not in new_bases] + new_sorted
        self._segments.replace_all(kept)
        for seg in old_sorted:
            self._schedule_deletion(seg)
        for seg in new_sorted:
            if seg.file_suffix == SWAP_SUFFIX:
                seg.change_file_suffixes(SWAP_SUFFIX, "")
        LOCAL.fsync_dir(self._dir())

    def _schedule_deletion(self, seg: LogSegment) -> None:
        seg.change_file_suffixes(seg.file_suffix, DELETED_SUFFIX)
        self._deleter.schedule(
            seg.paths(), self._config.file_delete_delay_ms, before_delete=seg.close_handlers
        )
