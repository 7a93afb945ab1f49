from __future__ import annotations

import errno
import os

import pytest
from kafka_batches import BASE_TS, batch

from seglog.logstore.errors import KafkaStorageError
from seglog.logstore.log.log_segment import LogSegment
from seglog.logstore.records.record_format import iter_batch_headers
from seglog.logstore.storage.file_names import DELETED_SUFFIX
from seglog.logstore.storage.storage import PosixStorage


def _segment(tmp_path, base=0, interval=100, **kw) -> LogSegment:
    return LogSegment.open(tmp_path, base, index_interval_bytes=interval, max_index_size=4096,
                           **kw)


def _fill(seg: LogSegment, n_batches: int, records: int = 3, ts_step: int = 10) -> list:
    """Append batches with consecutive offsets from the segment's base."""
    offset = seg.base_offset
    out = []
    for i in range(n_batches):
        raw = batch(records, ts=BASE_TS + i * ts_step, base_offset=offset, tag=i)
        seg.append(raw)
        out.append((offset, offset + records - 1, raw))
        offset += records
    return out


def test_index_entries_follow_index_interval_bytes(tmp_path):
    seg = _segment(tmp_path, base=50, interval=200)
    batches = _fill(seg, 12)
    size = len(batches[0][2])
    entries = seg.offset_index.all_entries()
    assert entries, "some entries expected"
    assert entries[0].position > 0  # the first batch never gets one
    # Kafka's rule, recomputed: an entry when more than 200 bytes since the last one.
    expected, since, pos = [], 0, 0
    for _first, last, raw in batches:
        if since > 200:
            expected.append((last, pos))
            since = 0
        pos += len(raw)
        since += len(raw)
    assert [(e.offset, e.position) for e in entries] == expected
    assert seg.size == 12 * size
    seg.close()


def test_translate_offset_and_read(tmp_path):
    seg = _segment(tmp_path)
    batches = _fill(seg, 10)
    h = seg.translate_offset(14)  # inside the batch 12..14
    assert (h.base_offset, h.last_offset) == (12, 14)
    sl = seg.read(13, max_size=1)  # min one batch
    assert (sl.first_offset, sl.next_offset, sl.batch_count) == (12, 15, 1)
    assert sl.records == batches[4][2]
    sl = seg.read(0, max_size=10**6, max_offset=9)
    assert sl.next_offset == 9 and sl.records == b"".join(b[2] for b in batches[:3])
    assert seg.read(100, 1000) is None
    assert seg.read_next_offset() == 30
    seg.close()


def test_find_offset_by_timestamp(tmp_path):
    seg = _segment(tmp_path)
    _fill(seg, 10, ts_step=10)  # batch i: timestamps BASE_TS+10i .. +2
    h = seg.find_offset_by_timestamp(BASE_TS + 41)
    assert h.base_offset == 12  # batch 4 holds BASE_TS+40..42
    h = seg.find_offset_by_timestamp(BASE_TS + 43)
    assert h.base_offset == 15
    assert seg.find_offset_by_timestamp(BASE_TS + 1000) is None
    assert seg.max_timestamp_so_far == BASE_TS + 92
    seg.close()


def test_truncate_to_cuts_whole_batches_and_indexes(tmp_path):
    seg = _segment(tmp_path)
    batches = _fill(seg, 10)
    removed = seg.truncate_to(16)  # the batch 15..17 goes entirely
    assert removed == 5 * len(batches[0][2])
    assert seg.read_next_offset() == 15
    assert all(e.offset < 16 for e in seg.offset_index.all_entries())
    assert all(e.offset < 16 for e in seg.time_index.all_entries())
    seg.append(batch(2, base_offset=15))
    assert seg.read_next_offset() == 17
    seg.close()


def test_recover_rebuilds_the_same_indexes_and_cuts_garbage(tmp_path):
    seg = _segment(tmp_path)
    _fill(seg, 20)
    before = (seg.offset_index.all_entries(), seg.time_index.all_entries())
    good_size = seg.size
    seg.close()
    with open(seg.log_path, "ab") as f:
        f.write(b"\x00" * 7 + b"garbage that is no batch at all" * 3)
    seg = _segment(tmp_path)
    assert seg.recover(1 << 20) > 0
    assert seg.size == good_size == os.path.getsize(seg.log_path)
    assert (seg.offset_index.all_entries(), seg.time_index.all_entries()) == before
    seg.close()


