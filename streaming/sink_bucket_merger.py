"""The bucket sink's merges after the commit, in the background of the committing process.

A micro-batch's commit publishes the batch, then hands the partitions it wrote to this
process's merger of the bucket (``submit``) and returns: the driver merges while Spark
already runs the next micro-batch, so no micro-batch waits for a merge
(``sink_bucket_merge.merge_written`` decides what is due: by count, size and age).

**One merger per bucket log dir and process**: one daemon thread, started by the first
request and ending after ``IDLE_EXIT_S`` without one (a query that stopped leaves no
thread for long). Its queue is bounded by coalescing: at most one request waits per sink,
and a sink's newer request joins the waiting one (the union of the partitions, the age
pass if either asked for it, the newer options), so a merge slower than the micro-batches
makes fewer, larger merges, never a backlog. The thread merges through the process's
writer of the bucket, the commit's own (``log_writers.bucket_writer``: a
``BucketLogManager``'s public calls are thread-safe, and each commit log serializes its
commits), refreshed before each merge (the catalog's and its topic logs' LISTs at once),
off the critical path.

**Racing the next micro-batch**: the merge is a commit of its own in the topic's log
(remove + add, the offsets never move, no ledger entry), created with create-if-absent
like any other. Made through the commit's writer, it is in that writer's state the
moment it lands: the next micro-batch's commit builds on it and creates the version
after it, never losing its create to it (a commit of the merger's own manager did make
it lose: ``benchmarks/bench_sink_commit_races.py``). Only a create of both at the very
same time meets: the commit log's lock orders them, and the second builds again on the
first's state with no request (``CommitLog.commit_steps``). Neither changes what the
sink's ledger says, so replays are judged as before, and a reader sees the same records
whatever the interleaving. A run whose source left the log meanwhile (retention, another
merger) is abandoned and its upload deleted, so no record is merged twice.

**Stopping**: PySpark gives a streaming sink no stop call; the query's driver-side Python
worker is reused for the next commits and ends when Spark retires it. A merge in flight
then is abandoned where it stands: before its commit, its uploaded segment is referenced
by no commit, and the collector deletes it after the orphan grace (``bucket_collect``);
after it, the merge is complete. ``stop_all`` (tests, a process that wants to end
cleanly) waits for or abandons the running merges.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field

from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.storage.object_store_config import StorageOptions
from seglog.logstore.util.clock import Clock

from . import log_writers
from .sink_bucket_merge import merge_written
from .sink_options import SinkOptions

logger = logging.getLogger(__name__)

__all__ = ["BackgroundMerger", "MergeRequest", "background_merger", "stop_all", "IDLE_EXIT_S"]

IDLE_EXIT_S = 60.0
"""How long a merger's thread waits for a request before it ends (the next starts one)."""


@dataclass(slots=True)
class MergeRequest:
    """What one sink's commits asked to merge since the merger last took its request."""

    sink_id: str
    batch_id: int
    """The newest batch the request covers (for messages)."""
    options: SinkOptions
    written: set[tuple[str, int]] = field(default_factory=set)
    age_pass: bool = False

    def join(self, newer: MergeRequest) -> None:
        """Fold a newer request of the same sink into this waiting one."""
        self.batch_id = newer.batch_id
        self.options = newer.options
        self.written |= newer.written
        self.age_pass = self.age_pass or newer.age_pass


