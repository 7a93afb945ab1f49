"""``local-cluster[2,1,1024]``: two executor JVMs (each with its own Python workers) stage
rows for the same topic and partitions; the driver publishes them once
(``_local_cluster.JOB``'s write part)."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest
from _local_cluster import WRITE_ROWS, ClusterRun, job_spec
from _sink_checks import check_indexes, kafka_python_records, staging_files

pytestmark = [
    pytest.mark.spark,
    pytest.mark.slow,
    pytest.mark.cluster,
    pytest.mark.early_run(spec=job_spec),
]


def test_two_executor_processes_write_the_same_partitions(local_cluster_run: ClusterRun) -> None:
    assert local_cluster_run.result["executors"] == 2
    assert local_cluster_run.result["write"] == "done"
    logs = local_cluster_run.write_dir

    records = kafka_python_records(logs, "t")
    assert len(records) == WRITE_ROWS
    values = [r[3].decode() for r in records]
    assert sorted(v.split("@")[0] for v in values) == sorted(f"v{i}" for i in range(WRITE_ROWS))
    # each partition holds rows staged by both executors (their work dirs differ)
    by_partition: dict[int, set[str]] = collections.defaultdict(set)
    for r in records:
        by_partition[r[0]].add(Path(r[3].decode().split("@")[1]).name)
    assert set(by_partition) == {0, 1}
    assert all(len(execs) == 2 for execs in by_partition.values()), by_partition
    assert check_indexes(logs, "t") >= 2
    assert staging_files(logs) == []
