"""The local backend's publish: staged files appended under the log dirs' lock, once.

The rules every backend follows (attempt selection, replay before publish, one commit
point, cleanup after it) are ``sink_protocol``'s; ``LocalPublication`` is what a log dir
adds to them (an improvement on the sketch in DESIGN.md, explained below).
Executors stage encoded batches (``sink_staging``); every batch carries the sink's
``producerId`` and the micro-batch id in ``producerEpoch``/``baseSequence``.
``commit(messages, batch_id)`` then, under the log dirs' ``.lock``:

1. picks one attempt per task (Spark passes one, but a retried or speculative attempt
   can leave a second set of files: the lowest attempt number wins, deterministically)
   and orders each partition's fragments by task;
2. creates missing topics (``createTopics``) and checks that each topic still has the
   partition count the tasks routed with (key placement depends on it);
3. decides, per log dir, whether the dir already holds this batch, from the data
   (``sink_replay``): a partition holds the sink's micro-batch ``B`` iff its newest batch
   carrying the sink's producerId, below the high watermark other processes see (read
   from ``replication-offset-checkpoint``), has a micro-batch id ``>= B``; the dir holds
   ``B`` iff one of the partitions the batch publishes to there does. The sink's *ledger*
   (``sink_ledger``: one small JSON file per sink and log dir naming the last batch
   published to each partition and its offsets) only says where to look: an entry the
   data confirms costs one header read; without one (no ledger, a damaged one, a crash
   before the checkpoint) the headers are walked from the newest segment back to the
   first batch of the sink. A damaged or missing ledger is rebuilt from what was found;
4. for every partition of a dir that does not hold it: checks that everything above the
   checkpointed high watermark is this sink's own attempt at a micro-batch ``>= B`` (what
   a crashed publish leaves), or another sink's unfinished commit proven by that sink's
   commit intent (below), and stops with ``SinkCommitError``, changing nothing, if any
   batch there is neither (another writer's data, an older micro-batch of the sink:
   possibly published data under a high watermark that went backwards); then truncates
   that tail;
5. writes, per log dir, its *commit intent* (``sink_intent``: the sink, ``B`` and the
   offsets ``[start, end)`` it is about to append to each partition), fsynced; then
   appends the fragments (the Log assigns offsets by rewriting each batch's baseOffset;
   the CRC does not cover it), and notes ``[start, end)``;
6. fsyncs the logs, writes the ledgers atomically, then writes the high-watermark
   checkpoint: THE commit point. Before it, no reader sees a row of the batch; after it,
   every row is visible and a replay of the batch skips the dir;
7. removes its intents and the intents of other commits that explain nothing any more,
   deletes the batch's staging (and what dead attempts and older batches left), runs the
   LogManager's maintenance when due, closes (clean-shutdown marker).

Why intents: a commit that dies after appending (a batch job, or a query that is never
restarted) leaves a tail only its own replay would remove, and a one-shot job has no
replay. The next writer to the partition - another job or query - may remove a batch of
producer ``P``, micro-batch ``B'`` only while ``P``'s intent for exactly ``B'`` and
those offsets is in the dir: the intent exists from before the first append until after
the checkpoint, so it proves "this commit had not finished" (up to one stale window: see
``sink_intent``). ``abort()`` and the staging sweep never touch intents (Spark calls
``abort`` when a commit's worker dies: the tail is still there then).

Why this is exactly-once for a batch replayed after a crash at ANY step: the only
durable effects before step 5 are invisible (staging files, a tail above the high
watermark, a ledger naming offsets above it), and steps 3/4 discard them on replay; the
checkpoint rename is atomic per log dir, and each dir's "done" test looks only at its own
checkpoint, data and intent, so a crash between two dirs' checkpoints is also replayed
dir by dir. The decision never depends on the ledger alone: a ledger that is lost, garbled,
truncated or stale is contradicted or replaced by the batch headers, which carry the
sink's identity; it only bounds how many headers are read. Compared with the sketch, a
whole micro-batch becomes visible atomically (per log dir) instead of partition by
partition. One-shot batch jobs (``use_ledger=False``) have a fresh sink id and nothing to
replay: they skip step 3 but not the tail check.

The sketch's "move large fragments in as whole segments" is not done: a fragment is one
task's rows for one partition, so renaming fragments into segments would make a segment
per task and micro-batch (tiny segments, many files, index churn), and the Log offers no
way to adopt a foreign segment. Fragments are appended in 8 MiB chunks of whole batches
instead: the copy is sequential I/O in the page cache, and the benchmark shows the sink
at the Python writer API's ceiling all the same (``benchmarks/bench_spark_sink.py``).

A test hook kills the process at a named step from ``CRASH_STEPS``
(``logstore.crash_points``: ``SEGLOG_CRASH_AT=<step>[@<batch id>]``, ``SEGLOG_CRASH_ONCE``).

Not thread-safe: one commit at a time per sink (Spark commits micro-batches in order).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from seglog.logstore.errors import (
    SeglogError,
    UnknownTopicOrPartitionError,
)
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_format import TopicPartition
from seglog.logstore.util.clock import SYSTEM_CLOCK, Clock
from seglog.logstore.util.crash_points import CRASH_ENV, crash_point

if TYPE_CHECKING:
    from seglog.logstore.log.log import Log

from . import log_writers, sink_protocol
from .sink_batch import CommitResult, PublishedPartition, SinkBatch
from .sink_intent import (
    CommitIntent,
    IntentRange,
    remove_intent,
    remove_obsolete_intents,
    write_intent,
)
from .sink_ledger import LedgerEntry, LedgerState, SinkLedger
from .sink_local_staging import STAGING_TTL_MS, abort_staging, stage_rows, sweep_staging
from .sink_local_writer import (
    append_fragment,
    ensure_topics,
    fail_publish,
    maybe_run_maintenance,
    open_writer,
)
from .sink_options import SinkOptions
from .sink_protocol import select_attempts
from .sink_replay import UnpublishedTail, check_unpublished_tail, dir_holds, newest_sink_batch
from .sink_staging import (
    StagedFragment,
    StagedTask,
    fragments_of,
    producer_id_of,
    remove_files,
)

logger = logging.getLogger(__name__)

# CRASH_ENV, crash_point, select_attempts, CommitResult: sink_protocol's, named here too
# for the callers and tests that import them from the local sink.
__all__ = ["commit", "abort", "sweep_staging", "STAGING_TTL_MS", "select_attempts",
           "CommitResult",
           "LocalSinkBackend", "LocalPublication", "SinkLedger", "LedgerEntry", "CRASH_ENV",
           "CRASH_STEPS", "crash_point", "open_writer"]

CRASH_STEPS = ("after-lock", "after-truncate", "after-intent", "mid-partition", "mid-publish",
               "after-append", "after-ledger", "after-checkpoint", "after-cleanup",
               "after-commit")


def commit(messages: Sequence[StagedTask | None], batch_id: int, options: SinkOptions, *,
           use_ledger: bool = True, clock: Clock = SYSTEM_CLOCK) -> CommitResult:
    """Publish a micro-batch to local log dirs exactly once (``sink_protocol.commit``).

    ``use_ledger=False`` is for one-shot batch jobs (``df.write``): still all-or-nothing
    through the high-watermark checkpoint, with nothing to replay.
    """
    return sink_protocol.commit(LocalSinkBackend(options, clock), messages, batch_id,
                                use_ledger=use_ledger)


def abort(messages: Iterable[StagedTask | None], batch_id: int, options: SinkOptions, *,
          sink_ids: Iterable[str] = ()) -> int:
    """Remove the staging of a failed batch (``sink_protocol.abort``)."""
    return sink_protocol.abort(LocalSinkBackend(options), messages, batch_id,
                               sink_ids=sink_ids)


class LocalSinkBackend(sink_protocol.StagingBackend):
    """The sink over local log dirs (``sink_protocol.SinkBackend``): staging files in
    the log dirs (``sink_local_staging``), published by ``LocalPublication``."""

    def stage_rows(self) -> sink_protocol.StageRows:
        return stage_rows

    def remove_losers(self, losers: Sequence[StagedTask]) -> int:
        return remove_files(f.path for m in losers for f in m.fragments)

    def commit_empty(self, batch: SinkBatch) -> int:
        return sweep_staging(self.options.log_dirs, batch.sink_id, batch.batch_id,
                             clock=self.clock)

    def begin(self, batch: SinkBatch) -> LocalPublication:
        return LocalPublication(self.options, batch, self.clock)

    def abort(self, tasks: Sequence[StagedTask], batch_id: int, sink_ids: Iterable[str]
              ) -> int:
        return abort_staging(tasks, batch_id, self.options, sink_ids)


class LocalPublication:
    """One micro-batch's publish to local log dirs (``sink_protocol.SinkPublication``):
    steps 2-7 of the module docstring, under the dirs' ``.lock``."""

    def __init__(self, options: SinkOptions, batch: SinkBatch, clock: Clock) -> None:
        self.options = options
        self.batch = batch
        self.clock = clock
        self.plan: dict[TopicPartition, list[StagedFragment]] = {
            tp: fragments_of(StagedFragment, frags, "in a bucket", "local log dirs")
            for tp, frags in batch.plan.items()}
        self.assumed = {t: a.partitions for t, a in batch.topics().items()}
        self.pid = producer_id_of(batch.sink_id)
        self.mgr = open_writer(options, clock=clock)
        self.checkpointing = False
        self.touched: dict[TopicPartition, int] = {}  # partition -> where its publish started
        self.created: list[str] = []
        self.intents: list[Path] = []  # this commit's intent files (sink_intent)
        self.by_dir: dict[Path, list[tuple[TopicPartition, Log]]] = {}
        self.ledgers: dict[Path, SinkLedger] = {}

    def prepare(self) -> None:
        """Create the missing topics; group the partitions by the log dir holding them."""
        crash_point("after-lock", self.batch.batch_id)
        self.created = ensure_topics(self.mgr, self.options, self.assumed)
        for tp in sorted(self.plan):
            log = self.mgr.get_log(*tp)
            self.by_dir.setdefault(log.dir.parent, []).append((tp, log))
        for log_dir in self.by_dir:
            self.ledgers[log_dir] = SinkLedger(log_dir, self.batch.sink_id)

    def replayed(self) -> tuple[TopicPartition, ...]:
        """The partitions of the dirs that hold the batch already (one checkpoint per dir:
        a dir holds all of it or none), from the data with the ledger as a hint."""
        b = self.batch
        skipped: list[TopicPartition] = []
        for log_dir, parts in self.by_dir.items():
            if _dir_holds(self.mgr, log_dir, self.ledgers[log_dir].read(), parts, self.pid,
                          b.batch_id):
                skipped.extend(tp for tp, _ in parts)
        if skipped:
            logger.info("batch %d of sink %s: %d partition(s) already hold it (replay): %s",
                        b.batch_id, b.sink_id, len(skipped), skipped[:10])
        return tuple(skipped)

    def publish(self, todo: Sequence[TopicPartition]) -> tuple[PublishedPartition, ...]:
        """Clear the tails, write the intents, append, fsync, write the ledgers, then the
        high-watermark checkpoint: the commit point."""
        b, batch_id = self.batch, self.batch.batch_id
        wanted = set(todo)
        parts = [(tp, log, self.ledgers[d]) for d, logs in self.by_dir.items()
                 for tp, log in logs if tp in wanted]
        # Every tail is checked before any is removed: a refusal changes nothing.
        tails = [check_unpublished_tail(log, self.pid, batch_id, b.sink_id)
                 for _, log, _ in parts]
        for (tp, log, _), tail in zip(parts, tails, strict=True):
            if tail.batches:
                _drop_tail(tp, log, tail, batch_id)
            self.touched[tp] = log.log_end_offset
        crash_point("after-truncate", batch_id)
        self.intents.extend(_write_intents(parts, self.plan, b.sink_id, batch_id))
        crash_point("after-intent", batch_id)

        published = []
        for i, (tp, log, ledger) in enumerate(parts):
            start = log.log_end_offset
            for j, frag in enumerate(self.plan[tp]):
                append_fragment(self.mgr, frag)
                if i == 0 and j == 0:
                    crash_point("mid-partition", batch_id)  # some fragments in, not all
            end = log.log_end_offset
            records = sum(f.records for f in self.plan[tp])
            published.append(PublishedPartition(tp[0], tp[1], start, end, records))
            ledger.entries[tp] = LedgerEntry(batch_id, start, end)
            if i == 0:
                crash_point("mid-publish", batch_id)
        crash_point("after-append", batch_id)

        for _, log, _ in parts:
            log.flush()
        if b.use_ledger:
            published_dirs = {id(lg) for _, _, lg in parts}
            for ledger in self.ledgers.values():
                if id(ledger) in published_dirs or ledger.dirty:
                    ledger.write()
        crash_point("after-ledger", batch_id)

        self.checkpointing = True  # from here on, never roll back: data may be visible
        self.mgr.checkpoint_high_watermarks()
        crash_point("after-checkpoint", batch_id)
        return tuple(published)

    def fail(self) -> None:
        fail_publish(self.mgr, self.touched, self.intents, rollback=not self.checkpointing,
                     created=self.created)

    def clean_up(self) -> int:
        """The intents that explain nothing now, the batch's staging files, and what dead
        attempts and older batches left."""
        b = self.batch
        _remove_intents(self.intents, self.options, self.mgr)
        removed = remove_files(f.path for m in b.chosen for f in m.fragments)
        removed += sweep_staging(self.options.log_dirs, b.sink_id, b.batch_id,
                                 clock=self.clock)
        crash_point("after-cleanup", b.batch_id)
        return removed

    def maintain(self) -> None:
        maybe_run_maintenance(self.mgr, self.options, self.clock)

    def close(self, *, failed: bool = False) -> None:
        if failed:
            self.mgr.close()  # the batch is committed; closing cleanly is right
            return
        # As a clean close leaves the dirs, but the next commit of this process resumes
        # it (log_writers): its cost stays independent of the segments already in the
        # topic.
        log_writers.pause(self.options.log_dirs, self.mgr)
        crash_point("after-commit", self.batch.batch_id)




