"""``CommitLogReader``: the read side of a bucket commit log (``bucket_commit_log``
writes): open, refresh, the fold of the commits, read-ahead, snapshots read.

What is visible is the fold of ``_seglog/log/<version>.json`` (under the log's
``LogLayout`` prefix). Snapshots (``_seglog/snapshots/<version>.json``) and the hint
(``_seglog/last-snapshot``) only summarise commits: a reader that finds a snapshot or
the hint missing, late, damaged or never written (its writer died) folds more commits,
and nothing else changes.

- **Open** (bounded requests): GET the hint ``_seglog/last-snapshot``, GET that snapshot,
  LIST ``_seglog/log/``, GET each commit after the snapshot (at most ``SNAPSHOT_EVERY``
  of them unless a snapshot writer died or has not written it yet). A missing or damaged
  hint, or a hint naming a missing snapshot, falls back to probing the snapshot names
  (``SNAPSHOT_PROBES``), then LISTing the snapshots, then folding from version 0.
- **Refresh**: one LIST of ``_seglog/log/`` after the state's version (``list_after``:
  the server skips older names) and a GET per newer commit. A reader's log
  (``read_ahead``: a read-only manager's) whose last refresh found N commits of other
  writers sends the GETs of the next N versions (at most ``READ_AHEAD_MAX``) beside the
  LIST: a reader of a log written at a steady rate (a source's trigger, a task, a
  consumer) then sees the new commits in one round trip, not two; an idle log's refresh
  stays one LIST, and a writer's requests are unchanged. Read-ahead bytes are used only
  where the LIST names that version with their size (the LIST stays the only word on
  what exists). When the next version is missing but later ones exist, old commits were
  collected under a slow reader: it reloads from the newest snapshot.
- **Own commits read back**: a writer checks the commits it created against the LIST
  (sizes, free), and reads them back when another writer's newer commit appears
  (``_check_own_commits``): a store that ignored create-if-absent is named.

Thread-safety: thread-safe. ``_lock`` guards the state it caches (``_state``,
``_refreshed_ms``), held to open, to refresh and (by the writer) to create a commit.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Collection, Mapping
from concurrent.futures import ThreadPoolExecutor

from ..errors import (
    ConditionalWriteNotEnforcedError,
    CorruptMetadataError,
    KafkaStorageError,
)
from ..storage.storage import Storage
from ..util.clock import SYSTEM_CLOCK, Clock
from ..util.shared_pools import joined, settle, submit_all
from .bucket_state import (
    CATALOG,
    SNAPSHOT_EVERY,
    BucketState,
    Commit,
    LogLayout,
    parse_version_name,
    version_name,
)

logger = logging.getLogger(__name__)

SNAPSHOT_PROBES = 3
"""Snapshot names an open tries (GETs from the newest listed version down) before it
LISTs the snapshots."""
MAX_VIEW_AGE_MS = 10_000
"""A writer never creates a commit from a view (its last LIST of the commits) older than
this: it refreshes first. Fixed, not derived from any config: the collector keeps every
commit and snapshot at least ``bucket_collect.METADATA_MIN_DELAY_MS`` (60 s, well above
this) by the store's clock, whatever anyone's ``file.delete.delay.ms``, so every commit
made since the writer looked is still there and wins the create against it."""
MAX_READ_BACK = 50
"""Of the own commits a writer remembers (``bucket_commit_log.MAX_UNCHECKED``), the most a
refresh reads back (the newest); older ones are compared by their
listed size only, so a second writer appearing after a long lone run costs a bounded
number of GETs."""
READ_AHEAD_MAX = 8
"""The most versions a reader's refresh GETs ahead beside its LIST (as many as its last
refresh found; a guess too high costs a 404 GET each, in the same round trip)."""
FETCH_THREADS = 16
"""The most commits a refresh reads at once."""


def repair_advice(uri: str) -> str:
    """What an error about a log that no longer folds tells the operator to do."""
    return (
        f"`seglog repair {uri}` shows what ending the log before the damage would "
        f"lose, and does it with --execute (docs/troubleshooting.md)"
    )


def read_hint(storage: Storage, layout: LogLayout, uri: str) -> int | None:
    """The version the log's hint names; None when there is none or it is damaged (only
    a hint: the snapshot names are probed instead, nothing is lost)."""
    try:
        raw = storage.read(layout.hint_key)
    except FileNotFoundError:
        return None
    try:
        version: object = json.loads(raw)["version"]
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise ValueError(f"version {version!r}")
    except (ValueError, KeyError, TypeError) as e:
        logger.warning(
            "%s/%s is damaged (%s); looking for the snapshots instead", uri, layout.hint_key, e
        )
        return None
    return version


class CommitLogReader:
    """The read side of the commit log of one bucket log dir (see the module docstring):
    a complete reader by itself; ``CommitLog`` adds the commits."""

    def __init__(
        self,
        storage: Storage,
        *,
        clock: Clock = SYSTEM_CLOCK,
        writer_id: str | None = None,
        layout: LogLayout = CATALOG,
        load: bool = True,
        read_ahead: bool = False,
    ) -> None:
        """``layout``: where this log's objects are (the catalog log by default; a topic
        log's: ``bucket_state.topic_layout``). ``load=False``: a log known to be new (a
        topic id just drawn), opened empty without a request. ``read_ahead``: a reader's
        log (see the module docstring's Refresh)."""
        self.storage = storage
        self.layout = layout
        self.clock = clock
        self.writer_id = writer_id or uuid.uuid4().hex[:16]
        self._lock = threading.RLock()  # guards _state, _refreshed_ms
        self._state = BucketState()
        self._damaged: set[str] = set()  # snapshots that failed to parse, for messages
        self._refreshed_ms = clock.monotonic_ms()
        self.read_ahead = read_ahead
        # How many commits of other writers the last refresh folded: a reader's next one
        # reads as many following versions ahead, beside its LIST (READ_AHEAD_MAX).
        self._others_seen = 0
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
        return read_hint(self.storage, self.layout, self.uri)

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
        listed = sorted(
            v
            for v in (
                parse_version_name(e.name) for e in self.storage.list_dir(self.layout.snapshot_dir)
            )
            if v is not None and above < v <= newest
        )
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
            ahead = (
                [
                    v
                    for v in range(state.version + 1, state.version + 1 + self._others_seen)
                    if v not in known
                ]
                if self.read_ahead and state.version >= 0
                else []
            )
            # The GETs beside the LIST, on a process-wide pool: a trigger starts no thread.
            early = submit_all("commit-read-ahead", self._read_commit, ahead)
            with joined(early):
                sizes = self._list_commit_sizes(min(oldest, state.version))
            # Immutable once created; a size the LIST disagrees with (a store that let a
            # second create replace it) is read again by the fold.
            read = zip(ahead, settle(early), strict=True)
            known.update({v: b for v, b in read if b is not None and sizes.get(v) == len(b)})
            for version in [v for v in self._unchecked if v not in sizes]:
                del self._unchecked[version]  # collected (old) or never listed
            own = frozenset(self._unchecked)
            if own:
                self._check_own_commits(sizes, others=max(sizes, default=-1) > state.version)
            listed = sorted(v for v in sizes if v >= state.version)
            changed = self._fold(state, listed, started_ms, own=own, known=known)
            # Own commits are in the state already: what a refresh folds is others'.
            self._others_seen = min(max(self._state.version - state.version, 0), READ_AHEAD_MAX)
            return changed

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
        suspects = [v for v in versions if v in read_back or sizes[v] != len(mine[v][0])]
        # All at once: after another writer's commit a writer may read back dozens of its
        # own, and one GET after the other would hold its caller that many round trips.
        fetched = self._fetch(suspects)
        for version in suspects:
            data, operation = mine[version]
            found = fetched.get(version)
            if found is None:
                try:
                    found = self.storage.read(self.layout.commit_key(version))
                except FileNotFoundError:
                    continue  # listed, then collected: the fold says if anything is wrong
            if found != data:
                self._state = BucketState()
                self._load()
                error = self._forked(version, operation, found)
                self._refusal = str(error)
                raise error

    def _fork_below(
        self, commit: Commit, error: CorruptMetadataError
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
            f"and run at most one writer on it until it passes"
        )
        self._refusal = message
        return ConditionalWriteNotEnforcedError(message)

    def _forked(
        self, version: int, operation: str, found: bytes
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
            f"until it passes"
        )

    def _fold(
        self,
        state: BucketState,
        listed: list[int],
        started_ms: int,
        *,
        open_: bool = False,
        own: Collection[int] = (),
        known: Mapping[int, bytes] | None = None,
    ) -> bool:
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
                    f"{repair_advice(self.uri)}"
                )
        if open_ and len(listed) > SNAPSHOT_EVERY:
            state = self._newer_snapshot(state.version, listed[-1]) or state
        run: list[int] = []  # the listed commits that follow the state without a gap
        for version in listed:
            if version == state.version + 1 + len(run):
                run.append(version)
            elif version > state.version:
                break
        known = known or {}
        fetched = {
            **self._fetch([v for v in run if v not in known]),
            **{v: known[v] for v in run if v in known},
        }
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
                    raise CorruptMetadataError(f"{where} was listed but cannot be read") from None
            commit: Commit | None = None
            try:
                commit = Commit.decode(data, where, version)
                state = self._apply(state, commit, where)
            except CorruptMetadataError as e:
                if commit is not None and version - 1 in own and commit.writer != self.writer_id:
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

        with ThreadPoolExecutor(
            min(len(versions), FETCH_THREADS), thread_name_prefix="seglog-commit-fetch"
        ) as pool:
            read = pool.map(self._read_commit, versions)
            return {v: data for v, data in zip(versions, read, strict=True) if data is not None}

    def _snapshot_over_gap(self, state: BucketState, listed_next: int, newest: int) -> BucketState:
        """The newest snapshot, when it covers the commits missing before ``listed_next``;
        else CorruptMetadataError naming the first missing one (and any damaged snapshot
        that might have held it)."""
        newer = self._newer_snapshot(state.version, newest)
        if newer is None or newer.version < listed_next - 1:
            damaged = (
                f" (damaged, so not used: {', '.join(sorted(self._damaged))})"
                if self._damaged
                else ""
            )
            raise CorruptMetadataError(
                f"{self.uri}: commit {state.version + 1} is missing (the log lists "
                f"{listed_next} next) and no snapshot covers it{damaged}. "
                f"{repair_advice(self.uri)}"
            )
        return newer

    def _read_commit(self, version: int) -> bytes | None:
        """Commit ``version``'s bytes; None when they cannot be read now (the fold reads
        them again and names the trouble)."""
        try:
            return self.storage.read(self.layout.commit_key(version))
        except (FileNotFoundError, KafkaStorageError):
            return None

    def _apply(self, state: BucketState, commit: Commit, where: str) -> BucketState:
        """``state.apply``, and in a topic log, no commit after its tombstone (version 0
        creates the topic; a state without it later is the tombstone's)."""
        if self.layout != CATALOG and state.version >= 0 and not state.topics and not commit.at_end:
            raise CorruptMetadataError(
                f"{where}: follows the tombstone of its topic log (version {state.version} "
                f"deleted the topic): no commit may follow a tombstone"
            )
        return state.apply(commit, where)

    def _rolled_back_message(self) -> str:
        version = self._state.version
        return (
            f"{self.storage.uri}/{self.layout.hint_key} names version "
            f"{self._hint_ahead}, beyond the newest "
            f"commit {version}: commits after {version} were deleted; refusing to write "
            f"over them. {repair_advice(self.uri)}"
        )

    def view_age_ms(self) -> int:
        """How long ago the state's commits were last LISTed (open or refresh), or this
        writer's create made the state's version (``CommitLog._won``): a caller
        about to commit may skip its own refresh while this is well below
        ``MAX_VIEW_AGE_MS`` (``commit`` refreshes an older view itself, and a stale
        young one only loses its create)."""
        return self.clock.monotonic_ms() - self._refreshed_ms

    def _view_too_old(self) -> bool:
        """Whether the view (``view_age_ms``) is older than ``MAX_VIEW_AGE_MS``."""
        return self.view_age_ms() > MAX_VIEW_AGE_MS
