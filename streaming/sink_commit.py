"""Driver side of the exactly-once sink: publish staged fragments, once.

The protocol (an improvement on the sketch in DESIGN.md, explained below)
-------------------------------------------------------------------------
Executors stage encoded batches (``sink_staging``); every batch carries the sink's
``producerId`` and the micro-batch id in ``producerEpoch``/``baseSequence``.
``commit(messages, batch_id)`` then, under the log dirs' ``.lock``:

1. picks one attempt per task (Spark passes one, but a retried or speculative attempt
   can leave a second set of files: the lowest attempt number wins, deterministically)
   and orders each partition's fragments by task;
2. creates missing topics (``createTopics``) and checks that each topic still has the
   partition count the tasks routed with (key placement depends on it);
3. decides, per partition, whether it already holds this batch: the sink's *ledger*
   (one small JSON file per sink and log dir) names the batch it published last and its
   offsets ``[start, end)``; the partition holds it iff ``end <= high watermark`` (the
   high watermark other processes see, read from ``replication-offset-checkpoint``) and
   the batch at ``start`` carries this sink's producerId and this batch id. That check
   reads one batch header, never old data: commit time does not grow with the log;
4. for every partition that does not hold it: truncates the uncommitted tail left by a
   crashed publish (anything above the checkpointed high watermark: readers never saw
   it), appends the fragments (the Log assigns offsets by rewriting each batch's
   baseOffset; the CRC does not cover it), and notes ``[start, end)``;
5. fsyncs the logs, writes the ledgers atomically, then writes the high-watermark
   checkpoint: THE commit point. Before it, no reader sees a row of the batch; after it,
   every row is visible and a replay of the batch skips the partition;
6. deletes the batch's staging (and what dead attempts and older batches left), runs the
   LogManager's maintenance when due, closes (clean-shutdown marker).

Why this is exactly-once for a batch replayed after a crash at ANY step: the only
durable effects before step 5 are invisible (staging files, a tail above the high
watermark, a ledger naming offsets above it), and step 3/4 discard them on replay; the
checkpoint rename is atomic per log dir, and each partition's "done" test looks only at
its own dir's checkpoint, ledger and data, so a crash between two dirs' checkpoints is
also replayed partition by partition. Compared with the sketch, a whole micro-batch
becomes visible atomically (per log dir) instead of partition by partition, and the
ledger only points at the data, which confirms it (a deleted and re-created topic, or a
lost ledger, cannot make the sink skip a partition wrongly; at worst it republishes).

The sketch's "move large fragments in as whole segments" is not done: a fragment is one
task's rows for one partition, so renaming fragments into segments would make a segment
per task and micro-batch (tiny segments, many files, index churn), and the Log offers no
way to adopt a foreign segment. Fragments are appended in 8 MiB chunks of whole batches
instead: the copy is sequential I/O in the page cache, and the benchmark shows the sink
at the Python writer API's ceiling all the same (``benchmarks/bench_spark_sink.py``).

A test hook kills the process at a named step: ``SEGLOG_CRASH_AT=<step>`` or
``<step>@<batch id>`` with a step from ``CRASH_STEPS`` (``SEGLOG_CRASH_ONCE=<file>``
makes it fire once only, for Spark workers that keep the variable for their whole life).

Not thread-safe: one commit at a time per sink (Spark commits micro-batches in order).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from seglog.logstore.batch_header import iter_batch_headers, read_batch_header
from seglog.logstore.checkpoint_file import write_atomically
from seglog.logstore.clock import SYSTEM_CLOCK, Clock
from seglog.logstore.errors import (
    CorruptRecordError,
    KafkaStorageError,
    LogDirLockedError,
    SeglogError,
    SinkCommitError,
    UnknownTopicOrPartitionError,
)
from seglog.logstore.log_manager import LogManager

from .sink_options import SinkOptions
from .sink_staging import (
    StagedFragment,
    StagedTask,
    batch_id_of,
    producer_id_of,
    remove_files,
    remove_tree,
    sink_state_dir,
    staging_root,
)

logger = logging.getLogger(__name__)

__all__ = ["commit", "abort", "sweep_staging", "select_attempts", "CommitResult",
           "SinkLedger", "CRASH_ENV", "CRASH_STEPS"]

CRASH_ENV = "SEGLOG_CRASH_AT"
CRASH_ONCE_ENV = "SEGLOG_CRASH_ONCE"
"""If set, a path: the crash happens only if this file does not exist yet (it is created)."""
CRASH_STEPS = ("after-lock", "after-truncate", "mid-partition", "mid-publish", "after-append",
               "after-ledger", "after-checkpoint", "after-cleanup", "after-commit")
STAGING_TTL_MS = 24 * 3600 * 1000
"""Staging of *other* sinks untouched for this long belongs to dead jobs and is swept."""
_APPEND_CHUNK = 8 << 20
_MAINTENANCE_FILE = "maintenance.json"

TopicPartition = tuple[str, int]


def crash_point(step: str, batch_id: int | None = None) -> None:
    """Kill this process (SIGKILL, no cleanup) if ``SEGLOG_CRASH_AT`` names ``step``."""
    wanted = os.environ.get(CRASH_ENV)
    if not wanted:
        return
    name, _, at = wanted.partition("@")
    if name != step or (at and batch_id is not None and int(at) != batch_id):
        return
    once = os.environ.get(CRASH_ONCE_ENV)
    if once:  # for processes that inherit the variable for their whole life (Spark's)
        try:
            os.close(os.open(once, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            return
    logger.warning("%s=%s: killing process %d at step %s", CRASH_ENV, wanted, os.getpid(), step)
    os.kill(os.getpid(), signal.SIGKILL)


# ---------------------------------------------------------------------------- ledger
@dataclass(frozen=True, slots=True)
class LedgerEntry:
    batch_id: int
    start: int
    end: int


class SinkLedger:
    """Per sink and log dir: the last batch published to each partition and its offsets.

    File ``<log dir>/.seglog-sink/ledger/<sink id>.json``, written atomically (temp file,
    fsync, rename, dir fsync)::

        {"version": 1, "sink": "<id>", "producerId": 123,
         "partitions": [["topic", 0, <batch id>, <start>, <end>], ...]}

    A hint confirmed by the data (see the module docstring): losing it only costs a
    republish of the batch in flight. Not thread-safe."""

    VERSION = 1

    def __init__(self, log_dir: Path, sink_id: str) -> None:
        self.path = sink_state_dir(log_dir) / "ledger" / (staging_root(log_dir, sink_id).name
                                                          + ".json")
        self.sink_id = sink_id
        self.entries: dict[TopicPartition, LedgerEntry] = {}

    def read(self) -> SinkLedger:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return self
        except OSError as e:
            raise KafkaStorageError(f"cannot read sink ledger {self.path}: {e}") from e
        try:
            doc = json.loads(raw)
            if doc.get("version") != self.VERSION:
                raise ValueError(f"unknown version {doc.get('version')!r}")
            for topic, partition, batch, start, end in doc["partitions"]:
                self.entries[(str(topic), int(partition))] = LedgerEntry(
                    int(batch), int(start), int(end))
        except (ValueError, KeyError, TypeError) as e:
            # A hint only: without it the batch in flight is republished, never skipped.
            logger.error("sink ledger %s is unreadable (%s); ignoring it", self.path, e)
            self.entries = {}
        return self

    def write(self) -> None:
        doc = {"version": self.VERSION, "sink": self.sink_id,
               "producerId": producer_id_of(self.sink_id),
               "partitions": [[t, p, e.batch_id, e.start, e.end]
                              for (t, p), e in sorted(self.entries.items())]}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(self.path, json.dumps(doc).encode())


# ---------------------------------------------------------------------------- selection
def select_attempts(messages: Sequence[StagedTask | None], batch_id: int
                    ) -> tuple[list[StagedTask], list[StagedTask]]:
    """(one attempt per task, ordered by task; the other attempts).

    Raises SinkCommitError for a missing message (a task without a commit message cannot
    be published: committing without it would lose its rows) or one from another batch.
    """
    by_task: dict[int, list[StagedTask]] = {}
    for i, m in enumerate(messages):
        if m is None:
            raise SinkCommitError(
                f"task {i} of batch {batch_id} left no commit message (it failed); "
                "refusing to publish a partial batch")
        if m.batch_id != batch_id:
            raise SinkCommitError(
                f"task {m.task} staged rows for batch {m.batch_id}, not {batch_id}")
        by_task.setdefault(m.task, []).append(m)
    chosen, losers = [], []
    for task in sorted(by_task):
        attempts = sorted(by_task[task], key=lambda m: (m.attempt, m.attempt_uid))
        chosen.append(attempts[0])
        losers.extend(attempts[1:])
    sinks = {m.sink_id for m in chosen}
    if len(sinks) > 1:
        raise SinkCommitError(f"commit messages of batch {batch_id} come from several sinks: "
                              f"{sorted(sinks)}")
    return chosen, losers


@dataclass(frozen=True, slots=True)
class PublishedPartition:
    topic: str
    partition: int
    start: int
    end: int  # exclusive
    records: int


@dataclass(frozen=True, slots=True)
class CommitResult:
    """What a commit did: the partitions it published, the ones that already held the
    batch (a replay), the staging files it removed."""

    batch_id: int
    published: tuple[PublishedPartition, ...] = ()
    skipped: tuple[TopicPartition, ...] = ()
    removed_files: int = 0

    @property
    def records(self) -> int:
        return sum(p.records for p in self.published)


# ---------------------------------------------------------------------------- commit
def commit(messages: Sequence[StagedTask | None], batch_id: int, options: SinkOptions, *,
           use_ledger: bool = True, clock: Clock = SYSTEM_CLOCK) -> CommitResult:
    """Publish a micro-batch exactly once (see the module docstring).

    ``use_ledger=False`` is for one-shot batch jobs (``df.write``): still all-or-nothing
    through the high-watermark checkpoint, with nothing to replay.
    """
    chosen, losers = select_attempts(messages, batch_id)
    plan = _plan(chosen)
    sink_id = chosen[0].sink_id if chosen else None
    removed = remove_files(f.path for m in losers for f in m.fragments)
    if not plan:
        if sink_id is not None:
            removed += sweep_staging(options.log_dirs, sink_id, batch_id, clock=clock)
        return CommitResult(batch_id, removed_files=removed)
    assumed = _assumed_partition_counts(chosen)
    pid = producer_id_of(sink_id)

    mgr = open_writer(options, clock=clock)
    checkpointing = False
    touched: dict[TopicPartition, int] = {}  # partition -> where its publish started
    try:
        crash_point("after-lock", batch_id)
        _ensure_topics(mgr, options, assumed)
        ledgers: dict[Path, SinkLedger] = {}
        todo, skipped = [], []
        for tp in sorted(plan):
            log = mgr.get_log(*tp)
            log_dir = log.dir.parent
            ledger = ledgers.get(log_dir)
            if ledger is None:
                ledger = ledgers[log_dir] = (SinkLedger(log_dir, sink_id).read() if use_ledger
                                             else SinkLedger(log_dir, sink_id))
            if _holds(log, ledger.entries.get(tp), pid, batch_id):
                skipped.append(tp)
            else:
                todo.append((tp, log, ledger))
        if skipped:
            logger.info("batch %d of sink %s: %d partition(s) already hold it (replay): %s",
                        batch_id, sink_id, len(skipped), skipped[:10])

        for tp, log, _ in todo:
            hw = log.high_watermark
            if log.log_end_offset > hw:
                logger.warning("%s-%d: dropping offsets %d..%d above the high watermark "
                               "(an unpublished tail left by a crash)", tp[0], tp[1], hw,
                               log.log_end_offset - 1)
                log.truncate_to(hw)
            touched[tp] = log.log_end_offset
        crash_point("after-truncate", batch_id)

        published = []
        for i, (tp, log, ledger) in enumerate(todo):
            start = log.log_end_offset
            for j, frag in enumerate(plan[tp]):
                _append_fragment(mgr, frag)
                if i == 0 and j == 0:
                    crash_point("mid-partition", batch_id)  # some fragments in, not all
            end = log.log_end_offset
            records = sum(f.records for f in plan[tp])
            published.append(PublishedPartition(tp[0], tp[1], start, end, records))
            ledger.entries[tp] = LedgerEntry(batch_id, start, end)
            if i == 0:
                crash_point("mid-publish", batch_id)
        crash_point("after-append", batch_id)

        for _, log, _ in todo:
            log.flush()
        if use_ledger:
            for ledger in {id(lg): lg for _, _, lg in todo}.values():
                ledger.write()
        crash_point("after-ledger", batch_id)

        checkpointing = True  # from here on, never roll back: data may be visible
        mgr.checkpoint_high_watermarks()
        crash_point("after-checkpoint", batch_id)
    except BaseException:
        _fail(mgr, touched, rollback=not checkpointing)
        raise

    try:
        files = [f.path for m in chosen for f in m.fragments]
        removed += remove_files(files)
        removed += sweep_staging(options.log_dirs, sink_id, batch_id, clock=clock)
        crash_point("after-cleanup", batch_id)
        _maybe_run_maintenance(mgr, options, clock)
    except BaseException:
        mgr.close()  # the batch is committed; closing cleanly is right
        raise
    mgr.close()
    crash_point("after-commit", batch_id)
    result = CommitResult(batch_id, tuple(published), tuple(skipped), removed)
    logger.info("sink %s committed batch %d: %d records in %d partition(s), %d skipped",
                sink_id, batch_id, result.records, len(published), len(skipped))
    return result


def open_writer(options: SinkOptions, *, clock: Clock = SYSTEM_CLOCK) -> LogManager:
    """A writer LogManager of the sink's log dirs, waiting up to ``lockTimeoutMs`` for
    another writer to release a ``.lock``."""
    deadline = time.monotonic() + options.lock_timeout_ms / 1000
    pause = 0.02
    while True:
        try:
            return LogManager(list(options.log_dirs), clock=clock)
        except LogDirLockedError as e:
            if time.monotonic() + pause > deadline:
                raise LogDirLockedError(
                    f"{e}; the seglog sink waited {options.lock_timeout_ms} ms for it "
                    "(option 'lockTimeoutMs')") from None
            time.sleep(pause)
            pause = min(pause * 2, 0.5)


def _plan(chosen: list[StagedTask]) -> dict[TopicPartition, list[StagedFragment]]:
    plan: dict[TopicPartition, list[StagedFragment]] = {}
    for m in chosen:  # ordered by task: the deterministic publish order
        for f in m.fragments:
            if f.records:
                plan.setdefault((f.topic, f.partition), []).append(f)
    return plan


def _assumed_partition_counts(chosen: list[StagedTask]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for m in chosen:
        for topic, n in m.topic_partitions:
            if counts.setdefault(topic, n) != n:
                raise SinkCommitError(
                    f"tasks routed rows of topic {topic!r} with different partition counts "
                    f"({counts[topic]} and {n}): the topic changed during the batch")
    return counts


def _ensure_topics(mgr: LogManager, options: SinkOptions, assumed: dict[str, int]) -> None:
    for topic, n in sorted(assumed.items()):
        try:
            actual = len(mgr.partitions(topic))
        except UnknownTopicOrPartitionError:
            if not options.create_topics:
                raise UnknownTopicOrPartitionError(
                    f"topic {topic!r} does not exist and the option 'createTopics' is "
                    "false") from None
            mgr.create_topic(topic, n, dict(options.topic_config or {}))
            logger.info("created topic %s with %d partition(s)", topic, n)
            continue
        if actual != n:
            raise SinkCommitError(
                f"topic {topic!r} has {actual} partition(s) but the tasks routed rows for "
                f"{n}: it changed during the batch; the batch is not published")


def _holds(log, entry: LedgerEntry | None, pid: int, batch_id: int) -> bool:
    """Whether ``log`` already holds (visibly) the sink's batch ``batch_id``."""
    if entry is None or entry.batch_id < batch_id:
        return False
    if entry.end > log.high_watermark:
        return False  # published but not checkpointed: invisible, to be redone
    if entry.batch_id > batch_id:
        logger.warning("%s-%d already holds batch %d of this sink, later than %d: "
                       "skipping", log.topic, log.partition, entry.batch_id, batch_id)
        return True
    if entry.start < log.log_start_offset:
        return True  # retention removed it; only committed data is ever removed
    fetch = log.read(entry.start, max_offset=entry.end, max_bytes=1)
    h = read_batch_header(fetch.records) if fetch.records else None
    if (h is not None and h.base_offset == entry.start and h.producer_id == pid
            and batch_id_of(h.producer_epoch, h.base_sequence) == batch_id):
        return True
    logger.warning("%s-%d: the sink ledger says batch %d is at offset %d, but the data "
                   "there is not this sink's: republishing", log.topic, log.partition,
                   batch_id, entry.start)
    return False


