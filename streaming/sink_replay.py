"""Does a log already hold a sink's micro-batch? Asked of the data, with the ledger as a hint.

Every batch the sink writes carries its ``producerId`` and the micro-batch id
(``sink_staging.producer_fields``), and a sink's micro-batch ids only grow, so the
*newest batch of the sink* below a partition's high watermark says which of its
micro-batches the partition holds: ``newest_sink_batch`` finds it by reading batch
headers only (no record is decoded).

Cost (headers only; ``LogSegment.iter_batches`` reads 64 KiB chunks and never the body
of a batch larger than a chunk):

* with a ledger entry that the data confirms (the batch at the entry's last offset is
  the sink's and the entry's micro-batch): one offset-index lookup and a short forward
  scan there, plus the headers of the batches other writers appended after it up to the
  high watermark (none when the sink is the partition's only writer);
* otherwise (no ledger, a damaged one, an entry the data contradicts, or one left above
  the high watermark by a crash before the checkpoint): the partition's segments newest
  first, each from its start to the high watermark, stopping at the first segment that
  holds a batch of the sink. A partition the sink never wrote to is walked entirely,
  once: the commit then records it in the ledger.

The decision per log dir (``dir_holds``): the dir holds micro-batch ``B`` iff one of the
partitions the replay publishes to holds a batch of the sink with an id ``>= B``. The
high-watermark checkpoint makes a micro-batch visible in a log dir all at once, so one
partition is witness enough for all of the dir (this also covers a replay whose rows land
in other partitions than the first attempt's, and a partition whose copy retention has
removed). Retention removes a prefix of a log, so a surviving older batch of the sink
proves the newer one was never there; the one case the data cannot settle is a partition
holding nothing of the sink whose start was removed, with no ledger entry: it counts as
not holding the batch (logged when the ledger was damaged).

Truncation (``check_unpublished_tail``): a commit removes what lies above the high
watermark only if every batch there is either the sink's own attempt at a micro-batch
``>= B`` (the only thing a crashed commit of this sink can have left there), or a batch of
another sink ``P``, micro-batch ``B'``, that ``P``'s commit intent in the same log dir
(``sink_intent``) shows to be part of ``P``'s unfinished commit of exactly ``B'``, at
exactly those offsets (what a batch job or query whose commit died leaves for the next
writer). Anything else (another writer's batches without such proof, an older
micro-batch of the sink, a batch straddling the high watermark) may be published data
under a high watermark that went backwards: the commit stops with ``SinkCommitError``
before changing anything.
"""

from __future__ import annotations

import bisect
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import SinkCommitError
from .sink_intent import DirIntents, intent_dir, read_intents
from .sink_ledger import LedgerEntry
from .sink_staging import batch_id_of

if TYPE_CHECKING:
    from seglog.logstore.log.log import Log
    from seglog.logstore.log.log_reader import LogReader
    from seglog.logstore.log.log_segment import LogSegment
    from seglog.logstore.records.record_format import BatchHeader

logger = logging.getLogger(__name__)

__all__ = ["SinkWitness", "UnpublishedTail", "newest_sink_batch", "dir_holds",
           "check_unpublished_tail"]


@dataclass(frozen=True, slots=True)
class SinkWitness:
    """What a partition's visible data says about a sink.

    ``batch_id`` is the sink's newest micro-batch there (None: none found), at offsets
    ``[start, end)``; ``source`` is ``"ledger"`` (an entry the data confirmed, extended by
    a forward scan), ``"scan"`` (found walking the segments), ``"removed"`` (retention
    removed it: only the ledger remembers it) or ``"none"``. ``batches_read`` counts the
    headers read."""

    topic: str
    partition: int
    batch_id: int | None
    start: int
    end: int
    source: str
    batches_read: int

    @property
    def unknown_past(self) -> bool:
        """Nothing of the sink found, but the log's start was removed (for ``"none"``,
        ``start`` is the log start offset): the sink's batches may have been there."""
        return self.batch_id is None and self.start > 0

    def entry(self) -> LedgerEntry | None:
        if self.batch_id is None:
            return None
        return LedgerEntry(self.batch_id, self.start, self.end)


def _ours(h: BatchHeader, pid: int) -> bool:
    return h.magic == 2 and h.producer_id == pid and not h.is_control


