"""Collecting a bucket's objects that no reader can need any more.

Nothing is deleted when it leaves the state: a reader that planned on an older version
keeps reading its objects. The collector deletes, in this order:

1. **Removed objects**: the objects of a segment removed by commit ``v`` (explicitly, or
   with its topic) once ``file.delete.delay.ms`` (of its topic; the default for a
   deleted topic) has passed since every commit up to ``v`` was made, by the store's
   clock (the commits' last-modified times against ``store_now_ms``: neither the
   writers' clocks nor the collector's count, so no skew can shorten the wait). A
   reader's view becomes stale at the commit after it, so it keeps at least that long to
   finish. (The newest time of commits ``<= v`` is used, not ``v``'s own: the rule must
   hold for every older view.)
2. **Orphans**: segment objects under a partition's prefix, or objects under
   ``_seglog/staging/``, that neither the state nor any commit kept names, last modified
   more than the orphan grace ago (``max(file.delete.delay.ms, 1 h)`` by default) by the
   store's clock (``bucket_staging.store_now_ms``: object times are the store's, so
   "now" is too):
   uploads of dead or losing writers, and leftovers of a collector that died. A writer
   never commits an upload older than half the grace (``bucket_merge``,
   ``bucket_compact``); a sink's uploads of a batch still in flight are kept whatever
   their age (``bucket_staging.InFlight``).
3. **Old metadata** (``collectable_metadata`` decides, by the store's
   timestamps): with ``s`` the newest snapshot older than the delay that decodes, the
   commits before ``s`` that are older than the delay, but never the newest commit
   (oldest first, so the log never has a hole a reader cannot explain), and the snapshots
   before ``s``. The delay is the largest ``file.delete.delay.ms``, never less than
   ``METADATA_MIN_DELAY_MS``: writers refresh a view older than
   ``bucket_commit_reader.MAX_VIEW_AGE_MS`` whatever their config, and this floor keeps
   every commit they may not have seen. A damaged snapshot is logged (an error naming
   it) and never taken as ``s``: the commits it stands for stay. The hint is moved to
   ``s`` when it names an older one.

Every commit log is collected alike: the catalog and each topic log under
``_seglog/topics/`` (``bucket_logs``); a segment is kept while any log names it. A topic
log that neither the catalog's state nor a catalog commit still present names (a create
that lost the catalog race or died before it; a deleted topic once the catalog commits
naming it are collected), whose newest object is older than the orphan grace, is deleted
whole: it is under ``_seglog/``, so seglog's (a create names its log within seconds of
writing it, far below the grace).

Only the log dir's own objects are ever considered (``bucket_ownership.owned_objects``):
segment objects directly under a partition prefix that the state or a commit still
present names, and the staging area. Other prefixes, other names and deeper keys are a
shared bucket's other tenants: never listed for deletion.

The collector folds the commits still present from the snapshot they start after (or
from version 0), so its cost is the commits of the last ``file.delete.delay.ms`` plus
one flat listing of each named partition prefix present and of the staging area (paged, never a
LIST per directory); it keeps no state between runs, and a collector killed at
any point leaves only objects a later run deletes (``collect-after-data``: objects
deleted, metadata not yet).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..errors import CorruptMetadataError
from ..storage.storage import Entry, Storage
from ..util.crash_points import crash_point
from .bucket_commit_reader import MAX_VIEW_AGE_MS
from .bucket_ownership import owned_objects
from .bucket_segment import object_keys
from .bucket_staging import InFlight, store_now_ms
from .bucket_state import (
    CATALOG,
    NO_VERSION,
    TOPIC_LOGS_DIR,
    BucketState,
    Commit,
    LogLayout,
    SegmentEntry,
    parse_version_name,
    topic_layout,
)

logger = logging.getLogger(__name__)

COLLECT_STEPS = ("collect-after-data",)
METADATA_MIN_DELAY_MS = 60_000
"""Commits and snapshots are kept at least this long (by the store's clock), whatever
``file.delete.delay.ms`` says: a writer refreshes a view older than ``MAX_VIEW_AGE_MS``
(10 s) before it creates a commit, so every commit made since it looked is still there
and wins the create against it; the margin above 10 s covers the create's own time."""
if METADATA_MIN_DELAY_MS <= MAX_VIEW_AGE_MS:  # pragma: no cover - a constant's edit
    raise AssertionError(
        "METADATA_MIN_DELAY_MS must exceed MAX_VIEW_AGE_MS: writers "
        "could otherwise re-create collected versions"
    )
ORPHAN_GRACE_MIN_MS = 3_600_000
"""The least orphan grace: an upload younger than this may still be committed."""


def covering_snapshot(
    snapshots: Sequence[Entry],
    now_ms: int,
    delete_delay_ms: int,
    usable: Callable[[int], bool] | None = None,
) -> int | None:
    """The snapshot of ``collectable_metadata``'s rule (1): the newest one listed that is
    older than ``delete_delay_ms`` (store times) and ``usable``; None if there is none."""
    old = sorted(
        v
        for v, t in ((parse_version_name(e.name), e.mtime_ms) for e in snapshots)
        if v is not None and now_ms - t >= delete_delay_ms
    )
    return next((v for v in reversed(old) if usable is None or usable(v)), None)


def collectable_metadata(
    commits: Sequence[Entry],
    snapshots: Sequence[Entry],
    now_ms: int,
    delete_delay_ms: int,
    usable: Callable[[int], bool] | None = None,
) -> tuple[list[int], list[int]]:
    """The commit and snapshot versions a collector may delete, from listings of
    ``_seglog/log/`` and ``_seglog/snapshots/`` (``mtime_ms`` the store's timestamps).

    The rule writers rely on (``CommitLogReader.refresh`` and the idle refresh before
    a commit): a commit goes only when (1) a newer snapshot is older than
    ``delete_delay_ms`` (every reader that opened before it can still fold on), (2) the
    commit itself is older than ``delete_delay_ms`` (a writer that looked within
    ``MAX_VIEW_AGE_MS``, below every delay the collector uses, still finds its version
    taken) and (3) it is not the newest commit (an empty
    listing after a version then means "nothing new", never "all collected"). A snapshot
    goes under (1) and (2) alike. ``now_ms`` is the store's clock too
    (``bucket_staging.store_now_ms``): no writer's or collector's clock counts.

    ``usable(v)``, when given, says whether snapshot ``v`` can be read (it decodes): the
    snapshot of rule (1) is the newest old one that can, since the commits it covers are
    gone once collected; a damaged one must not stand for them."""

    def versions(entries: Sequence[Entry]) -> list[tuple[int, int]]:
        out = [(parse_version_name(e.name), e.mtime_ms) for e in entries]
        return sorted((v, t) for v, t in out if v is not None)

    listed_commits = versions(commits)
    covered = covering_snapshot(snapshots, now_ms, delete_delay_ms, usable)
    if covered is None or not listed_commits:
        return [], []
    old_snapshots = [v for v, t in versions(snapshots) if now_ms - t >= delete_delay_ms]
    newest = listed_commits[-1][0]
    return (
        [
            v
            for v, t in listed_commits
            if v < covered and v != newest and now_ms - t >= delete_delay_ms
        ],
        [v for v in old_snapshots if v < covered],
    )


@dataclass(slots=True)
class CollectStats:
    """What one collection deleted (object counts) and kept."""

    removed_objects: int = 0
    orphans: int = 0
    commits: int = 0
    snapshots: int = 0
    waiting: int = 0  # removed objects kept because a reader may still hold them
    topic_logs: int = 0  # topic logs no catalog names, deleted whole
    orphans_waiting: int = 0  # unreferenced objects younger than the grace
    errors: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Removal:
    entry: SegmentEntry
    topic: str
    newest_commit_ms: int  # the newest timestamp of the commits up to the removing one


def orphan_grace_ms(delete_delay_ms: int, configured: int | None = None) -> int:
    """The orphan grace: ``configured``, else ``max(file.delete.delay.ms, 1 h)``."""
    return configured if configured is not None else max(delete_delay_ms, ORPHAN_GRACE_MIN_MS)


@dataclass(slots=True)
class _Folded:
    """One log's part of a collection: its listings, then its fold."""

    layout: LogLayout
    commit_entries: list[Entry]
    snapshot_entries: list[Entry]
    state: BucketState = field(default_factory=BucketState)
    removals: list[_Removal] = field(default_factory=list)
    known: set[str] = field(default_factory=set)
    named: set[str] = field(default_factory=set)
    named_logs: set[str] = field(default_factory=set)


def _listed(storage: Storage, layout: LogLayout) -> _Folded:
    return _Folded(
        layout,
        [e for e in storage.list_dir(layout.commit_dir) if not e.is_dir],
        [e for e in storage.list_dir(layout.snapshot_dir) if not e.is_dir],
    )


def collect(
    storage: Storage,
    *,
    delete_delay_ms: Callable[[str], int],
    max_delete_delay_ms: int,
    orphan_grace: int,
) -> CollectStats:
    """One collection (see the module docstring). ``delete_delay_ms(topic)`` is the
    topic's ``file.delete.delay.ms`` (the default for a deleted topic);
    ``max_delete_delay_ms`` the largest of them (it protects the metadata). Every age is
    judged by the store's clock (``store_now_ms``), none by this process's."""
    stats = CollectStats()
    logs = [_listed(storage, CATALOG)]
    logs += [
        _listed(storage, topic_layout(e.name)) for e in storage.list_dir(TOPIC_LOGS_DIR) if e.is_dir
    ]
    # Read after the listings: every listed object is at most this old.
    store_now = store_now_ms(storage)
    try:
        for log in logs:
            _fold(storage, log)
    except FileNotFoundError as e:
        # A commit or snapshot listed above is gone: another collector (a query's driver,
        # `seglog maintain`) collected it meanwhile. Nothing is deleted yet, and that
        # collector did this pass's work; the next one starts from a fresh listing.
        logger.info(
            "%s: collection skipped: %s was collected by another collector meanwhile",
            storage.uri,
            e,
        )
        return stats
    referenced = {s.key for log in logs for p in log.state.partitions.values() for s in p.segments}
    known = {k for log in logs for k in log.known}
    named = {n for log in logs for n in log.named}
    deletable: set[str] = set()
    waiting: set[str] = set()
    for r in (r for log in logs for r in log.removals):
        if store_now - r.newest_commit_ms >= delete_delay_ms(r.topic):
            deletable.update(object_keys(r.entry))
        else:
            waiting.update(object_keys(r.entry))
    objects = owned_objects(storage, named)
    in_flight = InFlight.build(_oldest_ledgers(logs), known, objects, store_now)
    for key, entry in objects:
        stem = key.rsplit(".", 1)[0]
        if stem in referenced or key in waiting:
            stats.waiting += key in waiting
            continue
        if key in deletable:
            storage.delete(key)
            stats.removed_objects += 1
        elif stem not in known and in_flight.holds(key):
            stats.orphans_waiting += 1
        elif stem not in known and store_now - entry.mtime_ms >= orphan_grace:
            logger.info(
                "%s/%s: no commit references it and it is older than the orphan "
                "grace (%d ms): deleting it",
                storage.uri,
                key,
                orphan_grace,
            )
            storage.delete(key)
            stats.orphans += 1
        elif stem not in known:
            stats.orphans_waiting += 1
    crash_point("collect-after-data")
    delay = max(max_delete_delay_ms, METADATA_MIN_DELAY_MS)
    named_logs = logs[0].named_logs
    for log in logs:
        log_id = log.layout.prefix.rpartition("/")[2]
        if log.layout != CATALOG and log_id not in named_logs:
            _collect_unnamed(storage, log, store_now, orphan_grace, stats)
            continue
        _collect_metadata(
            storage, log.layout, log.commit_entries, log.snapshot_entries, store_now, delay, stats
        )
    return stats


def _oldest_ledgers(logs: list[_Folded]) -> dict[str, object]:
    """Per sink, its ledger of the lowest batch over the logs (a sink writing topics in
    their own logs has a ledger in each): a batch is settled only when every log's is
    past it, so no upload of a batch some log may still commit is taken as settled."""
    out: dict[str, object] = {}
    for log in logs:
        for sink, ledger in log.state.sinks.items():
            batch = ledger.get("batch_id") if isinstance(ledger, dict) else None
            held = out.get(sink)
            held_batch = held.get("batch_id") if isinstance(held, dict) else None
            if held is None or (
                isinstance(batch, int) and isinstance(held_batch, int) and batch < held_batch
            ):
                out[sink] = ledger
    return out


_TOPIC_LOG_OBJECT = re.compile(r"^(?:(?:log|snapshots)/\d{20}\.json|last-snapshot|turn)$")
"""The names a commit log writes under its prefix: what collecting a topic log may delete
(anything else there, even under ``_seglog/``, is not provably ours and stays)."""


def _collect_unnamed(
    storage: Storage, log: _Folded, store_now: int, orphan_grace: int, stats: CollectStats
) -> None:
    """Delete a topic log no catalog names once its newest object is older than the
    orphan grace (a create names its log seconds after writing it): only the objects a
    commit log writes (``_TOPIC_LOG_OBJECT``)."""
    entries = [e for e in storage.list_tree(log.layout.prefix) if _TOPIC_LOG_OBJECT.match(e.name)]
    newest = max((e.mtime_ms for e in entries), default=None)
    if newest is None or store_now - newest < orphan_grace:
        return
    logger.info(
        "%s/%s: a topic log no catalog names, older than the orphan grace (%d ms): deleting it",
        storage.uri,
        log.layout.prefix,
        orphan_grace,
    )
    for e in entries:
        storage.delete(f"{log.layout.prefix}/{e.name}")
    stats.topic_logs += 1


def _versions(entries: list[Entry]) -> list[int]:
    return sorted(v for v in (parse_version_name(e.name) for e in entries) if v is not None)


def _by_version(entries: list[Entry]) -> dict[int, Entry]:
    return {v: e for v, e in ((parse_version_name(e.name), e) for e in entries) if v is not None}


def _fold(storage: Storage, log: _Folded) -> None:
    """Fold ``log``: the state after the last commit present, what each commit removed
    (with the newest store time of the commits up to it), every segment key the fold
    saw, every partition prefix (``<topic>-<p>``) a state or commit of the fold named
    (the prefixes whose segment objects are this log dir's), and the topic logs the
    states and commits name (the catalog's)."""
    commits = _versions(log.commit_entries)
    snapshots = _versions(log.snapshot_entries)
    made_ms = {v: e.mtime_ms for v, e in _by_version(log.commit_entries).items()}
    layout = log.layout
    start = NO_VERSION
    if commits and commits[0] != 0:
        # Older commits were collected: the snapshot they were folded into starts the fold
        # (after a collector died midway, a later one than commits[0] - 1 may be next).
        usable = [v for v in snapshots if v >= commits[0] - 1]
        if not usable:
            raise CorruptMetadataError(
                f"{storage.uri}/{layout.prefix}: the commit log starts at version "
                f"{commits[0]} and no snapshot covers the versions before it"
            )
        start = usable[0]
    state = BucketState()
    if start != NO_VERSION:
        state = BucketState.decode(
            storage.read(layout.snapshot_key(start)),
            f"{storage.uri}/{layout.snapshot_key(start)}",
            start,
        )
    known = {s.key for p in state.partitions.values() for s in p.segments}
    named = _partition_names(state)
    named_logs = set(state.topic_logs.values())
    removals: list[_Removal] = []
    newest = -1
    for version in (v for v in commits if v > start):
        where = f"{storage.uri}/{layout.commit_key(version)}"
        commit = Commit.decode(storage.read(layout.commit_key(version)), where, version)
        # The store's time, not the commit's timestamp_ms: that is a writer's clock.
        newest = max(newest, made_ms[version])
        for name, spec in commit.topics.items():
            old = state.topics.get(name)
            if spec is None and old is not None:
                for n in range(old.partitions):
                    ps = state.partitions.get(f"{name}-{n}")
                    removals += [_Removal(s, name, newest) for s in (ps.segments if ps else ())]
        for key, change in commit.partitions.items():
            ps = state.partitions.get(key)
            held = {s.key: s for s in ps.segments} if ps is not None else {}
            topic = key.rpartition("-")[0]
            removals += [_Removal(held[k], topic, newest) for k in change.remove if k in held]
            known.update(e.key for e in change.add)
        named.update(commit.partitions)
        named_logs.update(i for i in commit.topic_logs.values() if i is not None)
        state = state.apply(commit, where)
        named |= _partition_names(state)
    log.state, log.removals, log.known, log.named = state, removals, known, named
    log.named_logs = named_logs | set(state.topic_logs.values())


def _partition_names(state: BucketState) -> set[str]:
    """The partition prefixes ``state`` names: its topics' and its partitions' (a deleted
    topic's stay named by the states before its deletion)."""
    names = {f"{t}-{n}" for t, spec in state.topics.items() for n in range(spec.partitions)}
    return names | set(state.partitions)


def _collect_metadata(
    storage: Storage,
    layout: LogLayout,
    commits: list[Entry],
    snapshots: list[Entry],
    store_now: int,
    delay_ms: int,
    stats: CollectStats,
) -> None:
    checked: dict[int, bool] = {}

    def usable(version: int) -> bool:
        if version not in checked:
            checked[version] = decodes(version)
        return checked[version]

    def decodes(version: int) -> bool:
        # The commits a snapshot covers go with it as their only record: never trust one
        # unread (a damaged one would make every later open fail).
        key = layout.snapshot_key(version)
        try:
            BucketState.decode(storage.read(key), f"{storage.uri}/{key}", version)
        except FileNotFoundError:
            return False  # another collector deleted it meanwhile
        except CorruptMetadataError as e:
            message = (
                f"{e}; keeping it and the commits it covers (an older snapshot, if "
                f"any, bounds what is collected)"
            )
            logger.error("%s", message)
            stats.errors.append(message)
            return False
        return True

    s = covering_snapshot(snapshots, store_now, delay_ms, usable)
    if s is None:
        return
    doomed_commits, doomed_snapshots = collectable_metadata(
        commits, snapshots, store_now, delay_ms, usable
    )
    # The newest commit stays whatever its age (collectable_metadata): a writer's refresh
    # then tells "nothing new" from "collected". Oldest first: no hole a reader cannot
    # explain if this dies midway.
    for version in doomed_commits:
        storage.delete(layout.commit_key(version))
        stats.commits += 1
    for version in doomed_snapshots:
        storage.delete(layout.snapshot_key(version))
        stats.snapshots += 1
    try:
        hint = json.loads(storage.read(layout.hint_key))["version"]
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        hint = None  # a missing or damaged hint: openers list the snapshots; rewrite it
    if not isinstance(hint, int) or hint < s:
        storage.write_atomic(layout.hint_key, json.dumps({"version": s}).encode())
