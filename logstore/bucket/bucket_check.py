"""``check_bucket``: the committed state of a bucket log dir against its objects
(``seglog check URI``). Read-only.

Per committed segment: the ``.log`` object exists with the size its commit recorded, and
every batch verifies (``bucket_objects.read_segment``: header, size, CRC, offsets
increasing, inside the entry's range; ``offset_delta`` patched first) and keeps the offset
rules of a local partition's deep check (``offset_continuity.ContinuityCheck``, as
``partition_scan`` applies them: increasing across segments too and, in a topic that is
not compacted, contiguous inside and across segments) up to the partition's high
watermark, its last entry's ``next_offset`` (a last ``.log`` whose batches end below it
is a log end mismatch, as a local dir's is); the ``.index`` and
``.timeindex`` objects have their recorded sizes and no entry would mislead a lookup
(``index_check``'s rules, as for local files). Objects that the current state does not
reference are notes, not problems: a dead writer's upload, or a removed segment waiting
for ``file.delete.delay.ms``; ``seglog maintain`` collects them. Only the log dir's own
objects are looked at (``bucket_ownership``): a shared bucket's other objects are none of
``check``'s business.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..config.config import LogConfig
from ..errors import MissingDataError, SeglogError
from ..index.index_check import SegmentBatches, offset_index_entries, time_index_entries
from ..log.offset_continuity import ContinuityCheck
from ..log.partition_scan import offset_index_messages, time_index_messages
from ..records.record_format import BatchHeader
from ..storage.storage import Storage
from .bucket_commit_reader import repair_advice
from .bucket_objects import object_uri, read_segment, stored_indexes
from .bucket_ownership import owned_objects
from .bucket_repair import rollback_evidence
from .bucket_segment import ObjectPath, object_keys
from .bucket_state import (
    CATALOG,
    BucketState,
    LogLayout,
    SegmentEntry,
    parse_segment_stem,
    version_name,
)


@dataclass(frozen=True, slots=True)
class BucketFinding:
    """A problem (or, with ``problem`` False, a note) about the object or partition
    ``where`` (a URI)."""

    where: str
    message: str
    problem: bool = True


@dataclass(frozen=True, slots=True)
class PartitionReport:
    where: str
    segments: int
    batches: int
    log_end_offset: int
    problems: int
    notes: int


def check_bucket(
    storage: Storage,
    state: BucketState,
    config_of: dict[str, LogConfig],
    progress: Callable[[int, int], object] | None = None,
    logs: Sequence[tuple[LogLayout, BucketState]] = (),
) -> tuple[list[BucketFinding], list[PartitionReport]]:
    """Every finding, and a summary per partition; ``config_of``: each topic's config.
    ``progress(n, total)``: n more bytes of the ``total`` the commit names were read.
    ``logs``: each commit log of the log dir with its own state (the catalog's and each
    topic's, ``bucket_logs``; empty: ``state`` is the catalog's, the only log), whose
    hint, snapshots and newest commit are judged on their own."""
    if not logs:
        logs = [(CATALOG, state)]
    findings: list[BucketFinding] = []
    reports = []
    total = sum(e.size for ps in state.partitions.values() for e in ps.segments)
    for key, ps in sorted(state.partitions.items()):
        topic = key.rpartition("-")[0]
        before = len(findings)
        batches = 0
        # The batch-level offset rules every local check applies (offset_continuity).
        check = ContinuityCheck(
            key,
            contiguous=not config_of[topic].compact,
            # From the log start: an import bases its first segment at 0 below it.
            expected=max(ps.segments[0].base_offset, ps.log_start_offset) if ps.segments else 0,
        )
        for i, entry in enumerate(ps.segments):
            where = object_uri(storage, entry.key + ".log")
            next_base = ps.segments[i + 1].base_offset if i + 1 < len(ps.segments) else None
            try:
                check.enter(ObjectPath(where), entry.base_offset, next_base)
            except MissingDataError as e:
                findings.append(BucketFinding(where, str(e)))
                check.expected = e.end
                check.enter(ObjectPath(where), entry.base_offset, next_base)
            try:
                seg = read_segment(storage, entry)
            except FileNotFoundError:
                findings.append(BucketFinding(where, "the commit references it, but it is missing"))
                check.expected = max(check.expected, entry.next_offset)  # reported once
                continue
            except SeglogError as e:
                findings.append(BucketFinding(where, str(e)))
                check.expected = max(check.expected, entry.next_offset)
                continue
            batches += len(seg.headers)
            if progress is not None:
                progress(entry.size, total)
            for h in seg.headers:
                if h.last_offset < ps.log_start_offset:
                    continue  # waits for retention (DeleteRecords): nothing reads it
                problem = check.problem(h)
                if problem:
                    findings.append(
                        BucketFinding(where, f"batch at position {h.position} {problem}")
                    )
                    check.resync(h)
                else:
                    check.batch(h)
            findings += _index_findings(storage, entry, seg.headers)
        if ps.segments:
            last_log = object_uri(storage, ps.segments[-1].key + ".log")
            findings += _log_end_findings(check, last_log, ps.high_watermark)
        problems = len(findings) - before
        reports.append(
            PartitionReport(
                object_uri(storage, key), len(ps.segments), batches, ps.high_watermark, problems, 0
            )
        )
    findings += [
        BucketFinding(
            storage.uri,
            f"{e}: the newest commits were deleted (the log "
            f"rolled back); {repair_advice(storage.uri)}",
        )
        for layout, log_state in logs
        for e in rollback_evidence(storage, log_state, layout)
    ]
    referenced = {
        k for ps in state.partitions.values() for s in ps.segments for k in object_keys(s)
    }
    # Per partition, the time of the newest commit of the log that holds it.
    newest_of: dict[str, int | None] = {}
    for layout, log_state in logs:
        newest_commits = storage.list_after(layout.commit_dir, _before(log_state))
        when = max((e.mtime_ms for e in newest_commits), default=None)
        newest_of.update(dict.fromkeys(log_state.partitions, when))
    # Only objects the log dir can prove are its own (bucket_ownership): never another
    # log dir's, never a foreign file.
    named = {f"{t}-{n}" for t, spec in state.topics.items() for n in range(spec.partitions)}
    for key, listed in owned_objects(storage, named | set(state.partitions)):
        if key in referenced:
            continue
        at = _at_or_beyond_log_end(state, key)
        newest = newest_of.get(key.rpartition("/")[0])
        if at is not None and newest is not None and listed.mtime_ms >= newest:
            base, end = at
            if base > end:
                findings.append(
                    BucketFinding(
                        object_uri(storage, key),
                        f"not referenced, written after the newest "
                        f"commit and starting at offset {base}, beyond the log end {end} of its "
                        f"partition: only a commit that is gone can have placed it there (the "
                        f"newest commits were deleted); {repair_advice(storage.uri)}",
                    )
                )
            else:
                findings.append(
                    BucketFinding(
                        object_uri(storage, key),
                        f"not referenced, written after the newest "
                        f"commit and starting at the log end {end}: a writer killed between its "
                        f"upload and its commit, or the newest commit was deleted (if no writer "
                        f"died, run seglog repair); seglog maintain deletes it",
                        problem=False,
                    )
                )
            continue
        findings.append(
            BucketFinding(
                object_uri(storage, key),
                "not referenced by the current state (an "
                "uncommitted upload, or removed and waiting for file.delete.delay.ms); "
                "seglog maintain deletes it",
                problem=False,
            )
        )
    return findings, reports


def _before(state: BucketState) -> str:
    """The LIST start that lists the newest commit (and any after it)."""
    return version_name(state.version - 1) if state.version >= 1 else ""


def _at_or_beyond_log_end(state: BucketState, key: str) -> tuple[int, int] | None:
    """(base offset, log end) of a partition's segment object whose base offset is at or
    beyond the partition's log end. A writer stamps offsets from a log end it read, never
    beyond the newest commit's: an object beyond it was placed by a commit that is gone."""
    prefix, _, name = key.rpartition("/")
    ps = state.partitions.get(prefix)
    parsed = parse_segment_stem(name.partition(".")[0])
    if ps is None or parsed is None or parsed[0] < ps.high_watermark:
        return None
    return parsed[0], ps.high_watermark


