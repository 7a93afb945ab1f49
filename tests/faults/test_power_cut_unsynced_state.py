"""What a publish and a pause no longer fsync, and the recovery that makes it safe.

A publish (``Log.flush`` to the log end) fsyncs the ``.log`` but not the indexes of the
segment that will hold the recovery point: an unclean open recovers from that segment on
and rebuilds its indexes from the ``.log`` (LogLoader pass 4, as Kafka's). A pause leaves
the recovery-point checkpoint alone while the point stays in its segment, and writes its
``.kafka_cleanshutdown`` without an fsync. Each test builds the state a power cut can
leave (a copy of the log dir taken while the writer is open, with the unsynced files as
their last fsync left them, zeroed, emptied or gone) and opens it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from seglog.logstore.manager.log_dirs_reader import LogDirsReader
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import decode_batches, encode_batches
from seglog.logstore.storage.checkpoint_file import OffsetCheckpointFile
from seglog.logstore.storage.file_names import CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_CHECKPOINT

CONFIG = {"index.interval.bytes": "200"}  # an index entry every few batches
T0 = 1_700_000_000_000


def value(i: int) -> bytes:
    return f"v{i}".encode().ljust(40, b".")


def batches(start: int, n: int) -> bytes:
    """Records ``start..start+n-1``, one timestamp each (``T0 + offset``), 5 a batch."""
    return bytes(
        encode_batches(
            pa.array([value(i) for i in range(start, start + n)]),
            timestamps=pa.array([T0 + i for i in range(start, start + n)], pa.int64()),
            max_batch_bytes=300,
        )
    )


def power_cut_copy(src: Path, dst: Path) -> Path:
    """The log dir as the page cache holds it now (a writer still open)."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".lock"))
    return dst


def assert_lookups(d: Path, end: int) -> None:
    """Every offset and timestamp lookup answers as for a log written without a crash."""
    with LogDirsReader([d]) as reader:
        log = reader.get_log("t", 0)
        assert log.high_watermark == end
        for start in range(0, end, 7):
            # A read starts at the batch holding ``start`` (5 records a batch).
            chunk = bytes(next(iter(log.read_chunks(start, end))))
            got = decode_batches(chunk).column("value").to_pylist()
            first = start - start % 5
            assert got[:5] == [value(i) for i in range(first, first + 5)]
        for offset in range(0, end, 3):
            assert log.offset_for_timestamp(T0 + offset) == offset


@pytest.fixture
def published(tmp_path: Path) -> Iterator[tuple[Path, LogManager, dict[str, bytes]]]:
    """A log closed cleanly at offset 100 (its indexes fsynced at the close: their bytes
    are returned), reopened, 100 records more appended and published (fsynced, high
    watermark checkpointed): the writer is still open."""
    d = tmp_path / "d"
    with LogManager([d]) as mgr:
        mgr.create_topic("t", 1, CONFIG)
        mgr.append("t", 0, batches(0, 100))
    part = d / "t-0"
    synced = {
        p.suffix: p.read_bytes() for p in part.iterdir() if p.suffix in (".index", ".timeindex")
    }
    mgr = LogManager([d])
    mgr.append("t", 0, batches(100, 100))
    mgr.checkpoint_high_watermarks()
    assert mgr.get_log("t", 0).recovery_point == 200
    yield d, mgr, synced
    mgr.close()


@pytest.mark.parametrize("recovery_point", ["as-at-the-close", "at-the-log-end"])
@pytest.mark.parametrize("indexes", ["as-last-fsynced", "zeroed", "empty"])
def test_power_cut_after_a_publish_rebuilds_the_unsynced_indexes(
    tmp_path: Path,
    published: tuple[Path, LogManager, dict[str, bytes]],
    indexes: str,
    recovery_point: str,
) -> None:
    """The publish fsynced the ``.log`` and the high watermark, not the active segment's
    indexes: after a power cut they may hold what the last close left, zeros, or nothing.
    The marker's removal was fsynced at open, so the next open recovers the segment holding
    the checkpointed recovery point (whichever of the two values the file holds) and
    rebuilds its indexes: every offset and timestamp lookup is right, nothing is lost."""
    d, _mgr, synced = published
    cut = power_cut_copy(d, tmp_path / "cut")
    assert not (cut / CLEAN_SHUTDOWN_FILE).exists()
    for suffix, old in synced.items():
        path = cut / "t-0" / f"{0:020d}{suffix}"
        size = path.stat().st_size
        path.write_bytes(
            old if indexes == "as-last-fsynced" else bytes(size) if indexes == "zeroed" else b""
        )
    if recovery_point == "at-the-log-end":
        OffsetCheckpointFile(cut / RECOVERY_POINT_CHECKPOINT).write({("t", 0): 200})
    with LogManager([cut]) as mgr:
        assert mgr.check(deep=True) == []  # every index entry as a fresh build's
        assert mgr.get_log("t", 0).log_end_offset == 200
    assert_lookups(cut, 200)


