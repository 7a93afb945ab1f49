"""Typed, validated options and input columns of the ``seglog`` sink.

Options are parsed once, on the driver, when a writer is created, so a bad option fails
the query before any task runs. Spark hands options over case-insensitively (keys
lowercased); names are matched without regard to case, except the part after
``topic.`` (Kafka config names are lowercase anyway). Errors name the option.

The options, their defaults and meanings are declared once, in ``SINK_OPTIONS`` (the
options reference, ``docs/options.md``, is generated from it). Kafka connector options
follow ``kafka_compat``: broker-only ones are listed in ``ignored``,
``kafka.compression.type`` and ``kafka.batch.size`` are honoured, the rest refused.

Input columns follow Spark's Kafka sink and its types: ``value`` (required; binary or
string), ``key`` (binary or string), ``topic`` (string), ``partition`` (int, not bigint),
``headers`` (``array<struct<key: string, value: binary>>``: a header value is binary,
not string), and seglog's ``timestamp`` (timestamp, or long epoch milliseconds). As in
Kafka's sink, the ``topic`` option overrides the ``topic`` column, and other columns are
ignored (a source DataFrame can be written back).

>>> o = SinkOptions.parse({"path": "/data", "topic": "out", "topic.retention.ms": "1000"})
>>> o.log_dirs, o.topic, o.topic_config
(('/data',), 'out', {'retention.ms': '1000'})
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from seglog.logstore.config.topics import parse_overrides, validate_topic_name
from seglog.logstore.errors import (
    ConfigError,
    InvalidTopicError,
    LogDirError,
    UnknownTopicOrPartitionError,
)
from seglog.logstore.storage.object_store_config import (
    NO_STORAGE_OPTIONS,
    StorageOptions,
    is_object_uri,
    redact_uris,
)
from seglog.logstore.storage.storage import LOCAL

from .kafka_compat import SINK_RULES, documented_name, refusal, rule_for
from .option_values import (
    STORAGE_OPTION,
    OptionSpec,
    log_dirs_option,
    option_bool,
    option_non_negative_int,
    option_positive_int,
    parse_log_dirs,
    storage_options_for,
    take_storage_options,
)

__all__ = ["SinkOptions", "SinkColumns", "SINK_OPTIONS", "COMPRESSION_TYPES",
           "TOPIC_CONFIG_PREFIX", "check_log_dirs", "log_dirs_option"]

COMPRESSION_TYPES = ("none", "gzip", "snappy", "lz4", "zstd")
TOPIC_CONFIG_PREFIX = "topic."
DEFAULT_MAX_BATCH_BYTES = 1 << 20
DEFAULT_LOCK_TIMEOUT_MS = 30_000
DEFAULT_MAINTENANCE_INTERVAL_MS = 300_000
DEFAULT_MERGE_MIN_SEGMENTS = 32
DEFAULT_MERGE_SMALL_SEGMENT_BYTES = 4 << 20

SINK_OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("path", "(required)", "The log dir, or several separated by commas "
               "(`save(dir)` and `start(dir)` set it)."),
    OptionSpec("logDirs", "", "Same as `path` (give one of them)."),
    OptionSpec("topic", "", "The topic of every row; overrides the `topic` column (Kafka's "
               "rule). Without it, each row's `topic` column says where it goes."),
    OptionSpec("compression.type", "none", "Codec of the batches written: none, gzip, "
               "snappy, lz4, zstd (`kafka.compression.type` is the same option)."),
    OptionSpec("createTopics", "true", "Create a missing topic (with `numPartitions` and "
               "the `topic.<config>` options); `false` fails on a missing topic."),
    OptionSpec("numPartitions", "1", "Partitions of a topic the sink creates. Given for "
               "an existing topic with another partition count, the write fails."),
    OptionSpec("topic.<config>", "", "A Kafka topic config for topics the sink creates, "
               "e.g. `topic.retention.ms`, `topic.cleanup.policy` (see Topic configs)."),
    OptionSpec("allowExpiredTimestamps", "false", "Write rows whose `timestamp` is already "
               "older than the topic's `retention.ms` (the next maintenance deletes them). "
               "By default such a write fails before anything is visible."),
    OptionSpec("maxBatchBytes", str(DEFAULT_MAX_BATCH_BYTES), "Uncompressed size of the "
               "record batches written, capped by the topic's `max.message.bytes` "
               "(`kafka.batch.size` is the same option)."),
    OptionSpec("lockTimeoutMs", str(DEFAULT_LOCK_TIMEOUT_MS), "How long a commit waits for "
               "another writer to release a log dir's `.lock`."),
    OptionSpec("maintenanceIntervalMs", str(DEFAULT_MAINTENANCE_INTERVAL_MS), "How often a "
               "commit also runs maintenance (retention, checkpoints, deletions, "
               "compaction; on a bucket also the merge of every run of 2 or more small "
               "segments of the sink's topics: no small segment waits much longer); Kafka's "
               "`log.retention.check.interval.ms`. On a bucket the first run is one interval "
               "after the sink's first commit (0: every commit)."),
    OptionSpec("mergeMinSegments", str(DEFAULT_MERGE_MIN_SEGMENTS), "On a bucket: after "
               "its commit, the driver merges a partition the micro-batch wrote once this "
               "many adjacent segments under `mergeSmallSegmentBytes` lie side by side (a "
               "reader pays a request per segment); when `maintenanceIntervalMs` has passed, "
               "every partition of the sink's topics from 2 on. Off the micro-batch's "
               "critical path: its rows are visible before, and the merge runs in the "
               "background of the driver while the next micro-batch runs. Local log dirs "
               "ignore it."),
    OptionSpec("mergeSmallSegmentBytes", str(DEFAULT_MERGE_SMALL_SEGMENT_BYTES), "On a "
               "bucket: segments under this size are merged after the commit (into segments "
               "of up to 64 MiB); larger ones cost a reader little more than merged ones and "
               "are never rewritten. Local log dirs ignore it."),
    OptionSpec("mergeSmallSegments", "false", "On a bucket: `true` also makes task 0 of "
               "each micro-batch merge runs of 8 or more committed segments under 32 MiB "
               "into segments of up to 64 MiB before the micro-batch commits (the default "
               "before 2026-11-27): every micro-batch waits for it, and about every byte "
               "of mid-sized fragments passes the store twice more. Local log dirs ignore it."),
    OptionSpec("checkpointLocation", "", "Spark's own option (passed to the sink only when "
               "given with `option()`, not from `spark.sql.streaming.checkpointLocation`); the "
               "sink uses it only to name itself when Spark gives no query id."),
    OptionSpec("queryName", "", "Spark's own, set by `writeStream.queryName(name)`: the "
               "query's name in Spark's progress events (`lag.query_name` of "
               "`SeglogLagListener`); the sink's warnings name the query by it."),
    STORAGE_OPTION,
)
_NAMES = tuple(o.name for o in SINK_OPTIONS
               if o.name != "topic.<config>" and o is not STORAGE_OPTION)
_CANONICAL = {n.lower(): n for n in _NAMES}


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """The sink's options, parsed. Immutable and picklable (it travels to executors)."""

    log_dirs: tuple[str, ...]
    topic: str | None = None
    compression: str = "none"
    create_topics: bool = True
    num_partitions: int = 1
    topic_config: Mapping[str, str] | None = None
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES
    lock_timeout_ms: int = DEFAULT_LOCK_TIMEOUT_MS
    maintenance_interval_ms: int = DEFAULT_MAINTENANCE_INTERVAL_MS
    checkpoint_location: str | None = None
    query_name: str | None = None
    """Spark's ``queryName`` of the streaming query (only to name it in warnings)."""
    num_partitions_given: bool = False
    """Whether ``numPartitions`` was given (then an existing topic must have that many)."""
    allow_expired_timestamps: bool = False
    merge_small_segments: bool = False
    """On a bucket, whether task 0 of each micro-batch also merges small committed
    segments before the commit (``sink_bucket_merge.merge_small_segments``)."""
    merge_min_segments: int = DEFAULT_MERGE_MIN_SEGMENTS
    """On a bucket, how many adjacent small segments make the driver merge a partition
    after its commit (``sink_bucket_merge.merge_after_commit``)."""
    merge_small_segment_bytes: int = DEFAULT_MERGE_SMALL_SEGMENT_BYTES
    """On a bucket, the size under which a segment is merged after the commit."""
    ignored: tuple[str, ...] = ()
    """Kafka connector options accepted without effect, as the user spelled them."""
    storage: StorageOptions = NO_STORAGE_OPTIONS
    """The ``storage.<name>`` options: endpoint, credentials... of a bucket log dir (its
    ``repr`` hides secrets; never written to a commit, ledger or checkpoint)."""

    @property
    def bucket_uri(self) -> str | None:
        """The bucket URI when the log dir is one (``parse`` allows one URI alone)."""
        first = self.log_dirs[0] if self.log_dirs else None
        return first if is_object_uri(first) else None

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> SinkOptions:
        """Validate ``options`` (any case). Raises ConfigError naming the option."""
        opts: dict[str, str] = {}
        mapped: dict[str, tuple[str, str]] = {}  # seglog option → (Kafka option, value)
        spelled: dict[str, str] = {n: n for n in _NAMES}  # the name given, for errors
        ignored: list[str] = []
        topic_props: dict[str, str] = {}
        storage: dict[str, str] = {}
        for raw_key, value in options.items():
            if value is None:
                continue
            key = str(raw_key)
            if take_storage_options(key, value, storage):
                continue
            if key.lower().startswith(TOPIC_CONFIG_PREFIX):
                topic_props[key[len(TOPIC_CONFIG_PREFIX):]] = str(value)
                continue
            name = _CANONICAL.get(key.lower())
            if name is None:
                rule = rule_for(key, SINK_RULES)
                if rule is None:
                    raise ConfigError(
                        f"unknown option {raw_key!r} for the seglog sink (known: "
                        f"{', '.join(_NAMES)}, {TOPIC_CONFIG_PREFIX}<kafka topic config> and "
                        f"{STORAGE_OPTION.name})")
                if rule.action == "refuse":
                    raise ConfigError(refusal(key, rule, "sink"))
                if rule.action == "ignore":
                    ignored.append(documented_name(key, rule))
                    continue
                mapped[str(rule.target)] = (documented_name(key, rule), str(value))
                continue
            opts[name] = str(value)
        for name, (key, value) in mapped.items():
            if name in opts and opts[name].strip().lower() != value.strip().lower():
                raise ConfigError(f"options {name!r} ({opts[name]!r}) and {key!r} ({value!r}) "
                                  "conflict: give one of them")
            opts[name] = value
            spelled[name] = key

        topic = opts.get("topic")
        if topic is not None:
            try:
                validate_topic_name(topic)
            except InvalidTopicError as e:
                raise InvalidTopicError(f"option 'topic': {e}") from None
        compression = opts.get("compression.type", "none").strip().lower()
        if compression == "uncompressed":
            compression = "none"
        if compression not in COMPRESSION_TYPES:
            raise ConfigError(
                f"invalid value {opts['compression.type']!r} for option "
                f"{spelled['compression.type']!r}: expected one of {', '.join(COMPRESSION_TYPES)}")
        try:
            topic_config = parse_overrides(topic_props)
        except ConfigError as e:
            raise ConfigError(f"invalid topic config option "
                              f"({TOPIC_CONFIG_PREFIX}<name>): {e}") from None
        log_dirs = parse_log_dirs(opts)
        if len(log_dirs) > 1 and any(is_object_uri(d) for d in log_dirs):
            raise ConfigError(
                f"option {'logDirs' if 'logDirs' in opts else 'path'!r} lists "
                f"{redact_uris(log_dirs)}: a bucket URI is the only log dir of a sink (a "
                "bucket has no per-disk placement to spread partitions over)")
        return cls(
            log_dirs=log_dirs,
            topic=topic,
            compression=compression,
            create_topics=option_bool(opts, "createTopics", True),
            num_partitions=option_positive_int(opts, "numPartitions", 1),
            topic_config=topic_config,
            max_batch_bytes=option_positive_int(
                _as_spelled(opts, spelled, "maxBatchBytes"), spelled["maxBatchBytes"],
                DEFAULT_MAX_BATCH_BYTES),
            lock_timeout_ms=option_non_negative_int(opts, "lockTimeoutMs",
                                                    DEFAULT_LOCK_TIMEOUT_MS),
            maintenance_interval_ms=option_non_negative_int(
                opts, "maintenanceIntervalMs", DEFAULT_MAINTENANCE_INTERVAL_MS),
            checkpoint_location=opts.get("checkpointLocation"),
            query_name=opts.get("queryName"),
            num_partitions_given="numPartitions" in opts,
            allow_expired_timestamps=option_bool(opts, "allowExpiredTimestamps", False),
            merge_small_segments=option_bool(opts, "mergeSmallSegments", False),
            merge_min_segments=_merge_min_segments(opts),
            merge_small_segment_bytes=option_positive_int(
                opts, "mergeSmallSegmentBytes", DEFAULT_MERGE_SMALL_SEGMENT_BYTES),
            ignored=tuple(ignored),
            storage=storage_options_for(
                log_dirs, storage, "logDirs" if "logDirs" in opts else "path"),
        )


