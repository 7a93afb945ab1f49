"""``local-cluster[2,1,1024]`` on a bucket (moto S3; ``_local_cluster.JOB``'s bucket
part): two executor JVMs write a topic with the batch sink, a stream (AvailableNow) reads
it and writes another topic, and a batch read reads that back, every task on whichever
executor runs it. The data exists only in the bucket: the job runs in an empty working
directory that stays empty, and no log dir, staging file or ``.lock`` appears on local
disk."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest
from _bucket_checks import bucket_records, check_offsets
from _local_cluster import WRITE_ROWS, ClusterRun, job_spec

pytestmark = [
    pytest.mark.spark,
    pytest.mark.slow,
    pytest.mark.cluster,
    pytest.mark.early_run(spec=job_spec),
]


def test_two_executors_write_and_read_through_the_bucket_only(
    tmp_path: Path, local_cluster_run: ClusterRun
) -> None:
    run = local_cluster_run
    assert run.result["executors"] == 2
    options = run.storage_options

    records = bucket_records(run.uri, "t2", tmp_path / "export", options)
    check_offsets(records)
    values = [r[3].decode() for r in records]
    assert sorted(v.split("@")[0] for v in values) == sorted(f"v{i}" for i in range(WRITE_ROWS))
    # both executors wrote into each partition of t, and both read t (writing t2) ...
    writers: dict[int, set[str]] = collections.defaultdict(set)
    for r in bucket_records(run.uri, "t", tmp_path / "export-t", options):
        writers[r[0]].add(Path(r[3].decode().split("@")[1]).name)
    assert all(len(w) == 2 for w in writers.values()) and len(writers) == 2, writers
    stream_readers = {Path(v.split("|")[1]).name for v in values}
    assert len(stream_readers) == 2, stream_readers
    # ... and the batch read ran on both executors too
    readers = run.result["bucket"]["readers"]
    assert len(readers) == 2 and sum(readers.values()) == WRITE_ROWS
    # Nothing on local disk: the job's working directory holds only Spark's checkpoint.
    local = sorted(str(p.relative_to(run.cwd)) for p in run.cwd.rglob("*") if p.is_file())
    assert all(p.startswith("spark-checkpoint/") for p in local), local
    app_dir = Path(values[0].split("@")[1].split("|")[0]).parent
    leftovers = [
        p
        for p in app_dir.rglob("*")
        if p.name in (".lock", ".seglog-sink")
        or p.name.endswith(".log")
        and p.parent.name.startswith("t")
    ]
    assert leftovers == [], leftovers
