"""Kafka's index rules (``index_check``): what every broker version writes passes, what
would mislead a lookup fails, and lookups agree with the rule."""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa

from seglog.logstore.config.config import LogConfig
from seglog.logstore.index.index_check import (
    IndexEntries,
    SegmentBatches,
    kafka_dump_log_offset_mismatches,
    kafka_dump_log_time_mismatches,
    offset_index_violations,
    read_offset_index,
    read_time_index,
    time_index_violations,
)
from seglog.logstore.log.log import Log
from seglog.logstore.records.record_codec import encode_batches
from seglog.logstore.records.record_format import iter_batch_headers
from seglog.logstore.util.clock import MockClock

# Six batches of 10 offsets each, 100 bytes apart; max timestamps 1000, 1010, ...
BATCHES = SegmentBatches(np.arange(0, 600, 100, dtype=np.int64),
                         np.arange(9, 60, 10, dtype=np.int64),
                         np.arange(1000, 1060, 10, dtype=np.int64))


def entries(*pairs: tuple[int, int]) -> IndexEntries:
    arr = np.array(pairs, dtype=np.int64).reshape(-1, 2)
    return IndexEntries(arr[:, 0].copy(), arr[:, 1].copy())


def test_old_and_new_broker_offset_indexes_pass():
    # Kafka 3.x: each entry is a batch's own last offset at its own position.
    assert offset_index_violations(entries((19, 100), (39, 300)), BATCHES) == ([], 0)
    # Before 3.x: an append of batches 1-2 indexed at its first batch with its LAST offset.
    old = entries((29, 100), (59, 300))
    assert offset_index_violations(old, BATCHES) == ([], 0)
    # Kafka's own dump tool calls both of those old entries mismatches.
    assert kafka_dump_log_offset_mismatches(old, BATCHES) == [(29, 19), (59, 39)]


def test_misleading_offset_entries_fail():
    # Offset 9 is in the batch before position 100: lookups for 9 would start past it.
    found, total = offset_index_violations(entries((9, 100)), BATCHES)
    assert total == 1 and "lookups for offsets 9..9" in found[0].message
    found, total = offset_index_violations(entries((19, 150)), BATCHES)
    assert total == 1 and "no batch starts at position 150" in found[0].message
    found, total = offset_index_violations(entries((29, 200), (29, 300)), BATCHES)
    assert total == 1 and found[0].slot == 1 and "offsets must grow" in found[0].message
    found, total = offset_index_violations(entries((19, 700)), BATCHES)  # past the file
    assert total == 1


def test_time_entries_inside_a_batch_pass_and_misleading_ones_fail():
    offsets = entries((19, 100), (39, 300))
    # A leader before 3.x names the record holding the max timestamp, inside its batch.
    inside = entries((1010, 14), (1030, 35))
    assert time_index_violations(inside, offsets, BATCHES) == ([], 0)
    strict = kafka_dump_log_time_mismatches(inside, offsets, BATCHES)
    assert strict == ["Indexed offset: 14, found log offset: 19",
                      "Indexed offset: 35, found log offset: 39"]
    # Timestamp 1005 at offset 45: the lookup starts at position 300 (entry 39), but the
    # batch at 100 (max 1010) lies before it: a lookup for 1005..1010 would miss it.
    found, total = time_index_violations(entries((1005, 45)), offsets, BATCHES)
    assert total == 1 and "timestamps 1005..1010" in found[0].message
    # Without an offset index every lookup scans from position 0: nothing can mislead.
    assert time_index_violations(entries((1005, 45)), None, BATCHES) == ([], 0)
    found, total = time_index_violations(entries((1030, 39), (1020, 45)), offsets, BATCHES)
    assert total == 1 and "must not decrease" in found[0].message


def test_lookups_agree_with_the_rule(tmp_path):
    """A real log's lookups with a hand-written old-broker index give the same answers
    as a full scan, and the rule accepts that index."""
    cfg = LogConfig.from_properties({"index.interval.bytes": "1000000"})
    log = Log.open(tmp_path / "t-0", cfg, clock=MockClock(0))
    for i in range(12):
        log.append(encode_batches(pa.array([b"x" * 50] * 5),
                                  timestamps=pa.array([100 * i + 5 - j for j in range(5)],
                                                      pa.int64())))
    log.close()
    seg_dir = tmp_path / "t-0"
    raw = (seg_dir / "00000000000000000000.log").read_bytes()
    headers = list(iter_batch_headers(raw))
    # Appends of three batches: entry = the append's last offset at its first position.
    old = [(headers[i + 2].last_offset, headers[i].position) for i in range(3, 12, 3)]
    (seg_dir / "00000000000000000000.index").write_bytes(
        b"".join(struct.pack(">ii", o, p) for o, p in old))
    # Time entries name the record with the max timestamp: the FIRST of each batch here.
    times = [(100 * i + 5, headers[i].base_offset) for i in range(3, 12, 3)]
    (seg_dir / "00000000000000000000.timeindex").write_bytes(
        b"".join(struct.pack(">qi", t, o) for t, o in times))
    batches = SegmentBatches.from_headers(headers)
    offsets = read_offset_index(seg_dir / "00000000000000000000.index", 0)
    assert offset_index_violations(offsets, batches) == ([], 0)
    assert time_index_violations(read_time_index(seg_dir / "00000000000000000000.timeindex", 0),
                                 offsets, batches) == ([], 0)
    reader = Log.open(seg_dir, cfg, clock=MockClock(0), read_only=True)
    try:
        for target in range(60):
            data = reader.read(target, max_bytes=1)
            assert data.first_offset <= target < data.next_offset
        for ts in range(0, 1200, 7):
            want = next((h.base_offset for h in headers if h.max_timestamp >= ts), None)
            got = reader.offset_for_timestamp(ts)
            assert (got if got is None else got // 5 * 5) == want, ts
    finally:
        reader.close()


def test_index_files_are_read_up_to_the_zero_tail(tmp_path):
    path = tmp_path / "00000000000000000100.index"
    path.write_bytes(struct.pack(">ii", 5, 300) + bytes(16) + struct.pack(">ii", 9, 9) + b"\1")
    got = read_offset_index(path, 100)
    assert got.keys.tolist() == [105] and got.values.tolist() == [300]
    assert got.torn_bytes == 1
