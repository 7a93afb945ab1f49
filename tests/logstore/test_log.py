from __future__ import annotations

import os
import struct

import pytest
from kafka_batches import BASE_TS, batch

from seglog.logstore.config.config import LogConfig
from seglog.logstore.errors import (
    CorruptRecordError,
    InvalidOffsetError,
    InvalidRecordError,
    OffsetOutOfRangeError,
    ReadOnlyError,
    RecordTooLargeError,
)
from seglog.logstore.log.log import Log
from seglog.logstore.records.record_format import iter_batch_headers, read_batch_header
from seglog.logstore.util.clock import MockClock
from seglog.logstore.util.delayed_deletion import DelayedDeleter

ONE = len(batch(3))  # bytes of a 3-record test batch


def _open(tmp_path, clock=None, **props) -> Log:
    props.setdefault("message.timestamp.after.max.ms", str(2**62))
    cfg = LogConfig.from_properties(props)
    return Log.open(tmp_path / "events-0", cfg, clock=clock or MockClock(BASE_TS))


def _offsets(log: Log, start: int = 0) -> list[int]:
    """Every record offset readable from ``start`` (batch granularity is fine here)."""
    out = []
    for chunk in log.read_chunks(start, log.high_watermark, chunk_bytes=4096):
        for h in iter_batch_headers(chunk):
            out.extend(range(h.base_offset, h.last_offset + 1))
    return out


def test_append_assigns_offsets_from_the_log_end(tmp_path):
    log = _open(tmp_path)
    a = log.append(batch(3, base_offset=999))
    b = log.append(batch(2) + batch(4))
    assert (a.first_offset, a.last_offset, a.num_records, a.size) == (0, 2, 3, ONE)
    assert (b.first_offset, b.last_offset, b.num_records) == (3, 8, 6)
    assert b.max_timestamp == BASE_TS + 3 and b.offset_of_max_timestamp == 8
    assert log.log_end_offset == log.high_watermark == 9
    fetched = log.read(0, max_bytes=10**6)
    assert [(h.base_offset, h.last_offset) for h in iter_batch_headers(fetched.records)] == [
        (0, 2), (3, 4), (5, 8)]
    assert fetched.next_offset == 9
    log.close()


def test_append_in_place_stamps_the_callers_buffer_without_a_copy(tmp_path):
    log = _open(tmp_path, **{"message.timestamp.type": "LogAppendTime"})
    log.append(batch(3))
    given = bytearray(batch(2) + batch(4))
    original = bytes(given)
    kept = log.append(memoryview(given)[:len(given)])  # the default: a private copy
    assert given == original
    info = log.append(memoryview(given), in_place=True)
    assert (info.first_offset, info.last_offset) == (9, 14)
    # The offsets and LogAppendTime were stamped into the caller's bytes: no copy made.
    stamped = [(h.base_offset, h.is_log_append_time, h.max_timestamp)
               for h in iter_batch_headers(given)]
    assert stamped == [(9, True, BASE_TS), (11, True, BASE_TS)]
    assert (kept.first_offset, kept.last_offset) == (3, 8)
    on_disk = log.read(9, max_bytes=10**6).records
    assert bytes(on_disk) == bytes(given)
    assert _offsets(log) == list(range(15))
    log.close()


def test_append_in_place_refuses_a_read_only_buffer(tmp_path):
    log = _open(tmp_path)
    with pytest.raises(InvalidRecordError, match="events-0 in place needs a writable"):
        log.append(batch(2), in_place=True)
    assert log.log_end_offset == 0
    log.close()


@pytest.mark.parametrize("damage, error", [
    (lambda b: b[:-1], CorruptRecordError),  # partial batch
    (lambda b: b[:70] + bytes([b[70] ^ 1]) + b[71:], CorruptRecordError),  # CRC
    (lambda b: b[:16] + b"\x01" + b[17:], CorruptRecordError),  # magic 1
    (lambda b: b[:57] + struct.pack(">i", 5) + b[61:], CorruptRecordError),  # count
])
def test_bad_batches_are_rejected_and_nothing_is_written(tmp_path, damage, error):
    log = _open(tmp_path)
    log.append(batch(3))
    with pytest.raises(error):
        log.append(batch(3) + damage(batch(3)))
    assert log.log_end_offset == 3 and log.size_in_bytes == ONE
    log.close()


