"""Typed, immutable configuration with Kafka's names, meanings and defaults.

Each key is declared once (name, parser, default, check, doc). ``LogConfig`` holds the
per-topic configs (``segment.bytes``, ``retention.ms``...), ``ManagerConfig`` the
LogManager's broker-level ones (``log.retention.check.interval.ms``...). Both are built
by ``from_properties`` from defaults plus a properties-style mapping; an unknown key or a
bad value raises ``ConfigError`` naming the key.

>>> LogConfig.from_properties({"segment.bytes": "1048576"}).segment_bytes
1048576
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeAlias, TypeVar

from ..errors import ConfigError
from ..records.record_format import INT32_MAX as INT_MAX
from ..records.record_format import LONG_MAX

ConfigValue: TypeAlias = str | int | float | Collection[str]
"""A config value as callers give it: Kafka's property string (``"1048576"``), or the
value itself (a number, a bool, the cleanup policies as a list); each key's parser takes
either and names the key when it cannot."""

ConfigValues: TypeAlias = Mapping[str, ConfigValue]
"""Config keys and their values, as ``create_topic``, ``alter_topic_config`` and the
managers' ``config``/``default_topic_config`` take them."""


def _parse_int(raw: Any) -> int:
    if isinstance(raw, bool):
        raise ValueError("a boolean is not an integer")
    if isinstance(raw, int):
        return raw
    try:
        return int(str(raw).strip())
    except ValueError:
        raise ValueError("not an integer") from None


def _parse_float(raw: Any) -> float:
    try:
        return float(str(raw).strip())
    except ValueError:
        raise ValueError("not a number") from None


def _parse_bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise ValueError("expected true or false")
    return text == "true"


def _parse_policy(raw: Any) -> frozenset[str]:
    parts = raw if isinstance(raw, (list, tuple, frozenset, set)) else str(raw).split(",")
    policy = frozenset(p.strip().lower() for p in parts if str(p).strip())
    if not policy or not policy <= {"compact", "delete"}:
        raise ValueError("expected delete, compact or compact,delete")
    return policy


def _one_of(*allowed: str) -> Callable[[Any], str]:
    def parse(raw: Any) -> str:
        text = str(raw).strip()
        for a in allowed:
            if text.lower() == a.lower():
                return a
        raise ValueError(f"expected one of {', '.join(allowed)}")

    return parse


def _at_least(n: float) -> Callable[[Any], str | None]:
    return lambda v: None if v >= n else f"must be at least {n}"


def _between(lo: float, hi: float) -> Callable[[Any], str | None]:
    return lambda v: None if lo <= v <= hi else f"must be between {lo} and {hi}"


def _ms_or_unlimited(v: int) -> str | None:
    return None if v >= -1 else "must be -1 (unlimited) or at least 0"


@dataclass(frozen=True, slots=True)
class ConfigKey:
    name: str
    field: str
    parse: Callable[[Any], Any]
    default: Any
    check: Callable[[Any], str | None] | None
    doc: str


def expected_value(key: ConfigKey) -> str:
    """What a numeric key takes, for an error about a value that is not a number:
    ``an integer (milliseconds) that must be at least 0``. Empty for the other parsers,
    whose errors already say what they expect."""
    kinds: dict[Callable[[Any], Any], str] = {_parse_int: "an integer", _parse_float: "a number"}
    kind = kinds.get(key.parse)
    if kind is None:
        return ""
    unit = (" (milliseconds)" if key.name.endswith(".ms") else
            " (bytes)" if key.name.endswith((".bytes", ".size")) else "")
    # Every numeric check is a lower bound or a range, so what it says of the lowest
    # value is the range (one place states it: the check itself).
    bound = key.check(-math.inf) if key.check else None
    return f"{kind}{unit}" + (f" that {bound}" if bound else "")


def _key(name: str, parse: Callable[[Any], Any], default: Any, doc: str,
         check: Callable[[Any], str | None] | None = None) -> ConfigKey:
    return ConfigKey(name, name.replace(".", "_"), parse, default, check, doc)


_C = TypeVar("_C", bound="_Config")


