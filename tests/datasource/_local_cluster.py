"""One ``local-cluster[2,1,1024]`` job that the three ``test_local_cluster_*.py`` files
check, each a different part of it: a cluster start (a driver JVM, two executor JVMs,
their Python workers) costs about a minute on two loaded cores, so the suite starts one
(``job_spec``, an ``early_run`` of ``tests/early_runs.py``: started with the test
session, beside the rest of the suite) rather than one per file; the fixture
``local_cluster_run`` in ``conftest.py`` waits for it.

One JVM hosts one SparkContext, and the shared test session is ``local[2]``, so the job
runs in its own Python process. Its session never calls ``spark.dataSource.register``:
``format("seglog")`` resolves through the ``pyspark_seglog`` auto-registration (PySpark
scans ``sys.path`` with ``pkgutil.iter_modules()``; ``run.py``'s editable install puts
``src/`` there, as a wheel install would), with filter pushdown left at Spark's default
(off). The job runs in an empty working directory outside the checkout, so neither the
current directory can stand in for the install nor can a part leave files there unseen.

``executor_dir`` is a UDF giving the work directory of the executor that runs a row
(``<app>/<executor id>``). The job prints one ``RESULT <json>`` line, one key per part.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from early_runs import EarlyRunSpec

from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches

# Rows each part writes or reads.
READ_RECORDS = 5000  # per partition of the read part's topic ``c`` (2 partitions)
WRITE_ROWS = 4000  # the write part's and the bucket part's ``spark.range``

JOB = textwrap.dedent("""
    import json, os, sys, time
    from pyspark.sql import SparkSession
    from pyspark.sql.functions import col, concat, lit, udf

    read_dir, read_out, write_dir, uri, chk = sys.argv[1:6]
    n = %(write_rows)d
    spark = (SparkSession.builder.master("local-cluster[2,1,1024]")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.executor.memory", "512m")
             .config("spark.sql.shuffle.partitions", "2")
             # the first job waits for both executors (a loaded machine registers them late)
             .config("spark.scheduler.minRegisteredResourcesRatio", "1.0")
             .config("spark.scheduler.maxRegisteredResourcesWaitingTime", "180s")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    deadline = time.monotonic() + 180
    status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus
    while status().size() < 3 and time.monotonic() < deadline:  # driver + 2 executors
        time.sleep(0.5)
    result = {"executors": status().size() - 1}

    @udf("string")
    def executor_dir(v):  # a worker runs in its executor's work dir: <app>/<executor id>
        return os.getcwd()

    try:
        # read: a batch read over 8 tasks, then a stream to parquet, 3000 offsets a trigger
        df = (spark.read.format("seglog").option("path", read_dir).option("subscribe", "c")
              .option("minPartitions", "8").load())
        rows = df.select("partition", "offset", "value").orderBy("partition", "offset").collect()
        pids = df.rdd.mapPartitions(lambda it: [os.getpid()]).distinct().collect()
        q = (spark.readStream.format("seglog").option("path", read_dir).option("subscribe", "c")
             .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "3000")
             .load()
             .select("partition", "offset").writeStream.format("parquet")
             .option("path", read_out + "/data").option("checkpointLocation", read_out + "/chk")
             .trigger(availableNow=True).start())
        q.awaitTermination()
        result["read"] = {
            "pids": len(set(pids)),
            "rows": [[r.partition, r.offset, r.value.decode()] for r in rows],
            "streamed": spark.read.parquet(read_out + "/data").count(),
            "distinct": spark.read.parquet(read_out + "/data").distinct().count(),
            "batches": len(q.recentProgress),
        }

        # write: both executors stage rows for the same partitions of a local log dir
        (spark.range(0, n, numPartitions=8)
         .selectExpr("cast(id %% 5 AS string) AS key", "concat('v', id) AS value")
         .select("key", concat(col("value"), lit("@"), executor_dir("value")).alias("value"))
         .write.format("seglog").option("path", write_dir).option("topic", "t")
         .option("numPartitions", "2").mode("append").save())
        result["write"] = "done"

        # bucket: the same batch write into a bucket, a stream t -> t2, a batch read of t2
        (spark.range(0, n, numPartitions=8)
         .selectExpr("cast(id %% 5 AS string) AS key", "concat('v', id) AS value")
         .select("key", concat(col("value"), lit("@"), executor_dir("value")).alias("value"))
         .write.format("seglog").option("path", uri).option("topic", "t")
         .option("numPartitions", "2").mode("append").save())
        q = (spark.readStream.format("seglog").option("path", uri).option("subscribe", "t")
             .option("startingOffsets", "earliest").option("minPartitions", "4").load()
             .select("key", concat(col("value").cast("string"), lit("|"),
                                   executor_dir("value")).alias("value"))
             .writeStream.format("seglog").option("path", uri).option("topic", "t2")
             .option("numPartitions", "2").option("checkpointLocation", chk)
             .trigger(availableNow=True).start())
        q.awaitTermination(300)
        read = (spark.read.format("seglog").option("path", uri).option("subscribe", "t2")
                .option("minPartitions", "4").load()
                .select(executor_dir("value").alias("reader")).groupBy("reader").count()
                .collect())
        result["bucket"] = {"readers": {r[0]: r[1] for r in read}}
        # the executors' <SPARK_HOME>/work/<app id>, which the fixture removes after
        result["app_dir"] = os.path.dirname(
            spark.range(1).select(executor_dir(lit("x"))).first()[0])
        print("RESULT " + json.dumps(result), flush=True)
    finally:
        spark.stop()
