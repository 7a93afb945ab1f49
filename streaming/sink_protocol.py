"""The exactly-once sink's commit protocol, written once over a ``SinkBackend``.

Every backend (``sink_commit``: local log dirs; ``sink_bucket_commit``: a bucket)
publishes a micro-batch by the same rules, in the same order (``commit``):

1. **Attempts.** One attempt per task (Spark passes one, but a retried or speculative
   attempt can leave a second set of fragments: the lowest attempt number wins,
   deterministically); every task must have left a message, all from one sink and batch.
   Each partition's fragments are published in task order. The losers' staging is
   removed first (``SinkBackend.remove_losers``: only what no publish references).
2. **Empty batches** publish nothing: the backend only tidies (``commit_empty``).
3. **Replay first.** Before anything is written, the sink's *ledger* decides which
   partitions already hold the batch (``SinkPublication.replayed``; one-shot batch jobs,
   ``use_ledger=False``, have a fresh sink id and skip it). A replay is never refused
   for what its staging looks like: its data is already visible.
4. **Publish** the rest with the ledger entry, atomically by the backend's primitive
   (``SinkPublication.publish``: the high-watermark checkpoint rename per log dir; the
   bucket's create-if-absent commit). Nothing of the batch is visible before that point
   and all of it after; a failure before it undoes what it can (``fail``) and leaves
   only invisible state, which the next attempt's step 3/4 discards.
5. **After the commit point** nothing may fail the batch any more: staging is removed
   (``clean_up``), maintenance runs when due (``maintain``), the backend closes.

``abort`` removes a failed batch's staging and nothing else (an abort can follow a
commit whose worker died after the commit point: published data stays).

The backend is picked in one place, by the sink's path or URI
(``sink_destination.sink_destination``, then ``SinkDestination.backend``).

A test hook kills the process at a named step: ``SEGLOG_CRASH_AT=<step>`` or
``<step>@<batch id>`` (each backend names its steps: ``sink_commit.CRASH_STEPS``,
``sink_bucket_commit.BUCKET_CRASH_STEPS``); ``SEGLOG_CRASH_ONCE=<file>`` makes it fire
once only, for Spark workers that keep the variable for their whole life.

Not thread-safe: one commit at a time per sink (Spark commits micro-batches in order).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

from seglog.logstore.records.record_format import TopicPartition
from seglog.logstore.storage.object_store_config import redact_uris
from seglog.logstore.util.clock import SYSTEM_CLOCK, Clock
from seglog.logstore.util.crash_points import CRASH_ENV, CRASH_ONCE_ENV, crash_point

from .errors import SinkCommitError
from .sink_batch import CommitResult, PublishedPartition, SinkBatch

if TYPE_CHECKING:
    import pyarrow as pa

    from .sink_options import SinkColumns, SinkOptions
    from .sink_staging import Fragment, StagedTask
    from .sink_view import TopicView

logger = logging.getLogger(__name__)

__all__ = [
    "SinkBackend",
    "SinkPublication",
    "commit",
    "abort",
    "select_attempts",
    "plan_partitions",
    "crash_point",
    "SinkDestination",
    "StagingBackend",
    "CRASH_ENV",
    "CRASH_ONCE_ENV",
]

# The sink's steps use the engine's one reader of SEGLOG_CRASH_AT (logstore.util.crash_points).


def select_attempts(
    messages: Sequence[StagedTask | None], batch_id: int
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
                "refusing to publish a partial batch"
            )
        if m.batch_id != batch_id:
            raise SinkCommitError(
                f"task {m.task} staged rows for batch {m.batch_id}, not {batch_id}"
            )
        by_task.setdefault(m.task, []).append(m)
    chosen: list[StagedTask] = []
    losers: list[StagedTask] = []
    for task in sorted(by_task):
        attempts = sorted(by_task[task], key=lambda m: (m.attempt, m.attempt_uid))
        chosen.append(attempts[0])
        losers.extend(attempts[1:])
    sinks = {m.sink_id for m in chosen}
    if len(sinks) > 1:
        raise SinkCommitError(
            f"commit messages of batch {batch_id} come from several sinks: {sorted(sinks)}"
        )
    return chosen, losers


def plan_partitions(chosen: Sequence[StagedTask]) -> dict[TopicPartition, list[Fragment]]:
    """Each partition's non-empty fragments, in task order (the deterministic publish
    order)."""
    plan: dict[TopicPartition, list[Fragment]] = {}
    for m in chosen:
        for f in m.fragments:
            if f.records:
                plan.setdefault((f.topic, f.partition), []).append(f)
    return plan


# ---------------------------------------------------------------------------- interface
class SinkPublication(Protocol):
    """One micro-batch's publish on one backend (``SinkBackend.begin``), driven by
    ``commit`` in this order: ``prepare``, ``replayed`` (unless the batch has no
    ledger), ``publish``, then ``clean_up``, ``maintain`` and ``close``; ``fail`` if
    anything up to ``publish`` raised, ``close(failed=True)`` if a later step did."""

    def prepare(self) -> None:
        """Ready the destination before the replay decision (under the backend's lock,
        if it has one)."""
        ...

    def replayed(self) -> tuple[TopicPartition, ...]:
        """The planned partitions that already hold the batch, by the sink's ledger
        (confirmed against the data where the backend can)."""
        ...

    def publish(self, todo: Sequence[TopicPartition]) -> tuple[PublishedPartition, ...] | None:
        """Make ``todo``'s fragments visible with the ledger entry, atomically (the
        backend's commit point); None when another attempt of this batch published it
        meanwhile. A partition of ``todo`` left out of the result held the batch on the
        view the publish decided on (a replay found after ``replayed``)."""
        ...

    def fail(self) -> None:
        """``prepare``/``replayed``/``publish`` raised: undo what is not visible."""
        ...

    def clean_up(self) -> int:
        """After the commit point: remove the batch's staging; returns what it removed."""
        ...

    def maintain(self) -> None:
        """Run the backend's maintenance when it is due."""
        ...

    def close(self, *, failed: bool = False) -> None:
        """Release the writer (``failed``: a step after the commit point raised)."""
        ...


