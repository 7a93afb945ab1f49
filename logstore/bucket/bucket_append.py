"""Appends to a bucket log dir: any number of partitions in ONE commit (group commit)
per log: the legacy topics of the catalog log together, each topic in its own log alone
(``bucket_view.topic_groups``, in that order; a failure after the first group raises
``PartialCommitError`` naming the topics committed).

``append_many(manager, {(topic, partition): records, ...})`` checks every partition's
batches as ``Log.append`` checks them (``log_validator``: CRC, sizes, timestamps,
``max.message.bytes``) before anything is uploaded, so a bad batch in any partition fails
the whole call with nothing visible. Then ``CommitLog.commit``'s ``build``:

1. per partition, gives the batches offsets from the committed log end and cuts them into
   segments of at most ``segment.bytes`` (``bucket_segment.build_segments``; small indexes
   inline in the entries);
2. uploads every partition's new objects at once (one pool, at most ``UPLOAD_THREADS``
   requests in flight): one round trip however many partitions, not one per partition;
3. returns one change naming every partition's new segments: the conditional PUT that
   follows makes all of them visible at once.

A lost race re-uploads nothing: a partition whose log end moved keeps its upload (its
batches' stored base offsets, and its object names, stay those of the end it was stamped
from) and is committed with ``offset_delta`` = the new end - that end, which readers add
to each batch's base offset (outside Kafka's CRC; indexes hold offsets relative to the
segment, so they stay valid). Retrying is then the commit alone; a lone writer's objects
and entries are what they always were (delta 0). A partition whose topic config changed
(another process's ``alter_topic_config``) is checked again against the config of the
state it commits on, and cut by its ``segment.bytes``. An append that is certainly not
committed (a lost race given up, a check that failed on a fresh state: a partition
deleted, a new config refusing the batches) deletes its uploads; after a failed request
the commit may have landed, so they stay (an orphan the collector removes if not).

A synchronous append is therefore two sequential requests: the ``.log`` PUT(s), then the
commit (docs/object-storage.md, "Performance").

Thread-safety: a call's ``PartitionAppend``s belong to it; concurrent calls serialize on
the commit log.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ..config.config import LogConfig
from ..errors import (
    InvalidRecordError,
    KafkaStorageError,
    PartialCommitError,
    SeglogError,
    UnknownTopicOrPartitionError,
)
from ..log.log import AppendInfo
from ..log.log_validator import assign_offsets_from, validate_batches
from ..records.record_format import BatchHeader, TopicPartition
from .bucket_commit_log import Change
from .bucket_committer import BucketCommitter
from .bucket_segment import SegmentObjects, build_segments
from .bucket_state import BucketState, PartitionChange, SegmentEntry, TopicSpec, tp_key
from .bucket_view import topic_groups

if TYPE_CHECKING:
    from ..storage.storage import Storage

UPLOAD_THREADS = 16
"""The most objects an append uploads at once."""


@dataclass
class PartitionAppend:
    """One partition's part of an append: its batches, checked against ``config`` (the
    topic's ``spec``), stamped from the log end ``end`` (None: not yet) and cut into
    ``segments``, which are in the bucket once ``uploaded``. Stamped and uploaded are
    apart: a build that stamps a part and then fails on a later one uploads nothing, and
    the next build must upload it, not take it as done. Not thread-safe (one call owns
    it)."""

    topic: str
    partition: int
    spec: TopicSpec
    config: LogConfig
    buf: bytearray
    headers: list[BatchHeader]
    end: int | None = None
    stored: int = 0
    """The log end ``stamped`` is from (the stored base offsets); ``end`` - ``stored`` is
    the ``offset_delta`` the segments are committed with (0 unless a race moved ``end``
    after the upload)."""
    uploaded: bool = False
    stamped: list[BatchHeader] = field(default_factory=list)
    segments: list[SegmentObjects] = field(default_factory=list)

    @property
    def key(self) -> str:
        return tp_key(self.topic, self.partition)

    @property
    def delta(self) -> int:
        """What readers add to the stored offsets (0: stamped from the end committed on)."""
        return 0 if self.end is None else self.end - self.stored

    @property
    def next_offset(self) -> int:
        """The log end after this part, once committed."""
        return self.stamped[-1].last_offset + 1 + self.delta

    def info(self) -> AppendInfo:
        hs, d = self.stamped, self.delta
        max_ts, max_ts_offset = -1, hs[0].last_offset
        for h in hs:
            if h.max_timestamp > max_ts:
                max_ts, max_ts_offset = h.max_timestamp, h.last_offset
        return AppendInfo(hs[0].base_offset + d, hs[-1].last_offset + d, max_ts,
                          max_ts_offset + d, sum(h.records_count for h in hs), len(self.buf))


def append_many(committer: BucketCommitter,
                records: Mapping[TopicPartition, bytes | bytearray | memoryview]
                ) -> dict[TopicPartition, AppendInfo]:
    """Validate, upload and commit every partition's batches in one commit; see the
    module docstring. Returns each partition's ``AppendInfo`` (an empty buffer's: the
    log end, nothing appended)."""
    committer.check_writable()
    pending: list[PartitionAppend] = []
    empty: list[TopicPartition] = []
    for (topic, partition), data in records.items():
        part = checked_append(committer, topic, partition, data)
        if part is None:
            empty.append((topic, partition))
        else:
            pending.append(part)
    out: dict[TopicPartition, AppendInfo] = {}
    committed: list[str] = []
    for group in topic_groups(committer.state, {p.topic for p in pending}):
        # One commit per group: a topic in its own log is committed alone
        # (``bucket_logs``), so appends to other topics never race this one.
        parts = [p for p in pending if p.topic in group]
        try:
            _commit(committer, parts)
        except SeglogError as e:
            if not committed:
                raise
            raise PartialCommitError(
                f"append to {committer.uri}: topic(s) {committed} committed, then topic(s) "
                f"{group} failed: {e}", tuple(committed)) from e
        committed += group
        out.update({(p.topic, p.partition): p.info() for p in parts})
    for topic, partition in empty:
        hw = committer.state.partitions[tp_key(topic, partition)].high_watermark
        out[(topic, partition)] = AppendInfo(hw, hw - 1, -1, -1, 0, 0)
    return {tp: out[tp] for tp in records}


def checked_append(committer: BucketCommitter, topic: str, partition: int,
                   data: bytes | bytearray | memoryview) -> PartitionAppend | None:
    """The partition's batches, checked (offsets relative); None when there are none."""
    key = tp_key(topic, partition)
    committer.partition_state(topic, partition)  # UnknownTopicOrPartitionError before any upload
    spec = committer.spec(topic)
    config = committer.topic_config(topic)
    buf = bytearray(data)
    headers = validate_batches(buf, config, tp=key, now_ms=committer.clock.milliseconds(),
                               assign_offsets=True)
    if any(h.is_transactional or h.is_control for h in headers):
        raise InvalidRecordError(f"append to {key} in {committer.uri}: transactional and "
                                 f"control batches are not supported on a bucket yet")
    return PartitionAppend(topic, partition, spec, config, buf, headers) if headers else None