""") % {"write_rows": WRITE_ROWS}


@dataclass
class ClusterRun:
    """The job's inputs and what it printed: ``read_dir`` (topic ``c``, written before),
    ``write_dir`` (topic ``t``), ``uri`` (the bucket's log dir: ``t`` and ``t2``),
    ``cwd`` (the job's working directory, where ``spark-checkpoint`` is the bucket
    stream's checkpoint), ``storage_options`` (to reach the bucket), ``result``."""

    read_dir: Path
    write_dir: Path
    uri: str
    cwd: Path
    storage_options: dict[str, str]
    result: dict[str, Any]


def job_spec(work: Path, request: pytest.FixtureRequest) -> EarlyRunSpec:
    """``JOB`` with its inputs: the read part's topic ``c`` written first (two partitions
    of ``READ_RECORDS`` records in 64 KiB segments), its bucket a fresh one on the
    session's S3 server, reached by the job through the ``AWS_*`` environment; the
    bucket's address is kept in ``<work>/run.json`` for ``ClusterRun``."""
    bucket_server = request.getfixturevalue("bucket_server")
    read_dir = work / "read-logs"
    with LogManager([str(read_dir)]) as mgr:
        mgr.create_topic("c", 2, config={"segment.bytes": "65536"})
        for p in (0, 1):
            mgr.append(
                "c",
                p,
                encode_batches(
                    pa.array([f"c-{p}-{i}".encode() for i in range(READ_RECORDS)], pa.binary()),
                    max_batch_bytes=4096,
                ),
            )
    uri = f"s3://{bucket_server.create_bucket()}/logs"
    (work / "cwd").mkdir()
    (work / "run.json").write_text(
        json.dumps({"uri": uri, "storage_options": bucket_server.storage_options()})
    )
    job = work / "job.py"
    job.write_text(JOB)
    args = [str(read_dir), str(work / "read-out"), str(work / "write-logs"), uri]
    env = dict(
        os.environ,
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        **bucket_server.env,
    )
    argv = [sys.executable, str(job), *args, "spark-checkpoint"]
    return EarlyRunSpec(argv, timeout_s=900, env=env, cwd=work / "cwd")


def cluster_run(work: Path, proc: subprocess.CompletedProcess[str]) -> ClusterRun:
    """What the job of ``job_spec`` printed, with its inputs; skips when local-cluster
    cannot start executors here."""
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if not lines and (
        "Executor" in proc.stderr
        and "exited" in proc.stderr
        or "local-cluster" in proc.stderr
        and ("Exception" in proc.stderr or "SPARK_HOME" in proc.stderr)
    ):
        pytest.skip(
            "local-cluster could not start executors here: "
            + proc.stderr.strip().splitlines()[-1][:300]
        )
    assert proc.returncode == 0 and lines, f"exit {proc.returncode}\n{proc.stderr[-4000:]}"
    saved = json.loads((work / "run.json").read_text())
    return ClusterRun(
        work / "read-logs",
        work / "write-logs",
        saved["uri"],
        work / "cwd",
        saved["storage_options"],
        json.loads(lines[-1][len("RESULT ") :]),
    )
