"""``tests/early_runs.py`` and its hooks in ``tests/conftest.py``: an ``early_run`` test's
process is started with the session, its test runs last and gets the process's exit
status and output; a spec's reason skips; a process past its deadline fails the test
and is killed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from early_runs import EarlyRun, EarlyRunSpec


def test_early_run_tests_run_last_with_their_processes_started(request, _early_runs) -> None:
    items = request.session.items
    marked = [item.get_closest_marker("early_run") is not None for item in items]
    # Every marked test after every unmarked one: False ... False True ... True.
    assert marked == sorted(marked)
    assert {item.nodeid for item, m in zip(items, marked, strict=True) if m} == set(_early_runs)


def test_a_run_gives_its_exit_status_and_output(tmp_path: Path) -> None:
    code = "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"
    run = EarlyRun(EarlyRunSpec([sys.executable, "-c", code], timeout_s=60), tmp_path, tmp_path)
    done = run.result()
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\n")
    assert run.result().returncode == 3  # asked again: the same


def test_a_spec_that_gives_a_reason_skips_the_test(tmp_path: Path) -> None:
    run = EarlyRun("the 'connect' extra is not installed", tmp_path, tmp_path)
    with pytest.raises(pytest.skip.Exception, match="'connect' extra"):
        run.result()


def test_a_run_past_its_deadline_fails_and_is_killed(tmp_path: Path) -> None:
    code = "import time; print('started', flush=True); time.sleep(600)"
    run = EarlyRun(EarlyRunSpec([sys.executable, "-c", code], timeout_s=1), tmp_path, tmp_path)
    with pytest.raises(AssertionError, match="did not end within 1 s"):
        run.result()
    assert not run.running  # its group was killed