def _merge_min_segments(opts: Mapping[str, str]) -> int:
    value = option_positive_int(opts, "mergeMinSegments", DEFAULT_MERGE_MIN_SEGMENTS)
    if value < 2:  # one segment is nothing to merge
        raise ConfigError(f"invalid value {opts['mergeMinSegments']!r} for option "
                          "'mergeMinSegments': must be at least 2")
    return value


def _as_spelled(opts: Mapping[str, str], spelled: Mapping[str, str], name: str
                ) -> dict[str, str]:
    """``name``'s value under the name the user gave it, so a parse error names that."""
    return {spelled[name]: opts[name]} if name in opts else {}


# ---------------------------------------------------------------------------- log dirs
def require_creatable(options: SinkOptions, topic: str, *, named_by: str = "") -> None:
    """The ``createTopics`` rule, for every place that finds ``topic`` missing (the
    driver's option check, a task, the commit): refused when the option is false, naming
    the log dirs and, with ``named_by``, the option that named the topic."""
    if options.create_topics:
        return
    prefix = f"option {named_by!r}: " if named_by else ""
    raise UnknownTopicOrPartitionError(
        f"{prefix}topic {topic!r} does not exist in {redact_uris(options.log_dirs)} and the "
        "option 'createTopics' is false")


def check_log_dirs(log_dirs: tuple[str, ...], option: str) -> None:
    """The driver's check, before any task runs, that every log dir is a directory this
    process may write, or one it may create. Raises LogDirError naming ``option``, the
    path and the cause. (Uses ``access``, which also refuses root on a read-only mount
    or an immutable directory.)"""
    for d in log_dirs:
        path = Path(d)
        if LOCAL.exists(path) and not LOCAL.is_dir(path):
            raise LogDirError(f"option {option!r}: {d} is a file, not a log directory")
        if LOCAL.is_dir(path):
            if not LOCAL.accessible(path, write=True):
                raise LogDirError(f"option {option!r}: log dir {d} is not writable by this "
                                  "process (permissions, a read-only mount, or immutable)")
            continue
        parent = path.parent
        while not LOCAL.exists(parent) and parent != parent.parent:
            parent = parent.parent
        if not LOCAL.is_dir(parent):
            raise LogDirError(f"option {option!r}: cannot create log dir {d}: {parent} is a "
                              "file, not a directory")
        if not LOCAL.accessible(parent, read=False, write=True):
            raise LogDirError(f"option {option!r}: cannot create log dir {d}: {parent} is "
                              "not writable by this process")


