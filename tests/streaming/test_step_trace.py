"""``streaming.step_trace``: off by default (nothing written, the iterator untouched), one
whole JSON line per traced step when ``SEGLOG_TRACE_FILE`` names a file, even from
concurrent processes, and a trace that cannot be written never fails the caller."""

from __future__ import annotations

import logging
import multiprocessing
from pathlib import Path

import pytest

from seglog.streaming.step_trace import (
    TRACE_ENV,
    read_trace,
    traced,
    traced_iterator,
)


def test_off_by_default_writes_nothing_and_returns_the_same_iterator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TRACE_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    items = iter([1, 2, 3])
    assert traced_iterator("read", 0, 0, items) is items
    with traced("commit", 0):
        pass
    assert list(tmp_path.iterdir()) == []


def test_steps_are_traced_with_their_batch_partition_and_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = tmp_path / "trace.jsonl"
    monkeypatch.setenv(TRACE_ENV, str(trace))
    with traced("commit", 7):
        pass
    rows = traced_iterator("read", 8, 1, iter(["a", "b"]))
    assert [s.step for s in read_trace(str(trace))] == ["commit"]  # not exhausted yet
    assert list(rows) == ["a", "b"]
    steps = read_trace(str(trace))
    assert [(s.step, s.batch, s.partition) for s in steps] == [
        ("commit", 7, None),
        ("read", 8, 1),
    ]
    assert all(0 < s.start_ns <= s.end_ns for s in steps)
    assert steps[0].end_ns <= steps[1].start_ns
    # From an offset: only what was appended after it.
    size = trace.stat().st_size
    with traced("write", 9, 0):
        pass
    assert [s.step for s in read_trace(str(trace), size)] == ["write"]


def test_a_block_that_raises_is_not_traced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = tmp_path / "trace.jsonl"
    monkeypatch.setenv(TRACE_ENV, str(trace))
    with pytest.raises(ValueError), traced("commit", 1):
        raise ValueError("boom")
    assert not trace.exists()


def test_a_line_still_being_appended_is_left_for_the_next_read(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    whole = '{"step": "read", "batch": 1, "partition": 0, "start_ns": 1, "end_ns": 2, "pid": 3}\n'
    trace.write_text(whole + '{"step": "wri')
    assert [s.step for s in read_trace(str(trace))] == ["read"]


def _trace_many(path: str, n: int) -> None:
    import os

    os.environ[TRACE_ENV] = path
    for i in range(n):
        with traced("write", i, os.getpid()):
            pass


def test_concurrent_processes_append_whole_lines(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_trace_many, args=(str(trace), 300)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    steps = read_trace(str(trace))  # json.loads of every line: none is torn
    assert len(steps) == 900
    by_pid: dict[int, list[int]] = {}
    for s in steps:
        assert s.partition == s.pid
        by_pid.setdefault(s.pid, []).append(s.batch or 0)
    assert sorted(by_pid.values()) == [list(range(300))] * 3


def test_an_unwritable_trace_is_logged_once_and_never_fails_the_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(TRACE_ENV, str(tmp_path / "no-such-dir" / "trace.jsonl"))
    monkeypatch.setattr("seglog.streaming.step_trace._warned", False)
    with caplog.at_level(logging.WARNING, logger="seglog.streaming.step_trace"):
        for batch in range(3):
            with traced("commit", batch):
                pass
        assert list(traced_iterator("read", 3, 0, iter([1]))) == [1]
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1
    assert TRACE_ENV in warnings[0] and "no-such-dir" in warnings[0]
