"""Snapshots and hints of a bucket commit log: the writer of a version divisible by
``SNAPSHOT_EVERY`` writes the state at that version as ``_seglog/snapshots/<version>.json``,
then the hint ``_seglog/last-snapshot`` naming it (so the hint is never ahead of a
snapshot that exists). Both are only summaries of the commits
(``bucket_commit_reader``): a reader without them folds more commits."""

from __future__ import annotations

import json
import logging
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
