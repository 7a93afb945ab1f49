"""The bucket engine's metadata: object names, the commit JSON, and the state a fold of
commits gives. Pure: no storage, no clock (``bucket_commit_log`` does the I/O).

Layout under a log dir URI (docs/object-storage.md has the full format)::

    _seglog/log/<20-digit version>.json        commit N, created with create-if-absent
    _seglog/snapshots/<20-digit version>.json  the state after version N (plain put)
    _seglog/last-snapshot                      {"version": N}: a hint, may lag, never ahead
    <topic>-<p>/<20-digit base>-<16 hex id>.log / .index / .timeindex

A commit (``"format": 1``) holds ``version``, ``writer``, ``timestamp_ms``,
``operation``, ``topics`` (name -> ``{"partitions": n, "config": {...}, "topic_id":
"<Kafka topic id>"}``, or null for a deleted topic; ``topic_id`` is absent in states
written before topic ids), ``partitions`` ("<topic>-<p>" -> ``{"add": [entry...], "remove":
[key...], "log_start_offset": x}``) and ``sinks`` (sink id -> ledger, opaque here). The
state is the fold of every commit from version 0; the high watermark of a partition is
its last segment's ``next_offset``: a commit makes everything it adds visible at once.

Over 500 lines: the JSON codec of commits and snapshots and the fold that checks them
validate the same fields (segment keys, offsets, topic ids, topic logs) with the same
messages; the natural split (codec vs fold) is noted for the issue-24 clean-ups.

Every parse error names the object it came from (``CorruptMetadataError``): a damaged
commit is evidence, never read as "nothing happened".
"""

from __future__ import annotations

import base64
import binascii
import bisect
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import CorruptMetadataError
from ..log.partition_metadata import valid_topic_id

FORMAT = 1
CATALOG_FORMAT = 2
"""The format of a catalog commit or snapshot that names topic logs (``topic_logs``):
seglog before per-topic logs reads format 1 only, so it refuses such a catalog ("unknown
commit format 2") instead of missing the topics it does not know how to read."""
AT_END_FORMAT = 3
"""The format of an append commit created blind (``PartitionChange.at_end``: its offsets
are the log end's when folded): seglog before it reads formats 1 and 2 only, so it
refuses such a commit ("unknown commit format 3") instead of misplacing its records."""
READ_FORMATS = (FORMAT, CATALOG_FORMAT, AT_END_FORMAT)
META_DIR = "_seglog"
COMMIT_DIR = "_seglog/log"
SNAPSHOT_DIR = "_seglog/snapshots"
HINT_KEY = "_seglog/last-snapshot"
STAGING_DIR = "_seglog/staging"
SNAPSHOT_EVERY = 10
"""The writer of a version divisible by this writes the snapshot and the hint, so an open
reads at most this many commits after a snapshot."""
NO_VERSION = -1
"""The version of the empty state (the first commit is version 0)."""

MOVE_OPERATION = "move_topic"
"""A legacy topic moving from the catalog to its own log (``bucket_upgrade``): version 0
of the topic log sets each partition whole as the catalog held it, and the catalog
commit takes the topic out while naming its log, in one version."""
OPERATIONS = frozenset({"create_topic", "alter_config", "add_partitions", "delete_topic",
                        "append", "sink_append", "delete_records", "merge", "retention",
                        "compact", MOVE_OPERATION})
"""What a commit's ``operation`` may say; another word is damage (or a newer format)."""
GAPS_ALLOWED = frozenset({"compact"})
"""Operations that may leave offsets no segment holds (compaction's removed records);
any other commit keeps a partition's segments as contiguous as it found them."""

_VERSION_NAME = re.compile(r"^(\d{20})\.json$")
_SEGMENT_NAME = re.compile(r"^(\d{20})-([0-9a-f]{16})$")


def version_name(version: int) -> str:
    return f"{version:020d}.json"


def commit_key(version: int) -> str:
    return f"{COMMIT_DIR}/{version_name(version)}"


def snapshot_key(version: int) -> str:
    return f"{SNAPSHOT_DIR}/{version_name(version)}"


TOPIC_LOGS_DIR = "_seglog/topics"
"""Where the commit logs of topics created with their own log live (``<topic id>/``)."""


