"""Reads in separate executor processes: ``local-cluster[2,1,1024]``, in a subprocess
(``_local_cluster.JOB``'s read part, whose session finds ``format("seglog")`` through the
``pyspark_seglog`` auto-registration alone, filter pushdown at Spark's default)."""

from __future__ import annotations

import hashlib
import json

import pytest
from _local_cluster import READ_RECORDS, ClusterRun, job_spec

pytestmark = [
    pytest.mark.slow,
    pytest.mark.cluster,
    pytest.mark.spark,
    pytest.mark.early_run(spec=job_spec),
]


def test_reads_run_in_separate_executor_processes(local_cluster_run: ClusterRun) -> None:
    result = local_cluster_run.result
    assert result["executors"] == 2
    read = result["read"]
    assert read["pids"] >= 2  # partitions read by Python workers of both executors
    expected = [[p, i, f"c-{p}-{i}"] for p in (0, 1) for i in range(READ_RECORDS)]
    assert (
        hashlib.sha256(json.dumps(read["rows"]).encode()).hexdigest()
        == hashlib.sha256(json.dumps(expected).encode()).hexdigest()
    )
    assert read["streamed"] == read["distinct"] == 2 * READ_RECORDS
    assert read["batches"] >= 4  # 3000 offsets per trigger
