from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from power_cut import lose_unflushed_tail

from seglog.logstore.errors import (
    ConfigError,
    InvalidTopicError,
    LogDirError,
    LogDirLockedError,
    ReadOnlyError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from seglog.logstore.log.log import Log
from seglog.logstore.manager import log_manager as lm
from seglog.logstore.manager.log_dirs import STAGING_PREFIX
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_format import iter_batch_headers, verify_crc
from seglog.logstore.storage.checkpoint_file import OffsetCheckpointFile
from seglog.logstore.storage.file_names import (
    CLEAN_SHUTDOWN_FILE,
    HIGH_WATERMARK_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    MAINTENANCE_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    TOPIC_CONFIG_FILE,
    delete_dir_name,
)
from seglog.logstore.util.clock import MockClock

NOW = 1_700_000_000_000


def batch(n: int = 10, value_size: int = 100, ts: int = NOW) -> bytes:
    """One v2 batch of ``n`` records (offsets 0..n-1; the Log reassigns them)."""
    b = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
    for i in range(n):
        b.append(i, ts + i, None, b"%08d" % i + b"x" * max(value_size - 8, 0), [])
    return bytes(b.build())


def read_all(log, start=0):
    """Every batch header from ``start`` up to the high watermark, CRC-checked."""
    out, offset = [], start
    while offset < log.high_watermark:
        data = log.read(offset, max_bytes=1 << 20)
        buf = bytes(data.records) if hasattr(data, "records") else bytes(data)
        headers = list(iter_batch_headers(buf))
        assert headers, f"no batch at offset {offset}"
        for h in headers:
            verify_crc(buf, h)
        out.extend(headers)
        offset = headers[-1].next_offset
    return out


@pytest.fixture
def clock():
    return MockClock(NOW)


def test_opening_creates_missing_dirs_and_rejects_duplicates(tmp_path):
    a = tmp_path / "a" / "nested"
    with LogManager([a]) as mgr:
        assert a.is_dir() and mgr.topics() == []
    (tmp_path / "alias").symlink_to(a)
    with pytest.raises(LogDirError, match="given twice"):
        LogManager([a, tmp_path / "alias"])
    with pytest.raises(LogDirError, match="given twice"):
        LogManager([a, str(a) + "/"])
    # the failed open released the locks it took
    with LogManager([a]):
        pass


def test_unusable_dirs_are_clear_errors(tmp_path, monkeypatch):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(LogDirError, match="not a directory"):
        LogManager([f])
    with pytest.raises(LogDirError, match="does not exist"):
        LogManager([tmp_path / "missing"], read_only=True)
    d = tmp_path / "d"
    d.mkdir()
    # root can write anywhere, so permission bits cannot be the seam here
    monkeypatch.setattr(lm.os, "access", lambda path, mode: not mode & os.W_OK)
    with pytest.raises(LogDirError, match="not readable and writable"):
        LogManager([d])
    with LogManager([d], read_only=True):
        pass


def test_one_writer_per_dir_and_readers_take_no_lock(tmp_path):
    with LogManager([tmp_path]) as mgr:
        mgr.create_topic("t")
        with pytest.raises(LogDirLockedError, match=str(tmp_path)):
            LogManager([tmp_path])
        with LogManager([tmp_path], read_only=True) as reader:
            assert reader.topics() == ["t"]


def test_read_only_writes_nothing(tmp_path):
    with LogManager([tmp_path]) as mgr:
        mgr.create_topic("t", 2)
        mgr.append("t", 0, batch())
    before = {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in tmp_path.rglob("*")}
    with LogManager([tmp_path], read_only=True) as reader:
        reader.get_log("t", 0)
        assert reader.high_watermarks() == {("t", 0): 10, ("t", 1): 0}
        with pytest.raises(ReadOnlyError):
            reader.append("t", 0, batch())
        with pytest.raises(ReadOnlyError):
            reader.create_topic("u")
        with pytest.raises(ReadOnlyError):
            reader.run_maintenance()
    after = {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in tmp_path.rglob("*")}
    assert after == before


def test_create_topic_errors(tmp_path):
    with LogManager([tmp_path]) as mgr:
        mgr.create_topic("t", 2, {"retention.ms": 1000})
        with pytest.raises(TopicExistsError, match="'t'"):
            mgr.create_topic("t")
        with pytest.raises(InvalidTopicError):
            mgr.create_topic("bad name")
        with pytest.raises(ConfigError, match="segment.bytes"):
            mgr.create_topic("u", 1, {"segment.bytes": "big"})
        with pytest.raises(ConfigError, match="partitions"):
            mgr.create_topic("u", 0)
        with pytest.raises(UnknownTopicOrPartitionError):
            mgr.partitions("u")
        assert mgr.topics() == ["t"]
        assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["t-0", "t-1"]


def test_topic_config_persists_for_every_later_process(tmp_path):
    with LogManager([tmp_path], default_topic_config={"retention.ms": 5000}) as mgr:
        mgr.create_topic("a-b.c", 2, {"segment.bytes": 1 << 20, "cleanup.policy": "compact"})
        assert mgr.topic_config("a-b.c").segment_bytes == 1 << 20
        mgr.add_partitions("a-b.c", 3)
        with pytest.raises(ConfigError, match="higher"):
            mgr.add_partitions("a-b.c", 3)
    for p in range(3):
        assert (tmp_path / f"a-b.c-{p}" / TOPIC_CONFIG_FILE).is_file()
    code = textwrap.dedent(f"""
        from seglog.logstore.manager.log_manager import LogManager
        with LogManager([{str(tmp_path)!r}], read_only=True) as m:
            c = m.topic_config("a-b.c")
            print(m.partitions("a-b.c"), c.segment_bytes, sorted(c.cleanup_policy),
                  c.retention_ms)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[0, 1, 2] 1048576 ['compact'] 604800000"
    with LogManager([tmp_path]) as mgr:
        assert mgr.get_log("a-b.c", 2).config.segment_bytes == 1 << 20


def test_append_read_and_clean_shutdown_marker(tmp_path):
    mgr = LogManager([tmp_path])
    mgr.create_topic("t")
    info = mgr.append("t", 0, batch(5))
    assert info is not None
    mgr.append("t", 0, batch(5))
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert [h.base_offset for h in read_all(mgr.get_log("t", 0))] == [0, 5]
    mgr.close()
    mgr.close()  # idempotent
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT).read() == {("t", 0): 10}
    assert OffsetCheckpointFile(tmp_path / HIGH_WATERMARK_CHECKPOINT).read() == {("t", 0): 10}
    with LogManager([tmp_path]) as mgr:
        assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()  # removed on open
        assert mgr.get_log("t", 0).log_end_offset == 10
        assert mgr.high_watermarks() == {("t", 0): 10}


def test_clean_dir_loads_lazily(tmp_path, monkeypatch):
    with LogManager([tmp_path]) as mgr:
        mgr.create_topic("t", 3)
        for p in range(3):
            mgr.append("t", p, batch())
    opened = []
    real_open = Log.open

    def counting_open(dir_, *args, **kwargs):
        opened.append((os.path.basename(dir_), kwargs["had_clean_shutdown"]))
        return real_open(dir_, *args, **kwargs)

    monkeypatch.setattr(Log, "open", counting_open)
    with LogManager([tmp_path]) as mgr:
        assert opened == []
        assert mgr.high_watermarks() == {("t", 0): 10, ("t", 1): 10, ("t", 2): 10}
        assert mgr.log_start_offsets() == {("t", 0): 0, ("t", 1): 0, ("t", 2): 0}
        assert opened == []
        assert mgr.get_log("t", 1).log_end_offset == 10
        assert opened == [("t-1", True)]
    # the partitions never loaded kept their checkpoint entries
    assert OffsetCheckpointFile(tmp_path / HIGH_WATERMARK_CHECKPOINT).read() == {
        ("t", 0): 10, ("t", 1): 10, ("t", 2): 10}


def _crash_after(tmp_path, body: str) -> None:
    """Run ``body`` in a writer subprocess that then dies without closing."""
    code = textwrap.dedent("""
        import os
        from kafka.record.default_records import DefaultRecordBatchBuilder
        from seglog.logstore.manager.log_manager import LogManager
        def batch(n):
            b = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
            for i in range(n):
                b.append(i, 1_700_000_000_000 + i, None, b"v" * 100, [])
            return bytes(b.build())
        mgr = LogManager([{dir!r}])
    """).format(dir=str(tmp_path)) + textwrap.dedent(body) + "\nos._exit(0)\n"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_unclean_dir_recovers_every_partition_at_open(tmp_path, monkeypatch):
    _crash_after(tmp_path, """
        mgr.create_topic("t", 2)
        mgr.append("t", 0, batch(10)); mgr.append("t", 1, batch(3))
        mgr.checkpoint_high_watermarks(); mgr.checkpoint_recovery_points()
        mgr.append("t", 0, batch(10))
    """)
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    seg = tmp_path / "t-0" / "00000000000000000000.log"
    good = seg.stat().st_size
    with open(seg, "ab") as f:  # a torn write at the end of the active segment
        f.write(batch(4)[:50])
    calls = []
    real_open = Log.open

    def spy(dir_, *args, **kwargs):
        calls.append((os.path.basename(dir_), kwargs["recovery_point"],
                      kwargs["had_clean_shutdown"]))
        return real_open(dir_, *args, **kwargs)

    monkeypatch.setattr(Log, "open", spy)
    with LogManager([tmp_path]) as mgr:
        assert sorted(calls) == [("t-0", 10, False), ("t-1", 3, False)]
        log = mgr.get_log("t", 0)
        assert log.log_end_offset == 20
        assert seg.stat().st_size == good
        # readers still see only what was published before the crash...
        assert log.high_watermark == 10
        assert [h.base_offset for h in read_all(log)] == [0]
        # ...and everything once the writer goes on
        mgr.append("t", 0, batch(1))
        assert [h.base_offset for h in read_all(log)] == [0, 10, 20]
        # recovery rewrote the checkpoints right away
        assert OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT).read()[("t", 0)] >= 10


def test_recovery_never_takes_back_a_published_high_watermark(tmp_path):
    _crash_after(tmp_path, """
        mgr.create_topic("t")
        mgr.checkpoint_recovery_points()          # recovery point 0 on disk...
        mgr.append("t", 0, batch(10))
        mgr.checkpoint_high_watermarks()          # ...but HW 10 published (and flushed)
    """)
    assert OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT).read() == {("t", 0): 0}
    with LogManager([tmp_path]) as mgr:
        assert OffsetCheckpointFile(tmp_path / HIGH_WATERMARK_CHECKPOINT).read() == {
            ("t", 0): 10}
        assert mgr.high_watermarks() == {("t", 0): 10}


def test_a_failed_open_leaves_a_clean_dir_clean(tmp_path):
    with LogManager([tmp_path / "a"]) as mgr:
        mgr.create_topic("t")
    (tmp_path / "b" / "t-0").mkdir(parents=True)
    with pytest.raises(LogDirError, match="two log dirs"):
        LogManager([tmp_path / "a", tmp_path / "b"])
    assert (tmp_path / "a" / CLEAN_SHUTDOWN_FILE).exists()


def test_corrupt_recovery_checkpoint_is_reported_and_recovery_starts_at_zero(
        tmp_path, monkeypatch, caplog):
    with LogManager([tmp_path]) as mgr:
        mgr.create_topic("t")
        mgr.append("t", 0, batch())
    (tmp_path / RECOVERY_POINT_CHECKPOINT).write_text("0\n1\nt 0 1x0\n")
    calls = []
    real_open = Log.open

    def spy(dir_, *args, **kwargs):
        calls.append((kwargs["recovery_point"], kwargs["had_clean_shutdown"]))
        return real_open(dir_, *args, **kwargs)

    monkeypatch.setattr(Log, "open", spy)
    with caplog.at_level(logging.ERROR), LogManager([tmp_path]) as mgr:
        assert calls == [(0, False)]
        assert "line 3" in caplog.text and RECOVERY_POINT_CHECKPOINT in caplog.text
        assert mgr.get_log("t", 0).log_end_offset == 10
    assert OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT).read() == {("t", 0): 10}


def test_entries_delete_dirs_and_duplicates(tmp_path, caplog):
    a, b = tmp_path / "a", tmp_path / "b"
    with LogManager([a]) as mgr:
        mgr.create_topic("t", 2)
    (a / "not-a-partition-x").mkdir()
    (a / "stray-file").write_text("?")
    doomed = a / delete_dir_name("gone", 0)
    doomed.mkdir()
    (doomed / "00000000000000000000.log").write_bytes(b"x")
    with caplog.at_level(logging.WARNING), LogManager([a]) as mgr:
        assert mgr.topics() == ["t"]
        assert not doomed.exists()  # a crash between rename and removal: finished on open
    assert "not-a-partition-x" in caplog.text and "stray-file" in caplog.text
    (b / "t-1").mkdir(parents=True)
    with pytest.raises(LogDirError, match="t-1.*two log dirs"):
        LogManager([a, b])


def test_delete_topic_renames_then_removes_after_the_delay(tmp_path, clock):
    with LogManager([tmp_path], clock=clock) as mgr:
        mgr.create_topic("t", 2, {"file.delete.delay.ms": 1000})
        mgr.create_topic("keep")
        mgr.append("t", 0, batch())
        mgr.checkpoint_high_watermarks()
        mgr.delete_topic("t")
        assert mgr.topics() == ["keep"]
        pending = sorted(p.name for p in tmp_path.iterdir() if p.name.endswith("-delete"))
        assert len(pending) == 2 and pending[0].startswith("t-0.")
        assert OffsetCheckpointFile(tmp_path / HIGH_WATERMARK_CHECKPOINT).read() == {
            ("keep", 0): 0}
        with pytest.raises(UnknownTopicOrPartitionError):
            mgr.get_log("t", 0)
        mgr.run_maintenance()
        assert len([p for p in tmp_path.iterdir() if p.name.endswith("-delete")]) == 2
        clock.advance(1000)
        mgr.scheduler.run_all()
        assert [p for p in tmp_path.iterdir() if p.name.endswith("-delete")] == []
        mgr.create_topic("t")  # the name is free again
        assert mgr.get_log("t", 0).log_end_offset == 0


def test_placement_prefers_the_dir_with_fewest_bytes_then_fewest_partitions(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    with LogManager([a, b]) as mgr:
        mgr.create_topic("first", 2)  # tie on bytes: one partition per dir
        assert {(a / "first-0").exists(), (b / "first-1").exists()} == {True}
        mgr.append("first", 0, batch(100, 1000))
        mgr.create_topic("second", 2)  # b holds fewer bytes, both go there
        assert (b / "second-0").is_dir() and (b / "second-1").is_dir()


def test_high_watermark_checkpoint_publishes_only_flushed_data(tmp_path, monkeypatch):
    events = []
    with LogManager([tmp_path]) as mgr:
        mgr.create_topic("t")
        mgr.append("t", 0, batch(), publish=False)  # this test publishes
        log = mgr.get_log("t", 0)
        real_flush = type(log).flush

        def flush(self, offset=None):
            events.append(("flush", offset))
            return real_flush(self, offset)

        real_write = OffsetCheckpointFile.write

        def write(self, offsets):
            events.append(("write", self.path.name, dict(offsets)))
            return real_write(self, offsets)

        monkeypatch.setattr(type(log), "flush", flush)
        monkeypatch.setattr(OffsetCheckpointFile, "write", write)
        mgr.checkpoint_high_watermarks()
        assert events == [("flush", 10), ("write", HIGH_WATERMARK_CHECKPOINT, {("t", 0): 10})]
        assert log.recovery_point >= 10


def test_log_start_offset_checkpoint_lists_only_advanced_partitions(tmp_path):
    with LogManager([tmp_path]) as mgr:
        mgr.create_topic("t", 2)
        mgr.append("t", 0, batch())
        mgr.append("t", 1, batch())
        mgr.get_log("t", 0).maybe_increment_log_start_offset(4)
        mgr.checkpoint_log_start_offsets()
        assert OffsetCheckpointFile(tmp_path / LOG_START_OFFSET_CHECKPOINT).read() == {
            ("t", 0): 4}
        assert mgr.log_start_offsets() == {("t", 0): 4, ("t", 1): 0}
    with LogManager([tmp_path], read_only=True) as reader:
        assert reader.log_start_offsets() == {("t", 0): 4, ("t", 1): 0}
    with LogManager([tmp_path]) as mgr:
        assert mgr.log_start_offsets() == {("t", 0): 4, ("t", 1): 0}
        assert mgr.get_log("t", 0).log_start_offset == 4


def test_reader_sees_only_checkpointed_high_watermarks_and_new_topics(tmp_path):
    with LogManager([tmp_path]) as mgr, LogManager([tmp_path], read_only=True) as reader:
        mgr.create_topic("t")
        assert reader.high_watermarks() == {("t", 0): 0}
        mgr.append("t", 0, batch())
        assert reader.high_watermarks() == {("t", 0): 0}
        mgr.checkpoint_high_watermarks()
        assert reader.high_watermarks() == {("t", 0): 10}
        mgr.delete_topic("t")
        assert reader.topics() == []


def test_retention_and_deleted_files_through_run_maintenance(tmp_path, clock):
    config = {"segment.bytes": 3000, "retention.ms": 60_000, "file.delete.delay.ms": 500}
    with LogManager([tmp_path], clock=clock,
                    config={"log.retention.check.interval.ms": 1000}) as mgr:
        mgr.create_topic("t", 1, config)
        for _ in range(6):
            mgr.append("t", 0, batch(10, 200, ts=clock.milliseconds()))
        log = mgr.get_log("t", 0)
        assert log.num_segments > 2
        mgr.checkpoint_high_watermarks()
        clock.advance(120_000)
        mgr.append("t", 0, batch(10, 200, ts=clock.milliseconds()))
        mgr.checkpoint_high_watermarks()
        mgr.run_maintenance()
        assert log.log_start_offset > 0
        deleted = list((tmp_path / "t-0").glob("*.deleted"))
        assert deleted
        clock.advance(1000)
        mgr.run_maintenance()
        assert list((tmp_path / "t-0").glob("*.deleted")) == []
        assert [h.base_offset for h in read_all(log, log.log_start_offset)][-1] == 60
    with LogManager([tmp_path], read_only=True) as reader:
        assert reader.log_start_offsets()[("t", 0)] == log.log_start_offset


def test_flush_task_honours_flush_ms(tmp_path, clock):
    never = 10**12
    with LogManager([tmp_path], clock=clock,
                    config={"log.flush.scheduler.interval.ms": 100,
                            "replica.high.watermark.checkpoint.interval.ms": never,
                            "log.flush.offset.checkpoint.interval.ms": never}) as mgr:
        mgr.create_topic("slow")
        mgr.create_topic("fast", 1, {"flush.ms": 1000})
        mgr.run_maintenance()  # every task is due once at start
        mgr.append("slow", 0, batch(), publish=False)
        mgr.append("fast", 0, batch(), publish=False)
        clock.advance(100)
        runs = {r.name: r for r in mgr.run_maintenance()}
        assert runs["log-flusher"].result == 0
        assert mgr.get_log("fast", 0).recovery_point == 0
        clock.advance(900)
        runs = {r.name: r for r in mgr.run_maintenance()}
        assert runs["log-flusher"].result == 1
        assert mgr.get_log("fast", 0).recovery_point == 10
        assert mgr.get_log("slow", 0).recovery_point == 0


def test_background_scheduler_checkpoints(tmp_path):
    with LogManager([tmp_path], background=True,
                    config={"replica.high.watermark.checkpoint.interval.ms": 10}) as mgr:
        assert mgr.scheduler.running
        mgr.create_topic("t")
        mgr.append("t", 0, batch())
        cp = OffsetCheckpointFile(tmp_path / HIGH_WATERMARK_CHECKPOINT)
        for _ in range(500):
            if cp.read().get(("t", 0)) == 10:
                break
            mgr.scheduler.wake()
            time.sleep(0.01)
        assert cp.read() == {("t", 0): 10}
    assert not mgr.scheduler.running


def test_exception_inside_with_block_does_not_claim_a_clean_shutdown(tmp_path):
    with pytest.raises(RuntimeError), LogManager([tmp_path]) as mgr:
        mgr.create_topic("t")
        raise RuntimeError("user code failed")
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    with LogManager([tmp_path]) as mgr:  # the lock was released
        assert mgr.topics() == ["t"]


def test_short_lived_writers_share_the_maintenance_schedule(tmp_path, clock):
    config = {"log.retention.check.interval.ms": 60_000}
    with LogManager([tmp_path], clock=clock, config=config) as mgr:
        assert "log-retention" in {r.name for r in mgr.run_maintenance()}
    clock.advance(1_000)
    with LogManager([tmp_path], clock=clock, config=config) as mgr:  # a later process
        assert "log-retention" not in {r.name for r in mgr.run_maintenance()}
    clock.advance(60_000)
    with LogManager([tmp_path], clock=clock, config=config) as mgr:
        assert "log-retention" in {r.name for r in mgr.run_maintenance()}
    (tmp_path / MAINTENANCE_CHECKPOINT).write_text("0\n1\nbroken\n")
    with LogManager([tmp_path], clock=clock, config=config) as mgr:  # corrupt: all due
        assert "log-retention" in {r.name for r in mgr.run_maintenance()}


def test_deleting_topics_while_the_background_retention_runs(tmp_path):
    with LogManager([tmp_path], background=True,
                    config={"log.retention.check.interval.ms": 1}) as mgr:
        for i in range(15):
            mgr.create_topic(f"t{i}", 2, {"file.delete.delay.ms": 0})
            mgr.append(f"t{i}", 0, batch())
            mgr.delete_topic(f"t{i}")
        mgr.scheduler.stop()
        live = [p.name for p in tmp_path.iterdir()
                if p.is_dir() and not p.name.endswith("-delete")]
        assert live == [] and mgr.topics() == []


def test_unclean_dirs_recover_in_a_pool_per_dir(tmp_path, monkeypatch):
    dirs = [tmp_path / "a", tmp_path / "b"]
    code_dirs = ", ".join(repr(str(d)) for d in dirs)
    subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import os
        from seglog.logstore.manager.log_manager import LogManager
        mgr = LogManager([{code_dirs}])
        mgr.create_topic("t", 6)
        os._exit(0)
    """)], check=True, timeout=120)
    active, peak, threads = {}, {}, set()
    guard = threading.Lock()
    real_open = Log.open

    def spy(dir_, *args, **kwargs):
        key = os.path.dirname(dir_)
        with guard:
            threads.add(threading.current_thread().name)
            active[key] = active.get(key, 0) + 1
            peak[key] = max(peak.get(key, 0), active[key])
        try:
            time.sleep(0.05)
            return real_open(dir_, *args, **kwargs)
        finally:
            with guard:
                active[key] -= 1

    monkeypatch.setattr(Log, "open", spy)
    with LogManager(dirs, config={"num.recovery.threads.per.data.dir": 2}) as mgr:
        assert len(mgr.partitions("t")) == 6
    assert all(name.startswith("seglog-recovery") for name in threads)
    assert sorted(peak) == sorted(str(d) for d in dirs)
    assert all(1 <= n <= 2 for n in peak.values()) and max(peak.values()) == 2