def _dir_holds(mgr: LogManager, log_dir: Path, ledger: SinkLedger,
               parts: list[tuple[TopicPartition, Log]], pid: int, batch_id: int) -> bool:
    """Whether ``log_dir`` already holds (visibly) micro-batch ``batch_id`` of the sink,
    from the headers of the partitions it would publish to (and of those the ledger says
    got this batch or a later one: a replay may route rows elsewhere), with the ledger as
    a hint (``sink_replay``). Brings the ledger's entries for the partitions it looked at
    up to date with the data (``ledger.dirty`` when that changed anything)."""
    planned = {tp for tp, _ in parts}
    candidates = list(parts)
    for tp, e in sorted(ledger.entries.items()):
        if tp not in planned and e.batch_id >= batch_id:
            try:
                candidates.append((tp, mgr.get_log(*tp)))
            except UnknownTopicOrPartitionError:
                continue  # deleted since: it proves nothing
    witnesses = []
    for tp, log in candidates:
        w = newest_sink_batch(log, pid, ledger.entries.get(tp))
        witnesses.append(w)
        entry = w.entry()
        if ledger.entries.get(tp) != entry:
            ledger.dirty = True
            if entry is None:
                del ledger.entries[tp]
            else:
                ledger.entries[tp] = entry
        if entry is not None and entry.batch_id >= batch_id:
            break  # one partition settles the whole dir (one checkpoint per dir)
    if ledger.state is LedgerState.MISSING and any(w.batch_id is not None for w in witnesses):
        logger.warning("sink ledger %s is missing, but %s holds batches of this sink: "
                       "rebuilding it from the data", ledger.path, log_dir)
    proof = dir_holds(witnesses, batch_id)
    if proof is None:
        if ledger.state is LedgerState.DAMAGED:
            for w in witnesses:
                if w.unknown_past:
                    logger.warning(
                        "%s-%d in %s: no batch of this sink below the high watermark, and "
                        "offsets below %d were removed; with the ledger %s damaged, the "
                        "data cannot show whether they held batch %d: publishing it",
                        w.topic, w.partition, log_dir, w.start, ledger.path, batch_id)
        return False
    if proof.batch_id is not None and proof.batch_id > batch_id:  # dir_holds: never None
        logger.warning("%s-%d in %s already holds batch %d of this sink, later than %d: "
                       "skipping the dir", proof.topic, proof.partition, log_dir,
                       proof.batch_id, batch_id)
    return True


