"""``AppendPipeline``: pipelined appends to a bucket log dir
(``BucketLogManager.append_async``), as Kafka's producer pipelines its requests
(``max.in.flight.requests.per.connection``).

A synchronous append is two requests one after the other: the ``.log`` PUT, then the
conditional commit PUT. A pipeline overlaps them across appends:

1. ``submit`` checks the batches at once (``bucket_append.checked_append``: a bad batch fails
   its future and nothing is uploaded), waits for room (back-pressure, the caller blocks:
   at most ``max_in_flight_bytes`` bytes between their call and their commit, Kafka's
   ``buffer.memory``), reserves offsets from the partition's predicted end (its committed
   end plus its appends in flight, in call order), stamps the batches and queues them for
   upload. At most ``max_in_flight`` uploads run at once (Kafka's in-flight requests),
   each on an upload thread that takes the next queued append as soon as its PUT ends:
   as Kafka's sender drains its accumulator, no hand-off to the caller's thread and back
   sits between one upload and the next (on a busy machine each hand-off waits for a
   core). An append whose upload finished waits for its commit without holding an upload
   slot: the next upload starts while the commit is out, as the peer of plain PUTs with
   the same concurrency would start it.
2. One committer thread commits in call order: every consecutive append at the head of the
   queue whose upload finished goes into ONE conditional commit (group commit across
   time: the commit request is paid once for all of them, whatever their partitions).
   A finished head first lingers for the uploads running behind it (``_linger_left``: at
   most ``linger_ms``, Kafka's ``linger.ms``; while a ``flush`` waits, until all of its
   uploads ended; never while a caller is blocked for room), so a burst pays one commit,
   not one per upload that happened to end while the last commit was out. A due
   snapshot is written after the commit's futures are completed.
3. A lost race commits the appends whose offsets moved at the new end, in order, with an
   ``offset_delta`` and no new upload (``bucket_append.restamp``, as ``append_many``); the
   prediction moves by as much, so later appends follow the new end.
4. A failure (an upload, a commit given up) fails the futures of the appends it covers
   and of every later append of the same partitions still in flight
   (``AppendAbortedError``: their offsets are void). The pipeline never retries a failed
   append, so nothing is reordered or duplicated. Uploads certainly not committed are
   deleted; after a failed commit request (``KafkaStorageError``) the covered appends'
   uploads stay (the commit may have landed; the collector removes orphans). A check that
   fails for one partition on a fresh state (its topic deleted, a new config refusing the
   batches) fails only that append and the later ones of its partition: the rest of the
   group commit is committed again without them.

A future completes only once its commit landed: acknowledged means committed, and
survives any crash. An append not yet acknowledged when its process dies is wholly
visible or absent (one commit holds all of it). A future is running from the call on:
``cancel()`` returns False, since an append the pipeline took is uploaded and committed
regardless (only the pipeline completes its futures; one completed by someone else is
logged and skipped, the committer goes on). An empty append completes in order with its
partition's others: with the last append before it (the log end after that one, or
``AppendAbortedError`` if it failed), at once with the committed end if none is in flight.
``flush()`` returns once the future of every append submitted before it is completed;
``close()`` flushes, then stops the threads.

Thread-safety: thread-safe. ``_cond`` (on one lock) guards the queue, the predictions and
the in-flight counts, the appends waiting for an upload thread and the futures not yet
completed; checks, stamping,
uploads and commits run outside it. A future's
callbacks run on the committer thread: one that blocks (a ``submit`` waiting for room)
stalls the pipeline.

Over 500 lines: one class whose steps (submit, linger, upload, group commit, settle,
release) share the state ``_cond`` guards; the per-log grouping of a commit
(``bucket_view.topic_groups``) added the last lines, and moving a step out would hand
that locked state across modules.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor
from dataclasses import dataclass, field

from ..errors import AppendAbortedError, ConfigError, KafkaStorageError, LogDirError, SeglogError
from ..log.log import AppendInfo
from .bucket_append import (
    PartitionAppend,
    change_of,
    checked_append,
    discard,
    restamp,
    settle,
    stamp,
    upload,
    upload_parts,
)
from .bucket_commit_log import Change
from .bucket_committer import BucketCommitter
from .bucket_state import BucketState
from .bucket_view import topic_groups

logger = logging.getLogger(__name__)


@dataclass(eq=False)
class _InFlight:
    """One append between its call and its future's completion. ``finished``: its upload
    ended (``error`` says how); ``void``: its future was failed, so its uploads are
    deleted by whoever touches them last; ``followers``: the futures of empty appends of
    its partition called after it, completed with it. Guarded by the pipeline's lock."""

    part: PartitionAppend
    future: Future[AppendInfo]
    size: int
    base: int  # the first offset reserved for it
    end: int  # the end reserved for it (exclusive)
    shift: int  # its partition's shift when it was reserved
    seq: int  # its place in the call order of the whole pipeline
    finished: bool = False
    finished_ms: int = 0  # when its upload ended (the manager's monotonic clock)
    error: BaseException | None = None
    void: bool = False
    followers: list[Future[AppendInfo]] = field(default_factory=list)


