"""The one ``local-cluster`` run the ``test_local_cluster_*.py`` files share."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from _local_cluster import ClusterRun, cluster_run


@pytest.fixture(scope="session")
def _local_cluster_app_dirs() -> Iterator[set[Path]]:
    """The executors' ``<SPARK_HOME>/work/<app id>`` of the job, removed after the session."""
    dirs: set[Path] = set()
    yield dirs
    for app_dir in dirs:
        if app_dir.name.startswith("app-"):
            shutil.rmtree(app_dir, ignore_errors=True)


@pytest.fixture
def local_cluster_run(early_run, _local_cluster_app_dirs: set[Path]) -> ClusterRun:
    """``_local_cluster.JOB``, run once for the session (``_local_cluster.job_spec``, an
    ``early_run`` started with the session): this test waits for it."""
    run = cluster_run(early_run.work, early_run.result())
    _local_cluster_app_dirs.add(Path(run.result["app_dir"]))
    return run