def test_too_large_batch_names_the_config(tmp_path):
    log = _open(tmp_path, **{"max.message.bytes": str(ONE - 1)})
    with pytest.raises(RecordTooLargeError, match="max.message.bytes"):
        log.append(batch(3))
    assert log.log_end_offset == 0
    log.close()


def test_log_append_time_stamps_batches(tmp_path):
    clock = MockClock(BASE_TS + 5000)
    log = _open(tmp_path, clock, **{"message.timestamp.type": "LogAppendTime"})
    info = log.append(batch(3))
    h = read_batch_header(log.read(0).records)
    assert h.is_log_append_time and h.max_timestamp == BASE_TS + 5000
    assert info.max_timestamp == BASE_TS + 5000
    log.close()


def test_create_time_too_far_in_the_future_is_rejected(tmp_path):
    log = _open(tmp_path, **{"message.timestamp.after.max.ms": "1000"})
    with pytest.raises(InvalidRecordError, match="message.timestamp.after.max.ms"):
        log.append(batch(3, ts=BASE_TS + 5000))
    log.append(batch(3, ts=BASE_TS + 500))
    log.close()


def test_keep_offsets_must_not_go_back(tmp_path):
    log = _open(tmp_path)
    log.append(batch(3, base_offset=10), assign_offsets=False)
    assert log.log_end_offset == 13
    with pytest.raises(InvalidOffsetError):
        log.append(batch(3, base_offset=12), assign_offsets=False)
    log.close()


# -- rolling ---------------------------------------------------------------------------


def test_rolls_on_segment_bytes(tmp_path):
    log = _open(tmp_path, **{"segment.bytes": str(3 * ONE)})
    for _ in range(7):
        log.append(batch(3))
    assert [s.base_offset for s in log.segments] == [0, 9, 18]
    assert all(s.size <= 3 * ONE for s in log.segments)
    log.close()


def test_rolls_on_segment_ms_by_record_timestamps(tmp_path):
    clock = MockClock(BASE_TS)
    log = _open(tmp_path, clock, **{"segment.ms": "1000"})
    log.append(batch(3, ts=BASE_TS))
    log.append(batch(3, ts=BASE_TS + 1000))  # span 1000: not more than segment.ms
    assert log.num_segments == 1
    log.append(batch(3, ts=BASE_TS + 1003))
    assert [s.base_offset for s in log.segments] == [0, 6]
    log.close()


def test_segment_ms_uses_the_clock_when_records_have_no_timestamp(tmp_path):
    clock = MockClock(BASE_TS)
    log = _open(tmp_path, clock, **{"segment.ms": "1000"})
    log.append(batch(1, ts=-1))
    clock.advance(1001)
    log.append(batch(1, ts=-1))
    assert log.num_segments == 2
    log.close()


def test_jitter_shortens_segment_ms(tmp_path):
    log = _open(tmp_path, **{"segment.ms": "1000", "segment.jitter.ms": "500"})
    jitters = set()
    for i in range(30):
        log.append(batch(1, ts=BASE_TS + i * 2000))
        jitters.add(log.active_segment.rolling_jitter_ms)
    assert all(0 <= j < 500 for j in jitters) and len(jitters) > 1
    log.close()


def test_rolls_when_the_time_index_is_full(tmp_path):
    log = _open(tmp_path, **{"index.interval.bytes": "0", "segment.index.bytes": "24"})
    for i in range(6):
        log.append(batch(1, ts=BASE_TS + i))
    # 24 bytes: two time-index slots, one kept for the final entry; the second batch
    # takes the other, so each segment holds two batches.
    assert [s.base_offset for s in log.segments] == [0, 2, 4]
    log.close()


def test_rolls_when_the_offset_index_is_full(tmp_path):
    log = _open(tmp_path, **{"index.interval.bytes": "0", "segment.index.bytes": "48"})
    for _ in range(15):
        log.append(batch(1, ts=BASE_TS))  # one timestamp: the time index stays small
    # 48 bytes: six offset entries; the first batch of a segment gets none.
    assert [s.base_offset for s in log.segments] == [0, 7, 14]
    assert len(log.segments[0].offset_index.all_entries()) == 6
    log.close()


