"""LogManager.pause/resume: the dirs as a clean close leaves them, the state kept only
while nothing else wrote them."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from seglog.logstore.errors import KafkaStorageError, LogDirLockedError
from seglog.logstore.manager.dir_lock import DirLock
from seglog.logstore.manager.log_dirs_reader import LogDirsReader
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import decode_batches, encode_batches
from seglog.logstore.storage.checkpoint_file import OffsetCheckpointFile
from seglog.logstore.storage.file_names import (
    CLEAN_SHUTDOWN_FILE,
    HIGH_WATERMARK_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    MAINTENANCE_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
)
from seglog.logstore.storage.storage import LOCAL, Storage

SMALL = {"segment.bytes": "1000", "index.interval.bytes": "256"}


def batches(tag: str, n: int = 40, start: int = 0) -> bytes:
    return encode_batches(pa.array([f"{tag}{i}".encode().ljust(60, b".")
                                    for i in range(start, start + n)]), max_batch_bytes=600)


def append_rolling(mgr: LogManager, tag: str) -> None:
    """40 records in 4 appends: a roll check before each."""
    for start in range(0, 40, 10):
        mgr.append("t", 0, batches(tag, 10, start))


def values(d: Path, topic: str = "t", partition: int = 0) -> list[bytes]:
    with LogDirsReader([d]) as reader:
        log = reader.get_log(topic, partition)
        out = []
        for chunk in log.read_chunks(log.log_start_offset, log.high_watermark):
            out.extend(decode_batches(bytes(chunk)).column("value").to_pylist())
        return out


def test_pause_leaves_a_clean_dir_and_resume_goes_on(tmp_path: Path) -> None:
    mgr = LogManager([tmp_path])
    mgr.create_topic("t", 1, SMALL)
    append_rolling(mgr, "a")
    log = mgr.get_log("t", 0)
    assert log.num_segments > 3
    mgr.pause()
    # As after close(): the marker, a producer snapshot at the log end, trimmed indexes,
    # the published high watermark, and the lock free for anyone.
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    part = tmp_path / "t-0"
    assert (part / f"{log.log_end_offset:020d}.snapshot").exists()
    active = log.segments[-1]
    assert active.offset_index.path.stat().st_size < 10 << 20
    assert values(tmp_path) == [f"a{i}".encode().ljust(60, b".") for i in range(40)]
    with DirLock(tmp_path):
        pass
    with pytest.raises(KafkaStorageError, match="paused"):
        mgr.append("t", 0, batches("x"))

    assert mgr.resume() is True
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    append_rolling(mgr, "b")
    mgr.pause()
    assert mgr.resume() is True
    append_rolling(mgr, "c")
    mgr.close()
    with LogManager([tmp_path]) as again:
        assert again.check(deep=True) == []  # indexes and offsets as a fresh writer's
        assert again.get_log("t", 0).log_end_offset == 120
    assert [v[:1] for v in values(tmp_path)] == [b"a"] * 40 + [b"b"] * 40 + [b"c"] * 40


def test_resume_after_another_writer_gives_up_the_state(tmp_path: Path) -> None:
    mgr = LogManager([tmp_path])
    mgr.create_topic("t", 1, SMALL)
    mgr.append("t", 0, batches("a"))
    mgr.pause()
    with LogManager([tmp_path]) as other:
        other.append("t", 0, batches("o", 10))
    assert mgr.resume() is False
    with pytest.raises(KafkaStorageError, match="closed"):
        mgr.append("t", 0, batches("x"))
    mgr.close()
    with LogManager([tmp_path]) as fresh:
        fresh.append("t", 0, batches("b", 5))
    assert [v[:1] for v in values(tmp_path)] == [b"a"] * 40 + [b"o"] * 10 + [b"b"] * 5


def test_resume_while_another_writer_holds_the_lock_stays_paused(tmp_path: Path) -> None:
    mgr = LogManager([tmp_path])
    mgr.create_topic("t", 1)
    mgr.pause()
    with DirLock(tmp_path), pytest.raises(LogDirLockedError, match=str(tmp_path)):
        mgr.resume()
    assert mgr.paused
    assert mgr.resume() is True  # a bare lock holder wrote nothing
    mgr.append("t", 0, batches("a", 3))
    mgr.close()
    assert len(values(tmp_path)) == 3


def test_a_checkpoint_changed_by_hand_gives_up_the_state(tmp_path: Path) -> None:
    mgr = LogManager([tmp_path])
    mgr.create_topic("t", 1, SMALL)
    mgr.append("t", 0, batches("a"))
    mgr.pause()
    hw_file = OffsetCheckpointFile(tmp_path / HIGH_WATERMARK_CHECKPOINT)
    hw_file.write({("t", 0): 10})  # no writer did this: the marker is untouched
    assert mgr.resume() is False
    mgr.close()
    with LogManager([tmp_path]) as fresh:
        assert fresh.high_watermarks() == {("t", 0): 10}


def _checkpoint_writes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the checkpoint files written from now on (each still written)."""
    from seglog.logstore.storage import checkpoint_file

    written: list[str] = []
    real = checkpoint_file.write_atomically

    def spy(path: Path, data: bytes, storage: Storage = LOCAL) -> None:
        real(path, data, storage)
        written.append(Path(path).name)

    monkeypatch.setattr(checkpoint_file, "write_atomically", spy)
    return written


