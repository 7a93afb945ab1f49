"""Compaction of bucket partitions (``cleanup.policy`` compact, or compact,delete): the
local engine's cleaner, run over a bucket partition's committed segments.

Kafka's rules are the local cleaner's, unchanged, because it *is* the local cleaner:
``cleaner_manager.LogCleanerManager`` picks the dirtiest partition and its cleanable
range (dirty ratio against ``min.cleanable.dirty.ratio``, ``min.compaction.lag.ms``,
``max.compaction.lag.ms``), ``cleaner.Cleaner`` builds the offset map and rewrites the
segments group by group (latest value per key, tombstones kept ``delete.retention.ms``
through their batch's delete horizon, control batches kept, empty batches closing a
group's offset range). Only the log it works on differs: ``CompactedPartition`` is a
``cleanable_log.CleanableLog`` (segments, offsets, config, ``new_segment``,
``replace_segments``, the type the cleaner is written against) over the bucket:

- its segments are the committed ones, read with ranged GETs (``BucketSegment``, which
  patches the base offsets of an ``offset_delta`` entry); none is active (nothing is ever
  appended to a committed segment), so the cleanable part ends at the log end.
- the cleaner writes its ``.cleaned`` segments into a private local work directory, and
  ``replace_segments`` only records each (new, old) pair;
- the cleaner checkpoint is the partition's ``cleaner_offset`` in the bucket state,
  written into the work directory's ``cleaner-offset-checkpoint`` for the manager.

Then each cleaned segment becomes objects under a new unique name (indexes rebuilt as
every bucket segment's), uploaded (crash step ``compact-after-upload``) and committed in
one ``compact`` commit: remove the old segments, add the new ones, set
``cleaner_offset``. If a source segment left the log meanwhile (retention, a merge,
another compactor), the pass is abandoned and its uploads deleted; uploads older than
half the orphan grace are never committed. Not thread-safe: one pass at a time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from ..cleaner.cleaner import Cleaner, CleanerStats
from ..cleaner.cleaner_manager import LogCleanerManager
from ..config.config import LogConfig, ManagerConfig
from ..log.log_segment import LogSegment
from ..records.record_format import iter_batch_headers
from ..storage.checkpoint_file import OffsetCheckpointFile
from ..storage.file_names import CLEANED_SUFFIX, CLEANER_OFFSET_CHECKPOINT
from ..storage.storage import LOCAL, Storage
from ..util.clock import Clock
from ..util.crash_points import crash_point
from .bucket_commit_log import Change
from .bucket_logs import BucketLogs
from .bucket_objects import discard, upload
from .bucket_segment import BucketSegment, SegmentObjects, build_segments
from .bucket_state import BucketState, PartitionChange, PartitionState, SegmentEntry, TopicSpec

logger = logging.getLogger(__name__)

CompactStats = CleanerStats


class CompactedPartition:
    """One bucket partition as the cleaner sees it (a ``cleanable_log.CleanableLog``): its
    committed segments, none active; cleaned segments are written to a private work dir
    and ``replace_segments`` records each (new, old) pair for the compactor to upload and
    commit (see the module docstring)."""

    read_only = False
    active_segment: LogSegment | None = None  # nothing is ever appended to a committed one

    def __init__(self, storage: Storage, work: Path, topic: str, partition: int,
                 config: LogConfig, ps: PartitionState, clock: Clock) -> None:
        self.topic = topic
        self.partition = partition
        self.config = config
        self.state = ps
        self.dir = work / f"{topic}-{partition}"
        LOCAL.makedirs(self.dir)
        self._clock = clock
        self.log_start_offset = ps.log_start_offset
        self.log_end_offset = self.high_watermark = ps.high_watermark
        self.replaced: list[tuple[LogSegment, list[LogSegment]]] = []
        self.entries: dict[int, SegmentEntry] = {s.base_offset: s for s in ps.segments}
        self.segments: list[LogSegment] = [BucketSegment(storage, e) for e in ps.segments]

    def new_segment(self, base_offset: int) -> LogSegment:
        return LogSegment.open(self.dir, base_offset,
                               index_interval_bytes=self.config.index_interval_bytes,
                               max_index_size=self.config.segment_index_bytes,
                               created_ms=self._clock.milliseconds(), file_suffix=CLEANED_SUFFIX)

    def replace_segments(self, new_segments: list[LogSegment],
                         old_segments: list[LogSegment]) -> None:
        (new,) = new_segments  # the cleaner swaps in one segment per group
        self.replaced.append((new, list(old_segments)))

    def close(self) -> None:
        for seg in self.segments:
            seg.close_handlers()
        for new, _old in self.replaced:
            new.close_handlers()


class BucketCompactor:
    """One compaction pass over a bucket (``clean_dirtiest``); see the module docstring.
    ``config_of(topic, spec)`` gives a topic's ``LogConfig``."""

    def __init__(self, commits: BucketLogs, manager_config: ManagerConfig, clock: Clock,
                 config_of: Callable[[str, TopicSpec | None], LogConfig],
                 max_upload_age_ms: Callable[[], int]) -> None:
        self.commits = commits
        self.clock = clock
        self.config_of = config_of
        self.max_upload_age_ms = max_upload_age_ms
        self.cleaner = Cleaner(manager_config)  # its offset map is allocated once, reused

    def clean_dirtiest(self) -> CleanerStats | None:
        """Clean the dirtiest compacted partition once; None when none needs it."""
        state = self.commits.state
        with LOCAL.temp_dir("seglog-compact-") as work:
            logs = [CompactedPartition(self.commits.storage, work, topic, n,
                                 self.config_of(topic, spec), ps, self.clock)
                    for topic, spec in sorted(state.topics.items())
                    if self.config_of(topic, spec).compact
                    for n in range(spec.partitions)
                    if (ps := state.partition(topic, n)) is not None and ps.segments]
            try:
                return self._clean(work, logs) if logs else None
            finally:
                for log in logs:
                    log.close()

    def _clean(self, work: Path, logs: list[CompactedPartition]) -> CleanerStats | None:
        OffsetCheckpointFile(work / CLEANER_OFFSET_CHECKPOINT).write(
            {(log.topic, log.partition): log.state.cleaner_offset for log in logs
             if log.state.cleaner_offset is not None})
        manager = LogCleanerManager(self.clock)
        picked = manager.grab_filthiest(logs)
        if picked is None:
            return None
        log, cleanable = picked
        stats = self.cleaner.clean(log, cleanable, self.clock.milliseconds())
        built = [self._objects(log, new, old) for new, old in log.replaced]
        uploaded_at = self.clock.milliseconds()
        max_age = self.max_upload_age_ms()
        upload(self.commits.storage, built)
        crash_point("compact-after-upload")
        key = f"{log.topic}-{log.partition}"
        removed = [log.entries[s.base_offset].key for _new, old in log.replaced for s in old]

        def build(state: BucketState) -> Change | None:
            current = state.partitions.get(key)
            held = {s.key for s in current.segments} if current is not None else set()
            if any(k not in held for k in removed):
                logger.info("%s: compaction of %s abandoned: a segment it rewrote left the "
                            "log meanwhile", self.commits.uri, key)
                return None
            if self.clock.milliseconds() - uploaded_at > max_age:
                logger.warning("%s: compaction of %s abandoned: its uploads are older than "
                               "%d ms (half the orphan grace)", self.commits.uri, key, max_age)
                return None
            return Change(partitions={key: PartitionChange(
                add=tuple(s.entry for s in built), remove=tuple(removed),
                cleaner_offset=stats.end_offset)})

        done = self.commits.commit("compact", build)
        if done is None:
            discard(self.commits.storage, built)
            return None
        crash_point("compact-after-commit")
        logger.info("%s: compacted %s: offsets [%d, %d) mapped, %d segment(s) into %d, "
                    "%d -> %d bytes", self.commits.uri, key, stats.first_dirty_offset,
                    stats.end_offset, stats.segments_cleaned, len(built), stats.bytes_read,
                    stats.bytes_written)
        return stats

    def _objects(self, log: CompactedPartition, new: LogSegment, old: list[LogSegment]
                 ) -> SegmentObjects:
        """The cleaned segment as bucket objects: its bytes under a new unique name, the
        indexes rebuilt as every bucket segment's, the base offset and offset range of
        what it replaces (the cleaner always leaves a batch: an empty one closes the
        range when the group's last batch went)."""
        data = bytearray(LOCAL.read(new.log_path))
        headers = list(iter_batch_headers(data))
        (seg,) = build_segments(data, headers, topic=log.topic, partition=log.partition,
                                segment_bytes=max(len(data), log.config.segment_bytes),
                                index_interval_bytes=log.config.index_interval_bytes,
                                base_offset=old[0].base_offset)
        last = log.entries[old[-1].base_offset]
        entry = replace(seg.entry, next_offset=last.next_offset)
        return SegmentObjects(entry, seg.log, seg.index, seg.timeindex)
