"""The deep check of one local partition directory, written once: ``scan_partition``
reads every segment and yields typed ``Finding``s. ``LogManager.check(deep=True)``
(``log_check``, which cuts the log at the first finding that needs a cut when fixing) and
``seglog check`` (which only formats them) both consume it, so both report the same
findings for the same files.

What is read, per segment in offset order:

* every batch by Kafka's rules (``record_format.verify_all``: header, size, CRC, offsets
  within 2^31 of the base) and by the offset rules readers apply
  (``offset_continuity.ContinuityCheck``), up to the high watermark when it is known;
* the ``.txnindex`` (layout, and every entry naming an abort marker of its producer in
  the segment);
* both indexes by the lookup rule (``index_check``), and bytes after an index's last
  whole entry (a torn write).

Where the two checks written before disagreed, the rule decided here:

1. **Every bad batch is reported** (the CLI's rule): after a bad batch the walk resyncs
   past it, so one run lists all the damage. ``check(fix=True)`` still cuts the log
   before the first one (``Finding.truncate_at``), as crash recovery would.
2. **A partial batch** (bytes after a segment's last whole batch) is judged as Kafka's
   recovery judges it. At the end of a segment that is no longer written it is
   corruption (problem). At the end of the last segment it is what an append in
   progress or an unclean shutdown leaves, and a writer's recovery cuts it (Kafka's
   ``LogSegment.recover``): a note, unless the whole batches end below the high
   watermark (the file was cut short: problem) or the log dir holds a clean-shutdown
   marker (a clean close leaves no partial batch, and Kafka's loader would trust the
   file and append after the junk: problem).
3. **Indexes and ``.txnindex``** (the CLI's rules, now also the library's): every
   misleading entry is listed (the first 10, then a count), torn index bytes and a
   damaged or wrong ``.txnindex`` are problems, a missing index is a note (loading
   rebuilds it). The time index is checked with lookups through the offset index, but
   not blamed for a misleading offset index: then it is checked as readers use it,
   scanning from the segment start (the library skipped it; the CLI blamed it, or said
   "not checked" for an unsorted offset index).

Thread-safety: none; one scan belongs to one caller. The files are read, never changed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import CorruptIndexError, CorruptRecordError, MissingDataError, SeglogError
from ..index.index_check import (
    IndexEntries,
    SegmentBatches,
    Violation,
    offset_index_violations,
    read_offset_index,
    read_time_index,
    time_index_violations,
)
from ..index.txn_index import TransactionIndex
from ..records.record_format import BatchHeader, verify_all
from ..storage.checkpoint_file import OffsetCheckpointFile
from ..storage.file_names import (
    CLEAN_SHUTDOWN_FILE,
    HIGH_WATERMARK_CHECKPOINT,
    index_file,
    log_file,
    parse_partition_dir_name,
    time_index_file,
    txn_index_file,
)
from ..storage.storage import LOCAL
from .log_loader import list_segment_bases
from .offset_continuity import ContinuityCheck, OffsetPolicy, offset_policy

# Finding kinds (``log_check.Problem.kind`` carries them unchanged)
BAD_BATCH = "bad-batch"
MISSING_DATA = "missing-data"
PARTIAL_TAIL = "partial-tail"
BAD_INDEX_ENTRY = "bad-index-entry"
MISSING_INDEX = "missing-index"
BAD_TXN_INDEX = "bad-txn-index"
OFFSET_GAPS = "offset-gaps"

VIOLATIONS_LISTED = 10  # per index file; then "... and N more entries like these"


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing the scan found in ``file`` (a segment's file, or the partition dir).

    ``message`` says what is wrong (``seglog check --json``'s message); ``text`` is the
    same naming the file (``seglog check``'s line, ``log_check.Problem.message``).
    ``position``/``offset``: where in the segment, when known. ``truncate_at``: the
    offset ``check(fix=True)`` cuts the log at (None: a cut does not help). A ``note``
    is worth knowing but not wrong."""

    kind: str
    file: Path
    message: str
    text: str
    position: int | None = None
    offset: int | None = None
    truncate_at: int | None = None
    note: bool = False


@dataclass(slots=True)
class ScanTotals:
    """What a finished scan counted (``seglog check``'s summary line)."""

    segments: int = 0
    batches: int = 0
    log_end_offset: int = 0


def published_high_watermark(dir_: Path) -> int | None:
    """The partition's entry in its log dir's ``replication-offset-checkpoint``, if
    readable (a damaged one is reported by the log dir's own check): what readers were
    told they may read, so the batches must reach it."""
    parsed = parse_partition_dir_name(dir_.name)
    path = dir_.parent / HIGH_WATERMARK_CHECKPOINT
    if parsed is None or not LOCAL.exists(path):
        return None
    try:
        return OffsetCheckpointFile(path).read().get(parsed)
    except SeglogError:
        return None


def _finding(
    kind: str,
    file: Path,
    message: str,
    *,
    names_file: bool = False,
    position: int | None = None,
    offset: int | None = None,
    truncate_at: int | None = None,
    note: bool = False,
) -> Finding:
    text = message if names_file else f"{file}: {message}"
    return Finding(kind, file, message, text, position, offset, truncate_at, note)


