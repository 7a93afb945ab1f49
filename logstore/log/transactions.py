"""Transactions of one partition: producer state, aborted transactions, the last stable
offset (LSO), and the read_committed filter. Used by ``Log`` and ``LogLoader``.

**Producer state at an offset** comes from the newest valid producer snapshot at or below
it (Kafka and seglog's writer leave one at every segment base, written at roll, and one at
the log end on a clean close), then a scan of the batches from there
(``producer_batches``: the numba header walk ``record_format_kernels.header_table``;
Python runs only for batches that carry a producer id). With no snapshot the scan starts
at the log start. A snapshot that fails its checks is skipped (logged), never read as
"no producers".

**Aborted transactions of a segment** come from its ``.txnindex`` when the file exists and
passes its checks. A segment without one normally has no aborted transaction (Kafka
creates the file with the first entry), but a lost file looks the same, so the entries
are computed from the log unless the producer snapshots prove the segment cannot hold an
abort marker: the snapshot at its base shows no ongoing transaction, and the snapshot at
the next base shows no producer that wrote into the segment and ever had a transaction
(an ongoing one or a coordinator epoch from a marker). Idempotent producers without
transactions (seglog's sink) therefore cost nothing. Computed entries are cached per
``Log``; a writer ``Log`` also writes them to the missing file (inactive segments only:
the active segment's file is the appender's).

**The LSO** is ``min(high watermark, first offset of the earliest ongoing transaction)``.
The writer keeps the state in memory; a read-only reader (another process) computes it
from the newest snapshot at or below the high watermark plus a scan of the batches from
there to the high watermark: at most the active segment when the writer left snapshots,
the whole log when none exists. The state reached is cached per ``Log`` and extended by
the next call, so a reader that asks again scans only what was appended since.

Thread-safety: ``_cache_lock`` guards the caches; the writer's state is changed only by
the writer thread under the ``Log``'s lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np

from ..errors import CorruptIndexError, CorruptRecordError
from ..index.txn_index import AbortedTxn, collect_aborted
from ..records.control_records import ControlRecord
from ..records.record_format import (
    H_BASE_OFFSET,
    H_MAGIC,
    H_PRODUCER_ID,
    HEADER_COLUMNS,
    INT64_MAX,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_V2,
    REASONS,
    WALK_FULL,
    WALK_INVALID,
    BatchHeader,
    Bytes,
    iter_batch_headers,
)
from .log_segment import LogSegment
from .producer_state import (
    CompletedTxn,
    CorruptSnapshotError,
    ProducerStateManager,
    list_snapshot_offsets,
    read_control_marker,
    read_snapshot,
    snapshot_file,
)
from .recovered_batches import RecoveredBatches

logger = logging.getLogger(__name__)

READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"
ISOLATION_LEVELS = (READ_UNCOMMITTED, READ_COMMITTED)

_CHUNK = 16 << 20
_ROWS = 4096
SMALL_SCAN = 1 << 20
"""Spans up to this many bytes are scanned for producer batches in Python, not numba."""


def check_isolation_level(value: str) -> str:
    from ..errors import ConfigError

    if value not in ISOLATION_LEVELS:
        raise ConfigError(f"unknown isolation level {value!r}: expected "
                          f"{' or '.join(ISOLATION_LEVELS)}")
    return value


# ---------------------------------------------------------------------------- scanning

def producer_batches(seg: LogSegment, start_position: int = 0,
                     end_offset: int = INT64_MAX) -> Iterator[tuple[BatchHeader, Bytes]]:
    """(header, buffer holding it) of every batch with a producer id in ``seg`` from
    ``start_position``, below ``end_offset``; positions in the header are in the buffer.

    A span of at most ``SMALL_SCAN`` bytes (the tail after a snapshot, a short log) is
    walked in Python: loading numba for it would cost a short-lived process (a Spark
    commit opening its log) ~0.3 s, a hundred times the walk."""
    if seg.size - start_position <= SMALL_SCAN:
        yield from _producer_batches_small(seg, start_position, end_offset)
        return
    # numba: imported only where a kernel runs (see above)
    from ..records.record_format_kernels import header_table

    chunk = np.empty(_CHUNK, np.uint8)
    rows = np.empty((_ROWS, HEADER_COLUMNS), np.int64)
    pos = start_position
    size = seg.size
    while pos < size:
        n = seg.readinto(chunk.data, pos)
        if n <= 0:
            return
        p = 0
        while True:
            count, p_next, status, reason = header_table(chunk, p, n, rows, INT64_MAX, False,
                                                         0, 0, False)
            found = rows[:count]
            found = found[(found[:, H_MAGIC] == MAGIC_V2) & (found[:, H_PRODUCER_ID] >= 0)]
            for r in found.tolist():
                if r[H_BASE_OFFSET] >= end_offset:
                    return
                yield BatchHeader.from_row(r), chunk.data
            if status == WALK_INVALID:
                raise CorruptRecordError(f"{seg.log_path}: {REASONS[reason]} at position "
                                         f"{pos + p_next}")
            p = p_next
            if status != WALK_FULL:
                break
        if p == 0:
            if n < len(chunk):
                return  # a partial batch at the end of the file
            need = int.from_bytes(chunk[LENGTH_OFFSET:LENGTH_OFFSET + 4].tobytes(), "big",
                                  signed=True) + LOG_OVERHEAD
            chunk = np.empty(max(need, 2 * len(chunk)), np.uint8)
            continue
        pos += p
        if n < len(chunk) and pos >= size:
            return


def _producer_batches_small(seg: LogSegment, start_position: int,
                            end_offset: int) -> Iterator[tuple[BatchHeader, Bytes]]:
    buf = seg.pread(start_position, max(seg.size - start_position, 0))
    try:
        for h in iter_batch_headers(buf):
            if h.magic != 2 or h.producer_id < 0:
                continue
            if h.base_offset >= end_offset:
                return
            yield h, buf
    except CorruptRecordError as e:
        raise CorruptRecordError(f"{seg.log_path} (from position {start_position}): {e}"
                                 ) from None


def apply_batch(state: ProducerStateManager, h: BatchHeader,
                buf: Bytes) -> AbortedTxn | None:
    """Apply one batch as Kafka's recovery does (the batch is one append); returns the
    ``.txnindex`` entry when it aborts a transaction."""
    return _apply(state, h, read_control_marker(buf, h) if h.is_control else None)


def _apply(state: ProducerStateManager, h: BatchHeader,
           marker: ControlRecord | None) -> AbortedTxn | None:
    completed = state.append_batch(h, marker)
    if completed is None:
        return None
    entry = None
    if completed.is_aborted:
        entry = AbortedTxn(completed.producer_id, completed.first_offset,
                           completed.last_offset, state.last_stable_offset(completed))
    state.complete_txn(completed)
    return entry


def scan_segment(seg: LogSegment, state: ProducerStateManager, *, start_position: int = 0,
                 end_offset: int = 2**63 - 1) -> list[AbortedTxn]:
    """Advance ``state`` over ``seg`` (from ``start_position``, below ``end_offset``);
    returns the aborted transactions whose markers it passed."""
    aborted = []
    for h, buf in producer_batches(seg, start_position, end_offset):
        entry = apply_batch(state, h, buf)
        if entry is not None:
            aborted.append(entry)
    state.map_end_offset = max(state.map_end_offset,
                               min(end_offset, seg.read_next_offset()))
    return aborted


def replay_recovered(state: ProducerStateManager, batches: RecoveredBatches
                     ) -> list[AbortedTxn]:
    """``scan_segment`` of a whole segment from what its recovery kept (no read)."""
    aborted = []
    for row in batches.rows.tolist():
        h = BatchHeader.from_row(row)
        entry = _apply(state, h, batches.marker(h) if h.is_control else None)
        if entry is not None:
            aborted.append(entry)
    state.map_end_offset = max(state.map_end_offset, batches.next_offset)
    return aborted


def append_completions(state: ProducerStateManager, headers: Sequence[BatchHeader],
                       buf: Bytes, segment: LogSegment) -> None:
    """``Log.append``'s step: apply the appended batches, append abort entries to the
    active segment's ``.txnindex``."""
    for h in headers:
        if h.producer_id < 0 or h.magic != 2:
            state.map_end_offset = h.last_offset + 1
            continue
        marker = read_control_marker(buf, h) if h.is_control else None
        completed = state.append_batch(h, marker)
        if completed is not None:
            _complete(state, completed, segment)


