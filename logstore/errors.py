"""Every error the storage engine raises, in Kafka's vocabulary, under one base class.

The errors only the streaming layer raises (the sink's) are ``seglog.streaming.errors``,
also deriving from ``SeglogError``.

Messages carry what a person needs to act: the file or directory, the offsets, the
option or config key.
"""

from __future__ import annotations


class SeglogError(Exception):
    """Base of every error raised by seglog."""


class ConfigError(SeglogError, ValueError):
    """A config key or option is unknown or has an invalid value (the message names it)."""


class CorruptRecordError(SeglogError):
    """Bytes that should hold a record batch do not (bad CRC, size, magic...)."""


class RecordTooLargeError(SeglogError):
    """A batch is larger than ``max.message.bytes``."""


class InvalidRecordError(SeglogError):
    """A record is well formed but not acceptable here (e.g. a null key on a compacted topic)."""


class OffsetOutOfRangeError(SeglogError):
    """An offset is below the log start offset or above the log end offset."""


class InvalidOffsetError(SeglogError):
    """An index or append would break offset ordering."""


class CorruptIndexError(SeglogError):
    """An offset or time index file fails its sanity check; recovery rebuilds it."""


class CorruptCheckpointError(SeglogError):
    """A checkpoint file is malformed (version, count or line)."""


class CorruptPartitionMetadataError(CorruptCheckpointError):
    """A partition's ``partition.metadata`` (its topic id) is malformed; the message
    names the file. Never read as "no topic id": that would skip the check it serves."""


class LogDirLockedError(SeglogError):
    """Another writer holds the ``.lock`` of a log dir."""


class LogDirError(SeglogError):
    """A log dir is unusable: duplicated, unreadable, unwritable, or inconsistent."""


class KafkaStorageError(SeglogError):
    """An I/O failure while reading or writing log files."""


class InvalidStorageUriError(KafkaStorageError, ConfigError):
    """A log dir URI that names no usable bucket and prefix (the message quotes it)."""


class BucketNotFoundError(KafkaStorageError):
    """The bucket (or container) of an object-store log dir does not exist."""


class StorageAccessDeniedError(KafkaStorageError):
    """The object store refused the credentials (HTTP 401/403) for a request."""


class StorageUnreachableError(KafkaStorageError):
    """The object store did not answer (connection refused, timeouts) within the bounded
    retries; the message names the URI, the retry bound and the cause."""


class UnknownTopicOrPartitionError(SeglogError, KeyError):
    """The topic or partition does not exist in the given log dirs."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class TopicExistsError(SeglogError):
    """``create_topic`` was asked for a topic that already exists."""


class InvalidTopicError(SeglogError, ValueError):
    """A topic name breaks Kafka's naming rules."""


class ReadOnlyError(SeglogError):
    """A write was attempted through a read-only LogManager or Log."""


class DataLossError(SeglogError):
    """Data a source query should have read is gone (retention, deleted partition, truncation)."""


class MissingDataError(DataLossError):
    """Offsets ``[start, end)`` of a partition should be readable but are not in the log:
    retention removed them under a reader, or a segment file was deleted or cut short
    (see ``offset_continuity``). A reader may go on from ``end``."""

    def __init__(self, message: str, start: int = -1, end: int = -1) -> None:
        super().__init__(message)
        self.start = start
        self.end = end

    # keeps start and end across pickling (Spark workers)
    def __reduce__(self) -> tuple[type, tuple[str, int, int]]:
        return (type(self), (str(self), self.start, self.end))


class OffsetBelowLogStartError(MissingDataError, OffsetOutOfRangeError):
    """A read asked for offsets below the log start offset: ``[start, end)`` were removed
    (retention, DeleteRecords); ``end`` is the log start offset."""


class MissingSegmentError(MissingDataError, KafkaStorageError):
    """A segment object a bucket's commits reference is gone: offsets ``[start, end)``
    (the segment's) cannot be read. (One of another size than its commit says is a
    ``CorruptRecordError``: damaged or replaced, never skipped.) A ``MissingDataError``
    (``failOnDataLoss`` decides, as for a local segment file deleted or cut short) and a
    ``KafkaStorageError`` (the read path lists again, once, before reporting it)."""


class TopicIdChangedError(UnknownTopicOrPartitionError, DataLossError):
    """A log held across its topic's delete and re-create: the partition's name now
    belongs to another topic (another topic id), so every offset the holder knows names
    another topic's records. The held log raises this instead of serving them (the
    manager setting ``fail.on.data.loss=true``, the default; ``false`` warns and follows
    the new topic from its log start, as Kafka's consumer resets). Get the log again
    (``get_log``) to read the new topic. ``old_id``/``new_id``: None where unknown."""

    def __init__(self, message: str, topic: str = "", partition: int = -1,
                 old_id: str | None = None, new_id: str | None = None) -> None:
        super().__init__(message)
        self.topic = topic
        self.partition = partition
        self.old_id = old_id
        self.new_id = new_id

    # keeps the fields across pickling (Spark workers)
    def __reduce__(self) -> tuple[type, tuple[str, str, int, str | None, str | None]]:
        return (type(self), (str(self), self.topic, self.partition, self.old_id,
                             self.new_id))


class CorruptMetadataError(SeglogError):
    """A bucket's commit, snapshot or segment entry cannot be what the format says (it
    fails to parse, or applying it would break the log); the message names the object."""


class CommitConflictError(SeglogError):
    """A bucket writer lost the race for the next commit version too often (other
    writers kept committing first), or what it was committing was changed under it;
    nothing of its operation is visible."""


class CommitOutcomeUnknownError(KafkaStorageError):
    """A bucket writer's create of the next commit failed on the wire and neither a read
    of that commit nor the same create again could tell whether it landed: the operation
    may be visible. Refresh and look before doing it again (a blindly retried append may
    duplicate its records)."""


class ConditionalWriteNotEnforcedError(KafkaStorageError):
    """The store answered a conditional request as if it ignored the condition: a writer
    was told its create-if-absent of a commit version succeeded, yet that version holds
    another writer's commit (two writers both "won" it). What this writer committed
    there is not in the log. The message names the store, the version and the
    ``seglog probe-store`` command that checks a bucket."""


class AppendAbortedError(SeglogError):
    """A pipelined append (``append_async``) that was never committed because an earlier
    append of its partition failed: the offsets it was given
    followed that one's and are void. Nothing of it is visible; ``__cause__`` is the
    earlier failure."""


class PartialCommitError(SeglogError):
    """A bucket call that changes several topics in their own commit logs (one commit
    per topic, in name order) failed after some of them committed: the message names
    the topics whose part IS visible and the one that failed (``__cause__``); nothing of
    the later topics is."""

    def __init__(self, message: str, committed: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.committed = committed