class _Config:
    KEYS: ClassVar[tuple[ConfigKey, ...]]
    # Every subclass is a dataclass (declared for dataclasses.replace's type).
    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]

    @classmethod
    def from_properties(cls: type[_C], props: ConfigValues | None = None, *,
                        base: _C | None = None) -> _C:
        """Defaults (or ``base``), overridden by ``props``; errors name the key."""
        by_name = {k.name: k for k in cls.KEYS}
        values = {k.field: getattr(base, k.field) if base else k.default for k in cls.KEYS}
        for name, raw in (props or {}).items():
            key = by_name.get(name)
            if key is None:
                raise ConfigError(f"unknown config {name!r} (known: {', '.join(sorted(by_name))})")
            try:
                value = key.parse(raw)
            except (TypeError, ValueError) as e:
                expected = expected_value(key)
                raise ConfigError(f"invalid value {raw!r} for config {name!r}: {e}"
                                  + (f"; expected {expected}" if expected else "")) from None
            problem = key.check(value) if key.check else None
            if problem:
                raise ConfigError(f"invalid value {raw!r} for config {name!r}: {problem}")
            values[key.field] = value
        return cls(**values)

    @classmethod
    def of(cls: type[_C], config: _C | ConfigValues | None) -> _C:
        """``config`` when it is already this config, else built from a mapping of keys
        (None: the defaults) by ``from_properties``: how a manager takes its configs."""
        if config is None or isinstance(config, Mapping):
            return cls.from_properties(config)
        if isinstance(config, cls):
            return config
        raise ConfigError(f"expected a {cls.__name__} or a mapping of its keys, got a "
                          f"{type(config).__name__}")

    def overrides(self) -> dict[str, str]:
        """The keys that differ from the defaults, as strings (what a topic persists)."""
        out = {}
        for k in self.KEYS:
            v = getattr(self, k.field)
            if v != k.default:
                out[k.name] = ",".join(sorted(v)) if isinstance(v, frozenset) else str(v)
        return out

    def replace(self: _C, **changes: Any) -> _C:
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True, slots=True)
class LogConfig(_Config):
    """Per-topic configuration (Kafka topic configs). Immutable, thread-safe."""

    segment_bytes: int
    segment_ms: int
    segment_jitter_ms: int
    segment_index_bytes: int
    index_interval_bytes: int
    retention_ms: int
    retention_bytes: int
    flush_messages: int
    flush_ms: int
    file_delete_delay_ms: int
    cleanup_policy: frozenset[str]
    message_timestamp_type: str
    message_timestamp_before_max_ms: int
    message_timestamp_after_max_ms: int
    max_message_bytes: int
    min_cleanable_dirty_ratio: float
    min_compaction_lag_ms: int
    max_compaction_lag_ms: int
    delete_retention_ms: int
    compression_type: str
    preallocate: bool

    KEYS: ClassVar[tuple[ConfigKey, ...]] = (
        _key("segment.bytes", _parse_int, 1 << 30, "Roll when a segment would exceed this.",
             lambda v: None if 14 <= v <= INT_MAX else f"must be between 14 and {INT_MAX}"),
        _key("segment.ms", _parse_int, 7 * 24 * 3600 * 1000, "Roll after this much time.",
             _at_least(1)),
        _key("segment.jitter.ms", _parse_int, 0, "Random jitter subtracted from segment.ms.",
             _at_least(0)),
        _key("segment.index.bytes", _parse_int, 10 * 1024 * 1024, "Index file preallocation.",
             _at_least(4)),
        _key("index.interval.bytes", _parse_int, 4096, "Bytes between index entries.",
             _at_least(0)),
        _key("retention.ms", _parse_int, 7 * 24 * 3600 * 1000, "-1: keep forever.",
             _ms_or_unlimited),
        _key("retention.bytes", _parse_int, -1, "-1: no size limit.", _ms_or_unlimited),
        _key("flush.messages", _parse_int, LONG_MAX, "fsync after this many messages.",
             _at_least(1)),
        _key("flush.ms", _parse_int, LONG_MAX, "fsync after this much time.", _at_least(0)),
        _key("file.delete.delay.ms", _parse_int, 60_000, "Wait before unlinking .deleted files.",
             _at_least(0)),
        _key("cleanup.policy", _parse_policy, frozenset({"delete"}),
             "delete, compact, or compact,delete."),
        _key("message.timestamp.type", _one_of("CreateTime", "LogAppendTime"), "CreateTime",
             "Which timestamp records keep."),
        _key("message.timestamp.before.max.ms", _parse_int, LONG_MAX,
             "Reject CreateTime timestamps older than this.", _at_least(0)),
        _key("message.timestamp.after.max.ms", _parse_int, 3_600_000,
             "Reject CreateTime timestamps further in the future than this.", _at_least(0)),
        _key("max.message.bytes", _parse_int, 1_048_588, "Largest record batch accepted.",
             _at_least(0)),
        _key("min.cleanable.dirty.ratio", _parse_float, 0.5, "Compaction trigger.",
             _between(0.0, 1.0)),
        _key("min.compaction.lag.ms", _parse_int, 0, "Records younger stay uncompacted.",
             _at_least(0)),
        _key("max.compaction.lag.ms", _parse_int, LONG_MAX, "Compact at the latest after this.",
             _at_least(1)),
        _key("delete.retention.ms", _parse_int, 86_400_000, "How long tombstones survive.",
             _at_least(0)),
        _key("compression.type",
             _one_of("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"), "producer",
             "Recompress on append, or keep the producer's codec."),
        _key("preallocate", _parse_bool, False, "Preallocate segment files (ignored)."),
    )

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    def random_segment_jitter(self) -> int:
        """Kafka's per-segment roll jitter: uniform in [0, min(segment.jitter.ms, segment.ms))."""
        bound = min(self.segment_jitter_ms, self.segment_ms)
        return random.randrange(bound) if bound > 0 else 0