def test_rolls_when_offsets_overflow_a_relative_offset(tmp_path):
    log = _open(tmp_path)
    log.append(batch(1))
    log.append(batch(1, base_offset=2**31 + 5), assign_offsets=False)
    assert [s.base_offset for s in log.segments] == [0, 2**31 + 5]
    assert log.log_end_offset == 2**31 + 6
    log.close()


def test_roll_flushes_the_old_segment(tmp_path):
    log = _open(tmp_path, **{"segment.bytes": str(ONE)})
    log.append(batch(3))
    assert log.recovery_point == 0
    log.append(batch(3))
    assert log.recovery_point == 3
    log.close()


# -- flushing --------------------------------------------------------------------------


def test_flush_messages_fsyncs(tmp_path, monkeypatch):
    log = _open(tmp_path, **{"flush.messages": "5"})
    calls = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd)))
    log.append(batch(3))
    assert calls == [] and log.recovery_point == 0
    log.append(batch(3))
    assert calls and log.recovery_point == 6
    log.close()


def test_flush_ms(tmp_path):
    clock = MockClock(BASE_TS)
    log = _open(tmp_path, clock, **{"flush.ms": "1000"})
    log.append(batch(3))
    assert not log.flush_if_due()
    clock.advance(1000)
    assert log.flush_if_due()
    assert log.recovery_point == 3
    log.close()


def test_default_policy_never_flushes_on_append(tmp_path):
    log = _open(tmp_path)
    log.append(batch(3))
    assert not log.flush_if_due(BASE_TS * 2)
    assert log.recovery_point == 0
    log.flush()
    assert log.recovery_point == 3
    log.close()


# -- reading ---------------------------------------------------------------------------


def test_read_bounds_and_high_watermark(tmp_path):
    log = _open(tmp_path, **{"segment.bytes": str(2 * ONE)})
    for _ in range(6):
        log.append(batch(3))
    with pytest.raises(OffsetOutOfRangeError, match="events-0"):
        log.read(19)
    assert log.read(18).empty
    assert log.read(7, max_bytes=1).first_offset == 6  # whole batch holding 7
    assert log.read(7, max_offset=9).next_offset == 9
    log.update_high_watermark(12)
    assert log.read(11, max_bytes=10**6).next_offset == 12
    assert log.read(12).empty
    log.close()


def test_read_continues_into_the_next_segment_only_when_one_is_exhausted(tmp_path):
    log = _open(tmp_path, **{"segment.bytes": str(2 * ONE)})
    for _ in range(6):
        log.append(batch(3))  # segments [0,6) [6,12) [12,18)
    fetched = log.read(3, max_bytes=3 * ONE)
    assert (fetched.first_offset, fetched.next_offset) == (3, 12)
    assert len(fetched.records) == 3 * ONE
    fetched = log.read(0, max_bytes=ONE + 1)
    assert fetched.next_offset == 3  # the second batch of the segment did not fit
    log.close()


def test_read_chunks_are_whole_batches_and_cover_the_range(tmp_path):
    log = _open(tmp_path, **{"segment.bytes": str(4 * ONE)})
    log.append(batch(3))
    log.append(batch(2, value_size=20_000))  # larger than the chunk below
    for _ in range(9):
        log.append(batch(3))
    chunks = list(log.read_chunks(4, 20, chunk_bytes=2 * ONE + 10))
    offsets = []
    for c in chunks:
        assert len(c) <= 2 * ONE + 10 or len(list(iter_batch_headers(c))) == 1
        offsets += [o for h in iter_batch_headers(c) for o in range(h.base_offset,
                                                                      h.last_offset + 1)]
    assert offsets[0] <= 4 and offsets[-1] >= 19 and offsets == sorted(set(offsets))
    assert offsets == list(range(offsets[0], offsets[-1] + 1))
    assert offsets[-1] < 23  # stops at the batch holding 19
    log.close()


