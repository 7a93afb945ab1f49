"""``CommitLog``: the bucket engine's optimistic commit protocol over a ``Storage``: the
write side of a commit log (its read side, open, refresh and the fold, is
``bucket_commit_reader.CommitLogReader``, which it extends).

No lock, no lease. What is visible is the fold of ``_seglog/log/<version>.json``; a
writer makes version ``current + 1`` visible by creating that object with
create-if-absent, of which exactly one concurrent creator wins (``Storage.create``).

- **Commit**: ``commit_steps(operation, attempt)`` yields the state to build on; its
  caller builds (uploads what the commit will reference, unique names) and leaves the
  change (or None) in ``attempt`` (``Attempt``: the caller drives the loop;
  ``commit(operation, build)`` is that loop over a callable ``build``). A check of
  ``build`` that fails (``SeglogError``) on a state this process cached refreshes it and
  builds again if it changed: an error is only raised on a state just read from the
  bucket. The change is folded into the state (``BucketState.apply``), then created as
  the next version, never from a view older than ``MAX_VIEW_AGE_MS`` (checked before
  ``build`` and again under the lock just before the create; a view too old is
  refreshed, and a state that moved is built on again): else ``current + 1`` could be a
  name the collector freed, and the create would fork the log. The view's age is that
  of its last LIST or of this writer's last won create, as good a look (``_won``). A
  create's outcome is settled by reading the key when its answer did not say
  (``bucket_commit_create``). On a lost race the writer folds the new commits (the
  first loss: one LIST, the missed commits read in parallel; later ones: the winner's
  commit, one GET) and yields the new state at once, to build again: a logical rebase
  (an append keeps its uploads and commits them with an ``offset_delta``; a merge keeps
  its upload while its sources are there; an operation whose inputs vanished raises).
  An append (``Change.at_end``) does not wait for that: it creates the next version at
  once, blind, its entries placed at the log end by the fold, and reads the version it
  lost alongside (``_create_at_end``): one round trip a loss. After
  ``TURN_AFTER_LOSSES`` losses it asks the other writers for the turn (``bucket_turn``:
  a writer in a tight loop would win every race otherwise); after ``FAST_RETRIES`` it
  backs off with jitter before it looks again; after ``max_attempts`` a
  ``CommitConflictError`` names the URI.
- The writer of a version divisible by ``SNAPSHOT_EVERY`` writes its snapshot, then the
  hint, after the commit is acknowledged and off the caller's path
  (``bucket_snapshot_writer.SnapshotWriter``). So a commit waits for its create only,
  and a writer whose view is current (it made the last commit) reads nothing before it.

Crash steps (``SEGLOG_CRASH_AT=<step>``, ``crash_points``): ``after-upload`` (objects
uploaded, no commit), ``after-commit`` (commit created, no snapshot), ``after-snapshot``
(snapshot written, hint not). A crash anywhere leaves either the old or the new version
visible, whole; uploads no commit references are collected later.

Thread-safety: thread-safe. ``_lock`` (``CommitLogReader``'s) guards the state it
caches and is held only to refresh and to create a commit: ``build`` (the uploads) and
the snapshot run outside it, so one large append does not hold up the other commits of
the process; a thread whose state moved while it built (another thread committed)
builds again, as after a lost race.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace

from ..errors import (
    CommitConflictError,
    CommitOutcomeUnknownError,
    ConditionalWriteNotEnforcedError,
    CorruptMetadataError,
    KafkaStorageError,
    SeglogError,
)
from ..storage.storage import Storage
from ..util.clock import SYSTEM_CLOCK, Clock
from ..util.crash_points import CRASH_ENV as CRASH_ENV  # the tests' spelling, kept
from ..util.crash_points import crash_point
from .bucket_commit_attempt import Attempt as Attempt  # the commit API, importable here
from .bucket_commit_attempt import Change as Change
from .bucket_commit_attempt import _Attempts, placed_shifts
from .bucket_commit_create import create_settled, create_unsettled
from .bucket_commit_reader import CommitLogReader, repair_advice
from .bucket_snapshot_writer import SnapshotWriter, snapshot_due
from .bucket_state import (
    CATALOG,
    BucketState,
    Commit,
    LogLayout,
    config_digest,
    topic_of,
)
from .bucket_turn import TURN_AFTER_LOSSES, Look, Turns

logger = logging.getLogger(__name__)

CRASH_STEPS = ("after-upload", "after-commit", "after-snapshot")
"""Named steps of a bucket commit where a test may kill the process (``crash_point``)."""
MAX_ATTEMPTS = 20
MAX_UNCHECKED = 1000
"""Own commits a writer remembers to read back (``CommitLog._check_own_commits``): a
lone writer's, from its last look at another writer's commit on."""
BACKOFF_MS = (10, 1000)
"""The first and the largest sleep between attempts (doubling, with full jitter)."""
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


class CommitLog(CommitLogReader):
    """The commit log of one bucket log dir; see the module docstring."""

    def __init__(
        self,
        storage: Storage,
        *,
        clock: Clock = SYSTEM_CLOCK,
        writer_id: str | None = None,
        max_attempts: int = MAX_ATTEMPTS,
        sleep: Callable[[float], None] = time.sleep,
        layout: LogLayout = CATALOG,
        load: bool = True,
        read_ahead: bool = False,
    ) -> None:
        """``max_attempts``: creates tried before ``CommitConflictError``; ``sleep``: the
        backoff's (tests pass a fake); the rest is ``CommitLogReader``'s."""
        self.max_attempts = max_attempts
        self._sleep = sleep
        self._attempts = _Attempts()
        super().__init__(
            storage,
            clock=clock,
            writer_id=writer_id,
            layout=layout,
            load=load,
            read_ahead=read_ahead,
        )
        self.turns = Turns(storage, self.writer_id, clock, sleep, layout.turn_key)
        self.snapshots = SnapshotWriter(storage, layout, self.uri)

    def sibling(self, layout: LogLayout, *, load: bool = True) -> CommitLog:
        """Another log of the same log dir (a topic log), with this one's writer id and
        settings."""
        return CommitLog(
            self.storage,
            clock=self.clock,
            writer_id=self.writer_id,
            max_attempts=self.max_attempts,
            sleep=self._sleep,
            layout=layout,
            load=load,
            read_ahead=self.read_ahead,
        )

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

    # -- writing ---------------------------------------------------------------------

    def commit(
        self,
        operation: str,
        build: Callable[[BucketState], Change | None],
        *,
        snapshot: bool = True,
    ) -> BucketState | None:
        """``commit_steps`` with ``build`` making each attempt's change: the new state,
        or None when ``build`` said there is nothing to do. For callers inside the engine
        whose ``build`` is their own (a caller above it drives ``commit_steps``)."""
        attempt = Attempt()
        for state in self.commit_steps(operation, attempt, snapshot=snapshot):
            with attempt:
                attempt.change = build(state)
        return attempt.result

    def commit_steps(
        self, operation: str, attempt: Attempt, *, snapshot: bool = True
    ) -> Iterator[BucketState]:
        """Make a change the next version, the caller building it (``Attempt``): yields
        the state to build on, then takes ``attempt``'s change (None: nothing to do) or
        its build's error, and yields again after a lost race; ``attempt.result`` is the
        new state at the end (None: nothing to do). Retries a lost race (see the module
        docstring); raises CommitConflictError after ``max_attempts``. A due snapshot is
        started after the create and not waited for; ``snapshot=False`` leaves it to the
        caller (``snapshot_if_due``). Either way a crash may leave a commit without its
        snapshot, which readers and the collector cope with."""
        attempt.result = None
        if self._refusal is not None:
            raise ConditionalWriteNotEnforcedError(
                f"{self.uri}: refusing to commit {operation}: this writer saw the store "
                f"ignore create-if-absent before ({self._refusal})"
            )
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
                logger.info(
                    "%s: lost the race for version %d (%s, attempt %d); retrying",
                    self.uri,
                    state.version + 1,
                    operation,
                    n + 1,
                )
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
            f"{self._state.version}); nothing of this {operation} is visible"
        )

    def _attempt(
        self,
        operation: str,
        attempt: Attempt,
        state: BucketState,
        n: int,
        fresh: bool,
        look: Look | None,
    ) -> tuple[BucketState | None, bool | None]:
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
        commit = Commit(
            version,
            self.writer_id,
            self.clock.milliseconds(),
            operation,
            change.topics,
            change.partitions,
            change.sinks,
            change.topic_logs,
        )
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
                sent_ms = self.clock.monotonic_ms()
                created, winner = create_settled(self.storage, key, data, operation)
                if not created:
                    if n:
                        self._rebase(version, winner)
                    else:
                        # The first loss: how far behind is unknown (a writer in a loop may
                        # be hundreds of versions ahead); one LIST says.
                        self.refresh({version: winner} if winner is not None else None)
                    return None, False
                self._won(new_state, sent_ms)
                self._remember(version, data, operation)
        crash_point("after-commit")
        return new_state, True

    def _create_at_end(
        self,
        operation: str,
        change: Change,
        state: BucketState,
        data: bytes,
        new_state: BucketState,
    ) -> BucketState | None:
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
        sent_ms = self.clock.monotonic_ms()
        created, found = create_unsettled(
            self.storage, self.layout.commit_key(first), data, operation
        )
        if created:
            self._won(new_state, sent_ms)
            self._remember(first, data, operation)
            return new_state
        known: dict[int, bytes] = {first: found} if found is not None else {}
        mine: list[int] = []
        blind_partitions = {k: replace(c, at_end=True) for k, c in change.partitions.items()}
        # Checked against these configs: one changed meanwhile folds the commit as nothing
        # (``BucketState.fold_at_end``), and the next build checks the batches again.
        configs = {
            topic_of(k): config_digest(state.topics[topic_of(k)].config) for k in change.partitions
        }
        version = first
        with ThreadPoolExecutor(1, thread_name_prefix="seglog-commit-read") as pool:
            pending: dict[int, Future[bytes | None]] = {}
            if found is None:
                pending[first] = pool.submit(self._read_commit, first)
            for _ in range(BLIND_CREATES):
                if self._view_too_old():
                    break  # the next name may be one the collector freed: look again
                version += 1
                sent[version] = Commit(
                    version,
                    self.writer_id,
                    self.clock.milliseconds(),
                    operation,
                    partitions=blind_partitions,
                    configs=configs,
                ).encode()
                self._attempts.count += 1
                created, found = create_unsettled(
                    self.storage, self.layout.commit_key(version), sent[version], operation
                )
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
                self._fold(state, list(range(first, version + 1)), self._refreshed_ms, known=known)
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
                f"look before doing it again"
            ) from e
        for v in mine:
            self._remember(v, sent[v], operation)
        if not ours:
            logger.info(
                "%s: lost the races for versions %d-%d (%s)", self.uri, first, version, operation
            )
            return None
        shifts = placed_shifts(change, self._state)
        if shifts is None:
            return None  # folded as nothing: its partition is gone, say
        self._attempts.shifts = {k: v for k, v in shifts.items() if v}
        return self._state

    def _won(self, new_state: BucketState, sent_ms: int) -> None:
        """Take ``new_state``, whose version this writer created (sent at ``sent_ms``),
        and that create as a look as good as a LIST sent then: it landed when the log
        ended below it (no version is created before the one under it exists), so every
        later commit is younger and kept by the collector. A lone writer thus never LISTs
        before its create (before: once every ``MAX_VIEW_AGE_MS``)."""
        self._state = new_state
        self._refreshed_ms = max(self._refreshed_ms, sent_ms)

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

    def snapshot_if_due(self, state: BucketState) -> None:
        """Start writing the snapshot and the hint of ``state`` if its version is due one
        (every ``SNAPSHOT_EVERY``-th), the duty of that version's writer, without waiting
        for them (``SnapshotWriter``)."""
        if snapshot_due(state):
            self.snapshots.submit(state)

    def flush_snapshots(self) -> None:
        """Wait for the snapshots this log's commits started (``snapshot_if_due``)."""
        self.snapshots.flush()
