"""The driver's view of a bucket sink's destination topics, shipped to its write tasks.

A write task routes and checks its rows by each topic's partition count and config
(``sink_stager``). It used to learn them with a look at the topic's commit log (a LIST,
a GET per new commit) before its PUTs: one round trip of every micro-batch's critical
path. The driver-side writer is built and pickled to the tasks for every micro-batch
(``datasource.stream_writer.ShippedOnce``), so it carries what the driver's process
knows instead (``driver_view``, no request): the task's critical path is its PUTs.

Where the view comes from: the process's shared reader of the bucket
(``log_readers.reader``), refreshed in the background (one thread, at most one refresh
in flight per reader), never on the planning's path:

- the view is shipped only while its last LIST is younger than ``SHIP_MAX_AGE_MS``, and
  a view older than ``REFRESH_AFTER_MS``, or lacking a topic it should hold, starts a
  background refresh: the steady view stays about a second old, and after a pause (a
  query restarted, say) the tasks look for themselves once while the view catches up;
- it holds the ``topic`` option's topic and, for a sink with a ``topic`` column, every
  topic of the bucket while they are at most ``VIEW_MAX_TOPICS`` (a topic a row names
  that the view lacks: the task looks, until the view's next refresh, so about once per
  new topic);
- a topic the view does not hold (not created yet: the sink's first write creates it)
  is looked up by the task, as before.

Staleness is safe: the commit checks what the tasks assumed (``StagedTask``'s partition
counts and config overrides) against the topic's log at commit time and refuses a batch
routed or checked with another (``sink_bucket_commit``), and the ledger decides replays
there, not here. A stale view costs at most that refusal (a config change or partitions
added in the last second or so), never a wrong publish.

Thread-safe: ``_lock`` guards the refreshes in flight; the shared reader is itself.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.errors import SeglogError
from seglog.logstore.storage.object_store_config import StorageOptions, redact_uris

from . import log_readers
from .sink_options import SinkOptions

logger = logging.getLogger(__name__)

__all__ = [
    "TopicView",
    "driver_view",
    "REFRESH_AFTER_MS",
    "SHIP_MAX_AGE_MS",
    "VIEW_MAX_TOPICS",
    "wait_refreshes",
]

REFRESH_AFTER_MS = 1_000
"""A view older than this (since its last LIST) starts a background refresh."""

SHIP_MAX_AGE_MS = 5_000
"""A view older than this is not shipped: the tasks look for themselves."""

VIEW_MAX_TOPICS = 256
"""A sink with a ``topic`` column ships every topic of the bucket up to this many (a
task's pickle grows with them), else only its ``topic`` option's."""


@dataclass(frozen=True, slots=True)
class TopicView:
    """Per topic: its partition count and config overrides, as the driver saw them."""

    topics: Mapping[str, tuple[int, tuple[tuple[str, str], ...]]]

    def get(self, name: str) -> tuple[int, dict[str, str]] | None:
        held = self.topics.get(name)
        return None if held is None else (held[0], dict(held[1]))


def driver_view(options: SinkOptions, *, all_topics: bool) -> TopicView | None:
    """The view to ship with this micro-batch's writer (no request on this thread), or
    None (tasks look as before): the reader not open yet (opened in the background),
    its view too old, or no bucket. ``all_topics``: the rows name their topics."""
    if options.bucket_uri is None:
        return None
    mgr = log_readers.open_reader(options.log_dirs, options.storage)
    if not isinstance(mgr, BucketLogManager):
        _refresh_later(options.log_dirs, options.storage)  # opens it
        return None
    age = mgr.commits.view_age_ms()
    state = mgr.state
    wanted = [options.topic] if options.topic is not None else []
    names = (
        list(state.topics)
        if all_topics and len(state.topics) <= VIEW_MAX_TOPICS
        else [t for t in wanted if t in state.topics]
    )
    if age >= REFRESH_AFTER_MS or any(t not in state.topics for t in wanted):
        _refresh_later(options.log_dirs, options.storage)
    if age >= SHIP_MAX_AGE_MS:
        return None
    topics = {
        t: (state.topics[t].partitions, tuple(sorted(state.topics[t].config.items())))
        for t in names
    }
    return TopicView(topics)


_lock = threading.Lock()
_in_flight: dict[tuple[tuple[str, ...], StorageOptions], threading.Thread] = {}


def _refresh_later(log_dirs: tuple[str, ...], storage: StorageOptions) -> None:
    """Refresh (or open) the shared reader of ``log_dirs`` in a daemon thread, unless one
    is at it already."""
    key = (tuple(log_dirs), storage)
    with _lock:
        if key in _in_flight:
            return
        thread = threading.Thread(target=_refresh, args=key, daemon=True, name="seglog-sink-view")
        _in_flight[key] = thread
    thread.start()


def _refresh(log_dirs: tuple[str, ...], storage: StorageOptions) -> None:
    try:
        with log_readers.reader(log_dirs, storage) as mgr:
            if isinstance(mgr, BucketLogManager):
                mgr.refresh()
    except (SeglogError, OSError) as e:
        # The view stays as it was (or absent): the tasks look for themselves, and
        # report this trouble themselves if it lasts.
        logger.info(
            "the sink's view of %s could not be refreshed: %s", redact_uris(list(log_dirs)), e
        )
    finally:
        with _lock:
            _in_flight.pop((tuple(log_dirs), storage), None)


def wait_refreshes() -> None:
    """Wait for the background refreshes in flight (tests, benchmarks)."""
    with _lock:
        threads = list(_in_flight.values())
    for t in threads:
        t.join()