def _bytes_read() -> int:
    """Bytes this process has read through read/pread calls so far (Linux)."""
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))


@pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="Linux's /proc/self/io")
def test_read_chunks_of_a_small_range_read_only_up_to_its_last_batch(tmp_path):
    """A local range ending inside a segment reads up to where its last batch can end
    (the offset index bounds it), not a whole chunk past it: a task of a small
    micro-batch read 8 MiB of a large segment. The chunks are the same."""
    log = _open(tmp_path)
    for _ in range(200):
        log.append(batch(3, value_size=10_000))  # 200 batches of ~30 kB: ~6 MB
    whole = b"".join(bytes(c) for c in log.read_chunks(0, log.high_watermark))
    expected = whole[:2 * len(batch(3, value_size=10_000))]  # offsets 0-5: two batches
    before = _bytes_read()
    chunks = [bytes(c) for c in log.read_chunks(0, 5, chunk_bytes=8 << 20)]
    read = _bytes_read() - before
    assert b"".join(chunks) == expected
    assert read < 256 << 10, f"{read} bytes read for a range of two batches"
    log.close()


def test_offset_for_timestamp(tmp_path):
    log = _open(tmp_path, **{"segment.bytes": str(2 * ONE), "index.interval.bytes": "1"})
    for i in range(8):
        log.append(batch(3, ts=BASE_TS + 100 * i))
    assert log.offset_for_timestamp(0) == 0
    assert log.offset_for_timestamp(BASE_TS + 301) == 10  # the record with +301
    assert log.offset_for_timestamp(BASE_TS + 303) == 12
    assert log.offset_for_timestamp(BASE_TS + 10_000) is None
    log.close()


# -- truncation and start offset -------------------------------------------------------


def test_truncate_to_and_continue(tmp_path):
    log = _open(tmp_path, **{"segment.bytes": str(2 * ONE)})
    for _ in range(6):
        log.append(batch(3))
    log.flush()
    assert log.truncate_to(7)  # the batch 6..8 goes
    assert log.log_end_offset == 6 and log.high_watermark == 6 and log.recovery_point == 6
    assert [s.base_offset for s in log.segments] == [0, 6]
    assert log.append(batch(2)).first_offset == 6
    assert _offsets(log) == list(range(8))
    assert not log.truncate_to(100)
    log.close()


def test_truncate_fully_and_start_at(tmp_path):
    log = _open(tmp_path)
    log.append(batch(3))
    log.truncate_fully_and_start_at(500)
    assert (log.log_start_offset, log.log_end_offset, log.num_segments) == (500, 500, 1)
    assert log.append(batch(1)).first_offset == 500
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0)
    log.close()


def test_delete_records_moves_the_start_and_retention_follows(tmp_path):
    clock = MockClock(BASE_TS)
    log = _open(tmp_path, clock, **{"segment.bytes": str(2 * ONE)})
    for _ in range(6):
        log.append(batch(3))
    with pytest.raises(OffsetOutOfRangeError, match="high watermark"):
        log.maybe_increment_log_start_offset(19)
    assert log.maybe_increment_log_start_offset(13)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(12)
    assert log.delete_old_segments() == 2  # [0,6) and [6,12) lie below 13
    assert [s.base_offset for s in log.segments] == [12]
    assert log.log_start_offset == 13
    log.close()


# -- retention -------------------------------------------------------------------------


def _deleted_files(log: Log) -> list[str]:
    return sorted(p for p in os.listdir(log.dir) if p.endswith(".deleted"))


def test_retention_by_time_then_unlink_after_the_delay(tmp_path):
    clock = MockClock(BASE_TS)
    deleter = DelayedDeleter(clock)
    cfg = LogConfig.from_properties({"segment.bytes": str(ONE), "retention.ms": "1000",
                                     "file.delete.delay.ms": "500"})
    log = Log.open(tmp_path / "events-0", cfg, clock=clock, deleter=deleter)
    log.append(batch(3, ts=BASE_TS))
    log.append(batch(3, ts=BASE_TS + 800))
    log.append(batch(3, ts=BASE_TS + 2000))
    clock.advance(1500)  # now - 1000 > segment 0's max timestamp only (+2)
    assert log.delete_old_segments() == 1
    assert [s.base_offset for s in log.segments] == [3, 6]
    assert log.log_start_offset == 3
    assert len(_deleted_files(log)) == 3 and deleter.pending == 3
    clock.advance(499)
    deleter.run_due()
    assert len(_deleted_files(log)) == 3
    clock.advance(1)
    deleter.run_due()
    assert _deleted_files(log) == []
    log.close()