def _append_fragment(mgr: LogManager, frag: StagedFragment) -> None:
    """Append a staging file in chunks of whole batches (bounded memory)."""
    try:
        f = open(frag.path, "rb")  # noqa: SIM115
    except FileNotFoundError:
        raise SinkCommitError(
            f"staging file {frag.path} of {frag.topic}-{frag.partition} is missing: was the "
            "batch already cleaned up, or the log dir not shared by every executor?") from None
    with f:
        pending = b""
        total = 0
        while True:
            chunk = f.read(_APPEND_CHUNK)
            buf = pending + chunk if pending else chunk
            end = 0
            for h in iter_batch_headers(buf):
                end = h.end_position
            if end:
                mgr.append(frag.topic, frag.partition, memoryview(buf)[:end])
                total += end
            pending = buf[end:]
            if not chunk:
                break
    if pending or total != frag.size:
        raise CorruptRecordError(
            f"staging file {frag.path} holds {total} bytes of whole batches, the task "
            f"wrote {frag.size}: it is truncated or corrupt")


def _fail(mgr: LogManager, touched: dict[TopicPartition, int], *, rollback: bool) -> None:
    """Error path: undo what was appended (nothing of it is visible yet) and close; if the
    checkpoint step had started, close without claiming a clean shutdown instead."""
    if not rollback:
        mgr.__exit__(SeglogError, None, None)
        return
    try:
        for (topic, partition), start in touched.items():
            mgr.get_log(topic, partition).truncate_to(start)
        mgr.close()
    except BaseException:
        logger.exception("cannot roll back a failed publish; the next commit will")
        mgr.__exit__(SeglogError, None, None)


