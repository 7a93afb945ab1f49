"""Where Spark's own micro-batch goes (issue 25, goal 4): the no-op floor of
``bench_e2e_latency.py``, its steps timed and its processes' CPU counted.

Run: ``python benchmarks/trace_e2e_floor.py [--duration-s 60] [--no-recommended]
[--conf KEY=VALUE ...]`` (the session gets ``LOW_LATENCY_SPARK_CONF`` unless
``--no-recommended``; ``--conf`` after it).

The floor's query (``noop_latency_source``: a no-op Python source and sink, one record
appended every 100 ms), with

- Spark's log at INFO for its scheduler and executor, in wall-clock milliseconds (a
  log4j2 configuration of its own, given to the driver's JVM);
- marks (wall-clock ns, one JSON line each) from a subclass of the floor's source and
  sink: the driver's ``partitions``, the writer's planning (``streamWriter`` and its
  pickling), the tasks' unpickling of the reader and the writer, beside the read, write
  and commit that ``SEGLOG_TRACE_FILE`` traces;
- the CPU of each process of the query (``/proc/<pid>/stat``) over ``--duration-s``
  from the end of the query's first few micro-batches, by role (the JVM, the task
  workers, the writer's planning, the commit, the source's runner), per micro-batch.

Printed: per role the CPU ms per micro-batch, and the median ms of each step of a
micro-batch from the offsets' write (``walCommit``'s end) to the next one's, over the
micro-batches after the first few.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE))
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(_HERE), os.environ.get("PYTHONPATH", "")) if p
)

from floor_marks import MARKS_ENV, MarkedNoopSource  # noqa: E402

from seglog.datasource.spark_conf import LOW_LATENCY_SPARK_CONF  # noqa: E402
from seglog.streaming.step_trace import TRACE_ENV  # noqa: E402

_TICK = os.sysconf("SC_CLK_TCK")
_SKIP_FIRST = 3  # micro-batches still starting workers and compiling Spark's code

_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = stderr
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %d{UNIX_MILLIS} %c{1}: %m%n
"""
_LOGGERS = (
    "org.apache.spark.scheduler.DAGScheduler",
    "org.apache.spark.executor.Executor",
    "org.apache.spark.SparkContext",
    "org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution",
    "org.apache.spark.sql.execution.datasources.v2.WriteToDataSourceV2Exec",
)
# Spark's log lines that mark a step (the JVM's side of a micro-batch).
_JVM_STEPS = {
    "Committed offsets for batch": "offsets written",
    "Start processing data source write": "write job called",
    "Submitting ResultStage": "stage submitted",
    "Created broadcast": "task binary broadcast",
    "Running task": "task running",
    "Executor: Finished task": "task finished",
    r"Job \d+ finished": "job finished",
}
# One micro-batch, in order: (JVM log or mark) steps from the offsets' write on.
_CYCLE = (
    "offsets written",
    "partitions",
    "streamWriter",
    "writer pickled",
    "write job called",
    "stage submitted",
    "task binary broadcast",
    "task running",
    "writer unpickled",
    "reader unpickled",
    "read_start",
    "read_end",
    "write_end",
    "task finished",
    "job finished",
    "commit_start",
    "commit_end",
    "latestOffset",
)
_ROLES = (
    ("pyspark-shell", "JVM"),
    ("pyspark.worker", "task workers (read, write)"),
    ("write_into_data_source", "writer's planning"),
    ("python_streaming_sink_runner", "sink's commit"),
    ("python_streaming_source_runner", "source's runner"),
)