def test_retention_by_size_oldest_first(tmp_path):
    log = _open(tmp_path, **{"segment.bytes": str(2 * ONE),
                             "retention.bytes": str(3 * ONE)})
    for _ in range(7):
        log.append(batch(3))  # segments of 2, 2, 2, 1 batches = 7 * ONE
    assert log.delete_old_segments() == 2  # 7 - 2 - 2 = 3 <= retention
    assert log.size_in_bytes == 3 * ONE
    assert log.delete_old_segments() == 0
    log.close()


def test_retention_only_below_the_high_watermark(tmp_path):
    clock = MockClock(BASE_TS)
    log = _open(tmp_path, clock, **{"segment.bytes": str(ONE), "retention.ms": "10"})
    for _ in range(3):
        log.append(batch(3, ts=BASE_TS))
    log.update_high_watermark(4)
    clock.advance(1000)
    assert log.delete_old_segments() == 1  # only [0,3) lies wholly below 4
    log.close()


def test_retention_rolls_before_deleting_every_segment(tmp_path):
    clock = MockClock(BASE_TS)
    log = _open(tmp_path, clock, **{"retention.ms": "10"})
    log.append(batch(3, ts=BASE_TS))
    clock.advance(1000)
    assert log.delete_old_segments() == 1
    assert [s.base_offset for s in log.segments] == [3]
    assert log.log_start_offset == 3 and log.log_end_offset == 3
    assert log.append(batch(1)).first_offset == 3
    log.close()


def test_compact_only_topic_keeps_old_segments(tmp_path):
    clock = MockClock(BASE_TS)
    log = _open(tmp_path, clock, **{"retention.ms": "10", "cleanup.policy": "compact",
                                    "segment.bytes": str(ONE)})
    log.append(batch(3, ts=BASE_TS))
    log.append(batch(3, ts=BASE_TS))
    clock.advance(10_000)
    assert log.delete_old_segments() == 0
    log.close()


# -- compaction support, deletion, read-only -------------------------------------------


def test_replace_segments_swaps_cleaned_segments_in(tmp_path):
    # compacted: the cleaned segment's gaps are legitimate there only (offset_continuity)
    log = _open(tmp_path, **{"segment.bytes": str(2 * ONE), "cleanup.policy": "compact"})
    for _ in range(6):
        log.append(batch(3))
    old = list(log.segments[:2])  # [0, 12)
    cleaned = log.new_segment(0)
    cleaned.append(batch(1, base_offset=5))
    cleaned.append(batch(1, base_offset=11))
    log.replace_segments([cleaned], old)
    assert [s.base_offset for s in log.segments] == [0, 12]
    assert _offsets(log) == [5, 11, *range(12, 18)]
    names = set(os.listdir(log.dir))
    assert "00000000000000000000.log" in names and "00000000000000000006.log.deleted" in names
    assert not any(n.endswith((".cleaned", ".swap")) for n in names)
    log.close()
    again = _open(tmp_path, **{"cleanup.policy": "compact"})
    assert _offsets(again) == [5, 11, *range(12, 18)]
    again.close()


def test_rename_for_deletion(tmp_path):
    log = _open(tmp_path)
    log.append(batch(3))
    new_dir = log.rename_for_deletion()
    assert new_dir.name.startswith("events-0.") and new_dir.name.endswith("-delete")
    assert not (tmp_path / "events-0").exists()
    assert (new_dir / "00000000000000000000.log").exists()