@pytest.mark.parametrize("zeros", [16, 17, 18, 61, 4096])
def test_recover_cuts_a_zeroed_tail_of_any_length(tmp_path, zeros):
    """A power cut can leave a file extended with zeros (magic byte 0 at +16: a legacy
    message to the header walk). Seventeen zeros hold a magic byte but not a whole legacy
    header, and once escaped recovery as a struct error."""
    seg = _segment(tmp_path)
    _fill(seg, 3)
    good_size = seg.size
    seg.close()
    with open(seg.log_path, "ab") as f:
        f.write(bytes(zeros))
    seg = _segment(tmp_path)
    assert seg.recover(1 << 20) == zeros
    assert seg.size == good_size == os.path.getsize(seg.log_path)
    seg.close()


def test_recover_cuts_a_batch_whose_last_offset_passes_int64(tmp_path):
    """baseOffset 2**63 - 1 with lastOffsetDelta 1: computed, the last offset wraps
    negative and passed every offset check (then any later batch did too)."""
    import struct

    from seglog.logstore.records.record_format import crc32c

    def with_last_delta(b: bytes, delta: int) -> bytes:
        out = bytearray(b)
        struct.pack_into(">i", out, 23, delta)
        struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
        return bytes(out)

    good = batch(1, base_offset=0)
    bad = with_last_delta(batch(1, base_offset=2**63 - 1), 1) + batch(1, base_offset=1)
    seg = _segment(tmp_path)
    seg.close()
    with open(seg.log_path, "wb") as f:
        f.write(good + bad)
    seg = _segment(tmp_path)
    assert seg.recover(1 << 20) == len(bad)
    assert seg.size == len(good)
    assert [h.last_offset for h in seg.iter_batches()] == [0]
    seg.close()


def test_recover_stops_at_a_bad_crc(tmp_path):
    seg = _segment(tmp_path)
    batches = _fill(seg, 6)
    seg.close()
    size = len(batches[0][2])
    with open(seg.log_path, "r+b") as f:
        f.seek(3 * size + 70)  # inside the records of the fourth batch
        f.write(b"\xff")
    seg = _segment(tmp_path)
    assert seg.recover(1 << 20) == 3 * size
    assert seg.read_next_offset() == 9
    seg.close()


def test_recover_enforces_max_message_bytes_and_increasing_offsets(tmp_path):
    seg = _segment(tmp_path)
    batches = _fill(seg, 3)
    seg.close()
    with open(seg.log_path, "ab") as f:  # offsets going back, written behind its back
        f.write(batch(3, base_offset=2))
    seg = _segment(tmp_path)
    assert seg.recover(1 << 20) == len(batches[0][2])
    size = len(batches[0][2])
    assert seg.recover(size - 1) == 3 * size  # the first batch is already too large
    assert seg.size == 0
    seg.close()


def test_flush_fsyncs_log_and_indexes(tmp_path, monkeypatch):
    seg = _segment(tmp_path)
    _fill(seg, 3)
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")),
                                                 real(fd)))
    seg.flush()
    names = sorted(os.path.basename(p) for p in synced)
    assert names == ["00000000000000000000.index", "00000000000000000000.log",
                     "00000000000000000000.timeindex"]
    seg.close()


