"""``local-cluster[2,1,1024]`` on a bucket (moto S3): two executor JVMs write a topic
with the batch sink, a stream (AvailableNow) reads it and writes another topic, and a
batch read reads that back, every task on whichever executor runs it. The data exists
only in the bucket: the job runs in an empty working directory that stays empty, and
no log dir, staging file or ``.lock`` appears on local disk."""

from __future__ import annotations

import collections
import shutil
import textwrap
from pathlib import Path

import pytest
from _bucket_checks import bucket_records, check_offsets
from _local_cluster import JOB_START, run_job

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.cluster]

N = 4000

_JOB = JOB_START + textwrap.dedent('''
    uri, chk = sys.argv[1], sys.argv[2]
    (spark.range(0, %(n)d, numPartitions=8)
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
    print("RESULT " + json.dumps({"executors": executors,
                                  "readers": {r[0]: r[1] for r in read}}), flush=True)
    spark.stop()
''') % {"n": N}


def test_two_executors_write_and_read_through_the_bucket_only(tmp_path: Path,
                                                              s3_uri: str) -> None:
    work = tmp_path / "cwd"
    work.mkdir()
    result = run_job(_JOB, [s3_uri, "spark-checkpoint"], tmp_path, timeout=600, cwd=work)
    assert result["executors"] == 2

    records = bucket_records(s3_uri, "t2", tmp_path / "export")
    check_offsets(records)
    values = [r[3].decode() for r in records]
    assert sorted(v.split("@")[0] for v in values) == sorted(f"v{i}" for i in range(N))
    # both executors wrote into each partition of t, and both read t (writing t2) ...
    writers: dict[int, set[str]] = collections.defaultdict(set)
    for r in bucket_records(s3_uri, "t", tmp_path / "export-t"):
        writers[r[0]].add(Path(r[3].decode().split("@")[1]).name)
    assert all(len(w) == 2 for w in writers.values()) and len(writers) == 2, writers
    stream_readers = {Path(v.split("|")[1]).name for v in values}
    assert len(stream_readers) == 2, stream_readers
    # ... and the batch read ran on both executors too
    assert len(result["readers"]) == 2 and sum(result["readers"].values()) == N
    # Nothing on local disk: the job's working directory holds only Spark's checkpoint.
    local = sorted(str(p.relative_to(work)) for p in work.rglob("*") if p.is_file())
    assert all(p.startswith("spark-checkpoint/") for p in local), local
    app_dir = Path(values[0].split("@")[1].split("|")[0]).parent
    leftovers = [p for p in app_dir.rglob("*") if p.name in (".lock", ".seglog-sink")
                 or p.name.endswith(".log") and p.parent.name.startswith("t")]
    assert leftovers == [], leftovers
    if app_dir.name.startswith("app-"):
        shutil.rmtree(app_dir, ignore_errors=True)
