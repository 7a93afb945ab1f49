"""docs/operations.md's low-latency settings (``LOW_LATENCY_SPARK_CONF``): a query that
runs with them keeps its exactly-once restart, its tasks' Python workers come from
seglog's worker daemon, which collects only the young generations between tasks, and
the latency benchmark's split of ``addBatch`` joins the traced steps to Spark's progress
as documented."""

from __future__ import annotations

import collections
import importlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest
from _sink_checks import kafka_python_records, multiset

from seglog.datasource import LOW_LATENCY_SPARK_CONF
from seglog.datasource.spark_conf import SESSION_SPARK_CONF
from seglog.streaming.step_trace import StepTime

ROOT = Path(__file__).resolve().parents[2]


def _write_input(spark, path: str, start: int, end: int) -> None:
    (
        spark.range(start, end, numPartitions=2)
        .selectExpr("cast(id % 5 as string) AS key", "concat('v', id) AS value")
        .write.format("seglog")
        .option("path", path)
        .option("topic", "in")
        .option("numPartitions", "2")
        .mode("append")
        .save()
    )


def _descendants(pid: int) -> dict[int, list[str]]:
    """The processes under ``pid`` (``/proc``), each with its command line."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:  # it ended meanwhile
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: dict[int, list[str]] = {}
    todo = [pid]
    while todo:
        parent = todo.pop()
        for child in (p for p, pp in parents.items() if pp == parent):
            try:
                cmdline = (Path("/proc") / str(child) / "cmdline").read_bytes()
            except OSError:
                continue
            found[child] = cmdline.decode().split("\0")
            todo.append(child)
    return found


@pytest.mark.spark
def test_a_query_with_the_recommended_settings_restarts_exactly_once(spark, tmp_path: Path) -> None:
    """The shared session was built with the settings a running one cannot take
    (tests/conftest.py); the others are set here, before the query, as the docs say."""
    context_conf = dict(spark.sparkContext.getConf().getAll())
    assert {
        k: context_conf.get(k) for k in LOW_LATENCY_SPARK_CONF if k not in SESSION_SPARK_CONF
    } == {
        "spark.python.daemon.module": "seglog.datasource.worker_daemon",
        "spark.python.unix.domain.socket.enabled": "true",
    }
    path, chk = str(tmp_path / "logs"), str(tmp_path / "chk")
    _write_input(spark, path, 0, 500)
    before = {k: spark.conf.get(k, None) for k in SESSION_SPARK_CONF}
    for k, v in SESSION_SPARK_CONF.items():
        spark.conf.set(k, v)

    def run() -> None:
        q = (
            spark.readStream.format("seglog")
            .option("path", path)
            .option("subscribe", "in")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "200")
            .load()
            .select("key", "value")
            .writeStream.format("seglog")
            .option("path", path)
            .option("topic", "out")
            .option("checkpointLocation", chk)
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(240)
        assert q.exception() is None

    try:
        run()
        _write_input(spark, path, 500, 700)
        run()  # from the checkpoint those settings wrote
    finally:
        for k, v in before.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)
    expected = collections.Counter((str(i % 5).encode(), f"v{i}".encode()) for i in range(700))
    assert multiset(kafka_python_records(Path(path), "out"), (2, 3)) == expected
    # Spark's offset and commit logs, one file per micro-batch: 4 of 200, 1 of 200.
    assert sorted(int(f.name) for f in (Path(chk) / "commits").iterdir() if f.name.isdigit()) == [
        0,
        1,
        2,
        3,
    ]
    # The tasks' Python workers were forked by seglog's daemon (reused workers stay, idle,
    # under it); the driver's planning processes keep PySpark's, whatever the setting.
    processes = _descendants(os.getpid())
    task_daemons = [
        pid
        for pid, cmd in processes.items()
        if cmd[1:4] == ["-m", "seglog.datasource.worker_daemon", "pyspark.worker"]
    ]
    assert task_daemons, sorted(" ".join(c[1:4]) for c in processes.values())
    assert any(p in task_daemons for p in (_parent(pid) for pid in processes))
    assert not [
        c for c in processes.values() if c[1:4] == ["-m", "pyspark.daemon", "pyspark.worker"]
    ]
    assert [c for c in processes.values() if c[1:3] == ["-m", "pyspark.daemon"]]


def _parent(pid: int) -> int:
    try:
        return int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except OSError:
        return -1


_YOUNG_ONLY = textwrap.dedent("""
    import gc, os, sys, weakref
    from pyspark import daemon
    from seglog.datasource import worker_daemon

    # What the daemon holds when it forks: one thread, no module that starts others.
    print(len(os.listdir("/proc/self/task")), "pyarrow" in sys.modules, "numba" in sys.modules)

    class Node:
        pass

    worker_daemon.install()
    frozen = gc.get_freeze_count()
    kept = Node()
    kept.self = kept
    old = weakref.ref(kept)
    gc.collect()  # still in use: it survives into the oldest generation
    del kept  # cyclic garbage there
    young = Node()
    young.self = young
    young = weakref.ref(young)  # cyclic garbage in the youngest generation
    found = daemon.gc.collect()  # what PySpark's daemon calls between two tasks
    print(frozen > 0, young() is None, old() is None, found >= 1)
    gc.collect()  # Python's own full collection frees it
    print(old() is None)
