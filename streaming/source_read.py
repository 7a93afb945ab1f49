"""The source's executor read path: one ``ReadRange`` → Arrow record batches.

Spark-free, so it is tested without a JVM; ``datasource`` only hands it the exact Arrow
schema PySpark expects (``datasource.schema.arrow_schema``, which needs pyspark).

What a task does, in order:
0. A range with a plan (``ReadRange.plan``: a bucket's segments, as the driver's state
   named them when it planned the micro-batch) is read from those objects alone, one GET
   each, all at once, without a look at the log (``bucket_read_plan``): one round trip.
   An object found gone, or not what the plan says, or a GET that failed, ends the
   planned read; the rest of the range is then read by the steps below, so it ends
   exactly as a read without a plan would (its rows, its data loss, its error). Without
   a plan (local log dirs; a range the driver's state did not hold whole):
1. Take the process's shared read-only ``LogManager`` (``log_readers``; a reused Python
   worker keeps it from task to task). Its view of the high watermark is refreshed from
   the checkpoint when it is below the range's end (the planner saw a newer one) and
   always under ``read_committed`` (the last stable offset depends on it).
2. A log of another topic id than the plan's (the topic was deleted and re-created): the
   partition is looked at again (a cached log is dropped); another id still is data loss
   for the whole range. A partition that disappeared (found at any step of the read),
   offsets removed by retention since planning, and offsets the refreshed log no longer
   reaches (its high watermark is below the range's end) are data loss
   (``failOnDataLoss``: raised, else logged and skipped). Corruption
   (``CorruptRecordError``) is never skipped.
3. ``timestamp_range`` (batch pushdown) seeks through the time index first.
4. ``read_committed``: the range ends at the last stable offset at the latest, and the
   data batches of aborted transactions are dropped before decoding
   (``committed_chunks``).
5. ``chunk_bytes`` of whole batches are decoded at a time, so memory stays bounded
   whatever the range.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from seglog.logstore.errors import (
    CorruptRecordError,
    KafkaStorageError,
    MissingDataError,
    TopicIdChangedError,
    UnknownTopicOrPartitionError,
)
from seglog.logstore.log.transactions import READ_COMMITTED, committed_chunks
from seglog.logstore.records.record_codec import decode_batches

from .log_readers import bucket_storage, reader
from .read_planning import ReadRange
from .source_offsets import report_data_loss

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from seglog.logstore.log_dirs_api import LogDirsView, PartitionLogView, ReadPlan

CHUNK_BYTES = 8 << 20
"""Bytes of whole batches decoded at a time by ``read_range``: bounds a task's memory."""