def test_one_failing_partition_does_not_stop_the_others(tmp_path, clock):
    from seglog.logstore.errors import KafkaStorageError

    config = {"segment.bytes": 3000, "retention.ms": 60_000}
    with LogManager([tmp_path], clock=clock) as mgr:
        mgr.create_topic("t", 2, config)
        for p in (0, 1):
            for _ in range(4):
                mgr.append("t", p, batch(10, 200, ts=clock.milliseconds()))
        mgr.checkpoint_high_watermarks()
        clock.advance(120_000)
        broken, healthy = mgr.get_log("t", 0), mgr.get_log("t", 1)

        def fail(*args, **kwargs):
            raise KafkaStorageError(f"disk error under {broken.dir}")

        mgr.append("t", 0, batch(), publish=False)
        mgr.append("t", 1, batch(), publish=False)
        broken.delete_old_segments = fail
        broken.flush = fail
        runs = {r.name: r for r in mgr.run_maintenance()}
        assert not runs["log-retention"].ok and "disk error" in str(runs["log-retention"].error)
        assert healthy.log_start_offset > 0  # retention still ran for the healthy partition
        assert not runs["high-watermark-checkpoint"].ok
        published = OffsetCheckpointFile(tmp_path / HIGH_WATERMARK_CHECKPOINT).read()
        assert published == {("t", 0): 40, ("t", 1): 50}
        del broken.delete_old_segments, broken.flush  # let close() work


