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
3. **Swap.** The log's ``replace_segments``: a local ``Log`` renames ``.cleaned`` →
   ``.swap``, swaps the list, renames the old files ``.deleted`` and drops the ``.swap``
   suffix (a bucket's ``CompactedPartition`` records the pair for its commit).
4. **Checkpoint.** ``LogCleaner`` hands ``end_offset`` to the manager's
   ``done_cleaning``, which writes it to ``cleaner-offset-checkpoint``.

The cleaner works on any ``cleanable_log.CleanableLog`` (a local ``Log``, a bucket's
``bucket_compact.CompactedPartition``). Step 2's per-chunk decision is
``cleaner_filter``'s, its chunks ``cleaner_batches``', its kernels ``cleaner_kernels``',
its values (``CleanerStats``, ``group_segments``) ``cleaner_stats``'.

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
from collections.abc import Iterable
from pathlib import Path, PurePath
from typing import TypeVar

import numpy as np

from ..config.config import ManagerConfig
from ..errors import CorruptRecordError, KafkaStorageError, SeglogError
from ..log.log_segment import LogSegment
from ..records.record_codec import decode_batches
from ..records.record_format import INT32_MAX, WALK_INVALID, WALK_LEGACY
from ..storage.file_handle import FileHandle
from ..storage.file_names import CLEANED_SUFFIX
from ..storage.storage import LOCAL
from ..util.clock import SYSTEM_CLOCK, Clock
from .cleanable_log import CleanableLog, cleanable_segments
from .cleaner_batches import (
    MAX_CHUNK_BATCHES,
    Chunk,
    ChunkBuffers,
    decompressed,
    empty_batch,
    segment_chunks,
)
from .cleaner_filter import filter_chunk, filter_scanned, malformed
from .cleaner_kernels import map_batches
from .cleaner_manager import CleanableRange, LogCleanerManager
from .cleaner_stats import CleanerStats, SegmentSizes, group_segments
from .offset_map import OffsetMap, hash_keys

logger = logging.getLogger(__name__)

__all__ = ["CleanableLog", "CleanableRange", "Cleaner", "CleanerStats", "LogCleaner",
           "SegmentSizes", "group_segments"]

L = TypeVar("L", bound=CleanableLog)

MIN_CHUNK_BYTES = 4 << 20
"""Segments are read in chunks of at least this much (``log.cleaner.io.buffer.size`` is
Kafka's per-buffer size; Python pays per chunk, so chunks are larger)."""


# --------------------------------------------------------------------------- output

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

    def clean(self, log: CleanableLog, to_clean: CleanableRange, now: int) -> CleanerStats:
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
        segs, uncleaned = cleanable_segments(log)
        infos = []
        for i, seg in enumerate(segs):
            if seg.base_offset >= stats.end_offset:
                break
            nxt = segs[i + 1].base_offset if i + 1 < len(segs) else uncleaned
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

    def _build_offset_map(self, log: CleanableLog, r: CleanableRange, omap: OffsetMap,
                          stats: CleanerStats) -> int:
        """Put the dirty records into the map; returns the offset it stopped at."""
        start, bound = r.first_dirty_offset, r.first_uncleanable_offset
        bufs = self.buffers()
        for seg in cleanable_segments(log)[0]:
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
                    raise malformed(seg, table, -status - 1)
                if status == 1:
                    return int(stop)
        return bound

    def _clean_group(self, log: CleanableLog, old: list[LogSegment], omap: OffsetMap,
                     end_offset: int, now: int, stats: CleanerStats,
                     pending: list[int]) -> None:
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
                        out, nxt = filter_scanned(self.buffers(), seg, chunk.view, chunk.table,
                                                  omap, end_offset, now, drm, stats, pending)
                    else:
                        out, nxt = filter_chunk(chunk.view, chunk.headers, omap, end_offset,
                                                now, drm, stats, pending)
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

    def cleanable_range(self, log: CleanableLog) -> CleanableRange:
        """The log's clean and dirty sections now; see ``LogCleanerManager``."""
        return self.manager.cleanable_range(log)

    def grab_filthiest(self, logs: Iterable[L]) -> tuple[L, CleanableRange] | None:
        """The compacted log to clean next, or None; see ``LogCleanerManager``."""
        return self.manager.grab_filthiest(logs)

    # -- cleaning -------------------------------------------------------------------------

    def clean_dirtiest(self, logs: Iterable[CleanableLog]) -> CleanerStats | None:
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

    def clean_log(self, log: CleanableLog) -> CleanerStats:
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
