"""``seglog maintain``: retention of an idle topic, one pass or in a loop."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pyarrow as pa
from _cli import SEGLOG, run

from seglog import cli_common
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches
from seglog.logstore.storage.file_names import CLEAN_SHUTDOWN_FILE
from seglog.logstore.util.clock import MockClock

T0 = 1_700_000_000_000


def _idle_topic(d, clock):
    with LogManager([d], clock=clock) as mgr:
        mgr.create_topic(
            "idle",
            1,
            {"segment.bytes": "300", "retention.ms": "60000", "file.delete.delay.ms": "0"},
        )
        for _ in range(12):
            mgr.append(
                "idle",
                0,
                encode_batches(
                    pa.array([b"x" * 50, b"y" * 50]), timestamps=pa.array([T0, T0], pa.int64())
                ),
            )
        mgr.checkpoint_high_watermarks()
        return mgr.get_log("idle", 0).num_segments


def test_one_pass_applies_retention_to_an_idle_topic(tmp_path, capsys, monkeypatch):
    d = tmp_path / "logs"
    before = _idle_topic(d, MockClock(T0))
    assert before > 3
    monkeypatch.setattr(cli_common, "CLOCK", MockClock(T0 + 3_600_000))  # an hour later
    r = run(capsys, "maintain", d, "--json")
    assert r.code == 0, r
    doc = r.json()
    assert doc["pass"] == 1
    retention = next(t for t in doc["tasks"] if t["task"] == "log-retention")
    # every segment expired: Kafka deletes the active one too, leaving an empty one
    assert retention == {"task": "log-retention", "ok": True, "result": before, "error": None}
    described = run(capsys, "describe", "idle", "--path", d, "--json").json()
    part = described["topics"][0]["partitions"][0]
    assert part["segments"] == 1 and part["startOffset"] == part["endOffset"] == 24
    assert (d / CLEAN_SHUTDOWN_FILE).exists()
    # what retention renamed .deleted is gone after the next pass at the latest
    run(capsys, "maintain", "--path", d)
    assert [n for n in os.listdir(d / "idle-0") if n.endswith(".deleted")] == []
    text = run(capsys, "maintain", d).out
    assert text.startswith("pass 1: 7 task(s) run, 0 failed")


def test_loop_runs_until_sigterm_and_leaves_the_dir_clean(tmp_path):
    d = tmp_path / "logs"
    _idle_topic(d, MockClock(T0))
    proc = subprocess.Popen(
        [
            str(SEGLOG),
            "maintain",
            str(d),
            "--loop",
            "--json",
            "--manager-config",
            "log.retention.check.interval.ms=100",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        first = json.loads(proc.stdout.readline())
        assert first["pass"] == 1 and all(t["ok"] for t in first["tasks"])
        assert not (d / CLEAN_SHUTDOWN_FILE).exists()  # a writer is at work
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert (d / CLEAN_SHUTDOWN_FILE).exists()
    with LogManager([d]) as mgr:  # the lock was released
        assert mgr.get_log("idle", 0).num_segments == 1


def test_a_collect_run_is_reported_by_its_counts():
    """The bucket's collect task reports what it deleted, and nothing when it deleted
    nothing (objects only waiting for their delay are no news)."""
    from seglog.cli_maintain import COLLECT_TASK, task_text
    from seglog.logstore.bucket.bucket_collect import CollectStats
    from seglog.logstore.log_dirs_api import TaskRun

    done = CollectStats(removed_objects=2, orphans=1, commits=3, waiting=7)
    assert task_text(TaskRun(COLLECT_TASK, done)) == (
        "object-collect: deleted 2 removed object(s), 1 orphan(s), 3 old commit(s), "
        "0 old snapshot(s)"
    )
    assert task_text(TaskRun(COLLECT_TASK, CollectStats(waiting=4, orphans_waiting=1))) is None
