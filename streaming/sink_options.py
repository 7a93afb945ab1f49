"""Typed, validated options and input columns of the ``seglog`` sink.

Options are parsed once, on the driver, when a writer is created, so a bad option fails
the query before any task runs. Spark hands options over case-insensitively (keys
lowercased); names are matched without regard to case, except the part after
``topic.`` (Kafka config names are lowercase anyway). Errors name the option.

Options:

- ``path`` or ``logDirs`` (comma-separated): the log dir(s).
- ``topic``: the topic of rows without a ``topic`` column (or with a null one).
- ``compression.type``: ``none`` (default), ``gzip``, ``snappy``, ``lz4``, ``zstd``.
- ``createTopics`` (default ``true``): create a missing topic with ``numPartitions``
  (default 1) partitions and the ``topic.<kafka config>`` overrides
  (``topic.retention.ms``, ``topic.segment.bytes``...), validated by ``LogConfig``.
- ``maxBatchBytes`` (default 1 MiB): uncompressed size of the record batches written,
  capped by the topic's ``max.message.bytes``.
- ``lockTimeoutMs`` (default 30000): how long a commit waits for another writer to
  release a log dir's ``.lock`` before failing with ``LogDirLockedError``.
- ``maintenanceIntervalMs`` (default 300000, Kafka's ``log.retention.check.interval.ms``):
  how often a commit also runs the LogManager's maintenance (retention, checkpoints,
  deletions); the time of the last run is kept in the log dir, so it holds across the
  short-lived processes that commit micro-batches.
- ``checkpointLocation`` is accepted (Spark passes it along) and otherwise unused.

Input columns follow Spark's Kafka sink: ``value`` (required; binary or string),
``key`` (binary or string), ``topic`` (string), ``partition`` (integer), ``headers``
(``array<struct<key: string, value: binary>>``), ``timestamp`` (timestamp, or long
epoch milliseconds). Any other column is an error naming it.

>>> o = SinkOptions.parse({"path": "/data", "topic": "out", "topic.retention.ms": "1000"})
>>> o.log_dirs, o.topic, o.topic_config
(('/data',), 'out', {'retention.ms': '1000'})
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from seglog.logstore.errors import ConfigError, InvalidTopicError
from seglog.logstore.topics import parse_overrides, validate_topic_name

from .option_values import (
    option_bool,
    option_non_negative_int,
    option_positive_int,
    parse_log_dirs,
)

__all__ = ["SinkOptions", "SinkColumns", "COMPRESSION_TYPES", "TOPIC_CONFIG_PREFIX"]

COMPRESSION_TYPES = ("none", "gzip", "snappy", "lz4", "zstd")
TOPIC_CONFIG_PREFIX = "topic."
DEFAULT_MAX_BATCH_BYTES = 1 << 20
DEFAULT_LOCK_TIMEOUT_MS = 30_000
DEFAULT_MAINTENANCE_INTERVAL_MS = 300_000

_NAMES = ("path", "logDirs", "topic", "compression.type", "createTopics", "numPartitions",
          "maxBatchBytes", "lockTimeoutMs", "maintenanceIntervalMs", "checkpointLocation")
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

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> SinkOptions:
        """Validate ``options`` (any case). Raises ConfigError naming the option."""
        opts: dict[str, str] = {}
        topic_props: dict[str, str] = {}
        for raw_key, value in options.items():
            if value is None:
                continue
            key = str(raw_key)
            if key.lower().startswith(TOPIC_CONFIG_PREFIX):
                topic_props[key[len(TOPIC_CONFIG_PREFIX):]] = str(value)
                continue
            name = _CANONICAL.get(key.lower())
            if name is None:
                raise ConfigError(
                    f"unknown option {raw_key!r} for the seglog sink (known: "
                    f"{', '.join(_NAMES)}, and {TOPIC_CONFIG_PREFIX}<kafka topic config>)")
            opts[name] = str(value)

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
                f"invalid value {opts['compression.type']!r} for option 'compression.type': "
                f"expected one of {', '.join(COMPRESSION_TYPES)}")
        try:
            topic_config = parse_overrides(topic_props)
        except ConfigError as e:
            raise ConfigError(f"invalid topic config option "
                              f"({TOPIC_CONFIG_PREFIX}<name>): {e}") from None
        return cls(
            log_dirs=parse_log_dirs(opts),
            topic=topic,
            compression=compression,
            create_topics=option_bool(opts, "createTopics", True),
            num_partitions=option_positive_int(opts, "numPartitions", 1),
            topic_config=topic_config,
            max_batch_bytes=option_positive_int(opts, "maxBatchBytes",
                                                DEFAULT_MAX_BATCH_BYTES),
            lock_timeout_ms=option_non_negative_int(opts, "lockTimeoutMs",
                                                    DEFAULT_LOCK_TIMEOUT_MS),
            maintenance_interval_ms=option_non_negative_int(
                opts, "maintenanceIntervalMs", DEFAULT_MAINTENANCE_INTERVAL_MS),
            checkpoint_location=opts.get("checkpointLocation"),
        )


# ---------------------------------------------------------------------------- columns
_BINARY_LIKE = (pa.types.is_binary, pa.types.is_large_binary, pa.types.is_string,
                pa.types.is_large_string)
_COLUMN_NAMES = ("value", "key", "topic", "partition", "headers", "timestamp")


def _binary_like(t: pa.DataType) -> bool:
    return any(check(t) for check in _BINARY_LIKE)


def _string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _headers_type(t: pa.DataType) -> bool:
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)):
        return False
    item = t.value_type
    if not pa.types.is_struct(item) or item.num_fields != 2:
        return False
    names = [item.field(i).name for i in range(2)]
    if names != ["key", "value"]:
        return False
    return _string(item.field(0).type) and _binary_like(item.field(1).type)


_EXPECTED = {
    "value": ("binary or string", _binary_like),
    "key": ("binary or string", _binary_like),
    "topic": ("string", _string),
    "partition": ("int", pa.types.is_integer),
    "headers": ("array<struct<key: string, value: binary>>", _headers_type),
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

    @classmethod
    def resolve(cls, schema: pa.Schema, *, default_topic: str | None) -> SinkColumns:
        """Check an input schema (Arrow) against the Kafka sink's columns.

        Raises ConfigError naming the missing, unknown or mistyped columns, or a missing
        topic (neither a ``topic`` column nor the ``topic`` option)."""
        found: dict[str, str] = {}
        unknown = []
        for field in schema:
            canonical = field.name.lower()
            if canonical not in _COLUMN_NAMES:
                unknown.append(field.name)
                continue
            if canonical in found:
                raise ConfigError(f"columns {found[canonical]!r} and {field.name!r} both "
                                  f"map to the sink field {canonical!r}")
            expected, check = _EXPECTED[canonical]
            if not check(field.type):
                raise ConfigError(f"column {field.name!r} has type {field.type}; the seglog "
                                  f"sink expects {expected}")
            found[canonical] = field.name
        if unknown:
            raise ConfigError(
                f"unknown column(s) {', '.join(repr(u) for u in unknown)} for the seglog sink "
                f"(allowed: {', '.join(_COLUMN_NAMES)})")
        if "value" not in found:
            raise ConfigError("required column 'value' (binary or string) is missing from the "
                              "input of the seglog sink")
        if "topic" not in found and default_topic is None:
            raise ConfigError("no topic: give the option 'topic' or a 'topic' column")
        return cls(**found)
