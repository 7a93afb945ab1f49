"""The recovery walk over one segment's ``.log`` (Kafka's ``LogSegment.recover`` loop):
which bytes hold complete, valid batches, and why the walk stopped. ``LogSegment.recover``
resets the indexes, runs it, cuts the file at the valid end and adopts the indexes.

Reads 16 MiB chunks; the header walk, the CRCs and the index rule run in numba kernels
over a whole chunk (``SegmentIndexer``), Python only per chunk (and per legacy magic 0/1
message, which has no producer). A batch larger than a chunk gets a larger chunk.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..records.record_format import LENGTH_OFFSET, LOG_OVERHEAD, WALK_INVALID, WALK_LEGACY, verify
from ..storage.file_handle import FileHandle

if TYPE_CHECKING:
    from .offset_continuity import ContinuityCheck
    from .segment_indexer import SegmentIndexer

_RECOVERY_CHUNK = 16 * 1024 * 1024


def scan_log_file(
    handle: FileHandle,
    file_size: int,
    ix: SegmentIndexer,
    *,
    base_offset: int,
    max_message_bytes: int,
    continuity: ContinuityCheck | None,
) -> str:
    """Feed every valid batch of the ``file_size`` bytes of ``handle`` to ``ix`` (which
    then knows the valid end, the next offset and the index entries), checking each
    against ``max_message_bytes`` and ``continuity``; returns why the walk stopped before
    the end ("" when the bytes after the valid end are a partial batch, or none)."""
    chunk = np.empty(min(_RECOVERY_CHUNK, max(file_size, 1)), np.uint8)
    reason = ""
    chunk_pos = 0
    while chunk_pos < file_size:
        n = handle.readinto(chunk.data, chunk_pos)
        p, status, reason = ix.scan(chunk, n, chunk_pos)
        if status == WALK_INVALID:
            # The kernels say which rule in a word; the batch's own check says it
            # with the position and the numbers (an offset rule is already worded).
            stop = verify(
                chunk.data, p, n, max_message_bytes=max_message_bytes, file_position=chunk_pos
            )
            if not stop.valid and not stop.partial:
                reason = stop.reason
            break
        if status == WALK_LEGACY:
            check = verify(
                chunk.data,
                p,
                n,
                next_offset=ix.next_offset,
                segment_base=base_offset,
                max_message_bytes=max_message_bytes,
                file_position=chunk_pos,
            )
            h = check.header
            if not check.valid:
                if not check.partial:
                    reason = check.reason
                    break
                if chunk_pos + n >= file_size:
                    reason = check.reason
                    break
                chunk = np.empty(len(chunk) * 2, np.uint8)  # larger than a chunk
                chunk_pos += p
                continue
            assert h is not None
            if continuity is not None:
                problem = continuity.problem(h)
                if problem:
                    reason = f"batch at position {chunk_pos + p} {problem}"
                    break
                continuity.batch(h)
            ix.add_batch(
                chunk_pos + p, h.size, h.base_offset, h.last_offset, h.max_timestamp, h.crc
            )
            chunk_pos += p + h.size
            continue
        if p == 0:
            if chunk_pos + n >= file_size:
                reason = verify(chunk.data, 0, n, file_position=chunk_pos).reason
                break
            need = (
                int.from_bytes(
                    chunk[LENGTH_OFFSET : LENGTH_OFFSET + 4].tobytes(), "big", signed=True
                )
                + LOG_OVERHEAD
            )
            chunk = np.empty(max(need, 2 * len(chunk)), np.uint8)  # one huge batch
            continue
        chunk_pos += p
    return reason
