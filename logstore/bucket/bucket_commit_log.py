"""``CommitLog``: the bucket engine's optimistic commit protocol over a ``Storage``.

No lock, no lease. What is visible is the fold of ``_seglog/log/<version>.json``; a
writer makes version ``current + 1`` visible by creating that object with
create-if-absent, of which exactly one concurrent creator wins (``Storage.create``).

- **Open** (bounded requests): GET the hint ``_seglog/last-snapshot``, GET that snapshot,
  LIST ``_seglog/log/``, GET each commit after the snapshot (at most ``SNAPSHOT_EVERY``
  of them unless a snapshot writer died). A missing or damaged hint, or a hint naming a
  missing snapshot, falls back to LISTing the snapshots (or to folding from version 0).
- **Refresh**: one LIST of ``_seglog/log/`` after the state's version (``list_after``:
  the server skips older names) and a GET per newer commit. A reader's log
  (``read_ahead``: a read-only manager's) whose last refresh found N commits of other
  writers sends the GETs of the next N versions (at most ``READ_AHEAD_MAX``) beside the
  LIST: a reader of a log written at a steady rate (a source's trigger, a task, a
  consumer) then sees the new commits in one round trip, not two; an idle log's refresh
  stays one LIST, and a writer's requests are unchanged. Read-ahead bytes are used only
  where the LIST names that version with their size (the LIST stays the only word on
  what exists). When the next
  version is missing but later ones exist, old commits were collected under a slow
  reader: it reloads from the newest snapshot.
- **Commit**: ``commit_steps(operation, attempt)`` yields the state to build on; its
  caller builds (uploads what the commit will reference, unique names) and leaves the
  change (or None: nothing to do) in ``attempt`` (``Attempt``: the caller drives the
  loop, the engine never calls back; ``commit(operation, build)`` is that loop over a
  callable, called ``build`` below). A check of ``build`` that fails (``SeglogError``)
  on a state this process cached refreshes it and builds again if it changed: an error
  is only raised on a state just read from the bucket. The change is checked by
  folding it into the state (``BucketState.apply``), then created as the next version,
  never from a view older than ``MAX_VIEW_AGE_MS``: the age of the last LIST is checked
  before ``build`` and again under the lock just before the create (``build`` uploads,
  which may take minutes); a view too old is refreshed, and a state that moved is
  built on again. Otherwise ``current + 1`` could be a name the collector freed, and
  the create would fork the log. A create answered "exists" whose object holds our very
  bytes was ours (the client retried a PUT that had succeeded); a create that failed on
  the wire is settled by reading the key (ours, another writer's, or nothing there: the
  same bytes are created again), else ``CommitOutcomeUnknownError`` says it may be
  visible. On a lost race the writer folds the new commits (the first loss: one LIST,
  the missed commits read in parallel; later ones: the winner's commit, one GET) and
  yields the new state at once, to build again: a logical rebase (an append keeps
  its uploads and commits them with an ``offset_delta`` where the end moved, re-uploading
  nothing; a merge keeps its upload while its sources are there; an operation whose
  inputs vanished raises). An append (``Change.at_end``) does not wait for that: it
  creates the next version at once, blind, its entries placed at the log end by the fold,
  and reads the version it lost alongside (``_create_at_end``): one round trip a loss.
  After ``TURN_AFTER_LOSSES`` losses it asks the other writers
  for the turn (``bucket_turn``: a writer in a tight loop would win every race
  otherwise); after ``FAST_RETRIES`` it backs off with jitter before it looks again;
  after ``max_attempts`` a ``CommitConflictError`` names the URI.
- The writer of a version divisible by ``SNAPSHOT_EVERY`` writes its snapshot, then the
  hint (so the hint is never ahead of a snapshot that exists).

Crash steps (``SEGLOG_CRASH_AT=<step>``, ``crash_points``): ``after-upload`` (objects
uploaded, no commit), ``after-commit`` (commit created, no snapshot), ``after-snapshot``
(snapshot written, hint not). A crash anywhere leaves either the old or the new version
visible, whole; uploads no commit references are collected later.

Over 500 lines: the protocol of one log is one unit: open, refresh, the fold, the create
and the fork checks share the cached state, the own-commit record and ``_lock``, whose
invariants (never create from a view older than ``MAX_VIEW_AGE_MS``; a read-back before
trusting a create) would be spread over modules by a split; the set of logs is
``bucket_logs``.

Thread-safety: thread-safe. ``_lock`` guards the state it caches and is held only to
refresh and to create a commit: ``build`` (the uploads) and the snapshot run outside it,
so one large append does not hold up the other commits of the process; a thread whose
state moved while it built (another thread committed) builds again, as after a lost race.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import (
    BucketNotFoundError,
    CommitConflictError,
    CommitOutcomeUnknownError,
    ConditionalWriteNotEnforcedError,
    CorruptMetadataError,
    KafkaStorageError,
    SeglogError,
    StorageAccessDeniedError,
)
from ..storage.storage import Entry, Storage
from ..util.clock import SYSTEM_CLOCK, Clock
from ..util.crash_points import CRASH_ENV as CRASH_ENV  # the tests' spelling, kept
from ..util.crash_points import crash_point
from .bucket_state import (
    CATALOG,
    SNAPSHOT_EVERY,
    BucketState,
    Commit,
    LogLayout,
    PartitionChange,
    TopicSpec,
    config_digest,
    index_of,
    parse_version_name,
    topic_of,
    version_name,
)
from .bucket_turn import TURN_AFTER_LOSSES, Look, Turns

logger = logging.getLogger(__name__)

CRASH_STEPS = ("after-upload", "after-commit", "after-snapshot")
"""Named steps of a bucket commit where a test may kill the process (``crash_point``)."""
MAX_ATTEMPTS = 20
SNAPSHOT_PROBES = 3
"""Snapshot names an open tries (GETs from the newest listed version down) before it
LISTs the snapshots."""
DEFAULT_DELETE_DELAY_MS = 60_000
"""Kafka's default ``file.delete.delay.ms``."""
MAX_VIEW_AGE_MS = 10_000
"""A writer never creates a commit from a view (its last LIST of the commits) older than
this: it refreshes first. Fixed, not derived from any config: the collector keeps every
commit and snapshot at least ``bucket_collect.METADATA_MIN_DELAY_MS`` (60 s, well above
this) by the store's clock, whatever anyone's ``file.delete.delay.ms``, so every commit
made since the writer looked is still there and wins the create against it."""
MAX_UNCHECKED = 1000
"""Own commits a writer remembers to read back (``CommitLog._check_own_commits``): a
lone writer's, from its last look at another writer's commit on."""
MAX_READ_BACK = 50
"""Of those, the most a refresh reads back (the newest); older ones are compared by their
listed size only, so a second writer appearing after a long lone run costs a bounded
number of GETs."""
READ_AHEAD_MAX = 8
"""The most versions a reader's refresh GETs ahead beside its LIST (as many as its last
refresh found; a guess too high costs a 404 GET each, in the same round trip)."""
BACKOFF_MS = (10, 1000)
"""The first and the largest sleep between attempts (doubling, with full jitter)."""
FETCH_THREADS = 16
"""The most commits a refresh reads at once."""
BLIND_CREATES = 4
"""Blind creates (``Change.at_end``) an append tries after a lost create, one version up
each time, before it folds what it lost to and builds again (and the turn may be asked
for)."""
TURN_AFTER_CHAINS = 3
"""Blind chains (each up to ``BLIND_CREATES`` + 1 lost creates) an append loses before it
asks for the turn (other commits: ``bucket_turn.TURN_AFTER_LOSSES``)."""
FAST_RETRIES = 5
"""Lost races retried at once, on the winner's commit (``_rebase``), before the backoff
(by then the turn was asked for: ``bucket_turn``): a writer that sleeps after each loss
never catches up with one that commits in a loop."""