@dataclass(frozen=True, slots=True)
class ManagerConfig(_Config):
    """LogManager (broker-level) configuration. Immutable, thread-safe."""

    log_retention_check_interval_ms: int
    log_flush_scheduler_interval_ms: int
    log_flush_offset_checkpoint_interval_ms: int
    log_flush_start_offset_checkpoint_interval_ms: int
    replica_high_watermark_checkpoint_interval_ms: int
    log_cleaner_enable: bool
    log_cleaner_backoff_ms: int
    log_cleaner_dedupe_buffer_size: int
    log_cleaner_io_buffer_size: int
    num_recovery_threads_per_data_dir: int
    linger_ms: int
    fail_on_data_loss: bool

    KEYS: ClassVar[tuple[ConfigKey, ...]] = (
        _key("log.retention.check.interval.ms", _parse_int, 300_000, "Retention pass period.",
             _at_least(1)),
        _key("log.flush.scheduler.interval.ms", _parse_int, LONG_MAX, "Flush check period.",
             _at_least(1)),
        _key("log.flush.offset.checkpoint.interval.ms", _parse_int, 60_000,
             "recovery-point-offset-checkpoint period.", _at_least(1)),
        _key("log.flush.start.offset.checkpoint.interval.ms", _parse_int, 60_000,
             "log-start-offset-checkpoint period.", _at_least(1)),
        _key("replica.high.watermark.checkpoint.interval.ms", _parse_int, 5_000,
             "replication-offset-checkpoint period.", _at_least(1)),
        _key("log.cleaner.enable", _parse_bool, True, "Run the compaction cleaner."),
        _key("log.cleaner.backoff.ms", _parse_int, 15_000, "Cleaner idle sleep.", _at_least(0)),
        _key("log.cleaner.dedupe.buffer.size", _parse_int, 128 * 1024 * 1024,
             "Memory for the cleaner's key map.", _at_least(1024)),
        _key("log.cleaner.io.buffer.size", _parse_int, 512 * 1024, "Cleaner read buffer.",
             _at_least(512)),
        _key("num.recovery.threads.per.data.dir", _parse_int, 2, "Log loading threads per dir.",
             _at_least(1)),
        # The producer's knob, since the embedding process is the producer: an append is
        # published (fsynced, then the high-watermark checkpoint) within this delay.
        _key("linger.ms", _parse_int, 5,
             "Longest wait before an append is visible to other processes (0: in the call).",
             _at_least(0)),
        # seglog's own (Spark's failOnDataLoss for a library holder of get_log): a log
        # held across its topic's delete and re-create raises TopicIdChangedError (true)
        # or warns and follows the new topic from its log start (false)
        _key("fail.on.data.loss", _parse_bool, True,
             "A held log whose topic was re-created raises (true) or warns (false)."),
    )
