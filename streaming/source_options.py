"""Typed, validated options of the ``seglog`` source, with Spark's Kafka connector names.

Options are parsed once, on the driver, when a reader is created; the rest of the code
sees only the immutable ``SourceOptions``. Spark hands options over case-insensitively
(keys lowercased), so names are matched without regard to case. Any unknown option,
conflicting options or malformed value raises ``ConfigError`` naming the option.

>>> o = SourceOptions.parse({"path": "/data", "subscribe": "a,b"}, streaming=True)
>>> o.subscription.topics, o.starting
(('a', 'b'), Latest())
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from seglog.logstore.errors import ConfigError
from seglog.logstore.records.record_format import TopicPartition
from seglog.logstore.storage.durations import parse_duration_ms
from seglog.logstore.storage.file_names import INTERNAL_TOPICS
from seglog.logstore.storage.object_store_config import NO_STORAGE_OPTIONS, StorageOptions

from .kafka_compat import SOURCE_RULES, documented_name, refusal, rule_for
from .option_values import (
    STORAGE_OPTION,
    OptionSpec,
    option_bool,
    option_positive_int,
    parse_log_dirs,
    storage_options_for,
    take_storage_options,
)

EARLIEST = -2
"""In JSON offsets, ``-2`` means the earliest offset of the partition (as in Kafka)."""
LATEST = -1
"""In JSON offsets, ``-1`` means the latest offset (the high watermark)."""

_NO_END = "a stream has no end; read the range in batch (spark.read) instead"
SOURCE_OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec("path", "(required)", "The log dir, or several separated by commas "
               "(`load(dir)` sets it)."),
    OptionSpec("logDirs", "", "Same as `path` (give one of them)."),
    OptionSpec("paths", "", "Set by Spark from `load(dir1, dir2)` (a JSON array): several "
               "log dirs, as `path` with commas."),
    OptionSpec("subscribe", "", "Topics to read, separated by commas. Exactly one of "
               "`subscribe`, `subscribePattern`, `assign` is required."),
    OptionSpec("subscribePattern", "", "A regex matched against whole topic names; topics "
               "created later are picked up. Never matches Kafka's internal topics "
               "`__consumer_offsets` and `__transaction_state` (as Spark's Kafka source); "
               "`subscribe` can name them."),
    OptionSpec("assign", "", 'Partitions as JSON: `{"events": [0, 1]}`.'),
    OptionSpec("startingOffsets", "latest (streaming), earliest (batch)",
               '`earliest`, `latest` or JSON `{"events": {"0": 23, "1": -2}}` (-2 earliest, '
               "-1 latest). A streaming query uses it only on its first start; then the "
               "checkpoint decides."),
    OptionSpec("endingOffsets", "latest", "`latest` or JSON offsets (exclusive).", "batch",
               _NO_END),
    OptionSpec("startingTimestamp", "", "Start at the first offset whose timestamp is at or "
               "after this (ms since the epoch), in every partition; wins over "
               "`startingOffsetsByTimestamp` and `startingOffsets`."),
    OptionSpec("startingOffsetsByTimestamp", "", 'A timestamp per partition as JSON: '
               '`{"events": {"0": 1700000000000}}`.'),
    OptionSpec("endingTimestamp", "", "End at the first offset whose timestamp is at or after "
               "this (ms).", "batch", _NO_END),
    OptionSpec("endingOffsetsByTimestamp", "", "An ending timestamp per partition as JSON.",
               "batch", _NO_END),
    OptionSpec("startingOffsetsByTimestampStrategy", "error", "When no record is that recent: "
               "`error`, or `latest` (start at the end)."),
    OptionSpec("maxOffsetsPerTrigger", "", "At most this many records per micro-batch, split "
               "across partitions by their backlog.", "streaming"),
    OptionSpec("minOffsetsPerTrigger", "", "Wait for at least this many new records (or "
               "`maxTriggerDelay`) before a micro-batch.", "streaming"),
    OptionSpec("maxTriggerDelay", "15m", "The longest wait for `minOffsetsPerTrigger` "
               "(`500ms`, `10s`, `15m`, `1h`...).", "streaming"),
    OptionSpec("maxBytesPerTrigger", "", "At most about this many bytes of records per "
               "micro-batch (whole record batches), split across partitions by their "
               "backlog.", "streaming"),
    OptionSpec("failOnDataLoss", "true", "Fail when offsets the query should read were "
               "removed (retention, a deleted topic, a log that now ends before them); "
               "`false` logs a warning and goes on. Corruption (a damaged batch, an object "
               "of another size than its commit says) fails whatever this says."),
    OptionSpec("includeHeaders", "false", "Add the `headers` column."),
    OptionSpec("minPartitions", "", "Split offset ranges so a batch has at least this many "
               "Spark tasks."),
    OptionSpec("maxRecordsPerPartition", "", "Split offset ranges so no task reads more "
               "records than this."),
    OptionSpec("filterPushdown", "false", "`true`: push filters on `partition`, `offset` "
               "and `timestamp` down to the indexes (needs Spark's "
               "`spark.sql.python.filterPushdown.enabled=true`, which Spark names when it "
               "is off); `false` reads what the other options select and Spark filters.",
               "batch", "PySpark pushes filters only into batch reads (its streaming reader "
               "has no pushFilters); a streaming query filters rows in Spark as it is"),
    OptionSpec("kafka.isolation.level", "read_uncommitted", "`read_uncommitted`, or "
               "`read_committed`: only committed transactions, and never past a partition's "
               "last stable offset (the first offset of its earliest open transaction), as a "
               "Kafka consumer with `isolation.level=read_committed` reads."),
    STORAGE_OPTION,
)
_NAMES = tuple(o.name for o in SOURCE_OPTIONS if o is not STORAGE_OPTION)
_CANONICAL = {n.lower(): n for n in _NAMES}
_STREAMING_ONLY = tuple(o.name for o in SOURCE_OPTIONS if o.mode == "streaming")
_BATCH_ONLY = {o.name: o.only_because for o in SOURCE_OPTIONS if o.mode == "batch"}



# ---------------------------------------------------------------------------- offset specs
@dataclass(frozen=True, slots=True)
class Earliest:
    """Start (or end) at each partition's log start offset."""