# ---------------------------------------------------------------------------- columns
_BINARY_LIKE = (pa.types.is_binary, pa.types.is_large_binary, pa.types.is_string,
                pa.types.is_large_string)
_COLUMN_NAMES = ("value", "key", "topic", "partition", "headers", "timestamp")


def _binary_like(t: pa.DataType) -> bool:
    return any(check(t) for check in _BINARY_LIKE)


def _binary(t: pa.DataType) -> bool:
    return bool(pa.types.is_binary(t) or pa.types.is_large_binary(t))


def _string(t: pa.DataType) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t))


def _headers_type(t: pa.DataType) -> bool:
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)):
        return False
    item = t.value_type
    if not pa.types.is_struct(item) or item.num_fields != 2:
        return False
    names = [item.field(i).name for i in range(2)]
    if names != ["key", "value"]:
        return False
    return _string(item.field(0).type) and _binary(item.field(1).type)


_EXPECTED = {
    "value": ("binary or string", _binary_like),
    "key": ("binary or string", _binary_like),
    "topic": ("string", _string),
    "partition": ("int (cast it: cast(partition AS int))", pa.types.is_int32),
    "headers": ("array<struct<key: string, value: binary>> (a header value is binary: "
                "cast(value AS binary))", _headers_type),
    "timestamp": ("timestamp or long (epoch ms)",
                  lambda t: pa.types.is_timestamp(t) or pa.types.is_int64(t)),
}


