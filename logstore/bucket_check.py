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

from dataclasses import dataclass

from .bucket_objects import object_uri, read_segment, stored_indexes
from .bucket_ownership import owned_objects
from .bucket_segment import object_keys
from .bucket_state import BucketState, SegmentEntry
from .config import LogConfig
from .errors import SeglogError
from .index_check import (
    SegmentBatches,
    offset_index_entries,
    offset_index_violations,
    time_index_entries,
    time_index_violations,
)
from .record_format import BatchHeader
from .storage import Storage


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


def check_bucket(storage: Storage, state: BucketState, config_of: dict[str, LogConfig]
                 ) -> tuple[list[BucketFinding], list[PartitionReport]]:
    """Every finding, and a summary per partition; ``config_of``: each topic's config."""
    findings: list[BucketFinding] = []
    reports = []
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
            if contiguous:
                for h in seg.headers:
                    if expected is not None and h.base_offset != expected:
                        findings.append(BucketFinding(
                            where, f"batch at position {h.position} starts at offset "
                                   f"{h.base_offset}, expected {expected} (offsets of a "
                                   f"topic that is not compacted are contiguous)"))
                    expected = h.next_offset
            findings += _index_findings(storage, entry, seg.headers)
        problems = len(findings) - before
        reports.append(PartitionReport(object_uri(storage, key), len(ps.segments), batches,
                                       ps.high_watermark, problems, 0))
    referenced = {k for ps in state.partitions.values() for s in ps.segments
                  for k in object_keys(s)}
    named = {f"{t}-{n}" for t, spec in state.topics.items() for n in range(spec.partitions)}
    for key, _entry in owned_objects(storage, named | set(state.partitions)):
        if key not in referenced:
            findings.append(BucketFinding(
                object_uri(storage, key), "not referenced by the current state (an "
                "uncommitted upload, or removed and waiting for file.delete.delay.ms); "
                "seglog maintain deletes it", problem=False))
    return findings, reports


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
