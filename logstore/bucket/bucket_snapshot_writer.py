"""Snapshots and hints of a bucket commit log: the writer of a version divisible by
``SNAPSHOT_EVERY`` writes the state at that version as ``_seglog/snapshots/<version>.json``,
then the hint ``_seglog/last-snapshot`` naming it (so the hint is never ahead of a
snapshot that exists). Both are only summaries of the commits
(``bucket_commit_reader``): a reader without them folds more commits.

Off the commit's path (``SnapshotWriter``): a commit is durable, and acknowledged, once
the create of its version succeeded; its snapshot and hint are written after, by a thread
of their own, while the caller goes on. Safe because nothing waits for them: a reader or
writer that opens before they land (or after a writer that died first, or whose PUTs
failed) folds the commits since an older snapshot, as after any missing snapshot; the
collector only takes as covering a snapshot that exists and is older than its delay; a
PUT is whole or absent, so no half-written snapshot is ever visible. Each log's snapshots
are written in version order (each thread first waits for the one before), so its own
hint never moves back; the threads are not daemons, so a clean interpreter exit writes
what is pending, and ``flush`` (a manager's close) waits for it.

Thread-safety: thread-safe (``_lock`` guards the last thread started)."""

from __future__ import annotations

import json
import logging
import threading
from concurrent.futures import ThreadPoolExecutor

from ..errors import KafkaStorageError
from ..storage.storage import Storage
from ..util.crash_points import crash_point
from .bucket_commit_reader import read_hint
from .bucket_state import SNAPSHOT_EVERY, BucketState, LogLayout

logger = logging.getLogger(__name__)


def snapshot_due(state: BucketState) -> bool:
    """Whether ``state``'s version is due a snapshot (every ``SNAPSHOT_EVERY``-th)."""
    return state.version % SNAPSHOT_EVERY == 0


def write_snapshot(storage: Storage, layout: LogLayout, state: BucketState, uri: str) -> None:
    """The snapshot of ``state``, then the hint naming it unless a newer one's is there.
    A failure is logged: the commit stands, and a later writer's snapshot covers it."""
    try:
        # The hint is read while the snapshot uploads (two round trips on the
        # committer's path, not three): its answer only says whether a newer
        # snapshot's hint is there already, which no order of the two makes exact.
        with ThreadPoolExecutor(1, thread_name_prefix="seglog-hint") as pool:
            hinted = pool.submit(read_hint, storage, layout, uri)
            storage.write_atomic(layout.snapshot_key(state.version), state.encode())
            crash_point("after-snapshot")
            hint = hinted.result()
        if hint is not None and hint >= state.version:
            # A slow writer: a newer snapshot's hint is there already. (A plain PUT
            # racing another can still lose; opens then probe for newer snapshots.)
            return
        storage.write_atomic(layout.hint_key, json.dumps({"version": state.version}).encode())
    except KafkaStorageError as e:
        # The commit stands; a later writer's snapshot covers it. Readers just fold
        # more commits meanwhile.
        logger.warning(
            "%s: committed version %d but could not write its snapshot: %s", uri, state.version, e
        )


class SnapshotWriter:
    """The due snapshots of one log, written off the committer's path (module
    docstring)."""

    def __init__(self, storage: Storage, layout: LogLayout, uri: str) -> None:
        self.storage = storage
        self.layout = layout
        self.uri = uri
        self._lock = threading.Lock()  # guards _last
        self._last: threading.Thread | None = None

    def submit(self, state: BucketState) -> None:
        """Start writing the snapshot and hint of ``state`` (whose version is due one)
        once the ones submitted before are written; returns at once."""
        with self._lock:
            before = self._last
            thread = threading.Thread(
                target=self._write,
                args=(state, before),
                name=f"seglog-snapshot-{state.version}",
            )
            self._last = thread
            thread.start()

    def _write(self, state: BucketState, before: threading.Thread | None) -> None:
        if before is not None:
            before.join()  # in version order: this log's hint never moves back
        write_snapshot(self.storage, self.layout, state, self.uri)

    def flush(self) -> None:
        """Wait until every snapshot submitted so far is written (or failed, logged)."""
        with self._lock:
            last = self._last
        if last is not None:
            last.join()
