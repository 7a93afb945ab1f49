"""Executor side of the exactly-once sink, for every backend: encode rows, stage them.

A write task routes each input row to its topic-partition (the ``partition`` column,
else Kafka's key placement, else a content hash; see ``partitioner``), encodes each
partition's rows into RecordBatch v2 batches with ``encode_batches`` and hands them to
its backend's ``StagingArea``: staging files in the log dir (``sink_local_staging``) or
fragments uploaded to the bucket (``sink_bucket_staging``). At the end the area makes
them durable and the task returns a ``StagedTask``: a small, picklable description that
the driver's commit (``sink_protocol.commit``) publishes. Nothing staged is visible to
readers.

Local layout (one staging directory per sink and micro-batch, so sweeping is ``rmtree``)::

    <log dir>/.seglog-sink/staging/<sink id>/<batch id>/
        <topic>-<partition>.t<task>.a<attempt>.<uid>.stage

Staged bytes are consecutive v2 batches with base offsets from 0: the commit assigns
real offsets by rewriting the 8-byte baseOffset only (the CRC does not cover it). Every
batch carries the sink's identity in Kafka's idempotent-producer fields: ``producerId``
is derived from the sink id, ``producerEpoch``/``baseSequence`` hold the micro-batch id
(see ``producer_fields``), so the data itself says which sink batch wrote it.

A local staging file sits in the log dir that holds the partition (for a new topic, the
first log dir): the same filesystem as the segments it will be copied into.

Not thread-safe: one ``PartitionStager`` per task.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import os
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from seglog.logstore.bucket.bucket_staging import sink_dir_name
from seglog.logstore.config.config import LogConfig
from seglog.logstore.config.topics import validate_topic_name
from seglog.logstore.errors import (
    ConfigError,
    InvalidRecordError,
    RecordTooLargeError,
    UnknownTopicOrPartitionError,
)
from seglog.logstore.records.record_format import iter_batch_headers
from seglog.logstore.storage.file_names import SINK_STATE_DIR
from seglog.logstore.storage.object_store_config import redact_uris
from seglog.logstore.storage.storage import LOCAL
from seglog.logstore.util.clock import SYSTEM_CLOCK, Clock

from .errors import SinkCommitError
from .sink_options import SinkColumns, SinkOptions

logger = logging.getLogger(__name__)

__all__ = ["Fragment", "StagedFragment", "StagedTask", "StagingAttempt", "StagingTopic",
           "StagingArea", "StagedOutput", "PartitionStager",
           "producer_fields", "producer_id_of", "staging_root", "sink_state_dir", "SINK_DIR",
           "run_stager", "new_attempt_uid"]

SINK_DIR = SINK_STATE_DIR
"""The sink's private directory inside each log dir (staging files and ledgers)."""
STAGING_SUFFIX = ".stage"
MAX_BATCH_ID = (1 << 46) - 1
# Room left in max.message.bytes for the batch header and codec framing, so that a batch
# whose records were cut at max_batch_bytes still fits once compressed.
_BATCH_SIZE_MARGIN = 512


def sink_state_dir(log_dir: str | os.PathLike[str]) -> Path:
    return Path(log_dir) / SINK_DIR


def staging_root(log_dir: str | os.PathLike[str], sink_id: str) -> Path:
    return sink_state_dir(log_dir) / "staging" / _safe(sink_id)


def _safe(sink_id: str) -> str:
    """A file-name-safe form of a sink id (query ids are UUIDs; job ids are ours): the
    same name on a local dir and in a bucket (``bucket_staging.sink_dir_name``)."""
    return sink_dir_name(sink_id)


def producer_id_of(sink_id: str) -> int:
    """A stable, non-negative 63-bit Kafka producerId for a sink id."""
    return int.from_bytes(hashlib.sha256(sink_id.encode()).digest()[:8], "big") & (2**63 - 1)


def producer_fields(sink_id: str, batch_id: int) -> tuple[int, int, int]:
    """``(producerId, producerEpoch, baseSequence)`` stamped on every batch of a sink's
    micro-batch: the id of the sink, and the batch id split into the epoch (high 15
    bits) and the sequence (low 31 bits), both non-negative as Kafka requires.

    >>> producer_fields("q", 5)[1:]
    (0, 5)
    """
    if not 0 <= batch_id <= MAX_BATCH_ID:
        raise ValueError(f"batch id {batch_id} is outside 0..{MAX_BATCH_ID}")
    return producer_id_of(sink_id), (batch_id >> 31) & 0x7FFF, batch_id & 0x7FFFFFFF