def _remove_intents(own: list[Path], options: SinkOptions, mgr: LogManager) -> None:
    """After the commit point: remove this commit's intents and the ones that explain
    nothing any more. A failure here must not fail a published batch: an intent left
    behind is stale, and the next commit in the dir removes it."""
    try:
        for path in own:
            remove_intent(path)
        for d in options.log_dirs:
            remove_obsolete_intents(d, mgr)
    except (OSError, SeglogError) as e:
        logger.warning("cannot remove a commit intent (%s): the next commit will", e)


def _drop_tail(tp: TopicPartition, log: Log, tail: UnpublishedTail, batch_id: int) -> None:
    hw = log.high_watermark
    if tail.abandoned:
        whose = "; ".join(f"sink {s!r}'s micro-batch {b}" for s, b in tail.abandoned)
        logger.warning("%s-%d in %s: dropping offsets %d..%d above the high watermark: the "
                       "unfinished commit of %s (its commit intent is still there; that "
                       "writer died before its checkpoint)", tp[0], tp[1], log.dir.parent,
                       hw, log.log_end_offset - 1, whose)
    else:
        logger.warning("%s-%d: dropping offsets %d..%d above the high watermark (this "
                       "sink's unpublished attempt at batch %d)", tp[0], tp[1], hw,
                       log.log_end_offset - 1, batch_id)
    log.truncate_to(hw)


def _write_intents(todo: list[tuple[TopicPartition, Log, SinkLedger]],
                   plan: dict[TopicPartition, list[StagedFragment]], sink_id: str,
                   batch_id: int) -> list[Path]:
    """Write each log dir's commit intent (``sink_intent``): the offsets this commit is
    about to append there, durable before the first append."""
    ranges: dict[Path, list[IntentRange]] = {}
    for tp, log, _ in todo:
        start = log.log_end_offset
        records = sum(f.records for f in plan[tp])  # one offset per record
        ranges.setdefault(log.dir.parent, []).append(
            IntentRange(tp[0], tp[1], start, start + records))
    return [write_intent(d, CommitIntent(sink_id, batch_id, tuple(rs)))
            for d, rs in ranges.items()]
