"""The one ``local-cluster`` run the ``test_local_cluster_*.py`` files share."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from _local_cluster import JOB, READ_RECORDS, ClusterRun, run_job

from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches


@pytest.fixture(scope="session")
def local_cluster_run(tmp_path_factory, bucket_server) -> Iterator[ClusterRun]:
    """``_local_cluster.JOB`` run once: its read part's topic ``c`` written first (two
    partitions of ``READ_RECORDS`` records in 64 KiB segments), its bucket a fresh one on
    the session's S3 server, reached by the job through the ``AWS_*`` environment."""
    tmp = tmp_path_factory.mktemp("local-cluster")
    read_dir = tmp / "read-logs"
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
    cwd = tmp / "cwd"
    cwd.mkdir()
    write_dir = tmp / "write-logs"
    args = [str(read_dir), str(tmp / "read-out"), str(write_dir), uri, "spark-checkpoint"]
    result = run_job(JOB, args, tmp, timeout=900, cwd=cwd, env=bucket_server.env)
    yield ClusterRun(read_dir, write_dir, uri, cwd, bucket_server.storage_options(), result)
    app_dir = Path(result["app_dir"])
    if app_dir.name.startswith("app-"):
        shutil.rmtree(app_dir, ignore_errors=True)