def test_readers_relist_only_directories_that_changed(tmp_path, monkeypatch):
    with LogManager([tmp_path]) as mgr:
        mgr.create_topic("t", 3, {"segment.bytes": 3000})
        for p in range(3):
            for _ in range(3):
                mgr.append("t", p, batch(10, 200))  # one segment each
        mgr.checkpoint_high_watermarks()
    old = time.time() - 60  # older than the "racy" window: listings can be trusted
    for path in [tmp_path, *tmp_path.iterdir()]:
        os.utime(path, (old, old))
    listed = []
    real_listdir, real_scandir = os.listdir, os.scandir
    monkeypatch.setattr(lm.os, "listdir", lambda d: listed.append(str(d)) or real_listdir(d))
    monkeypatch.setattr(lm.os, "scandir", lambda d: listed.append(str(d)) or real_scandir(d))
    with LogManager([tmp_path], read_only=True) as reader:
        assert reader.log_start_offsets() == {("t", 0): 0, ("t", 1): 0, ("t", 2): 0}
        listed.clear()
        for _ in range(3):
            assert reader.log_start_offsets() == {("t", 0): 0, ("t", 1): 0, ("t", 2): 0}
            assert reader.topics() == ["t"]
        assert listed == []  # nothing changed: no directory was listed again
        (tmp_path / "t-1" / "00000000000000000000.log").rename(
            tmp_path / "t-1" / "00000000000000000000.log.deleted")  # retention-like
        assert reader.log_start_offsets()[("t", 1)] == 10
        assert listed == [str(tmp_path / "t-1")]