@dataclass(frozen=True, slots=True)
class LogLayout:
    """The object names of one commit log under ``prefix``: the catalog log's is
    ``_seglog`` (``CATALOG``), a topic log's ``_seglog/topics/<topic id>``
    (``topic_layout``). Every log has the same protocol (``bucket_commit_log``)."""

    prefix: str

    @property
    def commit_dir(self) -> str:
        return f"{self.prefix}/log"

    @property
    def snapshot_dir(self) -> str:
        return f"{self.prefix}/snapshots"

    @property
    def hint_key(self) -> str:
        return f"{self.prefix}/last-snapshot"

    @property
    def turn_key(self) -> str:
        return f"{self.prefix}/turn"

    def commit_key(self, version: int) -> str:
        return f"{self.commit_dir}/{version_name(version)}"

    def snapshot_key(self, version: int) -> str:
        return f"{self.snapshot_dir}/{version_name(version)}"


CATALOG = LogLayout(META_DIR)
"""The catalog log: the log every bucket had before per-topic logs (``docs/object-storage.md``)."""


def topic_layout(topic_id: str) -> LogLayout:
    """The commit log of the topic whose id is ``topic_id``."""
    return LogLayout(f"{TOPIC_LOGS_DIR}/{topic_id}")


def parse_version_name(name: str) -> int | None:
    """The version of a commit or snapshot object name, or None for any other name."""
    m = _VERSION_NAME.match(name)
    return int(m.group(1)) if m else None


def tp_key(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def topic_of(partition_key: str) -> str:
    """The topic of a ``tp_key``."""
    return partition_key.rpartition("-")[0]


def config_digest(config: Mapping[str, str]) -> str:
    """A short digest of a topic's config (``Commit.configs``): equal configs, equal
    digests."""
    text = json.dumps(dict(sorted(config.items())), separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def segment_key(topic: str, partition: int, base_offset: int, segment_id: str) -> str:
    """The stem of a segment's objects (``.log``, ``.index``, ``.timeindex`` follow)."""
    return f"{tp_key(topic, partition)}/{base_offset:020d}-{segment_id}"


def parse_segment_stem(name: str) -> tuple[int, str] | None:
    """(base offset, segment id) of ``<20-digit base>-<16 hex>``, or None."""
    m = _SEGMENT_NAME.match(name)
    return (int(m.group(1)), m.group(2)) if m else None


# ------------------------------------------------------------------------------- values

@dataclass(frozen=True, slots=True)
class SegmentEntry:
    """One segment's objects as a commit names them. ``index_bytes``/``timeindex_bytes``
    0 mean no object. ``offset_delta``: the stored batches' base offsets + delta = the
    real offsets (readers patch the 8-byte base offset, outside Kafka's CRC).

    ``inline_index``/``inline_timeindex``: the segment's ``.index``/``.timeindex`` bytes
    carried in the entry itself (base64 in JSON, keys present only when non-empty)
    instead of as objects, when they are small (``bucket_segment.INLINE_INDEX_BYTES``):
    an append then costs two sequential requests, not one per object plus the commit.
    Each index is either an object (``*_bytes > 0``), inline, or absent; never both."""

    key: str
    base_offset: int
    next_offset: int
    size: int
    max_timestamp: int
    index_bytes: int = 0
    timeindex_bytes: int = 0
    offset_delta: int = 0
    inline_index: bytes = b""
    inline_timeindex: bytes = b""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "key": self.key, "base_offset": self.base_offset, "next_offset": self.next_offset,
            "size": self.size, "max_timestamp": self.max_timestamp,
            "index_bytes": self.index_bytes, "timeindex_bytes": self.timeindex_bytes}
        if self.offset_delta:
            out["offset_delta"] = self.offset_delta
        if self.inline_index:
            out["inline_index"] = base64.b64encode(self.inline_index).decode("ascii")
        if self.inline_timeindex:
            out["inline_timeindex"] = base64.b64encode(self.inline_timeindex).decode("ascii")
        return out

    @classmethod
    def from_json(cls, raw: Any, where: str) -> SegmentEntry:
        if not isinstance(raw, dict):
            raise CorruptMetadataError(f"{where}: a segment entry is not an object: {raw!r}")
        key = raw.get("key")
        if not isinstance(key, str) or "/" not in key:
            raise CorruptMetadataError(f"{where}: segment entry has no valid key: {raw!r}")
        ints = {}
        for name in ("base_offset", "next_offset", "size", "max_timestamp", "index_bytes",
                     "timeindex_bytes", "offset_delta"):
            value = raw.get(name, 0 if name == "offset_delta" else None)
            if isinstance(value, bool) or not isinstance(value, int):
                raise CorruptMetadataError(
                    f"{where}: segment {key}: {name} is not an integer: {value!r}")
            ints[name] = value
        here = f"{where}: segment {key}"
        entry = cls(key, **ints, inline_index=_inline_index(raw, "inline_index", 8, here),
                    inline_timeindex=_inline_index(raw, "inline_timeindex", 12, here))
        if not (0 <= entry.base_offset < entry.next_offset) or entry.size <= 0 \
                or entry.index_bytes < 0 or entry.timeindex_bytes < 0:
            raise CorruptMetadataError(f"{where}: segment {key} has impossible values: {raw!r}")
        if (entry.inline_index and entry.index_bytes) \
                or (entry.inline_timeindex and entry.timeindex_bytes):
            raise CorruptMetadataError(
                f"{where}: segment {key} names an index both as an object and inline: "
                f"{raw!r:.300}")
        return entry


def _inline_index(raw: dict[str, Any], name: str, entry_size: int, where: str) -> bytes:
    """An inline index's bytes: base64 of whole entries, or an error naming the field (a
    damaged index is evidence, never read as "no index")."""
    text = raw.get(name)
    if text is None:
        return b""
    if not isinstance(text, str):
        raise CorruptMetadataError(f"{where}: {name} is not a base64 string: {text!r:.100}")
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as e:
        raise CorruptMetadataError(f"{where}: {name} is not valid base64 ({e})") from None
    if not data or len(data) % entry_size:
        raise CorruptMetadataError(f"{where}: {name} holds {len(data)} bytes, not whole "
                                   f"{entry_size}-byte index entries")
    return data


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """A topic's entry. ``topic_id``: Kafka's topic id (``partition_metadata``), given at
    creation; None in states written before topic ids (their readers skip the check)."""

    partitions: int
    config: Mapping[str, str] = field(default_factory=dict)
    topic_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"partitions": self.partitions,
                               "config": dict(sorted(self.config.items()))}
        if self.topic_id is not None:
            out["topic_id"] = self.topic_id
        return out

    @classmethod
    def from_json(cls, raw: Any, where: str, topic: str) -> TopicSpec:
        n = raw.get("partitions") if isinstance(raw, dict) else None
        config = raw.get("config", {}) if isinstance(raw, dict) else None
        topic_id = raw.get("topic_id") if isinstance(raw, dict) else None
        if isinstance(n, bool) or not isinstance(n, int) or n < 1 or not isinstance(config, dict) \
                or not all(isinstance(k, str) and isinstance(v, str) for k, v in config.items()) \
                or (topic_id is not None and not valid_topic_id(topic_id)):
            raise CorruptMetadataError(f"{where}: topic {topic!r} has an invalid entry: {raw!r}")
        return cls(n, dict(config), topic_id)