@dataclass(frozen=True, slots=True)
class Latest:
    """Start (or end) at each partition's high watermark."""


@dataclass(frozen=True, slots=True)
class SpecificOffsets:
    """Offsets per partition; ``-2`` earliest, ``-1`` latest. Sorted by (topic, partition)."""

    offsets: tuple[tuple[TopicPartition, int], ...]

    def as_dict(self) -> dict[TopicPartition, int]:
        return dict(self.offsets)


@dataclass(frozen=True, slots=True)
class GlobalTimestamp:
    """The first offset whose timestamp is at or after ``timestamp_ms``, in every partition."""

    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class SpecificTimestamps:
    """A timestamp (ms) per partition, sorted by (topic, partition)."""

    timestamps: tuple[tuple[TopicPartition, int], ...]

    def as_dict(self) -> dict[TopicPartition, int]:
        return dict(self.timestamps)


OffsetSpec = Earliest | Latest | SpecificOffsets | GlobalTimestamp | SpecificTimestamps


# ---------------------------------------------------------------------------- subscription
@dataclass(frozen=True, slots=True)
class Subscription:
    """Which partitions the source reads: exactly one of Kafka's three ways.

    ``kind`` is ``"subscribe"`` (``topics``), ``"subscribePattern"`` (``pattern``, a
    regex matched against whole topic names, never matching Kafka's internal topics
    ``__consumer_offsets`` and ``__transaction_state``, as the Kafka consumer behind
    Spark's Kafka source leaves them out: ``exclude.internal.topics``) or ``"assign"``
    (``partitions``). ``subscribe`` and ``assign`` name internal topics explicitly.
    """

    kind: Literal["subscribe", "subscribePattern", "assign"]
    topics: tuple[str, ...] = ()
    pattern: str = ""
    partitions: tuple[TopicPartition, ...] = ()

    def select(self, available: Mapping[str, Sequence[int]]) -> list[TopicPartition]:
        """The subscribed partitions among ``available`` (topic → partitions), sorted.

        With ``assign``, partitions are returned even if they do not exist (yet): the
        caller decides whether a missing partition is data loss.
        """
        if self.kind == "assign":
            return sorted(self.partitions)
        if self.kind == "subscribe":
            names = [t for t in self.topics if t in available]
        else:
            rx = re.compile(self.pattern)
            names = [t for t in available if rx.fullmatch(t) and t not in INTERNAL_TOPICS]
        return sorted((t, p) for t in names for p in available[t])