class SinkBackend(Protocol):
    """How a sink stages and publishes on one kind of storage (``sink_commit``: local
    log dirs; ``sink_bucket_commit``: a bucket)."""

    @property
    def location(self) -> str:
        """The sink's log dirs or bucket, as logs may show them (no credentials)."""
        ...

    def stage(
        self,
        columns: SinkColumns,
        batches: Iterable[pa.RecordBatch],
        sink_id: str,
        batch_id: int,
        task: int,
        attempt: int,
    ) -> StagedTask:
        """A task: route, encode and stage its rows; on any error, remove them again."""
        ...

    def remove_losers(self, losers: Sequence[StagedTask]) -> int:
        """Remove the staging of attempts that lost (never what a publish references)."""
        ...

    def commit_empty(self, batch: SinkBatch) -> int:
        """A batch without rows: tidy its staging; returns what it removed."""
        ...

    def begin(self, batch: SinkBatch) -> SinkPublication:
        """Open the writer for ``batch``'s publish."""
        ...

    def abort(self, tasks: Sequence[StagedTask], batch_id: int, sink_ids: Iterable[str]) -> int:
        """Remove a failed batch's staging (of ``tasks`` and of the sinks ``sink_ids``)."""
        ...


StageRows = Callable[
    ["SinkOptions", "SinkColumns", "Iterable[pa.RecordBatch]", str, int, int, int, Clock],
    "StagedTask",
]
"""A backend's task-side staging: ``(options, columns, batches, sink_id, batch_id, task,
attempt, clock) -> StagedTask``."""