@dataclass(frozen=True, slots=True)
class PartitionChange:
    """``cleaner_offset``: compaction cleaned the partition up to there (Kafka's
    ``cleaner-offset-checkpoint`` entry; optional, set by ``compact`` commits)."""

    add: tuple[SegmentEntry, ...] = ()
    remove: tuple[str, ...] = ()
    log_start_offset: int | None = None
    cleaner_offset: int | None = None
    at_end: bool = False
    """An append created blind (after a lost race, without reading the winner's commit):
    ``add`` goes at the partition's log end when folded, whatever it is, its entries
    moved there (``offset_delta`` grows by the move; ``fold_at_end``). Only adds."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"add": [e.to_json() for e in self.add],
                               "remove": list(self.remove)}
        if self.log_start_offset is not None:
            out["log_start_offset"] = self.log_start_offset
        if self.cleaner_offset is not None:
            out["cleaner_offset"] = self.cleaner_offset
        if self.at_end:
            out["at_end"] = True
        return out

    @classmethod
    def from_json(cls, raw: Any, where: str) -> PartitionChange:
        if not isinstance(raw, dict) or not isinstance(raw.get("add", []), list) \
                or not isinstance(raw.get("remove", []), list):
            raise CorruptMetadataError(f"{where}: invalid partition change {raw!r}")
        lso = _optional_offset(raw, "log_start_offset", where)
        cleaned = _optional_offset(raw, "cleaner_offset", where)
        remove = raw.get("remove", [])
        if not all(isinstance(k, str) for k in remove):
            raise CorruptMetadataError(f"{where}: invalid remove list {remove!r}")
        at_end = raw.get("at_end", False)
        if not isinstance(at_end, bool) or (at_end and (
                remove or lso is not None or cleaned is not None or not raw.get("add"))):
            raise CorruptMetadataError(f"{where}: field 'at_end' {at_end!r} is not a boolean "
                                       f"on a change that only adds segments: {raw!r:.200}")
        return cls(tuple(SegmentEntry.from_json(e, where) for e in raw.get("add", [])),
                   tuple(remove), lso, cleaned, at_end)


def _optional_offset(raw: dict[str, Any], name: str, where: str) -> int | None:
    value = raw.get(name)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                              or value < 0):
        raise CorruptMetadataError(f"{where}: invalid {name} {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class Commit:
    """One version of the commit log (what ``_seglog/log/<version>.json`` holds)."""

    version: int
    writer: str
    timestamp_ms: int
    operation: str
    topics: Mapping[str, TopicSpec | None] = field(default_factory=dict)
    partitions: Mapping[str, PartitionChange] = field(default_factory=dict)
    sinks: Mapping[str, Any] = field(default_factory=dict)
    topic_logs: Mapping[str, str | None] = field(default_factory=dict)
    """Catalog commits only: topic name -> the id of its own commit log (``topic_layout``),
    or None when the name leaves the catalog (the topic's log holds its tombstone)."""
    configs: Mapping[str, str] = field(default_factory=dict)
    """Blind appends only (``at_end``): per topic, the ``config_digest`` of the config its
    batches were checked against; folded where the topic's config is another, it is a
    commit of nothing (its writer checks the batches again)."""

    @property
    def at_end(self) -> bool:
        """Whether this is a blind append (``PartitionChange.at_end``): its partition
        changes all go at the log end when folded."""
        return any(c.at_end for c in self.partitions.values())

    def encode(self) -> bytes:
        fmt = CATALOG_FORMAT if self.topic_logs else AT_END_FORMAT if self.at_end else FORMAT
        doc = {"format": fmt, "version": self.version, "writer": self.writer,
               "timestamp_ms": self.timestamp_ms, "operation": self.operation,
               "topics": {t: (s.to_json() if s is not None else None)
                          for t, s in sorted(self.topics.items())},
               "partitions": {k: c.to_json() for k, c in sorted(self.partitions.items())}}
        if self.sinks:
            doc["sinks"] = dict(self.sinks)
        if self.topic_logs:
            doc["topic_logs"] = dict(sorted(self.topic_logs.items()))
        if self.configs:
            doc["configs"] = dict(sorted(self.configs.items()))
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes, where: str, expected_version: int) -> Commit:
        doc = _load_json(data, where)
        if doc.get("format") not in READ_FORMATS:
            raise CorruptMetadataError(f"{where}: unknown commit format {doc.get('format')!r} "
                                       f"(this seglog reads formats {READ_FORMATS})")
        if doc.get("version") != expected_version:
            raise CorruptMetadataError(f"{where}: holds version {doc.get('version')!r}, "
                                       f"expected {expected_version}")
        for name, kind in (("writer", str), ("timestamp_ms", int), ("operation", str),
                           ("topics", dict), ("partitions", dict)):
            if not isinstance(doc.get(name), kind) or isinstance(doc.get(name), bool):
                raise CorruptMetadataError(
                    f"{where}: field {name!r} is missing or not a {kind.__name__}: "
                    f"{doc.get(name)!r:.100}")
        writer, ts, op = doc["writer"], doc["timestamp_ms"], doc["operation"]
        topics, parts, sinks = doc["topics"], doc["partitions"], doc.get("sinks", {})
        if op not in OPERATIONS:
            raise CorruptMetadataError(f"{where}: field 'operation' is {op!r}, not one of "
                                       f"{sorted(OPERATIONS)}")
        if not isinstance(sinks, dict):
            raise CorruptMetadataError(f"{where}: field 'sinks' is not an object: {sinks!r:.100}")
        commit = cls(expected_version, writer, ts, op,
                     {t: (TopicSpec.from_json(s, where, t) if s is not None else None)
                      for t, s in topics.items()},
                     {k: PartitionChange.from_json(c, f"{where}: partition {k}")
                      for k, c in parts.items()},
                     sinks, _topic_logs(doc, where, nullable=True))
        blind = doc.get("format") == AT_END_FORMAT
        configs = doc.get("configs", {})
        if commit.at_end != blind or (blind and (
                op != "append" or commit.topics or commit.sinks or commit.topic_logs
                or not all(c.at_end for c in commit.partitions.values()))):
            raise CorruptMetadataError(
                f"{where}: a format-{doc.get('format')} commit ({op}) must "
                f"{'only append, each partition at_end' if blind else 'not be at_end'}")
        topics_of = {topic_of(k) for k in commit.partitions}
        if not isinstance(configs, dict) or set(configs) != (topics_of if blind else set()) \
                or not all(isinstance(v, str) for v in configs.values()):
            raise CorruptMetadataError(
                f"{where}: field 'configs' must name the config digest of each topic a "
                f"format-3 commit appends to ({sorted(topics_of) if blind else 'none'}), "
                f"not {configs!r:.200}")
        return replace(commit, configs=configs)


