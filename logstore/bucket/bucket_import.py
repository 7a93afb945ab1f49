"""``import_log_dir``: a local log dir (a Kafka broker's or a seglog one) copied into a
bucket log dir (``seglog import DIR URI``), the reverse of ``bucket_export``.

The source is only read, through a ``LogDirsReader`` (no lock: a running writer or broker
may keep going; what is imported is what is published, up to each high watermark). For
each topic, in order, and with nothing written before every check passed:

- the topic is created in one commit with the source's partition count (the highest
  partition number + 1: a broker's dir may hold only some partitions of a topic, the
  others are created empty), its config overrides and its topic id (Kafka's
  ``partition.metadata``), so the bucket names the topic as the broker did;
- each partition's whole batches from its log start offset to its high watermark are
  copied byte for byte (offsets, timestamps, CRCs, producer fields and codecs are
  Kafka's), read in chunks of ``chunk_bytes``, cut into segments of up to
  ``segment.bytes``, uploaded with their offset and time indexes, then committed in one
  commit per partition with the source's log start offset. Each segment's base offset is
  where the previous one ended (the first: 0), so the offsets a compaction or retention
  left without records stay without records, and no commit adds a gap.

Transactional and control batches are refused (a bucket does not take them yet), naming
the partition, before its topic is created. A failure part-way deletes the topics this
import created (their objects are collected by the next maintenance), so a run either
imports a topic whole or leaves no trace of it. Topics that already exist in the bucket
are refused before anything is written.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..config.config import LogConfig
from ..errors import CorruptRecordError, InvalidRecordError, TopicExistsError
from ..manager.log_dirs_reader import LogDirsReader
from ..records.record_format import INT32_MAX, BatchHeader, verify_all
from .bucket_commit_log import Change
from .bucket_committer import BucketCommitter
from .bucket_objects import discard, upload
from .bucket_segment import SegmentObjects, build_segments
from .bucket_state import BucketState, PartitionChange, SegmentEntry, TopicSpec, tp_key

if TYPE_CHECKING:
    from ..log.log_read import LogReads

logger = logging.getLogger(__name__)

IMPORT_CHUNK_BYTES = 64 << 20
"""How much of a partition is read, cut into segments and uploaded at a time (memory)."""


@dataclass(frozen=True, slots=True)
class ImportStats:
    topics: int
    partitions: int
    segments: int
    bytes: int
    records: int


def import_log_dir(
    target: BucketCommitter,
    source: LogDirsReader,
    topics: Iterable[str] | None = None,
    *,
    chunk_bytes: int = IMPORT_CHUNK_BYTES,
    progress: Callable[[int, int], object] | None = None,
) -> ImportStats:
    """Copy ``topics`` (default: every topic) of ``source`` into ``target``; see the
    module docstring. Raises TopicExistsError, InvalidRecordError (transactions),
    CorruptRecordError (a damaged batch, naming the partition). ``progress(n, total)``:
    n more bytes read of the ``total`` the source partitions' segments hold."""
    target.check_writable()
    names = sorted(source.topics() if topics is None else topics)
    for name in names:
        source.partitions(name)  # UnknownTopicOrPartitionError, naming it, before anything
    clash = sorted(set(names) & set(target.topics()))
    if clash:
        raise TopicExistsError(
            f"topic(s) {', '.join(clash)} already exist in {target.uri}: "
            "import copies whole topics into a bucket that lacks them"
        )
    totals = [0, 0, 0, 0]  # partitions, segments, bytes, records
    for name in names:
        _refuse_transactions(source, name)
    total = sum(source.get_log(n, p).size_in_bytes for n in names for p in source.partitions(n))

    def read(n: int) -> None:
        if progress is not None:
            progress(n, total)

    for name in names:
        _import_topic(target, source, name, chunk_bytes, totals, read)
    return ImportStats(len(names), *totals)


def _refuse_transactions(source: LogDirsReader, topic: str) -> None:
    """InvalidRecordError when a partition of ``topic`` holds transactional or control
    batches (found from the transaction index and producer state: no data is read)."""
    for p in source.partitions(topic):
        log = source.get_log(topic, p)
        if log.last_stable_offset < log.high_watermark or log.aborted_transactions(
            log.log_start_offset, log.high_watermark
        ):
            raise InvalidRecordError(
                f"partition {topic}-{p} holds transactions; a bucket does not take "
                "transactional batches yet (import the other topics with --topic)"
            )


