"""``BucketLogs``: the set of commit logs of one bucket log dir, and the routing of each
commit to the one log it belongs to (docs/object-storage.md, "Per-topic commit logs").

- The **catalog log** (``_seglog/log/``, the log every bucket had before) maps topic names
  to the ids of their own logs (``BucketState.topic_logs``), and holds whole the topics
  created before per-topic logs ("legacy topics") and their sinks' ledgers, as before.
- Each topic created since has **its own log** under ``_seglog/topics/<log id>/`` (the
  same ``CommitLog`` protocol, ``bucket_state.topic_layout``): version 0 creates the topic
  (and may already hold a sink's first segments and ledger), later versions change only
  that topic, a tombstone (``topics: {name: null}``) ends it. No commit follows a
  tombstone: a writer that finds one raises UnknownTopicOrPartitionError.

``state`` is the merged view every helper reads: the catalog's topics plus each named
log's topic (a log whose newest commit is a tombstone is a deleted topic whatever the
catalog says), cached and rebuilt only when a log's state changed. ``commit(operation,
build)`` builds on that view, then sends the change to its log:

- one topic in its own log (an append, a merge, retention of that topic, a sink's
  micro-batch part, an alter, a tombstone): that log only, no catalog request, so writers
  of different topics never race each other; a delete then removes the name from the
  catalog (a crash between leaves a tombstoned log the catalog still names: read as
  deleted; the next create or delete of the name finishes the catalog step);
- new topics: version 0 of each new log, then ONE catalog commit naming them (the
  create's visibility point); a loser of the catalog race leaves an unnamed log, which
  the collector deletes after the orphan grace;
- legacy topics and catalog-only changes: the catalog, as before.

A change spanning several logs is refused (ValueError, a caller's bug): callers commit per
group of ``bucket_view.topic_groups`` (each topic in its own log alone, the legacy topics together),
in that order. What is atomic is then one topic (all its partitions at once); the
multi-topic callers (``append_many``, the pipeline, retention, the sink) say what a
failure part-way leaves.

Over 500 lines: one class routes every kind of commit (one topic's, a create, a delete,
the catalog's, one racing a move of ``bucket_upgrade``) over one cached view and lock; the
natural split (the two-step create and delete out of the router) is left to the
rework of the commit loop for writers of one topic, which edits this module meanwhile.

Thread-safety: thread-safe (``_lock`` guards the logs opened and the cached view; each
``CommitLog`` serializes its own commits).
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Any

from ..errors import (
    CommitConflictError,
    CommitOutcomeUnknownError,
    KafkaStorageError,
    SeglogError,
    UnknownTopicOrPartitionError,
)
from ..storage.storage import Storage
from ..util.clock import SYSTEM_CLOCK, Clock
from ..util.crash_points import crash_point
from ..util.shared_pools import joined, settle, submit_all
from .bucket_commit_log import Attempt, Change, CommitLog
from .bucket_state import NO_VERSION, BucketState, topic_layout
from .bucket_view import change_topics, merge, topic_of, with_version

logger = logging.getLogger(__name__)

CREATE_CRASH_STEPS = ("create-after-topic-log", "delete-after-tombstone")
"""Crash steps between the two commits of a create (the new log's version 0 written, the
catalog not yet naming it) and of a delete (the tombstone written, the name still in the
catalog)."""
OPEN_THREADS = 16
"""The most topic logs opened or refreshed at once."""

_Route = tuple[str, ...]
"""("catalog",) | ("topic", name, log id) | ("create", *names)."""


class _ThisThread(threading.local):
    """What the calling thread's last ``commit`` did: the creates it tried, and the log
    and state of a commit whose snapshot the caller may still owe (``snapshot_if_due``)."""

    def __init__(self) -> None:
        self.count = 0
        self.due: tuple[CommitLog, BucketState | None] | None = None
        self.shifts: Mapping[str, int] = {}


class _Reroute(Exception):  # noqa: N818 - a signal, never raised to a caller
    """A rebuild on a newer state belongs to another log: start over from the view."""


class BucketLogs:
    """The catalog log and the topic logs of one bucket log dir; see the module
    docstring. ``catalog``: the catalog's ``CommitLog`` (its settings, such as
    ``max_attempts``, are every topic log's)."""

    def __init__(
        self,
        storage: Storage,
        *,
        clock: Clock = SYSTEM_CLOCK,
        catalog: CommitLog | None = None,
        topic_logs: bool = True,
    ) -> None:
        self.storage = storage
        self.topic_logs = topic_logs
        """False: new topics are created in the catalog, as before per-topic logs (for
        a bucket that seglog versions before them must still read: docs/upgrading.md)."""
        self.clock = clock
        self.catalog = catalog or CommitLog(storage, clock=clock)
        self._lock = threading.RLock()  # guards _logs, _view, _inputs, _view_version
        self._logs: dict[str, CommitLog] = {}  # log id -> its log, opened
        self._view = BucketState()
        self._inputs: tuple[object, ...] = ()
        self._view_version = NO_VERSION
        self._attempts = _ThisThread()
        self._open_named(self.catalog.state)

    @property
    def uri(self) -> str:
        return self.storage.uri

    @property
    def writer_id(self) -> str:
        return self.catalog.writer_id

    @property
    def last_attempts(self) -> int:
        """The creates the calling thread's last ``commit`` tried, over every log it
        wrote (1: it won the first; 0: nothing to do)."""
        return self._attempts.count

    @property
    def last_shifts(self) -> Mapping[str, int]:
        """``CommitLog.last_shifts`` of the log the calling thread's last ``commit``
        wrote."""
        return self._attempts.shifts

    # -- the logs --------------------------------------------------------------------

    def topic_log(self, topic: str) -> CommitLog | None:
        """The open log of ``topic`` if the catalog names one (None: a legacy topic or
        none)."""
        log_id = self.catalog.state.topic_logs.get(topic)
        if log_id is None:
            return None
        with self._lock:
            return self._logs.get(log_id)

    def logs(self) -> dict[str, CommitLog]:
        """Every topic log opened: log id -> log."""
        with self._lock:
            return dict(self._logs)

    def flush_snapshots(self) -> None:
        """Wait for the snapshots the commits of this process started, in every log
        (``CommitLog.flush_snapshots``)."""
        for log in [self.catalog, *self.logs().values()]:
            log.flush_snapshots()

    def adopt(self, logs: dict[str, CommitLog]) -> None:
        """Take logs this process wrote and the catalog now names (``bucket_upgrade``'s
        moves) as open, without reading them again."""
        with self._lock:
            for log_id, log in logs.items():
                self._logs.setdefault(log_id, log)

    def _open_named(self, catalog: BucketState) -> None:
        """Open the logs ``catalog`` names that are not open yet (at once: one round
        trip however many), and forget the logs it no longer names."""
        named = set(catalog.topic_logs.values())
        with self._lock:
            missing = sorted(named - set(self._logs))
            for gone in set(self._logs) - named:
                del self._logs[gone]
        if not missing:
            return
        opened = _parallel(lambda log_id: self.catalog.sibling(topic_layout(log_id)), missing)
        with self._lock:
            for log_id, log in zip(missing, opened, strict=True):
                self._logs.setdefault(log_id, log)

    # -- reading ---------------------------------------------------------------------

    @property
    def state(self) -> BucketState:
        """The merged view of every log (cached; rebuilt when a log's state changed)."""
        catalog = self.catalog.state
        with self._lock:
            logs = [
                (log_id, self._logs[log_id].state)
                for log_id in sorted(set(catalog.topic_logs.values()) & set(self._logs))
            ]
            inputs: tuple[object, ...] = (catalog, *(s for _, s in logs))
            if len(inputs) == len(self._inputs) and all(
                a is b for a, b in zip(inputs, self._inputs, strict=True)
            ):
                return self._view
            view = merge(catalog, dict(logs))
            if catalog.topic_logs:
                # Its own counter: readers (``BucketLog``) take a higher version as newer,
                # and a deleted topic's log leaves the sum of the logs' versions.
                version = max(
                    self._view_version + 1, catalog.version + sum(s.version + 1 for _, s in logs)
                )
                view = with_version(view, version)
            self._view, self._inputs, self._view_version = view, inputs, view.version
            return view

    def refresh(self, topics: Iterable[str] | None = None) -> bool:
        """Fold the commits other processes made since; True if any. ``topics``: only
        the logs of those topics (one LIST each, at once; the catalog is not asked, so a
        topic deleted and created again is seen by the next full refresh); None: the
        catalog and every topic log at once (one round trip; one more to open the logs
        of topics created meanwhile)."""
        if topics is not None:
            named = [self.topic_log(t) for t in sorted(set(topics))]
            changed = False
            if any(log is None for log in named):  # a legacy topic, or one not known yet
                changed = self.catalog.refresh()
                self._open_named(self.catalog.state)
                named = [self.topic_log(t) for t in sorted(set(topics))]
            own = [log for log in named if log is not None]
            return any(_parallel(lambda log: log.refresh(), own)) or changed
        # The catalog and every open topic log at once: one round trip when nothing
        # changed; logs the catalog newly names are opened after (a second one).
        every: list[CommitLog] = [self.catalog, *self.logs().values()]
        changed = any(_parallel(lambda log: log.refresh(), every))
        self._open_named(self.catalog.state)
        return changed

    def view_age_ms(self) -> int:
        """How long ago the oldest of the open logs' views was LISTed
        (``CommitLog.view_age_ms``): a caller about to commit may skip a refresh while
        every log it could write was looked at since it started."""
        every: list[CommitLog] = [self.catalog, *self.logs().values()]
        return max(log.view_age_ms() for log in every)

    def snapshot_if_due(self, state: BucketState) -> None:
        """After a ``commit(..., snapshot=False)`` of this thread: the snapshot of the
        log it wrote, if its new version is due one (``state``, the merged view, cannot
        say which log that was)."""
        due = self._attempts.due
        self._attempts.due = None
        if due is not None and due[1] is not None:
            due[0].snapshot_if_due(due[1])

    # -- writing ---------------------------------------------------------------------

    def commit(
        self,
        operation: str,
        build: Callable[[BucketState], Change | None],
        *,
        snapshot: bool = True,
    ) -> BucketState | None:
        """``commit_steps`` with ``build`` making each attempt's change: the merged view
        after it, or None when ``build`` said there is nothing to do. For callers whose
        ``build`` is their own module's private business (a caller above the engine
        drives ``commit_steps``)."""
        attempt = Attempt()
        for view in self.commit_steps(operation, attempt, snapshot=snapshot):
            with attempt:
                attempt.change = build(view)
        return attempt.result

    def commit_steps(
        self, operation: str, attempt: Attempt, *, snapshot: bool = True
    ) -> Iterator[BucketState]:
        """Make a change the next version of the log it belongs to (see the module
        docstring), the caller building it (``Attempt``): yields the merged view to build
        on, and again (a newer view) after a lost race; ``attempt.result`` is the merged
        view after it, or None when the caller built nothing to do."""
        attempt.result = None
        self._attempts.count = 0
        self._attempts.due = None
        self._attempts.shifts = {}
        fresh = False
        for _ in range(self.catalog.max_attempts):
            view = self.state
            yield view
            try:
                change = attempt.outcome()
            except KafkaStorageError:
                raise
            except SeglogError:
                # A check failed on a view this process cached: only a view just read
                # from the bucket can say no.
                if fresh or not self.refresh():
                    raise
                fresh = True
                continue
            if change is None:
                return
            route = self._route(view, change)
            try:
                if route[0] == "topic":
                    done = yield from self._topic_steps(route, operation, attempt, change, snapshot)
                elif route[0] == "create":
                    done = self._create(route[1:], operation, view, change)
                else:
                    done = yield from self._catalog_steps(operation, attempt, change, snapshot)
            except _Reroute:
                self.refresh()
                fresh = True
                continue
            if done:
                attempt.result = self.state
            return
        raise CommitConflictError(
            f"{self.uri}: could not commit {operation}: the topics it changes moved to "
            f"other logs {self.catalog.max_attempts} times (created or deleted meanwhile); "
            f"nothing of this {operation} is visible"
        )

    def _route(self, view: BucketState, change: Change) -> _Route:
        topics = change_topics(change)
        new = sorted(t for t in topics if t not in view.topics)
        own = sorted(t for t in topics if t in view.topics and t in view.topic_logs)
        legacy = sorted(t for t in topics if t in view.topics and t not in view.topic_logs)
        if new and not own and not self.topic_logs:
            return ("catalog",)
        if new and not own and not legacy:
            if any(change.topics.get(t) is None for t in new):
                raise ValueError(
                    f"{self.uri}: a change names topics {new} it neither holds nor creates"
                )
            return ("create", *new)
        if len(own) == 1 and not new and not legacy:
            return ("topic", own[0], view.topic_logs[own[0]])
        if not own and not new:
            return ("catalog",)
        raise ValueError(
            f"{self.uri}: one commit cannot span the logs of topics {sorted(topics)} "
            f"(each topic in its own log is committed alone: bucket_view.topic_groups)"
        )

    def _count(self, log: CommitLog) -> None:
        self._attempts.count += log.last_attempts
        self._attempts.shifts = log.last_shifts

    def _topic_steps(
        self,
        route: _Route,
        operation: str,
        attempt: Attempt,
        change: Change,
        snapshot: bool,
    ) -> Generator[BucketState, None, bool]:
        """``change`` (built on the view) committed to the one topic log of ``route``;
        after a lost race the caller builds again on the view with the winner's state
        (``attempt``), its change checked to still belong to that log."""
        name, log_id = route[1], route[2]
        with self._lock:
            log = self._logs[log_id]
        built_on = log.state
        first: list[Change] = [change]
        steps = Attempt()
        try:
            for state in log.commit_steps(operation, steps, snapshot=snapshot):
                with steps:
                    steps.change = yield from self._topic_change(
                        route, log, state, built_on, first, attempt
                    )
            done = steps.result
        finally:
            self._count(log)
        self._attempts.due = (log, done)
        if done is not None and name not in done.topics:
            crash_point("delete-after-tombstone")
            self.finish_delete(name)
        return done is not None

    def _topic_change(
        self,
        route: _Route,
        log: CommitLog,
        state: BucketState,
        built_on: BucketState,
        first: list[Change],
        attempt: Attempt,
    ) -> Generator[BucketState, None, Change | None]:
        """The change for the topic log's ``state``: ``first`` (the change built on the
        view) while the log has not moved, else the caller's (``attempt``) on the view
        with ``state``."""
        name, log_id = route[1], route[2]
        if name not in state.topics:
            # The caller's own check names what it missed (a partition, say); a build
            # that creates the topic anew (a sink) starts over on a new log; one that
            # does neither gets the tombstone's error. Never a commit after it.
            first.clear()
            gone = self._view_with(log_id, state)
            yield gone
            rebuilt = attempt.outcome()
            if rebuilt is not None and self._route(gone, rebuilt)[0] != "topic":
                raise _Reroute()
            raise UnknownTopicOrPartitionError(
                f"topic {name!r} in {self.uri} was deleted (its log "
                f"{log.uri} ends with a tombstone)"
            )
        if first and state is built_on:
            return first.pop()
        first.clear()
        yield self._view_with(log_id, state)
        rebuilt = attempt.outcome()
        if rebuilt is not None and self._route(self._view_with(log_id, state), rebuilt) != route:
            raise _Reroute()
        return rebuilt

    def finish_delete(self, name: str) -> bool:
        """Remove ``name`` from the catalog if it names a log that ends with a tombstone
        (the second step of a delete; a no-op otherwise). True if it did."""

        def catalog_build(state: BucketState) -> Change | None:
            log_id = state.topic_logs.get(name)
            if log_id is None:
                return None
            self._open_named(state)
            with self._lock:
                log = self._logs.get(log_id)
            if log is None or name in log.state.topics:
                return None
            return Change(topic_logs={name: None})

        steps = Attempt()
        for state in self.catalog.commit_steps("delete_topic", steps):
            with steps:
                steps.change = catalog_build(state)
        return steps.result is not None

    def _catalog_steps(
        self,
        operation: str,
        attempt: Attempt,
        change: Change,
        snapshot: bool,
    ) -> Generator[BucketState, None, bool]:
        """``change`` (built on the view) committed to the catalog; after a lost race the
        caller builds again on the merged view (``attempt``), its change checked to
        still belong to the catalog."""
        built_on = self.catalog.state
        # Never blind in the catalog: a blind append is commit format 3, which the seglog
        # versions a catalog kept for them (topic_logs=False) cannot read, and a stale
        # writer's blind append of a legacy topic that was just moved would leave a
        # commit of it in the catalog after the move (folded as nothing, but there).
        first: list[Change] = [replace(change, at_end=False)]
        steps = Attempt()
        try:
            for state in self.catalog.commit_steps(operation, steps, snapshot=snapshot):
                with steps:
                    if first and state is built_on:
                        steps.change = first.pop()
                        continue
                    first.clear()
                    self._open_named(state)
                    merged = self._view_with(None, state)
                    yield merged
                    rebuilt = attempt.outcome()
                    if rebuilt is not None and _route_after_move(
                        self, operation, merged, rebuilt
                    ) != ("catalog",):
                        raise _Reroute()
                    steps.change = None if rebuilt is None else replace(rebuilt, at_end=False)
            done = steps.result
        finally:
            self._count(self.catalog)
        self._attempts.due = (self.catalog, done)
        return done is not None

    def _create(
        self, names: tuple[str, ...], operation: str, view: BucketState, change: Change
    ) -> bool:
        """Version 0 of each new topic's log, then the catalog commit naming them all."""
        log_ids: dict[str, str] = {}
        created: dict[str, CommitLog] = {}
        for name in names:
            spec = change.topics[name]
            if spec is None:  # _route refuses it; for the type checker
                raise ValueError(f"{self.uri}: cannot create topic {name!r} without a spec")
            part = Change(
                topics={name: spec},
                partitions={k: c for k, c in change.partitions.items() if topic_of(k) == name},
                sinks=change.sinks,
            )
            log_id, created_log = self._first_version(spec.topic_id, operation, part)
            log_ids[name], created[log_id] = log_id, created_log
        crash_point("create-after-topic-log")

        def catalog_build(state: BucketState) -> Change | None:
            self._open_named(state)
            merged = self._view_with(None, state)
            if any(name in merged.topics for name in names):
                # Another writer created one of them first: build again on its view (a
                # create then fails, a sink appends to the winner's log). Ours is left
                # unnamed, for the collector.
                raise _Reroute()
            return Change(topic_logs=log_ids)

        steps = Attempt()
        try:
            for state in self.catalog.commit_steps("create_topic", steps):
                with steps:
                    steps.change = catalog_build(state)
            done = steps.result
        finally:
            self._count(self.catalog)
        with self._lock:
            # catalog_build's _open_named forgot them (the catalog it was given did not
            # name them yet): they hold their version 0 already, so opening them again
            # would cost two round trips for nothing.
            for log_id, created_log in created.items():
                self._logs.setdefault(log_id, created_log)
        self._open_named(self.catalog.state)
        return done is not None

    def _first_version(
        self, topic_id: str | None, operation: str, part: Change
    ) -> tuple[str, CommitLog]:
        """Write version 0 of a new topic log; its id and the log. The topic id names it
        unless a log of that id exists already (a topic imported again keeps its Kafka
        id)."""
        log_id = topic_id or uuid.uuid4().hex
        for _ in range(3):
            log = self.catalog.sibling(topic_layout(log_id), load=False)

            def first(state: BucketState) -> Change:
                if state.version != NO_VERSION:
                    raise _LogIdTaken()
                return part

            steps = Attempt()
            try:
                for state in log.commit_steps(operation, steps):
                    with steps:
                        steps.change = first(state)
            except (_LogIdTaken, CommitOutcomeUnknownError) as e:
                # Taken, or unknown whether ours landed: either way nothing names this
                # log yet, so another id is as good (an unnamed log is collected).
                logger.info(
                    "%s: topic log %s not used (%s); writing another",
                    self.uri,
                    log_id,
                    e or "taken",
                )
                log_id = f"{topic_id}-{uuid.uuid4().hex[:8]}"
                continue
            with self._lock:
                self._logs[log_id] = log
            return log_id, log
        raise CommitConflictError(
            f"{self.uri}: could not find a free log id for topic id {topic_id}"
        )

    def _view_with(self, log_id: str | None, state: BucketState) -> BucketState:
        """The merged view with ``state`` as the catalog's (``log_id`` None) or as that
        topic log's."""
        catalog = state if log_id is None else self.catalog.state
        with self._lock:
            logs = {i: log.state for i, log in self._logs.items()}
        if log_id is not None:
            logs[log_id] = state
        return with_version(merge(catalog, logs), self._view_version)


