"""A whole pipeline (seglog → transform → seglog, checkpointed) SIGKILLed at random moments.

The job runs in its own process group (driver, JVM, Python workers, the commit worker);
each kill takes the whole group down at once, wherever it is: planning, tasks staging,
a commit holding the log dir lock, Spark writing its commit log. Each kill is one of two
kinds, both in every run: a random moment after the run's first micro-batch, or a random
moment after the query started (start-up, planning). Then the job is restarted from its
checkpoint and runs to the end; every input record must then be in the output exactly
once, and no staging file may be left behind. (Each run is a new driver JVM, ~15 s: more
kills of the same kinds belong to the soak, ``benchmarks/soak.py``.)

The kills and restarts (``_pipeline_sigkill.py``) run as ``early_run`` processes
(``tests/early_runs.py``), one on a local dir and one on a bucket: started with the test
session, they run beside the rest of the suite; the tests check their outcome.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from _pipeline_sigkill import expected_output, output
from early_runs import EarlyRunSpec

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCRIPT = Path(__file__).with_name("_pipeline_sigkill.py")


def _env(extra: dict[str, str]) -> dict[str, str]:
    return {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        **extra,
    }


def _local_pipeline(work: Path, request: pytest.FixtureRequest) -> EarlyRunSpec:
    argv = [sys.executable, str(SCRIPT), str(work), str(work / "logs")]
    return EarlyRunSpec(argv, timeout_s=1500, env=_env({}))


def _bucket_pipeline(work: Path, request: pytest.FixtureRequest) -> EarlyRunSpec:
    """On a fresh bucket of the session's S3 server (moto), reached by the job through
    the ``AWS_*`` environment it inherits; the bucket is kept in ``<work>/uri``."""
    server = request.getfixturevalue("bucket_server")
    uri = f"s3://{server.create_bucket()}/logs"
    (work / "uri").write_text(uri)
    argv = [sys.executable, str(SCRIPT), str(work), uri]
    return EarlyRunSpec(argv, timeout_s=1500, env=_env(server.env))


def _ran(early_run) -> None:
    run = early_run.result()
    assert run.returncode == 0, (
        f"{run.stderr[-4000:]}\n(the jobs' stderr: {early_run.work / 'job.stderr'})"
    )


@pytest.mark.early_run(spec=_local_pipeline)
def test_a_pipeline_on_a_local_dir_survives_random_sigkills_exactly_once(early_run) -> None:
    """No staging file is left behind."""
    _ran(early_run)
    logs = early_run.work / "logs"
    assert output(logs) == expected_output()
    staging = logs / ".seglog-sink" / "staging"
    assert [p for p in staging.rglob("*") if p.is_file()] == []


@pytest.mark.early_run(spec=_bucket_pipeline)
def test_a_pipeline_on_a_bucket_survives_random_sigkills_exactly_once(
    early_run, bucket_server, monkeypatch
) -> None:
    """The killed runs leave only uploads no commit references, which the collector
    deletes once their batches are settled (here with no orphan grace) without touching
    the output."""
    from seglog.logstore.bucket.bucket_manager import BucketLogManager
    from seglog.logstore.bucket.bucket_state import STAGING_DIR

    _ran(early_run)
    for name, value in bucket_server.env.items():
        monkeypatch.setenv(name, value)
    s3_uri = (early_run.work / "uri").read_text()
    with BucketLogManager(s3_uri, orphan_grace_ms=0) as mgr:
        stats = mgr.collect()
        referenced = {seg.key for p in mgr.state.partitions.values() for seg in p.segments}
        left = {f"{STAGING_DIR}/{e.name}" for e in mgr.storage.list_tree(STAGING_DIR)}
    unreferenced = left - {
        k + suffix for k in referenced for suffix in (".log", ".index", ".timeindex")
    }
    # What is left and unreferenced was committed, then merged away by the query's
    # tasks: it waits for file.delete.delay.ms (readers may still hold it), no orphan.
    assert stats.orphans_waiting == 0 and len(unreferenced) <= stats.waiting
    assert output(s3_uri) == expected_output()
