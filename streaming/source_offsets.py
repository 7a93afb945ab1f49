"""Source offsets: Kafka's ``{"topic": {"partition": offset}}`` JSON, and their resolution.

An offset is the *next* offset to read in each partition, exactly as in Spark's Kafka
connector, so a checkpoint written by one reads naturally to a user of the other. The
engine compares offsets as JSON strings produced without sorted keys, so every dict built
here has a deterministic key order: topics sorted, partitions sorted numerically, and
partitions as strings (JSON object keys).

Resolution works on a ``LogSnapshot`` (what partitions exist, their log start offsets and
high watermarks) taken from the checkpoint files of the log dirs, never by scanning
segments. Data loss (a start offset below the log start offset, a partition that
disappeared, a start offset above the high watermark) raises ``DataLossError`` naming
topic, partition and offsets when ``failOnDataLoss`` is true; otherwise it logs a warning
and continues from what exists.

>>> offsets_to_json({("b", 10): 5, ("b", 2): 7, ("a", 0): 1})
{'a': {'0': 1}, 'b': {'2': 7, '10': 5}}
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from seglog.logstore.errors import (
    ConfigError,
    DataLossError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from seglog.logstore.records.record_format import TopicPartition
from seglog.logstore.storage.object_store_config import (
    NO_STORAGE_OPTIONS,
    StorageOptions,
    redact_uris,
)

from .log_readers import reader
from .source_options import (
    EARLIEST,
    LATEST,
    Earliest,
    GlobalTimestamp,
    Latest,
    OffsetSpec,
    SourceOptions,
    SpecificOffsets,
    SpecificTimestamps,
)

logger = logging.getLogger(__name__)

TRIGGER_KEY = "$lastTriggerMs"
"""Extra top-level key of a streaming offset: when the batch ending there was admitted.

