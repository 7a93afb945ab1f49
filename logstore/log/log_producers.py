"""A writer ``Log``'s producer state (Kafka's ``UnifiedLog`` keeping its
``ProducerStateManager``): the state kept up to the log end batch by batch as appends
land, the completed transactions the last stable offset still waits for, and the
partition's ``<offset>.snapshot`` files (taken at a roll, a close and a pause, trimmed
with the segments, reloaded after a truncation).

How many snapshots stay: the one at each segment base (a roll's: what readers'
``may_hold_markers`` and a truncation's reload start from) and the newest. A new snapshot,
once durable, replaces the previous newest unless that one is at a segment base: a
writer that pauses after every micro-batch (the local sink) would otherwise leave one file
per pause inside its active segment. Only an optimisation is lost: the state at an
offset inside a segment is still the base's snapshot plus a replay (``state_at``). A crash
between the write and the unlink, or a power cut that undoes the unlink, leaves the old
one: the loader deletes such strays (``LogLoader``), so no listing is needed here.

``LogProducers`` is a component of ``log.Log``, handed its starting state, the
partition directory (a getter: ``Log.rename_for_deletion`` moves it), the Log's
``Transactions`` (the state at an offset, for a reload), whether an offset is a segment
base, and the newest snapshot the loader left. Thread-safety: the writer calls
the mutating methods under the Log's lock; ``last_stable_offset`` takes none (readers),
so the list it walks is replaced, never changed in place.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..records.record_format import BatchHeader
from ..storage.storage import LOCAL
from .log_segment import LogSegment
from .producer_state import ProducerStateManager, list_snapshot_offsets, snapshot_file
from .transactions import Transactions, append_completions


class LogProducers:
    """The producer state of a writer ``Log``; a component of ``Log``."""

    def __init__(
        self,
        state: ProducerStateManager,
        dir_: Callable[[], Path],
        txns: Transactions,
        is_segment_base: Callable[[int], bool],
        newest_snapshot: int | None = None,
    ) -> None:
        self.state = state
        self._dir = dir_
        self._txns = txns
        self._is_segment_base = is_segment_base
        # The newest snapshot file known to exist (None: none, or not known): the one the
        # next snapshot replaces.
        self._newest_snapshot = newest_snapshot
        # Completed transactions whose markers are not yet below the high watermark
        # (they keep the LSO down, as Kafka's unreplicated transactions).
        self._unstable_completed: list[tuple[int, int]] = []  # (first, marker offset)

    def update(
        self,
        buf: bytearray | memoryview,
        headers: list[BatchHeader],
        segment: LogSegment,
        high_watermark: int,
    ) -> None:
        """Kafka's step after a log append: batches with a producer id update the
        producer state; an abort marker appends its entry to ``segment``'s
        ``.txnindex``. Batch by batch, as Kafka's recovery replays them, so a rebuilt
        index equals the appended one."""
        state = self.state
        if all(h.producer_id < 0 for h in headers):
            state.map_end_offset = headers[-1].last_offset + 1
            return
        before = dict(state.ongoing_txns())
        append_completions(state, headers, buf, segment)
        after = {f for f, _p in state.ongoing_txns()}
        ends = {h.producer_id: h.base_offset for h in headers if h.is_control}
        hw = high_watermark
        # Completed transactions whose markers are not yet below the high watermark
        # (a new list each time: readers iterate it without the lock).
        self._unstable_completed = [(f, m) for f, m in self._unstable_completed if m >= hw] + [
            (first, ends[pid])
            for first, pid in before.items()
            if first not in after and pid in ends
        ]

    def last_stable_offset(self, high_watermark: int, log_start_offset: int) -> int:
        """Kafka's LSO: the high watermark, or the first offset of the earliest
        transaction not yet decided below it, if lower."""
        hw = high_watermark
        # No lock, as every read: a racing append can only make the answer one append
        # old, never past what is stable.
        first = self.state.first_unstable_offset()
        for f, m in self._unstable_completed:
            if m >= hw:
                first = f if first is None else min(first, f)
        if first is None:
            return hw
        return max(min(hw, first), log_start_offset)

    def take_snapshot(self, log_end_offset: int) -> None:
        """Write the producer state at the log end (``<offset>.snapshot``), if newer
        than the newest snapshot (Kafka's ``takeSnapshot``)."""
        state = self.state
        state.map_end_offset = log_end_offset
        # One stat, not a listing (a commit's cost must not grow with the segment
        # count): no snapshot lies past the log end (the loader and truncation delete
        # those), so "none at the log end" is "the newest is older".
        if not LOCAL.exists(snapshot_file(self._dir(), log_end_offset)):
            state.take_snapshot(self._dir())  # fsynced, renamed, directory fsynced
        previous = self._newest_snapshot
        if (
            previous is not None
            and previous < log_end_offset
            and not self._is_segment_base(previous)
        ):
            # Not fsynced: a power cut that brings it back leaves a stray the loader
            # deletes; the new snapshot is durable before the old one goes.
            LOCAL.delete(snapshot_file(self._dir(), previous))
        self._newest_snapshot = log_end_offset

    def delete_snapshots(self, doomed: Callable[[int], bool]) -> None:
        for snap in list_snapshot_offsets(self._dir()):
            if doomed(snap):
                LOCAL.delete(snapshot_file(self._dir(), snap))
        if self._newest_snapshot is not None and doomed(self._newest_snapshot):
            self._newest_snapshot = None

    def reload(self, log_end_offset: int) -> None:
        """After a truncation: drop snapshots past the log end, rebuild the state from
        the newest remaining one (Kafka's ``truncateAndReload``)."""
        leo = log_end_offset
        self.delete_snapshots(lambda o: o > leo)
        self.state = self._txns.state_at(leo)
        self._unstable_completed = [(f, m) for f, m in self._unstable_completed if m < leo]

    def reset(self, offset: int) -> None:
        """An empty log starting at ``offset``: no producer, no transaction."""
        self.state = ProducerStateManager(offset)
        self._unstable_completed = []
        self._newest_snapshot = None