def _cut_finding(
    kind: str,
    file: Path,
    message: str,
    position: int,
    check: ContinuityCheck,
    *,
    names_file: bool = False,
) -> Finding:
    """A finding about the batch at ``position`` of ``file`` that ``check --fix`` cuts
    the log before: at the offset the walk expected next."""
    return _finding(
        kind,
        file,
        message,
        names_file=names_file,
        position=position,
        offset=check.expected,
        truncate_at=check.expected,
    )


def scan_partition(
    dir_: Path,
    *,
    high_watermark: int | None = None,
    policy: OffsetPolicy | None = None,
    totals: ScanTotals | None = None,
    progress: Callable[[int], object] | None = None,
) -> Iterator[Finding]:
    """Every finding of the partition in ``dir_``, in log order (see the module
    docstring). ``high_watermark``: the offset the batches must reach (None: unknown,
    not checked); ``policy``: rule 3 of ``offset_continuity`` (None: read from the
    dir); ``totals`` is filled as the scan goes; ``progress`` is told each batch's
    bytes."""
    totals = totals if totals is not None else ScanTotals()
    bases = list_segment_bases(dir_)
    totals.segments = len(bases)
    policy = policy if policy is not None else offset_policy(dir_)
    check = ContinuityCheck(
        dir_.name,
        contiguous=policy is OffsetPolicy.CONTIGUOUS,
        expected=bases[0] if bases else 0,
        note_gaps=policy is OffsetPolicy.UNKNOWN,
    )
    tail: Finding | None = None  # the last segment's partial batch
    for i, base in enumerate(bases):
        path = log_file(dir_, base)
        next_base = bases[i + 1] if i + 1 < len(bases) else None
        try:
            check.enter(path, base, next_base)
        except MissingDataError as e:
            yield _finding(MISSING_DATA, path, str(e), names_file=True, offset=e.start)
            check.expected = e.end  # nothing to cut: check on from there
            check.enter(path, base, next_base)
        headers: list[BatchHeader] = []
        for f in _scan_batches(path, base, next_base, check, headers, progress):
            if f.kind == PARTIAL_TAIL:
                tail = f
            else:
                yield f
        totals.batches += len(headers)
        markers = {(h.base_offset, h.producer_id) for h in headers if h.is_control}
        yield from _txn_index_findings(dir_, base, markers)
        yield from _index_findings(dir_, base, SegmentBatches.from_headers(headers))
    totals.log_end_offset = max(check.expected, bases[-1] if bases else 0)
    yield from _end_findings(dir_, check, tail, high_watermark if bases else None)


def _scan_batches(
    path: Path,
    base: int,
    next_base: int | None,
    check: ContinuityCheck,
    headers: list[BatchHeader],
    progress: Callable[[int], object] | None,
) -> Iterator[Finding]:
    """The batch findings of one segment; its readable headers are appended to
    ``headers`` (the index and ``.txnindex`` rules read them). A partial batch at the end
    of the last segment comes back as a ``PARTIAL_TAIL`` finding: the end of the scan
    decides what it is."""
    with LOCAL.open_file(path, "read") as f:
        size = f.size
        if not size:
            return
        buf = f.map(size, writable=False)
    position = 0  # where the next batch starts
    try:
        for v in verify_all(buf, segment_base=base):  # offsets: the continuity rules
            h = v.header
            if v.partial:
                if next_base is None:
                    check.segment_end(position, size)  # finish() names it below the HW
                    yield _cut_finding(PARTIAL_TAIL, path, v.reason, position, check)
                else:
                    yield _cut_finding(
                        BAD_BATCH,
                        path,
                        f"{v.reason}, in a segment that is no "
                        "longer written (only the last segment may end in an "
                        "append in progress)",
                        position,
                        check,
                    )
                return
            if not v.valid:
                yield _cut_finding(BAD_BATCH, path, v.reason, position, check)
            if h is None:
                return  # an unreadable header: nothing to go on from
            if progress is not None:
                progress(h.size)
            headers.append(h)
            try:
                check.batch(h)
            except CorruptRecordError as e:
                yield _cut_finding(BAD_BATCH, path, str(e), h.position, check, names_file=True)
                check.resync(h)
            position = h.end_position
    finally:
        buf.close()


