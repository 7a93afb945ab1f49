"""``seglog upgrade``: move the legacy topics of a bucket log dir (topics held in the
catalog log, written before per-topic commit logs) into their own commit logs, without
copying a data object (docs/object-storage.md, "Moving a legacy topic to its own log").

A move of topic X folded from the catalog at version V is two steps:

1. **prepare**: version 0 of a new topic log L (``_seglog/topics/<id>/``) holds X whole:
   its spec (topic id and configs as they are), each partition set as the catalog holds
   it (segment entries naming the same objects, log start, cleaner offset: the
   ``move_topic`` operation of ``bucket_state``), and the catalog's sink ledgers (a
   sink's ledger is one entry per sink, not per topic: a replay of a batch X took part
   in then finds it in L, as it found it in the catalog). Nothing names L yet: invisible.
2. **name**: ONE catalog commit, created-if-absent as every commit, takes X out of the
   catalog and names L (``topics: {X: null}``, ``topic_logs: {X: L}``). Its build runs on
   the catalog's newest state: when a commit since V changed X (an append, a retention,
   an alter, a delete...), L is stale and is NOT named; the move prepares a new log from
   that state and tries again, inside the commit's build, so that a lost race is retried
   as any commit's is (the turn of ``bucket_turn`` keeps a writer appending to X in a
   loop from starving the move). A stale or abandoned L is a log no catalog names: the
   collector deletes it after the orphan grace.

After the catalog commit, a writer with a stale view that commits X to the catalog loses
the race for that version, folds the move and is routed to L by ``BucketLogs`` (its
rebuild belongs to another log); the fold refuses any catalog commit touching X's
partitions after the move anyway (they are not the catalog's any more). A call that
commits several legacy topics at once and races the move of one of them fails with
``CommitConflictError`` (nothing of it committed) and succeeds when retried.

All topics to move are prepared at once (one round trip for all their logs) and named
by one catalog commit: moving ten topics costs about what moving one does.

Crash step (``SEGLOG_CRASH_AT``): ``upgrade-after-topic-logs`` (the logs written, the
catalog not naming them: every topic stays legacy; running the upgrade again finishes).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ..errors import CommitConflictError, UnknownTopicOrPartitionError
from ..util.crash_points import crash_point
from .bucket_commit_log import Change, CommitLog
from .bucket_logs import BucketLogs
from .bucket_state import (
    MOVE_OPERATION,
    NO_VERSION,
    BucketState,
    PartitionChange,
    PartitionState,
    TopicSpec,
    topic_layout,
    tp_key,
)

logger = logging.getLogger(__name__)

UPGRADE_CRASH_STEPS = ("upgrade-after-topic-logs",)
PREPARE_THREADS = 16


@dataclass(frozen=True, slots=True)
class TopicMove:
    """One legacy topic moved (or, in a dry run, to move)."""

    topic: str
    log_id: str | None
    """The topic's new log (None in a dry run)."""
    partitions: int
    segments: int
    size_bytes: int


@dataclass(frozen=True, slots=True)
class UpgradeReport:
    """What ``upgrade_topic_logs`` did (or, dry, would do)."""

    uri: str
    moved: tuple[TopicMove, ...]
    """Moved (or to move, ``dry_run``), in name order."""
    already: tuple[str, ...]
    """Topics asked for (or every topic) that have their own log already: untouched."""
    dry_run: bool
    stale_logs: int = 0
    """Logs prepared and not named (a writer changed their topic meanwhile): the
    collector deletes them after the orphan grace."""
    catalog_version: int = NO_VERSION
    """The catalog version that moved them (NO_VERSION: nothing moved)."""


def upgrade_topic_logs(
    logs: BucketLogs,
    topics: Iterable[str] | None = None,
    *,
    dry_run: bool = False,
    before_move: Callable[[list[str]], object] | None = None,
) -> UpgradeReport:
    """Move ``topics`` (None: every legacy topic) into their own logs; see the module
    docstring. A named topic the bucket does not hold raises
    UnknownTopicOrPartitionError before anything is written. ``before_move``: called
    with the topics to move just before the first write (not in a dry run, nor when
    nothing is to move), e.g. to warn that older seglog versions will refuse the
    bucket."""
    logs.refresh()
    wanted = _wanted(logs, topics)
    state = logs.state
    already = tuple(t for t in wanted if t in state.topic_logs)
    legacy = [t for t in wanted if t not in state.topic_logs]
    if dry_run or not legacy:
        return UpgradeReport(
            logs.uri, tuple(_move(state, t, None) for t in legacy), already, dry_run
        )
    if before_move is not None:
        before_move(legacy)
    namer = _Namer(logs.catalog, legacy)
    done = logs.catalog.commit(MOVE_OPERATION, namer.build)
    if done is None:  # every topic deleted or moved by another upgrade meanwhile
        return UpgradeReport(logs.uri, (), already, False, namer.stale)
    # The catalog now names the logs this process just wrote: no need to read them.
    logs.adopt({p.log_id: p.log for p in namer.prepared.values()})
    view = logs.state
    moved = tuple(_move(view, t, namer.prepared[t].log_id) for t in sorted(namer.prepared))
    return UpgradeReport(logs.uri, moved, already, False, namer.stale, done.version)


