"""``local-cluster[2,1,1024]``: two executor JVMs (each with its own Python workers) stage
rows for the same topic and partitions; the driver publishes them once."""

from __future__ import annotations

import collections
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from _sink_checks import check_indexes, kafka_python_records, staging_files

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.cluster]

_JOB = textwrap.dedent('''
    import json, os, sys, time
    from pyspark.sql import SparkSession
    from pyspark.sql.functions import col, concat, lit, udf
    from seglog.datasource import SeglogDataSource

    path = sys.argv[1]
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

    df = (spark.range(0, 4000, numPartitions=8)
          .selectExpr("cast(id % 5 AS string) AS key", "concat('v', id) AS value")
          .select("key", concat(col("value"), lit("@"), executor_dir("value")).alias("value")))
    df.write.format("seglog").option("path", path).option("topic", "t") \\
        .option("numPartitions", "2").mode("append").save()
    print("RESULT " + json.dumps({"executors": executors}), flush=True)
    spark.stop()
''')


def test_two_executor_processes_write_the_same_partitions(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    script = tmp_path / "job.py"
    script.write_text(_JOB)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    proc = subprocess.run([sys.executable, str(script), str(logs)], env=env,
                          capture_output=True, text=True, timeout=420)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if not lines and ("Executor" in proc.stderr and "exited" in proc.stderr
                      or "local-cluster" in proc.stderr and "Exception" in proc.stderr):
        pytest.skip("local-cluster could not start executors here: "
                    + proc.stderr.strip().splitlines()[-1][:300])
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    assert json.loads(lines[-1][len("RESULT "):])["executors"] == 2

    records = kafka_python_records(logs, "t")
    assert len(records) == 4000
    values = [r[3].decode() for r in records]
    assert sorted(v.split("@")[0] for v in values) == sorted(f"v{i}" for i in range(4000))
    # each partition holds rows staged by both executors (their work dirs differ)
    by_partition: dict[int, set[str]] = collections.defaultdict(set)
    for r in records:
        by_partition[r[0]].add(Path(r[3].decode().split("@")[1]).name)
    assert set(by_partition) == {0, 1}
    assert all(len(execs) == 2 for execs in by_partition.values()), by_partition
    assert check_indexes(logs, "t") >= 2
    assert staging_files(logs) == []
    # local-cluster executors run under <SPARK_HOME>/work/<app id>: remove ours
    app_dir = Path(records[0][3].decode().split("@")[1]).parent
    if app_dir.name.startswith("app-"):
        shutil.rmtree(app_dir, ignore_errors=True)
