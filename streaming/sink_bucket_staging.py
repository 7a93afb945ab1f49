"""Executor side of the exactly-once sink on a bucket: encode, index, upload, describe.

A write task does what it does for a local dir (``sink_stager.PartitionStager``: the
same routing, murmur2 placement, encoder, producerId/micro-batch stamping and checks),
but its output goes to the bucket, never through the driver:

1. The topic's partition count and config come from the driver's view shipped with the
   writer (``sink_view``: no request, so the task's critical path is its PUTs); a topic
   the view lacks (none shipped, or one created since) from this process's shared reader
   of the bucket (``sink_topics.BucketTopics``, handed to the stager and the area
   alike: opened once per Python worker, so a task reads the commits made since the
   last one, never the history): the log of that topic refreshed once (one LIST, a GET
   per new commit), the catalog too for a topic with no log of its own in the reader.
   When the view lacks the ``topic`` option's topic, its log is refreshed from the task's
   start, in a thread, while its first rows are on their way (``_look_ahead``): off the
   task's critical path.
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
6. With ``mergeSmallSegments=true`` (off by default), task 0 of a batch then merges the
   small committed segments of the topics it wrote (``merge_small_segments``), bounded
   per task: every micro-batch waits for it. By default the driver merges after the
   commit instead, by count and age (``sink_bucket_merge.merge_after_commit``).

A failing task deletes what it uploaded; a task killed mid-way leaves objects no commit
references (the collector deletes them once their batch is settled).

Not thread-safe: one ``BucketStagingArea`` per task.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.bucket.bucket_segment import build_fragment
from seglog.logstore.bucket.bucket_staging import staging_prefix
from seglog.logstore.errors import SeglogError
from seglog.logstore.log.log_validator import validate_batches
from seglog.logstore.records.record_format import iter_batch_headers, set_base_offset
from seglog.logstore.storage.object_store_config import redact_uris
from seglog.logstore.storage.storage import Storage
from seglog.logstore.util.clock import SYSTEM_CLOCK, Clock
from seglog.logstore.util.crash_points import crash_point

if TYPE_CHECKING:
    import pyarrow as pa

from .sink_bucket_merge import MERGING_TASK, merge_small_segments
from .sink_options import SinkColumns, SinkOptions
from .sink_stager import PartitionStager
from .sink_staging import (
    Fragment,
    StagedBatches,
    StagedOutput,
    StagedTask,
    StagingAttempt,
    StagingTopic,
    new_attempt_uid,
)
from .sink_topics import BucketTopics
from .sink_view import TopicView

logger = logging.getLogger(__name__)

__all__ = [
    "BucketFragment",
    "BucketStagingArea",
    "stage_rows",
    "staging_prefix",
    "FRAGMENT_BYTES",
    "open_bucket",
]

FRAGMENT_BYTES = 64 << 20
"""A fragment is cut when it would grow past this (or the topic's ``segment.bytes``):
it bounds a task's memory per partition and the size of one upload."""

UPLOAD_THREADS = 8
"""A task's object PUTs in flight at once."""

UPLOAD_BYTES_IN_FLIGHT = FRAGMENT_BYTES
"""A task starts no new PUT while more bytes than this are uploading: with the fragment
being built, a task holds at most about twice ``FRAGMENT_BYTES`` per partition's worth."""

FRAGMENT_INLINE_INDEX_BYTES = 4 << 10
"""A fragment whose ``.index`` and ``.timeindex`` together hold at most this many bytes
sends them to the driver in its commit message, and the commit carries them inline:
two PUTs fewer per fragment (three objects become one), and no index GET when it is
read. At the sink's 1 MiB batches a 64 MiB fragment needs about 1.3 KiB. The bound is
below an append's (16 KiB) because one commit holds every fragment of a micro-batch."""


def open_bucket(
    options: SinkOptions, *, read_only: bool, clock: Clock = SYSTEM_CLOCK
) -> BucketLogManager:
    """A manager of the sink's bucket, with its ``storage.*`` options (endpoint,
    credentials...; the environment supplies what they do not)."""
    uri = options.bucket_uri
    if uri is None:
        raise SeglogError(f"log dirs {redact_uris(options.log_dirs)} are not a bucket URI")
    return BucketLogManager(uri, read_only=read_only, clock=clock, storage_options=options.storage)


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
    """A topic-partition's encoded batches in memory; a full buffer becomes a fragment."""

    def __init__(self, area: BucketStagingArea, topic: StagingTopic, partition: int) -> None:
        self.area = area
        self.topic = topic
        self.partition = partition
        self.data = bytearray()
        self.cut = min(FRAGMENT_BYTES, topic.config.segment_bytes)

    def write(self, data: bytes | bytearray) -> None:
        if len(self.data) + len(data) <= self.cut:
            self.data += data
            return
        # Cut between record batches: one Arrow batch may encode to many cuts.
        view = memoryview(data)
        start = 0
        for h in iter_batch_headers(data):
            pending = len(self.data) + h.position - start
            if pending and pending + h.size > self.cut:
                self.data += view[start : h.position]
                start = h.position
                self.flush()
        self.data += view[start:]

    def flush(self) -> None:
        if self.data:
            self.area.upload(self.topic, self.partition, self.data)
            self.data = bytearray()


class BucketStagingArea:
    """The bucket backend's half of staging: fragments uploaded under
    ``_seglog/staging/``; see the module docstring.

    A task's objects are PUT side by side (``UPLOAD_THREADS``; at most
    ``UPLOAD_BYTES_IN_FLIGHT`` held beyond the one being built), so a micro-batch
    writing many partitions waits about one PUT for them, not one per object.

    ``topics``: the task's describer of the bucket's topics (the stager's too), whose
    shared manager the area uploads through."""

    def __init__(self, attempt: StagingAttempt, topics: BucketTopics) -> None:
        self.attempt = attempt
        self.topics = topics
        self._buffers: dict[tuple[str, int], _Buffer] = {}
        self._uploaded: list[BucketFragment] = []
        self._counter = 0
        self._pool: ThreadPoolExecutor | None = None
        self._in_flight: deque[tuple[Future[None], int]] = deque()
        self._in_flight_bytes = 0
        self._finishing: list[tuple[str, memoryview | bytes]] | None = None
        """While ``finish`` flushes: the last fragments' objects, PUT by ``finish``."""

    def write(self, batches: StagedBatches) -> None:
        key = (batches.topic.name, batches.partition)
        buf = self._buffers.get(key)
        if buf is None:
            buf = self._buffers[key] = _Buffer(self, batches.topic, batches.partition)
        buf.write(batches.data)

    def upload(self, topic: StagingTopic, partition: int, data: bytearray) -> None:
        """Make ``data`` one fragment: relative offsets, validated, indexed, uploaded."""
        a = self.attempt
        tp = f"{topic.name}-{partition}"
        offset = 0
        for h in list(iter_batch_headers(data)):
            set_base_offset(data, h.position, offset)
            offset += h.last_offset - h.base_offset + 1
        headers = validate_batches(
            data, topic.config, tp=tp, now_ms=a.clock.milliseconds(), assign_offsets=True
        )
        self._counter += 1
        key = f"{staging_prefix(a.sink_id, a.batch_id)}/{a.attempt_uid}/{tp}.{self._counter}"
        objects = build_fragment(
            data,
            headers,
            key,
            index_interval_bytes=topic.config.index_interval_bytes,
            inline_index_bytes=FRAGMENT_INLINE_INDEX_BYTES,
        )
        e = objects.entry
        fragment = BucketFragment(
            topic.name,
            partition,
            key,
            e.size,
            sum(h.records_count for h in headers),
            e.next_offset,
            e.max_timestamp,
            e.index_bytes,
            e.timeindex_bytes,
            e.inline_index,
            e.inline_timeindex,
        )
        # Listed before the PUTs: a failure half-way must delete what did land.
        self._uploaded.append(fragment)
        for name, body in objects.uploads():
            if self._finishing is not None:
                self._finishing.append((name, body))
            else:
                self._submit(name, body)

    def _submit(self, name: str, body: memoryview | bytes) -> None:
        """Start the PUT of one object on the task's upload threads."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(UPLOAD_THREADS, thread_name_prefix="seglog-sink-upload")
        while self._in_flight and self._in_flight_bytes > UPLOAD_BYTES_IN_FLIGHT:
            self._wait_oldest()
        self._in_flight.append(
            (self._pool.submit(self.topics.storage().write_atomic, name, body), len(body))
        )
        self._in_flight_bytes += len(body)

    def _wait_oldest(self) -> None:
        """Wait for the oldest PUT in flight; raise its error."""
        future, size = self._in_flight.popleft()
        self._in_flight_bytes -= size
        future.result()

    def _wait_all(self) -> None:
        """Wait for every PUT in flight; raise the first error (after all ended)."""
        failure: BaseException | None = None
        while self._in_flight:
            try:
                self._wait_oldest()
            except BaseException as e:  # the others still run: wait for them first
                failure = failure or e
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        if failure is not None:
            raise failure

    def finish(self) -> StagedOutput:
        """Upload every partition's last fragment; describe them all.

        The last object is PUT on the task's own thread, the others beside it on the
        upload threads: a task writing one partition (a steady micro-batch's) makes its
        one PUT itself, with no thread started or handed to."""
        try:
            last: list[tuple[str, memoryview | bytes]] = []
            self._finishing = last
            for buf in self._buffers.values():
                buf.flush()
            self._finishing = None
            if last:
                for name, body in last[:-1]:
                    self._submit(name, body)
                self.topics.storage().write_atomic(*last[-1])
            self._wait_all()
        except BaseException:
            self.discard()
            raise
        if self._uploaded:
            crash_point("task-after-upload", self.attempt.batch_id)
        uploaded = sorted(self._uploaded, key=lambda f: (f.topic, f.partition, f.key))
        fragments: tuple[Fragment, ...] = tuple(uploaded)
        return StagedOutput(fragments, self.topics.checked_configs())

    def discard(self) -> None:
        """Delete what this task uploaded (a failed task leaves nothing behind)."""
        self._buffers.clear()
        self._finishing = None
        try:
            self._wait_all()  # nothing may land after the deletes below
        except (SeglogError, OSError) as e:
            logger.info("an upload of a discarded task failed too: %s", e)
        if self._uploaded:
            delete_fragments(self.topics.storage(), self._uploaded)
            self._uploaded.clear()


def delete_fragments(storage: Storage, fragments: Iterable[BucketFragment]) -> int:
    """Delete fragments' objects that no commit references; returns objects deleted.
    A failure is logged, not raised: an object left behind is an orphan the sweep
    collects."""
    removed = 0
    for f in fragments:
        for key in f.object_keys():
            try:
                storage.delete(key)
                removed += 1
            except SeglogError as e:
                logger.warning("cannot delete uncommitted fragment %s/%s: %s", storage.uri, key, e)
    return removed


def stage_rows(
    options: SinkOptions,
    columns: SinkColumns,
    batches: Iterable[pa.RecordBatch],
    sink_id: str,
    batch_id: int,
    task: int,
    attempt: int,
    clock: Clock = SYSTEM_CLOCK,
    *,
    view: TopicView | None = None,
) -> StagedTask:
    """Encode and upload every batch of ``batches``; on any error, delete the uploads.
    ``view``: the driver's view of the topics (``sink_view``), shipped with the writer;
    a topic it holds is not looked up (no request before the PUTs)."""
    who = StagingAttempt(options, sink_id, batch_id, task, attempt, new_attempt_uid(), clock)
    described = BucketTopics(options, view)
    area = BucketStagingArea(who, described)
    stager = PartitionStager(columns, who, described)
    looking = _look_ahead(described, options.topic)
    try:
        for rb in batches:
            if looking is not None:
                looking.result()  # the describer is the stager's from here on
                looking = None
            for staged_batches in stager.add(rb):
                area.write(staged_batches)
        _settle(looking, options)
        looking = None
        staged = stager.finish(area.finish())
    except BaseException:
        _settle(looking, options)  # nothing else may use the describer meanwhile
        area.discard()
        raise
    if task == MERGING_TASK and options.merge_small_segments:
        topics = [t for t, _ in staged.topic_partitions]
        if options.topic is not None:
            topics.append(options.topic)
        try:
            merge_small_segments(described.refreshed(topics), topics, clock)
        except SeglogError as e:  # best effort: the rows are staged, the next batch retries
            logger.warning(
                "task %d of batch %d could not merge small segments of %s in %s: %s",
                task,
                batch_id,
                ", ".join(sorted(set(topics))),
                redact_uris(options.log_dirs),
                e,
            )
    return staged


def _look_ahead(described: BucketTopics, topic: str | None) -> Future[object] | None:
    """Refresh the log of the sink's ``topic`` in a thread while the task's first rows
    are on their way (Spark hands them over once the input's first batch is read): the
    task's look at the bucket (a LIST, a GET per commit since the last task; the
    catalog's too in a new Python worker) is then off its critical path. The thread is
    the describer's only user until ``result()`` returns; rows naming other topics
    refresh those when they meet them, as before."""
    if topic is None or (described.view is not None and described.view.get(topic) is not None):
        return None  # the driver's view describes it: no look at all
    pool = ThreadPoolExecutor(1, thread_name_prefix="seglog-sink-look")
    try:
        return pool.submit(described.refreshed, [topic])
    finally:
        pool.shutdown(wait=False)  # the thread ends with the refresh


def _settle(looking: Future[object] | None, options: SinkOptions) -> None:
    """Wait for a look-ahead nobody waited for: the task had no rows (it stages nothing
    and needs no topic) or failed first. Its error is not the task's then (the commit
    reads the bucket itself), only worth a debug line."""
    if looking is None:
        return
    try:
        looking.result()
    except SeglogError as e:
        logger.debug(
            "the seglog sink task's look at the topic of %s failed: %s",
            redact_uris(options.log_dirs),
            e,
        )