def _topic_logs(doc: dict[str, Any], where: str, *, nullable: bool) -> dict[str, Any]:
    """The ``topic_logs`` field (format 2 only): name -> log id (None: removed, in a
    commit)."""
    raw = doc.get("topic_logs", {})
    if doc.get("format") == FORMAT and raw:
        raise CorruptMetadataError(f"{where}: a format-{FORMAT} object names topic logs")
    if not isinstance(raw, dict) or not all(
            isinstance(k, str) and ((v is None and nullable) or _valid_log_id(v))
            for k, v in raw.items()):
        raise CorruptMetadataError(f"{where}: field 'topic_logs' is invalid: {raw!r:.200}")
    return raw


_LOG_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def _valid_log_id(value: object) -> bool:
    return isinstance(value, str) and _LOG_ID.match(value) is not None


def _load_json(data: bytes, where: str) -> dict[str, Any]:
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise CorruptMetadataError(f"{where} is not valid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise CorruptMetadataError(f"{where} is not a JSON object")
    return doc


# -------------------------------------------------------------------------------- state

@dataclass(frozen=True, slots=True)
class PartitionState:
    """``cleaner_offset``: where compaction's cleaned section ends (None: never cleaned)."""

    segments: tuple[SegmentEntry, ...] = ()
    log_start_offset: int = 0
    cleaner_offset: int | None = None

    @property
    def high_watermark(self) -> int:
        """The log end: everything committed is visible."""
        return self.segments[-1].next_offset if self.segments else self.log_start_offset

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)


