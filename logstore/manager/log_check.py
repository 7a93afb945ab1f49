"""``check``: what the checkpoints and topic configs of a LogManager's dirs say vs what is
on disk, reported and optionally repaired (python-diskcache's ``Cache.check``).

Checked per log dir: every state file parses (the three offset checkpoints, which must
exist once the dir holds partitions, ``cleaner-offset-checkpoint`` and
``seglog-maintenance-checkpoint``); no checkpoint entry names a partition that does not
exist; no entry is beyond its partition's log end; no temporary leftovers (the ``*.tmp`` of a state
file, unfinished partition directories; ``log_dirs.is_interrupted_write``: another
``*.tmp`` is not seglog's, and is left alone). A partition with records that
``replication-offset-checkpoint`` does not list is a note (``Problem.note``): it has
published nothing, which is what every reader then sees. Per partition: the topic config
file exists, parses, and agrees with the topic's other partitions. With ``deep=True``
every segment is read by ``partition_scan`` (the one deep check, also ``seglog check``'s):
batch sizes, CRCs, the offset rules readers apply (``offset_continuity``; kind
``bad-batch`` for wrong bytes, ``missing-data`` for a deleted or short segment, up to the
high watermark), partial batches by Kafka's recovery rule, each ``.txnindex``, and both
indexes by Kafka's lookup rule (``index_check``: no entry may send a lookup past what it
looks for).

``fix=True`` (writer only) rewrites checkpoints from the logs' own state, removes
leftovers, rewrites missing or disagreeing topic configs from the lowest partition, and
for a bad batch truncates the log before the first one (what crash recovery would do;
the data after it is lost); missing data, indexes and ``.txnindex`` have nothing to cut
and stay reported (a writer's recovery rebuilds the indexes). A damaged
high-watermark or log-start-offset checkpoint keeps a LogManager from opening at all:
``log_manager.check_log_dirs(dirs, fix=True)`` (``seglog check --fix``) opens a writer with
``repair=True``, which rebuilds them from the recovered logs (see ``log_manager``), then
runs this check with ``fix``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

from ..config.topics import read_topic_config, write_topic_config
from ..errors import (
    ConfigError,
    CorruptCheckpointError,
    CorruptPartitionMetadataError,
    KafkaStorageError,
    SeglogError,
)
from ..log.offset_checkpoints import OFFSET_CHECKPOINTS, read_offset_checkpoint, set_aside
from ..log.offset_continuity import OffsetPolicy, offset_policy
from ..log.partition_metadata import partition_metadata_path, read_topic_id, topic_ids_differ
from ..log.partition_scan import published_high_watermark, scan_partition
from ..records.record_format import TopicPartition
from ..storage.checkpoint_file import OffsetCheckpointFile
from ..storage.file_names import (
    CLEANER_OFFSET_CHECKPOINT,
    HIGH_WATERMARK_CHECKPOINT,
    MAINTENANCE_CHECKPOINT,
)
from ..storage.storage import LOCAL
from .log_check_target import CheckTarget
from .log_dirs import LogDir, Partition, is_interrupted_write
from .scheduler import last_runs_file

# check runs on a writer or a reader; both call it, so it names neither (no cycle)
Manager: TypeAlias = CheckTarget

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Problem:
    """One inconsistency: a short ``kind``, the file or directory, what is wrong, and
    whether ``fix`` repaired it."""

    kind: str
    path: Path
    message: str
    fixed: bool = False
    note: bool = False  # worth knowing, not wrong (e.g. a partition not yet published)


def check_manager(mgr: Manager, *, fix: bool = False, deep: bool = False) -> list[Problem]:
    """Every inconsistency found in ``mgr``'s dirs (repaired with ``fix``)."""
    if fix:
        mgr.check_writable()
    problems: list[Problem] = []
    for ld in mgr.log_dirs:
        problems += _check_dir(mgr, ld, fix)
        problems += _check_state_files(mgr, ld, fix)
    for topic in mgr.topics():
        problems += _check_topic_configs(mgr, topic, fix)
        problems += _check_topic_ids(mgr, topic)
    if deep:
        for topic in mgr.topics():
            for n in mgr.partitions(topic):
                problems += _check_partition_data(mgr, topic, n, fix)
    for p in problems:
        log = logger.info if p.note else logger.warning
        log("check: %s%s: %s", p.kind, " (fixed)" if p.fixed else "", p.message)
    return problems