def _batch_of(h: BatchHeader) -> int:
    return batch_id_of(h.producer_epoch, h.base_sequence)


def _segment_index(segments: tuple[LogSegment, ...], offset: int) -> int:
    """Index of the segment that would hold ``offset`` (the last with base <= offset)."""
    bases = [s.base_offset for s in segments]
    return max(bisect.bisect_right(bases, offset) - 1, 0)


class _Run:
    """The newest run of one micro-batch of the sink seen so far in a forward walk."""

    __slots__ = ("batch_id", "start", "end")

    def __init__(self) -> None:
        self.batch_id: int | None = None
        self.start = self.end = 0

    def see(self, h: BatchHeader) -> None:
        b = _batch_of(h)
        if b != self.batch_id:
            self.batch_id, self.start = b, h.base_offset
        self.end = h.next_offset


def _walk(seg: LogSegment, position: int, hw: int, pid: int, run: _Run) -> tuple[int, bool]:
    """Headers of ``seg`` from ``position`` while wholly below ``hw``, feeding the sink's
    into ``run``. Returns (headers read, whether ``hw`` was reached)."""
    n = 0
    for h in seg.iter_batches(position):
        if h.next_offset > hw:
            return n, True
        n += 1
        if _ours(h, pid):
            run.see(h)
    return n, False


def _forward_from(segments: tuple[LogSegment, ...], offset: int, hw: int,
                  pid: int, run: _Run) -> int:
    """Walk from the batch holding ``offset`` to ``hw`` across segments; headers read."""
    read = 0
    if offset >= hw:
        return 0
    i = _segment_index(segments, offset)
    first = segments[i].translate_offset(offset)
    position = first.position if first is not None else segments[i].size
    for seg in segments[i:]:
        n, done = _walk(seg, position, hw, pid, run)
        read += n
        if done:
            break
        position = 0
    return read


def newest_sink_batch(log: Log | LogReader, pid: int, hint: LedgerEntry | None) -> SinkWitness:
    """The sink's newest batch below ``log``'s high watermark (see the module docstring).

    ``hint`` is the ledger's entry for the partition, if the ledger is valid."""
    hw, lso = log.high_watermark, log.log_start_offset
    segments = tuple(s for s in log.segments if s.base_offset < hw)
    tp = (log.topic, log.partition)
    read = 0
    removed: LedgerEntry | None = None
    if hint is not None and hint.end <= hw and segments:
        last = hint.end - 1
        if last < lso:
            removed = hint  # the ledger is the only trace: retention removes visible data only
        else:
            seg = segments[_segment_index(segments, last)]
            h = seg.translate_offset(last)
            read += 1
            if (h is not None and h.last_offset == last and _ours(h, pid)
                    and _batch_of(h) == hint.batch_id):
                run = _Run()
                run.batch_id, run.start, run.end = hint.batch_id, hint.start, hint.end
                read += _forward_from(segments, hint.end, hw, pid, run)
                return SinkWitness(*tp, run.batch_id, run.start, run.end, "ledger", read)
            logger.warning("%s-%d in %s: the sink ledger says micro-batch %d ends at offset "
                           "%d, but the data there is not that batch of this sink: walking "
                           "the batch headers instead", log.topic, log.partition,
                           log.dir.parent, hint.batch_id, hint.end)
    for seg in reversed(segments):
        run = _Run()
        n, _ = _walk(seg, 0, hw, pid, run)
        read += n
        if run.batch_id is not None:
            return SinkWitness(*tp, run.batch_id, run.start, run.end, "scan", read)
    if removed is not None:
        return SinkWitness(*tp, removed.batch_id, removed.start, removed.end, "removed", read)
    return SinkWitness(*tp, None, lso, lso, "none", read)


def dir_holds(witnesses: list[SinkWitness], batch_id: int) -> SinkWitness | None:
    """The witness proving that a log dir holds micro-batch ``batch_id`` (or a later one),
    given the witnesses of the partitions the replay publishes to in that dir; None if
    it does not."""
    best = None
    for w in witnesses:
        if w.batch_id is not None and w.batch_id >= batch_id and (
                best is None or best.batch_id is None or w.batch_id < best.batch_id):
            best = w
    return best