``$`` cannot appear in a Kafka topic name, so the key never collides with a topic. It is
written only when ``minOffsetsPerTrigger`` is set (see ``admission``)."""

TOPIC_IDS_KEY = "$topicIds"
"""Extra top-level key of a streaming offset: ``{topic: topic id}`` of the topics whose
offsets it holds (those that have an id, Kafka's ``partition.metadata``). The next
trigger compares them: a topic whose id changed was deleted and re-created, so its old
offsets mean nothing in the new topic (``reconcile_start``). Tasks get the ids of the
plan and refuse a log of another topic (``source_read``)."""


# ---------------------------------------------------------------------------- JSON form
def offsets_to_json(
    offsets: Mapping[TopicPartition, int], last_trigger_ms: int | None = None,
    topic_ids: Mapping[str, str | None] | None = None,
) -> dict[str, Any]:
    """``{(topic, partition): offset}`` → Kafka's JSON dict, in a deterministic key order
    (with ``topic_ids``: the ids of its topics that have one, under ``TOPIC_IDS_KEY``)."""
    out: dict[str, Any] = {}
    for topic, partition in sorted(offsets):
        out.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])
    if last_trigger_ms is not None:
        out[TRIGGER_KEY] = int(last_trigger_ms)
    ids = {t: topic_ids[t] for t in sorted(out) if t in (topic_ids or {})
           and topic_ids[t] is not None} if topic_ids else {}
    if ids:
        out[TOPIC_IDS_KEY] = ids
    return out


def topic_ids_from_json(data: Mapping[str, Any]) -> dict[str, str]:
    """The topic ids stored in a streaming offset (``{}`` for one without)."""
    ids = data.get(TOPIC_IDS_KEY, {})
    if not isinstance(ids, Mapping) or not all(
            isinstance(t, str) and isinstance(i, str) for t, i in ids.items()):
        raise ConfigError(f"malformed source offset: {TOPIC_IDS_KEY!r} must map topics to "
                          f"topic ids, got {ids!r}")
    return dict(ids)


def offsets_from_json(data: Mapping[str, Any]) -> dict[TopicPartition, int]:
    """Kafka's JSON dict → ``{(topic, partition): offset}`` (extra ``$`` keys ignored)."""
    out: dict[TopicPartition, int] = {}
    for topic, parts in data.items():
        if topic.startswith("$"):
            continue
        if not isinstance(parts, Mapping):
            raise ConfigError(f"malformed source offset for topic {topic!r}: {parts!r}")
        for p, off in parts.items():
            out[(topic, int(p))] = int(off)
    return out


def last_trigger_ms(data: Mapping[str, Any]) -> int | None:
    """The admission time stored in a streaming offset, if any."""
    value = data.get(TRIGGER_KEY)
    return int(value) if value is not None else None


# ---------------------------------------------------------------------------- snapshot
@dataclass(frozen=True)
class LogSnapshot:
    """What the log dirs hold at one instant, from their checkpoint files.

    ``partitions``: topic → sorted partitions; ``log_start_offsets`` and
    ``high_watermarks`` per partition. ``offset_for_timestamp(tp, ts_ms)`` returns the first
    offset whose timestamp is ≥ ``ts_ms``, or None (it reads the time index on demand).
    """

    partitions: Mapping[str, tuple[int, ...]]
    log_start_offsets: Mapping[TopicPartition, int]
    high_watermarks: Mapping[TopicPartition, int]
    offset_for_timestamp: Callable[[TopicPartition, int], int | None] = field(
        default=lambda tp, ts: None, repr=False, compare=False
    )
    topic_ids: Mapping[str, str | None] = field(default_factory=dict)
    """Per topic, its id (None: a topic without ``partition.metadata``)."""

    _existing: frozenset[TopicPartition] = field(
        init=False, default=frozenset(), repr=False, compare=False
    )

    def __post_init__(self) -> None:
        # A set, so a 1,000-partition trigger stays linear.
        existing = frozenset((t, p) for t, ps in self.partitions.items() for p in ps)
        object.__setattr__(self, "_existing", existing)

    def exists(self, tp: TopicPartition) -> bool:
        return tp in self._existing

    def earliest(self, tp: TopicPartition) -> int:
        return self.log_start_offsets.get(tp, 0)

    def latest(self, tp: TopicPartition) -> int:
        # A partition never checkpointed has nothing visible yet.
        return max(self.high_watermarks.get(tp, 0), self.earliest(tp))

    def subscribed(self, options: SourceOptions) -> list[TopicPartition]:
        """The existing partitions the options subscribe to, sorted."""
        return [tp for tp in options.subscription.select(self.partitions) if self.exists(tp)]


def snapshot_log_dirs(
    log_dirs: Iterable[str],
    *,
    start_offsets_for: Callable[[TopicPartition], bool] | None = None,
    options: SourceOptions | None = None,
    storage: StorageOptions = NO_STORAGE_OPTIONS,
    refresh: bool = True,
) -> LogSnapshot:
    """Take a ``LogSnapshot`` through the process's shared read-only ``LogManager``
    (``log_readers``: checkpoint files, re-read every call; listings only where changed).

    On a bucket every answer comes from one refresh of the state (one LIST), or, with
    ``refresh=False``, from the state the shared manager holds (no request: a trigger's
    ``reportLatestOffset`` right after its ``latestOffset``).

    Log start offsets cost a directory listing per partition, so a streaming trigger
    asks only for the partitions it needs them for (``start_offsets_for``, e.g. new
    ones); the others read as 0 and retention below a start offset is then caught where
    the data is read. None fetches them all.

    With ``options`` reading ``read_committed``, the "latest" offset of each subscribed
    partition is its last stable offset (``Log.last_stable_offset``: the newest producer
    snapshot and the batches after it, at most the active segment when the writer left
    snapshots), not its high watermark. The shared manager's logs keep their producer
    state, so a trigger scans only the batches appended since the previous one.

    ``storage``: a bucket's object-store options (``options.storage`` when given).
    ``topic_ids``: those of the subscribed topics, with ``options`` only.
    """
    dirs = tuple(log_dirs)
    if options is not None:
        storage = options.storage
    with reader(dirs, storage) as mgr, mgr.one_refresh(refresh):
        parts = {t: tuple(sorted(mgr.partitions(t))) for t in sorted(mgr.topics())}
        hws = dict(mgr.high_watermarks())
        if options is not None:
            _report_beyond_log_end(mgr.high_watermarks_beyond_log_end(), options)
        if options is not None and options.isolation_level == "read_committed":
            for t, p in options.subscription.select(parts):
                if p in parts.get(t, ()):
                    log = mgr.get_log(t, p)
                    log.update_high_watermark(hws.get((t, p), 0))
                    hws[(t, p)] = log.last_stable_offset
                    # Its segment files only: the producer-state tail stays, and a
                    # trigger over many partitions holds no file open afterwards.
                    log.close()
        wanted = [(t, p) for t, ps in parts.items() for p in ps
                  if start_offsets_for is None or start_offsets_for((t, p))]
        # From the checkpoint and each directory's first segment (re-listed only where
        # its mtime moved), never from a loaded Log, whose view of retention is as old
        # as its last listing.
        all_lsos = mgr.log_start_offsets() if wanted else {}
        lsos = {tp: all_lsos[tp] for tp in wanted if tp in all_lsos}
        # Of the subscribed topics only (a damaged file of another topic is not this
        # query's), read once per partition directory and process (the reader keeps
        # them), so a trigger reads no file for them.
        ids = ({} if options is None
               else mgr.topic_ids({t for t, _ in options.subscription.select(parts)}))

    def lookup(tp: TopicPartition, ts_ms: int) -> int | None:
        return offset_for_timestamp(dirs, tp, ts_ms, storage)

    return LogSnapshot(parts, lsos, hws, lookup, ids)


def _report_beyond_log_end(beyond: dict[TopicPartition, tuple[Path, int, int]],
                           options: SourceOptions) -> None:
    """A published high watermark above the log end: the records between are gone (a
    truncated segment) unless the checkpoint value is damaged, and the two look the same
    here, so it is reported as data loss and never read short in silence."""
    subscribed = set(options.subscription.select(
        {t: tuple(p for tt, p in beyond if tt == t) for t, _ in beyond}))
    for tp, (checkpoint, hw, end) in sorted(beyond.items()):
        if tp in subscribed:
            report_data_loss(
                options.fail_on_data_loss,
                f"topic {tp[0]!r} partition {tp[1]}: offsets [{end}, {hw}) are published in "
                f"{checkpoint} but the log ends at {end} (a truncated segment, or a damaged "
                f"checkpoint value: `seglog check {checkpoint.parent}` tells which)")


def offset_for_timestamp(log_dirs: Iterable[str], tp: TopicPartition, ts_ms: int,
                         storage: StorageOptions = NO_STORAGE_OPTIONS) -> int | None:
    """The first offset of ``tp`` with a timestamp ≥ ``ts_ms`` (time index), or None."""
    with reader(log_dirs, storage) as mgr:
        log = mgr.get_log(*tp)
        try:
            return log.offset_for_timestamp(ts_ms)
        finally:
            log.close()  # its segment files only (see snapshot_log_dirs)


# ---------------------------------------------------------------------------- resolution
def resolve_offsets(
    spec: OffsetSpec,
    partitions: Iterable[TopicPartition],
    snap: LogSnapshot,
    *,
    option: str,
    timestamp_strategy: str = "latest",
) -> dict[TopicPartition, int]:
    """Concrete offsets of ``partitions`` for a starting or ending ``spec``.

    JSON offsets must name exactly the subscribed partitions (Kafka's rule); ``-2``/``-1``
    resolve to earliest/latest. A timestamp with no matching record resolves to latest,
    unless ``timestamp_strategy`` is ``"error"`` (``startingOffsetsByTimestampStrategy``).
    """
    tps = list(partitions)
    if isinstance(spec, Earliest):
        return {tp: snap.earliest(tp) for tp in tps}
    if isinstance(spec, Latest):
        return {tp: snap.latest(tp) for tp in tps}
    if isinstance(spec, SpecificOffsets):
        given = spec.as_dict()
        _check_same_partitions(given, tps, option)
        out = {}
        for tp, off in given.items():
            if off == EARLIEST:
                out[tp] = snap.earliest(tp)
            elif off == LATEST:
                out[tp] = snap.latest(tp)
            else:
                out[tp] = off
        return out
    if isinstance(spec, GlobalTimestamp):
        wanted = {tp: spec.timestamp_ms for tp in tps}
    else:
        assert isinstance(spec, SpecificTimestamps)
        wanted = spec.as_dict()
        _check_same_partitions(wanted, tps, option)
    out = {}
    for tp, ts in wanted.items():
        found = snap.offset_for_timestamp(tp, ts) if snap.exists(tp) else None
        if found is None:
            if timestamp_strategy == "error":
                raise OffsetOutOfRangeError(
                    f"option {option!r}: no record with a timestamp at or after {ts} in "
                    f"topic {tp[0]!r} partition {tp[1]} (set "
                    "startingOffsetsByTimestampStrategy=latest to start at the latest offset)"
                )
            found = snap.latest(tp)
        out[tp] = min(max(found, snap.earliest(tp)), snap.latest(tp))
    return out


def _check_same_partitions(
    given: Mapping[TopicPartition, int], subscribed: list[TopicPartition], option: str
) -> None:
    if set(given) != set(subscribed):
        missing = sorted(set(subscribed) - set(given))
        extra = sorted(set(given) - set(subscribed))
        raise ConfigError(
            f"option {option!r} must name every subscribed partition and only those "
            f"(use -2 for earliest, -1 for latest): missing {_fmt(missing)}, "
            f"not subscribed or not found {_fmt(extra)}"
        )


def _fmt(tps: Iterable[TopicPartition]) -> str:
    return "[" + ", ".join(f"{t}-{p}" for t, p in tps) + "]"


def initial_offsets(options: SourceOptions, snap: LogSnapshot) -> dict[TopicPartition, int]:
    """Where a new streaming query (or a batch read) starts, per subscribed partition.

    Raises UnknownTopicOrPartitionError when ``assign`` names a partition that does not
    exist (Spark's Kafka connector fails too; reading nothing would hide a typo)."""
    check_assigned_partitions(options, snap)
    return resolve_offsets(
        options.starting,
        snap.subscribed(options),
        snap,
        option=_start_option(options),
        timestamp_strategy=options.starting_by_timestamp_strategy,
    )


def ending_offsets(options: SourceOptions, snap: LogSnapshot) -> dict[TopicPartition, int]:
    """Where a batch read ends, per subscribed partition (timestamps without match → latest).

    Raises OffsetOutOfRangeError for an offset given in ``endingOffsets`` above the
    partition's latest offset (its high watermark): those offsets name nothing yet, and
    Spark's Kafka connector refuses them too rather than return less than asked for."""
    out = resolve_offsets(
        options.ending, snap.subscribed(options), snap, option="endingOffsets",
        timestamp_strategy="latest",
    )
    if isinstance(options.ending, SpecificOffsets):
        beyond = [tp for tp in sorted(out) if out[tp] > snap.latest(tp)]
        if beyond:
            raise OffsetOutOfRangeError(
                "option 'endingOffsets' asks for offsets past the end of "
                + ", ".join(f"{t}-{p} ({out[(t, p)]} > latest offset {snap.latest((t, p))})"
                            for t, p in beyond)
                + "; use -1 for the latest offset"
            )
    return out


def check_assigned_partitions(options: SourceOptions, snap: LogSnapshot) -> None:
    """Refuse ``assign`` of partitions that do not exist, naming them."""
    if options.subscription.kind != "assign":
        return
    missing = [tp for tp in options.subscription.select(snap.partitions) if not snap.exists(tp)]
    if missing:
        raise UnknownTopicOrPartitionError(
            f"option 'assign' names {_fmt(missing)}, which do not exist in "
            f"{redact_uris(options.log_dirs)}"
        )


def _start_option(options: SourceOptions) -> str:
    if isinstance(options.starting, GlobalTimestamp):
        return "startingTimestamp"
    if isinstance(options.starting, SpecificTimestamps):
        return "startingOffsetsByTimestamp"
    return "startingOffsets"


def recreated_topics(previous_ids: Mapping[str, str],
                     ids: Mapping[str, str | None]) -> dict[str, tuple[str, str | None]]:
    """Topics whose id changed since ``previous_ids``: ``{topic: (old id, new id)}``.
    Only two known ids are compared. An id that is gone is unknown, not another topic:
    it can vanish without a re-creation (an older seglog's snapshot of a bucket state
    drops it, a partition directory restored without its ``partition.metadata``), and
    taking that for a re-creation would read the topic again from its earliest offset
    (duplicates) or fail the query. A topic re-created by a seglog without topic ids is
    therefore not told apart, as before topic ids."""
    return {t: (old, new) for t, old in sorted(previous_ids.items())
            if (new := ids.get(t)) is not None and new != old}


def reconcile_start(
    start: Mapping[TopicPartition, int],
    options: SourceOptions,
    snap: LogSnapshot,
    previous_ids: Mapping[str, str] | None = None,
) -> dict[TopicPartition, int]:
    """The offsets to continue from, given the previous end and what exists now.

    - New partitions (and, with ``subscribePattern``, new topics) start at earliest, as
      Kafka's connector does.
    - A topic whose id differs from ``previous_ids`` (the previous end's) was deleted and
      re-created: its old offsets are lost (reported as for a partition that
      disappeared) and its partitions start at the new topic's earliest, as new ones.
    - A partition that disappeared, an offset below the log start offset (retention) or
      above the high watermark (truncation, topic recreated) is data loss: raised with
      ``failOnDataLoss``, else logged; the partition continues from its log start offset,
      or is dropped if it no longer exists.
    """
    out: dict[TopicPartition, int] = {}
    now = snap.subscribed(options)
    recreated = recreated_topics(previous_ids or {}, snap.topic_ids)
    for tp in sorted(tp for tp in start if tp[0] in recreated):
        old, new = recreated[tp[0]]
        report_data_loss(
            options.fail_on_data_loss,
            f"topic {tp[0]!r} partition {tp[1]}: offsets from {start[tp]} on of topic id "
            f"{old} may not have been read: the topic was deleted and re-created (its id "
            f"is now {new}); the new topic is read from its earliest offset",
        )
    start = {tp: off for tp, off in start.items() if tp[0] not in recreated}
    for tp in now:
        if tp not in start:
            out[tp] = snap.earliest(tp)
            logger.info("new partition %s-%d: starting at offset %d", tp[0], tp[1], out[tp])
            continue
        off = start[tp]
        lso, hw = snap.earliest(tp), snap.latest(tp)
        if off < lso:
            report_data_loss(
                options.fail_on_data_loss,
                f"topic {tp[0]!r} partition {tp[1]}: offsets [{off}, {lso}) were removed "
                f"(the log start offset is now {lso}); some data may have been lost",
            )
            off = lso
        elif off > hw:
            report_data_loss(
                options.fail_on_data_loss,
                f"topic {tp[0]!r} partition {tp[1]}: offset {off} is above the high watermark "
                f"{hw} (the log was truncated or recreated); some data may have been lost",
            )
            off = lso
        out[tp] = off
    for tp in sorted(set(start) - set(now)):
        report_data_loss(
            options.fail_on_data_loss,
            f"topic {tp[0]!r} partition {tp[1]} disappeared (last offset read: "
            f"{start[tp]}); some data may have been lost",
        )
    return out


def skip_removed(
    start: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    snap: LogSnapshot,
    fail_on_data_loss: bool,
) -> dict[TopicPartition, int]:
    """Planned start offsets, moved up to the log start offsets of ``snap`` where
    retention removed offsets since they were chosen; each move is data loss, reported
    here (on the driver) naming the topic-partition and the offsets skipped."""
    out = dict(start)
    for tp in sorted(start):
        lso = snap.log_start_offsets.get(tp)
        if lso is None or start[tp] >= lso or tp not in end:
            continue
        until = min(lso, end[tp])
        report_data_loss(
            fail_on_data_loss,
            f"topic {tp[0]!r} partition {tp[1]}: offsets [{start[tp]}, {until}) were removed "
            f"before they were read (the log start offset is now {lso}); they are skipped",
        )
        out[tp] = until
    return out


def report_data_loss(fail_on_data_loss: bool, message: str) -> None:
    """Raise ``DataLossError`` (failOnDataLoss) or log a warning, as Kafka's connector does."""
    if fail_on_data_loss:
        raise DataLossError(
            message + ". If this is expected, set the source option failOnDataLoss to false."
        )
    logger.warning("%s. Continuing from what exists (failOnDataLoss=false).", message)