def _complete(state: ProducerStateManager, completed: CompletedTxn, segment: LogSegment) -> None:
    if completed.is_aborted:
        segment.txn_index.append(AbortedTxn(completed.producer_id, completed.first_offset,
                                            completed.last_offset,
                                            state.last_stable_offset(completed)))
    state.complete_txn(completed)


# ---------------------------------------------------------------------------- snapshots

def load_snapshot(dir_: Path, offset: int) -> ProducerStateManager | None:
    """The snapshot at exactly ``offset``, or None (absent or damaged: logged)."""
    try:
        return read_snapshot(snapshot_file(dir_, offset), offset)
    except CorruptSnapshotError as e:
        if isinstance(e.__cause__, FileNotFoundError):
            return None
        logger.warning("ignoring a damaged producer snapshot: %s", e)
        return None


def may_hold_markers(dir_: Path, base: int, next_base: int) -> bool:
    """False only when the snapshots at ``base`` and ``next_base`` prove the segment
    ``[base, next_base)`` holds no transaction marker (see the module docstring)."""
    before = load_snapshot(dir_, base)
    if before is None or before.first_unstable_offset() is not None:
        return True
    after = load_snapshot(dir_, next_base)
    if after is None:
        return True
    return any(e.last_offset >= base and (e.coordinator_epoch >= 0
                                          or e.current_txn_first_offset >= 0)
               for e in after.producers.values())