def _commit(committer: BucketCommitter, pending: list[PartitionAppend]) -> None:
    def build(state: BucketState) -> Change:
        upload_parts(committer.storage, restamp(committer, state, pending))
        return change_of(pending)

    try:
        committer.commit("append", build)
        settle(committer, pending)
    except KafkaStorageError:
        raise  # a failed request: the commit may have landed, the uploads stay
    except SeglogError:
        # A lost race given up, or a check that failed on a fresh state: certainly not
        # committed.
        for part in pending:
            if part.uploaded:
                discard(committer.storage, part.segments)
        raise


def restamp(committer: BucketCommitter, state: BucketState, parts: list[PartitionAppend],
            failed: list[PartitionAppend] | None = None) -> list[PartitionAppend]:
    """Make ``parts`` (in commit order; several may be of one partition) follow ``state``:
    each partition's first part from its committed log end, each later one from the end
    of the one before. A part whose offsets moved keeps its upload and is committed with
    an ``offset_delta`` (one not uploaded yet is re-stamped instead, which costs no
    request); returns the parts to upload (every part
    not uploaded for its offsets, including one stamped by an earlier build that failed
    before its upload). A part whose check raises is appended to ``failed`` (the caller
    may drop its partition and commit the others)."""
    ends: dict[str, int] = {}
    for part in parts:
        try:
            _restamp_part(committer, state, part, ends)
        except SeglogError:
            if failed is not None:
                failed.append(part)
            raise
    return [part for part in parts if not part.uploaded]


