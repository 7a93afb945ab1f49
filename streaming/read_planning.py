"""Offset ranges → input partitions (what one Spark task reads).

A ``ReadRange`` is a small frozen dataclass holding only plain data (log dirs, topic,
partition, offsets, flags), so it pickles into a task cheaply; the task opens the log
itself, or, on a bucket, reads the segment objects its plan names (``with_read_plans``:
keys and offsets from the driver's state, never record bytes).

Splitting follows Spark's Kafka connector (``KafkaOffsetRangeCalculator``):
``maxRecordsPerPartition`` first cuts every range into pieces of at most that many
offsets, then, if there are still fewer pieces than ``minPartitions``, ranges are divided
further in proportion to their size.

>>> plan_ranges({("t", 0): 0}, {("t", 0): 10}, log_dirs=("/d",), min_partitions=2)
... # doctest: +NORMALIZE_WHITESPACE
[ReadRange(log_dirs=('/d',), topic='t', partition=0, start=0, end=5, include_headers=False,
           fail_on_data_loss=True, timestamp_range=None, isolation_level='read_uncommitted',
           storage=StorageOptions(), topic_id=None),
 ReadRange(log_dirs=('/d',), topic='t', partition=0, start=5, end=10, include_headers=False,
           fail_on_data_loss=True, timestamp_range=None, isolation_level='read_uncommitted',
           storage=StorageOptions(), topic_id=None)]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from seglog.logstore.records.record_format import TopicPartition
from seglog.logstore.storage.object_store_config import (
    NO_STORAGE_OPTIONS,
    StorageOptions,
    is_object_uri,
)

from .log_readers import open_reader

if TYPE_CHECKING:
    from seglog.logstore.log_dirs_api import ReadPlan


@dataclass(frozen=True, slots=True)
class ReadRange:
    """Offsets ``[start, end)`` of one partition, and how to read them.

    ``timestamp_range`` (batch pushdown only): ``(lo_ms, hi_ms)`` inclusive bounds on
    record timestamps, used to skip segments by their time index; rows are still filtered
    by Spark.
    """

    log_dirs: tuple[str, ...]
    topic: str
    partition: int
    start: int
    end: int
    include_headers: bool = False
    fail_on_data_loss: bool = True
    timestamp_range: tuple[int, int] | None = None
    isolation_level: str = "read_uncommitted"  # or read_committed (Kafka's isolation.level)
    storage: StorageOptions = NO_STORAGE_OPTIONS
    """A bucket's object-store options: the task opens the bucket with them (``repr``
    hides secrets)."""
    topic_id: str | None = None
    """The topic id the range was planned against (None: the topic has none): a task
    whose log has another id reads nothing of it (``source_read``)."""
    plan: ReadPlan | None = field(default=None, repr=False)
    """A bucket's segments holding the range, as the planner's state named them
    (``with_read_plans``): the task GETs them without looking at the log first."""

    @property
    def size(self) -> int:
        return self.end - self.start


def plan_ranges(
    start: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    *,
    log_dirs: Sequence[str],
    include_headers: bool = False,
    fail_on_data_loss: bool = True,
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
    timestamp_range: tuple[int, int] | None = None,
    isolation_level: str = "read_uncommitted",
    storage: StorageOptions = NO_STORAGE_OPTIONS,
    topic_ids: Mapping[str, str | None] | None = None,
) -> list[ReadRange]:
    """Non-empty ranges for every partition in ``end`` (missing starts read from 0),
    each with its topic's id in ``topic_ids``."""
    ids = topic_ids or {}
    ranges = [
        ReadRange(tuple(log_dirs), t, p, start.get((t, p), 0), end[(t, p)], include_headers,
                  fail_on_data_loss, timestamp_range, isolation_level, storage, ids.get(t))
        for t, p in sorted(end)
        if end[(t, p)] > start.get((t, p), 0)
    ]
    if max_records_per_partition is not None:
        ranges = [
            piece
            for r in ranges
            for piece in split_range(r, -(-r.size // max_records_per_partition))
        ]
    if min_partitions is not None and len(ranges) < min_partitions:
        total = sum(r.size for r in ranges)
        ranges = [
            piece
            for r in ranges
            for piece in split_range(r, max(round(r.size / total * min_partitions), 1))
        ]
    return ranges


def split_range(r: ReadRange, parts: int) -> list[ReadRange]:
    """Cut ``r`` into ``parts`` nearly equal, non-empty, contiguous ranges (Kafka's rule)."""
    parts = max(parts, 1)
    out = []
    remaining, lo = r.size, r.start
    for i in range(parts):
        n = remaining // (parts - i)
        remaining -= n
        hi = min(lo + n, r.end)
        if hi > lo:
            out.append(replace(r, start=lo, end=hi))
        lo = hi
    return out


def with_read_plans(ranges: Sequence[ReadRange]) -> list[ReadRange]:
    """``ranges``, each of a bucket with its read plan (``LogDirsView.read_plan``) from
    the state the process's shared reader holds now: no request, the trigger's
    ``latestOffset`` refreshed it. A range keeps no plan when no reader is open (none is
    opened for it), when that state does not hold it whole or names another topic id
    than the range was planned in, or when the range seeks a timestamp: its task looks at
    the log first, as it always did. Local log dirs: no plan (a local read looks at no
    store)."""
    out: list[ReadRange] = []
    for r in ranges:
        if r.timestamp_range is not None or r.plan is not None \
                or not any(is_object_uri(d) for d in r.log_dirs):
            out.append(r)
            continue
        mgr = open_reader(r.log_dirs, r.storage)
        plan = None if mgr is None else mgr.read_plan(r.topic, r.partition, r.start, r.end)
        if plan is None or plan.topic_id != r.topic_id:
            out.append(r)
        else:
            out.append(replace(r, plan=plan))
    return out