def _end_findings(
    dir_: Path, check: ContinuityCheck, tail: Finding | None, high_watermark: int | None
) -> Iterator[Finding]:
    """What the end of the walk shows: offsets missing below the high watermark, the
    last segment's partial batch (rule 2 of the module docstring), the gaps read."""
    cut_short = False
    if high_watermark is not None:
        try:
            check.finish(high_watermark, high_watermark)
        except MissingDataError as e:
            yield _finding(MISSING_DATA, dir_, str(e), names_file=True, offset=e.start)
        except CorruptRecordError as e:
            cut_short = True
            yield _finding(
                BAD_BATCH,
                dir_,
                str(e),
                names_file=True,
                offset=check.expected,
                truncate_at=check.expected,
            )
    if tail is not None and not cut_short:
        if LOCAL.lexists(dir_.parent / CLEAN_SHUTDOWN_FILE):
            yield _finding(
                BAD_BATCH,
                tail.file,
                f"{tail.message}; the log dir was shut down "
                "cleanly, which leaves no partial batch (a writer's open cuts it)",
                position=tail.position,
                offset=tail.offset,
                truncate_at=tail.truncate_at,
            )
        else:
            yield _finding(
                PARTIAL_TAIL,
                tail.file,
                f"{tail.message}: an append in progress "
                "or an unclean shutdown leaves this; a writer's recovery cuts it, "
                "as Kafka's does",
                position=tail.position,
                offset=tail.offset,
                note=True,
            )
    gaps = check.gap_note()
    if gaps is not None:
        yield _finding(OFFSET_GAPS, dir_, gaps, note=True)


def _txn_index_findings(dir_: Path, base: int, markers: set[tuple[int, int]]) -> Iterator[Finding]:
    """A segment's ``.txnindex`` against its control batches ``(offset, producer id)``
    (absent is fine: no aborted transaction, or lost, which readers and the writer's
    loader handle). One finding at most: the first wrong entry."""
    path = txn_index_file(dir_, base)
    if not LOCAL.exists(path):
        return
    try:
        entries = TransactionIndex(path, base, writable=False).entries()
    except CorruptIndexError as e:
        yield _finding(
            BAD_TXN_INDEX, path, f"{e} (the writer's recovery rebuilds it)", names_file=True
        )
        return
    for entry in entries:
        if (entry.last_offset, entry.producer_id) not in markers:
            yield _finding(
                BAD_TXN_INDEX,
                path,
                f"entry for producer {entry.producer_id} "
                f"names offset {entry.last_offset}, which holds no control batch "
                "of that producer",
                offset=entry.last_offset,
            )
            return


def _index_findings(dir_: Path, base: int, batches: SegmentBatches) -> Iterator[Finding]:
    """Both indexes of a segment by the lookup rule (a missing one is a note)."""
    for path, name in (
        (index_file(dir_, base), "offset index"),
        (time_index_file(dir_, base), "time index"),
    ):
        if not LOCAL.exists(path):
            yield _finding(
                MISSING_INDEX,
                path,
                f"no {name}; loading rebuilds it, as Kafka's "
                "loader does (lookups meanwhile scan the segment)",
                note=True,
            )
            continue
        problems = (
            offset_index_problems(path, base, batches)
            if name == "offset index"
            else time_index_problems(path, base, batches)
        )
        for message in problems:
            yield _finding(BAD_INDEX_ENTRY, path, message)


def offset_index_problems(path: Path, base: int, batches: SegmentBatches) -> list[str]:
    """``offset_index_messages`` of the ``.index`` file ``path`` (also ``seglog
    dump-log``'s)."""
    return offset_index_messages(read_offset_index(path, base), batches)


def time_index_problems(path: Path, base: int, batches: SegmentBatches) -> list[str]:
    """``time_index_messages`` of the ``.timeindex`` file ``path``, with lookups through
    the ``.index`` beside it (also ``seglog dump-log``'s)."""
    offsets = index_file(path.parent, base)
    offset_entries = read_offset_index(offsets, base) if LOCAL.exists(offsets) else None
    return time_index_messages(read_time_index(path, base), offset_entries, batches)


def offset_index_messages(entries: IndexEntries, batches: SegmentBatches) -> list[str]:
    """Why entries of an offset index would mislead a lookup (``index_check``'s rule),
    and its torn bytes: the first ``VIOLATIONS_LISTED``, then a count (a local file's or
    a bucket's index object)."""
    return _torn(entries) + _violation_messages(
        *offset_index_violations(entries, batches, limit=VIOLATIONS_LISTED)
    )


def time_index_messages(
    entries: IndexEntries, offset_entries: IndexEntries | None, batches: SegmentBatches
) -> list[str]:
    """Why entries of a time index would mislead a lookup (``index_check``'s rule) with
    lookups through ``offset_entries`` (None: no offset index), and its torn bytes. An
    offset index that misleads lookups is not held against the time index: a reader
    refuses its entries and scans the segment from its start
    (``index_check.entry_usable_for_lookup``), so the rule is applied as without one."""
    if offset_entries is not None and offset_index_violations(offset_entries, batches, 0)[1]:
        offset_entries = None
    return _torn(entries) + _violation_messages(
        *time_index_violations(entries, offset_entries, batches, limit=VIOLATIONS_LISTED)
    )


def _torn(entries: IndexEntries) -> list[str]:
    return [f"{entries.torn_bytes} bytes after the last whole entry"] if entries.torn_bytes else []


def _violation_messages(found: list[Violation], total: int) -> list[str]:
    messages = [v.message for v in found]
    if total > len(found):
        messages.append(f"... and {total - len(found)} more entries like these")
    return messages
