"""Loading and crash recovery of one partition directory (Kafka's ``LogLoader``).

``LogLoader.load()`` runs these passes, in order (a reader of another process's log loads
nothing: ``log_reader``):

1. **Temporary files.** ``*.deleted`` files are unlinked (their deletion was decided
   before the crash), and so is a producer snapshot's ``<offset>.snapshot.tmp``.
   ``*.cleaned`` files are unlinked (an unfinished compaction); any ``*.swap`` file at or
   above the lowest ``.cleaned`` base offset is unlinked too, since its group never
   finished becoming ``.swap``.
2. **Swap completion.** Each remaining ``.swap`` segment replaces every ordinary segment
   whose base offset lies in ``[swap base, swap next offset)``: those are unlinked, then
   the ``.swap`` suffix is dropped (``Log.replace_segments`` crashed half way).
3. **Segment files.** Index files without a ``.log`` are unlinked (orphans). Every
   ``.log`` is opened; a missing time index is created empty; a missing offset index or
   one failing its sanity check (reads only the index file) gets the segment recovered,
   unless pass 4 recovers it anyway.
4. **Recovery** (without a clean shutdown, or after one when the last segment's tail is
   damaged: bytes after its last whole batch, a time index entry past them, or a recovery
   point or high watermark beyond them): from the segment holding the recovery point on,
   each segment's indexes are reset and its batches walked (size, CRC,
   ``max.message.bytes``, and the offset rules readers apply, ``offset_continuity``)
   while the indexes are rebuilt; at the first batch that fails, or a partial one, the
   segment is cut there and every later segment deleted. Every batch before it is kept.
   The walk keeps the batches with a producer id for pass 6 (``recovered_batches``).
5. **Offsets.** An empty directory gets a segment at the log start offset; the log end
   offset comes from the last segment's tail (past its last index entry); the active
   segment's indexes are preallocated again.
6. **Producer state and transaction indexes.** Producer snapshots past the log end or
   below the first segment are deleted (Kafka's ``truncateAndReload``), and, once the
   state is loaded, every one below the newest that is not at a segment base: the strays
   a crash left between a pause's new snapshot and the unlink of the previous one
   (``log_producers``), or an older seglog's one per pause. The state is
   loaded from the newest valid snapshot and the batches after it are replayed
   (``transactions``); a segment recovered in pass 3 or 4 is replayed from what its
   recovery kept, not read again. The ``.txnindex`` of every segment replayed from its
   base is compared with what the replay computed and rewritten when it differs or is
   missing; the replay starts early enough to cover every recovered segment and every
   segment whose existing ``.txnindex`` fails its checks (the files are few: one per
   segment holding an aborted transaction), and, when the producer snapshots cannot rule
   out a marker in it, the active segment when it has no ``.txnindex``. A missing
   ``.txnindex`` of an older segment is rebuilt on the first read_committed read that
   needs it.

A clean open therefore reads no segment data except the few bytes past the last offset
index entry of the last segment, the newest producer snapshot and the ``.txnindex``
files (and the batches after the newest snapshot, none after a clean close).
Thread-safety: a loader is used once, by one thread.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from ..config.config import LogConfig
from ..errors import CorruptIndexError, CorruptRecordError
from ..index.txn_index import AbortedTxn
from ..storage.file_names import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SNAPSHOT_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    parse_segment_file_name,
)
from ..storage.storage import LOCAL
from ..util.clock import Clock
from ..util.delayed_deletion import DelayedDeleter
from .log_segment import LogSegment
from .offset_continuity import ContinuityCheck, offsets_contiguous
from .producer_state import ProducerStateManager, list_snapshot_offsets, snapshot_file
from .recovered_batches import MAX_ROWS, ProducerBatchCollector, RecoveredBatches
from .transactions import Transactions, may_hold_markers

logger = logging.getLogger(__name__)


def list_segment_bases(dir_: Path) -> list[int]:
    """Base offsets of the ``.log`` files (no temporary suffix) in ``dir_``, sorted."""
    bases = []
    try:
        names = LOCAL.list_names(dir_)
    except FileNotFoundError:
        return []
    for name in names:
        parsed = parse_segment_file_name(name)
        if parsed is not None and parsed[1] == LOG_SUFFIX and not parsed[2]:
            bases.append(parsed[0])
    return sorted(bases)


def is_interrupted_snapshot(name: str) -> bool:
    """``<offset>.snapshot.tmp``: what a crash inside ``write_atomic`` of a producer
    snapshot leaves (the snapshot itself is absent or whole)."""
    stem, dot_tmp = name[:-4], name[-4:]
    parsed = parse_segment_file_name(stem) if dot_tmp == ".tmp" else None
    return parsed is not None and parsed[1] == SNAPSHOT_SUFFIX and not parsed[2]


@dataclass(frozen=True, slots=True)
class LoadedLog:
    """What a load produced: open segments (sorted) and the offsets."""

    segments: list[LogSegment]
    log_start_offset: int
    recovery_point: int
    log_end_offset: int
    producer_state: ProducerStateManager | None = None  # writer only
    producer_snapshot: int | None = None  # the newest snapshot left (writer only)


class LogLoader:
    """Loads one partition directory; see the module docstring for the passes."""

    def __init__(self, dir_: Path, config: LogConfig, *, clock: Clock, recovery_point: int = 0,
                 log_start_offset: int = 0, had_clean_shutdown: bool = True,
                 deleter: DelayedDeleter | None = None,
                 high_watermark: int | None = None) -> None:
        self.dir = Path(dir_)
        self.config = config
        self.clock = clock
        self.recovery_point = recovery_point
        self.high_watermark = high_watermark
        self.log_start_offset = log_start_offset
        self.had_clean_shutdown = had_clean_shutdown
        self.deleter = deleter if deleter is not None else DelayedDeleter(clock)
        # base offset -> what recovering the segment kept for producer state (pass 6)
        self._recovered: dict[int, RecoveredBatches] = {}
        self._rows_left = MAX_ROWS  # of the memory bound in recovered_batches
        self._contiguous_known: bool | None = None

    def _recover_segment(self, seg: LogSegment, next_base: int | None) -> int:
        """``seg.recover`` under the offset rules readers apply (``next_base``: the next
        segment's base offset, None for the last), keeping its producer batches for
        pass 6; returns bytes cut."""
        earlier = self._recovered.pop(seg.base_offset, None)
        if earlier is not None:
            self._rows_left += len(earlier.rows)
        collector = ProducerBatchCollector(seg.log_path, self._rows_left)
        continuity = ContinuityCheck(self.dir.name, contiguous=self._contiguous(),
                                     expected=seg.base_offset)
        continuity.enter(seg.log_path, seg.base_offset, next_base)
        truncated = seg.recover(self.config.max_message_bytes, producers=collector,
                                continuity=continuity)
        kept = collector.result()
        if kept is None:
            logger.info("recovery of %s kept too many producer batches; producer state "
                        "reads the segment again", seg.log_path)
        else:
            self._recovered[seg.base_offset] = kept
            self._rows_left -= len(kept.rows)
        return truncated

    def _contiguous(self) -> bool:
        """Whether recovery holds the batches to rule 3 of ``offset_continuity``
        (contiguous offsets): the readers' rule (``offset_policy``), so only in a log
        whose cleanup policy seglog knows; a Kafka broker's dir carries none, and cutting
        at a compacted log's gaps would delete good batches."""
        if self._contiguous_known is None:
            self._contiguous_known = offsets_contiguous(self.dir, compact=self.config.compact)
        return self._contiguous_known

    def _open_segment(self, base: int, suffix: str = "", *, lazy: bool = False) -> LogSegment:
        cfg = self.config
        return LogSegment.open(self.dir, base, index_interval_bytes=cfg.index_interval_bytes,
                               max_index_size=cfg.segment_index_bytes,
                               created_ms=self.clock.milliseconds(), file_suffix=suffix,
                               lazy=lazy)

    def load(self) -> LoadedLog:
        if not LOCAL.is_dir(self.dir):
            LOCAL.makedirs(self.dir)
        swaps = self._remove_temp_files_and_collect_swaps()
        self._complete_swaps(swaps)
        segments, needs_recovery, txn_bases = self._load_segment_files()
        try:
            return self._load_segments(segments, needs_recovery, txn_bases)
        except BaseException:
            # A load that fails hands over no log to close: it leaves no file open.
            for seg in segments:
                seg.close_handlers()
            self.deleter.release_handles(self.dir)
            raise

    def _load_segments(self, segments: list[LogSegment], needs_recovery: list[LogSegment],
                       txn_bases: set[int]) -> LoadedLog:
        """Passes 3 to 6 over the segments ``_load_segment_files`` opened."""
        if self.had_clean_shutdown and segments and segments[-1] not in needs_recovery:
            damage = self._tail_damage(segments[-1])
            if damage is not None:
                # A clean shutdown marker vouches for what the writer left, not for what
                # happened to the files since: appending after a damaged tail would bury
                # it under acknowledged records. Recover as after a crash.
                logger.warning("%s: %s; recovering the partition before any append",
                               segments[-1].log_path, damage)
                self.had_clean_shutdown = False
        # Pass 4 walks every segment from the one holding the recovery point: a segment
        # it will recover is not recovered here too (a crashed writer's active segment
        # has an untrimmed index that fails its check), so its bytes are read once.
        unclean_from = None if self.had_clean_shutdown else self._recovery_start(segments)
        needs_recovery = [s for s in needs_recovery
                          if unclean_from is None or s.base_offset < unclean_from]
        recovered = {s.base_offset for s in needs_recovery}
        next_bases = {s.base_offset: n.base_offset
                      for s, n in zip(segments, segments[1:], strict=False)}
        for seg in needs_recovery:
            logger.warning("rebuilding the indexes of %s", seg.log_path)
            self._recover_segment(seg, next_bases.get(seg.base_offset))
            if seg is not segments[-1]:
                seg.on_become_inactive()
        if not self.had_clean_shutdown:
            segments, replayed = self._recover(segments)
            recovered |= replayed
        if not segments:
            base = max(self.log_start_offset, 0)
            segments = [self._open_segment(base)]
        active = segments[-1]
        active.resize_indexes(self.config.segment_index_bytes)
        active.rolling_jitter_ms = self.config.random_segment_jitter()
        leo = active.read_next_offset()
        lso = max(self.log_start_offset, segments[0].base_offset)
        lso = min(lso, leo)
        recovery_point = leo if self.had_clean_shutdown else min(self.recovery_point, leo)
        first_base = segments[0].base_offset
        snaps = []
        for snap in list_snapshot_offsets(self.dir):
            if snap > leo or snap < first_base:
                self._unlink(snapshot_file(self.dir, snap), "a producer snapshot outside "
                             f"the log [{first_base}, {leo}]")
            else:
                snaps.append(snap)
        state = self._load_producer_state(segments, leo, bool(snaps), recovered, txn_bases)
        newest = self._delete_stray_snapshots(snaps, {s.base_offset for s in segments})
        return LoadedLog(segments, lso, max(recovery_point, 0), leo, state, newest)

    # -- pass 6: producer state and transaction indexes -----------------------------------

    def _delete_stray_snapshots(self, snaps: list[int], bases: set[int]) -> int | None:
        """Delete the snapshots (sorted, inside the log) below the newest and not at a
        segment base; returns the newest. After the state is loaded: a newest that failed
        its check was passed over for an older one, which still served."""
        if not snaps:
            return None
        strays = [snap for snap in snaps[:-1] if snap not in bases]
        for snap in strays:
            LOCAL.delete(snapshot_file(self.dir, snap))
        if strays:
            # One line, not one per file: an older seglog left one per pause.
            logger.info("%s: deleted %d stray producer snapshots (offsets %d to %d)",
                        self.dir, len(strays), strays[0], strays[-1])
        return snaps[-1]

    def _load_producer_state(self, segments: list[LogSegment], leo: int, has_snapshots: bool,
                             recovered: set[int], txn_bases: set[int]) -> ProducerStateManager:
        first_base = segments[0].base_offset
        bases = tuple(s.base_offset for s in segments)
        txns = Transactions(lambda: self.dir, lambda: (bases, segments.__getitem__),
                            lambda: first_base, read_only=False)
        rebuild = set(recovered)
        for seg in segments:
            if seg.base_offset in txn_bases:
                try:
                    seg.txn_index.sanity_check()
                except CorruptIndexError as e:
                    logger.warning("%s; rebuilding it from the log", e)
                    rebuild.add(seg.base_offset)
        active = segments[-1]
        if (has_snapshots and active.base_offset not in txn_bases and active.size
                and may_hold_markers(self.dir, active.base_offset, leo)):
            rebuild.add(active.base_offset)
        if not rebuild and not has_snapshots and self.had_clean_shutdown:
            # Kafka's rule for a cleanly closed log without snapshots (written before
            # producer state was kept): no transaction is open, nothing to replay. The
            # next roll or close writes a snapshot.
            return ProducerStateManager(leo)

        def verify(i: int, entries: list[AbortedTxn]) -> None:
            seg = segments[i]
            txn = seg.txn_index
            try:
                if txn.entries() == entries:
                    return
            except CorruptIndexError:
                logger.debug("rewriting the damaged %s", txn.path)
            if entries or txn.has_file():
                logger.warning("rebuilding the transaction index %s (%d entries)", txn.path,
                               len(entries))
                txn.write_all(entries)

        # What recovery kept of the segments still in the log (a truncation in pass 4
        # deletes the segments after it): those are not read again.
        kept = {s.base_offset: self._recovered[s.base_offset] for s in segments
                if s.base_offset in self._recovered}
        if rebuild:
            state = txns.state_at(min(rebuild), on_segment=verify, recovered=kept)
            return txns.advance(state, leo, on_segment=verify, recovered=kept)
        return txns.state_at(leo, on_segment=verify, recovered=kept)

    # -- pass 1: temporary files ----------------------------------------------------------

    def _unlink(self, path: Path, why: str) -> None:
        logger.info("deleting %s (%s)", path, why)
        try:
            LOCAL.unlink(path)
        except FileNotFoundError:
            logger.debug("%s was already gone", path)

    def _remove_temp_files_and_collect_swaps(self) -> dict[int, list[Path]]:
        swaps: dict[int, list[Path]] = {}
        min_cleaned: int | None = None
        for name in sorted(LOCAL.list_names(self.dir)):
            parsed = parse_segment_file_name(name)
            if parsed is None:
                if is_interrupted_snapshot(name):
                    # One per crash inside a snapshot's write (a pause per micro-batch
                    # makes that likely): never read, so it would only pile up.
                    self._unlink(self.dir / name, "an interrupted producer snapshot")
                continue
            base, _ext, tmp = parsed
            if not tmp:
                continue
            path = self.dir / name
            if tmp == DELETED_SUFFIX:
                self._unlink(path, "deleted before a restart")
            elif tmp == CLEANED_SUFFIX:
                min_cleaned = base if min_cleaned is None else min(min_cleaned, base)
                self._unlink(path, "an unfinished compaction")
            elif tmp == SWAP_SUFFIX:
                swaps.setdefault(base, []).append(path)
        if min_cleaned is not None:
            for base in [b for b in swaps if b >= min_cleaned]:
                for path in swaps.pop(base):
                    self._unlink(path, "a swap group that never finished")
        return swaps

    # -- pass 2: swap completion ----------------------------------------------------------

    def _complete_swaps(self, swaps: dict[int, list[Path]]) -> None:
        for base in sorted(swaps):
            if not LOCAL.exists(self.dir / f"{base:020d}{LOG_SUFFIX}{SWAP_SUFFIX}"):
                for path in swaps[base]:
                    self._unlink(path, "a swap index without its .log.swap")
                continue
            seg = self._open_segment(base, SWAP_SUFFIX)
            next_offset = seg.read_next_offset()
            for name in LOCAL.list_names(self.dir):
                parsed = parse_segment_file_name(name)
                if parsed is None or parsed[2]:
                    continue
                if base <= parsed[0] < max(next_offset, base + 1):
                    self._unlink(self.dir / name, f"replaced by swap segment {base}")
            seg.change_file_suffixes(SWAP_SUFFIX, "")
            seg.close()
            logger.info("completed the swap of segment %d in %s", base, self.dir)

    # -- pass 3: segment files ------------------------------------------------------------

    def _load_segment_files(self) -> tuple[list[LogSegment], list[LogSegment], set[int]]:
        # One listing answers every "does this file exist" question, and the length
        # checks use plain string paths: a clean open costs a few microseconds per
        # segment, so a commit that loads a long partition stays cheap.
        names = LOCAL.list_names(self.dir)
        parsed = [(name, parse_segment_file_name(name)) for name in names]
        logs = {p[0] for _n, p in parsed if p is not None and p[1] == LOG_SUFFIX and not p[2]}
        indexes: set[tuple[int, str]] = set()
        for name, p in parsed:
            if p is None or p[2] or p[1] not in (INDEX_SUFFIX, TIME_INDEX_SUFFIX,
                                                 TXN_INDEX_SUFFIX):
                continue
            if p[0] in logs:
                indexes.add((p[0], p[1]))
            else:
                self._unlink(self.dir / name, "an index without its .log")
        segments: list[LogSegment] = []
        needs_recovery: list[LogSegment] = []
        bases = sorted(logs)
        for i, base in enumerate(bases):
            missing_index = (base, INDEX_SUFFIX) not in indexes
            missing_time_index = (base, TIME_INDEX_SUFFIX) not in indexes
            seg = self._open_segment(base, lazy=i < len(bases) - 1)
            segments.append(seg)
            if missing_time_index:
                logger.info("creating a missing time index for segment %d of %s",
                            base, self.dir)
                seg.time_index.trim_to_valid_size()  # opening creates it; empty
            if missing_index:
                logger.warning("segment %d of %s has no offset index", base, self.dir)
                needs_recovery.append(seg)
                continue
            # Only the active segment's indexes are checked now (Kafka's LazyIndex does
            # the same): an inactive segment's index is opened on first use, and a
            # truncated one then holds only its whole entries, a valid prefix.
            if i < len(bases) - 1:
                continue
            try:
                seg.sanity_check()
            except CorruptIndexError as e:
                logger.warning("%s", e)
                needs_recovery.append(seg)
        txn_bases = {b for b, ext in indexes if ext == TXN_INDEX_SUFFIX}
        return segments, needs_recovery, txn_bases

    # -- pass 3b: the tail a clean shutdown left -------------------------------------------

    def _tail_damage(self, active: LogSegment) -> str | None:
        """Why the last segment's tail cannot be what a clean shutdown left, or None:
        bytes after its last whole batch (a partial batch or garbage), a time index entry
        past its batches, or a recovery point or high watermark beyond them. Reads only
        the tail past the last offset index entry, as the log end offset needs anyway."""
        end = active.index_position(2**62)
        next_offset = active.base_offset
        try:
            for h in active.iter_batches(end):
                end, next_offset = h.end_position, h.next_offset
        except CorruptRecordError as e:
            return str(e)
        if end < active.size:
            return (f"{active.size - end} bytes after the last whole batch (position {end}, "
                    f"offset {next_offset}) are not a whole record batch")
        last_time = active.time_index.last_entry()
        if last_time is not None and last_time.offset >= next_offset:
            return (f"its time index {active.time_index.path} has an entry for offset "
                    f"{last_time.offset}, beyond the log end offset {next_offset}")
        for name, value in (("recovery point", self.recovery_point),
                            ("high watermark", self.high_watermark)):
            if value is not None and value > next_offset:
                return (f"the checkpointed {name} {value} is beyond the log end offset "
                        f"{next_offset} (the file was cut short)")
        return None

    # -- pass 4: recovery -----------------------------------------------------------------

    def _recovery_start(self, segments: list[LogSegment]) -> int:
        """Base offset of the first segment pass 4 recovers: the one holding the
        recovery point (the first segment when none does)."""
        start = segments[0].base_offset if segments else 0
        for seg in segments:
            if seg.base_offset <= self.recovery_point:
                start = seg.base_offset
        return start

    def _recover(self, segments: list[LogSegment]) -> tuple[list[LogSegment], set[int]]:
        """Pass 4; returns the segments kept and the base offsets of those replayed."""
        replayed: set[int] = set()
        first = self._recovery_start(segments)
        start = next((i for i, s in enumerate(segments) if s.base_offset == first), 0)
        for i in range(start, len(segments)):
            seg = segments[i]
            replayed.add(seg.base_offset)
            truncated = self._recover_segment(
                seg, segments[i + 1].base_offset if i + 1 < len(segments) else None)
            if truncated:
                later = segments[i + 1:]
                for doomed in later:
                    logger.warning("deleting segment %s after the truncation in recovery",
                                   doomed.log_path)
                    doomed.change_file_suffixes("", DELETED_SUFFIX)
                    self.deleter.schedule(doomed.paths(), self.config.file_delete_delay_ms,
                                          before_delete=doomed.close_handlers)
                segments = segments[:i + 1]
                break
            if i < len(segments) - 1:
                seg.on_become_inactive()
        return segments, replayed
