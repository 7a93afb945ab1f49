"""Which compacted logs are cleanable, and how far each was cleaned: Kafka's
``LogCleanerManager``.

The manager decides; ``cleaner.Cleaner`` does one pass. It owns:

* **The cleanable range** (Kafka's ``cleanableOffsets`` and ``LogToClean``).
  ``first_dirty`` is the log's entry in the log dir's ``cleaner-offset-checkpoint``,
  clamped to the log start, and reset to it when beyond the log end. The uncleanable
  bound is the lowest of: the active segment's base (never touched), the first segment
  not wholly below the high watermark, and the first dirty segment whose largest
  timestamp is younger than ``min.compaction.lag.ms``.
  ``dirty_ratio = dirty bytes / (clean + dirty bytes)``; a log whose first dirty
  segment is older than ``max.compaction.lag.ms`` must be cleaned now.
* **The choice** (``grabFilthiestCompactedLog``): the highest dirty ratio at or above
  the log's ``min.cleanable.dirty.ratio`` (or any log past ``max.compaction.lag.ms``);
  else a log holding tombstones whose delete horizon passed (Kafka 3's
  ``latestDeleteHorizon``: known only from this process's own passes); else none.
* **The checkpoint** (``allCleanerCheckpoints``, ``updateCheckpoints``): one
  ``cleaner-offset-checkpoint`` per log dir, read once and cached; ``done_cleaning``
  writes a pass's end offset, ``forget`` drops a deleted partition's entry.
* **Uncleanable partitions** (``markPartitionUncleanable``): a log whose pass failed is
  skipped until this manager is recreated.

Crash policy: the checkpoint is written (temp file, fsync, rename) only after a pass's
segments were swapped in, so a crash re-cleans at most one pass's range, which is safe
(cleaning is idempotent). A damaged checkpoint file is evidence, not a value: it is
reported with a warning naming the file and read as "no partition cleaned yet", so
every compacted partition of that dir is cleaned from its log start (never a number
made up from the damage); the next pass rewrites the file. Pending delete horizons and
uncleanable marks live in memory only.

Thread-safety: not thread-safe. One ``LogCleaner`` owns one manager and is used by one
thread at a time (the ``LogManager`` calls it under its maintenance lock).

>>> manager = LogCleanerManager(SYSTEM_CLOCK)  # doctest: +SKIP
>>> picked = manager.grab_filthiest(logs)     # (log, CleanableRange) or None  # doctest: +SKIP
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from ..errors import CorruptCheckpointError, KafkaStorageError
from ..records.record_format import LONG_MAX
from ..storage.checkpoint_file import OffsetCheckpointFile
from ..storage.file_names import CLEANER_OFFSET_CHECKPOINT
from ..util.clock import SYSTEM_CLOCK, Clock
from .cleanable_log import CleanableLog, cleanable_segments

logger = logging.getLogger(__name__)

__all__ = ["CleanableRange", "LogCleanerManager"]

L = TypeVar("L", bound=CleanableLog)


@dataclass(frozen=True, slots=True)
class CleanableRange:
    """Where a log's dirty section lies and how dirty it is (Kafka's ``LogToClean``)."""

    topic: str
    partition: int
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    dirty_bytes: int
    needs_compaction_now: bool  # max.compaction.lag.ms passed for the first dirty record

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


@dataclass(slots=True)
class _LogState:
    """What the manager remembers of one log between passes (in memory)."""

    pending_horizon: int | None = None  # earliest delete horizon of kept tombstones
    failed: str | None = None  # set after an error: the log is not cleaned again


class LogCleanerManager:
    """Cleanable ranges, the choice of log, checkpoints and uncleanable partitions; see
    the module docstring. ``clock`` gives the time for compaction lags and delete
    horizons. Not thread-safe."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self.clock = clock
        self._checkpoints: dict[Path, dict[tuple[str, int], int]] = {}  # by log dir
        self._states: dict[tuple[Path, str, int], _LogState] = {}

    # -- checkpoints ----------------------------------------------------------------------

    @staticmethod
    def _checkpoint_file(log_dir: Path) -> OffsetCheckpointFile:
        return OffsetCheckpointFile(log_dir / CLEANER_OFFSET_CHECKPOINT)

    def checkpoints(self, log_dir: Path) -> dict[tuple[str, int], int]:
        """The ``cleaner-offset-checkpoint`` of ``log_dir`` (cached after the first read).
        A damaged file reads as empty, with a warning naming it: every partition is then
        cleaned from its log start, which is safe (cleaning is idempotent) and only costs
        time; the next pass rewrites the file."""
        log_dir = Path(log_dir)
        cp = self._checkpoints.get(log_dir)
        if cp is None:
            f = self._checkpoint_file(log_dir)
            try:
                cp = f.read()
            except (CorruptCheckpointError, KafkaStorageError) as e:
                logger.warning("%s; cleaning every compacted partition of %s from its log "
                               "start offset (re-cleaning is safe)", e, log_dir)
                cp = {}
            self._checkpoints[log_dir] = cp
        return cp

    def reload_checkpoints(self, log_dir: Path | str) -> None:
        """Forget the cached checkpoint of ``log_dir`` (it was rewritten by someone else)."""
        self._checkpoints.pop(Path(log_dir), None)

    def _update_checkpoint(self, log_dir: Path, tp: tuple[str, int],
                           offset: int | None) -> None:
        cp = dict(self.checkpoints(log_dir))
        if offset is None:
            if cp.pop(tp, None) is None:
                return
        else:
            cp[tp] = offset
        self._checkpoint_file(log_dir).write(cp)
        self._checkpoints[log_dir] = cp

    def done_cleaning(self, log: CleanableLog, end_offset: int,
                      pending_horizon: int | None) -> None:
        """A pass over ``log`` swapped in everything below ``end_offset``: checkpoint it,
        and remember the earliest delete horizon of the tombstones it kept."""
        self._update_checkpoint(log.dir.parent, (log.topic, log.partition), end_offset)
        self._state(log).pending_horizon = pending_horizon

    def forget(self, log_dir: Path | str, topic: str, partition: int) -> None:
        """Drop a partition's checkpoint entry and state (its log was deleted or fully
        truncated): the next log of that name starts dirty from its start."""
        log_dir = Path(log_dir)
        self._states.pop((log_dir, topic, partition), None)
        self._update_checkpoint(log_dir, (topic, partition), None)

    # -- per-log state --------------------------------------------------------------------

    def _state(self, log: CleanableLog) -> _LogState:
        key = (log.dir.parent, log.topic, log.partition)
        st = self._states.get(key)
        if st is None:
            st = self._states[key] = _LogState()
        return st

    def mark_uncleanable(self, log: CleanableLog, reason: str) -> None:
        """Skip ``log`` from now on (a pass over it failed); Kafka's
        ``markPartitionUncleanable``."""
        self._state(log).failed = reason

    # -- what to clean --------------------------------------------------------------------

    def cleanable_range(self, log: CleanableLog) -> CleanableRange:
        """The log's clean and dirty sections now (see the module docstring)."""
        cfg = log.config
        inactive, uncleaned = cleanable_segments(log)
        now = self.clock.milliseconds()
        lso, leo = log.log_start_offset, log.log_end_offset
        checkpoint = self.checkpoints(log.dir.parent).get((log.topic, log.partition), lso)
        if checkpoint > leo:
            logger.warning("cleaner checkpoint %d of %s-%d is past its log end %d; cleaning "
                           "from the log start %d", checkpoint, log.topic, log.partition,
                           leo, lso)
            checkpoint = lso
        first_dirty = max(checkpoint, lso)

        def next_base(i: int) -> int:
            return inactive[i + 1].base_offset if i + 1 < len(inactive) else uncleaned

        bound = uncleaned  # the active segment is never cleaned
        for i, seg in enumerate(inactive):
            if next_base(i) > log.high_watermark:  # readers cannot see all of it yet
                bound = min(bound, seg.base_offset)
                break
        lag = cfg.min_compaction_lag_ms
        if lag > 0:
            for i, seg in enumerate(inactive):
                if next_base(i) <= first_dirty:
                    continue
                if seg.base_offset >= bound:
                    break
                if seg.largest_timestamp > now - lag:
                    bound = min(bound, seg.base_offset)
                    break
        bound = max(bound, first_dirty)
        clean = dirty = 0
        needs_now = False
        for i, seg in enumerate(inactive):
            if next_base(i) <= first_dirty:
                clean += seg.size
            elif seg.base_offset < bound:
                if dirty == 0 and cfg.max_compaction_lag_ms < LONG_MAX:
                    first_ts = seg.rolling_based_timestamp()
                    if first_ts is not None and 0 <= first_ts < now - cfg.max_compaction_lag_ms:
                        needs_now = True
                dirty += seg.size
        return CleanableRange(log.topic, log.partition, first_dirty, bound, clean, dirty,
                              needs_now)

    def _horizon_due(self, log: CleanableLog, now: int) -> bool:
        # Known only from this manager's own passes, as Kafka's latestDeleteHorizon: a
        # fresh process does not scan logs for it (that would read every segment at each
        # start); their tombstones go at the next pass the dirty ratio or lag triggers.
        pending = self._state(log).pending_horizon
        return pending is not None and pending <= now

    def grab_filthiest(self, logs: Iterable[L]) -> tuple[L, CleanableRange] | None:
        """The compacted log to clean next: the highest dirty ratio at or above its
        ``min.cleanable.dirty.ratio`` (or any past ``max.compaction.lag.ms``); else one
        whose tombstones' delete horizon passed; else None. Read-only, non-compacted and
        uncleanable logs are skipped."""
        best = None
        horizon_due = None
        now = self.clock.milliseconds()
        for log in logs:
            if log.read_only or not log.config.compact:
                continue
            if self._state(log).failed:
                continue
            r = self.cleanable_range(log)
            if r.dirty_bytes > 0 and (r.needs_compaction_now or r.dirty_ratio
                                      >= log.config.min_cleanable_dirty_ratio):
                if best is None or r.dirty_ratio > best[1].dirty_ratio:
                    best = (log, r)
            elif best is None and horizon_due is None and self._horizon_due(log, now):
                horizon_due = (log, r)
        return best or horizon_due