def batch_id_of(producer_epoch: int, base_sequence: int) -> int:
    """The inverse of ``producer_fields`` for the batch id."""
    return (producer_epoch << 31) | base_sequence


class Fragment(Protocol):
    """What a commit message says of one staged piece of a partition, on any backend:
    a local staging file (``StagedFragment``) or an uploaded object
    (``sink_bucket_staging.BucketFragment``)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def path(self) -> str: ...
    @property
    def size(self) -> int: ...
    @property
    def records(self) -> int: ...


_Staged = TypeVar("_Staged")  # a backend's fragment type


def fragments_of(
    kind: type[_Staged], fragments: Sequence[Fragment], elsewhere: str, target: str
) -> list[_Staged]:
    """A commit's ``fragments`` as its backend's ``kind``; one staged by the other
    backend (``elsewhere``: where that one stages) cannot be committed to ``target``."""
    out = []
    for f in fragments:
        if not isinstance(f, kind):
            raise SinkCommitError(
                f"a task staged {f.path} {elsewhere}, but the sink writes to {target}"
            )
        out.append(f)
    return out


@dataclass(frozen=True, slots=True)
class StagedFragment:
    """One staging file: a task's encoded rows for one topic-partition."""

    topic: str
    partition: int
    path: str
    size: int
    records: int


@dataclass(frozen=True, slots=True)
class StagedTask:
    """What one task attempt staged (the payload of a Spark commit message).

    ``topic_partitions`` records the partition count each topic was routed with, so the
    commit can refuse a batch whose key placement no longer matches the topic;
    ``topic_configs`` the configs the rows were checked against."""

    sink_id: str
    batch_id: int
    task: int
    attempt: int
    attempt_uid: str
    fragments: tuple[Fragment, ...] = ()
    topic_partitions: tuple[tuple[str, int], ...] = ()
    topic_configs: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()
    """Per topic, the config overrides the rows were checked against (the bucket sink's
    commit refuses a topic whose config changed since; the local commit appends through
    ``Log.append``, which checks again)."""

    @property
    def records(self) -> int:
        return sum(f.records for f in self.fragments)

    @property
    def size(self) -> int:
        return sum(f.size for f in self.fragments)


@dataclass(slots=True)
class StagingTopic:
    """A topic as a task routes and checks rows for it."""

    name: str
    partitions: int
    config: LogConfig
    dirs: dict[int, Path]  # partition -> the local log dir holding it (new topics, buckets: none)


@dataclass(frozen=True, slots=True)
class StagingAttempt:
    """Who stages: one task attempt of one micro-batch of one sink."""

    options: SinkOptions
    sink_id: str
    batch_id: int
    task: int
    attempt: int
    attempt_uid: str
    clock: Clock = SYSTEM_CLOCK


def new_attempt_uid() -> str:
    """Names one task attempt's staging apart from any other attempt's."""
    return uuid.uuid4().hex[:12]


@dataclass(frozen=True, slots=True)
class StagedOutput:
    """What a staging area holds once its task is done."""

    fragments: tuple[Fragment, ...]
    topic_configs: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()


class StagingArea(Protocol):
    """Where a task's encoded batches go (a backend's half of staging): ``PartitionStager``
    routes, encodes and checks rows the same way for every backend and hands each
    partition's bytes here."""

    def describe_topic(self, name: str) -> StagingTopic:
        """Partition count and config of ``name`` (a missing one: the sink's creation
        settings, after ``require_creatable``)."""
        ...

    def write(self, topic: StagingTopic, partition: int, data: bytes | bytearray,
              records: int) -> None:
        """Stage encoded batches (base offsets from 0) of one topic-partition."""
        ...

    def finish(self) -> StagedOutput:
        """Make everything staged durable and describe it; on failure, discard it."""
        ...

    def discard(self) -> None:
        """Remove what was staged (a failed task leaves nothing behind)."""
        ...


