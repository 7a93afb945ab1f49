"""Executor side of the exactly-once sink on a bucket: encode, index, upload, describe.

A write task does what it does for a local dir (``sink_staging.PartitionStager``: the
same routing, murmur2 placement, encoder, producerId/micro-batch stamping and checks),
but its output goes to the bucket, never through the driver:

1. Each topic-partition's encoded batches collect in memory; base offsets are made
   relative to the fragment (first batch 0, each next one after the previous one's last
   offset), which is what the commit's ``offset_delta`` is added to.
2. A fragment is cut at ``FRAGMENT_BYTES`` (or the topic's ``segment.bytes``, if
   smaller), so a task holds at most one fragment per partition it writes.
3. The fragment is checked as an append is (``log_validator``: CRC, sizes, timestamps;
   ``LogAppendTime`` stamped here), its ``.index`` and ``.timeindex`` are built by the
   engine's own segment builder (``bucket_segment.build_fragment``: Kafka's entries hold
   offsets relative to the segment base, so they stay valid at any base), and the three
   objects are uploaded under
   ``_seglog/staging/<sink id>/<batch id>/<attempt uid>/<topic>-<p>.<n>`` (``.log``,
   ``.index``, ``.timeindex``; an empty index is no object).
4. The task returns a ``StagedTask`` whose fragments are ``BucketFragment`` values
   (object key, counts, sizes): the commit message. ``sink_bucket_commit`` turns them
   into segment entries in one conditional commit.

A failing task deletes what it uploaded; a task killed mid-way leaves objects no commit
references (collected as orphans; see ``sink_bucket_commit.sweep_staging``).

Not thread-safe: one ``BucketStager`` per task.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from seglog.logstore.bucket_manager import BucketLogManager
from seglog.logstore.bucket_segment import build_fragment
from seglog.logstore.bucket_state import STAGING_DIR
from seglog.logstore.clock import SYSTEM_CLOCK, Clock
from seglog.logstore.errors import SeglogError, UnknownTopicOrPartitionError
from seglog.logstore.log_validator import validate_batches
from seglog.logstore.object_store_config import redact_uris
from seglog.logstore.record_format import iter_batch_headers, set_base_offset

from .sink_commit import crash_point
from .sink_options import SinkColumns, SinkOptions, require_creatable
from .sink_staging import (
    PartitionStager,
    StagedFragment,
    StagedTask,
    _Open,
    _safe,
    _Topic,
    check_partition_count,
)

logger = logging.getLogger(__name__)

__all__ = ["BucketFragment", "BucketStager", "stage_rows", "staging_prefix",
           "FRAGMENT_BYTES", "open_bucket"]

FRAGMENT_BYTES = 64 << 20
"""A fragment is cut when it would grow past this (or the topic's ``segment.bytes``):
it bounds a task's memory per partition and the size of one upload."""


def staging_prefix(sink_id: str, batch_id: int | None = None) -> str:
    """``_seglog/staging/<sink id>[/<batch id>]``: where a sink's tasks upload."""
    prefix = f"{STAGING_DIR}/{_safe(sink_id)}"
    return prefix if batch_id is None else f"{prefix}/{batch_id}"


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

    ``offsets``: how many offsets it takes (its stored offsets are ``[0, offsets)``);
    ``uploaded_ms``: when the task uploaded it (its clock), for the commit's age check."""

    topic: str
    partition: int
    key: str
    size: int
    records: int
    offsets: int
    max_timestamp: int
    index_bytes: int
    timeindex_bytes: int
    uploaded_ms: int

    @property
    def path(self) -> str:
        return self.key

    def object_keys(self) -> list[str]:
        keys = [self.key + ".log"]
        if self.index_bytes:
            keys.append(self.key + ".index")
        if self.timeindex_bytes:
            keys.append(self.key + ".timeindex")
        return keys


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
        if self.data and len(self.data) + len(data) > self.cut:
            self.flush()
        self.data += data

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

    def _mgr(self) -> BucketLogManager:
        if self.bucket is None:
            self.bucket = open_bucket(self.options, read_only=True, clock=self.clock)
        return self.bucket

    def _describe_topic(self, name: str) -> _Topic:
        mgr = self._mgr()
        try:
            count = len(mgr.partitions(name))
        except UnknownTopicOrPartitionError:
            require_creatable(self.options, name)
            return _Topic(name, self.options.num_partitions, self._default_config, {})
        check_partition_count(self.options, name, count)
        return _Topic(name, count, mgr.topic_config(name), {})

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
                                 index_interval_bytes=topic.config.index_interval_bytes)
        e = objects.entry
        fragment = BucketFragment(topic.name, partition, key, e.size,
                                  sum(h.records_count for h in headers), e.next_offset,
                                  e.max_timestamp, e.index_bytes, e.timeindex_bytes,
                                  self.clock.milliseconds())
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
            tuple(sorted((t.name, t.partitions) for t in self._topics.values())))

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


def stage_rows(options: SinkOptions, columns: SinkColumns, batches: Iterable,
               sink_id: str, batch_id: int, task: int, attempt: int,
               clock: Clock = SYSTEM_CLOCK) -> StagedTask:
    """Encode and upload every batch of ``batches``; on any error, delete the uploads."""
    stager = BucketStager(options, columns, sink_id, batch_id, task, attempt, clock)
    try:
        for rb in batches:
            stager.add(rb)
        return stager.finish()
    except BaseException:
        stager.discard()
        raise
    finally:
        if stager.bucket is not None:
            stager.bucket.close()