def _log_end_findings(
    check: ContinuityCheck, where: str, high_watermark: int
) -> list[BucketFinding]:
    """The batches reach the high watermark, the last entry's ``next_offset`` (what
    readers were told they may read): ``partition_scan``'s end rule, through the same
    ``ContinuityCheck.finish``. Batches running past it are ``read_segment``'s finding."""
    try:
        check.finish(high_watermark, high_watermark)
    except SeglogError as e:  # MissingDataError: the object holds less than committed
        return [BucketFinding(where, str(e))]
    return []


def _index_findings(
    storage: Storage, entry: SegmentEntry, headers: tuple[BatchHeader, ...]
) -> list[BucketFinding]:
    try:
        index, timeindex = stored_indexes(storage, entry)
    except FileNotFoundError as e:
        return [BucketFinding(str(e), "the commit references it, but it is missing")]
    except SeglogError as e:
        return [BucketFinding(object_uri(storage, entry.key), str(e))]
    # The index rules of a local partition's deep check (partition_scan), messages too.
    batches = SegmentBatches.from_headers(headers)
    offsets = offset_index_entries(index, entry.base_offset)
    times = time_index_entries(timeindex, entry.base_offset)
    out = [
        BucketFinding(object_uri(storage, entry.key + ".index"), m)
        for m in offset_index_messages(offsets, batches)
    ]
    out += [
        BucketFinding(object_uri(storage, entry.key + ".timeindex"), m)
        for m in time_index_messages(times, offsets, batches)
    ]
    return out