# ---------------------------------------------------------------------------- options
@dataclass(frozen=True, slots=True)
class SourceOptions:
    """The parsed options of one source (streaming or batch). Immutable, picklable."""

    log_dirs: tuple[str, ...]
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    starting_by_timestamp_strategy: Literal["error", "latest"] = "error"
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60 * 1000
    max_bytes_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    streaming: bool = True
    ignored: tuple[str, ...] = ()
    """Kafka connector options accepted without effect, as the user spelled them."""
    filter_pushdown: bool = False
    """Batch only: the reader offers ``pushFilters`` (option ``filterPushdown``)."""
    isolation_level: Literal["read_uncommitted", "read_committed"] = "read_uncommitted"
    """Kafka's ``isolation.level`` (option ``kafka.isolation.level``): ``read_committed``
    reads only below each partition's last stable offset and drops aborted transactions."""
    storage: StorageOptions = NO_STORAGE_OPTIONS
    """The ``storage.<name>`` options: endpoint, credentials... of a bucket log dir (its
    ``repr`` hides secrets; never part of an offset)."""

    @property
    def has_limits(self) -> bool:
        """Whether any admission-control option is set."""
        return (
            self.max_offsets_per_trigger is not None
            or self.min_offsets_per_trigger is not None
            or self.max_bytes_per_trigger is not None
        )

    @classmethod
    def parse(cls, options: Mapping[str, Any], *, streaming: bool | None) -> SourceOptions:
        """Validate ``options`` (any case) for a streaming or a batch read.

        Defaults follow Kafka: ``startingOffsets`` is ``latest`` for streaming and
        ``earliest`` for batch; ``endingOffsets`` (batch only) is ``latest``.
        ``streaming=None`` checks what does not depend on the kind of query (Spark asks
        for the schema before it says which kind it is). Kafka connector options that only
        configure a broker connection are listed in ``ignored`` (warn about them once);
        those that would change what is read are refused.
        """
        opts: dict[str, str] = {}
        ignored: list[str] = []
        storage: dict[str, str] = {}
        for raw_key, value in options.items():
            if value is not None and take_storage_options(str(raw_key), value, storage):
                continue
            name = _CANONICAL.get(str(raw_key).lower())
            if name is None:
                rule = rule_for(str(raw_key), SOURCE_RULES)
                if rule is None:
                    raise ConfigError(
                        f"unknown option {raw_key!r} for the seglog source "
                        f"(known: {', '.join(_NAMES)}, {STORAGE_OPTION.name})"
                    )
                if rule.action == "refuse":
                    raise ConfigError(refusal(str(raw_key), rule, "source"))
                ignored.append(documented_name(str(raw_key), rule))
                continue
            if value is None:
                continue
            opts[name] = str(value)
        if streaming is False:
            # Kafka's rule: trigger limits mean nothing to a batch read; warn, not fail.
            ignored.extend(n for n in _STREAMING_ONLY if opts.pop(n, None) is not None)
        elif streaming:
            for name, because in _BATCH_ONLY.items():
                if name in opts:
                    raise ConfigError(f"option {name!r} is not applicable to streaming queries: "
                                      f"{because}")

        starting = _parse_start(opts, streaming is not False)
        ending = _parse_end(opts) if not streaming else Latest()
        min_rows = option_positive_int(opts, "minOffsetsPerTrigger")
        max_rows = option_positive_int(opts, "maxOffsetsPerTrigger")
        if min_rows is not None and max_rows is not None and min_rows > max_rows:
            raise ConfigError(
                f"option 'minOffsetsPerTrigger' ({min_rows}) must not exceed "
                f"'maxOffsetsPerTrigger' ({max_rows})"
            )
        raw_strategy = opts.get("startingOffsetsByTimestampStrategy", "error").strip().lower()
        strategy: Literal["error", "latest"]
        if raw_strategy == "error":
            strategy = "error"
        elif raw_strategy == "latest":
            strategy = "latest"
        else:
            raise ConfigError(
                f"invalid value {raw_strategy!r} for option "
                "'startingOffsetsByTimestampStrategy': expected error or latest"
            )
        log_dirs = parse_log_dirs(opts)
        return cls(
            log_dirs=log_dirs,
            subscription=_parse_subscription(opts),
            starting=starting,
            ending=ending,
            starting_by_timestamp_strategy=strategy,
            max_offsets_per_trigger=max_rows,
            min_offsets_per_trigger=min_rows,
            max_trigger_delay_ms=(
                parse_duration_ms(opts["maxTriggerDelay"], "maxTriggerDelay")
                if "maxTriggerDelay" in opts
                else 15 * 60 * 1000
            ),
            max_bytes_per_trigger=option_positive_int(opts, "maxBytesPerTrigger"),
            fail_on_data_loss=option_bool(opts, "failOnDataLoss", True),
            include_headers=option_bool(opts, "includeHeaders", False),
            min_partitions=option_positive_int(opts, "minPartitions"),
            max_records_per_partition=option_positive_int(opts, "maxRecordsPerPartition"),
            streaming=streaming is not False,
            ignored=tuple(ignored),
            isolation_level=_isolation_level(opts),
            filter_pushdown=option_bool(opts, "filterPushdown", False),
            storage=storage_options_for(
                log_dirs, storage, _dirs_option(opts)),
        )


