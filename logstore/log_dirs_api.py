"""The typed interface of a set of log dirs, whichever storage holds them.

Three backends answer the same calls: ``log_manager.LogManager`` (local dirs, the one
writer), ``log_dirs_reader.LogDirsReader`` (local dirs, another process reading) and
``bucket_manager.BucketLogManager`` (one object-store URI, writer or read-only). Callers
(the CLI, the streaming source and sink, the datasource) are written against these
Protocols, never against a backend class, and never ask which backend they hold by
``hasattr``/``isinstance``: a capability the backends differ in is a member here
(``is_remote``, ``one_refresh``, ``PartitionLogView.sync``...), a no-op where it has
nothing to do.

* ``PartitionLogView``: what callers use of the log ``get_log`` returns (a writer's
  ``Log``, a reader's ``LogReader``, a bucket's ``BucketLog``; all are ``LogReads``).
* ``LogDirsView``: the read-only calls (topics, configs, offsets, logs): what a reader
  of another process's log dirs offers.
* ``LogDirs``: a ``LogDirsView`` that also writes (topics, appends, maintenance). A
  read-only manager has these calls too and raises ``ReadOnlyError`` from each, so
  code written for a writer fails clearly on a reader.

``log_manager.open_log_dirs`` picks the backend from the URI(s) and is typed with these.
``tests/test_types.py`` has mypy check that each backend satisfies them (here, importing
the backends would close an import cycle: they import this module).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path, PurePath
from types import TracebackType
from typing import TYPE_CHECKING, Protocol

from .config.config import ConfigValues, LogConfig, ManagerConfig

if TYPE_CHECKING:
    from typing_extensions import Self

    from .index.txn_index import AbortedTxn
    from .log.log import AppendInfo
    from .log.log_read import FetchData
    from .log.log_segment import LogSegment

TopicPartition = tuple[str, int]

BeyondLogEnd = dict[TopicPartition, tuple[Path, int, int]]
"""``high_watermarks_beyond_log_end()``: per partition, (checkpoint file, published high
watermark, log end offset)."""


SegmentLayout = tuple[tuple[int, ...], Sequence[int]]
"""(segment base offsets, their ``.log`` sizes), oldest first (local dirs: each size is
stat'ed when first asked, ``manager.partition_table.SegmentSizes``)."""


@dataclass(frozen=True, slots=True)
class TaskRun:
    """What one run of a maintenance task did (``run_maintenance``): its result, or the
    error it raised. (The local managers' scheduler and a bucket's maintenance both
    report in it.)"""

    name: str
    result: object = None
    error: BaseException | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True, slots=True)
class PlannedSegment:
    """One immutable segment object a ``ReadPlan`` names: its key (the ``.log`` object is
    ``<key>.log``), offsets ``[base_offset, next_offset)``, ``.log`` size, max timestamp,
    ``offset_delta`` (a sink fragment's stored offsets + delta = its offsets) and its
    offset index: inline bytes, an object of ``index_bytes`` bytes, or none (a reader
    then scans the segment from its start)."""

    key: str
    base_offset: int
    next_offset: int
    size: int
    max_timestamp: int
    index_bytes: int = 0
    offset_delta: int = 0
    inline_index: bytes = b""


@dataclass(frozen=True, slots=True)
class ReadPlan:
    """What a reader needs to read offsets of one partition without looking at its log
    dir first (``LogDirsView.read_plan``): the committed segments the offsets are in, as
    the planner's state (``version``) named them, with that state's topic id, log start
    offset and high watermark, and whether offsets may have gaps (a compacted or cleaned
    topic). Small: names and offsets, never record bytes (a task's plan travels in its
    input partition)."""

    version: int
    topic_id: str | None
    log_start_offset: int
    high_watermark: int
    gaps_allowed: bool
    segments: tuple[PlannedSegment, ...]


class PartitionLogView(Protocol):
    """The read side of one partition's log, as ``get_log`` returns it."""

    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...

    @property
    def config(self) -> LogConfig: ...

    @property
    def dir(self) -> PurePath:
        """Where it is: a directory, or a bucket partition's URI (for messages)."""
        ...

    @property
    def topic_id(self) -> str | None:
        """The id of the topic it was opened for (None: unknown)."""
        ...

    @property
    def segments(self) -> tuple[LogSegment, ...]: ...

    @property
    def log_start_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def last_stable_offset(self) -> int: ...

    @property
    def size_in_bytes(self) -> int: ...

    @property
    def num_segments(self) -> int: ...

    def update_high_watermark(self, offset: int) -> int:
        """Read up to ``offset`` (clamped to the log); the high watermark taken."""
        ...

    def sync(self) -> bool:
        """Take the state its manager holds now, without a request (a bucket log's
        commits); False where there is none to take (local files are read directly)."""
        ...

    def refresh(self, *, force: bool = False) -> bool:
        """See what other processes changed since (a directory listing, or one LIST of
        the bucket); True if the segments changed."""
        ...

    def current_topic_id(self) -> str | None:
        """The id of the topic that holds the partition now (its ``partition.metadata``,
        or the bucket state it last took); None: none is known."""
        ...

    def read(
        self,
        start_offset: int,
        *,
        max_offset: int | None = None,
        max_bytes: int = 1 << 20,
        isolation_level: str = ...,
    ) -> FetchData: ...

    def read_chunks(
        self,
        start_offset: int,
        end_offset: int,
        chunk_bytes: int = 8 << 20,
        *,
        isolation_level: str = ...,
        check_crcs: bool = ...,
    ) -> Iterator[memoryview]: ...

    def aborted_transactions(self, start_offset: int, upper_offset: int) -> list[AbortedTxn]: ...

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None: ...

    def close(self) -> None: ...