# ---------------------------------------------------------------------------- per Log

SegmentView = tuple[tuple[int, ...], Callable[[int], LogSegment]]


class Transactions:
    """Aborted transactions and the LSO of one partition (see the module docstring).

    ``view`` returns the current (base offsets, i -> segment); ``log_start`` the log
    start offset. A writer passes ``writer_state``, the state it maintains."""

    def __init__(self, dir_: Callable[[], Path], view: Callable[[], SegmentView],
                 log_start: Callable[[], int], *, read_only: bool) -> None:
        self._dir = dir_
        self._view = view
        self._log_start = log_start
        self.read_only = read_only
        self._cache_lock = threading.Lock()  # guards _entries and _tail
        # (base, inode or object name, size) -> entries computed for a segment without a usable file
        self._entries: dict[tuple[int, int | str, int], list[AbortedTxn]] = {}
        # read-only LSO: the state reached by the last scan (None: not yet)
        self._tail: ProducerStateManager | None = None

    # -- state at an offset ---------------------------------------------------------------

    def state_at(self, offset: int, *,
                 on_segment: Callable[[int, list[AbortedTxn]], None] | None = None,
                 recovered: Mapping[int, RecoveredBatches] | None = None
                 ) -> ProducerStateManager:
        """Producer state of the batches below ``offset`` (a batch boundary); see
        ``advance`` for ``on_segment`` and ``recovered``."""
        dir_ = self._dir()
        bases, get = self._view()
        state = None
        for snap in reversed(list_snapshot_offsets(dir_)):
            if snap <= offset and (not bases or snap >= bases[0]):
                state = load_snapshot(dir_, snap)
                if state is not None:
                    break
        if state is None:
            start = bases[0] if bases else offset
            state = ProducerStateManager(max(start, 0))
        return self.advance(state, offset, on_segment=on_segment, recovered=recovered)

    def advance(self, state: ProducerStateManager, offset: int, *,
                on_segment: Callable[[int, list[AbortedTxn]], None] | None = None,
                recovered: Mapping[int, RecoveredBatches] | None = None
                ) -> ProducerStateManager:
        """Scan ``state`` forward from its map end offset to ``offset``. ``on_segment(i,
        entries)`` hears of every segment scanned from its base to its end. A segment
        applied whole whose base is in ``recovered`` (what the loader's recovery kept of
        it) is not read."""
        bases, get = self._view()
        import bisect

        i = max(bisect.bisect_right(bases, state.map_end_offset) - 1, 0)
        while i < len(bases) and state.map_end_offset < offset:
            seg = get(i)
            start = 0
            whole = state.map_end_offset <= bases[i]
            if not whole:
                h = seg.translate_offset(state.map_end_offset)
                if h is None:
                    i += 1
                    continue
                start = h.position
            kept = recovered.get(bases[i]) if recovered and whole else None
            if kept is not None and kept.next_offset <= offset:
                entries = replay_recovered(state, kept)
            else:
                entries = scan_segment(seg, state, start_position=start, end_offset=offset)
            if whole and on_segment is not None:
                on_segment(i, entries)
            i += 1
        state.map_end_offset = max(state.map_end_offset, offset)
        return state

    # -- aborted transactions -------------------------------------------------------------

    def segment_entries(self, i: int) -> list[AbortedTxn]:
        """The aborted transactions whose markers lie in segment ``i`` of the view."""
        bases, get = self._view()
        seg = get(i)
        txn = seg.txn_index
        try:
            if txn.has_file():
                return txn.entries()
        except CorruptIndexError as e:
            logger.warning("%s; computing its entries from the log instead", e)
        else:
            active = i == len(bases) - 1
            if active and not self.read_only:
                return []  # the appender keeps the active segment's file complete
            nxt = bases[i + 1] if not active else None
            if nxt is not None and not may_hold_markers(self._dir(), bases[i], nxt):
                return []
        return self._computed(i, bases, seg)

    def _computed(self, i: int, bases: tuple[int, ...], seg: LogSegment) -> list[AbortedTxn]:
        identity = seg.file_identity()
        key = None if identity is None else (bases[i], *identity)
        with self._cache_lock:
            if key is not None and key in self._entries:
                return self._entries[key]
        state = self.state_at(bases[i])
        entries = scan_segment(seg, state)
        active = i == len(bases) - 1
        if not self.read_only and not active:
            logger.warning("rebuilding the transaction index %s from the log (%d entries)",
                           seg.txn_index.path, len(entries))
            seg.txn_index.write_all(entries)
        if key is not None and not active:
            with self._cache_lock:
                self._entries[key] = entries
        return entries

    def aborted_txns(self, start: int, upper: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping ``[start, upper)`` (Kafka's
        ``collectAbortedTransactions``, plus a stop once no transaction that began below
        ``upper`` can still be open, proven by the next segment's snapshot)."""
        import bisect

        bases, _get = self._view()
        out: list[AbortedTxn] = []
        i = max(bisect.bisect_right(bases, start) - 1, 0)
        dir_ = self._dir()
        while i < len(bases):
            found = collect_aborted(self.segment_entries(i), start, upper)
            out.extend(found.aborted)
            if found.complete or i + 1 >= len(bases):
                break
            nxt = bases[i + 1]
            if nxt >= upper:
                snap = load_snapshot(dir_, nxt)
                if snap is not None and all(f >= upper for f, _p in snap.ongoing_txns()):
                    break
            i += 1
        return out

    # -- last stable offset ---------------------------------------------------------------

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """Read-only: the first offset of the earliest transaction open at the high
        watermark (see the module docstring for the cost)."""
        with self._cache_lock:
            tail = self._tail
        bases, _get = self._view()
        if (tail is None or tail.map_end_offset > high_watermark
                or (bases and tail.map_end_offset < bases[0])):
            state = self.state_at(high_watermark)
        else:
            state = self.advance(tail.copy(), high_watermark)
        with self._cache_lock:
            self._tail = state
        return state.first_unstable_offset()


def committed_chunks(chunks: Iterator[memoryview], aborted: Sequence[AbortedTxn]
                     ) -> Iterator[memoryview]:
    """The read_committed step over a stream of chunks (see ``drop_aborted_batches``)."""
    for chunk in chunks:
        kept = drop_aborted_batches(chunk, aborted)
        if len(kept):
            yield kept


def drop_aborted_batches(chunk: Bytes, aborted: Sequence[AbortedTxn]) -> memoryview:
    """The read_committed step of the read path: ``chunk`` (whole batches) without the
    data batches of ``aborted`` transactions. Returns ``chunk`` itself when nothing goes."""
    if not aborted:
        return memoryview(chunk)
    from ..records.record_format_kernels import header_table
    from . import txn_scan  # numba, imported here: see producer_batches

    ordered = sorted(aborted, key=lambda a: (a.producer_id, a.first_offset))
    pids = np.array([a.producer_id for a in ordered], np.int64)
    firsts = np.array([a.first_offset for a in ordered], np.int64)
    lasts = np.array([a.last_offset for a in ordered], np.int64)
    buf = np.frombuffer(chunk, np.uint8)
    out = np.empty(len(buf), np.uint8)
    rows = np.empty((_ROWS, HEADER_COLUMNS), np.int64)
    p = n = 0
    while True:
        count, p, status, reason = header_table(buf, p, len(buf), rows, INT64_MAX, False, 0, 0,
                                                False)
        n = txn_scan.drop_aborted(buf, rows, count, pids, firsts, lasts, out, n)
        if status != WALK_FULL:
            break
    if status == WALK_INVALID or p != len(buf):
        why = REASONS[reason] if status == WALK_INVALID else "a partial batch"
        raise CorruptRecordError(f"{why} at position {p} of a chunk of whole batches")
    if n == len(buf):
        return memoryview(chunk)
    return out.data[:n]