def _check_dir(mgr: Manager, ld: LogDir, fix: bool) -> list[Problem]:
    out: list[Problem] = []
    parts = {p.tp: p for p in mgr.partitions_in(ld)}
    rewrite = False
    for name in OFFSET_CHECKPOINTS:
        path = ld.path / name
        at_open = ld.damaged.pop(name, None)  # report it once
        try:
            entries = read_offset_checkpoint(ld.path, name, has_partitions=bool(parts))
        except CorruptCheckpointError as e:
            out.append(Problem("corrupt-checkpoint", path, str(e), fix))
            rewrite = True
            continue
        if at_open is not None:  # damaged at open; the open's recovery or repair rewrote it
            out.append(Problem("corrupt-checkpoint", path, at_open, True))
        if name == HIGH_WATERMARK_CHECKPOINT:
            out += _unpublished(mgr, path, parts, entries)
        for tp, offset in sorted(entries.items()):
            if tp not in parts:
                out.append(
                    Problem(
                        "stale-checkpoint-entry",
                        path,
                        f"{path} lists {tp[0]}-{tp[1]}, which is not in {ld.path}",
                        fix,
                    )
                )
                rewrite = True
                continue
            end = _log_end(mgr, parts[tp])
            if end is not None and offset > end:
                out.append(
                    Problem(
                        "checkpoint-beyond-log-end",
                        path,
                        f"{path} says {offset} for {tp[0]}-{tp[1]}, whose log ends at {end}",
                        fix,
                    )
                )
                rewrite = True
    for entry in LOCAL.scan_dir(ld.path):
        if is_interrupted_write(entry.name, entry.is_dir):
            out.append(
                Problem(
                    "leftover",
                    Path(entry.path),
                    f"{entry.path} is left over from an interrupted write",
                    fix,
                )
            )
            if fix:
                if entry.is_dir:
                    LOCAL.rmtree(entry.path)
                else:
                    LOCAL.unlink(entry.path)
    if fix and rewrite:
        for p in parts.values():
            mgr.get_log(p.topic, p.partition)  # the logs' own state is the truth to write back
        mgr.write_checkpoints(ld)
    return out


def _unpublished(
    mgr: Manager,
    path: Path,
    parts: dict[TopicPartition, Partition[Any]],
    entries: dict[TopicPartition, int],
) -> list[Problem]:
    """Notes for the partitions holding records above what ``path`` publishes (a crash's
    unpublished tail, or a partition not listed at all): what readers see."""
    out = []
    for tp in sorted(parts):
        end = _log_end(mgr, parts[tp])
        if end is None:
            continue
        start = mgr.get_log(*tp).log_start_offset
        published = max(entries.get(tp, start), start)
        if published >= end:
            continue
        what = "does not list" if tp not in entries else f"publishes offsets up to {published} of"
        out.append(
            Problem(
                "unpublished-records",
                path,
                f"{path} {what} {tp[0]}-{tp[1]}: readers see none of its offsets "
                f"[{published}, {end}) until a writer appends to it",
                note=True,
            )
        )
    return out


def _check_state_files(mgr: Manager, ld: LogDir, fix: bool) -> list[Problem]:
    """The cleaner's and the scheduler's checkpoints of ``ld``: both are safe to rebuild
    (the cleaner re-cleans from the log start; every maintenance task becomes due)."""
    out = []
    for name, read, consequence in (
        (
            CLEANER_OFFSET_CHECKPOINT,
            lambda p: OffsetCheckpointFile(p).read(),
            "the cleaner re-cleans every compacted partition of the dir from its log start",
        ),
        (
            MAINTENANCE_CHECKPOINT,
            lambda p: last_runs_file(p.parent).read(),
            "every maintenance task is due",
        ),
    ):
        path = ld.path / name
        if not LOCAL.lexists(path):
            continue  # both are optional: written after the first cleaning or task run
        try:
            read(path)
            continue
        except (CorruptCheckpointError, KafkaStorageError) as e:
            out.append(Problem("corrupt-checkpoint", path, f"{e}; {consequence}", fix))
        if not fix:
            continue
        set_aside(path, mgr.clock.milliseconds())
        if name == MAINTENANCE_CHECKPOINT:
            mgr.rewrite_last_runs(ld)
        else:
            mgr.reset_cleaner_checkpoint(ld)
        logger.warning("check: rewrote %s", path)
    return out


