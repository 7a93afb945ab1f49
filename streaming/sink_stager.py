"""Executor side of the exactly-once sink, for every backend: ``PartitionStager`` routes
each input row to its topic-partition (the ``partition`` column, else Kafka's key
placement, else a content hash; see ``partitioner``), checks the rows (timestamps, the
topic's retention, null keys of a compacted topic), encodes each partition's rows into
RecordBatch v2 batches stamped with the sink's producer fields (``encode_batches``, cut
to fit ``max.message.bytes``) and returns them (``StagedBatches`` values), which the
backend's task (``sink_local_staging.stage_rows``, ``sink_bucket_staging.stage_rows``)
hands to its ``StagingArea``. It learns each topic it meets from the ``TopicDescriber``
it is handed (``sink_topics``: a part beneath the backend), so it never calls its
backend back. The staging vocabulary it works in (``StagedTask``, ``StagedBatches``,
producer fields, layout) is ``sink_staging``'s.

Not thread-safe: one ``PartitionStager`` per task.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from seglog.logstore.config.config import LogConfig
from seglog.logstore.config.topics import validate_topic_name
from seglog.logstore.errors import (
    ConfigError,
    InvalidRecordError,
    RecordTooLargeError,
    UnknownTopicOrPartitionError,
)
from seglog.logstore.records.record_format import iter_batch_headers
from seglog.logstore.util.clock import Clock

from .sink_options import SinkColumns, SinkOptions
from .sink_staging import (
    StagedBatches,
    StagedOutput,
    StagedTask,
    StagingAttempt,
    StagingTopic,
    TopicDescriber,
    producer_fields,
)

__all__ = [
    "PartitionStager",
    "check_retention",
    "min_timestamp_ms",
    "encode_batches_for",
]

# Room left in max.message.bytes for the batch header and codec framing, so that a batch
# whose records were cut at max_batch_bytes still fits once compressed.
_BATCH_SIZE_MARGIN = 512


@dataclass
class PartitionStager:
    """Encodes one task's rows per topic-partition. ``add`` each Arrow batch and stage
    what it returns, then ``finish`` with what the staging area made of it.

    >>> who = StagingAttempt(options, "query", 3, 0, 0, new_attempt_uid())  # doctest: +SKIP
    >>> stager = PartitionStager(columns, who, LocalTopics(options))  # doctest: +SKIP
    >>> area = LocalStagingArea(who)                                # doctest: +SKIP
    >>> for rb in batches:                                          # doctest: +SKIP
    ...     for b in stager.add(rb): area.write(b)
    >>> staged = stager.finish(area.finish())                       # doctest: +SKIP
    """

    columns: SinkColumns
    attempt: StagingAttempt
    topics: TopicDescriber
    _topics: dict[str, StagingTopic] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._producer = producer_fields(self.attempt.sink_id, self.attempt.batch_id)

    @property
    def options(self) -> SinkOptions:
        return self.attempt.options

    @property
    def clock(self) -> Clock:
        return self.attempt.clock

    # -- rows ------------------------------------------------------------------------

    def add(self, batch: pa.RecordBatch | pa.Table) -> list[StagedBatches]:
        """Route, check and encode one batch of rows: each topic-partition's record
        batches, to be staged in this order."""
        n = batch.num_rows
        if n == 0:
            return []
        topics, topic_index, counts = self._route_topics(batch)
        partitions = self._partitions(batch, topics, topic_index, counts)
        self._check_timestamps(batch, topics, topic_index, partitions)
        if len(topics) == 1:
            target = partitions.astype(np.int64)
        else:
            target = topic_index.astype(np.int64) * (1 << 32) + partitions
        first = int(target[0])
        if (target == first).all():
            return [self._encode(batch, topics[int(topic_index[0])], int(partitions[0]))]
        # A stable sort of small integers is a radix sort in numpy (a fifth of the time
        # of an int64 sort here); one topic's partition numbers are small integers.
        narrow = target.astype(np.uint16) if int(target.max()) < 1 << 16 else target
        order = np.argsort(narrow, kind="stable")
        sorted_target = target[order]
        bounds = np.flatnonzero(np.diff(sorted_target)) + 1
        starts = np.concatenate(([0], bounds))
        ends = np.concatenate((bounds, [n]))
        # One take puts every partition's rows side by side; each partition's are then a
        # slice of it (no copy), where a take per partition would walk the batch per
        # partition.
        grouped = batch.take(pa.array(order))
        out = []
        for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
            row = int(order[s])
            rows = grouped.slice(s, e - s)
            out.append(self._encode(rows, topics[int(topic_index[row])], int(partitions[row])))
        return out

    def _check_timestamps(
        self,
        batch: pa.RecordBatch,
        topics: list[StagingTopic],
        topic_index: np.ndarray,
        partitions: np.ndarray,
    ) -> None:
        """Kafka's producer refuses negative timestamps (-1 is its "no timestamp"); so
        does the sink, before anything of the task is staged."""
        name = self.columns.timestamp
        if name is None:
            return
        col = batch.column(name)
        if pa.types.is_timestamp(col.type):
            col = pc.cast(col, pa.timestamp("ms", col.type.tz), safe=False).cast(pa.int64())
        values = pc.fill_null(col, 0).to_numpy(zero_copy_only=False)
        negative = np.flatnonzero(values < 0)
        if len(negative):
            row = int(negative[0])
            topic = topics[int(topic_index[row])].name
            raise InvalidRecordError(
                f"column {name!r}: row {row} (topic-partition {topic}-{int(partitions[row])}) "
                f"has timestamp {int(values[row])} ms, before 1970; Kafka refuses negative "
                "timestamps (-1 means none): give a timestamp at or after the epoch, or null "
                "for the time of writing"
            )

    def _route_topics(
        self, batch: pa.RecordBatch
    ) -> tuple[list[StagingTopic], np.ndarray, np.ndarray]:
        """(distinct topics, per-row index into them, per-row partition count)."""
        n = batch.num_rows
        default = self.options.topic
        if self.columns.topic is None:
            t = self._topic(default)
            return [t], np.zeros(n, np.int32), np.asarray(t.partitions)
        col = batch.column(self.columns.topic)
        if col.null_count:
            if default is None:
                row = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
                raise InvalidRecordError(
                    f"row {row} has a null 'topic' and the option 'topic' is not set"
                )
            col = pc.fill_null(col, default)
        encoded = pc.dictionary_encode(col)
        if isinstance(encoded, pa.ChunkedArray):
            encoded = encoded.combine_chunks()
        names = encoded.dictionary.to_pylist()
        index = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int32)
        resolved = [self._topic(name) for name in names]
        counts = np.array([t.partitions for t in resolved], dtype=np.int64)
        if len(names) == 1:
            return resolved, index, counts[:1].reshape(())
        return resolved, index, counts[index]

    def _partitions(
        self,
        batch: pa.RecordBatch,
        topics: list[StagingTopic],
        topic_index: np.ndarray,
        counts: np.ndarray,
    ) -> np.ndarray:
        # Imported here, not at the top: the commit process unpickles ``StagedTask`` from
        # this module and must not pay for loading numba (the partitioner's kernel).
        from .partitioner import assign_partitions

        keys = batch.column(self.columns.key) if self.columns.key else None
        values = batch.column(self.columns.value)
        if self.columns.partition is None:
            return assign_partitions(keys, values, counts)
        given = batch.column(self.columns.partition)
        if given.null_count == len(given):
            return assign_partitions(keys, values, counts)
        explicit: np.ndarray = (
            pc.fill_null(given, -1).to_numpy(zero_copy_only=False).astype(np.int64)
        )
        per_row = np.broadcast_to(counts, explicit.shape)
        bad = np.flatnonzero(
            (explicit < -1)
            | (explicit >= per_row)
            | ((explicit == -1) & given.is_valid().to_numpy(zero_copy_only=False))
        )
        if len(bad):
            row = int(bad[0])
            topic = topics[int(topic_index[row])].name
            raise UnknownTopicOrPartitionError(
                f"row {row} asks for partition {int(explicit[row])} of topic {topic!r}, "
                f"which has {int(per_row[row])} partition(s) (0..{int(per_row[row]) - 1})"
            )
        if given.null_count == 0:
            return explicit.astype(np.int32)
        computed = assign_partitions(keys, values, counts)
        return np.where(explicit >= 0, explicit, computed).astype(np.int32)

    def _topic(self, name: str | None) -> StagingTopic:
        if name is None:
            raise ConfigError("no topic: give the option 'topic' or a 'topic' column")
        t = self._topics.get(name)
        if t is not None:
            return t
        validate_topic_name(name)
        t = self.topics.describe_topic(name)
        self._topics[name] = t
        return t

    def _encode(self, rows: pa.RecordBatch, topic: StagingTopic, partition: int) -> StagedBatches:
        c = self.columns
        if c.timestamp is not None and not self.options.allow_expired_timestamps:
            check_retention(
                topic.name, topic.config, rows.column(c.timestamp), self.clock.milliseconds()
            )
        pid, epoch, seq = self._producer
        config = topic.config
        if config.compact and (c.key is None or rows.column(c.key).null_count):
            # The Log would refuse them at commit (Kafka's broker does): refuse them in
            # the task, before a topic is created or anything is staged.
            raise InvalidRecordError(
                f"topic-partition {topic.name}-{partition} is compacted "
                "(cleanup.policy=compact): its records need a key, and "
                + (
                    "the input has no 'key' column"
                    if c.key is None
                    else f"{rows.column(c.key).null_count} row(s) have a null key"
                )
            )
        limit = config.max_message_bytes
        max_batch = min(
            self.options.max_batch_bytes, max(limit - _BATCH_SIZE_MARGIN, limit // 2, 64)
        )
        data = encode_batches_for(
            rows.column(c.value),
            rows.column(c.key) if c.key else None,
            rows.column(c.timestamp) if c.timestamp else None,
            rows.column(c.headers) if c.headers else None,
            compression=self.options.compression,
            now_ms=self.clock.milliseconds(),
            max_batch_bytes=max_batch,
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            same_base_sequence=True,
        )
        for h in iter_batch_headers(data):
            if h.size > limit:
                raise RecordTooLargeError(
                    f"a record batch for {topic.name}-{partition} is {h.size} bytes, above "
                    f"the topic's max.message.bytes ({limit}): a single record is too large"
                )
        return StagedBatches(topic, partition, data, rows.num_rows)

    # -- end -------------------------------------------------------------------------

    def finish(self, out: StagedOutput) -> StagedTask:
        """The task's commit message: what the staging area made durable (``out``) and
        the topics it was routed and checked against."""
        a = self.attempt
        return StagedTask(
            a.sink_id,
            a.batch_id,
            a.task,
            a.attempt,
            a.attempt_uid,
            out.fragments,
            tuple(sorted((t.name, t.partitions) for t in self._topics.values())),
            out.topic_configs,
        )


def check_retention(
    topic: str, config: LogConfig, timestamps: pa.Array | pa.ChunkedArray, now_ms: int
) -> None:
    """Refuse rows that retention would delete at once: a backfill of events older than
    the topic's ``retention.ms`` would otherwise vanish at the next maintenance, unseen.

    Exempt: ``retention.ms=-1``, topics without ``delete`` in ``cleanup.policy``, and
    ``LogAppendTime`` topics (the append time replaces the row's timestamp)."""
    if (
        config.retention_ms < 0
        or not config.delete
        or config.message_timestamp_type == "LogAppendTime"
    ):
        return
    oldest = min_timestamp_ms(timestamps)
    if oldest is None or oldest >= now_ms - config.retention_ms:
        return
    raise InvalidRecordError(
        f"rows for topic {topic!r} have timestamps older than its retention.ms "
        f"({config.retention_ms} ms, {_duration(config.retention_ms)}): the oldest is "
        f"{_iso(oldest)} ({oldest} ms), so the next maintenance would delete them. Nothing "
        "was written. Set the sink option 'allowExpiredTimestamps' to true to write them "
        "anyway, or raise the topic's retention.ms (option 'topic.retention.ms' for a new "
        "topic; -1 keeps records forever)"
    )


def min_timestamp_ms(timestamps: pa.Array | pa.ChunkedArray) -> int | None:
    """The smallest timestamp of a sink ``timestamp`` column (Arrow timestamp of any unit,
    or int64 ms), in ms rounded down; None when every value is null."""
    low = pc.min(timestamps)
    if not low.is_valid:
        return None
    if pa.types.is_timestamp(timestamps.type):
        per_ms = {"s": 1 / 1000, "ms": 1, "us": 1000, "ns": 1_000_000}[timestamps.type.unit]
        value: int = low.cast(pa.int64()).as_py()
        return value * 1000 if per_ms < 1 else value // int(per_ms)
    return int(low.as_py())


def _duration(ms: int) -> str:
    for unit, size in (("days", 86_400_000), ("hours", 3_600_000), ("minutes", 60_000)):
        if ms >= size:
            return f"{ms / size:.3g} {unit}"
    return f"{ms / 1000:.3g} s"


def _iso(ms: int) -> str:
    stamp = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(milliseconds=ms)
    return stamp.isoformat(timespec="milliseconds")


def encode_batches_for(
    values: Any, keys: Any, timestamps: Any, headers: Any, **kwargs: Any
) -> bytearray:
    """``encode_batches`` with the sink's column conventions (headers whose values are
    strings are cast to binary)."""
    from seglog.logstore.records.record_codec import encode_batches

    if headers is not None:
        item = headers.type.value_type
        if not pa.types.is_binary(item.field(1).type):
            target = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
            headers = headers.cast(target)
    return encode_batches(values, keys, timestamps, headers, **kwargs)
