"""``local-cluster[2,1,1024]``: two executor JVMs (each with its own Python workers) stage
rows for the same topic and partitions; the driver publishes them once."""

from __future__ import annotations

import collections
import shutil
import textwrap
from pathlib import Path

import pytest
from _local_cluster import JOB_START, run_job
from _sink_checks import check_indexes, kafka_python_records, staging_files

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.cluster]

_JOB = JOB_START + textwrap.dedent('''
    path = sys.argv[1]
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
    assert run_job(_JOB, [str(logs)], tmp_path, timeout=420)["executors"] == 2

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
