"""``SeglogStreamReader``: ``spark.readStream.format("seglog")``.

A thin adapter over ``seglog.streaming``: options are parsed once here (on the driver),
offsets and admission are computed by ``source_offsets``/``admission``, ranges by
``read_planning``. ``read()`` (``read_range``) runs on executors and opens the log itself.

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
import pyarrow.compute as pc
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

from seglog.logstore.errors import (
    CorruptRecordError,
    MissingDataError,
    UnknownTopicOrPartitionError,
)
from seglog.streaming.admission import AdmissionLimits, admit, segment_layout
from seglog.streaming.read_planning import ReadRange, plan_ranges
from seglog.streaming.source_offsets import (
    initial_offsets,
    last_trigger_ms,
    offsets_from_json,
    offsets_to_json,
    reconcile_start,
    report_data_loss,
    skip_removed,
    snapshot_log_dirs,
)
from seglog.streaming.source_options import SourceOptions, TopicPartition

from .schema import arrow_schema

logger = logging.getLogger(__name__)

CHUNK_BYTES = 8 << 20
"""Bytes of whole batches decoded at a time by ``read``: bounds a task's memory."""


class SeglogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Streaming reader with Kafka's offsets, admission control and AvailableNow."""

    def __init__(self, options: Mapping[str, Any], schema: StructType) -> None:
        self._options = SourceOptions.parse(options, streaming=True)
        self._limits = AdmissionLimits.from_options(self._options)
        self._schema = schema
        # Trigger.AvailableNow target; see the module docstring for why it lives here.
        self._target: dict[TopicPartition, int] | None = None

    # ------------------------------------------------------------------ offsets
    def initialOffset(self) -> dict:
        snap = snapshot_log_dirs(self._options.log_dirs, options=self._options)
        return offsets_to_json(initial_offsets(self._options, snap))

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

    def prepareForTriggerAvailableNow(self) -> None:
        snap = snapshot_log_dirs(self._options.log_dirs, start_offsets_for=lambda tp: False,
                                 options=self._options)
        self._target = {tp: snap.latest(tp) for tp in snap.subscribed(self._options)}
        logger.info("Trigger.AvailableNow target: %s", offsets_to_json(self._target))

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """The end of the next batch: high watermarks (checkpoint files), then limits."""
        o = self._options
        previous = offsets_from_json(start)
        # Start offsets only for new partitions: retention below a known partition's
        # offset is caught by read(), where it matters, keeping a trigger cheap.
        snap = snapshot_log_dirs(o.log_dirs, start_offsets_for=lambda tp: tp not in previous,
                                 options=o)
        current = reconcile_start(previous, o, snap)
        latest = {tp: max(snap.latest(tp), off) for tp, off in current.items()}
        available_now = self._target is not None
        if available_now:
            target = self._target or {}
            current = {tp: off for tp, off in current.items() if tp in target}
            latest = {tp: max(min(latest[tp], target[tp]), current[tp]) for tp in current}
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
                layouts=lambda tp: segment_layout(o.log_dirs, tp, latest[tp], current[tp]),
            ).end
        if o.min_offsets_per_trigger is None:
            stamp = None  # keep Kafka's plain offsets when no delay is configured
        elif end != offsets_from_json(start):
            stamp = now  # a batch is admitted now: the delay restarts from here
        return offsets_to_json(end, stamp)

    def reportLatestOffset(self) -> dict | None:
        snap = snapshot_log_dirs(self._options.log_dirs, start_offsets_for=lambda tp: False,
                                 options=self._options)
        return offsets_to_json({tp: snap.latest(tp) for tp in snap.subscribed(self._options)})

    # ------------------------------------------------------------------ planning
    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        o = self._options
        begin = offsets_from_json(start)
        until = offsets_from_json(end)
        new = [tp for tp in until if tp not in begin]
        # Without failOnDataLoss, offsets removed since latestOffset are skipped, with a
        # warning here on the driver (executors only log theirs).
        known = () if o.fail_on_data_loss else tuple(tp for tp in until if tp in begin)
        if new or known:
            snap = snapshot_log_dirs(o.log_dirs, start_offsets_for=lambda tp: tp in until)
            for tp in new:  # partitions that appeared in this batch start at earliest
                begin[tp] = min(snap.earliest(tp), until[tp])
            begin = skip_removed(begin, until, snap, o.fail_on_data_loss)
        return input_partitions(begin, until, o)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_input_partition(partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: the log is not the query's to trim."""

    def stop(self) -> None:
        """Nothing to release: logs are opened and closed inside each call."""


# ---------------------------------------------------------------------- executors
def input_partitions(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int],
                     o: SourceOptions) -> list[InputPartition]:
    """Offset ranges → Spark input partitions, split as the options say (batch and stream)."""
    ranges = plan_ranges(
        start, end, log_dirs=o.log_dirs, include_headers=o.include_headers,
        fail_on_data_loss=o.fail_on_data_loss, min_partitions=o.min_partitions,
        max_records_per_partition=o.max_records_per_partition,
        isolation_level=o.isolation_level,
    )
    return [InputPartition(r) for r in ranges]


