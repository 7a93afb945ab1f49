"""Collecting a bucket's objects that no reader can need any more.

Nothing is deleted when it leaves the state: a reader that planned on an older version
keeps reading its objects. The collector deletes, in this order:

1. **Removed objects**: the objects of a segment removed by commit ``v`` (explicitly, or
   with its topic) once ``file.delete.delay.ms`` (of its topic; the default for a
   deleted topic) has passed since every commit up to ``v`` was made. A reader's view
   becomes stale at the commit after it, so it keeps at least that long to finish.
   (The newest timestamp of commits ``<= v`` is used, not ``v``'s own: writers' clocks
   differ, and the rule must hold for every older view.)
2. **Orphans**: objects under a partition's prefix or ``_seglog/staging/`` that neither
   the state nor any commit kept names, last modified more than the orphan grace ago
   (``max(file.delete.delay.ms, 1 h)`` by default) by the store's clock
   (``bucket_staging.store_now_ms``: object times are the store's, so "now" is too):
   uploads of dead or losing writers, and leftovers of a collector that died. A writer
   never commits an upload older than half the grace (``bucket_merge``,
   ``bucket_compact``); a sink's uploads of a batch still in flight are kept whatever
   their age (``bucket_staging.InFlight``).
3. **Old metadata**: with ``s`` the newest snapshot whose commits are all older than the
   largest ``file.delete.delay.ms`` (and than ``METADATA_MIN_DELAY_MS``), the commits up
   to ``s`` but never the newest commit (oldest first, so the log never has a hole a reader
   cannot explain) and the snapshots before ``s``. The hint is
   moved to ``s`` when it names an older one.

The collector folds the commits still present from the snapshot they start after (or
from version 0), so its cost is the commits of the last ``file.delete.delay.ms`` plus
one flat listing of each partition prefix and of the staging area (paged, never a
LIST per directory); it keeps no state between runs, and a collector killed at
any point leaves only objects a later run deletes (``collect-after-data``: objects
deleted, metadata not yet).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from .bucket_commit_log import crash_point
from .bucket_segment import object_keys
from .bucket_staging import InFlight, store_now_ms
from .bucket_state import (
    COMMIT_DIR,
    HINT_KEY,
    META_DIR,
    NO_VERSION,
    SNAPSHOT_DIR,
    STAGING_DIR,
    BucketState,
    Commit,
    SegmentEntry,
    commit_key,
    parse_version_name,
    snapshot_key,
)
from .errors import CorruptMetadataError
from .storage import Entry, Storage

logger = logging.getLogger(__name__)

COLLECT_STEPS = ("collect-after-data",)
METADATA_MIN_DELAY_MS = 60_000
"""Commits and snapshots are kept at least this long, whatever ``file.delete.delay.ms``
says: a writer refreshes a view older than half its ``file.delete.delay.ms`` (60 s by
default) before it commits, and this margin (commit time and clock skew included) keeps
it from re-creating a collected version."""
ORPHAN_GRACE_MIN_MS = 3_600_000
"""The least orphan grace: an upload younger than this may still be committed."""


@dataclass(slots=True)
class CollectStats:
    """What one collection deleted (object counts) and kept."""

    removed_objects: int = 0
    orphans: int = 0
    commits: int = 0
    snapshots: int = 0
    waiting: int = 0  # removed objects kept because a reader may still hold them
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


def collect(storage: Storage, *, now_ms: int, delete_delay_ms: Callable[[str], int],
            max_delete_delay_ms: int, orphan_grace: int) -> CollectStats:
    """One collection (see the module docstring). ``delete_delay_ms(topic)`` is the
    topic's ``file.delete.delay.ms`` (the default for a deleted topic);
    ``max_delete_delay_ms`` the largest of them (it protects the metadata)."""
    stats = CollectStats()
    commits = _versions(storage.list_dir(COMMIT_DIR))
    snapshots = _versions(storage.list_dir(SNAPSHOT_DIR))
    state, times, removals, known = _fold(storage, commits, snapshots)
    referenced = {s.key for p in state.partitions.values() for s in p.segments}
    deletable: set[str] = set()
    waiting: set[str] = set()
    for r in removals:
        if now_ms - r.newest_commit_ms >= delete_delay_ms(r.topic):
            deletable.update(object_keys(r.entry))
        else:
            waiting.update(object_keys(r.entry))
    objects = data_objects(storage)
    store_now = store_now_ms(storage)
    in_flight = InFlight.build(state.sinks, known, objects, store_now)
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
            logger.info("%s/%s: no commit references it and it is older than the orphan "
                        "grace (%d ms): deleting it", storage.uri, key, orphan_grace)
            storage.delete(key)
            stats.orphans += 1
        elif stem not in known:
            stats.orphans_waiting += 1
    crash_point("collect-after-data")
    _collect_metadata(storage, commits, snapshots, times, now_ms,
                      max(max_delete_delay_ms, METADATA_MIN_DELAY_MS), stats)
    return stats


def _versions(entries: list[Entry]) -> list[int]:
    return sorted(v for v in (parse_version_name(e.name) for e in entries) if v is not None)


def _fold(storage: Storage, commits: list[int], snapshots: list[int]
          ) -> tuple[BucketState, dict[int, int], list[_Removal], set[str]]:
    """The state after the last commit present, the newest commit timestamp up to each
    version, what each commit removed, and every segment key the fold saw."""
    start = NO_VERSION
    if commits and commits[0] != 0:
        # Older commits were collected: the snapshot they were folded into starts the fold
        # (after a collector died midway, a later one than commits[0] - 1 may be next).
        usable = [v for v in snapshots if v >= commits[0] - 1]
        if not usable:
            raise CorruptMetadataError(
                f"{storage.uri}: the commit log starts at version {commits[0]} and no "
                f"snapshot covers the versions before it")
        start = usable[0]
    state = BucketState()
    if start != NO_VERSION:
        state = BucketState.decode(storage.read(snapshot_key(start)),
                                   f"{storage.uri}/{snapshot_key(start)}", start)
    known = {s.key for p in state.partitions.values() for s in p.segments}
    times: dict[int, int] = {}
    removals: list[_Removal] = []
    newest = -1
    for version in (v for v in commits if v > start):
        where = f"{storage.uri}/{commit_key(version)}"
        commit = Commit.decode(storage.read(commit_key(version)), where, version)
        newest = max(newest, commit.timestamp_ms)
        times[version] = newest
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
        state = state.apply(commit, where)
    return state, times, removals, known


def data_objects(storage: Storage) -> list[tuple[str, Entry]]:
    """Every object under a partition prefix or the staging prefix, as (key, entry): one
    flat listing per prefix."""
    prefixes = [e.name for e in storage.list_dir("") if e.is_dir and e.name != META_DIR]
    return [(f"{prefix}/{e.name}", e) for prefix in (*prefixes, STAGING_DIR)
            for e in storage.list_tree(prefix)]


def _collect_metadata(storage: Storage, commits: list[int], snapshots: list[int],
                      times: dict[int, int], now_ms: int, delay_ms: int,
                      stats: CollectStats) -> None:
    # Snapshot versions at or below the fold's start have no time here; a collector
    # picked the start only once it qualified, so it still does.
    first_timed = min(times) if times else None
    qualifying = [v for v in snapshots
                  if (v in times and now_ms - times[v] >= delay_ms)
                  or (first_timed is not None and v < first_timed)]
    if not qualifying:
        return
    s = qualifying[-1]
    # The newest commit stays whatever its age: a writer's refresh then tells "nothing
    # new" from "collected" (bucket_commit_log.collectable_metadata states the rule).
    newest = commits[-1] if commits else None
    for version in (v for v in commits if v <= s and v != newest):
        storage.delete(commit_key(version))
        stats.commits += 1
    for version in (v for v in snapshots if v < s):
        storage.delete(snapshot_key(version))
        stats.snapshots += 1
    try:
        hint = json.loads(storage.read(HINT_KEY))["version"]
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        hint = None  # a missing or damaged hint: openers list the snapshots; rewrite it
    if not isinstance(hint, int) or hint < s:
        storage.write_atomic(HINT_KEY, json.dumps({"version": s}).encode())