def _dirs_option(opts: Mapping[str, str]) -> str:
    """The option that named the log dirs (for errors)."""
    return next((n for n in ("logDirs", "paths") if n in opts), "path")


def include_headers(options: Mapping[str, Any]) -> bool:
    """Only ``includeHeaders`` (any case), for the schema, which needs nothing else."""
    for k, v in options.items():
        if str(k).lower() == "includeheaders" and v is not None:
            return option_bool({"includeHeaders": str(v)}, "includeHeaders", False)
    return False


# ---------------------------------------------------------------------------- helpers










def _isolation_level(opts: Mapping[str, str]) -> Literal["read_uncommitted", "read_committed"]:
    value = opts.get("kafka.isolation.level", "read_uncommitted").strip().lower()
    if value == "read_committed":
        return "read_committed"
    if value != "read_uncommitted":
        raise ConfigError(
            f"invalid value {opts['kafka.isolation.level']!r} for option "
            "'kafka.isolation.level': expected read_uncommitted or read_committed"
        )
    return "read_uncommitted"


def _parse_subscription(opts: Mapping[str, str]) -> Subscription:
    given = [n for n in ("subscribe", "subscribePattern", "assign") if n in opts]
    if len(given) != 1:
        what = "none" if not given else " and ".join(repr(g) for g in given)
        raise ConfigError(
            f"exactly one of 'subscribe', 'subscribePattern', 'assign' must be given (got {what})"
        )
    kind = given[0]
    text = opts[kind]
    if kind == "subscribe":
        topics = tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
        if not topics:
            raise ConfigError(f"option 'subscribe' names no topic: {text!r}")
        return Subscription("subscribe", topics=topics)
    if kind == "subscribePattern":
        if not text.strip():
            raise ConfigError("option 'subscribePattern' is empty")
        try:
            re.compile(text)
        except re.error as e:
            raise ConfigError(
                f"invalid regex {text!r} for option 'subscribePattern': {e}"
            ) from None
        return Subscription("subscribePattern", pattern=text)
    data = _json_object(text, "assign")
    parts: set[TopicPartition] = set()
    for topic, plist in data.items():
        if not isinstance(plist, list) or not all(_is_int(p) for p in plist):
            raise ConfigError(
                f"invalid JSON for option 'assign': topic {topic!r} must map to a list of "
                f'partition numbers, like {{"{topic}": [0, 1]}}'
            )
        parts.update((topic, int(p)) for p in plist)
    if not parts:
        raise ConfigError(f"option 'assign' names no partition: {text!r}")
    return Subscription("assign", partitions=tuple(sorted(parts)))