def repair_advice(uri: str) -> str:
    """What an error about a log that no longer folds tells the operator to do."""
    return (f"`seglog repair {uri}` shows what ending the log before the damage would "
            f"lose, and does it with --execute (docs/troubleshooting.md)")


def covering_snapshot(snapshots: Sequence[Entry], now_ms: int, delete_delay_ms: int,
                      usable: Callable[[int], bool] | None = None) -> int | None:
    """The snapshot of ``collectable_metadata``'s rule (1): the newest one listed that is
    older than ``delete_delay_ms`` (store times) and ``usable``; None if there is none."""
    old = sorted(v for v, t in ((parse_version_name(e.name), e.mtime_ms) for e in snapshots)
                 if v is not None and now_ms - t >= delete_delay_ms)
    return next((v for v in reversed(old) if usable is None or usable(v)), None)


def collectable_metadata(commits: Sequence[Entry], snapshots: Sequence[Entry], now_ms: int,
                         delete_delay_ms: int,
                         usable: Callable[[int], bool] | None = None
                         ) -> tuple[list[int], list[int]]:
    """The commit and snapshot versions a collector may delete, from listings of
    ``_seglog/log/`` and ``_seglog/snapshots/`` (``mtime_ms`` the store's timestamps).

    The rule writers rely on (``CommitLog.refresh`` and the idle refresh before a
    commit): a commit goes only when (1) a newer snapshot is older than
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
    return ([v for v, t in listed_commits
             if v < covered and v != newest and now_ms - t >= delete_delay_ms],
            [v for v in old_snapshots if v < covered])


@dataclass(frozen=True, slots=True)
class Change:
    """What ``build`` returns: the body of the next commit."""

    topics: Mapping[str, TopicSpec | None] = field(default_factory=dict)
    partitions: Mapping[str, PartitionChange] = field(default_factory=dict)
    sinks: Mapping[str, Any] = field(default_factory=dict)
    topic_logs: Mapping[str, str | None] = field(default_factory=dict)
    """Catalog commits only (``bucket_logs``): names given to (or taken from) topic logs."""
    at_end: bool = False
    """An append (only ``partitions``' adds) valid at whatever log end the fold finds:
    after a lost race it is created blind as the next version, without reading the
    winner's commit first (``CommitLog._create_at_end``)."""


class _Attempts(threading.local):
    """The calling thread's last ``commit``: its values before that thread's first."""

    count = 0  # creates tried
    shifts: Mapping[str, int] = {}  # how far the fold moved a blind append, per key
    blind = False  # whether the last attempt was a blind chain


class Attempt:
    """What the caller of a commit loop (``CommitLog.commit_steps``,
    ``BucketLogs.commit_steps``) hands back for the state it was given, and what the loop
    hands back at its end. The caller drives the loop itself, so the engine never calls
    back into the caller's module::

        attempt = Attempt()
        for state in log.commit_steps("append", attempt):
            with attempt:
                attempt.change = build(state)
        new_state = attempt.result

    ``with attempt`` records an ``Exception`` the build raised instead of the change; the
    loop, resumed, applies its rule to it (refresh and yield a fresh state, or raise it
    to the caller). Nothing else belongs in the loop's body."""

    __slots__ = ("change", "error", "result")

    def __init__(self) -> None:
        self.change: Change | None = None
        self.error: Exception | None = None
        self.result: BucketState | None = None
        """The loop's outcome once it ended: the new state, or None (nothing to do)."""

    def __enter__(self) -> Attempt:
        self.change = None
        self.error = None
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: object) -> bool:
        if isinstance(error, Exception):
            self.error = error
            return True  # handed to the loop, which raises it or builds again
        return False

    def outcome(self) -> Change | None:
        """The change built for the last state yielded, or the build's error raised."""
        error, self.error = self.error, None
        if error is not None:
            raise error
        change, self.change = self.change, None
        return change


