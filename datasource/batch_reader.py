"""``SeglogBatchReader``: ``spark.read.format("seglog")``, with filter pushdown.

Reads ``[startingOffsets, endingOffsets)`` of every subscribed partition (Kafka's batch
semantics). With the option ``filterPushdown=true`` (see below), filters on
``partition``, ``offset`` and ``timestamp`` prune the plan before any data is read:
partitions are dropped, offset ranges narrowed, and a lower timestamp bound seeks through
the time index (``Log.offset_for_timestamp``), skipping whole segments; a partition whose
time index says no record is that recent is not read at all, and a contradictory
timestamp range plans no task. Spark still evaluates the timestamp filters (they only
prune), so results are exact.

Which reader is used is the user's explicit choice, the batch option ``filterPushdown``
(default ``false``), never a guess about what PySpark is doing: PySpark 4.3 refuses a
reader that overrides ``pushFilters`` while ``spark.sql.python.filterPushdown.enabled`` is
false (its default), with an error naming that conf (``DATA_SOURCE_PUSHDOWN_DISABLED``).
So ``filterPushdown=true`` gives ``SeglogFilteringBatchReader`` and needs the conf;
``false`` gives the plain reader, which reads everything the options select and lets
Spark filter rows, with identical results under either conf.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeGuard

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.types import StructType

from seglog.logstore.errors import OffsetOutOfRangeError, UnknownTopicOrPartitionError
from seglog.logstore.records.record_format import TopicPartition
from seglog.streaming.source_offsets import (
    ending_offsets,
    initial_offsets,
    report_data_loss,
    snapshot_log_dirs,
)
from seglog.streaming.source_options import SourceOptions
from seglog.streaming.unknown_topics import unknown_topics, unknown_topics_message

from .stream_reader import input_partitions, read_input_partition
from .user_errors import iterated_in_one_piece, shown_in_one_piece

logger = logging.getLogger(__name__)

_NO_LIMIT = 2**63 - 1


@dataclass(frozen=True, slots=True)
class Pruning:
    """What pushed filters allow: partitions (None: all), offsets and timestamps (ms),
    all bounds inclusive."""

    partitions: frozenset[int] | None = None
    min_offset: int = 0
    max_offset: int = _NO_LIMIT
    min_timestamp_ms: int = -(2**63)
    max_timestamp_ms: int = _NO_LIMIT

    @property
    def empty(self) -> bool:
        return (
            self.partitions == frozenset()
            or self.min_offset > self.max_offset
            or self.min_timestamp_ms > self.max_timestamp_ms
        )


class SeglogBatchReader(DataSourceReader):
    """Batch reader; everything a task needs travels in its ``InputPartition``."""

    @staticmethod
    def for_options(options: Mapping[str, Any], schema: StructType) -> SeglogBatchReader:
        """The reader the options ask for: with ``pushFilters`` only when
        ``filterPushdown`` is true (see the module docstring)."""
        parsed = SourceOptions.parse(options, streaming=False)
        cls = SeglogFilteringBatchReader if parsed.filter_pushdown else SeglogBatchReader
        return cls(options, schema)

    def __init__(self, options: Mapping[str, Any], schema: StructType) -> None:
        self._options = SourceOptions.parse(options, streaming=False)
        self._schema = schema
        self._pruning = Pruning()

    @shown_in_one_piece
    def partitions(self) -> list[InputPartition]:
        o = self._options
        prune = self._pruning
        if prune.empty:
            return []
        snap = snapshot_log_dirs(o.log_dirs, options=o)
        missing = unknown_topics(o, snap.partitions)
        if missing:
            # Kafka's batch read would wait for the topic and read nothing; here every
            # topic is known, so a misspelt name is an error, never an empty result.
            raise UnknownTopicOrPartitionError(
                unknown_topics_message(missing, snap.partitions, o.log_dirs)
                + " (a batch read needs its topics; subscribePattern reads the topics "
                "that match, none included)")
        start = initial_offsets(o, snap)
        end = ending_offsets(o, snap)
        for tp in sorted(end):
            if tp not in start:
                start[tp] = snap.earliest(tp)
            if start[tp] > end[tp]:
                raise OffsetOutOfRangeError(
                    f"topic {tp[0]!r} partition {tp[1]}: the starting offset {start[tp]} is "
                    f"after the ending offset {end[tp]}"
                )
            if start[tp] < snap.earliest(tp):
                report_data_loss(
                    o.fail_on_data_loss,
                    f"topic {tp[0]!r} partition {tp[1]}: offsets [{start[tp]}, "
                    f"{snap.earliest(tp)}) were removed (the log start offset is "
                    f"{snap.earliest(tp)})",
                )
                start[tp] = snap.earliest(tp)
        start, end = _prune(start, end, prune, snap.offset_for_timestamp)
        return input_partitions(start, end, o, snap.topic_ids)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return iterated_in_one_piece(read_input_partition(partition))


class SeglogFilteringBatchReader(SeglogBatchReader):
    """The batch reader with ``pushFilters`` (option ``filterPushdown=true``)."""

    @shown_in_one_piece
    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        """Prune on partition, offset and timestamp; returns the filters Spark must keep.

        Partition and offset filters are applied exactly by the plan and not returned;
        timestamp filters only prune (records are not sorted by time), so Spark keeps them.
        """
        prune = self._pruning
        remaining: list[Filter] = []
        for f in filters:
            column = getattr(f, "attribute", None)
            name = column[0] if column and len(column) == 1 else None
            if name == "partition":
                updated = _prune_partition(prune, f)
            elif name == "offset":
                updated = _prune_offset(prune, f)
            elif name == "timestamp":
                updated = _prune_timestamp(prune, f)
                remaining.append(f)  # pruning only: Spark still filters rows
            else:
                updated = None
            if updated is None:
                if name != "timestamp":
                    remaining.append(f)
            else:
                prune = updated
        self._pruning = prune
        logger.debug("pushdown: %s", prune)
        return remaining


# ---------------------------------------------------------------------- pruning
def _is_int(v: Any) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def _prune_partition(p: Pruning, f: Filter) -> Pruning | None:
    if isinstance(f, EqualTo) and _is_int(f.value):
        allowed = frozenset({f.value})
    elif isinstance(f, In) and all(_is_int(v) for v in f.value):
        allowed = frozenset(f.value)
    else:
        return None
    return replace(p, partitions=allowed if p.partitions is None else p.partitions & allowed)


def _prune_offset(p: Pruning, f: Filter) -> Pruning | None:
    v = getattr(f, "value", None)
    if not _is_int(v):
        return None
    if isinstance(f, EqualTo):
        return replace(p, min_offset=max(p.min_offset, v), max_offset=min(p.max_offset, v))
    if isinstance(f, GreaterThan):
        return replace(p, min_offset=max(p.min_offset, v + 1))
    if isinstance(f, GreaterThanOrEqual):
        return replace(p, min_offset=max(p.min_offset, v))
    if isinstance(f, LessThan):
        return replace(p, max_offset=min(p.max_offset, v - 1))
    if isinstance(f, LessThanOrEqual):
        return replace(p, max_offset=min(p.max_offset, v))
    return None


def _micros(value: dt.datetime) -> int:
    aware = value if value.tzinfo is not None else value.astimezone()
    return (aware - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)) // dt.timedelta(
        microseconds=1
    )


def _prune_timestamp(p: Pruning, f: Filter) -> Pruning | None:
    v = getattr(f, "value", None)
    if not isinstance(v, dt.datetime):
        return None
    us = _micros(v)
    # Records hold milliseconds: turn each bound into an inclusive bound on ms.
    if isinstance(f, EqualTo):
        if us % 1000:
            return replace(p, min_timestamp_ms=1, max_timestamp_ms=0)  # matches nothing
        return replace(p, min_timestamp_ms=max(p.min_timestamp_ms, us // 1000),
                       max_timestamp_ms=min(p.max_timestamp_ms, us // 1000))
    if isinstance(f, GreaterThan):
        return replace(p, min_timestamp_ms=max(p.min_timestamp_ms, us // 1000 + 1))
    if isinstance(f, GreaterThanOrEqual):
        return replace(p, min_timestamp_ms=max(p.min_timestamp_ms, -(-us // 1000)))
    if isinstance(f, LessThan):
        return replace(p, max_timestamp_ms=min(p.max_timestamp_ms, -(-us // 1000) - 1))
    if isinstance(f, LessThanOrEqual):
        return replace(p, max_timestamp_ms=min(p.max_timestamp_ms, us // 1000))
    return None


def _prune(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int],
           prune: Pruning, offset_for_timestamp: Callable[[TopicPartition, int], int | None]
           ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
    """Apply ``prune`` to per-partition ranges; the time index moves starts forward."""
    new_start: dict[TopicPartition, int] = {}
    new_end: dict[TopicPartition, int] = {}
    for tp in sorted(end):
        if prune.partitions is not None and tp[1] not in prune.partitions:
            continue
        lo = max(start[tp], prune.min_offset)
        hi = min(end[tp], prune.max_offset + 1 if prune.max_offset < _NO_LIMIT else _NO_LIMIT)
        if lo >= hi:
            continue
        if prune.min_timestamp_ms > -(2**63):
            first = offset_for_timestamp(tp, max(prune.min_timestamp_ms, 0))
            if first is None:
                logger.debug("%s-%d: no record at or after %d ms", *tp, prune.min_timestamp_ms)
                continue
            lo = max(lo, first)
            if lo >= hi:
                continue
        new_start[tp], new_end[tp] = lo, hi
    return new_start, new_end
