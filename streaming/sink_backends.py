"""The sink's two ``SinkBackend``s: local log dirs and a bucket (``sink_protocol``).

Each is a small object the write planner can build: what it needs on the driver before
any task (``check_destination``, ``existing_partitions``) imports nothing heavy, and
every other method imports its backend's modules where it runs. That is the start-up
rule (docs/internals.md, "Start-up"): only a task loads the codec and numba
(``stage``), the commit process loads the writer (``begin``), the planner neither.

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

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from seglog.logstore.clock import SYSTEM_CLOCK, Clock
from seglog.logstore.errors import ConfigError
from seglog.logstore.object_store_config import redact_uris

from .sink_options import SinkOptions, check_log_dirs

if TYPE_CHECKING:
    import pyarrow as pa

    from seglog.logstore.bucket_manager import BucketLogManager

    from .sink_options import SinkColumns
    from .sink_protocol import SinkBatch, SinkPublication
    from .sink_staging import StagedTask

__all__ = ["LocalSinkBackend", "BucketSinkBackend"]


class LocalSinkBackend:
    """The sink over local log dirs (``SinkBackend``)."""

    def __init__(self, options: SinkOptions, clock: Clock = SYSTEM_CLOCK) -> None:
        self.options = options
        self.clock = clock

    @property
    def location(self) -> str:
        return redact_uris(self.options.log_dirs)

    def check_destination(self, option: str) -> None:
        """Every log dir is a writable directory or can be created (errors name
        ``option``)."""
        check_log_dirs(self.options.log_dirs, option)

    def existing_partitions(self, topic: str) -> int | None:
        from .log_readers import reader

        if not all(Path(d).is_dir() for d in self.options.log_dirs):
            return None  # created by the first task: no topic yet
        with reader(self.options.log_dirs, self.options.storage) as mgr:  # shared reader
            # topics() first: a missing topic is no error (the shared reader is dropped
            # after a call that raises).
            if topic in mgr.topics():
                return len(mgr.partitions(topic))
        return None

    def stage(self, columns: SinkColumns, batches: Iterable[pa.RecordBatch], sink_id: str,
              batch_id: int, task: int, attempt: int) -> StagedTask:
        from .sink_staging import stage_rows

        return stage_rows(self.options, columns, batches, sink_id, batch_id, task, attempt,
                          self.clock)

    def remove_losers(self, losers: Sequence[StagedTask]) -> int:
        from .sink_staging import remove_files

        return remove_files(f.path for m in losers for f in m.fragments)

    def commit_empty(self, batch: SinkBatch) -> int:
        from .sink_commit import sweep_staging

        return sweep_staging(self.options.log_dirs, batch.sink_id, batch.batch_id,
                             clock=self.clock)

    def begin(self, batch: SinkBatch) -> SinkPublication:
        from .sink_commit import LocalPublication

        return LocalPublication(self.options, batch, self.clock)

    def abort(self, tasks: Sequence[StagedTask], batch_id: int, sink_ids: Iterable[str]
              ) -> int:
        from .sink_commit import abort_staging

        return abort_staging(tasks, batch_id, self.options, sink_ids)


class BucketSinkBackend:
    """The sink over a bucket (``SinkBackend``): ``options.bucket_uri`` is its only log
    dir."""

    def __init__(self, options: SinkOptions, clock: Clock = SYSTEM_CLOCK) -> None:
        if options.bucket_uri is None:
            raise ConfigError(
                f"log dirs {redact_uris(options.log_dirs)} are not a bucket URI")
        self.options = options
        self.uri = options.bucket_uri
        self.clock = clock

    @property
    def location(self) -> str:
        return redact_uris([self.uri])

    def check_destination(self, option: str) -> None:
        """Builds the client only (no request): an unknown or malformed ``storage.*``
        option fails here, on the driver, before any task uploads."""
        from seglog.logstore.object_storage import ObjectStorage

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
            bucket = _as_bucket(shared)
            spec = bucket.state.topics.get(topic)
            if spec is None or (opts.num_partitions_given
                                and spec.partitions != opts.num_partitions):
                bucket.refresh()
                spec = bucket.state.topics.get(topic)
        return spec.partitions if spec is not None else None

    def stage(self, columns: SinkColumns, batches: Iterable[pa.RecordBatch], sink_id: str,
              batch_id: int, task: int, attempt: int) -> StagedTask:
        from .sink_bucket_staging import stage_rows

        return stage_rows(self.options, columns, batches, sink_id, batch_id, task, attempt,
                          self.clock)

    def _writer(self) -> BucketLogManager:
        from .sink_bucket_commit import bucket_writer

        return bucket_writer(self.options, self.clock)

    def remove_losers(self, losers: Sequence[StagedTask]) -> int:
        """Refreshes the process's writer first (one LIST): the view the whole commit
        decides on."""
        from .sink_bucket_commit import remove_losers

        return remove_losers(self._writer(), losers)

    def commit_empty(self, batch: SinkBatch) -> int:
        from .sink_bucket_commit import commit_empty

        return commit_empty(self._writer(), batch)

    def begin(self, batch: SinkBatch) -> SinkPublication:
        from .sink_bucket_commit import BucketPublication

        return BucketPublication(self._writer(), self.options, batch, self.clock)

    def abort(self, tasks: Sequence[StagedTask], batch_id: int, sink_ids: Iterable[str]
              ) -> int:
        """``sink_ids`` are not needed: a task that uploaded anything reported it, and
        the collector deletes what a dead task left."""
        from .sink_bucket_commit import abort_uploads

        if not tasks:
            return 0
        return abort_uploads(self._writer(), tasks, batch_id)


def _as_bucket(mgr: object) -> BucketLogManager:
    from seglog.logstore.bucket_manager import BucketLogManager

    if not isinstance(mgr, BucketLogManager):
        raise ConfigError(f"the shared reader of a bucket URI is a {type(mgr).__name__}")
    return mgr