class CommitLog:
    """The commit log of one bucket log dir; see the module docstring."""

    def __init__(self, storage: Storage, *, clock: Clock = SYSTEM_CLOCK,
                 writer_id: str | None = None, max_attempts: int = MAX_ATTEMPTS,
                 sleep: Callable[[float], None] = time.sleep,
                 layout: LogLayout = CATALOG, load: bool = True,
                 read_ahead: bool = False) -> None:
        """``layout``: where this log's objects are (the catalog log by default; a topic
        log's: ``bucket_state.topic_layout``). ``load=False``: a log known to be new (a
        topic id just drawn), opened empty without a request. ``read_ahead``: a reader's
        log (see the module docstring's Refresh; its siblings inherit it)."""
        self.storage = storage
        self.layout = layout
        self.clock = clock
        self.writer_id = writer_id or uuid.uuid4().hex[:16]
        self.max_attempts = max_attempts
        self._sleep = sleep
        self._lock = threading.RLock()  # guards _state, _refreshed_ms
        self._state = BucketState()
        self._damaged: set[str] = set()  # snapshots that failed to parse, for messages
        self._refreshed_ms = clock.monotonic_ms()
        self.read_ahead = read_ahead
        # How many commits of other writers the last refresh folded: a reader's next one
        # reads as many following versions ahead, beside its LIST (READ_AHEAD_MAX).
        self._others_seen = 0
        self._attempts = _Attempts()
        self.turns = Turns(storage, self.writer_id, clock, sleep, layout.turn_key)
        self._hint_ahead: int | None = None  # a hint seen beyond the newest commit
        # Commits this writer was told it created and has not read back: version ->
        # (its bytes, operation). See _check_own_commits.
        self._unchecked: dict[int, tuple[bytes, str]] = {}
        # Set once this writer has seen the store ignore create-if-absent: it then
        # refuses every commit (reading goes on).
        self._refusal: str | None = None
        if load:
            self._load()

    @property
    def uri(self) -> str:
        """The log dir's URI, plus the log's prefix for a topic log (for messages)."""
        if self.layout == CATALOG:
            return self.storage.uri
        return f"{self.storage.uri}/{self.layout.prefix}"

    @property
    def state(self) -> BucketState:
        return self._state

    def sibling(self, layout: LogLayout, *, load: bool = True) -> CommitLog:
        """Another log of the same log dir (a topic log), with this one's writer id and
        settings."""
        return CommitLog(self.storage, clock=self.clock, writer_id=self.writer_id,
                         max_attempts=self.max_attempts, sleep=self._sleep, layout=layout,
                         load=load, read_ahead=self.read_ahead)

    @property
    def last_shifts(self) -> Mapping[str, int]:
        """Per partition key, how far the fold moved the calling thread's last commit
        (a blind ``Change.at_end`` append) above the offsets its ``build`` gave it: the
        caller adds this to the offsets it reports. Empty when nothing moved."""
        return self._attempts.shifts

    @property
    def last_attempts(self) -> int:
        """How many versions the calling thread's last ``commit`` tried to create (1: it
        won the first; 0: nothing to do, or no commit yet), for callers that report how
        hard a commit had to fight other writers."""
        return self._attempts.count

    # -- reading ---------------------------------------------------------------------

    def _load(self) -> None:
        """Open: the snapshot the hint names, one LIST of the commits from there, a newer
        snapshot if the hint is stale, then the newer commits."""
        with self._lock:
            started_ms = self.clock.monotonic_ms()
            hint = self._hint_version()
            base: BucketState | None = None
            listed: list[int] = []
            if hint is not None:
                # The snapshot's GET and the LIST from its version at once: one round
                # trip. A snapshot gone or damaged is folded from the start instead,
                # listed again unless the hint's commit is gone too: the commits before
                # it then can only lead to the gap that a newer snapshot bridges.
                with ThreadPoolExecutor(1, thread_name_prefix="seglog-open") as pool:
                    listing = pool.submit(self._list_commits, hint)
                    base = self._read_snapshot(hint)
                    listed = listing.result()
            if base is None:
                base = BucketState()
                if hint is None or not listed or listed[0] == hint:
                    listed = self._list_commits(base.version)
            self._fold(base, listed, started_ms, open_=True)
            if hint is not None and hint > self._state.version:
                # The hint is written after its commit: the newest commits were deleted,
                # and writing on would re-use their versions (issue 22.4).
                self._hint_ahead = hint
                logger.error("%s", self._rolled_back_message())

    def _hint_version(self) -> int | None:
        try:
            raw = self.storage.read(self.layout.hint_key)
        except FileNotFoundError:
            return None
        try:
            version: object = json.loads(raw)["version"]
            if isinstance(version, bool) or not isinstance(version, int) or version < 0:
                raise ValueError(f"version {version!r}")
        except (ValueError, KeyError, TypeError) as e:
            # Only a hint: the snapshot names are probed instead (nothing is lost).
            logger.warning("%s/%s is damaged (%s); looking for the snapshots instead",
                           self.uri, self.layout.hint_key, e)
            return None
        return version

    def _read_snapshot(self, version: int) -> BucketState | None:
        """The snapshot of ``version``; None when it is gone or damaged. A damaged one is
        skipped (logged, and named if the commits it stood for are gone too): the state
        is then folded from an older snapshot and the commits, which are what a
        snapshot only summarises."""
        key = self.layout.snapshot_key(version)
        try:
            data = self.storage.read(key)
        except FileNotFoundError:
            return None  # collected after a newer one, or its writer died
        try:
            return BucketState.decode(data, f"{self.storage.uri}/{key}", version)
        except CorruptMetadataError as e:
            logger.warning("%s; folding the commits from an older snapshot instead", e)
            self._damaged.add(f"{self.storage.uri}/{key}")
            return None

    def _newer_snapshot(self, above: int, newest: int) -> BucketState | None:
        """The newest snapshot of a version in ``(above, newest]``: snapshot names are
        known (every ``SNAPSHOT_EVERY``-th version), so a few GETs from the top find it;
        only when they all miss (dead snapshot writers) are the snapshots LISTed."""
        top = newest - newest % SNAPSHOT_EVERY
        for version in range(top, above, -SNAPSHOT_EVERY)[:SNAPSHOT_PROBES]:
            state = self._read_snapshot(version)
            if state is not None:
                return state
        listed = sorted(v for v in (parse_version_name(e.name)
                                    for e in self.storage.list_dir(self.layout.snapshot_dir))
                        if v is not None and above < v <= newest)
        for version in reversed(listed):
            state = self._read_snapshot(version)
            if state is not None:
                return state
        return None

    def _list_commits(self, version: int) -> list[int]:
        """The commit versions from ``version`` on (one LIST). Listed from our own
        version: an empty answer must mean "nothing new", never "everything we knew was
        collected" (the collector keeps the newest commit)."""
        return sorted(self._list_commit_sizes(version))

    def _list_commit_sizes(self, version: int) -> dict[int, int]:
        """``_list_commits`` with each commit's size (the same one LIST)."""
        after = version_name(version - 1) if version >= 1 else ""
        sizes = {}
        for e in self.storage.list_after(self.layout.commit_dir, after):
            v = parse_version_name(e.name)
            if v is not None and v >= version:
                sizes[v] = e.size
        return sizes

    def refresh(self, known: Mapping[int, bytes] | None = None) -> bool:
        """Fold the commits newer than the state (one LIST, a GET per new commit not in
        ``known``, commits already read by version); True if the state changed."""
        with self._lock:
            started_ms = self.clock.monotonic_ms()
            state = self._state
            oldest = min(self._unchecked, default=state.version)
            known = dict(known or {})
            ahead = [v for v in range(state.version + 1, state.version + 1 + self._others_seen)
                     if v not in known] if self.read_ahead and state.version >= 0 else []
            if ahead:
                with ThreadPoolExecutor(len(ahead), thread_name_prefix="seglog-read-ahead"
                                        ) as pool:
                    early = pool.map(self._read_commit_or_none, ahead)
                    sizes = self._list_commit_sizes(min(oldest, state.version))
                    read = dict(zip(ahead, early, strict=True))
                # Immutable once created; a size the LIST disagrees with (a store that
                # let a second create replace it) is read again by the fold.
                known.update({v: data for v, data in read.items()
                              if data is not None and sizes.get(v) == len(data)})
            else:
                sizes = self._list_commit_sizes(min(oldest, state.version))
            for version in [v for v in self._unchecked if v not in sizes]:
                del self._unchecked[version]  # collected (old) or never listed
            own = frozenset(self._unchecked)
            if own:
                self._check_own_commits(sizes, others=max(sizes, default=-1) > state.version)
            listed = sorted(v for v in sizes if v >= state.version)
            changed = self._fold(state, listed, started_ms, own=own, known=known)
            # Own commits are in the state already: what a refresh folds is others'.
            self._others_seen = min(max(self._state.version - state.version, 0),
                                    READ_AHEAD_MAX)
            return changed

    def _read_commit_or_none(self, version: int) -> bytes | None:
        """The commit of ``version`` if it is there (a read-ahead: absent, or any
        failure, is None, and the fold reads what the LIST names as it always does)."""
        try:
            return self.storage.read(self.layout.commit_key(version))
        except (FileNotFoundError, KafkaStorageError):
            return None

    def _check_own_commits(self, sizes: Mapping[int, int], *, others: bool) -> None:
        """Checks the commits this writer was told it created against what the bucket
        lists: a store that does not enforce create-if-absent, or not atomically,
        answers two racing creates of one version with success, the later replacing the
        earlier, and the earlier writer's operation is then acknowledged yet gone.

        Cheap by design: a listed size that differs from ours costs nothing to see (the
        LIST is made anyway); the bytes are read back (a GET each, of the newest
        ``MAX_READ_BACK``) only when ``others``, another writer's newer commit, shows up,
        so a lone writer pays nothing. Another
        writer's bytes raise ``ConditionalWriteNotEnforcedError`` naming the version
        (after reloading the state from the bucket, so nothing more is built on the lost
        commit)."""
        mine = self._unchecked
        if others:
            self._unchecked = {}
        versions = sorted(set(mine) & set(sizes))
        read_back = set(versions[-MAX_READ_BACK:]) if others else set()
        for version in versions:
            data, operation = mine[version]
            if version not in read_back and sizes[version] == len(data):
                continue
            key = self.layout.commit_key(version)
            try:
                found = self.storage.read(key)
            except FileNotFoundError:
                continue  # listed, then collected: the fold says if anything is wrong
            if found != data:
                self._state = BucketState()
                self._load()
                error = self._forked(version, operation, found)
                self._refusal = str(error)
                raise error

    def _fork_below(self, commit: Commit, error: CorruptMetadataError
                    ) -> ConditionalWriteNotEnforcedError:
        """Another writer's commit that does not apply on the one below it, which this
        writer created: that writer built on a different commit of the same version (it
        must have read one to create the next), so both were told they created it. The
        bucket holds this writer's; the other writer's is lost, and its successor does not
        follow. Certain without a request; commits are refused from here on."""
        below = commit.version - 1
        where = f"{self.storage.uri}/{self.layout.commit_key(commit.version)}"
        cause = str(error).removeprefix(f"{where}: ")
        message = (
            f"{where}: writer {commit.writer}'s "
            f"{commit.operation} does not follow commit {below}, which this writer "
            f"({self.writer_id}) created: the store did not enforce create-if-absent "
            f"(If-None-Match: *), so two writers both created version {below} and the log "
            f"forked there ({cause}). Check the store with `seglog probe-store {self.uri}` "
            f"and run at most one writer on it until it passes")
        self._refusal = message
        return ConditionalWriteNotEnforcedError(message)

    def _forked(self, version: int, operation: str, found: bytes
                ) -> ConditionalWriteNotEnforcedError:
        where = f"{self.storage.uri}/{self.layout.commit_key(version)}"
        try:
            other = Commit.decode(found, where, version)
            whose = f"writer {other.writer}'s {other.operation}"
        except CorruptMetadataError:
            whose = "other bytes"
        return ConditionalWriteNotEnforcedError(
            f"{where}: this writer ({self.writer_id}) was told its create of commit "
            f"{version} ({operation}) succeeded, but that version holds {whose}: the store "
            f"did not enforce create-if-absent (If-None-Match: *), so two writers both "
            f"created version {version} and this {operation} is not in the log. Check the "
            f"store with `seglog probe-store {self.uri}` and run at most one writer on it "
            f"until it passes")

    def _fold(self, state: BucketState, listed: list[int], started_ms: int, *,
              open_: bool = False, own: Collection[int] = (),
              known: Mapping[int, bytes] | None = None) -> bool:
        """Take ``state`` plus the ``listed`` commits after it as this log's state.
        ``open_``: more than ``SNAPSHOT_EVERY`` newer commits mean a stale hint, and a
        newer snapshot is cheaper than folding them all. ``own``: versions this writer
        created (see ``_fork_below``)."""
        if state.version >= 0:
            if listed[:1] == [state.version]:
                listed = listed[1:]
            elif not listed:
                raise CorruptMetadataError(
                    f"{self.uri}: commit {state.version}, the newest this process knows, "
                    f"is gone and no newer commit is listed: the newest commit must "
                    f"never be collected; refusing to write over a log it cannot see. "
                    f"{repair_advice(self.uri)}")
        if open_ and len(listed) > SNAPSHOT_EVERY:
            state = self._newer_snapshot(state.version, listed[-1]) or state
        run: list[int] = []  # the listed commits that follow the state without a gap
        for version in listed:
            if version == state.version + 1 + len(run):
                run.append(version)
            elif version > state.version:
                break
        known = known or {}
        fetched = {**self._fetch([v for v in run if v not in known]),
                   **{v: known[v] for v in run if v in known}}
        for version in listed:
            if version <= state.version:
                continue  # a snapshot below already holds it
            if version != state.version + 1:
                # Commits after our version were collected (we are older than
                # file.delete.delay.ms): a newer snapshot holds them.
                state = self._snapshot_over_gap(state, version, listed[-1])
                if version <= state.version:
                    continue
            key = self.layout.commit_key(version)
            where = f"{self.storage.uri}/{key}"
            data = fetched.get(version)
            if data is None:
                try:
                    data = self.storage.read(key)
                except FileNotFoundError:
                    raise CorruptMetadataError(
                        f"{where} was listed but cannot be read") from None
            commit: Commit | None = None
            try:
                commit = Commit.decode(data, where, version)
                state = self._apply(state, commit, where)
            except CorruptMetadataError as e:
                if (commit is not None and version - 1 in own
                        and commit.writer != self.writer_id):
                    raise self._fork_below(commit, e) from e
                raise CorruptMetadataError(f"{e}. {repair_advice(self.uri)}") from None
        changed = state.version != self._state.version
        self._state = state
        self._refreshed_ms = started_ms
        return changed

    def _fetch(self, versions: list[int]) -> dict[int, bytes]:
        """The commits of ``versions`` read at once (``FETCH_THREADS`` in flight): a
        writer behind a fast one catches up in a round trip or two, not one per commit
        (sequential GETs lose the race to a writer committing in a loop). A commit that
        could not be read here is left out: the fold reads it again and names it."""
        if len(versions) < 2:
            return {}

        def read(version: int) -> tuple[int, bytes | None]:
            try:
                return version, self.storage.read(self.layout.commit_key(version))
            except (FileNotFoundError, KafkaStorageError):
                return version, None

        with ThreadPoolExecutor(min(len(versions), FETCH_THREADS),
                                thread_name_prefix="seglog-commit-fetch") as pool:
            return {v: data for v, data in pool.map(read, versions) if data is not None}

    def _snapshot_over_gap(self, state: BucketState, listed_next: int, newest: int
                           ) -> BucketState:
        """The newest snapshot, when it covers the commits missing before ``listed_next``;
        else CorruptMetadataError naming the first missing one (and any damaged snapshot
        that might have held it)."""
        newer = self._newer_snapshot(state.version, newest)
        if newer is None or newer.version < listed_next - 1:
            damaged = (f" (damaged, so not used: {', '.join(sorted(self._damaged))})"
                       if self._damaged else "")
            raise CorruptMetadataError(
                f"{self.uri}: commit {state.version + 1} is missing (the log lists "
                f"{listed_next} next) and no snapshot covers it{damaged}. "
                f"{repair_advice(self.uri)}")
        return newer

    # -- writing ---------------------------------------------------------------------

    def commit(self, operation: str, build: Callable[[BucketState], Change | None], *,
               snapshot: bool = True) -> BucketState | None:
        """``commit_steps`` with ``build`` making each attempt's change: the new state,
        or None when ``build`` said there is nothing to do. For callers inside the engine
        whose ``build`` is their own (a caller above it drives ``commit_steps``)."""
        attempt = Attempt()
        for state in self.commit_steps(operation, attempt, snapshot=snapshot):
            with attempt:
                attempt.change = build(state)
        return attempt.result

    def commit_steps(self, operation: str, attempt: Attempt, *, snapshot: bool = True
                     ) -> Iterator[BucketState]:
        """Make a change the next version, the caller building it (``Attempt``): yields
        the state to build on, then takes ``attempt``'s change (None: nothing to do) or
        its build's error, and yields again after a lost race; ``attempt.result`` is the
        new state at the end (None: nothing to do). Retries a lost race (see the module
        docstring); raises CommitConflictError after ``max_attempts``. ``snapshot=False``
        leaves a due snapshot to the caller (``snapshot_if_due``), who may first tell
        others the commit landed: a crash between leaves a commit without its snapshot,
        which readers and the collector already cope with."""
        attempt.result = None
        if self._refusal is not None:
            raise ConditionalWriteNotEnforcedError(
                f"{self.uri}: refusing to commit {operation}: this writer saw the store "
                f"ignore create-if-absent before ({self._refusal})")
        if self._hint_ahead is not None and self._hint_ahead > self._state.version:
            raise CorruptMetadataError(self._rolled_back_message())
        fresh = False  # whether the state was read from the bucket during this call
        self._attempts.count = 0
        self._attempts.shifts = {}
        self._attempts.blind = False  # whether the last attempt was a blind chain
        # Runs alongside build (the upload); waited for just before the create.
        look = self.turns.begin()
        if self._view_too_old():
            # Cheap to do now rather than build on a state the create check below would
            # throw away anyway.
            self.refresh()
            fresh = True
        token: str | None = None  # our request for the turn, once asked
        try:
            for n in range(self.max_attempts):
                state = self._state
                # Outside the lock: the caller builds (uploads: a large append must not
                # hold up the other partitions' commits of this process).
                yield state
                new_state, won = self._attempt(operation, attempt, state, n, fresh, look)
                look = None  # one look per commit
                if won:
                    if snapshot and new_state is not None:
                        self.snapshot_if_due(new_state)  # outside the lock too
                    attempt.result = new_state
                    return
                fresh = True
                if won is None:
                    continue
                logger.info("%s: lost the race for version %d (%s, attempt %d); retrying",
                            self.uri, state.version + 1, operation, n + 1)
                # A blind chain lost is BLIND_CREATES + 1 races lost at one round trip
                # each, and as likely won next time: the turn (a wait for everyone) is
                # asked for later.
                turn_after = TURN_AFTER_CHAINS if self._attempts.blind else TURN_AFTER_LOSSES
                if n + 1 == turn_after and token is None:
                    # Losing again and again: a writer commits in a loop. Ask it to let
                    # us through (bucket_turn), then look.
                    token = self.turns.request()
                    self.refresh()  # what was committed while it waited
                elif n + 1 >= FAST_RETRIES:
                    # Many writers racing as equals: spread them out. Sleep, then look,
                    # never the other way round: a create from a state that aged during
                    # a sleep loses to any writer committing in a loop, every time.
                    cap = min(BACKOFF_MS[1], BACKOFF_MS[0] << min(n, 16))
                    self._sleep(random.uniform(0, cap) / 1000)
                    self.refresh()
        finally:
            self.turns.ended()
            if token is not None:
                self.turns.withdraw(token)
        raise CommitConflictError(
            f"{self.uri}: could not commit {operation} after {self.max_attempts} attempts: "
            f"other writers committed first every time (the log is at version "
            f"{self._state.version}); nothing of this {operation} is visible")

    def _attempt(self, operation: str, attempt: Attempt, state: BucketState, n: int,
                 fresh: bool, look: Look | None) -> tuple[BucketState | None, bool | None]:
        """Attempt ``n`` of ``commit_steps`` on ``state``, with what the caller built on
        it (``attempt``): (the new state, True) when it won, (None, True) when there was
        nothing to do, (None, False) when another writer took the version (its commit
        folded in), (None, None) when this process's state moved meanwhile (build again,
        no request made). ``look``: the commit's look at the turn (``bucket_turn``),
        running alongside the build, waited for before the create."""
        try:
            change = attempt.outcome()
        except KafkaStorageError:
            raise
        except SeglogError:
            # A check failed on what this process knew; another process may have changed
            # it since (created the topic, appended the offsets): only a state just read
            # from the bucket can say no.
            if fresh:
                raise
            self.refresh()
            if self._state.version == state.version:
                raise
            return None, None
        if change is None:
            return None, True
        version = state.version + 1
        commit = Commit(version, self.writer_id, self.clock.milliseconds(), operation,
                        change.topics, change.partitions, change.sinks, change.topic_logs)
        key = self.layout.commit_key(version)
        new_state = self._apply(state, commit, f"{self.storage.uri}/{key} ({operation})")
        crash_point("after-upload")
        data = commit.encode()
        # Given way to a writer that asked for the turn, this create loses to its commit
        # and folds it, as any lost race.
        self.turns.wait_for(look)
        with self._lock:
            if self._state.version == state.version and self._view_too_old():
                # build may have uploaded for minutes: commits made before our last LIST
                # may be collected meanwhile, making ``version`` a free name again;
                # creating it would fork the log (an acknowledged commit no one sees).
                # Look again: a moved state rebuilds, as after a lost race.
                self.refresh()
            if self._state.version != state.version:
                # Another thread of this process committed (or refreshed) since build: a
                # lost race the bucket need not be asked about.
                return None, None
            self._attempts.count += 1
            self._attempts.blind = change.at_end
            if change.at_end:
                placed = self._create_at_end(operation, change, state, data, new_state)
                if placed is None:
                    return None, False
                new_state = placed
            else:
                created, winner = self._create(key, data, operation)
                if not created:
                    if n:
                        self._rebase(version, winner)
                    else:
                        # The first loss: how far behind is unknown (a writer in a loop may
                        # be hundreds of versions ahead); one LIST says.
                        self.refresh({version: winner} if winner is not None else None)
                    return None, False
                self._state = new_state
                self._remember(version, data, operation)
        crash_point("after-commit")
        return new_state, True

    def _create_at_end(self, operation: str, change: Change, state: BucketState, data: bytes,
                       new_state: BucketState) -> BucketState | None:
        """``_attempt``'s create of an append valid at any log end (``Change.at_end``),
        under the lock: ``data`` as the next version; lost, the same change created blind
        (``PartitionChange.at_end``, format 3) as the version after, up to
        ``BLIND_CREATES`` times. The lost version is read alongside the next create, not
        before it: a loss costs the store one round trip, not three. Both answers are
        needed before going on: the version read may hold our own bytes (the client
        retried a create that had landed), and then we won there and stop; a blind create
        that also won is a duplicate the fold turns into nothing
        (``BucketState.fold_at_end``). Then every version tried is folded (the bytes in
        hand; a version answered "exists" yet unreadable: the LIST of a refresh instead),
        and the fold says where ours went: ``last_shifts``. Returns the state after it,
        or None when it lost every race or the fold could not place it (its partition
        deleted, say: the next build says why)."""
        first = state.version + 1
        sent = {first: data}  # version -> our bytes
        created, found = self._create_unsettled(first, data, operation)
        if created:
            self._state = new_state
            self._remember(first, data, operation)
            return new_state
        known: dict[int, bytes] = {first: found} if found is not None else {}
        mine: list[int] = []
        blind_partitions = {k: replace(c, at_end=True) for k, c in change.partitions.items()}
        # Checked against these configs: one changed meanwhile folds the commit as nothing
        # (``BucketState.fold_at_end``), and the next build checks the batches again.
        configs = {topic_of(k): config_digest(state.topics[topic_of(k)].config)
                   for k in change.partitions}
        version = first
        with ThreadPoolExecutor(1, thread_name_prefix="seglog-commit-read") as pool:
            pending: dict[int, Future[bytes | None]] = {}
            if found is None:
                pending[first] = pool.submit(self._read_commit, first)
            for _ in range(BLIND_CREATES):
                if self._view_too_old():
                    break  # the next name may be one the collector freed: look again
                version += 1
                sent[version] = Commit(version, self.writer_id, self.clock.milliseconds(),
                                       operation, partitions=blind_partitions,
                                       configs=configs).encode()
                self._attempts.count += 1
                created, found = self._create_unsettled(version, sent[version], operation)
                if created:
                    mine.append(version)
                elif found is not None:
                    known[version] = found
                else:
                    pending[version] = pool.submit(self._read_commit, version)
                before = pending.get(version - 1)
                if created or (before is not None and before.result() == sent[version - 1]):
                    break  # won here, or the version before was ours after all
            for v, future in pending.items():
                read = future.result()
                if read is not None:
                    known[v] = read
        ours = [v for v in sent if v in mine or known.get(v) == sent[v]]
        known.update({v: sent[v] for v in mine})
        try:
            if all(v in known for v in range(first, version + 1)):
                self._fold(state, list(range(first, version + 1)), self._refreshed_ms,
                           known=known)
            else:
                # "Exists", yet nothing to read there (collected under a slow writer, or
                # a store that answered wrongly): the LIST says what the log holds.
                self.refresh()
        except KafkaStorageError as e:
            if not ours:
                raise
            raise CommitOutcomeUnknownError(
                f"{self.uri}: this {operation} was committed (version {ours[0]}) but the "
                f"versions before it could not be read to place it ({e}); refresh and "
                f"look before doing it again") from e
        for v in mine:
            self._remember(v, sent[v], operation)
        if not ours:
            logger.info("%s: lost the races for versions %d-%d (%s)", self.uri, first,
                        version, operation)
            return None
        shifts = self._placed(change)
        if shifts is None:
            return None  # folded as nothing: its partition is gone, say
        self._attempts.shifts = {k: v for k, v in shifts.items() if v}
        return self._state

    def _create_unsettled(self, version: int, data: bytes, operation: str
                          ) -> tuple[bool, bytes | None]:
        """Create commit ``version``: (True, None) ours; (False, None) "exists", not read
        (our own create retried by the client, or another writer's); (False, bytes)
        another writer's, read while settling a create that failed on the wire."""
        key = self.layout.commit_key(version)
        try:
            return self.storage.create(key, data), None
        except (StorageAccessDeniedError, BucketNotFoundError):
            raise  # refused outright: nothing was written
        except KafkaStorageError:
            return self._create(key, data, operation)

    def _read_commit(self, version: int) -> bytes | None:
        """Commit ``version``'s bytes; None when they cannot be read now (the fold reads
        them again and names the trouble)."""
        try:
            return self.storage.read(self.layout.commit_key(version))
        except (FileNotFoundError, KafkaStorageError):
            return None

    def _placed(self, change: Change) -> dict[str, int] | None:
        """Per partition, how far above ``change``'s offsets the fold put its first
        entry (the state holds it now); None when it is not there (folded as nothing)."""
        shifts: dict[str, int] = {}
        for key, pc in change.partitions.items():
            first = min(pc.add, key=lambda e: e.base_offset)
            ps = self._state.partitions.get(key)
            i = None if ps is None else index_of(ps.segments, first.key)
            if ps is None or i is None:
                return None
            shifts[key] = ps.segments[i].base_offset - first.base_offset
        return shifts

    def _remember(self, version: int, data: bytes, operation: str) -> None:
        """A commit this writer was told it created, to read back (``_check_own_commits``)."""
        self._unchecked[version] = (data, operation)
        if len(self._unchecked) > MAX_UNCHECKED:
            del self._unchecked[min(self._unchecked)]

    def _rebase(self, version: int, winner: bytes | None = None) -> None:
        """After losing the create of ``version`` again: fold the winner's commit (one
        GET, no LIST: its name is known), so that the next attempt builds at once on the
        state the winner made. Later commits are found by the next lost create. ``winner``:
        its bytes, when the lost create read them already (no request then)."""
        key = self.layout.commit_key(version)
        where = f"{self.storage.uri}/{key}"
        try:
            data = winner if winner is not None else self.storage.read(key)
        except FileNotFoundError:
            self.refresh()  # "exists" yet gone: collected under a slow writer
            return
        # The view's age stays that of the last LIST: the winner came after it, so the
        # commits after the winner are younger still, and the age check before the next
        # create keeps them uncollectable.
        try:
            self._state = self._apply(self._state, Commit.decode(data, where, version), where)
        except CorruptMetadataError as e:
            raise CorruptMetadataError(f"{e}. {repair_advice(self.uri)}") from None

    def _apply(self, state: BucketState, commit: Commit, where: str) -> BucketState:
        """``state.apply``, and in a topic log, no commit after its tombstone (version 0
        creates the topic; a state without it later is the tombstone's)."""
        if self.layout != CATALOG and state.version >= 0 and not state.topics \
                and not commit.at_end:
            raise CorruptMetadataError(
                f"{where}: follows the tombstone of its topic log (version {state.version} "
                f"deleted the topic): no commit may follow a tombstone")
        return state.apply(commit, where)

    def _rolled_back_message(self) -> str:
        version = self._state.version
        return (f"{self.storage.uri}/{self.layout.hint_key} names version "
                f"{self._hint_ahead}, beyond the newest "
                f"commit {version}: commits after {version} were deleted; refusing to write "
                f"over them. {repair_advice(self.uri)}")

    def view_age_ms(self) -> int:
        """How long ago the state's commits were last LISTed (open or refresh): a caller
        about to commit may skip its own refresh while this is well below
        ``MAX_VIEW_AGE_MS`` (``commit`` refreshes an older view itself, and a stale
        young one only loses its create)."""
        return self.clock.monotonic_ms() - self._refreshed_ms

    def _view_too_old(self) -> bool:
        """Whether the last LIST of the commits is older than ``MAX_VIEW_AGE_MS``."""
        return self.view_age_ms() > MAX_VIEW_AGE_MS

    def _create(self, key: str, data: bytes, operation: str) -> tuple[bool, bytes | None]:
        """Create commit ``key``: True if the object there is ours, False if another
        writer's. Our commit's bytes (writer id, timestamp) are unique to this attempt, so
        reading the key settles what the answer did not say: a create answered "exists"
        may be the client's retry of our own PUT that succeeded unseen, and one that
        failed on the wire may have landed. When nothing is there the same bytes are
        created again: if the first PUT lands late the server refuses it. Returns (ours,
        the bytes found there when another writer's: the loser folds them without reading
        them again)."""
        cause: KafkaStorageError | None = None
        for _ in range(2):
            try:
                if self.storage.create(key, data):
                    return True, None
                cause = None
            except (StorageAccessDeniedError, BucketNotFoundError):
                raise  # refused outright: nothing was written
            except KafkaStorageError as e:
                cause = e
            try:
                found = self.storage.read(key)
                return (True, None) if found == data else (False, found)
            except FileNotFoundError:
                if cause is None:
                    return False, None  # "exists" yet gone: not ours, the refresh will tell
            except KafkaStorageError as e:
                cause = e
                break
        raise CommitOutcomeUnknownError(
            f"{self.storage.uri}/{key}: the outcome of this {operation} is unknown: the "
            f"create of "
            f"the commit failed ({cause}) and the bucket could not say whether it landed; "
            f"it may be visible. Refresh and look before doing it again (a blindly "
            f"retried append may duplicate its records)") from cause

    def snapshot_if_due(self, state: BucketState) -> None:
        """Write the snapshot and the hint of ``state`` if its version is due one (every
        ``SNAPSHOT_EVERY``-th): the duty of that version's writer."""
        if state.version % SNAPSHOT_EVERY == 0:
            self._write_snapshot(state)

    def _write_snapshot(self, state: BucketState) -> None:
        try:
            # The hint is read while the snapshot uploads (two round trips on the
            # committer's path, not three): its answer only says whether a newer
            # snapshot's hint is there already, which no order of the two makes exact.
            with ThreadPoolExecutor(1, thread_name_prefix="seglog-hint") as pool:
                hinted = pool.submit(self._hint_version)
                self.storage.write_atomic(self.layout.snapshot_key(state.version),
                                          state.encode())
                crash_point("after-snapshot")
                hint = hinted.result()
            if hint is not None and hint >= state.version:
                # A slow writer: a newer snapshot's hint is there already. (A plain PUT
                # racing another can still lose; opens then probe for newer snapshots.)
                return
            self.storage.write_atomic(self.layout.hint_key,
                                      json.dumps({"version": state.version}).encode())
        except KafkaStorageError as e:
            # The commit stands; a later writer's snapshot covers it. Readers just fold
            # more commits meanwhile.
            logger.warning("%s: committed version %d but could not write its snapshot: %s",
                           self.uri, state.version, e)
