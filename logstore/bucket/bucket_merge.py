"""Merging a bucket partition's small segments into ``segment.bytes``-sized ones.

Every append (and every sink fragment) is its own segment object, so a busy partition
holds many small objects. A merge rewrites a run of adjacent segments into one exact
Kafka segment and commits it as remove + add (``"operation": "merge"``).

**Grouping** is the cleaner's (``cleaner_stats.group_segments``, Kafka's
``groupSegmentsBySize``): consecutive segments whose summed sizes fit ``segment.bytes``,
summed index sizes fit ``segment.index.bytes`` and offsets fit 32 bits relative to the
first. A run is also cut where a segment's largest timestamp is more than ``segment.ms``
after the run's first segment's (Kafka's time-based roll, with the first segment's
largest timestamp standing for its first batch's: entries carry no more). Segments wholly
below the log start offset are left to retention; only runs of two or more are merged.

**Rewrite**: the sources' ``.log`` objects are read (``READ_THREADS`` at once) and
checked (``bucket_objects``: sizes, CRCs, offsets; base offsets patched where an entry
has ``offset_delta``), concatenated, and the ``.index``/``.timeindex`` rebuilt by
``bucket_segment``'s indexing (what a local seglog writes for the same batches). The
merged entry keeps the run's offset range ``[first base, last next_offset)``, so the
high watermark never moves.

**Commit**: on a lost race the merge is re-checked against the new state: a run whose
source segment is gone (retention, another merge) is abandoned and its upload deleted;
the others are committed. Uploads older than half the orphan grace are never committed
(the collector may already treat them as orphans): the merge is abandoned instead.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from ..cleaner.cleaner_stats import SegmentSizes, group_segments
from ..config.config import LogConfig
from ..storage.storage import Storage
from ..util.clock import Clock
from ..util.crash_points import crash_point
from .bucket_commit_log import Change
from .bucket_logs import BucketLogs
from .bucket_objects import concatenated, discard, read_segment, upload
from .bucket_segment import SegmentObjects, build_segments
from .bucket_state import BucketState, PartitionChange, PartitionState, SegmentEntry, tp_key

logger = logging.getLogger(__name__)

MERGE_STEPS = ("merge-after-upload", "merge-after-commit")
READ_THREADS = 16
"""Source ``.log`` objects a merge reads at once (``bucket_append.UPLOAD_THREADS``'s bound)."""


@dataclass(frozen=True, slots=True)
class MergeResult:
    """What one merge of a partition committed (``merged`` sources into ``written``);
    ``attempts``: the versions its commit tried to create (``CommitLog.last_attempts``)."""

    merged: int
    written: int
    abandoned: int
    attempts: int = 0


def plan_merges(ps: PartitionState, config: LogConfig) -> list[tuple[SegmentEntry, ...]]:
    """The runs of adjacent segments to merge (see the module docstring)."""
    segs = [s for s in ps.segments if s.next_offset > ps.log_start_offset]
    infos = [SegmentSizes(s.base_offset, s.next_offset, s.size,
                          s.index_bytes or len(s.inline_index),
                          s.timeindex_bytes or len(s.inline_timeindex)) for s in segs]
    runs: list[tuple[SegmentEntry, ...]] = []
    for group in group_segments(infos, config.segment_bytes, config.segment_index_bytes):
        run: list[SegmentEntry] = []
        for i in group:
            seg = segs[i]
            if run and seg.max_timestamp - run[0].max_timestamp > config.segment_ms:
                runs.append(tuple(run))
                run = []
            run.append(seg)
        runs.append(tuple(run))
    return [r for r in runs if len(r) > 1]


def plan_small_merges(ps: PartitionState, config: LogConfig, *, target_bytes: int,
                      min_segments: int) -> list[tuple[SegmentEntry, ...]]:
    """Runs of at least ``min_segments`` adjacent *small* segments (each under half of
    ``target_bytes``), grouped as ``plan_merges`` groups them but into at most
    ``target_bytes``: what a running Spark sink merges in its tasks. A segment that
    reached half the target is never rewritten again, so each byte is rewritten a few
    times at most, not once per merge as when everything merges into one growing
    segment."""
    small = replace(config, segment_bytes=min(config.segment_bytes, target_bytes))
    runs: list[tuple[SegmentEntry, ...]] = []
    stretch: list[SegmentEntry] = []
    for seg in (*ps.segments, None):
        if seg is not None and seg.size < target_bytes // 2:
            stretch.append(seg)
            continue
        if len(stretch) >= min_segments:
            runs += plan_merges(replace(ps, segments=tuple(stretch)), small)
        stretch = []
    return [r for r in runs if len(r) >= min_segments]


def plan_deferred_merges(ps: PartitionState, config: LogConfig, *, small_bytes: int,
                         target_bytes: int, min_segments: int) -> list[tuple[SegmentEntry, ...]]:
    """What a sink merges after its commit: in each stretch of adjacent segments under
    ``small_bytes`` that holds at least ``min_segments`` (the stretch is what a reader
    pays a request each for), the newest segments from the first one no larger than all
    the segments after it together, grouped as ``plan_merges`` groups them into at most
    ``target_bytes``. Leaving out the older, larger ones makes merged segments double at
    most once per merge they take part in, so a byte is rewritten about
    log2(``small_bytes`` / fragment size) times, not once per merge as when every merge
    takes the partition's whole small tail; a segment that reached ``small_bytes`` is
    never rewritten again. A stretch then holds at most that many older segments plus
    fewer than ``min_segments`` new ones."""
    small = replace(config, segment_bytes=min(config.segment_bytes, target_bytes))
    runs: list[tuple[SegmentEntry, ...]] = []
    stretch: list[SegmentEntry] = []
    for seg in (*ps.segments, None):
        if seg is not None and seg.size < small_bytes and seg.next_offset > ps.log_start_offset:
            stretch.append(seg)
            continue
        if len(stretch) >= min_segments:
            after = sum(s.size for s in stretch)
            start = len(stretch)
            for i, s in enumerate(stretch):
                after -= s.size
                if s.size <= after:
                    start = i
                    break
            runs += plan_merges(replace(ps, segments=tuple(stretch[start:])), small)
        stretch = []
    return runs


def merged_segment(storage: Storage, run: tuple[SegmentEntry, ...], topic: str,
                   partition: int, config: LogConfig) -> SegmentObjects:
    """One Kafka segment holding ``run``'s batches, with rebuilt indexes."""
    # The sources at once: a run of tiny fragments is many GETs, each a round trip, and
    # a sink merges after its commit, so the next micro-batch waits for them.
    with ThreadPoolExecutor(min(len(run), READ_THREADS),
                            thread_name_prefix="seglog-merge-read") as pool:
        sources = list(pool.map(lambda e: read_segment(storage, e), run))
    buf, headers = concatenated(sources)
    segments = build_segments(buf, headers, topic=topic, partition=partition,
                              segment_bytes=max(len(buf), config.segment_bytes),
                              index_interval_bytes=config.index_interval_bytes,
                              base_offset=run[0].base_offset)
    if len(segments) != 1:  # group_segments keeps offsets within 32 bits of the base
        raise AssertionError(f"merging {len(run)} segments of {topic}-{partition} gave "
                             f"{len(segments)}")
    seg = segments[0]
    entry = replace(seg.entry, next_offset=run[-1].next_offset)
    return SegmentObjects(entry, seg.log, seg.index, seg.timeindex)


def merge_partition(commits: BucketLogs, topic: str, partition: int, config: LogConfig,
                    clock: Clock, max_upload_age_ms: int,
                    runs: list[tuple[SegmentEntry, ...]] | None = None) -> MergeResult:
    """Plan (or take ``runs``), rewrite, upload and commit the merges of one partition
    (one commit)."""
    storage = commits.storage
    key = tp_key(topic, partition)
    ps = commits.state.partitions.get(key)
    if runs is None:
        runs = plan_merges(ps, config) if ps is not None else []
    if not runs:
        return MergeResult(0, 0, 0)
    built = [merged_segment(storage, run, topic, partition, config) for run in runs]
    uploaded_at = clock.milliseconds()
    upload(storage, built)
    crash_point("merge-after-upload")
    pending = list(zip(runs, built, strict=True))
    dropped: list[SegmentObjects] = []

    def build(state: BucketState) -> Change | None:
        current = state.partitions.get(key)
        held = {s.key for s in current.segments} if current is not None else set()
        keep = []
        for run, seg in pending:
            if all(s.key in held for s in run):
                keep.append((run, seg))
            else:
                dropped.append(seg)
                logger.info("%s: merge of %d segments of %s abandoned: a source segment "
                            "left the log meanwhile", commits.uri, len(run), key)
        pending[:] = keep
        if clock.milliseconds() - uploaded_at > max_upload_age_ms:
            logger.warning("%s: merge of %s abandoned: its uploads are older than %d ms "
                           "(half the orphan grace)", commits.uri, key, max_upload_age_ms)
            dropped.extend(seg for _run, seg in pending)
            pending.clear()
        if not pending:
            return None
        return Change(partitions={key: PartitionChange(
            add=tuple(seg.entry for _run, seg in pending),
            remove=tuple(s.key for run, _seg in pending for s in run))})

    # On an error the uploads stay (a failed request may have committed them): the
    # collector deletes what no commit references after the orphan grace.
    done = commits.commit("merge", build)
    discard(storage, dropped)
    attempts = commits.last_attempts
    if done is None:
        return MergeResult(0, 0, len(runs), attempts)
    crash_point("merge-after-commit")
    merged = sum(len(run) for run, _seg in pending)
    logger.info("%s: merged %d segments of %s into %d", commits.uri, merged, key, len(pending))
    return MergeResult(merged, len(pending), len(runs) - len(pending), attempts)
