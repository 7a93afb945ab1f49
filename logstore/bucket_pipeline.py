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
3. A lost race re-stamps and re-uploads, in order, the appends whose offsets moved
   (``bucket_append.restamp``, as ``append_many`` does); the partition's prediction then
   moves by as much, so appends submitted later follow the new end (those already in
   flight are re-stamped at their own commit).
4. A failure (an upload, a commit given up) fails the futures of the appends it covers
   and of every later append of the same partitions still in flight
   (``AppendAbortedError``: their offsets are void). The pipeline never retries a failed
   append, so nothing is reordered or duplicated. Uploads certainly not committed are
   deleted; after a failed commit request (``KafkaStorageError``) the covered appends'
   uploads stay (the commit may have landed; the collector removes orphans).

A future completes only once its commit landed: acknowledged means committed, and
survives any crash. An append not yet acknowledged when its process dies is wholly
visible or absent (one commit holds all of it). ``flush()`` waits for every append
submitted before it; ``close()`` flushes, then stops the threads.

Thread-safety: thread-safe. ``_cond`` (on one lock) guards the queue, the predictions and
the in-flight counts and the appends waiting for an upload thread; checks, stamping,
uploads and commits run outside it. A future's
callbacks run on the committer thread: one that blocks (a ``submit`` waiting for room)
stalls the pipeline.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .bucket_append import (
    PartitionAppend,
    change_of,
    checked_append,
    discard,
    restamp,
    stamp,
    upload,
    upload_parts,
)
from .bucket_commit_log import Change
from .bucket_state import BucketState
from .errors import AppendAbortedError, ConfigError, KafkaStorageError, LogDirError, SeglogError
from .log import AppendInfo

if TYPE_CHECKING:
    from .bucket_manager import BucketLogManager

logger = logging.getLogger(__name__)


@dataclass(eq=False)
class _InFlight:
    """One append between its call and its future's completion. ``finished``: its upload
    ended (``error`` says how); ``void``: its future was failed, so its uploads are
    deleted by whoever touches them last. Guarded by the pipeline's lock."""

    part: PartitionAppend
    future: Future[AppendInfo]
    size: int
    base: int  # the first offset reserved for it
    end: int  # the end reserved for it (exclusive)
    shift: int  # its partition's shift when it was reserved
    finished: bool = False
    error: BaseException | None = None
    void: bool = False


