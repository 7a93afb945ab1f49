"""Executor side of the exactly-once sink on a bucket: encode, index, upload, describe.

A write task does what it does for a local dir (``sink_staging.PartitionStager``: the
same routing, murmur2 placement, encoder, producerId/micro-batch stamping and checks),
but its output goes to the bucket, never through the driver:

1. The topic's partition count and config come from this process's shared reader of
   the bucket (``log_readers.reader``: opened once per Python worker, refreshed once per
   task, so a task reads the commits made since the last one, never the history).
2. Each topic-partition's encoded batches collect in memory; base offsets are made
   relative to the fragment (first batch 0, each next one after the previous one's last
   offset), which is what the commit's ``offset_delta`` is added to.
3. A fragment is cut at ``FRAGMENT_BYTES`` (or the topic's ``segment.bytes``, if
   smaller), between record batches (one Arrow batch's output is split too), so a task
   holds at most one fragment per partition it writes and offsets stay within 32 bits
   of a fragment's base; only a single record batch larger than the cut (it is within
   ``max.message.bytes``) makes a larger fragment.
4. The fragment is checked as an append is (``log_validator``: CRC, sizes, timestamps;
   ``LogAppendTime`` stamped here), its ``.index`` and ``.timeindex`` are built by the
   engine's own segment builder (``bucket_segment.build_fragment``: Kafka's entries hold
   offsets relative to the segment base, so they stay valid at any base), and the three
   objects are uploaded under
   ``_seglog/staging/<sink dir>/<batch, 20 digits>/<attempt uid>/<topic>-<p>.<n>``
   (``.log``, and ``.index``/``.timeindex`` only when they exceed
   ``FRAGMENT_INLINE_INDEX_BYTES``: smaller ones travel in the commit message and the
   commit carries them inline; the layout and what the collector keeps:
   ``logstore/bucket_staging``).
5. The task returns a ``StagedTask`` whose fragments are ``BucketFragment`` values
   (object key, counts, sizes) and which records each topic's partition count and
   config overrides: the commit message. ``sink_bucket_commit`` turns them into segment
   entries in one conditional commit.
6. Task 0 of a batch then merges the small committed segments of the topics it wrote
   (``merge_small_segments``): maintenance for a long-lived query, bounded per task, with
   no data through the driver. The sink option ``mergeSmallSegments=false`` leaves it to
   ``seglog maintain``: the merge reads those bytes back and writes them again, which a
   store that is not free per byte (or per request) may not want inside every query.

A failing task deletes what it uploaded; a task killed mid-way leaves objects no commit
references (the collector deletes them once their batch is settled).

Not thread-safe: one ``BucketStager`` per task.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.bucket.bucket_segment import build_fragment
from seglog.logstore.bucket.bucket_staging import staging_prefix
from seglog.logstore.config.config import LogConfig
from seglog.logstore.config.topics import parse_overrides
from seglog.logstore.errors import SeglogError
from seglog.logstore.records.log_validator import validate_batches
from seglog.logstore.records.record_format import iter_batch_headers, set_base_offset
from seglog.logstore.storage.object_store_config import redact_uris
from seglog.logstore.util.clock import SYSTEM_CLOCK, Clock
from seglog.logstore.util.crash_points import crash_point

from .log_readers import reader
from .sink_bucket_merge import MERGING_TASK, merge_small_segments
from .sink_options import SinkColumns, SinkOptions, require_creatable
from .sink_staging import (
    PartitionStager,
    StagedFragment,
    StagedTask,
    _Open,
    _Topic,
    check_partition_count,
)

logger = logging.getLogger(__name__)

__all__ = ["BucketFragment", "BucketStager", "stage_rows", "staging_prefix",
           "FRAGMENT_BYTES", "open_bucket"]

FRAGMENT_BYTES = 64 << 20
"""A fragment is cut when it would grow past this (or the topic's ``segment.bytes``):
it bounds a task's memory per partition and the size of one upload."""

FRAGMENT_INLINE_INDEX_BYTES = 4 << 10
"""A fragment whose ``.index`` and ``.timeindex`` together hold at most this many bytes
sends them to the driver in its commit message, and the commit carries them inline:
two PUTs fewer per fragment (three objects become one), and no index GET when it is
read. At the sink's 1 MiB batches a 64 MiB fragment needs about 1.3 KiB. The bound is
below an append's (16 KiB) because one commit holds every fragment of a micro-batch."""


def open_bucket(options: SinkOptions, *, read_only: bool,
                clock: Clock = SYSTEM_CLOCK) -> BucketLogManager:
    """A manager of the sink's bucket, with its ``storage.*`` options (endpoint,
    credentials...; the environment supplies what they do not)."""
    uri = options.bucket_uri
    if uri is None:
        raise SeglogError(f"log dirs {redact_uris(options.log_dirs)} are not a bucket URI")
    return BucketLogManager(uri, read_only=read_only, clock=clock,
                            storage_options=options.storage)


@dataclass(frozen=True, slots=True)
class BucketFragment:
    """One uploaded fragment: a task's batches for one topic-partition.

    ``offsets``: how many offsets it takes (its stored offsets are ``[0, offsets)``)."""

    topic: str
    partition: int
    key: str
    size: int
    records: int
    offsets: int
    max_timestamp: int
    index_bytes: int
    timeindex_bytes: int
    inline_index: bytes = b""
    inline_timeindex: bytes = b""

    @property
    def path(self) -> str:
        return self.key

    def object_sizes(self) -> list[tuple[str, int]]:
        """(object key, size) of each object it uploaded."""
        out = [(self.key + ".log", self.size)]
        if self.index_bytes:
            out.append((self.key + ".index", self.index_bytes))
        if self.timeindex_bytes:
            out.append((self.key + ".timeindex", self.timeindex_bytes))
        return out

    def object_keys(self) -> list[str]:
        return [k for k, _ in self.object_sizes()]


class _Buffer:
    """Stands in for a staging file: ``PartitionStager._stage`` writes encoded batches
    here; full buffers become fragments."""

    def __init__(self, stager: BucketStager, topic: _Topic, partition: int) -> None:
        self.stager = stager
        self.topic = topic
        self.partition = partition
        self.data = bytearray()
        self.cut = min(FRAGMENT_BYTES, topic.config.segment_bytes)

    def write(self, data: bytes) -> None:
        if len(self.data) + len(data) <= self.cut:
            self.data += data
            return
        # Cut between record batches: one Arrow batch may encode to many cuts.
        view = memoryview(data)
        start = 0
        for h in iter_batch_headers(data):
            pending = len(self.data) + h.position - start
            if pending and pending + h.size > self.cut:
                self.data += view[start:h.position]
                start = h.position
                self.flush()
        self.data += view[start:]

    def flush(self) -> None:
        if self.data:
            self.stager._upload(self.topic, self.partition, self.data)
            self.data = bytearray()

    def close(self) -> None:
        self.data = bytearray()


@dataclass
class BucketStager(PartitionStager):
    """``PartitionStager`` whose output is uploaded fragments; see the module docstring."""

    bucket: BucketLogManager | None = None
    _uploaded: list[BucketFragment] = field(default_factory=list)
    _counter: int = 0
    _validated: dict[str, dict[str, str]] = field(default_factory=dict)

    def _mgr(self) -> BucketLogManager:
        if self.bucket is None:
            self.bucket = shared_bucket(self.options)
            self.bucket.refresh()  # once per task: the commits since the last task
        return self.bucket

    def _describe_topic(self, name: str) -> _Topic:
        mgr = self._mgr()
        spec = mgr.state.topics.get(name)
        if spec is None:
            require_creatable(self.options, name)
            overrides = parse_overrides(dict(self.options.topic_config or {}),
                                        base=mgr.default_topic_config)
            self._validated[name] = overrides
            config = LogConfig.from_properties(overrides, base=mgr.default_topic_config)
            return _Topic(name, self.options.num_partitions, config, {})
        check_partition_count(self.options, name, spec.partitions)
        self._validated[name] = dict(spec.config)
        return _Topic(name, spec.partitions, mgr.topic_config(name), {})

    def _file(self, topic: _Topic, partition: int) -> _Open:
        key = (topic.name, partition)
        f = self._files.get(key)
        if f is None:
            buf = _Buffer(self, topic, partition)
            f = self._files[key] = _Open(Path(topic.name), None, buf)  # type: ignore[arg-type]
        return f

    def _upload(self, topic: _Topic, partition: int, data: bytearray) -> None:
        tp = f"{topic.name}-{partition}"
        offset = 0
        for h in list(iter_batch_headers(data)):
            set_base_offset(data, h.position, offset)
            offset += h.last_offset - h.base_offset + 1
        headers = validate_batches(data, topic.config, tp=tp, now_ms=self.clock.milliseconds(),
                                   assign_offsets=True)
        self._counter += 1
        key = (f"{staging_prefix(self.sink_id, self.batch_id)}/{self.attempt_uid}/"
               f"{tp}.{self._counter}")
        objects = build_fragment(data, headers, key,
                                 index_interval_bytes=topic.config.index_interval_bytes,
                                 inline_index_bytes=FRAGMENT_INLINE_INDEX_BYTES)
        e = objects.entry
        fragment = BucketFragment(topic.name, partition, key, e.size,
                                  sum(h.records_count for h in headers), e.next_offset,
                                  e.max_timestamp, e.index_bytes, e.timeindex_bytes,
                                  e.inline_index, e.inline_timeindex)
        # Listed before the PUTs: a failure half-way must delete what did land.
        self._uploaded.append(fragment)
        storage = self._mgr().storage
        for name, body in objects.uploads():
            storage.write_atomic(name, body)
        crash_point("task-after-upload", self.batch_id)

    def finish(self) -> StagedTask:
        """Upload every partition's last fragment; describe them all."""
        self._finished = True
        try:
            for f in self._files.values():
                f.file.flush()
        except BaseException:
            self.discard()
            raise
        return StagedTask(
            self.sink_id, self.batch_id, self.task, self.attempt, self.attempt_uid,
            # StagedTask names local fragments; the bucket's travel in the same field
            # (sink_bucket_commit checks each one's type).
            cast("tuple[StagedFragment, ...]", tuple(sorted(
                self._uploaded, key=lambda f: (f.topic, f.partition, f.key)))),
            tuple(sorted((t.name, t.partitions) for t in self._topics.values())),
            tuple(sorted((name, tuple(sorted(config.items())))
                         for name, config in self._validated.items())))

    def discard(self) -> None:
        """Delete what this task uploaded (a failed task leaves nothing behind)."""
        self._files.clear()
        if self._uploaded:
            delete_fragments(self._mgr(), self._uploaded)
            self._uploaded.clear()


def delete_fragments(mgr: BucketLogManager, fragments: Iterable[BucketFragment]) -> int:
    """Delete fragments' objects that no commit references; returns objects deleted.
    A failure is logged, not raised: an object left behind is an orphan the sweep
    collects."""
    removed = 0
    for f in fragments:
        for key in f.object_keys():
            try:
                mgr.storage.delete(key)
                removed += 1
            except SeglogError as e:
                logger.warning("cannot delete uncommitted fragment %s/%s: %s", mgr.uri, key, e)
    return removed


def shared_bucket(options: SinkOptions) -> BucketLogManager:
    """This process's manager of the sink's bucket (``log_readers.reader``: the source's
    shared one, opened once per Python worker). Tasks only read its state and PUT and
    DELETE their own objects through its storage."""
    if options.bucket_uri is None:
        raise SeglogError(f"log dirs {redact_uris(options.log_dirs)} are not a bucket URI")
    with reader(options.log_dirs, options.storage) as mgr:
        return cast(BucketLogManager, mgr)


def stage_rows(options: SinkOptions, columns: SinkColumns, batches: Iterable,
               sink_id: str, batch_id: int, task: int, attempt: int,
               clock: Clock = SYSTEM_CLOCK) -> StagedTask:
    """Encode and upload every batch of ``batches``; on any error, delete the uploads."""
    stager = BucketStager(options, columns, sink_id, batch_id, task, attempt, clock)
    try:
        for rb in batches:
            stager.add(rb)
        staged = stager.finish()
    except BaseException:
        stager.discard()
        raise
    if task == MERGING_TASK and options.merge_small_segments:
        topics = [t for t, _ in staged.topic_partitions]
        if options.topic is not None:
            topics.append(options.topic)
        try:
            merge_small_segments(stager._mgr(), topics, clock)
        except SeglogError as e:  # best effort: the rows are staged, the next batch retries
            logger.warning("task %d of batch %d could not merge small segments of %s in %s: "
                           "%s", task, batch_id, ", ".join(sorted(set(topics))),
                           redact_uris(options.log_dirs), e)
    return staged