class BackgroundMerger:
    """The merges of one bucket log dir in this process (module docstring)."""

    def __init__(
        self, uri: str, storage: StorageOptions, clock: Clock, idle_exit_s: float = IDLE_EXIT_S
    ) -> None:
        self.uri = uri
        self.storage = storage
        self.clock = clock
        self.idle_exit_s = idle_exit_s
        self.merged = 0
        """Segments merged away so far (tests, logs)."""
        self._cond = threading.Condition()  # guards every field below
        self._pending: dict[str, MergeRequest] = {}
        self._thread: threading.Thread | None = None
        self._running = False  # a request is being merged
        self._stopping = False

    def submit(self, request: MergeRequest) -> None:
        """Queue ``request`` (joined to the sink's waiting one) and return at once."""
        with self._cond:
            if self._stopping:
                logger.info(
                    "%s: merger stopped, merge after batch %d of sink %s skipped "
                    "(the next commit asks again)",
                    self.uri,
                    request.batch_id,
                    request.sink_id,
                )
                return
            waiting = self._pending.get(request.sink_id)
            if waiting is None:
                self._pending[request.sink_id] = request
            else:
                waiting.join(request)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, daemon=True, name=f"seglog-sink-merger {self.uri}"
                )
                self._thread.start()
            self._cond.notify_all()

    def wait_idle(self, timeout_s: float | None = None) -> bool:
        """Wait until no request waits or runs; False if ``timeout_s`` passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._pending and not self._running, timeout_s)

    def stop(self, *, wait: bool, timeout_s: float | None = None) -> None:
        """Take no more requests; with ``wait``, finish the waiting ones first, else drop
        them (the merge running now still ends, or is abandoned if the process does)."""
        with self._cond:
            if not wait:
                self._pending.clear()
            self._stopping = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            with self._cond:
                if (
                    not self._cond.wait_for(
                        lambda: self._pending or self._stopping, self.idle_exit_s
                    )
                    or not self._pending
                ):
                    self._thread = None  # idle, or stopped with nothing left
                    self._cond.notify_all()
                    break
                sink_id = next(iter(self._pending))
                request = self._pending.pop(sink_id)
                self._running = True
            try:
                self._merge(request)
            finally:
                with self._cond:
                    self._running = False
                    self._cond.notify_all()

    def _merge(self, request: MergeRequest) -> None:
        try:
            mgr = self._manager()
            # The whole refresh (the catalog's LIST beside the topics' logs'), off the
            # critical path: a topic deleted and created again meanwhile is seen as
            # such, and its old log never gets a merge.
            mgr.refresh()
            self.merged += merge_written(
                mgr,
                request.options,
                request.sink_id,
                request.batch_id,
                sorted(request.written),
                self.clock,
                age_pass=request.age_pass,
            )
        except Exception:
            # The batches are published; a thread that died here would merge nothing
            # again for the process's life. The next commit's request retries.
            logger.exception(
                "%s: merging after batch %d of sink %s failed (the next commit retries)",
                self.uri,
                request.batch_id,
                request.sink_id,
            )

    def _manager(self) -> BucketLogManager:
        """The process's writer of the bucket, the sink's commits' own (not closed here:
        it is theirs)."""
        return log_writers.bucket_writer(self.uri, self.clock, self.storage)


_lock = threading.Lock()  # guards _mergers and _pid
_mergers: dict[tuple[str, StorageOptions, int], BackgroundMerger] = {}
_pid = os.getpid()


def background_merger(uri: str, storage: StorageOptions, clock: Clock) -> BackgroundMerger:
    """This process's merger of the bucket ``uri`` (one per clock: tests give each
    writer its own; a forked child never uses its parent's, whose thread it lacks)."""
    global _pid
    with _lock:
        if os.getpid() != _pid:
            _mergers.clear()
            _pid = os.getpid()
        key = (uri, storage, id(clock))
        merger = _mergers.get(key)
        if merger is None or merger.clock is not clock:
            merger = _mergers[key] = BackgroundMerger(uri, storage, clock)
        return merger


def wait_all(timeout_s: float | None = None) -> bool:
    """Wait until every merger of this process is idle (tests, benchmarks)."""
    with _lock:
        mergers = list(_mergers.values())
    return all(m.wait_idle(timeout_s) for m in mergers)


def stop_all(*, wait: bool, timeout_s: float | None = None) -> None:
    """Stop and forget every merger of this process (``BackgroundMerger.stop``)."""
    with _lock:
        mergers = list(_mergers.values())
        _mergers.clear()
    for m in mergers:
        m.stop(wait=wait, timeout_s=timeout_s)