@dataclass(frozen=True, slots=True)
class BucketState:
    """The fold of commits ``0..version``. Immutable: ``apply`` returns a new state."""

    version: int = NO_VERSION
    topics: Mapping[str, TopicSpec] = field(default_factory=dict)
    partitions: Mapping[str, PartitionState] = field(default_factory=dict)
    sinks: Mapping[str, Any] = field(default_factory=dict)
    topic_logs: Mapping[str, str] = field(default_factory=dict)
    """The catalog's names of topics in their own logs: name -> log id."""
    topic_sinks: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Only in the merged view of all logs (``bucket_logs``), never stored: per topic in
    its own log, the sink ledgers that log holds (``sinks`` is the catalog's)."""

    def partition(self, topic: str, partition: int) -> PartitionState | None:
        return self.partitions.get(tp_key(topic, partition))

    def apply(self, commit: Commit, where: str = "commit") -> BucketState:
        """The state after ``commit``; CorruptMetadataError when it does not follow this
        state (wrong version, a removed segment that is not there, overlapping offsets, a
        new gap, a key of another partition, a log start beyond the log end). Costs what
        the commit touches: untouched partitions are shared, a partition's segments are
        searched (bisect) and checked only around the change."""
        if commit.version != self.version + 1:
            raise CorruptMetadataError(f"{where}: version {commit.version} does not follow "
                                       f"version {self.version}")
        if commit.at_end:
            moved = self.fold_at_end(commit)
            if moved is None:
                # Valid whatever came before it: a blind append that cannot go where the
                # log now ends is a commit of nothing (its writer sees that and retries).
                return replace(self, version=commit.version)
            commit = moved
        topics = dict(self.topics)
        parts = dict(self.partitions)
        topic_logs = dict(self.topic_logs)
        for name, log_id in commit.topic_logs.items():
            moving = commit.operation == MOVE_OPERATION and name in commit.topics \
                and commit.topics[name] is None
            if log_id is None:
                topic_logs.pop(name, None)
            elif (name in topics or name in commit.topics) and not moving:
                raise CorruptMetadataError(f"{where}: names a log for topic {name!r}, which "
                                           f"the catalog holds itself")
            else:
                topic_logs[name] = log_id
        for name, spec in commit.topics.items():
            if spec is not None and name in topic_logs:
                raise CorruptMetadataError(f"{where}: creates topic {name!r} in the catalog, "
                                           f"which names its own log {topic_logs[name]}")
            old = topics.get(name)
            if spec is None:
                topics.pop(name, None)
                for n in range(old.partitions if old else 0):
                    parts.pop(tp_key(name, n), None)
                continue
            if old is not None and spec.partitions < old.partitions:
                raise CorruptMetadataError(f"{where}: topic {name!r} shrinks from "
                                           f"{old.partitions} to {spec.partitions} partitions")
            if old is not None and old.topic_id is not None:
                if spec.topic_id is None:  # an older writer's alter: the id stays
                    spec = replace(spec, topic_id=old.topic_id)
                elif spec.topic_id != old.topic_id:
                    raise CorruptMetadataError(
                        f"{where}: topic {name!r} changes its id from {old.topic_id} to "
                        f"{spec.topic_id} without being deleted")
            topics[name] = spec
            for n in range(old.partitions if old else 0, spec.partitions):
                parts[tp_key(name, n)] = PartitionState()
        for key, change in commit.partitions.items():
            current = parts.get(key)
            if current is None:
                raise CorruptMetadataError(f"{where}: changes partition {key}, which does "
                                           f"not exist")
            if commit.operation == MOVE_OPERATION:
                parts[key] = _moved_partition(current, change, f"{where}: partition {key}", key)
                continue
            parts[key] = _apply_change(current, change, f"{where}: partition {key}", key,
                                       gaps_allowed=commit.operation in GAPS_ALLOWED)
        sinks = dict(self.sinks)
        sinks.update(commit.sinks)
        return BucketState(commit.version, topics, parts, sinks, topic_logs)

    def fold_at_end(self, commit: Commit) -> Commit | None:
        """``commit`` (a blind append) with its entries moved to each partition's log end
        and ``at_end`` cleared; None when it cannot go there: a partition gone (its topic
        deleted), a topic config other than the one its batches were checked against, an
        end gone back below a stored base offset (``offset_delta`` would be
        negative), or every entry held already (a duplicate: the writer's client retried
        a create that had landed, and the writer created the next version too)."""
        moved: dict[str, PartitionChange] = {}
        for key, change in commit.partitions.items():
            current = self.partitions.get(key)
            spec = self.topics.get(topic_of(key))
            if current is None or spec is None \
                    or config_digest(spec.config) != commit.configs.get(topic_of(key)):
                return None
            segments = current.segments
            if all(index_of(segments[-len(change.add):], e.key) is not None
                   for e in change.add):
                return None
            shift = current.high_watermark - min(e.base_offset for e in change.add)
            if any(e.offset_delta + shift < 0 for e in change.add):
                return None
            moved[key] = replace(change, at_end=False, add=tuple(
                replace(e, base_offset=e.base_offset + shift,
                        next_offset=e.next_offset + shift,
                        offset_delta=e.offset_delta + shift) for e in change.add))
        return replace(commit, partitions=moved)

    # -- snapshots ------------------------------------------------------------------------

    def encode(self) -> bytes:
        doc = {"format": CATALOG_FORMAT if self.topic_logs else FORMAT,
               "version": self.version,
               "topics": {t: s.to_json() for t, s in sorted(self.topics.items())},
               "partitions": {k: _partition_json(p) for k, p in sorted(self.partitions.items())},
               "sinks": dict(self.sinks)}
        if self.topic_logs:
            doc["topic_logs"] = dict(sorted(self.topic_logs.items()))
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes, where: str, expected_version: int) -> BucketState:
        doc = _load_json(data, where)
        if doc.get("format") not in READ_FORMATS or doc.get("version") != expected_version:
            raise CorruptMetadataError(
                f"{where}: expected a snapshot (format {READ_FORMATS}) of version "
                f"{expected_version}, got format {doc.get('format')!r} version "
                f"{doc.get('version')!r}")
        topics, parts, sinks = doc.get("topics"), doc.get("partitions"), doc.get("sinks", {})
        if not isinstance(topics, dict) or not isinstance(parts, dict) \
                or not isinstance(sinks, dict):
            raise CorruptMetadataError(f"{where}: not a snapshot")
        specs = {t: TopicSpec.from_json(s, where, t) for t, s in topics.items()}
        expected = {tp_key(t, n) for t, spec in specs.items() for n in range(spec.partitions)}
        if set(parts) != expected:
            raise CorruptMetadataError(
                f"{where}: field 'partitions' does not match its topics: missing "
                f"{sorted(expected - set(parts))}, of no topic {sorted(set(parts) - expected)}")
        out: dict[str, PartitionState] = {}
        for key, raw in parts.items():
            here = f"{where}: partition {key}"
            lso = raw.get("log_start_offset") if isinstance(raw, dict) else None
            segs = raw.get("segments") if isinstance(raw, dict) else None
            if isinstance(lso, bool) or not isinstance(lso, int) or lso < 0 \
                    or not isinstance(segs, list):
                raise CorruptMetadataError(f"{here}: field 'log_start_offset' or 'segments' "
                                           f"is invalid: {raw!r:.200}")
            entries = tuple(SegmentEntry.from_json(e, here) for e in segs)
            for e in entries:
                check_entry_key(e, key, here)
            _check_order(entries, here)
            if entries and not entries[0].base_offset <= lso <= entries[-1].next_offset:
                raise CorruptMetadataError(
                    f"{here}: field 'log_start_offset' {lso} is outside its segments "
                    f"[{entries[0].base_offset}, {entries[-1].next_offset})")
            out[key] = PartitionState(entries, lso,
                                      _optional_offset(raw, "cleaner_offset", here))
        return cls(expected_version, specs, out, sinks, _topic_logs(doc, where, nullable=False))


