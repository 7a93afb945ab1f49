"""Where a sink writes, picked once by its path (``sink_destination``): local log dirs or
a bucket, each with its ``SinkBackend`` (``sink_protocol``).

A destination is what the write planner needs on the driver before any task
(``check_destination``, ``existing_partitions``) and imports nothing heavy; its
``backend()`` imports the backend's module where a task stages or the driver commits.
That is the start-up rule (docs/internals.md, "Start-up"): only a task loads the codec
and numba, the commit process loads the writer, the planner neither.

What each backend adds to the protocol:
- local (``sink_local_staging``, ``sink_commit``): staging files in the log dir that
  holds the partition; a publish appends them under the dirs' ``.lock``, clears tails
  above the high watermark (``sink_replay``, ``sink_intent``), writes the ledger file and
  then the high-watermark checkpoint (the commit point, per log dir); the replay decision
  reads batch headers with the ledger as a hint.
- bucket (``sink_bucket_staging``, ``sink_bucket_commit``): fragments uploaded by the
  tasks; a publish is one create-if-absent commit of the bucket's commit log that
  carries the segment entries and the ledger entry (the commit point); the ledger is in
  the bucket's state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from seglog.logstore.errors import ConfigError
from seglog.logstore.storage.object_store_config import redact_uris
from seglog.logstore.storage.storage import LOCAL
from seglog.logstore.util.clock import SYSTEM_CLOCK, Clock

from .sink_options import SinkOptions, check_log_dirs

if TYPE_CHECKING:
    from seglog.logstore.log_dirs_api import LogDirsView

    from .sink_protocol import SinkBackend, SinkDestination
    from .sink_view import TopicView

__all__ = ["LocalDestination", "BucketDestination", "sink_destination"]


def sink_destination(options: SinkOptions, clock: Clock = SYSTEM_CLOCK) -> SinkDestination:
    """The sink's destination, by its path: a bucket for an object-store URI (the sink's
    only log dir then: ``SinkOptions.parse``), else its local log dirs."""
    if options.bucket_uri is not None:
        return BucketDestination(options, clock)
    return LocalDestination(options, clock)


class LocalDestination:
    """Local log dirs (``SinkDestination``)."""

    def __init__(self, options: SinkOptions, clock: Clock = SYSTEM_CLOCK) -> None:
        self.options = options
        self.clock = clock

    def check_destination(self, option: str) -> None:
        """Every log dir is a writable directory or can be created (errors name
        ``option``)."""
        check_log_dirs(self.options.log_dirs, option)

    def existing_partitions(self, topic: str) -> int | None:
        from .log_readers import reader

        if not all(LOCAL.is_dir(d) for d in self.options.log_dirs):
            return None  # created by the first task: no topic yet
        with reader(self.options.log_dirs, self.options.storage) as mgr:  # shared reader
            # topics() first: a missing topic is no error (the shared reader is dropped
            # after a call that raises).
            if topic in mgr.topics():
                return len(mgr.partitions(topic))
        return None

    def topic_view(self, *, all_topics: bool) -> TopicView | None:
        """None: a local task's look is a directory listing through its shared reader."""
        return None

    def backend(self, view: TopicView | None = None) -> SinkBackend:
        from .sink_commit import LocalSinkBackend

        return LocalSinkBackend(self.options, self.clock)


class BucketDestination:
    """A bucket (``SinkDestination``): ``options.bucket_uri`` is the sink's only log dir."""

    def __init__(self, options: SinkOptions, clock: Clock = SYSTEM_CLOCK) -> None:
        if options.bucket_uri is None:
            raise ConfigError(f"log dirs {redact_uris(options.log_dirs)} are not a bucket URI")
        self.options = options
        self.uri = options.bucket_uri
        self.clock = clock

    def check_destination(self, option: str) -> None:
        """Builds the client only (no request): an unknown or malformed ``storage.*``
        option fails here, on the driver, before any task uploads."""
        from seglog.logstore.storage.object_storage import ObjectStorage

        ObjectStorage(self.uri, self.options.storage)

    def existing_partitions(self, topic: str) -> int | None:
        """A topic the process's shared reader already holds with the expected partition
        count passes with no request: Spark builds a writer for every micro-batch's
        commit, and a LIST there would repeat what the commit reads anyway. A passing
        answer may be stale, which is harmless: every task and the commit check the
        topic again against the bucket's current state. Any other answer is given on a
        fresh state."""
        from .log_readers import reader

        opts = self.options
        with reader(opts.log_dirs, opts.storage) as shared:  # the process's shared reader
            with shared.one_refresh(refresh=False):  # the state it holds: no request
                count = _partition_count(shared, topic)
            if count is None or (opts.num_partitions_given and count != opts.num_partitions):
                with shared.one_refresh():  # one LIST
                    count = _partition_count(shared, topic)
        return count

    def topic_view(self, *, all_topics: bool) -> TopicView | None:
        """What this process's shared reader knows of the topics (``sink_view``): shipped
        with the writer, it spares each task its look at the topic's log."""
        from .sink_view import driver_view

        return driver_view(self.options, all_topics=all_topics)

    def backend(self, view: TopicView | None = None) -> SinkBackend:
        from .sink_bucket_commit import BucketSinkBackend

        return BucketSinkBackend(self.options, self.clock, view)


def _partition_count(view: LogDirsView, topic: str) -> int | None:
    """``topic``'s partition count in ``view``; None if it has no such topic (asked by
    ``topics()`` first: a missing topic raises nothing, so the shared reader is kept)."""
    return len(view.partitions(topic)) if topic in view.topics() else None