class _LogIdTaken(Exception):  # noqa: N818 - a signal, never raised to a caller
    """Version 0 of a new topic log exists already."""


def _route_after_move(
    logs: BucketLogs, operation: str, view: BucketState, change: Change
) -> _Route:
    """``_route`` of a catalog change rebuilt on a newer catalog, where some of the
    legacy topics it changes may have moved to their own logs (``bucket_upgrade``): a
    change of one topic follows it there (``_Reroute``), one of several can no longer be
    one commit, and the caller, who grouped its topics by logs, must start over."""
    try:
        return logs._route(view, change)
    except ValueError:
        raise CommitConflictError(
            f"{logs.uri}: could not commit {operation}: topics it changes "
            f"{sorted(change_topics(change) & set(view.topic_logs))} moved to their own "
            f"commit logs meanwhile (seglog upgrade); nothing of this {operation} is "
            f"visible: retry it"
        ) from None


def _parallel(call: Callable[[Any], Any], items: list[Any]) -> list[Any]:
    if len(items) <= 1:
        return [call(item) for item in items]
    # The first call on the caller's thread, which would only wait otherwise: one
    # hand-off fewer (a trigger's look is the catalog's LIST beside its topic's); the
    # others on the process's pool (``shared_pools``): a trigger's refresh starts no
    # thread. Every call ended before this returns or raises; the first failure raised.
    others = submit_all("topic-logs", call, items[1:], at_most=OPEN_THREADS - 1)
    with joined(others):
        first = call(items[0])
    return [first, *settle(others)]