# ---------------------------------------------------------------------------- abort/sweep
def abort(messages: Iterable[StagedTask | None], batch_id: int, options: SinkOptions, *,
          sink_ids: Iterable[str] = ()) -> int:
    """Remove the staging of a failed batch (no lock needed: staging is private), for the
    sinks named by the messages and ``sink_ids``. Returns the number of files removed."""
    removed = 0
    sinks = set(sink_ids)
    for m in messages:
        if m is None:
            continue
        sinks.add(m.sink_id)
        removed += remove_files(f.path for f in m.fragments)
    for sink_id in sinks:
        for d in options.log_dirs:
            batch_dir = staging_root(d, sink_id) / str(batch_id)
            removed += _count_files(batch_dir)
            remove_tree(batch_dir)
    logger.info("aborted batch %d: removed %d staging file(s)", batch_id, removed)
    return removed


def sweep_staging(log_dirs: Iterable[str], sink_id: str, up_to_batch: int, *,
                  clock: Clock = SYSTEM_CLOCK, ttl_ms: int = STAGING_TTL_MS) -> int:
    """Remove the sink's staging of batches ``<= up_to_batch`` (dead attempts, crashed
    runs) and other sinks' staging untouched for ``ttl_ms``. Returns files removed."""
    removed = 0
    now_s = clock.milliseconds() / 1000
    for d in log_dirs:
        own = staging_root(d, sink_id)
        for child in _children(own):
            if child.name.isdigit() and int(child.name) <= up_to_batch:
                removed += _count_files(child)
                remove_tree(child)
        for other in _children(own.parent):
            if other.name == own.name:
                continue
            for child in _children(other):
                try:
                    age_s = now_s - child.stat().st_mtime
                except FileNotFoundError:  # swept by its own sink meanwhile
                    continue
                if age_s * 1000 > ttl_ms:
                    removed += _count_files(child)
                    remove_tree(child)
            if not _children(other):
                try:
                    other.rmdir()
                except OSError as e:  # a task of that sink may be staging right now
                    logger.debug("keeping %s: %s", other, e)
    return removed