""")


def test_the_worker_daemon_collects_only_the_young_generations_between_tasks() -> None:
    """In its own process (``install`` changes PySpark's daemon module and freezes): the
    daemon would fork from one thread, with neither pyarrow nor numba imported, and its
    collection between tasks leaves the oldest generation to Python's own."""
    out = subprocess.run(
        [sys.executable, "-c", _YOUNG_ONLY], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "False", "False", "True", "True", "False", "True", "True"]


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """``benchmarks/bench_e2e_latency.py``, imported with its changes to ``sys.path``
    and the environment undone afterwards."""
    monkeypatch.setattr(sys, "path", [str(ROOT), *sys.path])
    for name in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
        if name in os.environ:
            monkeypatch.setenv(name, os.environ[name])
        else:
            monkeypatch.delenv(name, raising=False)
    return importlib.import_module("benchmarks.bench_e2e_latency")


def _step(step: str, batch: int, start_ms: float, end_ms: float, part: int | None = 0) -> StepTime:
    base = 1_000_000_000_000_000_000
    return StepTime(step, batch, part, base + int(start_ms * 1e6), base + int(end_ms * 1e6), 1)


def test_the_benchmark_splits_add_batch_by_the_traced_steps(bench: ModuleType) -> None:
    progress = [
        {"batchId": 4, "durationMs": {"addBatch": 100}},
        {"batchId": 5, "durationMs": {"addBatch": 60}},
        {"batchId": 6, "durationMs": {"addBatch": 50}},  # no commit traced: left out
    ]
    steps = [
        # batch 4: addBatch [0, 100]: tasks read [30, 40] and [35, 45], write until 52,
        # the commit [70, 98] (addBatch ends 2 ms after it returns)
        _step("read", 4, 30, 40, 0),
        _step("read", 4, 35, 45, 1),
        _step("write", 4, 31, 50, 0),
        _step("write", 4, 36, 52, 1),
        _step("commit", 4, 70, 100, None),
        # batch 5: addBatch [200, 260]
        _step("read", 5, 210, 214),
        _step("write", 5, 211, 220),
        _step("commit", 5, 230, 260, None),
        _step("read", 6, 300, 301),
        _step("write", 6, 300, 302),
    ]
    split = bench.split_add_batch(progress, steps)
    assert split.pop("micro-batches") == 2
    want = {
        "launch": (30 + 10) / 2,
        "read": (15 + 4) / 2,
        "write": (7 + 6) / 2,
        "to commit": (18 + 10) / 2,
        "commit": (30 + 30) / 2,
        "addBatch": (100 + 60) / 2,
    }
    assert split == pytest.approx(want)
    assert bench.split_add_batch(progress[2:], steps) == {}
