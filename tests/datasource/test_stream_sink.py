"""``df.writeStream.format("seglog")``: exactly once across micro-batches, restarts, task
retries and a commit killed mid-way; the sink's identity is visible in the data.

The restart test runs with docs/operations.md's low-latency settings
(``LOW_LATENCY_SPARK_CONF``: they keep the exactly-once restart) and ``SEGLOG_TRACE_FILE``
set for its first run (the source's read and the sink's write and commit of every
micro-batch traced under Spark's batch ids, in the order they ran, as
``benchmarks/bench_e2e_latency.py`` needs): one query carries the three, as each costs
~13 s of fixed start-up; Spark's default checkpoint manager runs in every other
streaming test."""

from __future__ import annotations

import collections
import json
import os
import sys
import textwrap
from pathlib import Path

import pytest
from _bucket_checks import forget_worker_env, point_workers_at
from _sink_checks import kafka_python_records, multiset, staging_files
from early_runs import EarlyRunSpec

from seglog.datasource import LOW_LATENCY_SPARK_CONF
from seglog.datasource.spark_conf import SESSION_SPARK_CONF
from seglog.logstore.records.record_format import iter_batch_headers
from seglog.streaming.sink_commit import SinkLedger
from seglog.streaming.sink_staging import batch_id_of, producer_id_of
from seglog.streaming.step_trace import TRACE_ENV, StepTime, read_trace

pytestmark = pytest.mark.spark


def _write_input(spark, path: str, start: int, end: int) -> None:
    (
        spark.range(start, end, numPartitions=2)
        .selectExpr("cast(id % 13 as string) AS key", "concat('e', id) AS value")
        .write.format("seglog")
        .option("path", path)
        .option("topic", "in")
        .option("numPartitions", "3")
        .mode("append")
        .save()
    )


def _expected(start: int, end: int) -> collections.Counter:
    return collections.Counter((str(i % 13).encode(), f"E{i}!".encode()) for i in range(start, end))


def _batch_ids(log_dir: Path, topic: str) -> dict[int, set[int]]:
    """producerId -> the sink batch ids found in the topic's batch headers."""
    out: dict[int, set[int]] = collections.defaultdict(set)
    for seg in log_dir.glob(f"{topic}-*/*.log"):
        for h in iter_batch_headers(seg.read_bytes()):
            out[h.producer_id].add(batch_id_of(h.producer_epoch, h.base_sequence))
    return out


@pytest.fixture
def low_latency_conf(spark):
    """``LOW_LATENCY_SPARK_CONF``'s session settings set on the shared session for the
    test, then undone; the shared session was built with the others, which a running
    session cannot take (tests/conftest.py)."""
    context_conf = dict(spark.sparkContext.getConf().getAll())
    assert {
        k: context_conf.get(k) for k in LOW_LATENCY_SPARK_CONF if k not in SESSION_SPARK_CONF
    } == {
        "spark.python.daemon.module": "seglog.datasource.worker_daemon",
        "spark.python.unix.domain.socket.enabled": "true",
    }
    before = {k: spark.conf.get(k, None) for k in SESSION_SPARK_CONF}
    for k, v in SESSION_SPARK_CONF.items():
        spark.conf.set(k, v)
    yield
    for k, v in before.items():
        if v is None:
            spark.conf.unset(k)
        else:
            spark.conf.set(k, v)


def test_stream_exactly_once_and_across_a_restart(spark, low_latency_conf, tmp_path: Path) -> None:
    logs, chk = tmp_path / "logs", str(tmp_path / "chk")
    path = str(logs)
    _write_input(spark, path, 0, 4000)

    def run():
        q = (
            spark.readStream.format("seglog")
            .option("path", path)
            .option("subscribe", "in")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "1500")
            .load()
            .selectExpr("key", "concat(upper(cast(value AS string)), '!') AS value")
            .writeStream.format("seglog")
            .option("path", path)
            .option("topic", "out")
            .option("numPartitions", "2")
            .option("checkpointLocation", chk)
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination(240)
        assert q.exception() is None
        return q

    trace = tmp_path / "trace.jsonl"
    point_workers_at(spark, {TRACE_ENV: str(trace)})
    try:
        q = run()
    finally:
        forget_worker_env(spark, [TRACE_ENV])
    assert multiset(kafka_python_records(logs, "out"), (2, 3)) == _expected(0, 4000)
    # The query id and the micro-batch id reach the Python worker (task properties) and
    # are written into every batch: producerId = the sink, batch id = the micro-batch.
    ids = _batch_ids(logs, "out")
    assert set(ids) == {producer_id_of(q.id)}
    assert ids[producer_id_of(q.id)] == {0, 1, 2}
    ledger = SinkLedger(logs, q.id).read()
    assert {e.batch_id for e in ledger.entries.values()} == {2}
    traced = sorted(p["batchId"] for p in q.recentProgress if p["numInputRows"] > 0)
    assert traced == [0, 1, 2]  # 4000 records, 1500 a trigger
    _check_trace(read_trace(str(trace)), traced, tasks=3)

    _write_input(spark, path, 4000, 5000)
    q2 = run()  # from the checkpoint the low-latency settings wrote
    assert q2.id == q.id
    assert multiset(kafka_python_records(logs, "out"), (2, 3)) == _expected(0, 5000)
    assert staging_files(logs) == []
    # Spark's offset and commit logs, one file per micro-batch: 3 of <= 1500, then 1.
    commits = Path(chk) / "commits"
    assert sorted(int(f.name) for f in commits.iterdir() if f.name.isdigit()) == [0, 1, 2, 3]
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


