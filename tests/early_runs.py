"""Processes a test only waits for and checks, started when the test session starts.

A test whose cost is one process of its own, a Spark driver it cannot share with the
suite's session (the bucket example, Spark Connect, a ``local[2,3]`` or
``local-cluster`` session, a pipeline killed and restarted), is marked
``@pytest.mark.early_run(spec=spec)`` (a keyword: a mark's lone positional callable is
taken for the function it decorates), where ``spec(work_dir, request)`` returns the
``EarlyRunSpec`` of its process, or a reason to skip (``request`` is the session's: a
spec may ask for session fixtures, ``request.getfixturevalue("bucket_server")``). Tests
marked with the same spec share one run (the three ``test_local_cluster_*.py`` files).
``tests/conftest.py`` starts every selected test's process before the session's first
test and runs those tests last, so each process runs beside the rest of the suite (which
keeps one core busy most of the time) instead of adding its minute or two to it; the
test takes its run from the ``early_run`` fixture and checks what it did, exactly as it
checked the run it started itself before.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class EarlyRunSpec:
    """What to start: ``argv`` with ``env`` (the whole environment, not additions) in
    ``cwd``; ``timeout_s`` counts from the start, as the test's own run counted it."""

    argv: list[str]
    timeout_s: float
    env: Mapping[str, str] | None = None
    cwd: Path | None = None


Spec = Callable[[Path, pytest.FixtureRequest], "EarlyRunSpec | str"]


class EarlyRun:
    """One started process; its output goes to files (nobody drains a pipe meanwhile)."""

    def __init__(self, spec: EarlyRunSpec | str, work: Path, output: Path) -> None:
        self.work = work
        self._spec = spec
        self._out = output / "stdout.txt"
        self._err = output / "stderr.txt"
        self._proc: subprocess.Popen[bytes] | None = None
        self._deadline = 0.0
        if isinstance(spec, EarlyRunSpec):
            with open(self._out, "wb") as out, open(self._err, "wb") as err:
                # Its own process group: stop() takes down the driver's JVM with it.
                self._proc = subprocess.Popen(
                    spec.argv,
                    env=None if spec.env is None else dict(spec.env),
                    cwd=spec.cwd,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                )
            self._deadline = time.monotonic() + spec.timeout_s

    def result(self) -> subprocess.CompletedProcess[str]:
        """The finished process (waited for until its deadline); skips the test with the
        spec's reason when it returned one instead of a process."""
        if isinstance(self._spec, str):
            pytest.skip(self._spec)
        assert self._proc is not None
        try:
            self._proc.wait(max(1.0, self._deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError(
                f"{self._spec.argv[1:]} did not end within {self._spec.timeout_s:g} s of its "
                f"start; its stderr:\n{self._err.read_text(errors='replace')[-4000:]}"
            ) from None
        return subprocess.CompletedProcess(
            self._spec.argv,
            self._proc.returncode,
            self._out.read_text(errors="replace"),
            self._err.read_text(errors="replace"),
        )

    @property
    def running(self) -> bool:
        """The process is still running (a spec's reason never runs)."""
        return self._proc is not None and self._proc.poll() is None

    def stop(self) -> None:
        """Kills the process group if it still runs (a session ended before its test)."""
        if self._proc is not None and self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait()
