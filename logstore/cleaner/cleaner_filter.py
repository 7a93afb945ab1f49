"""One chunk of a segment after the cleaner's retain/discard decision (Kafka's
``MemoryRecords.filterTo``, the rules of ``cleaner``'s step 2): which batches are copied
as they are, rewritten with their survivors (a new CRC, their codec back) or dropped.

``filter_scanned`` runs the ``cleaner_kernels.filter_batches`` kernel over a chunk of v2
batches; ``filter_chunk`` applies the same rules batch by batch in Python for chunks
holding legacy messages. Both check what they would give a new CRC first (a rewritten
batch's old CRC; each record's offset inside its batch), so corrupt bytes never leave
with a valid CRC. Pure functions over their arguments: not thread-safe only as the
``ChunkBuffers`` scratch they are given is not.
"""

from __future__ import annotations

import numpy as np

from ..errors import CorruptRecordError
from ..log.log_segment import LogSegment
from ..records.compression import compress
from ..records.record_codec import decode_batches
from ..records.record_format import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    H_ATTRIBUTES,
    H_BASE_OFFSET,
    H_LAST_OFFSET,
    H_POSITION,
    H_RECORDS_COUNT,
    H_SIZE,
    V2_HEADER_SIZE,
    BatchHeader,
    restamp_crc,
    set_length,
)
from ..records.segment_scan import first_crc_mismatch
from .cleaner_batches import ChunkBuffers, decompressed, rebuilt_batch
from .cleaner_kernels import (
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
    NO_HORIZON,
    REWRITE,
    filter_batches,
)
from .cleaner_stats import CleanerStats
from .offset_map import OffsetMap, hash_keys, valid_mask

__all__ = ["filter_chunk", "filter_scanned", "malformed"]


def malformed(seg: LogSegment, table: np.ndarray, b: int) -> CorruptRecordError:
    return CorruptRecordError(
        f"{seg.log_path}: the batch at offsets {table[b, H_BASE_OFFSET]}.."
        f"{table[b, H_LAST_OFFSET]} has a malformed record or a record count that does "
        "not match its bytes"
    )


def _check_rewritten_crcs(
    seg: LogSegment, chunk: memoryview, table: np.ndarray, action: np.ndarray
) -> None:
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
            f"{table[b, H_LAST_OFFSET]}; nothing was swapped in"
        )


def _check_batch_membership(
    chunk: memoryview, offsets: np.ndarray, batch_of: np.ndarray, lasts: np.ndarray
) -> None:
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
            f"(batches end at {lasts.tolist()[:8]}...); nothing was swapped in"
        )


def filter_scanned(
    bufs: ChunkBuffers,
    seg: LogSegment,
    original: memoryview,
    original_table: np.ndarray,
    omap: OffsetMap,
    end_offset: int,
    now: int,
    delete_retention_ms: int,
    stats: CleanerStats,
    pending: list[int],
) -> tuple[bytes | memoryview, int]:
    """``filter_chunk`` for a chunk of v2 batches (its header table scanned), in one
    kernel call, with ``bufs`` as scratch. Compressed batches are decompressed first;
    the rewritten ones get their codec back."""
    plain = decompressed(original, original_table, bufs)
    chunk, table = plain if plain else (original, original_table)
    nb = len(table)
    # A rewritten record grows by at most 13 bytes (its re-based timestamp delta and
    # length varints), and no batch yields more records than it declares (a negative
    # count yields none) or than its bytes hold (a record the kernel accepts takes at
    # least 6): the kernel stops at a batch whose count its bytes deny.
    records = int(
        np.minimum(
            np.maximum(table[:, H_RECORDS_COUNT], 0), (table[:, H_SIZE] - V2_HEADER_SIZE) // 6
        ).sum()
    )
    out = bufs.out_buffer(len(chunk) + 16 * records + 16)
    action, out_pos, out_end = bufs.action[:nb], bufs.out_pos[:nb], bufs.out_end[:nb]
    c = bufs.counters
    size = filter_batches(
        np.frombuffer(chunk, np.uint8),
        table,
        nb,
        omap.table,
        end_offset,
        now,
        delete_retention_ms,
        bufs.records(table),
        out,
        action,
        out_pos,
        out_end,
        c,
    )
    if size < 0:
        raise malformed(seg, table, -size - 1)
    _check_rewritten_crcs(seg, original, original_table, action)
    view = out.data
    if plain is None:
        for b in np.flatnonzero(action == REWRITE).tolist():
            restamp_crc(view, int(out_pos[b]), int(out_end[b]))
        result: bytes | memoryview = view[:size]
    else:
        result = _recompressed(original, original_table, view, action, out_pos, out_end)
    if c[C_PENDING_HORIZON] != NO_HORIZON:
        pending.append(int(c[C_PENDING_HORIZON]))
    stats.records_read += int(c[C_RECORDS])
    stats.records_retained += int(c[C_RETAINED])
    stats.tombstones_removed += int(c[C_TOMBSTONES_REMOVED])
    stats.batches_copied += int(c[C_COPIED])
    stats.batches_rewritten += int(c[C_REWRITTEN])
    stats.batches_dropped += int(c[C_DROPPED])
    return result, int(c[C_NEXT_OFFSET])


def _recompressed(
    original: memoryview,
    table: np.ndarray,
    out: memoryview,
    action: np.ndarray,
    out_pos: np.ndarray,
    out_end: np.ndarray,
) -> bytes:
    """The output of a chunk that had compressed batches: batches copied as they were
    come from the original bytes, rewritten ones get their codec back, then a CRC."""
    pieces: list[bytes | bytearray | memoryview] = []
    for b, a in enumerate(action.tolist()):
        if a == DROP:
            continue
        pos, size = int(table[b, H_POSITION]), int(table[b, H_SIZE])
        if a == COPY:
            pieces.append(original[pos : pos + size])
            continue
        p, e = int(out_pos[b]), int(out_end[b])
        codec = int(table[b, H_ATTRIBUTES]) & COMPRESSION_MASK
        batch = bytearray(out[p : p + V2_HEADER_SIZE])
        records: bytes | memoryview = out[p + V2_HEADER_SIZE : e]
        if codec:
            records = compress(codec, records)
            batch[ATTRIBUTES_OFFSET + 1] |= codec
        batch += records
        set_length(batch, 0, len(batch))
        restamp_crc(batch, 0, len(batch))
        pieces.append(batch)
    return b"".join(pieces)


def filter_chunk(
    chunk: memoryview,
    headers: list[BatchHeader],
    omap: OffsetMap,
    end_offset: int,
    now: int,
    delete_retention_ms: int,
    stats: CleanerStats,
    pending: list[int],
) -> tuple[bytes | memoryview, int]:
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
    keep = (offsets >= end_offset) | (kvalid & (offsets >= found) & (~tomb | retain_deletes))
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
                    f"{h.records_count} records, {totals[b]} decoded"
                )
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
        pieces.append(rebuilt_batch(chunk, h, keep[f : f + totals[b]], horizon))
        next_offset = h.next_offset
    if run_start >= 0:
        pieces.append(chunk[run_start:run_end])
    if not pieces:
        return b"", next_offset
    if len(pieces) == 1 and isinstance(pieces[0], memoryview):
        return pieces[0], next_offset
    return b"".join(pieces), next_offset