def test_a_new_segment_whose_index_cannot_be_opened_is_removed(tmp_path, monkeypatch):
    """The process is out of file descriptors when a new segment opens its index: the
    error names the segment, and no half-made segment is left for the next open to find
    (it used to fail with an AttributeError and leave the ``.log`` behind). An existing
    segment is kept: only its files are released."""
    real_open = PosixStorage.open_file

    def no_fd_for_indexes(fs, path, mode):
        if str(path).endswith(".index"):
            raise OSError(errno.EMFILE, "Too many open files", str(path))
        return real_open(fs, path, mode)

    monkeypatch.setattr(PosixStorage, "open_file", no_fd_for_indexes)
    with pytest.raises(KafkaStorageError, match=r"cannot create the indexes of .*"
                                                r"00000000000000000100\.log.*Too many"):
        _segment(tmp_path, base=100)
    assert os.listdir(tmp_path) == []
    monkeypatch.undo()
    _segment(tmp_path).close()  # empty, and its index files are gone again
    (tmp_path / "00000000000000000000.index").unlink()
    monkeypatch.setattr(PosixStorage, "open_file", no_fd_for_indexes)
    with pytest.raises(KafkaStorageError, match="cannot create the indexes"):
        _segment(tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["00000000000000000000.log",
                                            "00000000000000000000.timeindex"]


def test_rename_and_delete(tmp_path):
    seg = _segment(tmp_path)
    _fill(seg, 2)
    seg.change_file_suffixes("", DELETED_SUFFIX)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "00000000000000000000.index.deleted", "00000000000000000000.log.deleted",
        "00000000000000000000.timeindex.deleted"]
    assert seg.read(0, 100) is not None  # open handles keep reading
    seg.delete()
    assert list(tmp_path.iterdir()) == []


def test_close_writes_the_final_time_index_entry_and_trims(tmp_path):
    seg = _segment(tmp_path)
    _fill(seg, 3, ts_step=100)
    seg.close()
    assert os.path.getsize(seg.offset_index.path) % 8 == 0
    again = _segment(tmp_path)
    assert again.time_index.last().timestamp == BASE_TS + 202
    assert again.max_timestamp_so_far == BASE_TS + 202
    again.close()


def test_read_only_segment_sees_appends_and_survives_truncation(tmp_path):
    writer = _segment(tmp_path)
    _fill(writer, 2)
    reader = LogSegment.open(tmp_path, 0, read_only=True)
    assert reader.read_next_offset() == 6
    writer.append(batch(3, base_offset=6))
    assert reader.read_next_offset() == 9
    writer.truncate_to(3)
    assert reader.read_next_offset() == 3
    with pytest.raises(Exception, match="read-only"):
        reader.append(batch(1, base_offset=3))
    reader.close()
    writer.close()


def test_iter_batches_skips_bodies_of_large_batches(tmp_path):
    seg = _segment(tmp_path)
    big = batch(2, value_size=200_000)
    seg.append(big)
    seg.append(batch(1, base_offset=2))
    got = [(h.base_offset, h.size) for h in seg.iter_batches()]
    assert got == [(0, len(big)), (2, len(batch(1)))]
    assert [h.size for h in iter_batch_headers(big)] == [len(big)]
    seg.close()


def test_recovery_without_the_hardware_crc_kernel_agrees(tmp_path, monkeypatch):
    from seglog.logstore.records import segment_scan

    seg = _segment(tmp_path)
    batches = _fill(seg, 30)
    seg.close()
    with open(seg.log_path, "r+b") as f:
        f.seek(20 * len(batches[0][2]) + 80)
        f.write(b"\x00\x01")
    corrupted = seg.log_path.read_bytes()
    results = []
    for hardware in (True, False):
        seg.log_path.write_bytes(corrupted)
        monkeypatch.setattr(segment_scan, "_HARDWARE_CRC", hardware if hardware else False)
        if hardware and not segment_scan._probe_hardware_crc():
            pytest.skip("no SSE4.2 here")
        s = _segment(tmp_path)
        cut = s.recover(1 << 20)
        results.append((cut, s.read_next_offset(), s.offset_index.all_entries(),
                        s.time_index.all_entries()))
        s.close()
    assert results[0][:2] == (10 * len(batches[0][2]), 60)
    assert results[0] == results[1]


def test_recovery_of_legacy_message_sets(tmp_path):
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    raw = b""
    for offset in range(5):
        b = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
        b.append(offset, timestamp=BASE_TS + offset, key=b"k", value=b"v" * 300)
        raw += bytes(b.build())
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(raw + raw[:20])  # plus a partial message
    seg = _segment(tmp_path)
    assert seg.recover(1 << 20) == 20
    assert seg.read_next_offset() == 5
    assert [e.offset for e in seg.offset_index.all_entries()] == [1, 2, 3, 4]
    assert seg.max_timestamp_so_far == BASE_TS + 4
    seg.close()