@dataclass
class PartitionStager:
    """Stages one task's rows into a ``StagingArea``. ``add`` each Arrow batch, then
    ``finish`` (or ``discard``).

    >>> who = StagingAttempt(options, "query", 3, 0, 0, new_attempt_uid())  # doctest: +SKIP
    >>> stager = PartitionStager(columns, who, LocalStagingArea(who))  # doctest: +SKIP
    >>> for rb in batches: stager.add(rb)                           # doctest: +SKIP
    >>> staged = stager.finish()                                    # doctest: +SKIP
    """

    columns: SinkColumns
    attempt: StagingAttempt
    area: StagingArea
    _topics: dict[str, StagingTopic] = field(default_factory=dict)
    _finished: bool = False

    def __post_init__(self) -> None:
        self._producer = producer_fields(self.attempt.sink_id, self.attempt.batch_id)

    @property
    def options(self) -> SinkOptions:
        return self.attempt.options

    @property
    def clock(self) -> Clock:
        return self.attempt.clock

    # -- rows ------------------------------------------------------------------------

    def add(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Route, encode and stage one batch of rows."""
        n = batch.num_rows
        if n == 0:
            return
        topics, topic_index, counts = self._route_topics(batch)
        partitions = self._partitions(batch, topics, topic_index, counts)
        self._check_timestamps(batch, topics, topic_index, partitions)
        if len(topics) == 1:
            target = partitions.astype(np.int64)
        else:
            target = topic_index.astype(np.int64) * (1 << 32) + partitions
        first = int(target[0])
        if (target == first).all():
            self._stage(batch, topics[int(topic_index[0])], int(partitions[0]))
            return
        order = np.argsort(target, kind="stable")
        sorted_target = target[order]
        bounds = np.flatnonzero(np.diff(sorted_target)) + 1
        starts = np.concatenate(([0], bounds))
        ends = np.concatenate((bounds, [n]))
        for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
            row = int(order[s])
            rows = batch.take(pa.array(order[s:e]))
            self._stage(rows, topics[int(topic_index[row])], int(partitions[row]))

    def _check_timestamps(self, batch: pa.RecordBatch, topics: list[StagingTopic],
                          topic_index: np.ndarray, partitions: np.ndarray) -> None:
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
                "for the time of writing")

    def _route_topics(self, batch: pa.RecordBatch
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
                    f"row {row} has a null 'topic' and the option 'topic' is not set")
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

    def _partitions(self, batch: pa.RecordBatch, topics: list[StagingTopic],
                    topic_index: np.ndarray, counts: np.ndarray) -> np.ndarray:
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
        explicit: np.ndarray = pc.fill_null(given, -1).to_numpy(
            zero_copy_only=False).astype(np.int64)
        per_row = np.broadcast_to(counts, explicit.shape)
        bad = np.flatnonzero((explicit < -1) | (explicit >= per_row)
                             | ((explicit == -1) & given.is_valid().to_numpy(
                                 zero_copy_only=False)))
        if len(bad):
            row = int(bad[0])
            topic = topics[int(topic_index[row])].name
            raise UnknownTopicOrPartitionError(
                f"row {row} asks for partition {int(explicit[row])} of topic {topic!r}, "
                f"which has {int(per_row[row])} partition(s) (0..{int(per_row[row]) - 1})")
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
        t = self.area.describe_topic(name)
        self._topics[name] = t
        return t

    def _stage(self, rows: pa.RecordBatch, topic: StagingTopic, partition: int) -> None:
        c = self.columns
        if c.timestamp is not None and not self.options.allow_expired_timestamps:
            check_retention(topic.name, topic.config, rows.column(c.timestamp),
                            self.clock.milliseconds())
        pid, epoch, seq = self._producer
        config = topic.config
        if config.compact and (c.key is None or rows.column(c.key).null_count):
            # The Log would refuse them at commit (Kafka's broker does): refuse them in
            # the task, before a topic is created or anything is staged.
            raise InvalidRecordError(
                f"topic-partition {topic.name}-{partition} is compacted "
                "(cleanup.policy=compact): its records need a key, and "
                + ("the input has no 'key' column" if c.key is None
                   else f"{rows.column(c.key).null_count} row(s) have a null key"))
        limit = config.max_message_bytes
        max_batch = min(self.options.max_batch_bytes,
                        max(limit - _BATCH_SIZE_MARGIN, limit // 2, 64))
        data = encode_batches_for(
            rows.column(c.value),
            rows.column(c.key) if c.key else None,
            rows.column(c.timestamp) if c.timestamp else None,
            rows.column(c.headers) if c.headers else None,
            compression=self.options.compression, now_ms=self.clock.milliseconds(),
            max_batch_bytes=max_batch, producer_id=pid, producer_epoch=epoch,
            base_sequence=seq, same_base_sequence=True)
        for h in iter_batch_headers(data):
            if h.size > limit:
                raise RecordTooLargeError(
                    f"a record batch for {topic.name}-{partition} is {h.size} bytes, above "
                    f"the topic's max.message.bytes ({limit}): a single record is too large")
        self.area.write(topic, partition, data, rows.num_rows)

    # -- end -------------------------------------------------------------------------

    def finish(self) -> StagedTask:
        """Make the staged batches durable (the area's way); describe them."""
        self._finished = True
        out = self.area.finish()
        a = self.attempt
        return StagedTask(
            a.sink_id, a.batch_id, a.task, a.attempt, a.attempt_uid, out.fragments,
            tuple(sorted((t.name, t.partitions) for t in self._topics.values())),
            out.topic_configs)

    def discard(self) -> None:
        """Remove what this task staged (a failed task leaves nothing behind)."""
        self.area.discard()


def check_partition_count(options: SinkOptions, topic: str, actual: int) -> None:
    """An explicit ``numPartitions`` must match an existing topic: never ignore it silently."""
    if options.num_partitions_given and actual != options.num_partitions:
        raise ConfigError(
            f"option 'numPartitions' is {options.num_partitions} but topic {topic!r} already "
            f"exists with {actual} partition(s) in {redact_uris(options.log_dirs)}; the sink "
            "does not change a topic's partition count: drop the option or make it match")


def check_retention(topic: str, config: LogConfig, timestamps: pa.Array | pa.ChunkedArray,
                    now_ms: int) -> None:
    """Refuse rows that retention would delete at once: a backfill of events older than
    the topic's ``retention.ms`` would otherwise vanish at the next maintenance, unseen.

    Exempt: ``retention.ms=-1``, topics without ``delete`` in ``cleanup.policy``, and
    ``LogAppendTime`` topics (the append time replaces the row's timestamp)."""
    if (config.retention_ms < 0 or not config.delete
            or config.message_timestamp_type == "LogAppendTime"):
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
        "topic; -1 keeps records forever)")


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


def encode_batches_for(values: Any, keys: Any, timestamps: Any, headers: Any,
                       **kwargs: Any) -> bytearray:
    """``encode_batches`` with the sink's column conventions (headers whose values are
    strings are cast to binary)."""
    from seglog.logstore.records.record_codec import encode_batches

    if headers is not None:
        item = headers.type.value_type
        if not pa.types.is_binary(item.field(1).type):
            target = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
            headers = headers.cast(target)
    return encode_batches(values, keys, timestamps, headers, **kwargs)


def run_stager(columns: SinkColumns, attempt: StagingAttempt, area: StagingArea,
               batches: Iterable[pa.RecordBatch]) -> StagedTask:
    """Stage every batch of ``batches`` into ``area``; on any error, discard it all."""
    stager = PartitionStager(columns, attempt, area)
    try:
        for rb in batches:
            stager.add(rb)
        return stager.finish()
    except BaseException:
        stager.discard()
        raise


def remove_files(paths: Iterable[str | os.PathLike[str]]) -> int:
    """Unlink files that may already be gone; returns how many were removed."""
    removed = 0
    for p in paths:
        try:
            LOCAL.unlink(p)
            removed += 1
        except FileNotFoundError:
            continue
        except OSError as e:
            logger.warning("cannot remove staging file %s: %s", p, e)
    return removed


def remove_tree(path: Path) -> None:
    """rmtree that tolerates a concurrent removal, and logs anything else."""
    try:
        LOCAL.rmtree(path)
    except FileNotFoundError:
        return
    except OSError as e:
        logger.warning("cannot remove staging directory %s: %s", path, e)