Outcome = tuple["Future[AppendInfo]", "AppendInfo | BaseException"]


class AppendPipeline:
    """The pipeline of one manager; see the module docstring."""

    def __init__(self, bucket: BucketCommitter, max_in_flight: int,
                 max_in_flight_bytes: int, linger_ms: int) -> None:
        for name, value, least in (("max_in_flight_appends", max_in_flight, 1),
                                   ("max_in_flight_bytes", max_in_flight_bytes, 1),
                                   ("linger.ms", linger_ms, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ConfigError(f"{name} of the manager of {bucket.uri} must be an integer "
                                  f"of at least {least}, got {value!r}")
        self._bucket = bucket
        self.max_in_flight = max_in_flight
        self.max_in_flight_bytes = max_in_flight_bytes
        self.linger_ms = linger_ms
        self._cond = threading.Condition(threading.Lock())
        # Guarded by _cond: appends not yet taken by the committer, in call order;
        # stamped appends waiting for an upload thread; the futures accepted and not yet
        # completed (what flush waits for); the in-flight totals (appends and bytes
        # between call and commit, upload threads running); per partition, the end its
        # next append is reserved at, the appends in flight, the last of them and how far
        # lost races moved it.
        self._queue: deque[_InFlight] = deque()
        self._ready: deque[_InFlight] = deque()
        # The appends taken whose upload has not finished, in call order; those finished
        # or void are dropped from the left when looked at (_linger_left), so finding
        # the oldest one running costs O(1) however many finished ones wait to commit.
        self._unfinished: deque[_InFlight] = deque()
        self._open: set[Future[AppendInfo]] = set()
        self._count = 0
        self._uploaders = 0
        self._bytes = 0
        self._blocked = 0  # callers waiting for room
        self._seq = 0  # the seq of the last append taken
        self._flushes: list[int] = []  # per flush() waiting: the seq of its last append
        self._predicted: dict[str, int] = {}
        self._per_partition: dict[str, int] = {}
        self._last: dict[str, _InFlight] = {}
        self._shift: dict[str, int] = {}
        self._closed = False
        self._pool = ThreadPoolExecutor(max_in_flight, thread_name_prefix="seglog-pipeline-put")
        self._committer = threading.Thread(target=self._run, name="seglog-pipeline-commit",
                                           daemon=True)
        self._committer.start()

    # -- the caller's side ---------------------------------------------------------------

    def submit(self, topic: str, partition: int, data: bytes | bytearray | memoryview
               ) -> Future[AppendInfo]:
        future: Future[AppendInfo] = Future()
        # Running from the start: an append the pipeline took cannot be withdrawn (its
        # upload and commit go on), so cancel() must say False, not pretend.
        future.set_running_or_notify_cancel()
        try:
            self._bucket.check_writable()
            part = checked_append(self._bucket, topic, partition, data)
        except SeglogError as e:
            future.set_exception(e)
            return future
        if part is None:
            return self._empty(f"{topic}-{partition}", future)
        span = part.headers[-1].last_offset + 1 - part.headers[0].base_offset
        size = len(part.buf)
        with self._cond:
            while not self._closed and self._count \
                    and self._bytes + size > self.max_in_flight_bytes:
                self._blocked += 1
                self._cond.notify_all()  # a lingering committer commits now
                try:
                    self._cond.wait()
                finally:
                    self._blocked -= 1
            if self._closed:
                future.set_exception(LogDirError(
                    f"the append pipeline of {self._bucket.uri} is closed: nothing of this "
                    f"append to {part.key} was uploaded"))
                return future
            key = part.key
            base = self._next_end(key)
            self._seq += 1
            entry = _InFlight(part, future, size, base, base + span, self._shift.get(key, 0),
                              self._seq)
            self._predicted[key] = entry.end
            self._per_partition[key] = self._per_partition.get(key, 0) + 1
            self._last[key] = entry
            self._count += 1
            self._bytes += size
            self._queue.append(entry)
            self._unfinished.append(entry)
            self._open.add(future)
        try:
            stamp(self._bucket, part, base)
        except BaseException as e:  # noqa: BLE001 - handed to the committer, which fails it
            self._finished(entry, e, uploaded=False)
            return future
        with self._cond:
            self._ready.append(entry)
            start = self._uploaders < self.max_in_flight
            if start:
                self._uploaders += 1
        if start:
            self._pool.submit(self._upload_ready)
        return future

    def _empty(self, key: str, future: Future[AppendInfo]) -> Future[AppendInfo]:
        """An append without batches completes in order with its partition's others: with
        the last append before it (the end after it; AppendAbortedError if it failed), or
        at once with the committed end when none is in flight."""
        with self._cond:
            last = self._last.get(key)
            if last is not None:
                last.followers.append(future)
                self._open.add(future)
                return future
            ps = self._bucket.state.partitions.get(key)
            end = ps.high_watermark if ps is not None else 0
        future.set_result(AppendInfo(end, end - 1, -1, -1, 0, 0))
        return future

    def _next_end(self, key: str) -> int:
        """Under the lock: where the partition's next append goes."""
        if self._per_partition.get(key):
            return self._predicted[key]
        ps = self._bucket.state.partitions.get(key)
        return ps.high_watermark if ps is not None else 0

    def flush(self) -> None:
        """Wait until the future of every append submitted before this call is completed
        (committed or failed). Not from a future's callback: those run on the committer."""
        with self._cond:
            pending = set(self._open)
            if not pending:
                return
            mark = self._seq
            self._flushes.append(mark)
            self._cond.notify_all()  # a lingering committer now waits for these uploads
            try:
                self._cond.wait_for(lambda: pending.isdisjoint(self._open))
            finally:
                self._flushes.remove(mark)

    def close(self) -> None:
        """Flush, then stop the committer and the upload threads. Idempotent."""
        self.flush()
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        self._committer.join()
        self._pool.shutdown(wait=True)

    # -- uploads -------------------------------------------------------------------------

    def _upload_ready(self) -> None:
        """One upload thread: uploads the queued appends in turn, until none is left."""
        while True:
            with self._cond:
                if not self._ready:
                    self._uploaders -= 1
                    return
                entry = self._ready.popleft()
                void = entry.void
            if void:  # failed before its upload started: nothing to upload or delete
                self._finished(entry, None, uploaded=False)
                continue
            error: BaseException | None = None
            try:
                upload(self._bucket.storage, entry.part.segments)
                entry.part.uploaded = True  # read by the committer once finished is set
            except BaseException as e:  # noqa: BLE001 - the committer fails its future
                error = e
            self._finished(entry, error, uploaded=True)

    def _finished(self, entry: _InFlight, error: BaseException | None, *,
                  uploaded: bool) -> None:
        with self._cond:
            entry.finished, entry.error = True, error
            entry.finished_ms = self._bucket.clock.monotonic_ms()
            void = entry.void
            self._cond.notify_all()
        if void and uploaded:  # failed while uploading: no commit will name these objects
            self._discard([entry])

    # -- the committer -------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._queue and self._queue[0].finished:
                        wait_ms = self._linger_left()
                        if wait_ms is not None and wait_ms <= 0:
                            break
                        # Any upload ending, a flush or a blocked caller notifies.
                        self._cond.wait(None if wait_ms is None else wait_ms / 1000)
                    elif self._closed and not self._queue:
                        return
                    else:
                        self._cond.wait()
                head = self._queue[0]
                batch: list[_InFlight] = []
                if head.error is not None:
                    self._queue.popleft()
                else:
                    while self._queue and self._queue[0].finished \
                            and self._queue[0].error is None:
                        batch.append(self._queue.popleft())
            try:
                if head.error is not None:
                    self._fail([head], head.error, certain=True)
                else:
                    self._commit_batch(batch)
            except BaseException:  # noqa: BLE001 - the committer must outlive any one append
                logger.exception("%s: the append pipeline's committer failed settling "
                                 "appends; it goes on with the next", self._bucket.uri)

    def _linger_left(self) -> int | None:
        """Under the lock, with a finished head: how long its commit should still wait
        for the uploads running behind it (0: commit now; None: until one ends).

        Every commit costs the store a request, so one commit for several appends is
        cheaper than one each. Waiting is worth it only while an upload that could join
        runs, and never while a caller is blocked for room (only a commit frees it).
        While a ``flush`` waits, its appends are committed once all their uploads ended:
        the flush returns with its last append, whose commit cannot start before its
        upload ended, so committing the earlier ones on their own only costs requests
        (and the last commit may then wait behind one of them). Otherwise the head waits
        at most ``linger_ms`` after its upload ended (Kafka's ``linger.ms``)."""
        head = self._queue[0]
        pending = self._unfinished
        while pending and (pending[0].finished or pending[0].void):
            pending.popleft()
        running = pending[0] if pending else None
        if running is None or head.error is not None or self._closed or self._blocked:
            return 0
        if self._flushes and running.seq <= max(self._flushes):
            return None
        return head.finished_ms + self.linger_ms - self._bucket.clock.monotonic_ms()

    def _commit_batch(self, batch: list[_InFlight]) -> None:
        """One commit per log (``bucket_view.topic_groups``), each landing on its own."""
        for group in topic_groups(self._bucket.state, {e.part.topic for e in batch}):
            self._commit_group([e for e in batch if e.part.topic in group])

    def _commit_group(self, batch: list[_InFlight]) -> None:
        """Commit ``batch`` (one log's). When a partition's append fails a check on a fresh
        state (its partition deleted, a new config refusing it) only that append and the
        later ones of its partition fail: the others are committed again without them."""
        while batch:
            failed: list[PartitionAppend] = []
            try:
                state = self._commit(batch, failed)
            except KafkaStorageError as e:  # the commit may have landed: uploads stay
                self._fail(batch, e, certain=False)
            except SeglogError as e:  # certainly not committed
                culprit = next((x for x in batch if failed and x.part is failed[-1]), None)
                if culprit is None:  # not one partition's (a lost race given up)
                    self._fail(batch, e, certain=True)
                    return
                key, at = culprit.part.key, batch.index(culprit)
                behind = [x for x in batch[at + 1:] if x.part.key == key]
                batch = [x for x in batch if x is not culprit and x not in behind]
                self._fail([culprit], e, certain=True, behind=behind)
                continue
            except BaseException as e:  # noqa: BLE001 - a bug must fail the futures, not hang them
                logger.exception("%s: the append pipeline's commit failed", self._bucket.uri)
                self._fail(batch, e, certain=False)
            else:
                self._committed(batch)
                if state is not None:
                    # After the futures: a snapshot only spares readers folding commits,
                    # so the appends it follows need not wait for its three requests.
                    self._bucket.commits.snapshot_if_due(state)
            return

    def _commit(self, batch: list[_InFlight], failed: list[PartitionAppend]
                ) -> BucketState | None:
        parts = [e.part for e in batch]

        def build(state: BucketState) -> Change:
            # Nothing to upload unless a lost race moved the offsets: the pipeline's
            # uploads are done, which is why these appends were taken. ``failed`` says
            # which part the last build's check refused.
            failed.clear()
            upload_parts(self._bucket.storage, restamp(self._bucket, state, parts, failed))
            return change_of(parts)

        state = self._bucket.commit("append", build, snapshot=False)
        settle(self._bucket, parts)
        return state

    def _committed(self, batch: list[_InFlight]) -> None:
        outcomes: list[Outcome] = []
        with self._cond:
            last: dict[str, _InFlight] = {}
            for entry in batch:
                last[entry.part.key] = entry
            for key, entry in last.items():
                # How far lost races moved this partition since the entry was reserved;
                # later reservations follow the committed end from now on.
                moved = (entry.part.next_offset
                         - (entry.end + self._shift.get(key, 0) - entry.shift))
                if moved and self._per_partition.get(key, 0) > sum(
                        1 for e in batch if e.part.key == key):
                    self._shift[key] = self._shift.get(key, 0) + moved
                    self._predicted[key] += moved
            self._release(batch)
            for entry in batch:
                info = entry.part.info()
                outcomes.append((entry.future, info))
                end = info.last_offset + 1
                outcomes += [(f, AppendInfo(end, end - 1, -1, -1, 0, 0))
                             for f in entry.followers]
        self._settle(outcomes)

    def _fail(self, covered: list[_InFlight], error: BaseException, *, certain: bool,
              behind: list[_InFlight] | None = None) -> None:
        """Fail ``covered`` with ``error``; ``behind`` (later appends of their partitions
        taken off a batch) and every later append of their partitions still queued with
        ``AppendAbortedError``; delete what is certainly not committed."""
        keys = {e.part.key for e in covered}
        with self._cond:
            queued = [e for e in self._queue if e.part.key in keys]
            for entry in queued:
                self._queue.remove(entry)
            later = (behind or []) + queued
            doomed = covered + later
            for entry in doomed:
                entry.void = True
            self._release(doomed)
            gone = [e for e in later if e.finished] + (covered if certain else [])
        self._discard(gone)
        outcomes: list[Outcome] = [(e.future, error) for e in covered]
        for entry in later:
            outcomes.append((entry.future, self._aborted(
                error, f"append to {entry.part.key} of {self._bucket.uri} (offsets "
                f"{entry.base}..{entry.end - 1} reserved)")))
        for entry in doomed:
            outcomes += [(f, self._aborted(error, f"empty append to {entry.part.key} of "
                                                  f"{self._bucket.uri}"))
                         for f in entry.followers]
        self._settle(outcomes)

    @staticmethod
    def _aborted(error: BaseException, what: str) -> AppendAbortedError:
        aborted = AppendAbortedError(
            f"{what} was not committed: an earlier append of the partition failed "
            f"({error}); nothing of it is visible")
        aborted.__cause__ = error
        return aborted

    def _settle(self, outcomes: list[Outcome]) -> None:
        """Complete the futures (outside the lock: their callbacks run here), then let
        ``flush`` see them done. A future its caller completed already (misuse: only the
        pipeline may) is logged and skipped: the committer must go on."""
        for future, outcome in outcomes:
            try:
                if isinstance(outcome, BaseException):
                    future.set_exception(outcome)
                else:
                    future.set_result(outcome)
            except InvalidStateError:
                logger.warning("%s: an append_async future was completed by someone else "
                               "before the pipeline (%s); the append's outcome was %r",
                               self._bucket.uri, future, outcome)
        with self._cond:
            self._open.difference_update(f for f, _ in outcomes)
            self._cond.notify_all()

    def _release(self, entries: list[_InFlight]) -> None:
        """Under the lock: ``entries`` leave the in-flight totals; wake blocked callers."""
        for entry in entries:
            key = entry.part.key
            self._count -= 1
            self._bytes -= entry.size
            left = self._per_partition[key] - 1
            if left:
                self._per_partition[key] = left
            else:  # idle: the next append follows the committed end
                del self._per_partition[key]
                self._predicted.pop(key, None)
                self._shift.pop(key, None)
                self._last.pop(key, None)
        self._cond.notify_all()

    def _discard(self, entries: list[_InFlight]) -> None:
        for entry in entries:
            try:
                discard(self._bucket.storage, entry.part.segments)
            except KafkaStorageError as e:  # an orphan the collector removes later
                logger.warning("%s: could not delete the uploads of a failed append to %s: "
                               "%s", self._bucket.uri, entry.part.key, e)
