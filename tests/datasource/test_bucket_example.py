"""``examples/bucket_pipeline.py`` as a newcomer runs it: its own S3 server, its own Spark,
no ``AWS_*`` variable, and output that says every purchase arrived exactly once. Started
with the test session (``tests/early_runs.py``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from early_runs import EarlyRunSpec

pytestmark = [pytest.mark.spark, pytest.mark.slow]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "bucket_pipeline.py"


def _example_run(tmp_path: Path, request: pytest.FixtureRequest) -> EarlyRunSpec:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    # a shell's variable pointing elsewhere must not matter (obstore's other name for
    # the endpoint, which setting AWS_ENDPOINT_URL does not replace)
    env["AWS_ENDPOINT"] = "http://127.0.0.1:9"
    argv = [sys.executable, str(EXAMPLE), "--work-dir", str(tmp_path / "work")]
    return EarlyRunSpec(argv, timeout_s=600, env=env, cwd=tmp_path)


@pytest.mark.early_run(spec=_example_run)
def test_the_bucket_example_runs_exactly_once(early_run):
    tmp_path = early_run.work
    r = early_run.result()
    assert r.returncode == 0, r.stdout + r.stderr
    assert "exactly once: yes, every purchase appears once" in r.stdout, r.stdout
    assert (
        "purchases topic: 4000 records (4000 distinct purchase ids, 4000 purchases "
        "generated)" in r.stdout
    )
    assert "sink_append" in r.stdout  # the bucket's commit log was listed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]  # nothing else in cwd
