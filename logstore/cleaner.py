"""Log compaction (``cleanup.policy=compact``): Kafka's ``Cleaner`` (one pass over one
log) and ``LogCleaner`` (the entry point the ``LogManager`` uses, one thread's worth).

Which log to clean, its cleanable range and the ``cleaner-offset-checkpoint`` belong to
``cleaner_manager.LogCleanerManager``. A pass over one log, as Kafka's ``Cleaner.doClean``,
given the manager's ``CleanableRange`` ``[first_dirty, bound)``:

1. **Offset map.** The dirty records ``[first_dirty, bound)`` go into an ``OffsetMap``
   (key hash → latest offset) of ``log.cleaner.dedupe.buffer.size`` bytes. When it is
   full the pass ends at the first record it could not take (``end_offset``); the rest
   waits for the next pass, so a log larger than the budget is cleaned in several passes.
2. **Rewrite.** Every segment below ``end_offset`` (the clean ones and the dirty ones) is
   rewritten, in groups that fit ``segment.bytes``, ``segment.index.bytes`` and a 32-bit
   relative offset, into one new ``.cleaned`` segment per group, whose base offset is the
   group's first. Per record: kept when at or past ``end_offset``, or when it is the
   latest for its key and either has a value or is a tombstone whose batch's delete
   horizon has not passed; null keys are dropped. Per batch (Kafka's ``filterTo``):
   a batch with every record kept and nothing to stamp is copied byte for byte; a batch
   with none kept disappears; otherwise the survivors' record bytes are copied into a
   new batch with the same base offset, last offset delta (offsets keep their gaps, the
   batch keeps its range), codec, timestamp type, producer fields and leader epoch.
   A batch keeping tombstones without a delete horizon gets one: attribute bit 6 set
   and ``baseTimestamp = now + delete.retention.ms`` (records' timestamp deltas are
   re-based so their timestamps do not change); the tombstones go in the first pass
   after it. When a group's last batch disappears, an empty batch (no records, same
   offsets) takes its place, so the swapped-in segment covers the whole offset range of
   the segments it replaces (the loader's swap completion relies on it).
   Control batches and legacy (magic 0/1) batches are copied unchanged.
3. **Swap.** ``Log.replace_segments`` renames ``.cleaned`` → ``.swap``, swaps the list,
   renames the old files ``.deleted`` and drops the ``.swap`` suffix.
4. **Checkpoint.** ``LogCleaner`` hands ``end_offset`` to the manager's
   ``done_cleaning``, which writes it to ``cleaner-offset-checkpoint``.

Tombstone delete horizons are also a reason to clean: when no log is dirty enough, the
manager picks a log holding tombstones whose horizon passed (see ``cleaner_manager``).

Not done: aborted transactional records are not removed (control batches are kept),
producer state is not consulted.

Crash policy: a crash at any step is repaired by ``LogLoader`` (``.cleaned`` dropped,
``.swap`` completed): each group is either wholly before or wholly after, and a key's
latest value is in both. A failed pass deletes its ``.cleaned`` files and swaps nothing
more in; the checkpoint moves only after the last group was swapped in, so a crash
re-cleans that range (cleaning is idempotent). Nothing unchecked is swapped in: a
rewritten batch's old CRC is checked before it gets a new one, and every byte written
is checked and indexed in memory first.

Thread-safety: neither ``Cleaner`` nor ``LogCleaner`` is thread-safe; a ``LogCleaner`` is
used by one thread (the LogManager's maintenance thread, under its maintenance lock).
A pass reads only inactive segments, without locks; the swap takes the Log's lock, so
appends go on meanwhile. Retention must not run concurrently on the same log.

>>> cleaner = LogCleaner(ManagerConfig.from_properties({}), SYSTEM_CLOCK)  # doctest: +SKIP
>>> stats = cleaner.clean_dirtiest(logs)      # None when no log needs cleaning  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import TYPE_CHECKING

import numpy as np

from .cleaner_batches import (
    C_COPIED,
    C_DROPPED,
    C_NEXT_OFFSET,
    C_PENDING_HORIZON,
    C_RECORDS,
    C_RETAINED,
    C_REWRITTEN,
    C_TOMBSTONES_REMOVED,
    COPY,
    DROP,
    MAX_CHUNK_BATCHES,
    NO_HORIZON,
    REWRITE,
    Chunk,
    ChunkBuffers,
    decompressed,
    empty_batch,
    filter_batches,
    map_batches,
    rebuilt_batch,
    segment_chunks,
)
from .cleaner_manager import CleanableRange, LogCleanerManager
from .clock import SYSTEM_CLOCK, Clock
from .compression import compress
from .config import ManagerConfig
from .errors import CorruptRecordError, KafkaStorageError, SeglogError
from .file_names import CLEANED_SUFFIX
from .log_segment import LogSegment
from .offset_map import OffsetMap, hash_keys, valid_mask
from .record_codec import decode_batches
from .record_format import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    H_ATTRIBUTES,
    H_BASE_OFFSET,
    H_LAST_OFFSET,
    H_POSITION,
    H_RECORDS_COUNT,
    H_SIZE,
    INT32_MAX,
    V2_HEADER_SIZE,
    WALK_INVALID,
    WALK_LEGACY,
    BatchHeader,
    restamp_crc,
    set_length,
)
from .segment_scan import first_crc_mismatch
from .storage import LOCAL, FileHandle

if TYPE_CHECKING:
    from .log import Log

logger = logging.getLogger(__name__)

__all__ = ["CleanableRange", "Cleaner", "CleanerStats", "LogCleaner", "SegmentSizes",
           "group_segments"]

MIN_CHUNK_BYTES = 4 << 20
"""Segments are read in chunks of at least this much (``log.cleaner.io.buffer.size`` is
Kafka's per-buffer size; Python pays per chunk, so chunks are larger)."""



# --------------------------------------------------------------------------- values

@dataclass(slots=True)
class CleanerStats:
    """What one cleaning pass did."""

    topic: str
    partition: int
    first_dirty_offset: int
    end_offset: int  # the new cleaner checkpoint: the map covered [first_dirty, end)
    first_uncleanable_offset: int
    segments_cleaned: int = 0
    groups: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_retained: int = 0
    tombstones_removed: int = 0
    batches_copied: int = 0
    batches_rewritten: int = 0
    batches_dropped: int = 0
    map_records: int = 0
    map_entries: int = 0
    map_capacity: int = 0
    map_memory_bytes: int = 0
    elapsed_s: float = 0.0
    pending_delete_horizon: int | None = None  # earliest horizon of tombstones kept

    @property
    def more_dirty(self) -> bool:
        """The map filled before the uncleanable bound: another pass has work."""
        return self.end_offset < self.first_uncleanable_offset

    @property
    def mb_per_s(self) -> float:
        return self.bytes_read / 1e6 / self.elapsed_s if self.elapsed_s > 0 else 0.0


@dataclass(frozen=True, slots=True)
class SegmentSizes:
    """What ``group_segments`` needs of a segment (a local one, or a bucket's entry)."""

    base_offset: int
    next_offset: int  # the next segment's base: an upper bound of this one's last + 1
    size: int
    index_bytes: int
    time_index_bytes: int


def group_segments(segments: Sequence[SegmentSizes], max_size: int,
                   max_index_size: int) -> list[list[int]]:
    """Kafka's ``groupSegmentsBySize``: consecutive runs (as index lists) whose summed
    log size fits ``max_size``, summed index sizes fit ``max_index_size`` and whose
    offsets fit 32 bits relative to the run's first base offset. A run has at least one
    segment; an empty segment never breaks the offset check."""
    groups: list[list[int]] = []
    i = 0
    while i < len(segments):
        first = segments[i]
        group = [i]
        size, idx, tidx = first.size, first.index_bytes, first.time_index_bytes
        i += 1
        while i < len(segments):
            s = segments[i]
            if (size + s.size > max_size or idx + s.index_bytes > max_index_size
                    or tidx + s.time_index_bytes > max_index_size):
                break
            if s.size > 0 and s.next_offset - 1 - first.base_offset > INT32_MAX:
                break
            group.append(i)
            size, idx, tidx = size + s.size, idx + s.index_bytes, tidx + s.time_index_bytes
            i += 1
        groups.append(group)
    return groups


def _malformed(seg: LogSegment, table: np.ndarray, b: int) -> CorruptRecordError:
    return CorruptRecordError(
        f"{seg.log_path}: the batch at offsets {table[b, H_BASE_OFFSET]}.."
        f"{table[b, H_LAST_OFFSET]} has a malformed record or a record count that does "
        "not match its bytes")


def _check_rewritten_crcs(seg: LogSegment, chunk: memoryview, table: np.ndarray,
                          action: np.ndarray) -> None:
    """A rewritten batch gets a new CRC: its old one is checked first, so that corrupt
    bytes are never given a valid CRC. (Batches copied as they are are checked in the
    output by ``_CleanedFile``; a dropped batch leaves nothing behind.)"""
    rewritten = np.flatnonzero(action == REWRITE)
    if not len(rewritten):
        return
    rows = table[rewritten]
    bad = first_crc_mismatch(np.frombuffer(chunk, np.uint8), rows, len(rows))
    if bad < len(rows):
        b = int(rewritten[bad])
        raise CorruptRecordError(
            f"{seg.log_path}: CRC mismatch in the batch at offsets {table[b, H_BASE_OFFSET]}.."
            f"{table[b, H_LAST_OFFSET]}; nothing was swapped in")


def _check_batch_membership(chunk: memoryview, offsets: np.ndarray, batch_of: np.ndarray,
                            lasts: np.ndarray) -> None:
    """Each decoded record's offset must lie after the previous batch's last offset and
    at or below its own batch's (a legacy wrapper's inner messages come before its
    offset); a record claiming an offset outside its batch is corruption."""
    if not len(offsets):
        return
    nb = len(lasts)
    b = np.minimum(batch_of, nb - 1)
    previous = np.concatenate(([np.iinfo(np.int64).min], lasts[:-1]))
    inside = (batch_of < nb) & (offsets <= lasts[b]) & (offsets > previous[b])
    if not inside.all():
        i = int(np.flatnonzero(~inside)[0])
        raise CorruptRecordError(
            f"a record at offset {offsets[i]} lies outside the offsets of its batch "
            f"(batches end at {lasts.tolist()[:8]}...); nothing was swapped in")


def _write_fully(handle: FileHandle, data: bytes | memoryview, path: PurePath) -> None:
    try:
        handle.write_all(data)
    except OSError as e:
        raise KafkaStorageError(f"cannot write {path}: {e}") from e


class _CleanedFile:
    """A ``.cleaned`` segment's file as the cleaner writes it. Every piece is checked and
    indexed in memory before it is written (``SegmentIndexer``: sizes, increasing offsets,
    CRCs), so nothing is swapped in unchecked and the file is never read back. Legacy
    messages, which the indexer leaves to its caller, make the segment recover from its
    file instead."""

    def __init__(self, segment: LogSegment) -> None:
        self.segment = segment
        self.size = 0
        self._legacy = False
        # A piece holds at most one chunk's batches: a smaller header table will do.
        self._indexer = segment.indexer(INT32_MAX, scan_capacity=MAX_CHUNK_BATCHES + 1)
        self._handle: FileHandle | None = LOCAL.open_file(segment.log_path, "append_existing")

    def write(self, data: bytes | memoryview) -> None:
        if not self._legacy:
            u8 = np.frombuffer(data, np.uint8)
            end, status, reason = self._indexer.scan(u8, len(u8), self.size)
            if status == WALK_LEGACY:
                self._legacy = True
            elif status == WALK_INVALID or end != len(u8):
                raise CorruptRecordError(
                    f"the cleaned segment {self.segment.log_path} failed its check at "
                    f"position {self.size + end}: {reason or 'a partial batch'}; nothing "
                    "was swapped in")
        assert self._handle is not None, "written after close"
        _write_fully(self._handle, data, self.segment.log_path)
        self.size += len(data)

    def finish(self) -> None:
        """Close the file and give the segment its indexes and size."""
        self.close()
        if not self._legacy:
            self.segment.adopt_indexes(self._indexer)
            return
        cut = self.segment.recover(INT32_MAX)
        if cut:
            raise CorruptRecordError(
                f"the cleaned segment {self.segment.log_path} failed its check ({cut} bytes "
                "cut); nothing was swapped in")

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


# --------------------------------------------------------------------------- cleaner

class Cleaner:
    """One cleaning pass over one log (Kafka's ``Cleaner``); see the module docstring.
    ``manager_config`` gives ``log.cleaner.dedupe.buffer.size`` (the offset map's
    memory) and ``log.cleaner.io.buffer.size``. The map and the chunk buffers are
    allocated on first use and reused by every pass. Not thread-safe: one pass at a
    time."""

    def __init__(self, manager_config: ManagerConfig) -> None:
        self.config = manager_config
        self._map: OffsetMap | None = None  # allocated on first use: it is large
        self._bufs: ChunkBuffers | None = None  # read and write scratch, reused
        self.chunk_bytes = max(self.config.log_cleaner_io_buffer_size, MIN_CHUNK_BYTES)

    def buffers(self) -> ChunkBuffers:
        """The read and write scratch every pass reuses."""
        if self._bufs is None:
            self._bufs = ChunkBuffers(self.chunk_bytes)
        return self._bufs

    def _offset_map(self) -> OffsetMap:
        if self._map is None:
            self._map = OffsetMap(self.config.log_cleaner_dedupe_buffer_size)
        else:
            self._map.clear()
        return self._map

    def clean(self, log: Log, to_clean: CleanableRange, now: int) -> CleanerStats:
        """Map ``to_clean``'s dirty records, rewrite and swap in every segment below where
        the map stopped (``stats.end_offset``), with ``now`` as the time for delete
        horizons. The checkpoint is the caller's. Raises on I/O or corruption errors
        (the log is then unchanged, or changed by whole swap groups)."""
        started = time.perf_counter()
        r = to_clean
        omap = self._offset_map()
        stats = CleanerStats(log.topic, log.partition, r.first_dirty_offset,
                             r.first_dirty_offset, r.first_uncleanable_offset,
                             map_capacity=omap.capacity, map_memory_bytes=omap.memory_bytes)
        stats.end_offset = self._build_offset_map(log, r, omap, stats)
        stats.map_entries = omap.size
        segs = log.segments[:-1]
        infos = []
        for i, seg in enumerate(segs):
            if seg.base_offset >= stats.end_offset:
                break
            nxt = segs[i + 1].base_offset if i + 1 < len(segs) else log.segments[-1].base_offset
            infos.append(SegmentSizes(seg.base_offset, nxt, seg.size,
                                      seg.offset_index.size_in_bytes,
                                      seg.time_index.size_in_bytes))
        cfg = log.config
        pending: list[int] = []
        for group in group_segments(infos, cfg.segment_bytes, cfg.segment_index_bytes):
            old = [segs[i] for i in group]
            self._clean_group(log, old, omap, stats.end_offset, now, stats, pending)
            stats.groups += 1
            stats.segments_cleaned += len(old)
        stats.pending_delete_horizon = min(pending) if pending else None
        stats.elapsed_s = time.perf_counter() - started
        return stats

    def _build_offset_map(self, log: Log, r: CleanableRange, omap: OffsetMap,
                          stats: CleanerStats) -> int:
        """Put the dirty records into the map; returns the offset it stopped at."""
        start, bound = r.first_dirty_offset, r.first_uncleanable_offset
        bufs = self.buffers()
        for seg in log.segments[:-1]:
            if seg.base_offset >= bound:
                break
            for chunk in segment_chunks(seg, bufs):
                if chunk.last_offset < start:
                    continue
                if chunk.table is None:  # legacy messages
                    rec = decode_batches(chunk.view, start_offset=start, end_offset=bound,
                                         include_headers=False)
                    offsets = rec.column("offset").to_numpy()
                    hashes, valid = hash_keys(rec.column("key"))
                    consumed = omap.put_hashes(hashes, valid, offsets)
                    stats.map_records += consumed
                    if consumed < len(offsets):
                        return int(offsets[consumed])
                    continue
                plain = decompressed(chunk.view, chunk.table, bufs)
                view, table = plain if plain else (chunk.view, chunk.table)
                status, size, consumed, stop, last = map_batches(
                    np.frombuffer(view, np.uint8), table, len(table), start, bound,
                    omap.table, omap.size, omap.capacity, bufs.records(table))
                omap.note_put(size, last)
                stats.map_records += consumed
                if status < 0:
                    raise _malformed(seg, table, -status - 1)
                if status == 1:
                    return stop
        return bound

    def _clean_group(self, log: Log, old: list[LogSegment], omap: OffsetMap, end_offset: int,
                     now: int, stats: CleanerStats, pending: list[int]) -> None:
        base = old[0].base_offset
        for path in LogSegment.file_paths(log.dir, base, CLEANED_SUFFIX):
            LOCAL.delete(path)  # left by a failed pass of this process
        cleaned = log.new_segment(base)
        out_file = _CleanedFile(cleaned)
        try:
            last: Chunk | None = None
            written_next = base
            drm = log.config.delete_retention_ms
            for seg in old:
                for chunk in segment_chunks(seg, self.buffers()):
                    if chunk.table is not None:
                        out, nxt = self._filter_scanned(seg, chunk.view, chunk.table, omap,
                                                        end_offset, now, drm, stats, pending)
                    else:
                        out, nxt = self._filter_chunk(chunk.view, chunk.headers, omap,
                                                      end_offset, now, drm, stats, pending)
                    if out:
                        out_file.write(out)
                        written_next = nxt
                    stats.bytes_read += len(chunk.view)
                    last = chunk
            last_header = last.last_header() if last is not None else None
            if (last is not None and last_header is not None and last_header.magic == 2
                    and written_next <= last_header.last_offset):
                out_file.write(empty_batch(last.view, last_header))
            stats.bytes_written += out_file.size
            out_file.finish()
            log.replace_segments([cleaned], old)
        except BaseException:
            out_file.close()
            if cleaned.file_suffix == CLEANED_SUFFIX:
                cleaned.delete()
            raise

    def _filter_scanned(self, seg: LogSegment, original: memoryview,
                        original_table: np.ndarray, omap: OffsetMap, end_offset: int,
                        now: int, delete_retention_ms: int, stats: CleanerStats,
                        pending: list[int]) -> tuple[bytes | memoryview, int]:
        """``_filter_chunk`` for a chunk of v2 batches, in one kernel call. Compressed
        batches are decompressed first; the rewritten ones get their codec back."""
        bufs = self.buffers()
        plain = decompressed(original, original_table, bufs)
        chunk, table = plain if plain else (original, original_table)
        nb = len(table)
        # A rewritten record grows by at most 13 bytes (its re-based timestamp delta and
        # length varints), and no batch yields more records than it declares (a negative
        # count yields none) or than its bytes hold (a record the kernel accepts takes at
        # least 6): the kernel stops at a batch whose count its bytes deny.
        records = int(np.minimum(np.maximum(table[:, H_RECORDS_COUNT], 0),
                                 (table[:, H_SIZE] - V2_HEADER_SIZE) // 6).sum())
        out = bufs.out_buffer(len(chunk) + 16 * records + 16)
        action, out_pos, out_end = bufs.action[:nb], bufs.out_pos[:nb], bufs.out_end[:nb]
        c = bufs.counters
        size = filter_batches(np.frombuffer(chunk, np.uint8), table, nb, omap.table,
                              end_offset, now, delete_retention_ms, bufs.records(table),
                              out, action, out_pos, out_end, c)
        if size < 0:
            raise _malformed(seg, table, -size - 1)
        _check_rewritten_crcs(seg, original, original_table, action)
        view = out.data
        if plain is None:
            for b in np.flatnonzero(action == REWRITE).tolist():
                restamp_crc(view, int(out_pos[b]), int(out_end[b]))
            result: bytes | memoryview = view[:size]
        else:
            result = self._recompressed(original, original_table, view, action, out_pos,
                                        out_end)
        if c[C_PENDING_HORIZON] != NO_HORIZON:
            pending.append(int(c[C_PENDING_HORIZON]))
        stats.records_read += int(c[C_RECORDS])
        stats.records_retained += int(c[C_RETAINED])
        stats.tombstones_removed += int(c[C_TOMBSTONES_REMOVED])
        stats.batches_copied += int(c[C_COPIED])
        stats.batches_rewritten += int(c[C_REWRITTEN])
        stats.batches_dropped += int(c[C_DROPPED])
        return result, int(c[C_NEXT_OFFSET])

    @staticmethod
    def _recompressed(original: memoryview, table: np.ndarray, out: memoryview,
                      action: np.ndarray, out_pos: np.ndarray, out_end: np.ndarray) -> bytes:
        """The output of a chunk that had compressed batches: batches copied as they were
        come from the original bytes, rewritten ones get their codec back, then a CRC."""
        pieces: list = []
        for b, a in enumerate(action.tolist()):
            if a == DROP:
                continue
            pos, size = int(table[b, H_POSITION]), int(table[b, H_SIZE])
            if a == COPY:
                pieces.append(original[pos:pos + size])
                continue
            p, e = int(out_pos[b]), int(out_end[b])
            codec = int(table[b, H_ATTRIBUTES]) & COMPRESSION_MASK
            batch = bytearray(out[p:p + V2_HEADER_SIZE])
            records: bytes | memoryview = out[p + V2_HEADER_SIZE:e]
            if codec:
                records = compress(codec, records)
                batch[ATTRIBUTES_OFFSET + 1] |= codec
            batch += records
            set_length(batch, 0, len(batch))
            restamp_crc(batch, 0, len(batch))
            pieces.append(batch)
        return b"".join(pieces)

    def _filter_chunk(self, chunk: memoryview, headers: list[BatchHeader], omap: OffsetMap,
                      end_offset: int, now: int, delete_retention_ms: int,
                      stats: CleanerStats, pending: list[int]) -> tuple[bytes, int]:
        """The chunk's batches after the retain/discard decision; and the offset after
        the last batch written."""
        rec = decode_batches(chunk, include_headers=False)
        n = rec.num_rows
        nb = len(headers)
        lasts = np.fromiter((h.last_offset for h in headers), np.int64, nb)
        has_h = np.fromiter((h.has_delete_horizon for h in headers), np.bool_, nb)
        horizons = np.fromiter((h.base_timestamp for h in headers), np.int64, nb)
        offsets = rec.column("offset").to_numpy()
        batch_of = np.searchsorted(lasts, offsets, side="left")
        _check_batch_membership(chunk, offsets, batch_of, lasts)
        hashes, kvalid = hash_keys(rec.column("key"))
        found = omap.get_hashes(hashes, kvalid)
        tomb = ~valid_mask(rec.column("value"))
        retain_deletes = ~has_h[batch_of] | (now < horizons[batch_of])
        legacy = np.fromiter((h.magic < 2 for h in headers), np.bool_, nb)
        keep = (offsets >= end_offset) | (kvalid & (offsets >= found)
                                          & (~tomb | retain_deletes))
        keep |= legacy[batch_of]  # legacy messages are copied as they are
        totals = np.bincount(batch_of, minlength=nb)
        kept = np.bincount(batch_of, weights=keep, minlength=nb).astype(np.int64)
        tombs_kept = np.bincount(batch_of, weights=keep & tomb, minlength=nb).astype(np.int64)
        firsts = np.concatenate(([0], np.cumsum(totals)[:-1]))
        stats.records_read += n
        stats.records_retained += int(keep.sum())
        stats.tombstones_removed += int((tomb & ~keep).sum())

        pieces: list[bytes | memoryview] = []
        run_start = run_end = -1  # a run of batches copied as they are
        next_offset = -1
        for b, h in enumerate(headers):
            action = COPY
            horizon = None
            if h.magic == 2 and not h.is_control:
                if totals[b] != h.records_count:
                    raise CorruptRecordError(
                        f"batch at offsets {h.base_offset}..{h.last_offset} declares "
                        f"{h.records_count} records, {totals[b]} decoded")
                if tombs_kept[b]:
                    if h.has_delete_horizon:
                        pending.append(h.base_timestamp)
                    else:
                        horizon = now + delete_retention_ms
                        pending.append(horizon)
                if kept[b] == 0 and totals[b] > 0:
                    action = DROP
                elif kept[b] < totals[b] or horizon is not None:
                    action = REWRITE
            if action == COPY:
                stats.batches_copied += 1
                if run_start < 0:
                    run_start = h.position
                run_end = h.end_position
                next_offset = h.next_offset
                continue
            if run_start >= 0:
                pieces.append(chunk[run_start:run_end])
                run_start = -1
            if action == DROP:
                stats.batches_dropped += 1
                continue
            stats.batches_rewritten += 1
            f = firsts[b]
            pieces.append(rebuilt_batch(chunk, h, keep[f:f + totals[b]], horizon))
            next_offset = h.next_offset
        if run_start >= 0:
            pieces.append(chunk[run_start:run_end])
        if not pieces:
            return b"", next_offset
        if len(pieces) == 1 and isinstance(pieces[0], memoryview):
            return pieces[0], next_offset
        return b"".join(pieces), next_offset



# --------------------------------------------------------------------------- entry point

class LogCleaner:
    """Compacts logs with ``cleanup.policy`` containing ``compact`` (Kafka's ``LogCleaner``
    with one cleaner thread): a ``LogCleanerManager`` (``manager``) picks the log and
    keeps the checkpoints, a ``Cleaner`` (``cleaner``) runs the pass. ``manager_config``
    gives the cleaner's memory; ``clock`` the time for lags and delete horizons. Not
    thread-safe: used by one thread."""

    def __init__(self, manager_config: ManagerConfig | None = None,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = manager_config or ManagerConfig.from_properties({})
        self.clock = clock
        self.manager = LogCleanerManager(clock)
        self.cleaner = Cleaner(self.config)
        self.chunk_bytes = self.cleaner.chunk_bytes

    def _buffers(self) -> ChunkBuffers:
        return self.cleaner.buffers()

    # -- the manager's half ---------------------------------------------------------------

    def checkpoints(self, log_dir: Path) -> dict[tuple[str, int], int]:
        """``log_dir``'s ``cleaner-offset-checkpoint``; see ``LogCleanerManager``."""
        return self.manager.checkpoints(log_dir)

    def reload_checkpoints(self, log_dir: Path | str) -> None:
        """Forget the cached checkpoint of ``log_dir`` (it was rewritten by someone else)."""
        self.manager.reload_checkpoints(log_dir)

    def forget(self, log_dir: Path | str, topic: str, partition: int) -> None:
        """Drop a partition's checkpoint entry and state (its log was deleted or fully
        truncated): the next log of that name starts dirty from its start."""
        self.manager.forget(log_dir, topic, partition)

    def cleanable_range(self, log: Log) -> CleanableRange:
        """The log's clean and dirty sections now; see ``LogCleanerManager``."""
        return self.manager.cleanable_range(log)

    def grab_filthiest(self, logs: Iterable[Log]) -> tuple[Log, CleanableRange] | None:
        """The compacted log to clean next, or None; see ``LogCleanerManager``."""
        return self.manager.grab_filthiest(logs)

    # -- cleaning -------------------------------------------------------------------------

    def clean_dirtiest(self, logs: Iterable[Log]) -> CleanerStats | None:
        """One pass over the filthiest log of ``logs`` (see ``grab_filthiest``); None when
        none needs cleaning. The LogManager's maintenance entry point: an error is logged
        and the log is left alone until this cleaner is recreated (Kafka marks it
        uncleanable) instead of being raised."""
        picked = self.manager.grab_filthiest(list(logs))
        if picked is None:
            return None
        log, _ = picked
        try:
            return self.clean_log(log)
        except (SeglogError, OSError) as e:
            logger.error("cleaning %s-%d failed; it will not be cleaned again by this "
                         "cleaner: %s", log.topic, log.partition, e)
            self.manager.mark_uncleanable(log, str(e))
            return None

    def clean_log(self, log: Log) -> CleanerStats:
        """One cleaning pass over ``log`` (a writer ``Log`` with a compact policy),
        whatever its dirty ratio, then its checkpoint; returns what it did. Raises on I/O
        or corruption errors (the log is then unchanged, or changed by whole swap
        groups)."""
        if not log.config.compact:
            policy = ",".join(sorted(log.config.cleanup_policy))
            raise SeglogError(f"{log.dir}: cleanup.policy={policy} has no compact")
        started = time.perf_counter()
        now = self.clock.milliseconds()
        stats = self.cleaner.clean(log, self.manager.cleanable_range(log), now)
        self.manager.done_cleaning(log, stats.end_offset, stats.pending_delete_horizon)
        stats.elapsed_s = time.perf_counter() - started
        logger.info("cleaned %s-%d: offsets [%d, %d) mapped, %d segments in %d groups, "
                    "%d -> %d bytes, %d of %d records kept, %.1f MB/s", log.topic,
                    log.partition, stats.first_dirty_offset, stats.end_offset,
                    stats.segments_cleaned, stats.groups, stats.bytes_read,
                    stats.bytes_written, stats.records_retained, stats.records_read,
                    stats.mb_per_s)
        return stats
