"""What the ``local-cluster[2,1,1024]`` write tests share: the start of their job script
and running it in its own Python process (one JVM hosts one SparkContext, and the shared
test session is ``local[2]``).

``JOB_START`` builds the session with seglog registered, counts the executors
(``executors``) and defines ``executor_dir``, a UDF giving the work directory of the
executor that runs a row (``<app>/<executor id>``); a job goes on from there, reads its
arguments from ``sys.argv`` and prints one ``RESULT <json>`` line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

JOB_START = textwrap.dedent('''
    import json, os, sys, time
    from pyspark.sql import SparkSession
    from pyspark.sql.functions import col, concat, lit, udf
    from seglog.datasource import SeglogDataSource

    spark = (SparkSession.builder.master("local-cluster[2,1,1024]")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.executor.memory", "512m")
             # the first job waits for both executors (a loaded machine registers them late)
             .config("spark.scheduler.minRegisteredResourcesRatio", "1.0")
             .config("spark.scheduler.maxRegisteredResourcesWaitingTime", "180s")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(SeglogDataSource)
    deadline = time.monotonic() + 180
    while True:  # executors register after the session starts
        executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
        if executors >= 2 or time.monotonic() > deadline:
            break
        time.sleep(0.5)

    @udf("string")
    def executor_dir(v):  # a worker runs in its executor's work dir: <app>/<executor id>
        return os.getcwd()
''')


def run_job(script: str, args: list[str], tmp_path: Path, *, timeout: int,
            cwd: Path | None = None) -> dict[str, Any]:
    """Run ``script`` with ``args`` in a new Python process and return its ``RESULT``;
    skip the test when local-cluster cannot start executors here."""
    job = tmp_path / "job.py"
    job.write_text(script)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    proc = subprocess.run([sys.executable, str(job), *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if not lines and ("Executor" in proc.stderr and "exited" in proc.stderr
                      or "local-cluster" in proc.stderr and "Exception" in proc.stderr):
        pytest.skip("local-cluster could not start executors here: "
                    + proc.stderr.strip().splitlines()[-1][:300])
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT "):])
