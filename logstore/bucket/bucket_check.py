"""``check_bucket``: the committed state of a bucket log dir against its objects
(``seglog check URI``). Read-only.

Per committed segment: the ``.log`` object exists with the size its commit recorded, and
every batch verifies (``bucket_objects.read_segment``: header, size, CRC, offsets
increasing, inside the entry's range; ``offset_delta`` patched first); in a topic that is
not compacted, offsets are contiguous inside and across segments; the ``.index`` and
``.timeindex`` objects have their recorded sizes and no entry would mislead a lookup
(``index_check``'s rules, as for local files). Objects that the current state does not
reference are notes, not problems: a dead writer's upload, or a removed segment waiting
for ``file.delete.delay.ms``; ``seglog maintain`` collects them. Only the log dir's own
objects are looked at (``bucket_ownership``): a shared bucket's other objects are none of
``check``'s business.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..config.config import LogConfig
from ..errors import SeglogError
from ..index.index_check import (
    SegmentBatches,
    offset_index_entries,
    offset_index_violations,
    time_index_entries,
    time_index_violations,
)
from ..records.record_format import BatchHeader
from ..storage.storage import Storage
from .bucket_commit_log import repair_advice
from .bucket_objects import object_uri, read_segment, stored_indexes
from .bucket_ownership import owned_objects
from .bucket_repair import rollback_evidence
from .bucket_segment import object_keys
from .bucket_state import (
    COMMIT_DIR,
    BucketState,
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


def check_bucket(storage: Storage, state: BucketState, config_of: dict[str, LogConfig],
                 progress: Callable[[int, int], object] | None = None,
                 ) -> tuple[list[BucketFinding], list[PartitionReport]]:
    """Every finding, and a summary per partition; ``config_of``: each topic's config.
    ``progress(n, total)``: n more bytes of the ``total`` the commit names were read."""
    findings: list[BucketFinding] = []
    reports = []
    total = sum(e.size for ps in state.partitions.values() for e in ps.segments)
    for key, ps in sorted(state.partitions.items()):
        topic = key.rpartition("-")[0]
        contiguous = not config_of[topic].compact
        before = len(findings)
        batches = 0
        expected = None
        for entry in ps.segments:
            where = object_uri(storage, entry.key + ".log")
            try:
                seg = read_segment(storage, entry)
            except FileNotFoundError:
                findings.append(BucketFinding(where, "the commit references it, but it is "
                                                     "missing"))
                continue
            except SeglogError as e:
                findings.append(BucketFinding(where, str(e)))
                continue
            batches += len(seg.headers)
            if progress is not None:
                progress(entry.size, total)
            if contiguous:
                for h in seg.headers:
                    # A legacy compressed wrapper knows only its last offset (imported
                    # from an old broker's dir): offset_continuity's rule, as local
                    # checks apply it.
                    known_base = h.magic == 2 or h.records_count >= 0
                    if expected is not None and known_base and h.base_offset != expected:
                        findings.append(BucketFinding(
                            where, f"batch at position {h.position} starts at offset "
                                   f"{h.base_offset}, expected {expected} (offsets of a "
                                   f"topic that is not compacted are contiguous)"))
                    elif expected is not None and h.last_offset < expected:
                        findings.append(BucketFinding(
                            where, f"batch at position {h.position} ends at offset "
                                   f"{h.last_offset}, below {expected}"))
                    expected = h.next_offset
            findings += _index_findings(storage, entry, seg.headers)
        problems = len(findings) - before
        reports.append(PartitionReport(object_uri(storage, key), len(ps.segments), batches,
                                       ps.high_watermark, problems, 0))
    findings += [BucketFinding(storage.uri, f"{e}: the newest commits were deleted (the log "
                                            f"rolled back); {repair_advice(storage.uri)}")
                 for e in rollback_evidence(storage, state)]
    referenced = {k for ps in state.partitions.values() for s in ps.segments
                  for k in object_keys(s)}
    newest = max((e.mtime_ms for e in storage.list_after(COMMIT_DIR, _before(state))),
                 default=None)
    # Only objects the log dir can prove are its own (bucket_ownership): never another
    # log dir's, never a foreign file.
    named = {f"{t}-{n}" for t, spec in state.topics.items() for n in range(spec.partitions)}
    for key, listed in owned_objects(storage, named | set(state.partitions)):
        if key in referenced:
            continue
        at = _at_or_beyond_log_end(state, key)
        if at is not None and newest is not None and listed.mtime_ms >= newest:
            base, end = at
            if base > end:
                findings.append(BucketFinding(
                    object_uri(storage, key), f"not referenced, written after the newest "
                    f"commit and starting at offset {base}, beyond the log end {end} of its "
                    f"partition: only a commit that is gone can have placed it there (the "
                    f"newest commits were deleted); {repair_advice(storage.uri)}"))
            else:
                findings.append(BucketFinding(
                    object_uri(storage, key), f"not referenced, written after the newest "
                    f"commit and starting at the log end {end}: a writer killed between its "
                    f"upload and its commit, or the newest commit was deleted (if no writer "
                    f"died, run seglog repair); seglog maintain deletes it", problem=False))
            continue
        findings.append(BucketFinding(
            object_uri(storage, key), "not referenced by the current state (an "
            "uncommitted upload, or removed and waiting for file.delete.delay.ms); "
            "seglog maintain deletes it", problem=False))
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


def _index_findings(storage: Storage, entry: SegmentEntry,
                    headers: tuple[BatchHeader, ...]) -> list[BucketFinding]:
    try:
        index, timeindex = stored_indexes(storage, entry)
    except FileNotFoundError as e:
        return [BucketFinding(str(e), "the commit references it, but it is missing")]
    except SeglogError as e:
        return [BucketFinding(object_uri(storage, entry.key), str(e))]
    batches = SegmentBatches.from_headers(headers)
    offsets = offset_index_entries(index, entry.base_offset)
    out = [BucketFinding(object_uri(storage, entry.key + ".index"), v.message)
           for v in offset_index_violations(offsets, batches)[0]]
    out += [BucketFinding(object_uri(storage, entry.key + ".timeindex"), v.message)
            for v in time_index_violations(time_index_entries(timeindex, entry.base_offset),
                                           offsets, batches)[0]]
    return out