def _restamp_part(committer: BucketCommitter, state: BucketState, part: PartitionAppend,
                  ends: dict[str, int]) -> None:
    """``restamp`` of one part; ``ends``: the end of the partitions' parts before it."""
    ps = state.partitions.get(part.key)
    if ps is None:
        raise UnknownTopicOrPartitionError(
            f"partition {part.key} of {committer.uri} was deleted during the append")
    end = ends.get(part.key, ps.high_watermark)
    spec = state.topics[part.topic]
    if spec != part.spec:
        # Another process changed the topic's config: check the batches again
        # against it (max.message.bytes, timestamps), cut them by its segment.bytes.
        config = LogConfig.from_properties(dict(spec.config),
                                           base=committer.default_topic_config)
        validate_batches(part.buf, config, tp=part.key,
                         now_ms=committer.clock.milliseconds(), assign_offsets=True)
        part.spec, part.config, part.end = spec, config, None
    if part.end != end:
        if part.uploaded and part.end is not None and end > part.stored:
            # Lost a race: the upload stays, the commit moves it up (``offset_delta``).
            part.end = end
        else:
            if part.uploaded:
                # The end went back (a legacy topic deleted and created again): a delta
                # below 0 is refused by readers, so cut the segments again.
                discard(committer.storage, part.segments)
            part.segments = []
            stamp(committer, part, end)
    ends[part.key] = part.next_offset


def stamp(committer: BucketCommitter, part: PartitionAppend, end: int) -> None:
    """Give ``part``'s batches offsets from ``end`` and cut them into segments (nothing
    uploaded yet)."""
    part.stamped = assign_offsets_from(part.buf, part.headers, end, tp=part.key, assign=True)
    part.segments = build_segments(
        part.buf, part.stamped, topic=part.topic, partition=part.partition,
        segment_bytes=part.config.segment_bytes,
        index_interval_bytes=part.config.index_interval_bytes,
        inline_index_bytes=committer.inline_index_bytes)
    part.end, part.stored, part.uploaded = end, end, False


def change_of(parts: list[PartitionAppend]) -> Change:
    """One commit adding every part's segments, each partition's in the parts' order, a
    part that kept its upload through a lost race with its ``offset_delta``. Valid at any
    log end (``at_end``): after a lost race it is created blind, and ``settle`` learns
    where it went."""
    adds: dict[str, tuple[SegmentEntry, ...]] = {}
    for part in parts:
        adds[part.key] = adds.get(part.key, ()) + tuple(
            shifted(s.entry, part.delta) for s in part.segments)
    return Change(partitions={key: PartitionChange(add=add) for key, add in adds.items()},
                  at_end=True)


def settle(committer: BucketCommitter, parts: list[PartitionAppend]) -> None:
    """After the commit: move ``parts`` to where the fold put them (a blind create lands
    above the end its build saw: ``CommitLog.last_shifts``), so their ``AppendInfo`` and
    later restamps use the committed offsets."""
    shifts = committer.commits.last_shifts
    for part in parts:
        if part.end is not None:
            part.end += shifts.get(part.key, 0)


def shifted(entry: SegmentEntry, delta: int) -> SegmentEntry:
    """``entry`` committed ``delta`` offsets above where its batches are stored."""
    if not delta:
        return entry
    return replace(entry, base_offset=entry.base_offset + delta,
                   next_offset=entry.next_offset + delta, offset_delta=delta)


def upload(storage: Storage, segments: list[SegmentObjects]) -> None:
    """PUT every object at once (the commit that follows waits for all): one round trip,
    not one per object. A pool per call, not per process: a forked worker would inherit a
    process-wide pool without its threads."""
    uploads = [u for seg in segments for u in seg.uploads()]
    if len(uploads) <= 1:
        for key, data in uploads:
            storage.write_atomic(key, data)
        return
    with ThreadPoolExecutor(min(len(uploads), UPLOAD_THREADS),
                            thread_name_prefix="seglog-upload") as pool:
        futures = [pool.submit(storage.write_atomic, key, data) for key, data in uploads]
    for future in futures:
        future.result()  # the first failure, once none is still running


def upload_parts(storage: Storage, parts: list[PartitionAppend]) -> None:
    """``upload`` every part's segments; only then is a part ``uploaded`` (a failed
    upload leaves it to be uploaded again, never taken as done)."""
    upload(storage, [seg for part in parts for seg in part.segments])
    for part in parts:
        part.uploaded = True


def discard(storage: Storage, segments: list[SegmentObjects]) -> None:
    """Uploads of a lost attempt: no commit references them, nobody else knows them."""
    for seg in segments:
        for key, _data in seg.uploads():
            storage.delete(key)