class LogDirsView(Protocol):
    """A set of log dirs, read: what a reader may call on any backend."""

    @property
    def read_only(self) -> bool: ...

    @property
    def is_remote(self) -> bool:
        """True for an object-store bucket: every call may be a request, appends are
        commits visible at once (nothing can be taken back), there is no lock."""
        ...

    @property
    def location(self) -> str:
        """The log dirs, for messages: their paths (comma-separated) or the bucket URI."""
        ...

    @property
    def exists(self) -> bool:
        """Whether the log dirs were ever created: a local dir is (it was opened), a
        bucket prefix only once its first commit is (a mistyped prefix lists nothing)."""
        ...

    @property
    def config(self) -> ManagerConfig: ...

    def topics(self) -> list[str]: ...

    def partitions(self, topic: str) -> list[int]: ...

    def topic_config(self, topic: str) -> LogConfig: ...

    def topic_overrides(self, name: str) -> dict[str, str]: ...

    def topic_id_of(self, topic: str, partition: int) -> str | None: ...

    def topic_ids(self, topics: Iterable[str]) -> dict[str, str | None]: ...

    def segment_layout(self, topic: str, partition: int) -> SegmentLayout | None:
        """The partition's segment base offsets and ``.log`` sizes, oldest first (a bucket:
        from the state last refreshed, no request; local dirs: one listing); None for an
        unknown partition."""
        ...

    def read_plan(self, topic: str, partition: int, start: int, end: int) -> ReadPlan | None:
        """The plan of a read of offsets ``[start, end)`` from the state held now (no
        request), for a reader to read them without looking at the log first; None when
        nothing is gained (local dirs: a local read looks at no store) or the state does
        not hold them all (the reader then looks, as without a plan)."""
        ...

    def get_log(self, topic: str, partition: int) -> PartitionLogView: ...

    def reload_partition(self, topic: str, partition: int) -> None: ...

    def high_watermarks(self) -> dict[TopicPartition, int]: ...

    def log_start_offsets(self) -> dict[TopicPartition, int]: ...

    def high_watermarks_beyond_log_end(self) -> BeyondLogEnd: ...

    def one_refresh(self, refresh: bool = True) -> AbstractContextManager[None]:
        """Answer every call of the block from one look at the storage (a bucket: one
        LIST); local dirs are read on each call and their listings cached, so nothing."""
        ...

    def check_writable(self) -> None:
        """Raise ``ReadOnlyError`` (or why else no write is possible now)."""
        ...

    def close(self) -> None: ...

    def __enter__(self) -> Self: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        /,
    ) -> None: ...


class LogDirs(LogDirsView, Protocol):
    """A set of log dirs, read and written (a read-only one raises ``ReadOnlyError``)."""

    def create_topic(
        self, name: str, partitions: int = 1, config: ConfigValues | None = None
    ) -> None: ...

    def alter_topic_config(
        self, name: str, set_configs: ConfigValues | None = None, delete: Iterable[str] = ()
    ) -> dict[str, str]: ...

    def add_partitions(self, name: str, total: int) -> None: ...

    def delete_topic(self, name: str) -> None: ...

    def append(
        self,
        topic: str,
        partition: int,
        records: bytes | bytearray | memoryview,
        *,
        publish: bool = True,
    ) -> AppendInfo: ...

    def append_many(
        self,
        records: Mapping[TopicPartition, bytes | bytearray | memoryview],
        *,
        publish: bool = True,
    ) -> dict[TopicPartition, AppendInfo]: ...

    def append_async(
        self, topic: str, partition: int, records: bytes | bytearray | memoryview
    ) -> Future[AppendInfo]: ...

    def flush(self) -> None: ...

    def delete_records(self, topic: str, partition: int, offset: int) -> int:
        """Kafka's DeleteRecords: raise the log start offset to ``offset`` (at most the
        high watermark), visible to readers on return; the new log start offset."""
        ...

    def truncate_unpublished(self, topic: str, partition: int, offset: int) -> bool:
        """Take back what ``append(..., publish=False)`` added at and after ``offset``
        (the caller's own appends, not yet published); False where appends cannot be
        taken back (a bucket: each one is a commit, visible at once)."""
        ...

    def checkpoint_high_watermarks(self) -> None: ...

    def run_maintenance(
        self, *, force: bool = False, before_task: Callable[[str, int, int], None] | None = None
    ) -> list[TaskRun]: ...

    def delete_old_segments(self) -> int: ...

    def next_maintenance_ms(self) -> int:
        """Milliseconds until a maintenance task is due (a bucket keeps no schedule
        between processes: ``log.retention.check.interval.ms``)."""
        ...

    def files_awaiting_deletion(self, runs: list[TaskRun]) -> int:
        """Files (objects, on a bucket) waiting for ``file.delete.delay.ms`` after the
        maintenance ``runs`` (a bucket counts what their collection kept)."""
        ...