def keyed_batch(keys: list[bytes], ts: int = NOW) -> bytes:
    b = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
    for i, k in enumerate(keys):
        b.append(i, ts + i, k, b"value-of-" + k + b"-" + b"x" * 300, [])
    return bytes(b.build())


def test_compaction_runs_as_a_maintenance_task(tmp_path, clock):
    config = {"cleanup.policy": "compact", "segment.bytes": 4096,
              "min.cleanable.dirty.ratio": 0.01}
    with LogManager([tmp_path], clock=clock,
                    config={"log.cleaner.backoff.ms": 1000}) as mgr:
        mgr.create_topic("c", 1, config)
        mgr.create_topic("d")  # delete policy: not the cleaner's business
        for _ in range(8):
            mgr.append("c", 0, keyed_batch([b"a", b"b", b"c"]))
        mgr.append("d", 0, batch())
        mgr.checkpoint_high_watermarks()
        log = mgr.get_log("c", 0)
        before = log.size_in_bytes
        runs = {r.name: r for r in mgr.run_maintenance()}
        stats = runs["log-cleaner"].result
        assert runs["log-cleaner"].ok and stats is not None and stats.topic == "c"
        clock.advance(1000)
        mgr.run_maintenance()
        assert log.size_in_bytes < before
        mgr.delete_topic("c")  # forgets the cleaner's checkpoint entry
    from seglog.logstore.storage.file_names import CLEANER_OFFSET_CHECKPOINT
    assert OffsetCheckpointFile(tmp_path / CLEANER_OFFSET_CHECKPOINT).read() == {}