def read_input_partition(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    # PySpark plans one InputPartition(None) when there is nothing to read.
    return read_range(partition.value) if partition.value is not None else iter(())


def read_range(r: ReadRange, *, chunk_bytes: int = CHUNK_BYTES) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``r`` as Arrow batches in the source's exact Arrow schema.

    Opens a read-only ``LogManager`` (no lock, nothing written), seeks through the
    segment list and offset index (``Log.read_chunks``) and decodes ``chunk_bytes`` of
    whole batches at a time, so memory stays bounded whatever the range. Offsets removed
    by retention since planning are data loss (``failOnDataLoss``). With
    ``read_committed`` the range ends at the last stable offset at the latest, and the
    data batches of aborted transactions are dropped before decoding (its own step,
    ``committed_chunks``, over the chunks read).
    """
    from seglog.logstore.log_manager import LogManager
    from seglog.logstore.record_codec import decode_batches
    from seglog.logstore.transactions import READ_COMMITTED, committed_chunks

    schema = arrow_schema(r.include_headers)
    mgr = LogManager(list(r.log_dirs), read_only=True)
    try:
        try:
            log = mgr.get_log(r.topic, r.partition)
        except UnknownTopicOrPartitionError:
            report_data_loss(
                r.fail_on_data_loss,
                f"topic {r.topic!r} partition {r.partition} disappeared before offsets "
                f"[{r.start}, {r.end}) were read",
            )
            return
        start = r.start
        if r.timestamp_range is not None:
            first = log.offset_for_timestamp(r.timestamp_range[0])
            if first is None:
                return
            start = max(start, first)
        lso = log.log_start_offset
        if start < lso:
            report_data_loss(
                r.fail_on_data_loss,
                f"topic {r.topic!r} partition {r.partition}: offsets [{start}, "
                f"{min(lso, r.end)}) were removed (the log start offset is now {lso}); "
                "some data may have been lost",
            )
            start = lso
        end = r.end
        if r.isolation_level == READ_COMMITTED:
            end = min(end, log.last_stable_offset)
        while start < end:
            try:
                chunks = log.read_chunks(start, end, chunk_bytes)
                if r.isolation_level == READ_COMMITTED:
                    chunks = committed_chunks(chunks, log.aborted_transactions(start, end))
                for chunk in chunks:
                    try:
                        records = decode_batches(
                            chunk, start_offset=start, end_offset=end,
                            include_headers=r.include_headers,
                        )
                    except CorruptRecordError as e:
                        raise CorruptRecordError(
                            f"topic {r.topic!r} partition {r.partition}, "
                            f"{_segment_file(log, chunk)}: {e}") from None
                    if records.num_rows:
                        yield to_source_batch(records, r.topic, r.partition, schema)
                return
            except MissingDataError as e:
                # Corruption (CorruptRecordError) is never skipped: only data that is gone.
                report_data_loss(
                    r.fail_on_data_loss,
                    f"topic {r.topic!r} partition {r.partition}: offsets [{e.start}, "
                    f"{min(e.end, end)}) cannot be read: {e}",
                )
                start = max(e.end, start + 1)
    finally:
        mgr.close()


def _segment_file(log, chunk: memoryview) -> str:
    """The segment file holding a chunk that failed to decode (named in the error: the
    codec sees only bytes). Chunks never straddle segments."""
    from seglog.logstore.record_format import read_batch_header

    try:
        h = read_batch_header(chunk, 0)
    except CorruptRecordError:
        h = None
    if h is None:
        return f"a segment of {log.dir}"
    owner = [s for s in log.segments if s.base_offset <= h.base_offset]
    return str(owner[-1].log_path) if owner else f"a segment of {log.dir}"


def to_source_batch(
    records: pa.RecordBatch, topic: str, partition: int, schema: pa.Schema
) -> pa.RecordBatch:
    """Codec columns → source row batch: add topic/partition, ms → timestamp[us, UTC]."""
    n = records.num_rows
    ts = records.column("timestamp")
    ts_us = pc.multiply(ts, pa.scalar(1000, pa.int64())).cast(schema.field("timestamp").type)
    cols = [
        records.column("key").cast(pa.binary()),
        records.column("value").cast(pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        records.column("offset").cast(pa.int64()),
        ts_us,
        records.column("timestampType").cast(pa.int32()),
    ]
    if "headers" in schema.names:
        cols.append(records.column("headers").cast(schema.field("headers").type))
    return pa.RecordBatch.from_arrays(cols, schema=schema)
