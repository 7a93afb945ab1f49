"""seglog through Spark Connect (``SparkSession.builder.remote(...)``), which Databricks
shared and serverless compute use: batch and streaming reads and writes, and an error's
first line, on the Connect server PySpark ships (``local[2]``).

A Connect session and the suite's classic SparkSession do not coexist in one process,
so the pipeline runs in a process of its own (``_connect_run.py``), started with the
test session (``tests/early_runs.py``). Skipped, with the reason, where the client's
packages (the ``connect`` extra) are missing or the server cannot start."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest
from early_runs import EarlyRunSpec

pytestmark = pytest.mark.spark


def _connect_run(work: Path, request: pytest.FixtureRequest) -> EarlyRunSpec | str:
    for module in ("grpc", "grpc_status", "google.rpc", "zstandard", "pandas"):
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:  # a parent package ("google") is missing
            found = False
        if not found:
            return f"the 'connect' extra is not installed (no module {module!r})"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    script = Path(__file__).with_name("_connect_run.py")
    return EarlyRunSpec([sys.executable, str(script), str(work)], timeout_s=900, env=env)


@pytest.mark.early_run(spec=_connect_run)
def test_batch_and_streaming_reads_and_writes_through_spark_connect(early_run):
    run = early_run.result()
    lines = run.stdout.strip().splitlines()
    if lines and lines[-1].startswith("CONNECT-UNAVAILABLE"):
        pytest.skip(lines[-1])
    assert run.returncode == 0 and lines, run.stderr[-4000:]
    result = json.loads(lines[-1])
    assert result["connect"].startswith("pyspark.sql.connect")
    assert result["batch_read"] == list(range(30))
    assert result["stream_name"] == "connect_copy" and result["stream_batches"] == 3
    assert result["stream_written"] == list(range(30))
    assert result["error_first_line"] is not None
    assert "LogDirError: option 'path': log dir" in result["error_first_line"]
