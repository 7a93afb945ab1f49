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
    managers (``streaming.log_readers``) and forget its paused sink writers
    (``streaming.log_writers``) after it, so none outlives its tmp_path."""
    yield
    from seglog.streaming import log_readers, log_writers

    log_readers.close_all()
    log_writers.close_all()


@pytest.fixture(scope="session")
def moto_server():
    """A real S3-compatible server (moto, from PyPI) on 127.0.0.1 for the whole session.

    ``moto_server.env`` holds the standard variables (``AWS_ENDPOINT_URL``,
    ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``, ``AWS_ALLOW_HTTP``);
    ``moto_server.create_bucket()`` makes a fresh bucket. Most tests want ``s3_uri``.
    """
    from s3_server import MotoServer

    with MotoServer() as server:
        yield server


@pytest.fixture
def s3_uri(moto_server, monkeypatch) -> str:
    """``s3://<fresh bucket>/logs`` on the session's moto server, with the ``AWS_*``
    variables set in ``os.environ`` for this test (child processes inherit them), so
    ``ObjectStorage(s3_uri)`` and ``LogManager([s3_uri])`` reach it with no options."""
    for name, value in moto_server.env.items():
        monkeypatch.setenv(name, value)
    return f"s3://{moto_server.create_bucket()}/logs"


@pytest.fixture
def no_aws_env(monkeypatch) -> None:
    """No ``AWS_*`` variable in this process for this test: a bucket is reached through
    options alone (``moto_server.storage_options()``)."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)


@pytest.fixture(params=("posix", "memory", "s3"))
def storage(request, tmp_path):
    """One test, three backends: a ``StorageUnderTest`` (``tests/storage_cases.py``) over a
    fresh directory (posix), a fresh ``memory://<unique>`` store, and a fresh bucket on the
    moto server (s3; the ``AWS_*`` env is set as ``s3_uri`` does).

    Conformance suites reuse it::

        def test_create_wins_once(storage):
            st = storage.storage
            assert st.create(storage.path("a", "x.json"), b"1")
            assert not st.create(storage.path("a", "x.json"), b"2")

    ``storage.location`` is the log dir to give seglog itself (``LogManager([...])``);
    ``storage.kind`` is ``"posix"``, ``"memory"`` or ``"s3"``. Select one backend with
    ``pytest -k "storage0"``-style ids: ``-k posix``, ``-k memory``, ``-k s3``.
    """
    import uuid

    from storage_cases import StorageUnderTest

    from seglog.logstore.object_storage import ObjectStorage
    from seglog.logstore.storage import PosixStorage

    if request.param == "posix":
        location = str(tmp_path / "logs")
        os.mkdir(location)
        return StorageUnderTest("posix", location, PosixStorage(location))
    if request.param == "memory":
        location = f"memory://seglog-test-{uuid.uuid4().hex}"
    else:
        location = request.getfixturevalue("s3_uri")
    return StorageUnderTest(request.param, location, ObjectStorage(location))