def _partition_json(p: PartitionState) -> dict[str, Any]:
    out: dict[str, Any] = {"log_start_offset": p.log_start_offset,
                           "segments": [e.to_json() for e in p.segments]}
    if p.cleaner_offset is not None:
        out["cleaner_offset"] = p.cleaner_offset
    return out


def index_of(segments: tuple[SegmentEntry, ...], key: str) -> int | None:
    """The position of the segment named ``key`` (a bisect on the base offset its name
    carries, which is its entry's: ``check_entry_key``)."""
    parsed = parse_segment_stem(key.rpartition("/")[2])
    if parsed is None:
        if not key.startswith(STAGING_DIR + "/"):
            return None
        # A sink fragment's name carries no offset; fragments are the newest segments
        # until a merge replaces them, so look from the end.
        return next((i for i in range(len(segments) - 1, -1, -1) if segments[i].key == key),
                    None)
    i = bisect.bisect_left(segments, parsed[0], key=_base)
    if i < len(segments) and segments[i].key == key:
        return i
    # An append that lost a race keeps its upload, named by its stored base offset, and
    # is committed above it (``offset_delta`` > 0, ``check_entry_key``): look upwards.
    return next((j for j in range(i, len(segments)) if segments[j].key == key), None)


def _base(entry: SegmentEntry) -> int:
    return entry.base_offset