def test_an_interrupted_create_topic_leaves_nothing_visible(tmp_path):
    with LogManager([tmp_path]) as mgr:
        mgr.create_topic("t")
    staging = tmp_path / (STAGING_PREFIX + "0123")  # killed before its rename
    staging.mkdir()
    (staging / TOPIC_CONFIG_FILE).write_text("retention.ms=1\n")
    with LogManager([tmp_path], read_only=True) as reader:
        assert reader.topics() == ["t"]
        assert staging.exists()  # a reader writes nothing
    with LogManager([tmp_path]) as mgr:
        assert mgr.topics() == ["t"] and not staging.exists()


def test_a_forked_child_cannot_write_through_its_parents_manager(tmp_path):
    with LogManager([tmp_path]) as mgr:
        mgr.create_topic("t")
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                mgr.append("t", 0, batch())
                answer = b"appended"
            except LogDirError as e:
                answer = b"refused" if "forked child" in str(e) else b"other"
            mgr.close()  # a no-op in the child: no flush, no marker, no unlock
            os.write(w, answer)
            os._exit(0)
        os.close(w)
        answer = os.read(r, 100)
        os.close(r)
        os.waitpid(pid, 0)
        assert answer == b"refused"
        assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
        other = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
            from seglog.logstore.manager.log_manager import LogManager
            LogManager([{str(tmp_path)!r}])
        """)], capture_output=True, text=True)
        assert other.returncode != 0 and "LogDirLockedError" in other.stderr  # still ours
        mgr.append("t", 0, batch())
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()


# -- a model-based test: LogManager operations, crashes and reopenings vs plain lists ---

from hypothesis import settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import (  # noqa: E402
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
)


class LogManagerModel(RuleBasedStateMachine):
    """Appends (batch sizes per partition), flushes, HW checkpoints, clean reopenings and
    crashes that lose the unflushed tail, against a model: the list of batch sizes
    appended, and per partition the durable prefix length (in records)."""

    @initialize()
    def open(self):
        import tempfile

        self.dir = Path(tempfile.mkdtemp(prefix="seglog-model-"))
        self.mgr = LogManager([self.dir])
        self.mgr.create_topic("m", 2, {"segment.bytes": 5000, "index.interval.bytes": 300})
        self.batches = {0: [], 1: []}  # record counts of the batches appended, in order
        self.durable = {0: 0, 1: 0}
        self.published = {0: 0, 1: 0}
        # The writer's HW follows its end on append; after a crash it is the published
        # one until the next append (the unpublished tail stays invisible till then).
        self.hw = {0: 0, 1: 0}

    def _end(self, p):
        return sum(self.batches[p])

    @rule(p=st.sampled_from([0, 1]), n=st.integers(1, 12))
    def append(self, p, n):
        info = self.mgr.append("m", p, batch(n, 60), publish=False)  # the model publishes
        assert info.first_offset == self._end(p)
        self.batches[p].append(n)
        self.hw[p] = self._end(p)

    @rule(p=st.sampled_from([0, 1]))
    def flush(self, p):
        self.mgr.get_log("m", p).flush()
        self.durable[p] = self._end(p)

    @rule()
    def publish(self):
        self.mgr.checkpoint_high_watermarks()
        for p in (0, 1):
            self.published[p] = self.hw[p]
            self.durable[p] = max(self.durable[p], self.hw[p])  # flushed up to the HW

    @rule()
    def clean_reopen(self):
        self.mgr.close()
        self.durable = {p: self._end(p) for p in (0, 1)}
        self.published = dict(self.hw)  # close checkpoints the (flushed) HWs
        self.mgr = LogManager([self.dir])

    @rule(cut=st.floats(0, 1))
    def crash(self, cut):
        self.mgr.__exit__(RuntimeError, None, None)  # no flush claims, no marker
        for p in (0, 1):
            lose_unflushed_tail(self.dir / f"m-{p}", self.durable[p], cut)
        self.mgr = LogManager([self.dir])
        for p in (0, 1):  # the survivors: whole batches, at least the durable prefix
            end, kept = self.mgr.get_log("m", p).log_end_offset, []
            for n in self.batches[p]:
                if sum(kept) + n > end:
                    break
                kept.append(n)
            assert sum(kept) == end >= self.durable[p]
            self.batches[p] = kept  # what was durable stays durable: durable[p] holds
            self.hw[p] = self.published[p]

    @invariant()
    def logs_match_the_model(self):
        for p in (0, 1):
            log = self.mgr.get_log("m", p)
            assert log.log_end_offset == self._end(p)
            assert log.high_watermark == self.hw[p] >= self.published[p]
            bases = [h.base_offset for h in read_all(log)]
            assert bases == [sum(self.batches[p][:i]) for i in range(len(bases))]

    def teardown(self):
        import shutil

        if hasattr(self, "mgr"):
            self.mgr.close()
            shutil.rmtree(self.dir, ignore_errors=True)


LogManagerModel.TestCase.settings = settings(max_examples=10, stateful_step_count=12,
                                             deadline=None)
test_log_manager_model = LogManagerModel.TestCase


def test_the_sink_state_dir_is_known_and_not_warned_about(tmp_path, caplog):
    from seglog.logstore.storage.file_names import SINK_STATE_DIR

    (tmp_path / SINK_STATE_DIR / "staging").mkdir(parents=True)
    (tmp_path / "stray-dir").mkdir()
    with caplog.at_level("WARNING", logger="seglog.logstore.manager.log_manager"), \
            LogManager([tmp_path]) as mgr:
        assert mgr.topics() == []
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "stray-dir" in warned and SINK_STATE_DIR not in warned
