from __future__ import annotations

import logging
import threading

import pytest

from seglog.logstore.config.config import ManagerConfig
from seglog.logstore.manager import scheduler as sched
from seglog.logstore.manager.scheduler import MaintenanceTask, Scheduler, standard_tasks
from seglog.logstore.util.clock import MockClock


def test_run_due_respects_intervals_and_initial_delay():
    clock = MockClock(1_000)
    s = Scheduler(clock)
    calls = []
    s.add("a", 100, lambda now: calls.append(("a", now)))
    s.add("b", 250, lambda now: calls.append(("b", now)), initial_delay_ms=50)
    assert [r.name for r in s.run_due()] == ["a"]
    clock.advance(60)
    assert [r.name for r in s.run_due()] == ["b"]
    clock.advance(40)
    assert [r.name for r in s.run_due()] == ["a"]
    clock.advance(300)
    assert [r.name for r in s.run_due()] == ["a", "b"]
    assert s.run_due() == []
    assert calls == [("a", 1000), ("b", 1060), ("a", 1100), ("a", 1400), ("b", 1400)]


def test_explicit_now_and_run_all():
    clock = MockClock(0)
    s = Scheduler(clock)
    hits = []
    s.add("x", 1_000, lambda now: hits.append(now), initial_delay_ms=500)
    assert s.run_due(now_ms=499) == []
    assert [r.name for r in s.run_due(now_ms=500)] == ["x"]
    assert [r.name for r in s.run_all()] == ["x"]
    assert len(hits) == 2
    assert s.next_due_ms() == 1_000  # run_all at monotonic 0 rescheduled it


def test_a_failing_task_is_logged_and_does_not_stop_the_others(caplog):
    clock = MockClock(0)
    s = Scheduler(clock)
    ran = []

    def boom(now):
        raise OSError("disk on fire")

    s.add("first", 10, lambda now: ran.append("first") or 7)
    s.add("broken", 10, boom)
    s.add("last", 10, lambda now: ran.append("last"))
    with caplog.at_level(logging.ERROR, logger="seglog.logstore.manager.scheduler"):
        runs = s.run_due()
    assert [(r.name, r.ok) for r in runs] == [("first", True), ("broken", False), ("last", True)]
    assert runs[0].result == 7 and isinstance(runs[1].error, OSError)
    assert ran == ["first", "last"]
    assert "'broken' failed" in caplog.text and "disk on fire" in caplog.text
    clock.advance(10)
    assert [r.name for r in s.run_due()] == ["first", "broken", "last"]  # retried


def test_bad_tasks_are_refused():
    s = Scheduler(MockClock())
    s.add("a", 1, lambda now: None)
    with pytest.raises(ValueError, match="already scheduled"):
        s.add("a", 1, lambda now: None)
    with pytest.raises(ValueError, match="positive"):
        s.add("z", 0, lambda now: None)
    s.remove("a")
    assert s.tasks == ()


def test_background_thread_runs_tasks_and_survives_failures():
    clock = MockClock(0)
    s = Scheduler(clock)
    ran = threading.Event()
    count = {"n": 0}

    def flaky(now):
        count["n"] += 1
        if count["n"] == 1:
            raise RuntimeError("first run fails")
        ran.set()

    s.add("flaky", 1_000, flaky)
    s.start()
    try:
        assert s.running
        # The thread ran the task once (it failed) and now waits for the mock clock.
        clock.advance(1_000)
        s.wake()
        assert ran.wait(10)
        assert count["n"] == 2
    finally:
        s.stop()
    assert not s.running


def test_thread_handles_kafkas_never_interval():
    s = Scheduler(MockClock(0))
    s.add("never", 2**63 - 1, lambda now: None, initial_delay_ms=2**63 - 1)
    s.start()
    s.stop(timeout_s=10)
    assert not s.running


def test_standard_tasks_follow_the_manager_config():
    config = ManagerConfig.from_properties(
        {
            "log.retention.check.interval.ms": 11,
            "log.flush.scheduler.interval.ms": 22,
            "log.flush.offset.checkpoint.interval.ms": 33,
            "log.flush.start.offset.checkpoint.interval.ms": 44,
            "replica.high.watermark.checkpoint.interval.ms": 55,
        }
    )
    calls = []

    def cb(name):
        return lambda now: calls.append(name)

    tasks = standard_tasks(
        config,
        retention=cb("r"),
        flush=cb("f"),
        checkpoint_recovery_points=cb("rp"),
        checkpoint_log_start_offsets=cb("lso"),
        checkpoint_high_watermarks=cb("hw"),
        delete_logs=cb("d"),
    )
    intervals = {t.name: t.interval_ms for t in tasks}
    assert intervals == {
        sched.RETENTION: 11,
        sched.FLUSH: 22,
        sched.RECOVERY_POINT_CHECKPOINT: 33,
        sched.LOG_START_OFFSET_CHECKPOINT: 44,
        sched.HIGH_WATERMARK_CHECKPOINT: 55,
        sched.DELETE_LOGS: sched.DELETE_CHECK_INTERVAL_MS,
    }
    s = Scheduler(MockClock(0), tasks)
    s.run_due()
    assert calls == ["r", "f", "hw", "rp", "lso", "d"]
    assert all(isinstance(t, MaintenanceTask) for t in s.tasks)


def test_restore_reschedules_from_another_process_last_runs():
    clock = MockClock(10_000)
    first = Scheduler(clock)
    first.add("retention", 1_000, lambda now: None)
    first.add("flush", 100, lambda now: None)
    first.run_due()
    assert first.last_runs() == {"retention": 10_000, "flush": 10_000}
    clock.advance(400)
    second = Scheduler(clock)  # a later, short-lived process
    second.add("retention", 1_000, lambda now: None)
    second.add("flush", 100, lambda now: None)
    second.add("new-task", 100, lambda now: None)
    second.restore({**first.last_runs(), "gone": 1})
    assert [r.name for r in second.run_due()] == ["flush", "new-task"]
    clock.advance(600)
    assert [r.name for r in second.run_due()] == ["retention", "flush", "new-task"]


def test_restore_caps_the_wait_when_the_clock_went_backwards():
    clock = MockClock(10_000)
    s = Scheduler(clock)
    s.add("t", 1_000, lambda now: None)
    s.restore({"t": 50_000})  # "last ran" in the future
    assert s.run_due() == []
    clock.advance(1_000)
    assert [r.name for r in s.run_due()] == ["t"]
