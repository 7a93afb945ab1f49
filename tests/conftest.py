"""Shared fixtures. One SparkSession per test session: a session start costs seconds and
every streaming query ~13 s of fixed start-up, so Spark tests share it."""

from __future__ import annotations

import gc
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

    from seglog.datasource import LOW_LATENCY_SPARK_CONF, SeglogDataSource
    from seglog.datasource.spark_conf import SESSION_SPARK_CONF

    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    # The recommended settings a running session cannot take (the spark.python.* ones);
    # tests/datasource/test_stream_sink.py sets the others for its query.
    context_conf = {k: v for k, v in LOW_LATENCY_SPARK_CONF.items() if k not in SESSION_SPARK_CONF}
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
        .config(map=context_conf)
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("WARN")
    session.dataSource.register(SeglogDataSource)
    yield session
    session.stop()


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "early_run(spec=...): the test checks a process of its own, started when the session "
        "starts (tests/early_runs.py); the test runs last",
    )


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """The tests of ``early_run`` processes last (after the deselection of ``-k``/``-m``):
    their processes, started with the session, run beside everything else meanwhile."""
    early = [item for item in items if item.get_closest_marker("early_run")]
    if early:
        items[:] = [item for item in items if not item.get_closest_marker("early_run")] + early


@pytest.fixture(scope="session", autouse=True)
def _early_runs(request, tmp_path_factory):
    """Starts the process of every selected ``early_run`` test (tests/early_runs.py), one
    per spec, each with a work dir of its own; kills those still running when the
    session ends."""
    from early_runs import EarlyRun

    by_spec = {}
    runs = {}
    for item in request.session.items:
        marker = item.get_closest_marker("early_run")
        if marker is None:
            continue
        spec = marker.kwargs["spec"]
        if spec not in by_spec:
            name = spec.__name__.strip("_")[:40]
            work = tmp_path_factory.mktemp(f"early-{name}")
            output = tmp_path_factory.mktemp(f"early-output-{name}")
            by_spec[spec] = EarlyRun(spec(work, request), work, output)
        runs[item.nodeid] = by_spec[spec]
    yield runs
    for run in by_spec.values():
        run.stop()


@pytest.fixture
def early_run(request, _early_runs):
    """This test's ``early_run`` process (started with the session): ``.work`` is its
    work dir, ``.result()`` waits for it and returns its exit status and output."""
    return _early_runs[request.node.nodeid]


@pytest.fixture(autouse=True)
def _close_shared_readers():
    """Each test's log dirs are its own: release the process's shared read-only
    managers (``streaming.log_readers``), forget its paused sink writers
    (``streaming.log_writers``) and finish its bucket sinks' background merges
    (``streaming.sink_bucket_merger``) after it, so none outlives its tmp_path."""
    yield
    from seglog.streaming import (
        log_readers,
        log_writers,
        sink_bucket_merger,
        sink_view,
    )

    sink_bucket_merger.stop_all(wait=True, timeout_s=120)
    sink_view.wait_refreshes()
    log_readers.close_all()
    log_writers.close_all()


# A test module may leave this many more file descriptors open than it found (a session
# server some test of it started first: the S3 server's pipes). More is a leak: ~1,300
# tests leaking a few each once pushed descriptors past 1024, where select() fails.
FD_LEAK_LIMIT = 16
_FD_DIR = "/proc/self/fd"


def _open_fds() -> dict[str, str]:
    """This process's open descriptors but sockets, and what each is (Linux's /proc).
    Sockets are not counted: clients pool their connections (py4j's to Spark's JVM, HTTP
    keep-alive), so a module's first queries legitimately leave some open."""
    fds = {}
    for fd in os.listdir(_FD_DIR):
        try:
            target = os.readlink(f"{_FD_DIR}/{fd}")
        except OSError:  # the listing's own descriptor, closed already
            continue
        if not target.startswith("socket:"):
            fds[fd] = target
    return fds


def _opened_since(before: dict[str, str]) -> dict[str, str]:
    """The descriptors open now that were not open (to the same target) in ``before``."""
    return {fd: target for fd, target in _open_fds().items() if before.get(fd) != target}


