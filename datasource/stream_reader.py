"""``SeglogStreamReader``: ``spark.readStream.format("seglog")``.

A thin adapter over ``seglog.streaming``: options are parsed once here (on the driver),
offsets and admission are computed by ``source_offsets``/``admission``, ranges by
``read_planning``; ``read()`` runs ``streaming.source_read.read_range`` on executors.
Every call reads through the process's shared read-only ``LogManager``
(``streaming.log_readers``), so a trigger re-reads the checkpoint files and only the
directories that changed.

Which process calls what (PySpark 4.3): one long-lived Python runner per query run holds
this reader and calls ``initialOffset``, ``latestOffset``, ``partitions``, ``commit``,
``prepareForTriggerAvailableNow``; ``read`` runs in executor Python workers on a pickled
copy. Nothing travels through ``self`` between calls except the ``Trigger.AvailableNow``
target, which the API gives no other place for: it lives exactly as long as the query run
(a restart calls ``prepareForTriggerAvailableNow`` again, as Kafka's connector expects).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from seglog.logstore.records.record_format import TopicPartition
from seglog.streaming.admission import AdmissionLimits, admit, cap_to_target, segment_layout
from seglog.streaming.read_planning import plan_ranges, with_read_plans
from seglog.streaming.source_offsets import (
    LogSnapshot,
    initial_offsets,
    last_trigger_ms,
    offsets_from_json,
    offsets_to_json,
    reconcile_start,
    recreated_topics,
    skip_removed,
    snapshot_log_dirs,
    topic_ids_from_json,
)
from seglog.streaming.source_options import SourceOptions
from seglog.streaming.step_trace import trace_path, traced_iterator
from seglog.streaming.unknown_topics import unknown_topics, unknown_topics_message

from .schema import arrow_schema
from .user_errors import iterated_in_one_piece, shown_in_one_piece

logger = logging.getLogger(__name__)

class SeglogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Streaming reader with Kafka's offsets, admission control and AvailableNow."""

    def __init__(self, options: Mapping[str, Any], schema: StructType) -> None:
        self._options = SourceOptions.parse(options, streaming=True)
        self._limits = AdmissionLimits.from_options(self._options)
        self._schema = schema
        # Trigger.AvailableNow target; see the module docstring for why it lives here.
        self._target: dict[TopicPartition, int] | None = None
        # Subscribed topics found missing and warned about in this query run (the
        # runner holding this reader lives as long as the run).
        self._warned_missing: set[str] = set()
        # What the last latestOffset saw available (before limits), for the
        # reportLatestOffset Spark asks right after it.
        self._available: dict[str, Any] | None = None

    def _warn_unknown_topics(self, snap: LogSnapshot) -> None:
        """One warning per query run for each subscribed topic that does not exist (it
        may appear later: the stream reads it from its earliest offset then)."""
        missing = [t for t in unknown_topics(self._options, snap.partitions)
                   if t not in self._warned_missing]
        if missing:
            self._warned_missing.update(missing)
            logger.warning("%s; the stream reads nothing from it until it is created",
                           unknown_topics_message(missing, snap.partitions,
                                                  self._options.log_dirs))

    # ------------------------------------------------------------------ offsets
    # Offsets are Kafka's JSON documents (``offsets_to_json``); PySpark types them ``dict``.
    @shown_in_one_piece
    def initialOffset(self) -> dict[str, Any]:
        snap = snapshot_log_dirs(self._options.log_dirs, options=self._options)
        self._warn_unknown_topics(snap)
        return offsets_to_json(initial_offsets(self._options, snap), topic_ids=snap.topic_ids)

    def getDefaultReadLimit(self) -> ReadLimit:
        """One representative built-in limit; ``latestOffset`` applies all of them.

        The engine only passes back ``ReadAllAvailable`` or this limit, so any limit
        other than ``ReadAllAvailable`` means "apply the options' limits".
        """
        o = self._options
        if o.max_offsets_per_trigger is not None:
            return ReadMaxRows(o.max_offsets_per_trigger)
        if o.min_offsets_per_trigger is not None:
            return ReadMinRows(o.min_offsets_per_trigger)
        if o.max_bytes_per_trigger is not None:
            return ReadMaxBytes(o.max_bytes_per_trigger)
        return ReadAllAvailable()

    @shown_in_one_piece
    def prepareForTriggerAvailableNow(self) -> None:
        snap = snapshot_log_dirs(self._options.log_dirs, start_offsets_for=lambda tp: False,
                                 options=self._options)
        self._target = {tp: snap.latest(tp) for tp in snap.subscribed(self._options)}
        logger.info("Trigger.AvailableNow target: %s", offsets_to_json(self._target))

    @shown_in_one_piece
    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """The end of the next batch: high watermarks (checkpoint files), then limits."""
        o = self._options
        previous = offsets_from_json(start)
        # Start offsets only for new partitions: retention below a known partition's
        # offset is caught by read(), where it matters, keeping a trigger cheap.
        snap = snapshot_log_dirs(o.log_dirs, start_offsets_for=lambda tp: tp not in previous,
                                 options=o)
        self._warn_unknown_topics(snap)
        self._available = _available(snap, o)
        current = reconcile_start(previous, o, snap, topic_ids_from_json(start))
        latest = {tp: max(snap.latest(tp), off) for tp, off in current.items()}
        available_now = self._target is not None
        if available_now:
            capped = cap_to_target(latest, self._target or {})
            current = {tp: current[tp] for tp in capped}
            latest = {tp: max(off, current[tp]) for tp, off in capped.items()}
        stamp = last_trigger_ms(start)
        now = time.time_ns() // 1_000_000
        if isinstance(limit, ReadAllAvailable) or self._limits.unlimited:
            end = latest
        else:
            limits = self._limits
            if available_now:  # waiting for more data is pointless: nothing comes after
                limits = AdmissionLimits(limits.max_offsets, None, 0, limits.max_bytes)
            end = admit(
                current, latest, limits, now_ms=now, last_trigger_ms=stamp,
                layouts=lambda tp: segment_layout(o.log_dirs, tp, latest[tp], o.storage),
            ).end
        if o.min_offsets_per_trigger is None:
            stamp = None  # keep Kafka's plain offsets when no delay is configured
        elif end != offsets_from_json(start):
            stamp = now  # a batch is admitted now: the delay restarts from here
        # The ids this batch is planned against: tasks refuse a log of another topic.
        return offsets_to_json(end, stamp, snap.topic_ids)

    @shown_in_one_piece
    def reportLatestOffset(self) -> dict[str, Any] | None:
        # Spark asks right after latestOffset, in the same process (the trigger's
        # progress report): that call's snapshot answers, with no second look at the log
        # dirs (local: a listing and a checkpoint read; a bucket: a LIST). Before any
        # latestOffset of this run: the state the shared manager holds.
        if self._available is not None:
            return self._available
        snap = snapshot_log_dirs(self._options.log_dirs, start_offsets_for=lambda tp: False,
                                 options=self._options, refresh=False)
        return _available(snap, self._options)

    # ------------------------------------------------------------------ planning
    @shown_in_one_piece
    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        o = self._options
        begin = offsets_from_json(start)
        until = offsets_from_json(end)
        ids = topic_ids_from_json(end)
        # A topic re-created since ``start`` (latestOffset reported the loss): its old
        # offsets mean nothing in the new topic, whose partitions start as new ones.
        recreated = recreated_topics(topic_ids_from_json(start), ids)
        begin = {tp: off for tp, off in begin.items() if tp[0] not in recreated}
        new = [tp for tp in until if tp not in begin]
        # Without failOnDataLoss, offsets removed since latestOffset are skipped, with a
        # warning here on the driver (executors only log theirs).
        known = () if o.fail_on_data_loss else tuple(tp for tp in until if tp in begin)
        if new or known:
            snap = snapshot_log_dirs(o.log_dirs, start_offsets_for=lambda tp: tp in until,
                                     storage=o.storage)
            for tp in new:  # partitions that appeared in this batch start at earliest
                begin[tp] = min(snap.earliest(tp), until[tp])
            begin = skip_removed(begin, until, snap, o.fail_on_data_loss)
        return input_partitions(begin, until, o, ids)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        rows = iterated_in_one_piece(read_input_partition(partition))
        if trace_path() is None:
            return rows
        from pyspark import TaskContext

        ctx = TaskContext.get()
        batch = None if ctx is None else ctx.getLocalProperty("streaming.sql.batchId")
        return traced_iterator("read", None if batch is None else int(batch),
                               None if ctx is None else ctx.partitionId(), rows)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the log is not the query's to trim."""

    def stop(self) -> None:
        """Nothing to release: the shared reader belongs to the process, and other
        queries of the same process may be reading the same log dirs."""