def _parse_start(opts: Mapping[str, str], streaming: bool) -> OffsetSpec:
    # Kafka's precedence: startingTimestamp > startingOffsetsByTimestamp > startingOffsets.
    if "startingTimestamp" in opts:
        return GlobalTimestamp(_timestamp(opts["startingTimestamp"], "startingTimestamp"))
    if "startingOffsetsByTimestamp" in opts:
        name = "startingOffsetsByTimestamp"
        return _specific_timestamps(opts[name], name)
    name = "startingOffsets"
    spec = _offsets_spec(opts.get(name, "latest" if streaming else "earliest"), name)
    if not streaming:
        if isinstance(spec, Latest):
            raise ConfigError("option 'startingOffsets' can't be latest for batch queries")
        if isinstance(spec, SpecificOffsets) and any(o == LATEST for _, o in spec.offsets):
            raise ConfigError(
                "option 'startingOffsets' can't use -1 (latest) for a partition in batch queries"
            )
    return spec


def _parse_end(opts: Mapping[str, str]) -> OffsetSpec:
    if "endingTimestamp" in opts:
        return GlobalTimestamp(_timestamp(opts["endingTimestamp"], "endingTimestamp"))
    if "endingOffsetsByTimestamp" in opts:
        return _specific_timestamps(opts["endingOffsetsByTimestamp"], "endingOffsetsByTimestamp")
    spec = _offsets_spec(opts.get("endingOffsets", "latest"), "endingOffsets")
    if isinstance(spec, Earliest):
        raise ConfigError("option 'endingOffsets' can't be earliest for batch queries")
    if isinstance(spec, SpecificOffsets) and any(o == EARLIEST for _, o in spec.offsets):
        raise ConfigError(
            "option 'endingOffsets' can't use -2 (earliest) for a partition in batch queries"
        )
    return spec


def _offsets_spec(text: str, name: str) -> OffsetSpec:
    word = text.strip().lower()
    if word == "earliest":
        return Earliest()
    if word == "latest":
        return Latest()
    data = _json_object(text, name)
    out: dict[TopicPartition, int] = {}
    for topic, parts in data.items():
        for p, off in _partition_map(parts, topic, name).items():
            if off < EARLIEST:
                raise ConfigError(
                    f"invalid offset {off} for {topic}-{p} in option {name!r}: use an offset "
                    "≥ 0, -2 (earliest) or -1 (latest)"
                )
            out[(topic, p)] = off
    if not out:
        raise ConfigError(f"option {name!r} names no partition: {text!r}")
    return SpecificOffsets(tuple(sorted(out.items())))


def _specific_timestamps(text: str, name: str) -> SpecificTimestamps:
    data = _json_object(text, name)
    out: dict[TopicPartition, int] = {}
    for topic, parts in data.items():
        for p, ts in _partition_map(parts, topic, name).items():
            if ts < 0:
                raise ConfigError(f"invalid timestamp {ts} for {topic}-{p} in option {name!r}")
            out[(topic, p)] = ts
    if not out:
        raise ConfigError(f"option {name!r} names no partition: {text!r}")
    return SpecificTimestamps(tuple(sorted(out.items())))


def _timestamp(text: str, name: str) -> int:
    try:
        ts = int(text.strip())
    except ValueError:
        raise ConfigError(
            f"invalid value {text!r} for option {name!r}: expected milliseconds since the epoch"
        ) from None
    if ts < 0:
        raise ConfigError(f"invalid value {text!r} for option {name!r}: must not be negative")
    return ts


def _json_object(text: str, name: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"malformed JSON for option {name!r}: {e.msg} in {text!r}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"malformed JSON for option {name!r}: expected an object, got {text!r}")
    return data


def _partition_map(parts: Any, topic: str, name: str) -> dict[int, int]:
    if not isinstance(parts, dict):
        raise ConfigError(
            f"malformed JSON for option {name!r}: topic {topic!r} must map to "
            f'{{"partition": value}}, like {{"{topic}": {{"0": 23}}}}'
        )
    out: dict[int, int] = {}
    for p, v in parts.items():
        if not (isinstance(p, str) and p.isdigit()) or not _is_int(v):
            raise ConfigError(
                f"malformed JSON for option {name!r}: {topic!r}: {{{p!r}: {v!r}}} is not "
                "a partition number mapped to an integer"
            )
        out[int(p)] = int(v)
    return out


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)
