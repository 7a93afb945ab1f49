"""Driver side of the exactly-once sink on a bucket: one conditional commit per batch.

The tasks uploaded their fragments (``sink_bucket_staging``); ``commit(messages,
batch_id)`` reads and writes no data byte. It:

1. picks one attempt per task (``sink_protocol.select_attempts``: the lowest attempt
   wins) and orders each partition's fragments by task, as the local sink does: the
   order of the steps and what each may do are ``sink_protocol``'s, this module is the
   bucket's ``SinkPublication``;
2. takes this process's writer of the bucket (``bucket_writer``: one manager per
   process, so a commit reads the commits made since the last one, never the history)
   and reads the sink's ledger FIRST: a batch the ledger holds is a replay, published
   already, whatever its uploads look like; an empty batch commits nothing. A steady
   commit neither refreshes the writer nor LISTs its uploads: the writer made the last
   commit of its topics' logs unless another writer committed since, and then the
   create of step 4 loses and the commit log folds what it missed and builds again, the
   ledger checked on the new state. So the driver's commit is ONE round trip, its
   conditional PUT (``tests/streaming/test_sink_round_trips.py``). The uploads are
   trusted on their tasks' acknowledged PUTs (attempt-unique keys, kept by the collector
   while in flight: ``bucket_staging.InFlight``);
3. a writer opened by this commit (a query's first micro-batch), a topic it does not
   know, or a sink whose last commit lost its create (``_CONTENDED``: another writer of
   its topics) looks first (``sink_bucket_checks.check_and_refresh``): its topics' logs
   refreshed beside one LIST of ``<sink>/<batch>/`` that checks every upload's size;
4. commits, through the bucket's commit log (``BucketLogs.commit_steps``, a loop it drives),
   ONE new version that creates the missing topics (``createTopics``), turns each
   fragment into a segment entry of its partition with ``offset_delta`` = the offset
   assigned now (readers patch the stored base offsets; ``bucket_segment``), and sets
   the sink's ledger entry ``sinks[<sink id>] = {"batch_id": B, ...}``, all atomically.
   The topic's partition count and config must be what the tasks routed and checked the
   rows with (``StagedTask.topic_configs``), else ``SinkCommitError`` names topic and key.
   A lost race re-runs this step on the new state: offsets are reassigned (metadata
   only), a topic created meanwhile is checked instead of created, and a ledger that
   moved to ``B`` means another attempt of this very batch won. A request failing
   around the create is settled by a refresh (``_settle``): landed (the ledger holds the
   batch, whatever became of its fragments since) means published;
5. deletes the uploads no commit references: other attempts, and a replay's own;
6. when ``maintenanceIntervalMs`` has passed since the ledger's ``maintained_ms`` (a
   new sink's first commit starts it), runs retention and collection; then hands the
   merges due (``merges_due``, no request) to the process's background merger
   (``sink_bucket_merger``) without waiting. Best effort: a failure is logged.

Why exactly once: the fragments are invisible until the commit that also advances the
ledger exists; a create-if-absent has one winner. A crash before the commit leaves
orphans only; after it, the replay finds its batch id in the ledger. Crash steps
(``SEGLOG_CRASH_AT``): ``BUCKET_CRASH_STEPS``, the commit log's ``after-upload``,
``after-commit`` and ``after-snapshot``; tasks have ``task-after-upload``.

Not thread-safe: one commit at a time per sink (Spark commits micro-batches in order);
any number of sinks and processes may commit to one bucket at once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from seglog.logstore.bucket.bucket_commit_log import Attempt, Change
from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.bucket.bucket_state import (
    BucketState,
    PartitionChange,
    SegmentEntry,
    TopicSpec,
    tp_key,
)
from seglog.logstore.bucket.bucket_view import topic_groups
from seglog.logstore.config.topics import parse_overrides, validate_topic_name, warn_on_collision
from seglog.logstore.errors import KafkaStorageError, SeglogError
from seglog.logstore.log.partition_metadata import new_topic_id
from seglog.logstore.records.record_format import TopicPartition
from seglog.logstore.storage.object_storage import ObjectStorage
from seglog.logstore.storage.object_store_config import redact_uris
from seglog.logstore.util.clock import SYSTEM_CLOCK, Clock
from seglog.logstore.util.crash_points import crash_point

from . import log_writers, sink_protocol
from .errors import SinkCommitError
from .sink_batch import (
    AssumedTopic,
    CommitResult,
    PublishedPartition,
    SinkBatch,
    config_differences,
)
from .sink_bucket_checks import check_and_refresh, ledger_batch, ledger_of, list_uploads
from .sink_bucket_merge import merges_due
from .sink_bucket_merger import MergeRequest, background_merger
from .sink_bucket_staging import (
    BucketFragment,
    delete_fragments,
    stage_rows,
    staging_prefix,
)
from .sink_options import SinkOptions, require_creatable
from .sink_staging import StagedTask, fragments_of

if TYPE_CHECKING:
    from .sink_view import TopicView

logger = logging.getLogger(__name__)

__all__ = ["commit", "abort", "bucket_writer", "staged_keys", "BucketSinkBackend",
           "BucketPublication", "BUCKET_CRASH_STEPS", "OPERATION"]

BUCKET_CRASH_STEPS = ("bucket-after-plan", "bucket-after-commit", "bucket-after-cleanup")
OPERATION = "sink_append"

_CONTENDED: set[tuple[str, str]] = set()
"""(bucket, sink id) of this process whose last commit lost its create (another writer
commits to its topics: another query, a producer): its next commits refresh first, as a
lost create costs more (step 3), until a refresh finds nothing new."""


def commit(messages: Sequence[StagedTask | None], batch_id: int, options: SinkOptions, *,
           use_ledger: bool = True, clock: Clock = SYSTEM_CLOCK) -> CommitResult:
    """Publish a micro-batch to a bucket exactly once (``sink_protocol.commit``)."""
    return sink_protocol.commit(BucketSinkBackend(options, clock), messages, batch_id,
                                use_ledger=use_ledger)


def abort(messages: Iterable[StagedTask | None], batch_id: int, options: SinkOptions,
          *, clock: Clock = SYSTEM_CLOCK) -> int:
    """Delete the uploads of a failed batch that no commit references
    (``sink_protocol.abort``)."""
    return sink_protocol.abort(BucketSinkBackend(options, clock), messages, batch_id)


class BucketSinkBackend(sink_protocol.StagingBackend):
    """The sink over a bucket (``sink_protocol.SinkBackend``): fragments uploaded by the
    tasks (``sink_bucket_staging``), published by ``BucketPublication``."""

    def __init__(self, options: SinkOptions, clock: Clock = SYSTEM_CLOCK,
                 view: TopicView | None = None) -> None:
        super().__init__(options, clock)
        self.view = view  # the driver's view of the topics, for a task (``sink_view``)
        self.started_ms = clock.monotonic_ms()
        """When this commit began (``remove_losers``, its first step, sets it again: a
        backend may serve several): a view LISTed since was LISTed by it."""

    def stage_rows(self) -> sink_protocol.StageRows:
        return partial(stage_rows, view=self.view)

    def remove_losers(self, losers: Sequence[StagedTask]) -> int:
        """With losers (other attempts of a task: rare), refreshes the process's writer
        first (one LIST): a loser's upload is deleted only when no commit this process
        can see references it. Without, no request (``BucketPublication.publish``)."""
        self.started_ms = self.clock.monotonic_ms()  # the commit's first step: its start
        if not losers:
            return 0  # the writer is opened by ``begin`` (beside the uploads' LIST)
        mgr = bucket_writer(self.options, self.clock)
        mgr.refresh()
        return delete_fragments(mgr.storage, _unreferenced(mgr.state, _all(losers)))

    def commit_empty(self, batch: SinkBatch) -> int:
        """A batch without rows commits nothing (a replay of one included)."""
        mgr = bucket_writer(self.options, self.clock)
        if batch.use_ledger and ledger_batch(mgr.state, batch.sink_id) >= batch.batch_id:
            logger.info("batch %d of sink %s is already in %s (a replay): nothing committed",
                        batch.batch_id, batch.sink_id, mgr.uri)
            return delete_fragments(mgr.storage, _unreferenced(mgr.state, _all(batch.chosen)))
        return 0

    def begin(self, batch: SinkBatch) -> BucketPublication:
        """The publication, on this process's writer. A writer not open yet (a query's
        first micro-batch) is opened while the LIST of the batch's uploads runs (it needs
        nothing of the writer's: its own store client), so the open's round trips (the
        catalog's, then the topic logs it names) hide that LIST's."""
        uri, storage = self.options.bucket_uri, self.options.storage
        if uri is None or log_writers.cached_bucket_writer(uri, self.clock, storage):
            return BucketPublication(bucket_writer(self.options, self.clock), self.options,
                                     batch, self.clock, self.started_ms)
        with ThreadPoolExecutor(1, thread_name_prefix="seglog-sink-list") as pool:
            listing = pool.submit(list_uploads, ObjectStorage(uri, storage), batch.sink_id,
                                  batch.batch_id)
            mgr = bucket_writer(self.options, self.clock)
        return BucketPublication(mgr, self.options, batch, self.clock, self.started_ms,
                                 listing)

    def abort(self, tasks: Sequence[StagedTask], batch_id: int, sink_ids: Iterable[str]
              ) -> int:
        """``sink_ids`` are not needed: a task that uploaded anything reported it, and
        the collector deletes what a task that died left."""
        if not tasks:
            return 0
        return abort_uploads(bucket_writer(self.options, self.clock), tasks, batch_id)


class BucketPublication:
    """One micro-batch's publish to a bucket (``sink_protocol.SinkPublication``): one
    conditional commit carrying the segment entries and the ledger (steps 2-6 of the
    module docstring). ``mgr`` is the process's writer, refreshed by
    ``BucketSinkBackend.remove_losers``."""

    def __init__(self, mgr: BucketLogManager, options: SinkOptions, batch: SinkBatch,
                 clock: Clock, started_ms: int,
                 listing: Future[dict[str, int]] | None = None) -> None:
        self.mgr = mgr
        self.listing = listing
        """The LIST of the uploads, made beside the writer's open (``begin``)."""
        self.options = options
        self.batch = batch
        self.clock = clock
        self.started_ms = started_ms
        self.plan = {tp: fragments_of(BucketFragment, frags, "in a local dir", "a bucket")
                     for tp, frags in batch.plan.items()}
        self.settled = False
        self.done: _Plan | None = None

    def prepare(self) -> None:
        """Nothing: topics are created by the commit itself."""

    def replayed(self) -> tuple[TopicPartition, ...]:
        """The planned partitions whose log's ledger holds the batch (read before
        anything about the uploads: a replay is never refused): all of them, or, for
        topics in their own logs, those of the topics committed before a crash."""
        state = self.mgr.state
        return tuple(tp for tp in sorted(self.plan)
                     if ledger_batch(state, self.batch.sink_id, [tp[0]]) >= self.batch.batch_id)

    def publish(self, todo: Sequence[TopicPartition]) -> tuple[PublishedPartition, ...] | None:
        """One conditional commit per log (a lost race builds again; a first commit or
        an unknown topic checks the uploads and refreshes first): the legacy topics
        together, each topic in its own log alone, in that order
        (``bucket_view.topic_groups``), each carrying the sink's ledger, so a replay
        publishes exactly the topics whose log lacks the batch. ``replayed`` judged on
        the view before: a topic found to hold the batch here (a refresh, a lost race)
        is left out of the result, which ``sink_protocol`` reports as skipped."""
        if not todo:  # every log's ledger holds the batch
            return None
        b = self.batch
        plan = {tp: self.plan[tp] for tp in todo}
        known = all(tp[0] in self.mgr.state.topics for tp in plan)
        contended = (self.mgr.uri, b.sink_id) in _CONTENDED
        if self.listing is not None or not known or contended:  # step 3 of the docstring
            # A view LISTed during this commit (the open, a refresh for losers) is as
            # fresh as a refresh now would make it.
            listed_now = (self.mgr.commits.view_age_ms()
                          <= self.clock.monotonic_ms() - self.started_ms)
            before = self.mgr.state.version
            if not check_and_refresh(self.mgr, b.sink_id, b.batch_id, plan,
                                     refresh=not listed_now, listing=self.listing):
                return None  # the fresh view's ledger holds the batch: a replay
            if contended and self.mgr.state.version == before:
                _CONTENDED.discard((self.mgr.uri, b.sink_id))  # nobody else wrote since
        # Else the conditional PUT alone (step 2); the commit log LISTs a view older than
        # its MAX_VIEW_AGE_MS itself.
        assumed = b.topics()
        published: list[PublishedPartition] = []
        maintain = aged = False
        groups = topic_groups(self.mgr.state, {tp[0] for tp in plan})
        for n, group in enumerate(groups):
            if n:
                crash_point("bucket-between-topics", b.batch_id)
            done = self._publish_group({tp: f for tp, f in plan.items() if tp[0] in group},
                                       {t: a for t, a in assumed.items() if t in group})
            if done is not None:
                published += done.published
                maintain = maintain or done.maintain
                aged = aged or done.merge_aged
        self.done = _Plan(tuple(published), maintain, aged) if published else None
        crash_point("bucket-after-commit", b.batch_id)
        return self.done.published if self.done is not None else None

    def _publish_group(self, plan: dict[TopicPartition, list[BucketFragment]],
                       assumed: dict[str, AssumedTopic]) -> _Plan | None:
        """One conditional commit of ``plan`` (the partitions of one log)."""
        b = self.batch
        decided: list[_Plan] = []

        def build(state: BucketState) -> Change | None:
            decided.clear()
            change, decision = _build(state, self.mgr, self.options, plan, assumed,
                                      b.sink_id, b.batch_id, b.use_ledger, self.clock)
            if decision is not None:
                decided.append(decision)
            crash_point("bucket-after-plan", b.batch_id)
            return change

        attempt = Attempt()
        try:
            # The loop is ours: the engine yields each view to build on, never calls back.
            for view in self.mgr.commits.commit_steps(OPERATION, attempt):
                with attempt:
                    attempt.change = build(view)
        except KafkaStorageError as e:
            _settle(self.mgr, plan, b.sink_id, b.batch_id, b.use_ledger, e)  # raises unless landed
            self.settled = True
        if self.mgr.commits.last_attempts > 1:
            _CONTENDED.add((self.mgr.uri, b.sink_id))  # another writer of its topics
        return decided[0] if decided else None

    def fail(self) -> None:
        """Nothing to undo: before its commit, a batch is only unreferenced uploads (the
        collector's once their batch is settled)."""

    def clean_up(self) -> int:
        """Delete this run's uploads that no commit references: all of a replay's; none
        after a settled commit (a fragment no longer referenced may have been merged
        away just now, while readers may still read it: the collector deletes it after
        file.delete.delay.ms instead)."""
        if self.done is not None and self.settled:
            return 0
        return delete_fragments(self.mgr.storage, _unreferenced(self.mgr.state,
                                                        _all(self.batch.chosen)))

    def maintain(self) -> None:
        if self.done is None:
            return
        if self.done.maintain:
            _run_maintenance(self.mgr, self.batch.sink_id, self.batch.batch_id)
        # Planned on the state the commit left (no request); merged by the process's
        # merger, not waited for: no micro-batch waits for a merge.
        written = {(p.topic, p.partition) for p in self.done.published}
        if merges_due(self.mgr, self.options, written, age_pass=self.done.merge_aged):
            background_merger(self.mgr.uri, self.options.storage, self.clock).submit(
                MergeRequest(self.batch.sink_id, self.batch.batch_id, self.options,
                             written, self.done.merge_aged))

    def close(self, *, failed: bool = False) -> None:
        """A bucket writer holds nothing to release (it stays the process's)."""
        if self.done is not None and not failed:
            crash_point("bucket-after-cleanup", self.batch.batch_id)


@dataclass(frozen=True, slots=True)
class _Plan:
    """What ``build`` decided on the state it was given (read after the commit)."""

    published: tuple[PublishedPartition, ...]
    maintain: bool
    merge_aged: bool = False
    """Merge every small segment of the sink's topics: an interval has passed since the
    sink's last maintenance (not at its first, where none has been measured)."""


def _settle(mgr: BucketLogManager, plan: dict[TopicPartition, list[BucketFragment]],
            sink_id: str, batch_id: int, use_ledger: bool, cause: KafkaStorageError) -> None:
    """After a request failed during the commit: return if the commit landed anyway (the
    batch is published: failing now would make a rerun write it twice), else raise a
    ``SinkCommitError`` that says whether the data is visible. Landed is what the sink's
    ledger says (the commit carries it): the fragments it referenced may be merged away
    by another process already. Without the ledger, every fragment must be referenced."""
    keys = [f.key for frags in plan.values() for f in frags]
    try:
        mgr.refresh()
    except SeglogError as e:
        raise SinkCommitError(
            f"the commit of batch {batch_id} of sink {sink_id} to {mgr.uri} failed ({cause}) "
            f"and the bucket cannot say whether it landed ({e}): its data MAY BE VISIBLE; "
            f"check the sink's ledger ('seglog check {mgr.uri}') before writing it "
            "again") from cause
    if use_ledger:
        landed = ledger_batch(mgr.state, sink_id, sorted({t for t, _ in plan})) >= batch_id
    else:
        referenced = {s.key for p in mgr.state.partitions.values() for s in p.segments}
        landed = all(k in referenced for k in keys)
    if landed:
        logger.warning("the commit of batch %d of sink %s reported a failure (%s), but it "
                       "landed in %s: the batch is published", batch_id, sink_id, cause,
                       mgr.uri)
        return
    raise SinkCommitError(f"the commit of batch {batch_id} of sink {sink_id} to {mgr.uri} "
                          f"failed ({cause}); nothing of it is visible") from cause


def _run_maintenance(mgr: BucketLogManager, sink_id: str, batch_id: int) -> None:
    """Retention and collection (metadata commits, listings and deletes: no data byte
    passes through the driver; merging is ``merge_written``'s). Best effort: the batch
    is published, so a failure is logged and the next interval tries again."""
    try:
        mgr.maintenance.delete_old_segments()
        mgr.maintenance.collect()
    except (SeglogError, OSError) as e:
        # OSError too: a listed commit or object that a concurrent collector (another
        # query's, `seglog maintain`) deleted meanwhile reads as FileNotFoundError, and
        # must not fail a query whose batch is already published.
        logger.warning("sink %s published batch %d to %s, but its maintenance failed (the "
                       "next interval retries): %s", sink_id, batch_id, mgr.uri, e)


def _build(state: BucketState, mgr: BucketLogManager, options: SinkOptions,
           plan: dict[TopicPartition, list[BucketFragment]],
           assumed: dict[str, AssumedTopic],
           sink_id: str, batch_id: int, use_ledger: bool, clock: Clock
           ) -> tuple[Change | None, _Plan | None]:
    """The commit of this batch on ``state``, or None when the ledger holds it."""
    topics_of_plan = sorted({t for t, _ in plan} | set(assumed))
    ledger = ledger_of(state, sink_id, topics_of_plan) if use_ledger else None
    if use_ledger and ledger_batch(state, sink_id, topics_of_plan) >= batch_id:
        return None, None
    topics: dict[str, TopicSpec] = {}
    for topic, wanted in sorted(assumed.items()):
        n, validated = wanted.partitions, wanted.config
        spec = state.topics.get(topic)
        if spec is None:
            require_creatable(options, topic)
            validate_topic_name(topic)
            warn_on_collision(topic, state.topics)
            overrides = parse_overrides(dict(options.topic_config or {}),
                                        base=mgr.default_topic_config)
            spec = topics[topic] = TopicSpec(n, overrides, new_topic_id())
        elif spec.partitions != n:
            raise SinkCommitError(
                f"topic {topic!r} in {mgr.uri} has {spec.partitions} partition(s) but the "
                f"tasks routed rows for {n}: it changed during the batch; batch {batch_id} "
                "is not published")
        if validated is not None and dict(spec.config) != validated:
            # The tasks checked keys, sizes and timestamps against another config (the
            # topic was created or altered meanwhile): what they accepted may break it.
            raise SinkCommitError(
                f"topic {topic!r} in {mgr.uri} changed its config during batch {batch_id} "
                f"({config_differences(validated, spec.config)}; before: what the tasks checked "
                f"the rows against): batch {batch_id} is not published (a restart of the "
                "query runs it again against the new config)")
    parts: dict[str, PartitionChange] = {}
    published = []
    for (topic, partition), frags in sorted(plan.items()):
        ps = state.partition(topic, partition)
        start = end = ps.high_watermark if ps is not None else 0
        entries = []
        for f in frags:
            # Stored offsets are [0, f.offsets): the delta is the base assigned now.
            entries.append(SegmentEntry(f.key, end, end + f.offsets, f.size, f.max_timestamp,
                                        f.index_bytes, f.timeindex_bytes, offset_delta=end,
                                        inline_index=f.inline_index,
                                        inline_timeindex=f.inline_timeindex))
            end += f.offsets
        parts[tp_key(topic, partition)] = PartitionChange(add=tuple(entries))
        published.append(PublishedPartition(topic, partition, start, end,
                                            sum(f.records for f in frags)))
    now = clock.milliseconds()
    maintain = aged = False
    sinks: dict[str, Any] = {}
    if use_ledger:
        last = ledger.get("maintained_ms") if isinstance(ledger, dict) else None
        first = not isinstance(last, int)
        if first:
            # A new sink's interval starts at its first commit: that micro-batch is the
            # query's first (its latency is the query's start-up), and a bucket it just
            # started writing to has nothing to retain or collect yet.
            last = now if options.maintenance_interval_ms > 0 else None
        maintain = last is None or now - last >= options.maintenance_interval_ms
        aged = maintain and not first
        sinks[sink_id] = {"batch_id": batch_id, "timestamp_ms": now,
                          "maintained_ms": now if maintain else last}
    return (Change(topics=topics, partitions=parts, sinks=sinks),
            _Plan(tuple(published), maintain, aged))


def _all(tasks: Iterable[StagedTask]) -> list[BucketFragment]:
    found: list[Any] = [f for m in tasks for f in m.fragments]
    return [f for f in found if isinstance(f, BucketFragment)]


def _unreferenced(state: BucketState, fragments: list[BucketFragment]) -> list[BucketFragment]:
    if not fragments:
        return []
    referenced = {s.key for p in state.partitions.values() for s in p.segments}
    return [f for f in fragments if f.key not in referenced]


# ---------------------------------------------------------------------------- abort
def abort_uploads(mgr: BucketLogManager, tasks: Sequence[StagedTask], batch_id: int) -> int:
    """Delete the uploads of a failed batch that no commit references (a commit whose
    worker died after its conditional PUT is visible: its fragments stay)."""
    if not tasks:
        return 0
    mgr.refresh()
    fragments = _all(tasks)
    dead = _unreferenced(mgr.state, fragments)
    if len(dead) < len(fragments):
        # Spark aborts after a commit() that raised; if its commit landed regardless,
        # the rows ARE visible and writing them again would duplicate them.
        logger.error("batch %d of sink %s is aborted, but its commit landed in %s (%d "
                     "fragment(s) are published): its data IS visible; do not write it "
                     "again", batch_id, tasks[0].sink_id, mgr.uri, len(fragments) - len(dead))
    removed = delete_fragments(mgr.storage, dead)
    logger.info("aborted batch %d: deleted %d uploaded object(s)", batch_id, removed)
    return removed


def bucket_writer(options: SinkOptions, clock: Clock = SYSTEM_CLOCK) -> BucketLogManager:
    """This process's writer of the sink's bucket (``log_writers.bucket_writer``): opened
    once, refreshed by each commit, so a commit reads the commits made since the last
    one, never the whole history."""
    uri = options.bucket_uri
    if uri is None:
        raise SinkCommitError(f"log dirs {redact_uris(options.log_dirs)} are not a bucket URI")
    return log_writers.bucket_writer(uri, clock, options.storage)


def staged_keys(mgr: BucketLogManager, sink_id: str) -> list[str]:
    """Every staging object of a sink (tests and ``seglog check``): one flat listing."""
    prefix = staging_prefix(sink_id)
    return [f"{prefix}/{e.name}" for e in mgr.storage.list_tree(prefix)]
