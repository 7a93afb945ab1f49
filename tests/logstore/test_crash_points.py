"""``logstore.crash_points``: one syntax for every named crash step, the engine's and the
sink's (``SEGLOG_CRASH_AT=<step>[@<batch id>]``, ``SEGLOG_CRASH_ONCE=<file>``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.util.crash_points import CRASH_ENV, CRASH_ONCE_ENV, crash_point

APPEND = r"""
import sys
import pyarrow as pa
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches

with LogManager(sys.argv[1]) as mgr:
    mgr.append("t", 0, encode_batches(pa.array([sys.argv[2].encode()])))
"""


def _append(uri: str, value: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", APPEND, uri, value],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=300,
    )


def test_an_engine_step_fires_once_with_crash_once(s3_uri: str, tmp_path: Path):
    """The bucket commit log's steps take the sink's syntax: ``@<batch id>`` (ignored
    outside a sink batch) and ``SEGLOG_CRASH_ONCE``, so a process that keeps the variable
    is killed once, not at every commit."""
    LogManager(s3_uri).create_topic("t", 1)
    env = {CRASH_ENV: "after-commit@3", CRASH_ONCE_ENV: str(tmp_path / "crashed")}
    first = _append(s3_uri, "a", env)
    assert first.returncode == -signal.SIGKILL, first.stderr[-2000:]
    assert (tmp_path / "crashed").exists()
    second = _append(s3_uri, "b", env)
    assert second.returncode == 0, second.stderr[-2000:]
    with LogManager(s3_uri, read_only=True) as reader:
        assert reader.high_watermarks() == {("t", 0): 2}  # the killed commit had landed


def test_a_batch_id_that_is_no_number_is_named(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(CRASH_ENV, "after-commit@one")
    with pytest.raises(ValueError, match=r"SEGLOG_CRASH_AT=after-commit@one: the batch id"):
        crash_point("after-commit", 1)
    crash_point("after-upload", 1)  # another step: the variable is not this step's business