def test_a_commit_and_its_pause_write_each_changed_checkpoint_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the sink does per micro-batch: resume, append, publish the high watermark (the
    commit point), pause. The pause leaves the dir as a close does, but a checkpoint that
    holds what this writer last wrote durably is not written (and fsynced) again, nor a
    recovery point that stayed in the segment the file names."""
    mgr = LogManager([tmp_path])
    mgr.create_topic("t", 1, SMALL)
    mgr.append("t", 0, batches("a", 5))
    mgr.checkpoint_high_watermarks()
    mgr.pause()
    written = _checkpoint_writes(monkeypatch)
    rp_file = OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT)
    log = mgr.get_log("t", 0)
    rolled = 0
    for i in range(4):
        assert mgr.resume() is True
        on_file = rp_file.read()[("t", 0)]
        mgr.append("t", 0, batches(f"b{i}-", 5))
        mgr.checkpoint_high_watermarks()
        assert written == [HIGH_WATERMARK_CHECKPOINT]
        written.clear()
        mgr.pause()
        # The high watermark, the log start offset and the maintenance last-runs are as
        # this writer wrote them; the recovery point moved, but is written only when it
        # left the segment the file names (an unclean open recovers from there either way).
        moved = log.segment_base_of(on_file) != log.segment_base_of(log.recovery_point)
        rolled += moved
        assert written == ([RECOVERY_POINT_CHECKPOINT] if moved else [])
        written.clear()
    assert 0 < rolled < 4  # both cases seen
    hw = OffsetCheckpointFile(tmp_path / HIGH_WATERMARK_CHECKPOINT).read()
    assert hw == {("t", 0): 25}
    on_file = rp_file.read()[("t", 0)]
    assert on_file <= 25 and log.segment_base_of(on_file) == log.segment_base_of(25)
    assert (tmp_path / MAINTENANCE_CHECKPOINT).exists()
    assert (tmp_path / LOG_START_OFFSET_CHECKPOINT).exists()
    # What changes is written again: a log start offset moved by deleting records.
    assert mgr.resume() is True
    mgr.delete_records("t", 0, 3)
    mgr.pause()
    assert LOG_START_OFFSET_CHECKPOINT in written
    assert OffsetCheckpointFile(tmp_path / LOG_START_OFFSET_CHECKPOINT).read() == {("t", 0): 3}
    with LogManager([tmp_path]) as fresh:
        assert fresh.high_watermarks() == {("t", 0): 25}
        assert fresh.get_log("t", 0).log_start_offset == 3


def test_a_new_writer_writes_every_checkpoint_it_only_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint read at open may not be durable yet (its writer may have died before
    fsyncing the directory): a new writer's close writes all of them."""
    with LogManager([tmp_path]) as mgr:
        mgr.create_topic("t", 1, SMALL)
        mgr.append("t", 0, batches("a", 5))
    written = _checkpoint_writes(monkeypatch)
    with LogManager([tmp_path]):
        pass
    assert {HIGH_WATERMARK_CHECKPOINT, RECOVERY_POINT_CHECKPOINT,
            LOG_START_OFFSET_CHECKPOINT, MAINTENANCE_CHECKPOINT} <= set(written)