@dataclass(frozen=True, slots=True)
class UnpublishedTail:
    """What lies above a partition's high watermark, found removable: ``batches`` record
    batches, ``abandoned`` the other sinks' unfinished commits among them, as
    (sink id, micro-batch id) in offset order (empty: only this sink's own attempt)."""

    batches: int = 0
    abandoned: tuple[tuple[str, int], ...] = ()


def check_unpublished_tail(log: Log, pid: int, batch_id: int, sink_id: str,
                           intents: DirIntents | None = None) -> UnpublishedTail:
    """Check what lies above ``log``'s high watermark before the commit truncates it.
    Raises SinkCommitError, changing nothing, unless every batch there is this sink's
    attempt at a micro-batch ``>= batch_id``, or another sink's batch that a commit
    intent in the log's dir (``intents``, read when None) shows to be that sink's
    unfinished commit of exactly that micro-batch, at exactly those offsets."""
    hw, leo = log.high_watermark, log.log_end_offset
    if leo <= hw:
        return UnpublishedTail()
    segments = log.segments
    i = _segment_index(segments, hw)
    first = segments[i].translate_offset(hw)
    position = first.position if first is not None else segments[i].size
    count = 0
    abandoned: list[tuple[str, int]] = []
    for seg in segments[i:]:
        for h in seg.iter_batches(position):
            found = None
            if h.base_offset < hw:
                found = "a batch that straddles the high watermark (published in part)"
            elif h.magic == 2 and not h.is_control and h.producer_id not in (pid, -1):
                if intents is None:
                    intents = read_intents(log.dir.parent)
                owner = _intent_covering(intents, log, h)
                if owner is None:
                    found = _unproven(intents, log, h, pid)
                elif not abandoned or abandoned[-1] != owner:
                    abandoned.append(owner)
            elif not _ours(h, pid):
                found = (f"a batch of producerId {h.producer_id}, not this sink's ({pid})"
                         if h.producer_id >= 0 else "a batch without a producerId")
            elif _batch_of(h) < batch_id:
                found = (f"this sink's micro-batch {_batch_of(h)}, older than {batch_id} "
                         "(the commit of an earlier micro-batch may have published it)")
            if found is not None:
                raise SinkCommitError(
                    f"log dir {log.dir.parent}, partition {log.topic}-{log.partition}: "
                    f"offsets {hw}..{leo - 1} lie above the high watermark {hw} (from "
                    f"replication-offset-checkpoint), and offsets {h.base_offset}.."
                    f"{h.last_offset} hold {found}. The seglog sink (sink {sink_id!r}, "
                    f"micro-batch {batch_id}) removes only its own unpublished attempt or "
                    "another sink's unfinished commit, so it changed nothing: if the high "
                    "watermark went backwards, restore the checkpoint; if these offsets are "
                    "an abandoned write that no reader saw, truncate the partition to the "
                    "high watermark (see docs/sink-state.md)")
            count += 1
        position = 0
    return UnpublishedTail(count, tuple(abandoned))


def _intent_covering(intents: DirIntents, log: Log, h: BatchHeader) -> tuple[str, int] | None:
    for intent in intents.intents:
        if intent.covers(log.topic, log.partition, h.producer_id, _batch_of(h),
                         h.base_offset, h.next_offset):
            return intent.sink_id, intent.batch_id
    return None


def _unproven(intents: DirIntents, log: Log, h: BatchHeader, pid: int) -> str:
    """Why a batch of another producer is not provably an unfinished commit."""
    text = (f"a batch of producerId {h.producer_id}, not this sink's ({pid}), micro-batch "
            f"{_batch_of(h)} if it is a seglog sink's, and no commit intent in "
            f"{intent_dir(log.dir.parent)} shows it to be an unfinished commit")
    same = [i for i in intents.intents if i.producer_id == h.producer_id]
    if same:
        text += (f" (the intent of sink {same[0].sink_id!r} is for micro-batch "
                 f"{same[0].batch_id}, offsets "
                 + ", ".join(f"{r.start}..{r.end - 1}" for r in same[0].ranges
                             if (r.topic, r.partition) == (log.topic, log.partition))
                 + " of this partition)")
    if intents.damaged:
        text += " (damaged intent file(s), which prove nothing: " + ", ".join(
            f"{p} ({why})" for p, why in intents.damaged) + ")"
    return text