def read_range(r: ReadRange, schema: pa.Schema, *,
               chunk_bytes: int = CHUNK_BYTES) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``r`` as Arrow batches in ``schema`` (see the module
    docstring for the steps)."""
    if r.plan is not None:
        next_offset = r.start
        try:
            for batch in _read_planned(r, r.plan, schema, chunk_bytes):
                next_offset = batch.column("offset")[-1].as_py() + 1
                yield batch
            return
        except (MissingDataError, CorruptRecordError, KafkaStorageError) as e:
            # An object the plan names is gone (retention, compaction, a merge past its
            # grace, the topic deleted) or not what the plan says, or a GET failed (the
            # planned log has no second attempt; a look's log tries again): the rest is
            # read as without a plan, so it ends exactly as that read would (rows, or
            # its error).
            logger.info("topic %r partition %d: reading offsets [%d, %d) as planned "
                        "stopped (%s); looking at the log", r.topic, r.partition,
                        next_offset, r.end, e)
        r = replace(r, start=next_offset, plan=None)
        if r.start >= r.end:
            return
    yield from _read_looked(r, schema, chunk_bytes)


def _read_planned(r: ReadRange, plan: ReadPlan, schema: pa.Schema,
                  chunk_bytes: int) -> Iterator[pa.RecordBatch]:
    """The records of ``r`` from the segments ``plan`` names (one GET each, at once; no
    look at the log: ``bucket_read_plan``)."""
    # here, not at the top: a task of local log dirs never loads the bucket engine
    from seglog.logstore.bucket.bucket_read_plan import planned_log

    log = planned_log(bucket_storage(r.log_dirs, r.storage), r.topic, r.partition, plan,
                      fail_on_data_loss=r.fail_on_data_loss)
    try:
        chunks = log.read_chunks(r.start, r.end, chunk_bytes, isolation_level=r.isolation_level,
                                 check_crcs=False)
        for chunk in chunks:
            batch = _decoded(log, r, chunk, r.start, r.end, schema)
            if batch is not None:
                yield batch
    finally:
        log.close()


def _read_looked(r: ReadRange, schema: pa.Schema,
                 chunk_bytes: int) -> Iterator[pa.RecordBatch]:
    """The records of ``r`` through the process's shared reader, which looks at the log
    first (the steps of the module docstring)."""
    with reader(r.log_dirs, r.storage) as mgr:
        # The partition may be found gone at any step, not only by get_log: a cached log
        # learns it when it syncs or refreshes, or when a read that met a vanished object
        # looks again. All of it is data loss for what was not read yet.
        next_offset = r.start
        try:
            log = _planned_topics_log(mgr, r)
            if log is None:
                return
            try:
                for batch in _read_log(mgr, log, r, schema, chunk_bytes):
                    next_offset = batch.column("offset")[-1].as_py() + 1
                    yield batch
            finally:
                # Segment files only: the Log keeps its listing and producer-state tail
                # for the next task, and a worker that reads many partitions holds no
                # file open.
                log.close()
        except UnknownTopicOrPartitionError as e:
            report_data_loss(
                r.fail_on_data_loss,
                f"topic {r.topic!r} partition {r.partition} disappeared before offsets "
                f"[{next_offset}, {r.end}) were read ({e})",
            )


def _planned_topics_log(mgr: LogDirsView, r: ReadRange) -> PartitionLogView | None:
    """The partition's log, if it is of the topic ``r`` was planned against: a cached log
    of another topic id (the topic was deleted and re-created since it was cached) is
    dropped and the partition looked at again; another id still (re-created after the
    plan) is data loss for the whole range, reported here (None: nothing to read). A log
    without an id is read: an id that is gone is unknown, not another topic."""
    log = mgr.get_log(r.topic, r.partition)
    if r.topic_id is None:
        return log
    try:
        log.sync()  # a bucket log takes the state its manager holds now (no request)
    except TopicIdChangedError as e:
        # the cached log keeps the old topic's id: compared with the plan's below
        logger.info("%s", e)
    if log.topic_id == r.topic_id:
        return log
    log.close()
    mgr.reload_partition(r.topic, r.partition)
    log = mgr.get_log(r.topic, r.partition)
    if log.topic_id == r.topic_id or log.topic_id is None:  # None: unknown, see
        return log  # source_offsets.recreated_topics
    log.close()
    report_data_loss(
        r.fail_on_data_loss,
        f"topic {r.topic!r} partition {r.partition}: offsets [{r.start}, {r.end}) were "
        f"planned in topic id {r.topic_id}, but the topic now has id {log.topic_id} (it "
        f"was deleted and re-created); some data may have been lost",
    )
    return None


def _read_log(mgr: LogDirsView, log: PartitionLogView, r: ReadRange, schema: pa.Schema,
              chunk_bytes: int) -> Iterator[pa.RecordBatch]:
    is_bucket = mgr.is_remote
    if is_bucket:
        # A bucket log: its state comes from commits. The worker's shared manager asks
        # the bucket (one LIST) only when what it knows ends before the range; a range
        # of removed data shows as missing objects, which the read path refreshes on.
        log.sync()
        if log.high_watermark < r.end:
            log.refresh()
    else:
        log.refresh()  # a reused reader's log start offset is as old as its last listing
        if r.isolation_level == READ_COMMITTED or log.high_watermark < r.end:
            mgr.high_watermarks()  # also tells every loaded Log its high watermark
    _check_still_planned_topic(log, r)
    # The planner saw a high watermark of at least ``r.end``; a log that, refreshed,
    # still ends before it lost what it had (deleted and recreated, truncated): data
    # loss, never a silently short range (nor an out-of-range error for a start past
    # its end). One rule for a bucket and a local log dir.
    hw = log.high_watermark
    if hw < r.end:
        report_data_loss(
            r.fail_on_data_loss,
            f"topic {r.topic!r} partition {r.partition}: offsets [{max(hw, r.start)}, "
            f"{r.end}) were planned but the log ends at {hw} (log dir {log.dir}); "
            "some data may have been lost",
        )
        if r.start >= hw:
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
    end = min(r.end, hw)
    if r.isolation_level == READ_COMMITTED:
        end = min(end, log.last_stable_offset)
    while start < end:
        try:
            # decode_batches checks every CRC: the log need not check them first
            chunks = log.read_chunks(start, end, chunk_bytes, check_crcs=False)
            if r.isolation_level == READ_COMMITTED:
                chunks = committed_chunks(chunks, log.aborted_transactions(start, end))
            for chunk in chunks:
                if is_bucket:  # a read that met a vanished object synced to a newer state
                    _check_still_planned_topic(log, r)
                batch = _decoded(log, r, chunk, start, end, schema)
                if batch is not None:
                    yield batch
            return
        except MissingDataError as e:
            report_data_loss(
                r.fail_on_data_loss,
                f"topic {r.topic!r} partition {r.partition}: offsets [{e.start}, "
                f"{min(e.end, end)}) cannot be read: {e}",
            )
            start = max(e.end, start + 1)


def _decoded(log: PartitionLogView, r: ReadRange, chunk: memoryview, start: int, end: int,
             schema: pa.Schema) -> pa.RecordBatch | None:
    """A chunk's records of ``[start, end)`` as a source batch (None: none); every CRC
    is checked here, a failing batch's error naming its segment."""
    try:
        records = decode_batches(chunk, start_offset=start, end_offset=end,
                                 include_headers=r.include_headers)
    except CorruptRecordError as e:
        raise CorruptRecordError(
            f"topic {r.topic!r} partition {r.partition}, {_segment_file(log, chunk)}: "
            f"{e}") from None
    if not records.num_rows:
        return None
    return to_source_batch(records, r.topic, r.partition, schema)


def _check_still_planned_topic(log: PartitionLogView, r: ReadRange) -> None:
    """After the log refreshed (which follows its directory, or the bucket's newest
    state): a topic deleted and re-created since ``_planned_topics_log`` checked it is
    data loss for what is not read yet (``read_range`` reports UnknownTopicOrPartitionError
    so), never the new topic's rows under the old plan. An id that is gone is unknown."""
    if r.topic_id is None:
        return
    now = log.current_topic_id()
    if now is not None and now != r.topic_id:
        raise UnknownTopicOrPartitionError(
            f"{r.topic}-{r.partition} was deleted and re-created while it was read "
            f"(topic id {now}, planned in {r.topic_id})")


def _segment_file(log: PartitionLogView, chunk: memoryview) -> str:
    """The segment file holding a chunk that failed to decode (named in the error: the
    codec sees only bytes). Chunks never straddle segments."""
    from seglog.logstore.records.record_format import read_batch_header

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