def _children(d: Path) -> list[Path]:
    try:
        return [Path(e.path) for e in os.scandir(d)]
    except (FileNotFoundError, NotADirectoryError):
        return []


def _count_files(d: Path) -> int:
    return sum(1 for c in _children(d) if c.is_file())


# ---------------------------------------------------------------------------- maintenance
def _maybe_run_maintenance(mgr: LogManager, options: SinkOptions, clock: Clock) -> bool:
    """Run the LogManager's maintenance if ``maintenanceIntervalMs`` has passed since the
    last run by any sink on these log dirs (the time is kept in the first log dir)."""
    state = sink_state_dir(options.log_dirs[0]) / _MAINTENANCE_FILE
    now = clock.milliseconds()
    try:
        last = int(json.loads(state.read_bytes())["last_run_ms"])
    except FileNotFoundError:
        last = None
    except (OSError, ValueError, KeyError, TypeError) as e:
        logger.warning("cannot read %s (%s): running maintenance now", state, e)
        last = None
    if last is not None and now - last < options.maintenance_interval_ms:
        return False
    for run in mgr.run_maintenance():
        if not run.ok:
            logger.error("maintenance task %s failed: %s", run.name, run.error)
    state.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(state, json.dumps({"last_run_ms": now}).encode())
    return True