def check_entry_key(entry: SegmentEntry, partition_key: str, where: str) -> None:
    """An entry's key is ``<partition>/<its base offset, or with an ``offset_delta``
    above 0 its stored base offset (base_offset - offset_delta), 20 digits>-<16 hex
    digits>``, or,
    for a Spark sink fragment committed where its task uploaded it, a key under
    ``_seglog/staging/`` whose stored offsets start at 0 (``offset_delta`` = base offset)."""
    if entry.key.startswith(STAGING_DIR + "/"):
        if entry.offset_delta != entry.base_offset:
            raise CorruptMetadataError(
                f"{where}: fragment {entry.key!r} of partition {partition_key} has "
                f"offset_delta {entry.offset_delta}, but its stored offsets start at 0, so "
                f"it must equal its base_offset {entry.base_offset}")
        return
    prefix, _, stem = entry.key.rpartition("/")
    parsed = parse_segment_stem(stem)
    if prefix != partition_key or parsed is None:
        raise CorruptMetadataError(
            f"{where}: segment key {entry.key!r} is not an object of partition "
            f"{partition_key} (expected {partition_key}/<20-digit base>-<16 hex digits>)")
    # The name carries the real base offset, or the stored one (the real one less an
    # ``offset_delta`` above 0) for an append that lost a race and kept its upload.
    stored = entry.base_offset - entry.offset_delta
    if parsed[0] != entry.base_offset and (entry.offset_delta <= 0 or parsed[0] != stored):
        raise CorruptMetadataError(f"{where}: segment key {entry.key!r} names base offset "
                                   f"{parsed[0]}, its fields 'base_offset' "
                                   f"{entry.base_offset} and 'offset_delta' "
                                   f"{entry.offset_delta} say {entry.base_offset} (or "
                                   f"{stored}, the stored base of a delta above 0)")


