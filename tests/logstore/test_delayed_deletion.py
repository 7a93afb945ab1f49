from __future__ import annotations

import logging

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