def _cpu_by_pid() -> dict[int, tuple[float, str]]:
    """CPU seconds and command line of this process and every descendant."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                after = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # it ended meanwhile
            parents[int(entry.name)] = int(after[1])
    out: dict[int, tuple[float, str]] = {}
    todo = [os.getpid()]
    while todo:
        pid = todo.pop()
        try:
            after = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        out[pid] = ((int(after[11]) + int(after[12])) / _TICK, cmd)
        todo.extend(p for p, pp in parents.items() if pp == pid)
    return out


def cpu_per_role(
    before: dict[int, tuple[float, str]], after: dict[int, tuple[float, str]], batches: int
) -> dict[str, float]:
    """CPU ms per micro-batch of each role between two ``_cpu_by_pid`` snapshots."""
    out: dict[str, float] = {}
    for pid, (cpu, cmd) in after.items():
        used = cpu - before.get(pid, (0.0, ""))[0]
        role = next((name for key, name in _ROLES if key in cmd), "other (driver's Python)")
        out[role] = out.get(role, 0.0) + used * 1000 / max(batches, 1)
    return out


def _events(marks: Path, trace: Path, log: Path) -> list[tuple[float, str]]:
    events: list[tuple[float, str]] = []
    for line in marks.read_text().splitlines():
        d = json.loads(line)
        events.append((d["ns"] / 1e6, d["what"]))
    for line in trace.read_text().splitlines():
        d = json.loads(line)
        events.append((d["start_ns"] / 1e6, f"{d['step']}_start"))
        events.append((d["end_ns"] / 1e6, f"{d['step']}_end"))
    for line in log.read_text(errors="replace").splitlines():
        m = re.match(r"(\d{13}) (.*)", line)
        if m:
            for pattern, name in _JVM_STEPS.items():
                if re.search(pattern, m.group(2)):
                    events.append((float(m.group(1)), name))
    return sorted(events)


def step_medians(events: list[tuple[float, str]]) -> dict[str, float]:
    """Median ms between consecutive steps of ``_CYCLE``, over the micro-batches (each
    from an ``offsets written`` to the next) that had every step."""
    cycles: list[dict[str, float]] = []
    for t, name in events:
        if name == _CYCLE[0]:
            cycles.append({name: t})
        elif cycles and name in _CYCLE and name not in cycles[-1]:
            cycles[-1][name] = t
    gaps: dict[str, list[float]] = {}
    for c in cycles[_SKIP_FIRST:]:
        if all(k in c for k in _CYCLE):
            for a, b in itertools.pairwise(_CYCLE):
                gaps.setdefault(f"{a} -> {b}", []).append(c[b] - c[a])
    return {k: statistics.median(v) for k, v in gaps.items()}


def _conf(item: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise SystemExit(f"--conf {item!r}: expected KEY=VALUE")
    return key.strip(), value.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration-s", type=float, default=60.0)
    parser.add_argument("--no-recommended", action="store_true")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    confs = [] if args.no_recommended else list(LOW_LATENCY_SPARK_CONF.items())
    confs += [_conf(item) for item in args.conf]

    from pyspark.sql import SparkSession

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        log4j2 = work / "log4j2.properties"
        log4j2.write_text(
            _LOG4J2
            + "".join(
                f"logger.l{i}.name = {name}\nlogger.l{i}.level = info\n"
                for i, name in enumerate(_LOGGERS)
            )
        )
        marks, trace, log = work / "marks.jsonl", work / "steps.jsonl", work / "spark.log"
        for f in (marks, trace):
            f.write_bytes(b"")
        os.environ[MARKS_ENV] = str(marks)
        os.environ[TRACE_ENV] = str(trace)
        # The JVM's log goes to this process's stderr: redirected into a file for it.
        saved_stderr = os.dup(2)
        log_fd = os.open(log, os.O_WRONLY | os.O_CREAT, 0o644)
        os.dup2(log_fd, 2)
        try:
            builder = (
                SparkSession.builder.master("local[2]")
                .appName("trace-e2e-floor")
                .config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", "false")
                .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={log4j2}")
            )
            for key, value in confs:
                builder = builder.config(key, value)
            spark = builder.getOrCreate()
            spark.dataSource.register(MarkedNoopSource)
            result = _run(spark, work, args.duration_s)
            spark.stop()
        except Exception:
            # The log dies with the temporary directory: its end is what says why.
            os.dup2(saved_stderr, 2)
            print(log.read_text(errors="replace")[-20_000:], file=sys.stderr)
            raise
        finally:
            os.dup2(saved_stderr, 2)
        print(
            f"the no-op floor for {args.duration_s:.0f} s, load {os.getloadavg()[0]:.1f}; "
            + "; ".join(f"{k}={v}" for k, v in confs)
        )
        batches, cpu = result
        print(f"  CPU ms per micro-batch over {batches} micro-batches:")
        for role, ms in sorted(cpu.items(), key=lambda kv: -kv[1]):
            print(f"    {ms:7.1f}  {role}")
        print(f"    {sum(cpu.values()):7.1f}  all")
        print("  median ms between the steps of a micro-batch:")
        medians = step_medians(_events(marks, trace, log))
        for step, ms in medians.items():
            print(f"    {ms:7.1f}  {step}")
        print(f"    {sum(medians.values()):7.1f}  offsets written -> next latestOffset")


def _run(spark: Any, work: Path, duration_s: float) -> tuple[int, dict[str, float]]:
    produced = work / "produced.txt"
    produced.write_bytes(b"")
    stop = threading.Event()

    def produce() -> None:
        while not stop.is_set():
            with open(produced, "ab") as f:
                f.write(b"%d\n" % time.time_ns())
            stop.wait(0.1)

    query = (
        spark.readStream.format(MarkedNoopSource.name())
        .option("path", str(produced))
        .load()
        .writeStream.format(MarkedNoopSource.name())
        .option("latencies", str(work / "latencies.txt"))
        .option("checkpointLocation", str(work / "chk"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    producer = threading.Thread(target=produce)
    producer.start()
    try:
        # Measured from the micro-batch after the first few (workers started, Spark's
        # code compiled), however long a loaded machine takes to get there.
        deadline = time.monotonic() + 600
        while _last_batch(query) < _SKIP_FIRST:
            if query.exception() is not None:
                raise RuntimeError(f"the query failed: {query.exception()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"no micro-batch {_SKIP_FIRST} within 600 s")
            time.sleep(0.2)
        n0, c0 = _last_batch(query), _cpu_by_pid()
        time.sleep(duration_s)
        n1, c1 = _last_batch(query), _cpu_by_pid()
    finally:
        stop.set()
        producer.join()
        query.stop()
    return n1 - n0, cpu_per_role(c0, c1, n1 - n0)


def _last_batch(query: Any) -> int:
    last = query.lastProgress
    return -1 if last is None else int(last["batchId"])


if __name__ == "__main__":
    main()
