from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from kafka_batches import BASE_TS, batch

from seglog.logstore.config.config import LogConfig
from seglog.logstore.log.log import Log
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.util.clock import MockClock
from seglog.logstore.util.delayed_deletion import DelayedDeleter


def test_files_go_only_after_the_delay(tmp_path):
    clock = MockClock()
    d = DelayedDeleter(clock)
    a, b = tmp_path / "a.deleted", tmp_path / "b.deleted"
    a.write_bytes(b"x")
    b.write_bytes(b"y")
    closed = []
    d.schedule([a], 1000, before_delete=lambda: closed.append("a"))
    d.schedule([b], 5000)
    assert d.pending == 2
    assert d.run_due() == 0 and a.exists()
    clock.advance(1000)
    assert d.run_due() == 1
    assert not a.exists() and b.exists() and closed == ["a"]
    assert d.pending == 1
    assert d.run_due(force=True) == 1 and not b.exists()


def test_one_failure_does_not_stop_the_others(tmp_path, caplog):
    clock = MockClock()
    d = DelayedDeleter(clock)
    busy = tmp_path / "dir.deleted"
    busy.mkdir()  # unlink fails on a directory
    ok = tmp_path / "ok.deleted"
    ok.write_bytes(b"z")
    d.schedule([busy, tmp_path / "missing", ok], 0)
    with caplog.at_level(logging.ERROR):
        assert d.run_due() == 1
    assert not ok.exists()
    assert "failed to delete" in caplog.text


def test_release_handles_closes_one_dirs_pending_files_and_keeps_them_scheduled(tmp_path):
    clock = MockClock()
    d = DelayedDeleter(clock)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = tmp_path / "a" / "0.log.deleted", tmp_path / "b" / "0.log.deleted"
    a.write_bytes(b"x")
    b.write_bytes(b"y")
    closed = []
    d.schedule([a], 1000, before_delete=lambda: closed.append("a"))
    d.schedule([b], 1000, before_delete=lambda: closed.append("b"))
    assert d.release_handles(tmp_path / "a") == 1 and closed == ["a"]
    assert d.release_handles(tmp_path / "a") == 0  # once
    assert a.exists() and d.pending == 2  # still unlinked when due, not before
    clock.advance(1000)
    assert d.run_due() == 2 and closed == ["a", "b"] and not a.exists()


def _descriptors_into(dir_: Path) -> list[str]:
    """What this process holds open below ``dir_`` (Linux's /proc)."""
    targets = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(f"{dir_}/"):
            targets.append(target)
    return targets


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
@pytest.mark.parametrize("opener", ["log", "manager"])
def test_a_closed_log_holds_no_file_of_segments_waiting_for_deletion(tmp_path, opener):
    """Retention renames segments ``.deleted`` and unlinks them after
    ``file.delete.delay.ms``; their files stay open meanwhile, for readers. Closing the
    log (or its manager) before then releases them: nothing reads them any more, and a
    test session once ran out of descriptors below 1024 through them."""
    clock = MockClock(BASE_TS)
    config = {"segment.bytes": str(len(batch(3))), "retention.bytes": "1"}
    if opener == "log":
        props = {**config, "message.timestamp.after.max.ms": str(2**62)}
        log = Log.open(tmp_path / "t-0", LogConfig.from_properties(props), clock=clock)
        for _ in range(4):
            log.append(batch(3))
        assert log.delete_old_segments() == 3
        log.close()
    else:
        with LogManager([tmp_path], clock=clock) as mgr:
            mgr.create_topic("t", 1, config)
            for _ in range(4):
                mgr.append("t", 0, batch(3))
            assert mgr.get_log("t", 0).delete_old_segments() == 3
    assert sorted(p.name for p in (tmp_path / "t-0").glob("*.deleted"))  # still waiting
    assert _descriptors_into(tmp_path) == []