def _log_end(mgr: Manager, p: Partition[Any]) -> int | None:
    try:
        return mgr.get_log(p.topic, p.partition).log_end_offset
    except SeglogError as e:
        logger.warning("check: cannot load %s: %s", p.dir, e)
        return None


def _check_topic_configs(mgr: Manager, topic: str, fix: bool) -> list[Problem]:
    out: list[Problem] = []
    parts = [mgr.partition(topic, n) for n in mgr.partitions(topic)]
    configs: dict[int, dict[str, str] | None] = {}  # None: no config file
    errors: dict[int, str] = {}  # the unreadable ones
    for p in parts:
        try:
            configs[p.partition] = read_topic_config(p.dir)
        except (ConfigError, KafkaStorageError) as e:
            errors[p.partition] = str(e)
    reference = next((c for c in configs.values() if c is not None), None)
    for p in parts:
        corrupt = p.partition in errors
        c = configs.get(p.partition)
        if not corrupt and c == reference:
            continue
        what = (
            f"has an unreadable topic config ({errors[p.partition]})"
            if corrupt
            else "has no topic config file"
            if c is None
            else "has a topic config that differs from the topic's other partitions"
        )
        # Never a default in place of a damaged config: a compacted topic rewritten with
        # the default cleanup.policy=delete would lose data to retention.
        fixable = fix and reference is not None
        if corrupt and reference is None:
            what += "; no partition of the topic has a readable config to copy: restore it"
        out.append(Problem("topic-config", p.dir, f"{p.dir} {what}", fixable))
        if fixable and reference is not None:
            write_topic_config(p.dir, topic, reference)
    if fix:
        mgr.forget_topic_config(topic)
    return out


def _check_topic_ids(mgr: Manager, topic: str) -> list[Problem]:
    """A damaged ``partition.metadata``, or partitions of one topic holding different
    topic ids. Never fixed: which id is the topic's cannot be told from the files (and a
    reader that trusted a wrong one would read another topic's rows as this one's)."""
    out: list[Problem] = []
    ids: dict[str, list[int]] = {}
    for n in mgr.partitions(topic):
        p = mgr.partition(topic, n)
        try:
            topic_id = read_topic_id(p.dir)
        except (CorruptPartitionMetadataError, KafkaStorageError) as e:
            out.append(Problem("topic-id", partition_metadata_path(p.dir), str(e), False))
            continue
        if topic_id is not None:
            ids.setdefault(topic_id, []).append(n)
    if len(ids) > 1:
        out.append(
            Problem(
                "topic-id",
                mgr.partition(topic, mgr.partitions(topic)[0]).dir,
                topic_ids_differ(topic, ids),
                False,
            )
        )
    return out


def _check_partition_data(mgr: Manager, topic: str, n: int, fix: bool) -> list[Problem]:
    """The partition's data by ``partition_scan`` (every batch, offsets up to the high
    watermark, ``.txnindex``, indexes); with ``fix``, the log is cut before the first
    finding a cut repairs, as crash recovery would cut it."""
    p = mgr.partition(topic, n)
    try:
        log = mgr.get_log(topic, n)
        policy = (
            OffsetPolicy.CONTIGUOUS
            if log.offsets_contiguous
            else offset_policy(p.dir, compact=log.config.compact)
        )
    except SeglogError as e:
        return [Problem("unloadable", p.dir, f"cannot load {p.dir}: {e}", False)]
    # The stricter of what this manager holds and what was published: batches a reader
    # was once told it may read must still be there (a reader's own is clamped to them).
    hw = max(mgr.high_watermarks().get((topic, n), 0), published_high_watermark(p.dir) or 0)
    findings = list(scan_partition(p.dir, high_watermark=hw, policy=policy))
    cut = min((f.truncate_at for f in findings if f.truncate_at is not None), default=None)
    out = [
        Problem(f.kind, f.file, f.text, fix and f.truncate_at is not None, f.note) for f in findings
    ]
    if fix and cut is not None:
        mgr.truncate_log(topic, n, cut)
        logger.warning("check: truncated %s to offset %d", p.dir, cut)
        mgr.write_checkpoints(p.log_dir)  # nothing may point past the new end
    return out