def _wanted(logs: BucketLogs, topics: Iterable[str] | None) -> list[str]:
    state = logs.state
    if topics is None:
        return sorted(state.topics)
    names = sorted(set(topics))
    unknown = [t for t in names if t not in state.topics]
    if unknown:
        raise UnknownTopicOrPartitionError(
            f"{logs.uri}: no topic {', '.join(repr(t) for t in unknown)} to move (topics: "
            f"{sorted(state.topics)}); nothing moved"
        )
    return names


def _projection(state: BucketState, topic: str) -> tuple[object, ...] | None:
    """What a move copies of ``topic`` from a catalog state (None: not there, or not the
    catalog's): a commit that changes it makes a prepared log stale."""
    spec = state.topics.get(topic)
    if spec is None:
        return None
    return (spec, *(state.partitions.get(tp_key(topic, p)) for p in range(spec.partitions)))


def _move(state: BucketState, topic: str, log_id: str | None) -> TopicMove:
    spec = state.topics[topic]
    parts = [
        state.partitions.get(tp_key(topic, p)) or PartitionState() for p in range(spec.partitions)
    ]
    return TopicMove(
        topic,
        log_id,
        spec.partitions,
        sum(len(p.segments) for p in parts),
        sum(p.size_in_bytes for p in parts),
    )


@dataclass(frozen=True, slots=True)
class _Prepared:
    """A topic's new log, written and not named yet."""

    log_id: str
    log: CommitLog
    projection: tuple[object, ...]
    """The catalog's ``_projection`` of the topic the log was built from."""


def _prepare(catalog: CommitLog, state: BucketState, topics: list[str]) -> dict[str, _Prepared]:
    """Version 0 of a log for each of ``topics`` as ``state`` holds them, all at once."""
    if not topics:
        return {}

    def one(topic: str) -> tuple[str, _Prepared]:
        spec = state.topics[topic]
        projection = (
            spec,
            *(state.partitions.get(tp_key(topic, p)) for p in range(spec.partitions)),
        )
        log_id, log = _first_version(catalog, spec, _first_change(state, topic, spec))
        return topic, _Prepared(log_id, log, projection)

    with ThreadPoolExecutor(
        min(len(topics), PREPARE_THREADS), thread_name_prefix="seglog-upgrade"
    ) as pool:
        return dict(pool.map(one, topics))


def _first_change(state: BucketState, topic: str, spec: TopicSpec) -> Change:
    parts: dict[str, PartitionChange] = {}
    for p in range(spec.partitions):
        key = tp_key(topic, p)
        held = state.partitions.get(key) or PartitionState()
        parts[key] = PartitionChange(
            add=held.segments,
            log_start_offset=held.log_start_offset,
            cleaner_offset=held.cleaner_offset,
        )
    return Change(topics={topic: spec}, partitions=parts, sinks=dict(state.sinks))


def _first_version(catalog: CommitLog, spec: TopicSpec, change: Change) -> tuple[str, CommitLog]:
    """Write version 0 of a new log; its id (the topic id, unless a log of that id exists
    already: an earlier move that died or went stale; then a fresh one) and the log. No
    snapshot: version 0 is the whole state already, and skipping it saves two sequential
    requests per move."""
    log_id = spec.topic_id or uuid.uuid4().hex
    for _ in range(3):
        log = catalog.sibling(topic_layout(log_id), load=False)

        def first(state: BucketState) -> Change:
            if state.version != NO_VERSION:
                raise _LogIdTaken()
            return change

        try:
            log.commit(MOVE_OPERATION, first, snapshot=False)
            return log_id, log
        except _LogIdTaken:
            log_id = f"{spec.topic_id or 'log'}-{uuid.uuid4().hex[:8]}"
    raise CommitConflictError(
        f"{catalog.uri}: could not find a free log id for a topic "
        f"of id {spec.topic_id}; nothing moved"
    )


class _LogIdTaken(Exception):  # noqa: N818 - a signal, never raised to a caller
    """Version 0 of that topic log exists already."""


class _Namer:
    """The catalog commit's build: on the catalog's newest state, (re)prepare the log of
    every topic that has none yet or changed since its log was prepared (a stale log is
    left unnamed), drop the topics gone from the catalog, then name every prepared log.
    Preparing inside the build puts the move under the commit log's rules for a lost
    race: retried at once on the winner's commit, then with the turn asked of a writer
    that commits in a loop (``bucket_turn``), so a busy writer of a moved topic cannot
    starve the move."""

    def __init__(self, catalog: CommitLog, topics: list[str]) -> None:
        self.catalog = catalog
        self.topics = topics
        self.prepared: dict[str, _Prepared] = {}
        self.stale = 0
        """Logs prepared and left unnamed (their topic changed, or went)."""

    def build(self, state: BucketState) -> Change | None:
        for topic in list(self.prepared):
            if _projection(state, topic) != self.prepared[topic].projection:
                del self.prepared[topic]
                self.stale += 1
        todo = [t for t in self.topics if t in state.topics and t not in self.prepared]
        if todo and self.stale:
            logger.info(
                "%s: topics %s changed since their logs were prepared: preparing new ones "
                "(the old ones are collected after the orphan grace)",
                self.catalog.uri,
                todo,
            )
        self.prepared.update(_prepare(self.catalog, state, todo))
        if not self.prepared:
            return None
        crash_point("upgrade-after-topic-logs")
        return Change(
            topics=dict.fromkeys(self.prepared, None),
            topic_logs={t: p.log_id for t, p in self.prepared.items()},
        )
