"""Shared checks of the fault suites: what a trustworthy partition directory looks like.

Test data convention: the record at offset ``o`` has the value ``value_for(o)``, so any
returned record can be checked against its offset without remembering what was written.
"""

from __future__ import annotations

import struct
from pathlib import Path

from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from seglog.logstore.records.record_format import iter_batch_headers, read_batch_header, verify_crc
from seglog.logstore.storage.file_names import parse_segment_file_name

NOW = 1_700_000_000_000


def value_for(offset: int) -> bytes:
    return b"value-%012d-" % offset + bytes([65 + offset % 26]) * (offset % 97)


def make_batch(first_offset: int, count: int, *, compression: int = 0,
               ts: int = NOW) -> bytes:
    """A v2 batch whose records carry ``value_for`` of the offsets the Log will assign
    (``first_offset`` must be the log end offset at append time)."""
    b = DefaultRecordBatchBuilder(2, compression, 0, -1, -1, -1, 1 << 30)
    for i in range(count):
        b.append(i, ts + first_offset + i, b"k%d" % ((first_offset + i) % 7),
                 value_for(first_offset + i), [])
    return bytes(b.build())


def fetch_bytes(data) -> bytes:
    """The record bytes of whatever ``Log.read`` returns."""
    for attr in ("records", "data", "buffer"):
        if hasattr(data, attr):
            return bytes(getattr(data, attr))
    return bytes(data)


def check_records(buf: bytes, expect_from: int) -> int:
    """Check every batch of ``buf`` (CRC, contiguous offsets from ``expect_from``, values);
    returns the next expected offset."""
    nxt = expect_from
    for h in iter_batch_headers(buf):
        verify_crc(buf, h)
        assert h.base_offset == nxt, (
            f"batch {h.base_offset}..{h.last_offset} does not continue at {nxt}")
        batch = DefaultRecordBatch(buf[h.position:h.end_position])
        offsets = []
        for r in batch:
            assert r.value == value_for(r.offset), f"wrong value at offset {r.offset}"
            offsets.append(r.offset)
        assert offsets == list(range(h.base_offset, h.last_offset + 1))
        nxt = h.last_offset + 1
    return nxt


def read_whole_log(log, start: int | None = None) -> int:
    """Read ``log`` from ``start`` (default: its start offset) to its high watermark
    through ``Log.read``, checking every record; returns the offset reached."""
    offset = log.log_start_offset if start is None else start
    end = log.high_watermark
    while offset < end:
        buf = fetch_bytes(log.read(offset, max_bytes=1 << 20))
        assert buf, f"empty read at offset {offset} below the log end {end}"
        first = read_batch_header(buf, 0)
        assert first is not None and first.base_offset <= offset <= first.last_offset
        nxt = check_records(buf, first.base_offset)
        assert nxt > offset
        offset = nxt
    return offset


def check_partition_files(dir_: Path) -> int:
    """Check the files of a partition dir directly: every segment's batches (CRC,
    contiguous offsets, values), every offset index entry (it points at the start of a
    batch whose last offset is base + relative offset), every time index entry (its offset
    is the last offset of a batch whose max timestamp is the entry's). Returns the end
    offset."""
    logs = sorted(p for p in dir_.iterdir()
                  if (parsed := parse_segment_file_name(p.name)) and parsed[1:] == (".log", ""))
    nxt = None
    for seg in logs:
        base = parse_segment_file_name(seg.name)[0]
        buf = seg.read_bytes()
        headers = list(iter_batch_headers(buf))
        assert sum(h.size for h in headers) == len(buf), f"{seg}: trailing bytes"
        if headers:
            assert headers[0].base_offset >= base
            if nxt is not None:
                assert headers[0].base_offset == nxt, f"{seg}: gap before it"
            nxt = check_records(buf, headers[0].base_offset)
        by_pos = {h.position: h for h in headers}
        by_last = {h.last_offset: h for h in headers}
        idx = seg.with_suffix(".index")
        if idx.exists():
            raw = idx.read_bytes()
            for i in range(0, len(raw) - len(raw) % 8, 8):
                rel, pos = struct.unpack_from(">ii", raw, i)
                if rel == 0 and pos == 0:
                    break  # preallocated tail of an active segment's index
                h = by_pos.get(pos)
                assert h is not None, f"{idx}: entry {i // 8} points inside a batch ({pos})"
                assert h.last_offset == base + rel, f"{idx}: entry {i // 8} has a wrong offset"
        tidx = seg.with_suffix(".timeindex")
        if tidx.exists():
            raw = tidx.read_bytes()
            for i in range(0, len(raw) - len(raw) % 12, 12):
                ts, rel = struct.unpack_from(">qi", raw, i)
                if ts == 0 and rel == 0:
                    break
                h = by_last.get(base + rel)
                assert h is not None, f"{tidx}: entry {i // 12} names no batch's last offset"
                assert h.max_timestamp == ts, f"{tidx}: entry {i // 12} has a wrong timestamp"
    return nxt or 0