@dataclass(frozen=True, slots=True)
class SinkColumns:
    """Where each Kafka field sits in the input: canonical name → the input column name
    (Spark resolves names case-insensitively, and so does the sink)."""

    value: str
    key: str | None = None
    topic: str | None = None
    partition: str | None = None
    headers: str | None = None
    timestamp: str | None = None

    ignored: tuple[str, ...] = ()
    """Input columns the sink does not use (Kafka's sink ignores them too)."""

    @classmethod
    def resolve(cls, schema: pa.Schema, *, default_topic: str | None) -> SinkColumns:
        """Check an input schema (Arrow) against the Kafka sink's columns.

        As in Spark's Kafka sink, the ``topic`` option (``default_topic``) overrides a
        ``topic`` column, and columns the sink does not use are ignored (listed in
        ``ignored``), so a DataFrame read from a topic can be written back as it is.
        Raises ConfigError naming the missing or mistyped columns, or a missing topic
        (neither a ``topic`` column nor the ``topic`` option)."""
        found: dict[str, str] = {}
        unused = []
        for field in schema:
            canonical = field.name.lower()
            if canonical not in _COLUMN_NAMES or (canonical == "topic"
                                                  and default_topic is not None):
                unused.append(field.name)
                continue
            if canonical in found:
                raise ConfigError(f"columns {found[canonical]!r} and {field.name!r} both "
                                  f"map to the sink field {canonical!r}")
            expected, check = _EXPECTED[canonical]
            if not check(field.type):
                raise ConfigError(f"column {field.name!r} has type {field.type}; the seglog "
                                  f"sink expects {expected}")
            found[canonical] = field.name
        if "value" not in found:
            raise ConfigError("required column 'value' (binary or string) is missing from the "
                              "input of the seglog sink")
        if "topic" not in found and default_topic is None:
            raise ConfigError("no topic: give the option 'topic' or a 'topic' column")
        return cls(**found, ignored=tuple(unused))
