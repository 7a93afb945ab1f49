"""Driver side of the exactly-once sink on a bucket: one conditional commit per batch.

The tasks uploaded their fragments (``sink_bucket_staging``); ``commit(messages,
batch_id)`` reads and writes no data byte. It:

1. picks one attempt per task (``sink_commit.select_attempts``: the lowest attempt
   wins) and orders each partition's fragments by task, as the local sink does;
2. refuses fragments uploaded longer ago than half the orphan grace
   (``ORPHAN_GRACE_MS``): the sweep may delete unreferenced uploads after the grace,
   and a commit must never reference an object that may be gone (Spark reruns the
   batch on restart, uploading afresh);
3. commits, through the bucket's commit log (``bucket_commit_log.CommitLog.commit``),
   ONE new version that creates the missing topics (``createTopics``), turns each
   fragment into a segment entry of its partition with ``offset_delta`` = the offset
   assigned now (readers patch the stored base offsets; ``bucket_segment``), and sets
   the sink's ledger entry ``sinks[<sink id>] = {"batch_id": B, ...}``, all atomically.
   If the ledger already holds ``B`` or later, the batch is a replay: nothing is
   committed. A lost race re-runs this step on the new state: offsets are reassigned
   (metadata only), a topic created meanwhile is checked instead of created, and a
   ledger that moved to ``B`` means another attempt of this very batch won;
4. deletes the uploads no commit references: other attempts, and a replay's own;
5. when ``maintenanceIntervalMs`` has passed since the ledger's last sweep (kept in
   the ledger, so every process agrees), sweeps ``_seglog/staging/``: objects no
   segment references and older than ``ORPHAN_GRACE_MS`` (dead tasks, crashed
   commits, other sinks' dead runs).

Why exactly once: the fragments are invisible until the commit object exists, and the
commit that makes them visible is the same object that advances the ledger; a create-if-
absent has one winner. A crash before the commit leaves orphans only; after it, the
replay finds its batch id in the ledger. Named crash steps (``SEGLOG_CRASH_AT``, as in
``sink_commit``): ``BUCKET_CRASH_STEPS``, plus the commit log's own ``after-upload``,
``after-commit`` and ``after-snapshot``; tasks have ``task-after-upload``.

Not thread-safe: one commit at a time per sink (Spark commits micro-batches in order);
any number of sinks and processes may commit to one bucket at once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from seglog.logstore.bucket_commit_log import Change
from seglog.logstore.bucket_manager import BucketLogManager
from seglog.logstore.bucket_state import (
    STAGING_DIR,
    BucketState,
    PartitionChange,
    SegmentEntry,
    TopicSpec,
    tp_key,
)
from seglog.logstore.clock import SYSTEM_CLOCK, Clock
from seglog.logstore.errors import KafkaStorageError, SeglogError
from seglog.logstore.record_format import TopicPartition
from seglog.logstore.topics import parse_overrides, validate_topic_name, warn_on_collision

from .errors import SinkCommitError
from .sink_bucket_staging import (
    BucketFragment,
    delete_fragments,
    open_bucket,
    staging_prefix,
)
from .sink_commit import CommitResult, PublishedPartition, crash_point, select_attempts
from .sink_options import SinkOptions, require_creatable
from .sink_staging import StagedTask

logger = logging.getLogger(__name__)

__all__ = ["commit", "abort", "sweep_staging", "BUCKET_CRASH_STEPS", "ORPHAN_GRACE_MS",
           "OPERATION"]

BUCKET_CRASH_STEPS = ("bucket-after-plan", "bucket-after-commit", "bucket-after-cleanup")
ORPHAN_GRACE_MS = 3600 * 1000
"""Uploads no commit references are deleted after this (the design's orphan grace,
``max(file.delete.delay.ms, 1 h)`` with Kafka's default delay)."""
OPERATION = "sink_append"
_SUFFIXES = (".log", ".index", ".timeindex")


@dataclass(frozen=True, slots=True)
class _Plan:
    """What ``build`` decided on the state it was given (read after the commit)."""

    published: tuple[PublishedPartition, ...]
    sweep: bool


def commit(messages: Sequence[StagedTask | None], batch_id: int, options: SinkOptions, *,
           use_ledger: bool = True, clock: Clock = SYSTEM_CLOCK) -> CommitResult:
    """Publish a micro-batch exactly once (see the module docstring)."""
    chosen, losers = select_attempts(messages, batch_id)
    plan = _fragments(chosen)
    sink_id = chosen[0].sink_id if chosen else None
    mgr = open_bucket(options, read_only=False, clock=clock)
    try:
        removed = delete_fragments(mgr, _unreferenced(mgr.state, _all(losers)))
        if sink_id is None:
            return CommitResult(batch_id, removed_files=removed)
        _check_age(plan, clock, mgr.uri)
        assumed = _assumed_partition_counts(chosen)
        decided: list[_Plan] = []

        def build(state: BucketState) -> Change | None:
            decided.clear()
            change, decision = _build(state, mgr, options, plan, assumed, sink_id, batch_id,
                                      use_ledger, clock)
            if decision is not None:
                decided.append(decision)
            crash_point("bucket-after-plan", batch_id)
            return change

        if plan:  # an empty batch commits nothing: its replay is empty too
            mgr.commits.commit(OPERATION, build)
        done = decided[0] if decided else None
        crash_point("bucket-after-commit", batch_id)
        mine = _unreferenced(mgr.state, _all(chosen))
        removed += delete_fragments(mgr, mine)
        if done is None:
            logger.info("batch %d of sink %s is already in %s (a replay): nothing committed",
                        batch_id, sink_id, mgr.uri)
            return CommitResult(batch_id, skipped=tuple(sorted(plan)), removed_files=removed)
        if done.sweep:
            try:
                removed += sweep_staging(mgr, clock=clock)
            except SeglogError as e:
                # Best effort after the publish: the batch is visible, so failing the
                # commit now would make Spark (or a batch job's caller) run it again.
                logger.warning("sink %s published batch %d to %s, but the sweep of its "
                               "dead uploads failed (the next sweep retries): %s",
                               sink_id, batch_id, mgr.uri, e)
        crash_point("bucket-after-cleanup", batch_id)
    finally:
        mgr.close()
    result = CommitResult(batch_id, done.published, (), removed)
    logger.info("sink %s committed batch %d to %s: %d records in %d partition(s)", sink_id,
                batch_id, options.bucket_uri, result.records, len(done.published))
    return result


def _build(state: BucketState, mgr: BucketLogManager, options: SinkOptions,
           plan: dict[TopicPartition, list[BucketFragment]], assumed: dict[str, int],
           sink_id: str, batch_id: int, use_ledger: bool, clock: Clock
           ) -> tuple[Change | None, _Plan | None]:
    """The commit of this batch on ``state``, or None when the ledger holds it."""
    ledger = state.sinks.get(sink_id) if use_ledger else None
    if use_ledger and _ledger_batch(state, sink_id) >= batch_id:
        return None, None
    topics: dict[str, TopicSpec] = {}
    for topic, n in sorted(assumed.items()):
        spec = state.topics.get(topic)
        if spec is None:
            require_creatable(options, topic)
            validate_topic_name(topic)
            warn_on_collision(topic, state.topics)
            overrides = parse_overrides(dict(options.topic_config or {}),
                                        base=mgr.default_topic_config)
            topics[topic] = TopicSpec(n, overrides)
        elif spec.partitions != n:
            raise SinkCommitError(
                f"topic {topic!r} in {mgr.uri} has {spec.partitions} partition(s) but the "
                f"tasks routed rows for {n}: it changed during the batch; batch {batch_id} "
                "is not published")
    parts: dict[str, PartitionChange] = {}
    published = []
    for (topic, partition), frags in sorted(plan.items()):
        ps = state.partition(topic, partition)
        start = end = ps.high_watermark if ps is not None else 0
        entries = []
        for f in frags:
            # Stored offsets are [0, f.offsets): the delta is the base assigned now.
            entries.append(SegmentEntry(f.key, end, end + f.offsets, f.size, f.max_timestamp,
                                        f.index_bytes, f.timeindex_bytes, offset_delta=end))
            end += f.offsets
        parts[tp_key(topic, partition)] = PartitionChange(add=tuple(entries))
        published.append(PublishedPartition(topic, partition, start, end,
                                            sum(f.records for f in frags)))
    now = clock.milliseconds()
    sweep = False
    sinks: dict[str, Any] = {}
    if use_ledger:
        last = ledger.get("swept_ms") if isinstance(ledger, dict) else None
        sweep = not isinstance(last, int) or now - last >= options.maintenance_interval_ms
        sinks[sink_id] = {"batch_id": batch_id, "timestamp_ms": now,
                          "swept_ms": now if sweep else last}
    return Change(topics=topics, partitions=parts, sinks=sinks), _Plan(tuple(published), sweep)


def _ledger_batch(state: BucketState, sink_id: str) -> int:
    """The last batch id the sink's ledger holds; -1 for none. A ledger that is not what
    this sink writes is corruption of the commit that wrote it, never "no batch"."""
    ledger = state.sinks.get(sink_id)
    if ledger is None:
        return -1
    batch = ledger.get("batch_id") if isinstance(ledger, dict) else None
    if isinstance(batch, bool) or not isinstance(batch, int):
        raise SinkCommitError(f"the ledger of sink {sink_id!r} in the bucket's state (version "
                              f"{state.version}) is not a sink ledger: {ledger!r}")
    return batch


def _fragments(chosen: list[StagedTask]) -> dict[TopicPartition, list[BucketFragment]]:
    plan: dict[TopicPartition, list[BucketFragment]] = {}
    for m in chosen:  # ordered by task: the deterministic publish order
        found: tuple[Any, ...] = m.fragments
        for f in found:
            if not isinstance(f, BucketFragment):
                raise SinkCommitError(f"task {m.task} staged {f.path} in a local dir, but the "
                                      "sink writes to a bucket")
            if f.records:
                plan.setdefault((f.topic, f.partition), []).append(f)
    return plan


def _all(tasks: Iterable[StagedTask]) -> list[BucketFragment]:
    found: list[Any] = [f for m in tasks for f in m.fragments]
    return [f for f in found if isinstance(f, BucketFragment)]


def _unreferenced(state: BucketState, fragments: list[BucketFragment]) -> list[BucketFragment]:
    if not fragments:
        return []
    referenced = {s.key for p in state.partitions.values() for s in p.segments}
    return [f for f in fragments if f.key not in referenced]


def _check_age(plan: dict[TopicPartition, list[BucketFragment]], clock: Clock,
               uri: str) -> None:
    now = clock.milliseconds()
    for frags in plan.values():
        for f in frags:
            if now - f.uploaded_ms > ORPHAN_GRACE_MS // 2:
                raise SinkCommitError(
                    f"fragment {uri}/{f.key} was uploaded {(now - f.uploaded_ms) // 1000} s "
                    f"ago, more than half the orphan grace ({ORPHAN_GRACE_MS // 1000} s): it "
                    "may be collected, so it is never committed; the batch is not published "
                    "(a restart of the query runs it again)")


def _assumed_partition_counts(chosen: list[StagedTask]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for m in chosen:
        for topic, n in m.topic_partitions:
            if counts.setdefault(topic, n) != n:
                raise SinkCommitError(
                    f"tasks routed rows of topic {topic!r} with different partition counts "
                    f"({counts[topic]} and {n}): the topic changed during the batch")
    return counts


# ---------------------------------------------------------------------------- abort/sweep
def abort(messages: Iterable[StagedTask | None], batch_id: int, options: SinkOptions,
          *, clock: Clock = SYSTEM_CLOCK) -> int:
    """Delete the uploads of a failed batch that no commit references (a commit whose
    worker died after its conditional PUT is visible: its fragments stay)."""
    tasks = [m for m in messages if m is not None]
    if not tasks:
        return 0
    mgr = open_bucket(options, read_only=False, clock=clock)
    try:
        removed = delete_fragments(mgr, _unreferenced(mgr.state, _all(tasks)))
    finally:
        mgr.close()
    logger.info("aborted batch %d: deleted %d uploaded object(s)", batch_id, removed)
    return removed


def sweep_staging(mgr: BucketLogManager, *, clock: Clock = SYSTEM_CLOCK,
                  grace_ms: int = ORPHAN_GRACE_MS) -> int:
    """Delete staging objects that no segment of the state references and that are older
    than ``grace_ms`` (uploads of dead tasks and crashed or losing commits, of every
    sink); returns how many. The state is refreshed first, so a fragment committed by
    another process meanwhile is seen as referenced."""
    mgr.refresh()
    referenced = {s.key for p in mgr.state.partitions.values() for s in p.segments}
    now = clock.milliseconds()
    removed = 0
    for key, mtime_ms in _walk(mgr, STAGING_DIR, depth=4):
        stem = _stem(key)
        if stem is None or stem in referenced or now - mtime_ms <= grace_ms:
            continue
        try:
            mgr.storage.delete(key)
            removed += 1
        except KafkaStorageError as e:
            logger.warning("cannot delete orphan upload %s/%s: %s", mgr.uri, key, e)
    if removed:
        logger.info("deleted %d orphan upload(s) from %s/%s", removed, mgr.uri, STAGING_DIR)
    return removed


def _walk(mgr: BucketLogManager, prefix: str, depth: int) -> Iterable[tuple[str, int]]:
    """(key, mtime) of the objects under ``prefix``, at most ``depth`` levels down."""
    for e in mgr.storage.list_dir(prefix):
        key = f"{prefix}/{e.name}"
        if e.is_dir:
            if depth > 1:
                yield from _walk(mgr, key, depth - 1)
        else:
            yield key, e.mtime_ms


def _stem(key: str) -> str | None:
    for suffix in _SUFFIXES:
        if key.endswith(suffix):
            return key[:-len(suffix)]
    return None


def staged_keys(mgr: BucketLogManager, sink_id: str) -> list[str]:
    """Every staging object of a sink (tests and ``seglog check``)."""
    return [k for k, _ in _walk(mgr, staging_prefix(sink_id), depth=3)]