def _parent(pid: int) -> int:
    try:
        return int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except OSError:
        return -1


def _check_trace(steps: list[StepTime], batches: list[int], tasks: int) -> None:
    for b in batches:
        of = {
            s: [t for t in steps if t.batch == b and t.step == s]
            for s in ("read", "write", "commit")
        }
        # One task per topic partition: each reads and writes once; one commit.
        assert sorted(t.partition for t in of["read"]) == list(range(tasks)), b
        assert sorted(t.partition for t in of["write"]) == list(range(tasks)), b
        assert len(of["commit"]) == 1, b
        commit = of["commit"][0]
        assert commit.partition is None
        assert all(t.start_ns <= t.end_ns for ts in of.values() for t in ts)
        # The commit runs on the driver after every task's write returned.
        assert commit.start_ns >= max(t.end_ns for t in of["write"]), b
        assert commit.pid not in {t.pid for t in of["write"]}
    assert {t.batch for t in steps} == set(batches)


def test_stream_bad_columns_fail_the_query(spark, tmp_path: Path) -> None:
    q = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", "5")
        .load()
        .writeStream.format("seglog")
        .option("path", str(tmp_path / "logs"))
        .option("topic", "t")
        .option("checkpointLocation", str(tmp_path / "chk"))
        .start()
    )
    try:
        with pytest.raises(Exception, match="column 'value' has type int64"):
            q.awaitTermination(120)
    finally:
        q.stop()
    assert not (tmp_path / "logs" / "t-0").exists()


_FLAKY_JOB = textwrap.dedent("""
    import json, os, sys
    from pyspark import TaskContext
    from pyspark.sql import SparkSession
    from pyspark.sql.functions import expr, udf
    from seglog.datasource import SeglogDataSource

    path, chk = sys.argv[1], sys.argv[2]
    spark = (SparkSession.builder.master("local[2,3]").config("spark.ui.enabled", "false")
             .config("spark.speculation", "true").config("spark.speculation.quantile", "0.1")
             .config("spark.speculation.multiplier", "1.0")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(SeglogDataSource)

    @udf("string")
    def flaky(v):
        ctx = TaskContext.get()
        if ctx.attemptNumber() == 0 and ctx.partitionId() == 1:
            raise RuntimeError("injected failure of a first attempt")
        return v

    (spark.range(0, 3000, numPartitions=3)
     .selectExpr("cast(id % 11 as string) AS key", "concat('e', id) AS value")
     .select("key", flaky("value").alias("value"))
     .write.format("seglog").option("path", path).option("topic", "in")
     .option("numPartitions", "3").mode("append").save())

    def run():
        q = (spark.readStream.format("seglog").option("path", path).option("subscribe", "in")
             .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "1000")
             .option("minPartitions", "3").load()
             .select("key", flaky(expr("cast(value AS string)")).alias("value"))
             .writeStream.format("seglog").option("path", path).option("topic", "out")
             .option("numPartitions", "2").option("checkpointLocation", chk)
             .trigger(availableNow=True).start())
        try:
            q.awaitTermination(240)
        except Exception as e:  # the run whose commit is killed fails
            return e
        return q.exception()

    first = run()
    second = run()
    print("RESULT " + json.dumps({"first": str(first)[:500] if first else None,
                                  "second": str(second)[:500] if second else None}))
    spark.stop()
""")


def _flaky_job_run(tmp_path: Path, request: pytest.FixtureRequest) -> EarlyRunSpec:
    script = tmp_path / "job.py"
    script.write_text(_FLAKY_JOB)
    env = dict(
        os.environ,
        SEGLOG_CRASH_AT="after-checkpoint@1",
        SEGLOG_CRASH_ONCE=str(tmp_path / "crashed"),
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
    )
    argv = [sys.executable, str(script), str(tmp_path / "logs"), str(tmp_path / "chk")]
    return EarlyRunSpec(argv, timeout_s=420, env=env)


@pytest.mark.slow
@pytest.mark.early_run(spec=_flaky_job_run)
def test_task_retries_speculation_and_a_killed_commit(early_run) -> None:
    """Own session (local[2,3]: 3 attempts per task, speculation on), started with the
    test session (``tests/early_runs.py``): every first attempt of task 1 fails, and the
    commit of micro-batch 1 is SIGKILLed after its high-watermark checkpoint (before
    Spark records it). Exactly once all the same."""
    tmp_path = early_run.work
    logs = tmp_path / "logs"
    proc = early_run.result()
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT ") :])
    assert (tmp_path / "crashed").exists(), "the commit was never killed"
    assert result["first"] is not None  # the run whose commit died
    assert result["second"] is None, result["second"]
    inputs = collections.Counter((str(i % 11).encode(), f"e{i}".encode()) for i in range(3000))
    assert multiset(kafka_python_records(logs, "in"), (2, 3)) == inputs
    assert multiset(kafka_python_records(logs, "out"), (2, 3)) == inputs
    assert staging_files(logs) == []