class AppendPipeline:
    """The pipeline of one manager; see the module docstring."""

    def __init__(self, mgr: BucketLogManager, max_in_flight: int,
                 max_in_flight_bytes: int) -> None:
        for name, value in (("max_in_flight_appends", max_in_flight),
                            ("max_in_flight_bytes", max_in_flight_bytes)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} of the manager of {mgr.uri} must be an integer "
                                  f"of at least 1, got {value!r}")
        self._mgr = mgr
        self.max_in_flight = max_in_flight
        self.max_in_flight_bytes = max_in_flight_bytes
        self._cond = threading.Condition(threading.Lock())
        # Guarded by _cond: appends not yet taken by the committer, in call order; the
        # batch it is committing; stamped appends waiting for an upload thread; the
        # in-flight totals (appends and bytes between call and commit, upload threads
        # running); per partition, the end its next append is reserved at, the appends in
        # flight and how far lost races moved it.
        self._queue: deque[_InFlight] = deque()
        self._committing: list[_InFlight] = []
        self._ready: deque[_InFlight] = deque()
        self._count = 0
        self._uploaders = 0
        self._bytes = 0
        self._predicted: dict[str, int] = {}
        self._per_partition: dict[str, int] = {}
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
        try:
            self._mgr.check_writable()
            part = checked_append(self._mgr, topic, partition, data)
        except SeglogError as e:
            future.set_exception(e)
            return future
        if part is None:  # no batches: the predicted end, nothing appended
            with self._cond:
                end = self._next_end(f"{topic}-{partition}")
            future.set_result(AppendInfo(end, end - 1, -1, -1, 0, 0))
            return future
        span = part.headers[-1].last_offset + 1 - part.headers[0].base_offset
        size = len(part.buf)
        with self._cond:
            while not self._closed and self._count \
                    and self._bytes + size > self.max_in_flight_bytes:
                self._cond.wait()
            if self._closed:
                future.set_exception(LogDirError(
                    f"the append pipeline of {self._mgr.uri} is closed: nothing of this "
                    f"append to {part.key} was uploaded"))
                return future
            key = part.key
            base = self._next_end(key)
            entry = _InFlight(part, future, size, base, base + span, self._shift.get(key, 0))
            self._predicted[key] = entry.end
            self._per_partition[key] = self._per_partition.get(key, 0) + 1
            self._count += 1
            self._bytes += size
            self._queue.append(entry)
        try:
            stamp(self._mgr, part, base)
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

    def _next_end(self, key: str) -> int:
        """Under the lock: where the partition's next append goes."""
        if self._per_partition.get(key):
            return self._predicted[key]
        ps = self._mgr.state.partitions.get(key)
        return ps.high_watermark if ps is not None else 0

    def flush(self) -> None:
        """Wait until every append submitted before this call is committed or failed."""
        with self._cond:
            pending = [e.future for e in self._queue] + [e.future for e in self._committing]
        wait_futures(pending)

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
                upload(self._mgr.storage, entry.part.segments)
                entry.part.uploaded = True  # read by the committer once finished is set
            except BaseException as e:  # noqa: BLE001 - the committer fails its future
                error = e
            self._finished(entry, error, uploaded=True)

    def _finished(self, entry: _InFlight, error: BaseException | None, *,
                  uploaded: bool) -> None:
        with self._cond:
            entry.finished, entry.error = True, error
            void = entry.void
            self._cond.notify_all()
        if void and uploaded:  # failed while uploading: no commit will name these objects
            self._discard([entry])

    # -- the committer -------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            batch: list[_InFlight] = []
            with self._cond:
                while not (self._queue and self._queue[0].finished):
                    if self._closed and not self._queue:
                        return
                    self._cond.wait()
                head = self._queue[0]
                if head.error is not None:
                    self._queue.popleft()
                    failed = head
                else:
                    failed = None
                    while self._queue and self._queue[0].finished \
                            and self._queue[0].error is None:
                        self._committing.append(self._queue.popleft())
                    batch = list(self._committing)
            if failed is not None:
                assert failed.error is not None
                self._fail([failed], failed.error, certain=True)
                continue
            try:
                self._commit(batch)
            except KafkaStorageError as e:  # the commit may have landed: uploads stay
                self._fail(batch, e, certain=False)
            except SeglogError as e:  # certainly not committed
                self._fail(batch, e, certain=True)
            except BaseException as e:  # noqa: BLE001 - a bug must fail the futures, not hang them
                logger.exception("%s: the append pipeline's commit failed", self._mgr.uri)
                self._fail(batch, e, certain=False)
            else:
                self._committed(batch)

    def _commit(self, batch: list[_InFlight]) -> None:
        parts = [e.part for e in batch]

        def build(state: BucketState) -> Change:
            # Nothing to upload unless a lost race moved the offsets: the pipeline's
            # uploads are done, which is why these appends were taken.
            upload_parts(self._mgr.storage, restamp(self._mgr, state, parts))
            return change_of(parts)

        self._mgr._commit("append", build)

    def _committed(self, batch: list[_InFlight]) -> None:
        with self._cond:
            last: dict[str, _InFlight] = {}
            for entry in batch:
                last[entry.part.key] = entry
            for key, entry in last.items():
                # How far lost races moved this partition since the entry was reserved;
                # later reservations follow the committed end from now on.
                moved = (entry.part.stamped[-1].last_offset + 1
                         - (entry.end + self._shift.get(key, 0) - entry.shift))
                if moved and self._per_partition.get(key, 0) > sum(
                        1 for e in batch if e.part.key == key):
                    self._shift[key] = self._shift.get(key, 0) + moved
                    self._predicted[key] += moved
            self._release(batch)
            self._committing.clear()
        for entry in batch:
            entry.future.set_result(entry.part.info())

    def _fail(self, covered: list[_InFlight], error: BaseException, *, certain: bool) -> None:
        """Fail ``covered`` with ``error`` and every later append of their partitions
        with ``AppendAbortedError``; delete what is certainly not committed."""
        keys = {e.part.key for e in covered}
        with self._cond:
            later = [e for e in self._queue if e.part.key in keys]
            for entry in later:
                self._queue.remove(entry)
            doomed = covered + later
            for entry in doomed:
                entry.void = True
            self._release(doomed)
            self._committing.clear()
            gone = [e for e in later if e.finished] + (covered if certain else [])
        self._discard(gone)
        for entry in covered:
            entry.future.set_exception(error)
        for entry in later:
            aborted = AppendAbortedError(
                f"append to {entry.part.key} of {self._mgr.uri} (offsets {entry.base}.."
                f"{entry.end - 1} reserved) was not committed: an earlier append of the "
                f"partition failed ({error}); nothing of it is visible")
            aborted.__cause__ = error
            entry.future.set_exception(aborted)

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
        self._cond.notify_all()

    def _discard(self, entries: list[_InFlight]) -> None:
        for entry in entries:
            try:
                discard(self._mgr.storage, entry.part.segments)
            except KafkaStorageError as e:  # an orphan the collector removes later
                logger.warning("%s: could not delete the uploads of a failed append to %s: "
                               "%s", self._mgr.uri, entry.part.key, e)
