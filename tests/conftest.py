"""Shared fixtures. One SparkSession per test session: a session start costs seconds and
every streaming query ~13 s of fixed start-up, so Spark tests share it."""

from __future__ import annotations

import os
import sys

import pytest

# Executors and Python workers must run this very interpreter (with seglog installed).
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """A shared ``local[2]`` SparkSession with the ``seglog`` source registered."""
    from pyspark.sql import SparkSession

    from seglog.datasource import SeglogDataSource

    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("seglog-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.sql.streaming.stopTimeout", "30s")
        .config("spark.driver.memory", "2g")
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("WARN")
    session.dataSource.register(SeglogDataSource)
    yield session
    session.stop()


@pytest.fixture(autouse=True)
def _close_shared_readers():
    """Each test's log dirs are its own: release the process's shared read-only
    managers (``streaming.log_readers``) after it, so none outlives its tmp_path."""
    yield
    from seglog.streaming.log_readers import close_all

    close_all()