@pytest.fixture(scope="module", autouse=True)
def _no_descriptor_leak(request):
    """Fails a test module that leaves more than ``FD_LEAK_LIMIT`` descriptors (files,
    pipes; not sockets) open, counted after a garbage collection (when the count needs
    one), so only what is still reachable counts, naming what they are: close what a
    test opens (managers, logs, storages, files, pipes)."""
    if not os.path.isdir(_FD_DIR):  # no /proc: nothing to count with
        yield
        return
    before = _open_fds()
    yield
    # Counted: the descriptors the module opened that are still open, so a previous
    # module's garbage closed meanwhile (no collection ran at its end) hides none of them.
    # A full collection of the suite's heap (pyarrow, numba, py4j) costs ~0.1 s of CPU:
    # it runs only when that count is over the limit, as a collection closes descriptors
    # and opens none.
    opened = _opened_since(before)
    if len(opened) > FD_LEAK_LIMIT:
        gc.collect()
        opened = _opened_since(before)
    if len(opened) > FD_LEAK_LIMIT:
        new = sorted(set(opened.values()))
        pytest.fail(
            f"{request.module.__name__} left {len(opened)} more file descriptors open than "
            f"it found (limit {FD_LEAK_LIMIT}): {', '.join(new[:12])}",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def bucket_server():
    """A real S3-compatible server on 127.0.0.1 for the whole session: moto, or SeaweedFS
    with ``SEGLOG_TEST_S3_SERVER=seaweedfs`` (every bucket test then runs against it).

    ``bucket_server.env`` holds the standard variables (``AWS_ENDPOINT_URL``,
    ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``, ``AWS_ALLOW_HTTP``);
    ``bucket_server.create_bucket()`` makes a fresh bucket. Most tests want ``s3_uri``.
    """
    from s3_server import MotoServer, SeaweedServer

    kind = os.environ.get("SEGLOG_TEST_S3_SERVER", "moto")
    servers = {"moto": MotoServer, "seaweedfs": SeaweedServer}
    if kind not in servers:
        raise pytest.UsageError(
            f"SEGLOG_TEST_S3_SERVER={kind!r}: expected one of {', '.join(servers)}"
        )
    with servers[kind]() as server:
        yield server


@pytest.fixture(scope="session")
def seaweed_server():
    """SeaweedFS (``tests/s3_server.py``) on 127.0.0.1 for the whole session, started by
    the first test that asks for it; those tests skip, with the reason, where its wheel
    does not install. Most tests want ``seaweed_uri``."""
    from s3_server import SeaweedServer, seaweed_unavailable

    reason = seaweed_unavailable()
    if reason:
        pytest.skip(reason)
    with SeaweedServer() as server:
        yield server


def _fresh_bucket_uri(server, monkeypatch) -> str:
    for name, value in server.env.items():
        monkeypatch.setenv(name, value)
    return f"s3://{server.create_bucket()}/logs"


@pytest.fixture
def s3_uri(bucket_server, monkeypatch) -> str:
    """``s3://<fresh bucket>/logs`` on the session's S3 server, with the ``AWS_*``
    variables set in ``os.environ`` for this test (child processes inherit them), so
    ``ObjectStorage(s3_uri)`` and ``LogManager([s3_uri])`` reach it with no options."""
    return _fresh_bucket_uri(bucket_server, monkeypatch)


@pytest.fixture
def seaweed_uri(seaweed_server, monkeypatch) -> str:
    """``s3_uri`` on the session's SeaweedFS server."""
    return _fresh_bucket_uri(seaweed_server, monkeypatch)


@pytest.fixture
def proxy(request, bucket_server, monkeypatch):
    """The session's S3 server behind ``tests/s3_proxy.py``: each request delayed by the
    test module's ``DELAY_S`` (50 ms unless it says otherwise, so requests sent together
    stay one round trip) and logged, with the ``AWS_*`` variables pointing at the proxy
    for this test: a test counts the requests and round trips of what it calls."""
    from s3_proxy import S3Proxy

    delay_s = getattr(request.module, "DELAY_S", 0.05)
    with S3Proxy(bucket_server.endpoint, delay_s=delay_s, log_requests=True) as p:
        for name, value in {**bucket_server.env, "AWS_ENDPOINT_URL": p.endpoint}.items():
            monkeypatch.setenv(name, value)
        yield p


@pytest.fixture
def no_aws_env(monkeypatch) -> None:
    """No ``AWS_*`` variable in this process for this test: a bucket is reached through
    options alone (``bucket_server.storage_options()``)."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)


@pytest.fixture(params=("posix", "memory", "s3", "seaweedfs"))
def storage(request, tmp_path):
    """One test, four backends: a ``StorageUnderTest`` (``tests/storage_cases.py``) over a
    fresh directory (posix), a fresh ``memory://<unique>`` store, and a fresh bucket on the
    session's S3 server (s3, moto by default) and on SeaweedFS (seaweedfs; the ``AWS_*``
    env is set as ``s3_uri`` does).

    Conformance suites reuse it::

        def test_create_wins_once(storage):
            st = storage.storage
            assert st.create(storage.path("a", "x.json"), b"1")
            assert not st.create(storage.path("a", "x.json"), b"2")

    ``storage.location`` is the log dir to give seglog itself (``LogManager([...])``);
    ``storage.kind`` is ``"posix"``, ``"memory"``, ``"s3"`` or ``"seaweedfs"``. Select one
    backend with ``-k posix``, ``-k memory``, ``-k s3`` or ``-k seaweedfs``.
    """
    import uuid

    from storage_cases import StorageUnderTest

    from seglog.logstore.storage.object_storage import ObjectStorage
    from seglog.logstore.storage.storage import PosixStorage

    if request.param == "posix":
        location = str(tmp_path / "logs")
        os.mkdir(location)
        return StorageUnderTest("posix", location, PosixStorage(location))
    if request.param == "memory":
        location = f"memory://seglog-test-{uuid.uuid4().hex}"
    else:
        location = request.getfixturevalue("s3_uri" if request.param == "s3" else "seaweed_uri")
    return StorageUnderTest(request.param, location, ObjectStorage(location))