def test_a_producer_publish_fsyncs_the_log_and_the_checkpoint_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``append_many`` + ``flush`` (the producer's publish) shares the sink's ``Log.flush``:
    the ``.log``, the high-watermark checkpoint and its directory, not the indexes."""
    with LogManager([tmp_path]) as mgr:
        mgr.create_topic("t", 1, CONFIG)
        for start in range(0, 30, 10):  # the topic, the first segment's files: made
            mgr.append_many({("t", 0): batches(start, 10)})
            mgr.flush()
        synced: list[str] = []
        real = os.fsync

        def fsync(fd: int) -> None:
            synced.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
            real(fd)

        monkeypatch.setattr(os, "fsync", fsync)
        mgr.append_many({("t", 0): batches(30, 10)})
        mgr.flush()
        monkeypatch.setattr(os, "fsync", real)
    assert sorted(synced) == sorted(
        [f"{0:020d}.log", "replication-offset-checkpoint.tmp", tmp_path.name]
    )


def test_a_roll_after_a_publish_fsyncs_the_old_segments_indexes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A segment rolled away from holding the recovery point is never recovered again:
    the roll fsyncs its indexes (final time-index entry, trim), though the publish before
    it did not and the log end was flushed already."""
    with LogManager([tmp_path]) as mgr:
        mgr.create_topic("t", 1, CONFIG)
        mgr.append("t", 0, batches(0, 50))
        mgr.checkpoint_high_watermarks()
        log = mgr.get_log("t", 0)
        assert log.recovery_point == log.log_end_offset == 50
        synced: list[str] = []
        real = os.fsync

        def fsync(fd: int) -> None:
            synced.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
            real(fd)

        monkeypatch.setattr(os, "fsync", fsync)
        log.roll()
        monkeypatch.setattr(os, "fsync", real)
    old = f"{0:020d}"
    assert f"{old}.index" in synced and f"{old}.timeindex" in synced, synced


def test_the_recovery_point_checkpoint_is_written_when_its_segment_changes(tmp_path: Path) -> None:
    """A pause skips the recovery-point checkpoint while every point stays in the segment
    the file's value names (recovery would start at that segment either way), and writes
    it once a roll moves it to another segment, or a truncation moves it back."""
    rp_file = OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT)
    mgr = LogManager([tmp_path])
    mgr.create_topic("t", 1, {**CONFIG, "segment.bytes": "4000"})
    mgr.append("t", 0, batches(0, 10))
    mgr.pause()
    assert rp_file.read() == {("t", 0): 10}
    for start in (10, 20):
        assert mgr.resume()
        mgr.append("t", 0, batches(start, 10))
        mgr.pause()
        assert mgr.get_log("t", 0).num_segments == 1
        assert rp_file.read() == {("t", 0): 10}  # still the active segment's
    assert mgr.resume()
    log = mgr.get_log("t", 0)
    while log.num_segments == 1:
        mgr.append("t", 0, batches(log.log_end_offset, 10))
    mgr.pause()
    assert rp_file.read() == {("t", 0): log.log_end_offset}  # another segment now
    assert mgr.resume()
    mgr.truncate_log("t", 0, log.log_end_offset - 5)
    mgr.pause()
    assert rp_file.read() == {("t", 0): log.log_end_offset}  # moved back: written
    mgr.close()


@pytest.mark.parametrize("marker", ["lost", "empty"])
def test_a_pause_marker_a_power_cut_lost_or_emptied(tmp_path: Path, marker: str) -> None:
    """The pause's ``.kafka_cleanshutdown`` is not fsynced. After a power cut it may be
    gone (the next open recovers the active segment: nothing lost) or there with no bytes
    (the loader asks only whether it exists, and everything it vouches for was fsynced
    before it was written: the open trusts a whole, indexed log)."""
    d = tmp_path / "d"
    mgr = LogManager([d])
    mgr.create_topic("t", 1, CONFIG)
    mgr.append("t", 0, batches(0, 100))
    mgr.pause()
    assert mgr.resume()
    mgr.append("t", 0, batches(100, 100))
    mgr.pause()
    cut = power_cut_copy(d, tmp_path / "cut")
    mgr.close()
    if marker == "lost":
        (cut / CLEAN_SHUTDOWN_FILE).unlink()
    else:
        (cut / CLEAN_SHUTDOWN_FILE).write_bytes(b"")
    with LogManager([cut]) as again:
        assert again.check(deep=True) == []
        assert again.get_log("t", 0).log_end_offset == 200
    assert_lookups(cut, 200)