def _available(snap: LogSnapshot, o: SourceOptions) -> dict[str, Any]:
    """The latest offset of every subscribed partition in ``snap`` (no limit applied)."""
    return offsets_to_json({tp: snap.latest(tp) for tp in snap.subscribed(o)})


# ---------------------------------------------------------------------- executors
def input_partitions(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int],
                     o: SourceOptions, topic_ids: Mapping[str, str | None] | None = None
                     ) -> list[InputPartition]:
    """Offset ranges → Spark input partitions, split as the options say (batch and
    stream); a bucket's each with its read plan, so its task reads without a look."""
    ranges = plan_ranges(
        start, end, log_dirs=o.log_dirs, include_headers=o.include_headers,
        fail_on_data_loss=o.fail_on_data_loss, min_partitions=o.min_partitions,
        max_records_per_partition=o.max_records_per_partition,
        isolation_level=o.isolation_level, storage=o.storage, topic_ids=topic_ids,
    )
    return [InputPartition(r) for r in with_read_plans(ranges)]


def read_input_partition(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """``streaming.source_read.read_range`` in the source's exact Arrow schema."""
    r = partition.value
    # PySpark plans one InputPartition(None) when there is nothing to read.
    if r is None:
        return iter(())
    # Executors only: the codec (numba) stays out of the driver's planning processes.
    from seglog.streaming.source_read import read_range

    return read_range(r, arrow_schema(r.include_headers))
