"""Offset continuity: the rules a partition's batch headers keep, in log order.

Readers (``Log.read``, ``Log.read_chunks``), ``LogManager.check(deep=True)``,
``seglog check`` and crash recovery (``LogSegment.recover``, through ``table``, a header
table at a time) feed every batch header they walk to one ``ContinuityCheck``, so they
all judge a log the same way: recovery cuts at the first batch a reader would refuse,
never before it. Nothing here parses bytes (headers come from ``record_format``).

1. **Increasing.** A batch's base offset is above the previous batch's last offset (a
   legacy compressed wrapper knows only its last offset: that one must be).
2. **Inside its segment.** Every offset of a batch lies in ``[segment base, next
   segment's base)`` and within 2^31 of the base.
3. **Contiguous** (only when the log is known not to be compacted: its seglog topic
   config says ``cleanup.policy`` without ``compact`` and the ``cleaner-offset-checkpoint``
   has no entry for it): each batch starts right after the previous one, a segment's
   first batch starts at the segment's base offset, and a segment starts where the
   previous segment's batches end. Compacted logs (seglog's or Kafka's) legitimately have
   gaps between batches and between segments. A partition directory without a seglog
   topic config (a Kafka broker's: its topic configs live in the cluster's metadata) has
   an unknown policy: its gaps are read as compaction's, as Kafka's reader reads them, and
   ``check`` notes them (``OffsetPolicy.UNKNOWN``, ``ContinuityCheck.gap_note``).
4. **Reaching the end.** The batches (or, in a compacted log, a later segment's base)
   reach the end of the range asked for, which is never above the high watermark.
5. **Whole.** Only the last segment may end in a partial batch (an append in progress),
   and only above the range asked for.

A broken rule 1, 2 or 5, or rule 3 inside one segment, is corruption
(``CorruptRecordError``: the bytes are wrong, e.g. a bit flip in a base offset, which the
CRC does not cover). A contiguous log whose segment ends before the next segment's base,
or whose batches end below the high watermark, lacks data: ``MissingDataError`` (a
``DataLossError``: a segment file deleted or cut short at a batch boundary); a reader
with ``failOnDataLoss=false`` goes on from its ``end``.

What a compacted log cannot show: a deleted segment, or a base offset flipped to a value
between its neighbours' offsets. ``check(deep=True)`` still compares every offset index
entry with the batch at its position, which catches the flip in an indexed batch.

Thread-safety: none; one check belongs to one walk.
"""

from __future__ import annotations

import enum
import logging
from pathlib import Path, PurePath

import numpy as np

from ..errors import CorruptRecordError, MissingDataError, SeglogError
from ..records.record_format import (
    H_BASE_OFFSET,
    H_LAST_OFFSET,
    H_MAGIC,
    H_RECORDS_COUNT,
    MAGIC_V2,
    BatchHeader,
)
from ..storage.file_names import (
    CLEANER_OFFSET_CHECKPOINT,
    TOPIC_CONFIG_FILE,
    parse_partition_dir_name,
)
from ..storage.storage import LOCAL

logger = logging.getLogger(__name__)

INT32_MAX = 2**31 - 1


class OffsetPolicy(enum.Enum):
    """Whether rule 3 holds for a partition."""

    CONTIGUOUS = "contiguous"  # a seglog topic config says delete, never cleaned
    COMPACTED = "compacted"  # compact policy, or the cleaner checkpoint names it
    UNKNOWN = "unknown"  # no seglog topic config: gaps are read, check notes them


def offset_policy(partition_dir: PurePath, *, compact: bool | None = None) -> OffsetPolicy:
    """Rule 3's status for the partition in ``partition_dir``. ``COMPACTED`` when its
    topic is compacted (``compact``; None reads the topic config file there) or the log
    dir's ``cleaner-offset-checkpoint`` has an entry for it (a cleaner pass ran: a topic
    compacted before its policy changed still has the cleaner's gaps). ``UNKNOWN`` when
    the directory has no seglog topic config: a Kafka broker's dir, whose topic configs
    live in the cluster's metadata (``compact`` is then only the reader's default), so a
    compacted topic there cannot be told from one that is not. An unreadable file counts
    as unknown too: only the gap checks get weaker; nothing is skipped on it."""
    from ..config.config import LogConfig
    from ..config.topics import read_topic_config
    from ..storage.checkpoint_file import OffsetCheckpointFile

    partition_dir = Path(partition_dir)
    tp = parse_partition_dir_name(partition_dir.name)
    try:
        if compact is None:
            compact = LogConfig.from_properties(read_topic_config(partition_dir) or {}).compact
        if compact:
            return OffsetPolicy.COMPACTED
        if tp is not None and tp in OffsetCheckpointFile(
                partition_dir.parent / CLEANER_OFFSET_CHECKPOINT).read():
            return OffsetPolicy.COMPACTED
        if tp is None or not LOCAL.lexists(partition_dir / TOPIC_CONFIG_FILE):
            return OffsetPolicy.UNKNOWN
        return OffsetPolicy.CONTIGUOUS
    except SeglogError as e:
        logger.warning("%s; checking %s as a possibly compacted log", e, partition_dir)
        return OffsetPolicy.UNKNOWN


