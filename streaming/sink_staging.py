"""Executor side of the exactly-once sink, for every backend: what staging is made of.

A write task routes each input row to its topic-partition, encodes each partition's rows
into RecordBatch v2 batches and hands them to its backend's ``StagingArea`` (all of that
is ``sink_stager.PartitionStager``): staging files in the log dir
(``sink_local_staging``) or fragments uploaded to the bucket (``sink_bucket_staging``).
At the end the area finishes them (a bucket's PUTs are durable; local files are written
but not fsynced: the commit fsyncs what it copies into the logs) and the task returns a
``StagedTask``: a small, picklable description that the driver's commit
(``sink_protocol.commit``) publishes.
Nothing staged is visible to readers. This module holds those types, the sink's
identity in the batches (``producer_fields``) and the local layout.

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
"""

from __future__ import annotations

import hashlib
import logging
import os
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from seglog.logstore.bucket.bucket_staging import sink_dir_name
from seglog.logstore.config.config import LogConfig
from seglog.logstore.errors import (
    ConfigError,
)
from seglog.logstore.storage.file_names import SINK_STATE_DIR
from seglog.logstore.storage.object_store_config import redact_uris
from seglog.logstore.storage.storage import LOCAL
from seglog.logstore.util.clock import SYSTEM_CLOCK, Clock

from .errors import SinkCommitError
from .sink_options import SinkOptions

logger = logging.getLogger(__name__)

__all__ = ["Fragment", "StagedFragment", "StagedTask", "StagingAttempt", "StagingTopic",
           "StagingArea", "StagedOutput", "StagedBatches", "TopicDescriber",
           "producer_fields", "producer_id_of", "staging_root", "sink_state_dir", "SINK_DIR",
           "new_attempt_uid"]

SINK_DIR = SINK_STATE_DIR
"""The sink's private directory inside each log dir (staging files and ledgers)."""
STAGING_SUFFIX = ".stage"
MAX_BATCH_ID = (1 << 46) - 1
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
class StagedBatches:
    """Encoded record batches of one topic-partition (base offsets from 0), as
    ``PartitionStager.add`` returns them for the staging area."""

    topic: StagingTopic
    partition: int
    data: bytearray
    records: int


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


class TopicDescriber(Protocol):
    """What a task knows of the topics it writes (``sink_topics``), handed to the stager
    and to its backend's ``StagingArea`` alike."""

    def describe_topic(self, name: str) -> StagingTopic:
        """Partition count and config of ``name`` (a missing one: the sink's creation
        settings, after ``require_creatable``)."""
        ...


class StagingArea(Protocol):
    """Where a task's encoded batches go (a backend's half of staging): ``PartitionStager``
    routes, encodes and checks rows the same way for every backend and hands each
    partition's bytes here."""

    def write(self, batches: StagedBatches) -> None:
        """Stage encoded batches (base offsets from 0) of one topic-partition."""
        ...

    def finish(self) -> StagedOutput:
        """Finish everything staged and describe it; on failure, discard it."""
        ...

    def discard(self) -> None:
        """Remove what was staged (a failed task leaves nothing behind)."""
        ...


def check_partition_count(options: SinkOptions, topic: str, actual: int) -> None:
    """An explicit ``numPartitions`` must match an existing topic: never ignore it silently."""
    if options.num_partitions_given and actual != options.num_partitions:
        raise ConfigError(
            f"option 'numPartitions' is {options.num_partitions} but topic {topic!r} already "
            f"exists with {actual} partition(s) in {redact_uris(options.log_dirs)}; the sink "
            "does not change a topic's partition count: drop the option or make it match")


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
