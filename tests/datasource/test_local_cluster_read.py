"""Reads in separate executor processes: ``local-cluster[2,1,1024]``, in a subprocess.

One JVM hosts one SparkContext, and the shared test session is ``local[2]``, so the
cluster runs in its own Python process. That fresh session also never calls
``spark.dataSource.register``: ``format("seglog")`` must resolve through the
``pyspark_seglog`` auto-registration, with filter pushdown left at Spark's default (off).

PySpark finds ``pyspark_*`` modules with ``pkgutil.iter_modules()``, which scans
``sys.path`` directories only: ``run.py``'s editable install puts ``src/`` (which holds
``pyspark_seglog``) on ``sys.path``, so this works as it does for a wheel install. The subprocess
runs outside the checkout, so the current directory cannot stand in for the install.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap

import pyarrow as pa
import pytest

from seglog.logstore.log_manager import LogManager
from seglog.logstore.record_codec import encode_batches

pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.spark]

SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    from pyspark.sql import SparkSession, functions as F

    log_dir, out_dir = sys.argv[1], sys.argv[2]
    spark = (SparkSession.builder.master("local-cluster[2,1,1024]")
             .config("spark.ui.enabled", "false").config("spark.executor.memory", "512m")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    try:
        import time
        deadline = time.time() + 180
        status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus
        while status().size() < 3 and time.time() < deadline:  # driver + 2 executors
            time.sleep(0.5)
        executors = status().size() - 1
        df = (spark.read.format("seglog").option("path", log_dir).option("subscribe", "c")
              .option("minPartitions", "8").load())
        rows = df.select("partition", "offset", "value").orderBy("partition", "offset").collect()
        pids = (df.rdd.mapPartitions(lambda it: [os.getpid()]).distinct().collect())
        q = (spark.readStream.format("seglog").option("path", log_dir).option("subscribe", "c")
             .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "3000").load()
             .select("partition", "offset").writeStream.format("parquet")
             .option("path", out_dir + "/data").option("checkpointLocation", out_dir + "/chk")
             .trigger(availableNow=True).start())
        q.awaitTermination()
        streamed = spark.read.parquet(out_dir + "/data").count()
        distinct = spark.read.parquet(out_dir + "/data").distinct().count()
        digest = [[r.partition, r.offset, r.value.decode()] for r in rows]
        print("RESULT " + json.dumps({
            "executors": executors, "pids": len(set(pids)), "rows": digest,
            "streamed": streamed, "distinct": distinct, "batches": len(q.recentProgress),
        }), flush=True)
    finally:
        spark.stop()
    """
)


def test_reads_run_in_separate_executor_processes(tmp_path):
    log_dir = tmp_path / "logs"
    with LogManager([str(log_dir)]) as mgr:
        mgr.create_topic("c", 2, config={"segment.bytes": "65536"})
        for p in (0, 1):
            mgr.append("c", p, encode_batches(
                pa.array([f"c-{p}-{i}".encode() for i in range(5000)], pa.binary()),
                max_batch_bytes=4096))
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable}
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(log_dir), str(tmp_path / "out")],
        capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if not lines and "local-cluster" in proc.stderr and "SPARK_HOME" in proc.stderr:
        pytest.skip("local-cluster cannot launch executors with this pip pyspark: "
                    + proc.stderr.strip().splitlines()[-1])
    assert lines, f"exit {proc.returncode}\n{proc.stderr[-4000:]}"
    result = json.loads(lines[0][len("RESULT "):])
    assert result["executors"] == 2
    assert result["pids"] >= 2  # partitions read by Python workers of both executors
    expected = [[p, i, f"c-{p}-{i}"] for p in (0, 1) for i in range(5000)]
    assert hashlib.sha256(json.dumps(result["rows"]).encode()).hexdigest() == hashlib.sha256(
        json.dumps(expected).encode()).hexdigest()
    assert result["streamed"] == result["distinct"] == 10_000
    assert result["batches"] >= 4  # 3000 offsets per trigger