def _import_topic(
    target: BucketCommitter,
    source: LogDirsReader,
    topic: str,
    chunk_bytes: int,
    totals: list[int],
    read: Callable[[int], None],
) -> None:
    numbers = source.partitions(topic)
    count = numbers[-1] + 1
    if len(numbers) != count:
        logger.warning(
            "%s: the source holds partitions %s of topic %s; the others are created empty",
            target.uri,
            numbers,
            topic,
        )
    spec = TopicSpec(count, source.topic_overrides(topic), source.topic_ids([topic])[topic])

    def create(state: BucketState) -> Change:
        if topic in state.topics:
            raise TopicExistsError(f"topic {topic!r} already exists in {target.uri}")
        return Change(topics={topic: spec})

    target.commit("create_topic", create)
    try:
        config = source.topic_config(topic)
        for p in numbers:
            _import_partition(
                target, source.get_log(topic, p), topic, p, config, chunk_bytes, totals, read
            )
    except BaseException:
        try:
            target.delete_topic(topic)
        except Exception:  # the import's own error matters more; say what is left
            logger.exception(
                "%s: cannot delete topic %s after its import failed; delete "
                "it (seglog delete) before importing again",
                target.uri,
                topic,
            )
        raise
    logger.info("imported topic %s (%d partition(s)) into %s", topic, count, target.uri)


def _import_partition(
    target: BucketCommitter,
    log: LogReads,
    topic: str,
    partition: int,
    config: LogConfig,
    chunk_bytes: int,
    totals: list[int],
    read: Callable[[int], None],
) -> None:
    key = tp_key(topic, partition)
    start, end = log.log_start_offset, log.high_watermark
    entries: list[SegmentEntry] = []
    uploaded: list[SegmentObjects] = []
    base = 0
    try:
        for chunk in log.read_chunks(start, end, chunk_bytes) if start < end else ():
            read(len(chunk))
            headers = _checked_headers(chunk, key)
            for group in _segment_groups(headers, base, config.segment_bytes):
                (segment,) = build_segments(
                    chunk,
                    group,
                    topic=topic,
                    partition=partition,
                    segment_bytes=INT32_MAX,
                    index_interval_bytes=config.index_interval_bytes,
                    base_offset=base,
                    inline_index_bytes=target.inline_index_bytes,
                )
                upload(target.storage, [segment])
                uploaded.append(segment)
                entries.append(segment.entry)
                base = segment.entry.next_offset
                totals[2] += segment.entry.size
                totals[3] += sum(h.records_count for h in group)
        if not entries and start > 0:
            logger.warning(
                "%s: partition %s holds no records and starts at offset %d; it "
                "is imported empty, starting at 0",
                target.uri,
                key,
                start,
            )
        if entries:
            lso = start if start > 0 else None
            change = Change(
                partitions={key: PartitionChange(add=tuple(entries), log_start_offset=lso)}
            )
            target.commit("append", lambda state: change)
    except BaseException:
        discard(target.storage, uploaded)  # no commit names them
        raise
    totals[0] += 1
    totals[1] += len(entries)


def _checked_headers(chunk: memoryview, key: str) -> list[BatchHeader]:
    headers = []
    for check in verify_all(chunk):
        h = check.header
        if h is None or not check.valid:
            raise CorruptRecordError(
                f"partition {key}: {check.reason} (seglog check DIR names the file)"
            )
        if h.is_transactional or h.is_control:
            raise InvalidRecordError(
                f"partition {key}: the batch at offset {h.base_offset} "
                "is transactional or a control batch; a bucket does not "
                "take them yet"
            )
        headers.append(h)
    return headers


def _segment_groups(
    headers: list[BatchHeader], base: int, segment_bytes: int
) -> list[list[BatchHeader]]:
    """``headers`` cut into segments of at most ``segment_bytes`` (a larger batch alone),
    each based where the previous ends, offsets within 2^31 of the base."""
    groups: list[list[BatchHeader]] = []
    group: list[BatchHeader] = []
    group_base = base
    for h in headers:
        if group and (
            h.end_position - group[0].position > segment_bytes
            or h.last_offset - group_base > INT32_MAX
        ):
            groups.append(group)
            group_base = group[-1].last_offset + 1
            group = []
        if h.last_offset - group_base > INT32_MAX:
            raise InvalidRecordError(
                f"offsets {group_base}..{h.last_offset} hold no record: "
                "a gap wider than a segment can span (2^31 offsets)"
            )
        group.append(h)
    if group:
        groups.append(group)
    return groups