def offsets_contiguous(partition_dir: PurePath, *, compact: bool | None = None) -> bool:
    """Whether rule 3 applies to the partition in ``partition_dir`` (``offset_policy``)."""
    return offset_policy(partition_dir, compact=compact) is OffsetPolicy.CONTIGUOUS


class ContinuityCheck:
    """Checks batch headers of one partition in log order; see the module docstring.

    ``expected`` is the next offset the log must hold: before the first batch, the offset
    the walk starts from (the first batch may begin below it and must reach it).

    >>> check = ContinuityCheck("t-0", contiguous=True, expected=0)   # doctest: +SKIP
    >>> check.enter(path, base=0, next_base=None); check.batch(header)  # doctest: +SKIP
    >>> check.finish(end=hw)                                           # doctest: +SKIP
    """

    __slots__ = ("tp", "contiguous", "expected", "_first", "_path", "_base", "_next_base",
                 "_prev_path", "_tail", "_note_gaps", "gaps", "_first_gap")

    def __init__(self, tp: str, *, contiguous: bool, expected: int,
                 note_gaps: bool = False) -> None:
        self.tp = tp
        self.contiguous = contiguous
        self.expected = expected
        # check of a log whose policy is unknown: its gaps are read, and counted so that
        # check can say so (one note per partition, not one per gap)
        self._note_gaps = note_gaps and not contiguous
        self.gaps = 0
        self._first_gap = ""
        self._first = True  # no batch seen yet
        self._path: PurePath | None = None
        self._base = 0
        self._next_base: int | None = None
        self._prev_path: PurePath | None = None
        self._tail: tuple[int, int] | None = None  # (position, bytes) of a partial batch

    @property
    def started(self) -> bool:
        """True once a batch was checked."""
        return not self._first

    def enter(self, path: PurePath, base: int, next_base: int | None) -> None:
        """Start on the segment ``path`` (base offset ``base``; ``next_base`` is the next
        segment's base, None for the last segment)."""
        if self._path is not None:
            self._prev_path = self._path
        if base > self.expected:
            if self.contiguous:
                before = (f"{self._prev_path.name} ends at offset {self.expected}"
                          if self._prev_path is not None and not self._first else
                          f"no segment holds offset {self.expected}")
                raise MissingDataError(
                    f"{self.tp}: offsets [{self.expected}, {base}) are missing: {before} "
                    f"but the next segment {path} starts at {base} (a segment file was "
                    f"deleted or cut short)", self.expected, base)
            # Compacted: the offsets below this segment's base are gone by design.
            self._gap(self.expected, base, f"before {path}")
            self.expected = base
            self._first = False
        self._path, self._base, self._next_base = path, base, next_base
        self._tail = None

    def batch(self, h: BatchHeader, file_position: int = 0) -> None:
        """Check one batch; ``h.position + file_position`` is its position in the
        current segment's file (headers parsed from a buffer read at ``file_position``)."""
        problem = self.problem(h)
        if problem:
            raise self._corrupt(h, file_position, problem)
        known_base = h.magic == 2 or h.records_count >= 0  # a legacy wrapper: last only
        if self._note_gaps and known_base and h.base_offset > self.expected:
            self._gap(self.expected, h.base_offset, f"at position {file_position + h.position} "
                                                    f"of {self._path}")
        self._first = False
        self.expected = h.last_offset + 1

    def problem(self, h: BatchHeader) -> str:
        """The rule the batch ``h`` breaks, as words after "batch at position N of
        FILE", or "" when it keeps them all (the check does not move)."""
        base, last = h.base_offset, h.last_offset
        known_base = h.magic == 2 or h.records_count >= 0  # a legacy wrapper: last only
        expected = self.expected
        if base < self._base:
            return (f"holds offsets {base}..{last}, below its segment's base offset "
                    f"{self._base}")
        if self._next_base is not None and last >= self._next_base:
            return (f"holds offsets {base}..{last}, reaching the next segment's base offset "
                    f"{self._next_base}")
        if last > self._base + INT32_MAX:
            return (f"holds offsets {base}..{last}, more than {INT32_MAX} above its "
                    f"segment's base offset {self._base}")
        if self._first:
            if last < expected:
                return f"ends at offset {last}, below {expected}"
            if self.contiguous and known_base and base > expected:
                return (f"starts at offset {base} but offset {expected} should come first "
                        f"(offsets are contiguous in a log that is not compacted)")
        elif (known_base and base < expected) or last < expected:
            return (f"starts at offset {base}, not above the previous batch's last offset "
                    f"{expected - 1}")
        elif self.contiguous and known_base and base != expected:
            return (f"starts at offset {base}, but the previous batch ends at {expected - 1} "
                    f"(offsets are contiguous in a log that is not compacted)")
        return ""

    def table(self, rows: np.ndarray, count: int, file_position: int = 0) -> tuple[int, str]:
        """``batch`` over ``rows[:count]`` of a header table (``record_format.H_*``
        columns; positions relative to a buffer read at ``file_position``), for a walk
        that reads batches by the thousand (recovery). Returns how many rows, from the
        first, keep the rules, and why the next one does not ("" when all do). A broken
        rule leaves the check after the last row kept.

        The rows that surely keep the rules are accepted in one vectorised step (the
        conditions of ``batch`` after the first batch); the first row that may not, and
        the first batch of a walk, go through ``batch`` itself, which decides."""
        k = 0
        while k < count:
            if not self._first:
                ok = self._surely_kept(rows[k:count])
                if ok:
                    k += ok
                    self.expected = int(rows[k - 1, H_LAST_OFFSET]) + 1
                    if k == count:
                        break
            h = BatchHeader.from_row(rows[k].tolist())
            problem = self.problem(h)
            if problem:
                return k, f"batch at position {file_position + h.position} {problem}"
            self._first = False
            self.expected = h.last_offset + 1
            k += 1
        return count, ""

    def _surely_kept(self, rows: np.ndarray) -> int:
        """How many leading ``rows`` keep ``batch``'s rules for a batch after the first
        (the same conditions, over arrays)."""
        base, last = rows[:, H_BASE_OFFSET], rows[:, H_LAST_OFFSET]
        known_base = (rows[:, H_MAGIC] == MAGIC_V2) | (rows[:, H_RECORDS_COUNT] >= 0)
        upper = self._base + INT32_MAX + 1
        if self._next_base is not None:
            upper = min(upper, self._next_base)
        expected = np.empty_like(last)
        expected[0] = self.expected
        expected[1:] = last[:-1] + 1
        ok = (base >= self._base) & (last < upper) & (last >= expected)
        ok &= ~known_base | (base >= expected)
        if self.contiguous:
            ok &= ~known_base | (base == expected)
        return len(ok) if ok.all() else int(np.argmin(ok))

    def _gap(self, start: int, end: int, where: str) -> None:
        if self._note_gaps:
            self.gaps += 1
            if not self._first_gap:
                self._first_gap = f"[{start}, {end}) {where}"

    def gap_note(self) -> str | None:
        """What a check of a log whose policy is unknown says about the gaps it read
        (None without gaps, or when the policy is known)."""
        if not self.gaps:
            return None
        return (f"{self.tp}: {self.gaps} offset gap(s) between batches (the first: offsets "
                f"{self._first_gap}) read as the gaps compaction leaves: the topic's "
                "cleanup.policy is unknown here (no seglog topic config: a Kafka broker's "
                "dir), as Kafka reads it; with a seglog topic config saying "
                "cleanup.policy=delete they are refused as corruption")

    def segment_end(self, position: int, size: int) -> None:
        """The walk found no whole batch at ``position`` of the current segment's
        ``size``-byte file. A partial batch there is corruption unless it ends the last
        segment (an append in progress: judged by ``finish``)."""
        if position >= size:
            return
        if self._next_base is not None:
            raise CorruptRecordError(
                f"{self.tp}: {self._path} holds {size - position} bytes after its last "
                f"whole batch (position {position}, offset {self.expected}): a partial "
                f"batch in a segment that is no longer written")
        self._tail = (position, size - position)

    def resync(self, h: BatchHeader) -> None:
        """Go on after ``h`` once a problem with it was reported (a checker that lists
        every problem rather than stopping at the first)."""
        self._first = False
        self.expected = h.last_offset + 1

    def finish(self, end: int, high_watermark: int) -> None:
        """The walk ran out of segments; the range asked for ends at ``end`` (at most
        the high watermark): every offset below it must have been covered."""
        if self.expected >= end:
            return
        where = self._path if self._path is not None else "the log"
        if self._tail is not None:
            position, n = self._tail
            raise CorruptRecordError(
                f"{self.tp}: {where} ends in a partial batch of {n} bytes at position "
                f"{position} (offset {self.expected}), below the high watermark "
                f"{high_watermark}: the file was cut short")
        raise MissingDataError(
            f"{self.tp}: offsets [{self.expected}, {end}) are missing: the batches of {where} "
            f"end at offset {self.expected}, below the high watermark {high_watermark} "
            f"(the segment file was cut short)", self.expected, end)

    def _corrupt(self, h: BatchHeader, file_position: int, what: str) -> CorruptRecordError:
        return CorruptRecordError(
            f"{self.tp}: batch at position {file_position + h.position} of {self._path} "
            f"{what}; the log is "
            f"corrupt (`seglog check` reports it; recovery or `check --fix` cuts it)")