def test_read_only_log_never_writes(tmp_path):
    log = _open(tmp_path, **{"segment.bytes": str(2 * ONE)})
    for _ in range(5):
        log.append(batch(3))
    log.flush()
    before = sorted(os.listdir(log.dir))
    ro = Log.open(log.dir, log.config, clock=MockClock(), read_only=True, high_watermark=9)
    assert ro.read(0, max_bytes=10**6).next_offset == 9  # stops at the high watermark
    with pytest.raises(ReadOnlyError):
        ro.append(batch(1))
    log.append(batch(3))  # a roll the reader did not list yet
    ro.update_high_watermark(18)
    assert ro.read(15).next_offset == 18
    ro.close()
    assert set(before) <= set(os.listdir(log.dir))
    log.close()


def test_null_keys_are_rejected_on_a_compacted_topic(tmp_path):
    log = _open(tmp_path, **{"cleanup.policy": "compact"})
    log.append(batch(2, key=b"k"))
    with pytest.raises(InvalidRecordError, match="events-0.*null key"):
        log.append(batch(2, key=b"k") + batch(1, key=None))
    assert log.log_end_offset == 2
    log.close()


def test_create_time_too_old_is_rejected_per_record(tmp_path):
    clock = MockClock(BASE_TS + 10_000)
    log = _open(tmp_path, clock, **{"message.timestamp.before.max.ms": "5000"})
    log.append(batch(3, ts=BASE_TS + 6000))
    with pytest.raises(InvalidRecordError, match="message.timestamp.before.max.ms"):
        log.append(batch(3, ts=BASE_TS + 4000))
    log.close()


def test_reader_threads_never_block_on_the_writer(tmp_path):
    import threading

    log = _open(tmp_path, **{"segment.bytes": str(4 * ONE), "retention.bytes": str(8 * ONE),
                             "file.delete.delay.ms": "60000"})
    log.append(batch(3))
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader():
        try:
            while not stop.is_set():
                start = log.log_start_offset
                fetched = log.read(start, max_bytes=1 << 20)
                offsets = [o for h in iter_batch_headers(fetched.records)
                           for o in range(h.base_offset, h.last_offset + 1)]
                assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))
                assert offsets[-1] < fetched.high_watermark
        except OffsetOutOfRangeError:
            pass  # retention moved the start between the two calls: retry
        except BaseException as e:  # noqa: BLE001 - reported to the main thread
            errors.append(e)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for _ in range(200):
        log.append(batch(3))
        log.delete_old_segments()
    stop.set()
    for t in threads:
        t.join(timeout=30)
    assert errors == []
    assert log.num_segments <= 3
    log.close()


def test_read_only_reader_gets_out_of_range_when_retention_took_its_segment(tmp_path):
    clock = MockClock(BASE_TS)
    log = _open(tmp_path, clock, **{"segment.bytes": str(ONE), "retention.ms": "10",
                                    "file.delete.delay.ms": "0"})
    for i in range(4):
        log.append(batch(3, ts=BASE_TS + 100 * i))
    log.flush()
    ro = Log.open(log.dir, log.config, clock=MockClock(), read_only=True, high_watermark=12)
    clock.advance(215)  # the first three segments age out
    assert log.delete_old_segments() == 3
    with pytest.raises(OffsetOutOfRangeError, match="events-0"):
        ro.read(1)  # its segment is gone: an error, not a silent jump to offset 9
    assert ro.log_start_offset == 9
    assert ro.read(9).first_offset == 9
    ro.close()
    log.close()


def test_read_only_log_lists_the_directory_only_when_it_changed(tmp_path, monkeypatch):
    from seglog.logstore.log import log_reader

    log = _open(tmp_path, **{"segment.bytes": str(ONE)})
    log.append(batch(3))
    log.append(batch(3))
    log.flush()
    old = 1_000_000_000
    os.utime(log.dir, (old, old))  # long settled
    ro = Log.open(log.dir, log.config, clock=MockClock(), read_only=True)
    listings = []
    real = log_reader.list_segment_bases
    monkeypatch.setattr(log_reader, "list_segment_bases",
                        lambda d: listings.append(d) or real(d))
    assert ro.log_end_offset == 6 and ro.log_end_offset == 6
    assert listings == []
    log.append(batch(3))  # a roll creates files: the directory mtime moves
    assert ro.log_end_offset == 9 and ro.num_segments == 3
    assert len(listings) == 1
    ro.close()
    log.close()