class StagingBackend:
    """What both backends share: their options and clock, where they write (as logs may
    show it), and a task's staging through the backend's own ``stage_rows``."""

    def __init__(self, options: SinkOptions, clock: Clock = SYSTEM_CLOCK) -> None:
        self.options = options
        self.clock = clock

    @property
    def location(self) -> str:
        return redact_uris(self.options.log_dirs)

    def stage_rows(self) -> StageRows:
        """The backend's staging function (``sink_local_staging`` or
        ``sink_bucket_staging``)."""
        raise NotImplementedError

    def stage(
        self,
        columns: SinkColumns,
        batches: Iterable[pa.RecordBatch],
        sink_id: str,
        batch_id: int,
        task: int,
        attempt: int,
    ) -> StagedTask:
        return self.stage_rows()(
            self.options, columns, batches, sink_id, batch_id, task, attempt, self.clock
        )


class SinkDestination(Protocol):
    """Where a sink writes, as the driver checks it before any task
    (``sink_destination.sink_destination`` picks one by the path); light to build."""

    def check_destination(self, option: str) -> None:
        """The destination is usable (no request; errors name ``option``, the option
        that gave the path)."""
        ...

    def existing_partitions(self, topic: str) -> int | None:
        """The partition count of an existing ``topic``, None if it does not exist."""
        ...

    def topic_view(self, *, all_topics: bool) -> TopicView | None:
        """The driver's view of the destination's topics to ship to the tasks with the
        writer (no request; None: the tasks look for themselves). ``all_topics``: the
        rows name their topics (a ``topic`` column)."""
        ...

    def backend(self, view: TopicView | None = None) -> SinkBackend:
        """The backend that stages and publishes here (imports its modules); ``view``:
        what ``topic_view`` gave the driver, for a task's staging."""
        ...


# ---------------------------------------------------------------------------- the rules
def commit(
    backend: SinkBackend,
    messages: Sequence[StagedTask | None],
    batch_id: int,
    *,
    use_ledger: bool = True,
) -> CommitResult:
    """Publish a micro-batch exactly once (see the module docstring)."""
    chosen, losers = select_attempts(messages, batch_id)
    plan = plan_partitions(chosen)
    removed = backend.remove_losers(losers)
    if not chosen:
        return CommitResult(batch_id, removed_files=removed)
    batch = SinkBatch(chosen[0].sink_id, batch_id, tuple(chosen), plan, use_ledger)
    if not plan:
        return CommitResult(batch_id, removed_files=removed + backend.commit_empty(batch))

    publication = backend.begin(batch)
    try:
        publication.prepare()
        skipped = publication.replayed() if use_ledger else ()
        held = set(skipped)
        published = publication.publish([tp for tp in sorted(plan) if tp not in held])
    except BaseException:
        publication.fail()
        raise
    if published is None:  # another attempt of this very batch won: a replay
        published, skipped = (), tuple(sorted(plan))
    elif len(published) < len(plan) - len(held):
        # A partition of todo that publish left out held the batch on the view publish
        # decided on, fresher than replayed()'s (a bucket refreshes beside its uploads'
        # LIST): a replay found late, reported as one.
        done = {(p.topic, p.partition) for p in published}
        skipped = tuple(tp for tp in sorted(plan) if tp not in done)
    try:
        removed += publication.clean_up()
        publication.maintain()
    except BaseException:
        publication.close(failed=True)  # the batch is committed all the same
        raise
    publication.close()
    result = CommitResult(batch_id, published, skipped, removed)
    if published:
        logger.info(
            "sink %s committed batch %d to %s: %d records in %d partition(s), %d skipped",
            batch.sink_id,
            batch_id,
            backend.location,
            result.records,
            len(published),
            len(skipped),
        )
    else:
        logger.info(
            "batch %d of sink %s is already in %s (a replay): nothing committed",
            batch_id,
            batch.sink_id,
            backend.location,
        )
    return result


def abort(
    backend: SinkBackend,
    messages: Iterable[StagedTask | None],
    batch_id: int,
    *,
    sink_ids: Iterable[str] = (),
) -> int:
    """Remove the staging of a failed batch (the tasks' and, for a batch job whose tasks
    may have left no message, the sink ids named). Published data stays: Spark also
    aborts after a commit whose worker died past the commit point."""
    return backend.abort([m for m in messages if m is not None], batch_id, sink_ids)