def _apply_change(current: PartitionState, change: PartitionChange, where: str,
                  partition_key: str, *, gaps_allowed: bool) -> PartitionState:
    segments = current.segments
    removed: set[int] = set()
    for key in change.remove:
        i = index_of(segments, key)
        if i is None:
            raise CorruptMetadataError(f"{where}: removes segment {key}, which it does not "
                                       f"hold")
        if i in removed:
            raise CorruptMetadataError(f"{where}: removes segment {key} twice")
        removed.add(i)
    adds = tuple(sorted(change.add, key=_base))
    seen: set[str] = set()
    points = []
    for e in adds:
        check_entry_key(e, partition_key, where)
        i = index_of(segments, e.key)
        if e.key in seen or (i is not None and i not in removed):
            raise CorruptMetadataError(f"{where}: adds segment {e.key}, which it holds "
                                       f"already")
        seen.add(e.key)
        points.append(bisect.bisect_left(segments, e.base_offset, key=_base))
    # The window the change touches; everything outside it is kept as it is.
    lo = min([*removed, *points], default=len(segments))
    hi = max([i + 1 for i in removed] + points, default=lo)
    middle = tuple(sorted([e for i, e in enumerate(segments[lo:hi], lo) if i not in removed]
                          + list(adds), key=_base))
    new = segments[:lo] + middle + segments[hi:]
    before = segments[max(lo - 1, 0):hi + 1]
    after = new[max(lo - 1, 0):lo + len(middle) + 1]
    _check_order(after, where)
    old_end = current.high_watermark
    if adds and hi == len(segments) and lo == len(segments) and adds[0].base_offset != old_end \
            and not gaps_allowed:
        raise CorruptMetadataError(
            f"{where}: segment {adds[0].key} starts at {adds[0].base_offset}, not at the log "
            f"end {old_end}")
    if not gaps_allowed:
        _check_no_new_gap(before, after, where)
    end = new[-1].next_offset if new else old_end
    if end < old_end:
        raise CorruptMetadataError(f"{where}: the log end would go back from {old_end} to "
                                   f"{end}")
    lso = current.log_start_offset
    if change.log_start_offset is not None:
        if change.log_start_offset > end:
            raise CorruptMetadataError(
                f"{where}: field 'log_start_offset' {change.log_start_offset} is beyond the "
                f"log end {end}")
        lso = max(lso, change.log_start_offset)
    lso = max(lso, new[0].base_offset) if new else end
    cleaned = current.cleaner_offset if change.cleaner_offset is None else change.cleaner_offset
    return replace(current, segments=new, log_start_offset=lso, cleaner_offset=cleaned)


def _moved_partition(current: PartitionState, change: PartitionChange, where: str,
                     partition_key: str) -> PartitionState:
    """A partition set whole by a move (``MOVE_OPERATION``): it must be new (version 0
    of a topic log), and it takes the catalog's segments, log start and cleaner offset as
    they were, compaction's gaps and a log start above 0 included (an append could not
    express them)."""
    if current != PartitionState() or change.remove:
        raise CorruptMetadataError(f"{where}: a {MOVE_OPERATION} commit sets a partition "
                                   f"that holds segments already (or removes some)")
    entries = tuple(sorted(change.add, key=_base))
    for e in entries:
        check_entry_key(e, partition_key, where)
    _check_order(entries, where)
    lso = change.log_start_offset or 0
    if entries and not entries[0].base_offset <= lso <= entries[-1].next_offset:
        raise CorruptMetadataError(f"{where}: field 'log_start_offset' {lso} is outside "
                                   f"its segments [{entries[0].base_offset}, "
                                   f"{entries[-1].next_offset})")
    return PartitionState(entries, lso, change.cleaner_offset)


def _gaps(segments: tuple[SegmentEntry, ...]) -> list[tuple[int, int]]:
    return [(a.next_offset, b.base_offset)
            for a, b in zip(segments, segments[1:], strict=False)
            if b.base_offset > a.next_offset]


def _check_no_new_gap(before: tuple[SegmentEntry, ...], after: tuple[SegmentEntry, ...],
                      where: str) -> None:
    old = _gaps(before)
    for x, y in _gaps(after):
        if not any(ox <= x and y <= oy for ox, oy in old):
            raise CorruptMetadataError(
                f"{where}: offsets [{x}, {y}) would be held by no segment (only compaction "
                f"may leave such a gap)")


def _check_order(segments: tuple[SegmentEntry, ...], where: str) -> None:
    for a, b in zip(segments, segments[1:], strict=False):
        if b.base_offset < a.next_offset:
            raise CorruptMetadataError(f"{where}: segment {b.key} starts at {b.base_offset}, "
                                       f"inside {a.key} [{a.base_offset}, {a.next_offset})")
